"""URL ingest against real loopback servers: one parse for guard and client, redirects, one deadline.

The guard refuses loopback by default; tests reach their own servers the way a user reaches an
intranet wiki, through ``url_allow_private``, and every case that must be refused checks that
the server saw no request.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import anyio
import pytest
from mcp import Client

from coffer_mcp import Coffer, load_settings
from coffer_mcp.errors import CofferError
from coffer_mcp.mcp_server import build_server

PAGE = b"<html><head><title>Harbour</title></head><body><h1>Harbour log</h1><p>Herons at low tide.</p></body></html>"
# A web page as sites serve them: the article inside a menu and a footer (their words are unique).
ARTICLE = b"""<!doctype html><html><head><title>Tide tables of Port Ellen</title></head><body>
<header><nav><ul><li><a href="/">Home</a></li><li><a href="/shop">Gift shop zanzibarmenu</a></li>
<li><a href="/about">About us</a></li></ul></nav></header>
<main><article><h1>Tide tables of Port Ellen</h1>
<p>The harbour of Port Ellen sees two high tides a day. Spring tides come two days after a full moon,
and the ferry timetable follows them closely.</p>
<p>Neap tides leave the inner pier dry for an hour at low water; boats moor at the outer pontoon
instead, where the depth never drops below two metres.</p></article></main>
<footer><p>Copyright Harbour Trust quixfooter. All rights reserved.</p>
<ul><li><a href="/privacy">Privacy</a></li><li><a href="/terms">Terms</a></li></ul></footer>
</body></html>"""
SLOW_LINES = 300  # a slow header line every 0.1 s: half a minute, far past the 1 s url_timeout below


class _Handler(BaseHTTPRequestHandler):
    """``/page`` is a document, ``/article`` a page with site chrome, ``/go`` redirects to ``location``,
    ``/slow`` dribbles headers."""

    location = ""
    seen: list[str]
    stop: threading.Event

    def do_GET(self) -> None:
        self.seen.append(self.path)
        if self.path == "/go":
            self.send_response(302)
            self.send_header("Location", self.location.encode().decode("latin-1"))  # UTF-8 on the wire
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif self.path == "/slow":
            self._dribble()
        else:
            body = ARTICLE if self.path == "/article" else PAGE
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    def _dribble(self) -> None:
        """A status line, then one header line at a time, each well within any per-read timeout."""
        try:
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n")
            for n in range(SLOW_LINES):
                if self.stop.wait(0.1):
                    return
                self.wfile.write(b"X-Slow-%d: still here\r\n" % n)
                self.wfile.flush()
            self.wfile.write(b"Content-Length: %d\r\n\r\n%s" % (len(PAGE), PAGE))
            self.seen.append(f"{self.path} answered in full")  # only if the client waited it out
        except OSError:  # the client hung up: what a deadline should make it do
            self.close_connection = True

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def web_server(location: str = "") -> Iterator[tuple[str, list[str]]]:
    """A server on 127.0.0.1: ``(its base URL, the paths it was asked for)``; ``{base}`` in ``location`` is filled."""
    seen: list[str] = []
    stop = threading.Event()
    handler = type("Handler", (_Handler,), {"seen": seen, "stop": stop})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    port = httpd.server_address[1]
    handler.location = location.replace("{port}", str(port))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        stop.set()
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def trusting(home: Path) -> Iterator[Coffer]:
    """A Coffer that trusts 127.0.0.1 (the test servers) and nothing else, with a 1 s url_timeout."""
    with Coffer(load_settings(home=home, url_allow_private=["127.0.0.1"], url_timeout=1.0)) as service:
        service.create_kb("kb")
        yield service


# -- one parse -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "code"),
    [
        ("http://①②⑦.⓪.⓪.①:{port}/page", "url_refused"),  # NFKC/IDNA: 127.0.0.1, checked as such
        ("http://127。0。0。1:{port}/page", "url_refused"),  # ideographic full stops are dots
        ("http://[::1", "invalid_url"),
        ("http://x\\@127.0.0.1:{port}/page", "url_refused"),  # a backslash: parsers disagree on the host
        ("http://127.0.0.1:{port}\\@example.invalid/page", "url_refused"),
        ("http://example.invalid@127.0.0.1:{port}/page", "url_refused"),  # credentials
        ("http://[::1]x/", "invalid_url"),
        ("http://127.0.0.1：{port}/page", "invalid_url"),  # a fullwidth colon NFKC turns into a port
        ("http://ex%61mple.invalid/", "invalid_url"),
        ("http://a..b.invalid/", "invalid_url"),
        ("http://[fe80::1%25eth0]/", "invalid_url"),
        ("http://example.invalid:99999/", "invalid_url"),
        ("http://example.invalid:http/", "invalid_url"),
    ],
)
def test_a_malformed_or_disguised_url_gets_a_typed_error_and_reaches_no_server(
    coffer: Coffer, url: str, code: str
) -> None:
    coffer.create_kb("kb")
    with web_server() as (base, seen), pytest.raises(CofferError) as refused:
        coffer.ingest_url("kb", url.replace("{port}", base.rsplit(":", 1)[1]))
    assert (refused.value.code, seen) == (code, [])
    assert refused.value.hint
    assert coffer.list_documents("kb").total == 0


@pytest.mark.anyio
async def test_an_unparseable_url_over_mcp_is_a_tool_error_with_code_and_hint(coffer: Coffer) -> None:
    coffer.create_kb("kb")
    with anyio.fail_after(60):
        async with Client(build_server(coffer)) as client:
            result = await client.call_tool("coffer__ingest_url", {"kb": "kb", "url": "http://[::1"})
    assert result.is_error
    error = json.loads(result.content[0].text)
    assert error["code"] == "invalid_url"
    assert "https://" in error["hint"]


def test_a_host_in_fullwidth_digits_is_fetched_from_the_address_it_normalises_to(trusting: Coffer) -> None:
    with web_server() as (base, seen):
        port = base.rsplit(":", 1)[1]
        added = trusting.ingest_url("kb", f"http://①②⑦.⓪.⓪.①:{port}/page")
    assert (added.status, seen) == ("created", ["/page"])
    assert trusting.read_document("kb", added.document_id).metadata["source_url"] == f"{base}/page"


# -- redirects -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("location", "code"),
    [
        ("http://user:pw@127.0.0.1:{port}/page", "url_refused"),  # the host is trusted, credentials are not
        ("http://127.0.0.1:{port}\\@example.invalid/page", "url_refused"),
        ("http://①②⑦.⓪.⓪.②:{port}/page", "url_refused"),  # 127.0.0.2 is not trusted
        ("http://[::1", "invalid_url"),
        ("gopher://127.0.0.1:{port}/page", "url_refused"),
    ],
)
def test_every_redirect_hop_is_parsed_and_checked_like_the_first_url(
    trusting: Coffer, location: str, code: str
) -> None:
    with web_server(location) as (base, seen), pytest.raises(CofferError) as refused:
        trusting.ingest_url("kb", f"{base}/go")
    assert (refused.value.code, seen) == (code, ["/go"])
    assert trusting.list_documents("kb").total == 0


@pytest.mark.parametrize("location", ["/page", "http://①②⑦.⓪.⓪.①:{port}/page"])
def test_a_redirect_to_a_trusted_address_is_followed(trusting: Coffer, location: str) -> None:
    with web_server(location) as (base, seen):
        added = trusting.ingest_url("kb", f"{base}/go")
    assert (added.status, seen) == ("created", ["/go", "/page"])
    assert trusting.read_document("kb", added.document_id).metadata["source_url"] == f"{base}/page"


# -- one deadline --------------------------------------------------------------------------------


def test_a_server_dribbling_headers_cannot_keep_a_fetch_past_url_timeout(trusting: Coffer) -> None:
    with web_server() as (base, seen), pytest.raises(CofferError) as timed_out:
        trusting.ingest_url("kb", f"{base}/slow")
    assert "/slow answered in full" not in seen
    assert trusting.list_documents("kb").total == 0
    assert timed_out.value.code == "fetch_failed"
    assert "url_timeout" in timed_out.value.message
    assert "url_timeout" in timed_out.value.hint


def test_a_slow_server_behind_a_redirect_shares_the_same_deadline(home: Path) -> None:
    with web_server("/slow") as (base, seen):
        settings = load_settings(home=home, url_allow_private=["127.0.0.1"], url_timeout=1.0)
        with Coffer(settings) as coffer:
            coffer.create_kb("kb")
            with pytest.raises(CofferError) as timed_out:
                coffer.ingest_url("kb", f"{base}/go")
    assert seen[0] == "/go"
    assert "/slow answered in full" not in seen
    assert timed_out.value.code == "fetch_failed"
    assert "url_timeout" in timed_out.value.hint


# -- web pages: the main content ---------------------------------------------------------------


def test_a_fetched_page_keeps_its_article_without_the_sites_menu_and_footer(trusting: Coffer) -> None:
    with web_server() as (base, _):
        added = trusting.ingest_url("kb", f"{base}/article")
    page = trusting.read_document("kb", added.document_id)
    assert "Neap tides leave the inner pier dry" in page.markdown
    assert added.title == "Tide tables of Port Ellen"
    assert "zanzibarmenu" not in page.markdown
    assert "quixfooter" not in page.markdown
    assert trusting.search("kb", "zanzibarmenu").passages == []


def test_with_html_main_content_off_a_fetched_page_is_kept_whole(home: Path) -> None:
    settings = load_settings(home=home, url_allow_private=["127.0.0.1"], html_main_content=False)
    with web_server() as (base, _), Coffer(settings) as coffer:
        coffer.create_kb("kb")
        added = coffer.ingest_url("kb", f"{base}/article")
        page = coffer.read_document("kb", added.document_id)
    assert "Neap tides leave the inner pier dry" in page.markdown
    assert "zanzibarmenu" in page.markdown
    assert "quixfooter" in page.markdown
    assert page.metadata["conversion_engine"] == "html-page/2"


def test_turning_html_main_content_off_and_reindexing_converts_fetched_pages_again_whole(home: Path) -> None:
    with web_server() as (base, _), Coffer(load_settings(home=home, url_allow_private=["127.0.0.1"])) as coffer:
        coffer.create_kb("kb")
        doc_id = coffer.ingest_url("kb", f"{base}/article").document_id
    with Coffer(load_settings(home=home, environ={"COFFER_HTML_MAIN_CONTENT": "false"})) as coffer:
        assert coffer.search("kb", "quixfooter").passages == []
        assert coffer.reindex("kb").reconverted == 1
        assert [p.document_id for p in coffer.search("kb", "quixfooter").passages] == [doc_id]


def test_an_upload_under_the_name_of_fetched_pages_replaces_none_of_them(trusting: Coffer) -> None:
    with web_server() as (base, _):
        pages = [trusting.ingest_url("kb", f"{base}/{folder}/index.html") for folder in ("a", "b")]
        assert [page.original_filename for page in pages] == ["index.html", "index.html"]
        with pytest.raises(CofferError) as caught:
            trusting.add_document("kb", "index.html", "<h1>Mine</h1><p>an agent's page</p>", replace=True)
        assert caught.value.code == "duplicate"
        for folder, page in zip(("a", "b"), pages, strict=True):
            url = f"{base}/{folder}/index.html"
            assert f"{page.document_id} from {url}" in caught.value.message
            assert trusting.read_document("kb", page.document_id).metadata["source_url"] == url
        again = trusting.ingest_url("kb", f"{base}/a/index.html")  # a URL's own re-ingest still finds its document
    assert (again.document_id, again.status) == (pages[0].document_id, "unchanged")
    assert trusting.list_documents("kb").total == 2
