"""Curation over MCP and the CLI: guarded path and URL ingest, source tracking, progress, context reads."""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.types import Implementation

from coffer_mcp import Coffer, load_settings
from coffer_mcp.cli import main
from coffer_mcp.errors import PathNotAllowedError, UrlRefusedError
from coffer_mcp.mcp_server import build_server
from tests.conftest import FIXTURES

CLIENT = Implementation(name="curator", version="1")
PAGE = (
    b"<html><head><title>Lantern</title></head>"
    b"<body><h1>Lantern field notes</h1><p>Glowworms gather at dusk.</p></body></html>"
)


def tool_error(result) -> dict:
    assert result.is_error
    return json.loads(result.content[0].text)


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    """An allowed folder with a mixed-format tree and a symlink pointing out of it."""
    allowed = tmp_path / "allowed"
    (allowed / "nested").mkdir(parents=True)
    for name in ("sample.md", "sample.csv", "sample.html", "sample.docx", "sample.pdf"):
        shutil.copy(FIXTURES / name, allowed / ("nested" if name.endswith("f") else "") / name)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("# Secret\n\nnot for agents", encoding="utf-8")
    (allowed / "escape.md").symlink_to(outside / "secret.md")
    (allowed / "escape-dir").symlink_to(outside, target_is_directory=True)
    return allowed


# -- ingest_path ---------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_folder_ingest_over_stdio_reports_monotonic_progress(home: Path, corpus: Path) -> None:
    env = {**os.environ, "COFFER_HOME": str(home), "COFFER_ALLOWED_DIRS": str(corpus)}
    params = StdioServerParameters(command=sys.executable, args=["-m", "coffer_mcp", "serve"], env=env)
    seen: list[tuple[float, float | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total))

    with anyio.fail_after(120):
        async with Client(params, client_info=CLIENT) as client:
            await client.call_tool("coffer__create_knowledge_base", {"name": "kb"})
            result = await client.call_tool(
                "coffer__ingest_path", {"kb": "kb", "path": str(corpus)}, progress_callback=on_progress
            )
            outside = await client.call_tool(
                "coffer__ingest_path", {"kb": "kb", "path": str(corpus.parent / "outside")}
            )
            link = await client.call_tool("coffer__ingest_path", {"kb": "kb", "path": str(corpus / "escape.md")})
    report = result.structured_content
    assert (report["created"], report["rejected"]) == (5, 0)
    assert "secret" not in json.dumps(report)
    assert [p for p, _ in seen] == sorted(p for p, _ in seen)
    assert seen[-1] == (5, 5)
    for refused in (outside, link):
        error = tool_error(refused)
        assert error["code"] == "path_not_allowed"
        assert str(corpus) in error["hint"]


def test_ingest_path_is_off_until_a_folder_is_allowed(coffer: Coffer, corpus: Path) -> None:
    coffer.create_kb("kb")
    with pytest.raises(PathNotAllowedError) as caught:
        coffer.ingest_allowed_path("kb", str(corpus))
    assert "allowed_dirs" in caught.value.hint
    with pytest.raises(PathNotAllowedError):
        coffer.ingest_allowed_path("kb", "relative/path")


@pytest.mark.anyio
async def test_a_cancelled_folder_ingest_stops_between_documents(home: Path, tmp_path: Path) -> None:
    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(30):
        (folder / f"note{i:02d}.md").write_text(f"# Note {i}\n\nbody {i}", encoding="utf-8")
    with Coffer(load_settings(home=home, allowed_dirs=[str(folder)])) as coffer:
        coffer.create_kb("kb")
        server = build_server(coffer)
        async with Client(server, client_info=CLIENT) as client, anyio.create_task_group() as group:

            async def on_progress(progress: float, total: float | None, message: str | None) -> None:
                if progress >= 3:
                    group.cancel_scope.cancel()

            group.start_soon(
                client.call_tool, "coffer__ingest_path", {"kb": "kb", "path": str(folder)}, None, on_progress
            )
        done = coffer.list_documents("kb", limit=100)
        assert 3 <= done.total < 30
        files = sorted(p.name for p in (home / "knowledge" / "kb" / "docs").iterdir())
        assert len(files) == done.total  # nothing half-written, nothing unindexed
        outcomes = [c.outcome for c in coffer.invocations() if c.tool == "coffer__ingest_path"]
        assert outcomes == ["cancelled"]


# -- ingest_url ----------------------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    redirect_to = ""

    def do_GET(self) -> None:
        if self.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", type(self).redirect_to)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def web_server(host: str) -> Iterator[str]:
    httpd = ThreadingHTTPServer((host, 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{host}:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.parametrize(
    "url",
    [
        "LOCAL/page.html",
        "http://[::1]/",
        "http://169.254.169.254/latest/meta-data/",
        "http://localhost/",
        "http://10.0.0.1/",
        "http://[::ffff:127.0.0.1]/",
        "file:///etc/passwd",
        "ftp://example.com/x",
    ],
)
def test_url_ingest_refuses_private_and_non_http_addresses_by_default(coffer: Coffer, url: str) -> None:
    coffer.create_kb("kb")
    with web_server("127.0.0.1") as local, pytest.raises(UrlRefusedError) as caught:
        coffer.ingest_url("kb", url.replace("LOCAL", local))
    assert caught.value.hint
    assert coffer.list_documents("kb").total == 0


def test_a_redirect_to_loopback_is_refused_even_from_an_allowed_host(home: Path) -> None:
    with web_server("127.0.0.2") as allowed, web_server("127.0.0.1") as private:
        _Handler.redirect_to = f"{private}/page.html"
        with Coffer(load_settings(home=home, url_allow_private=["127.0.0.2"])) as coffer:
            coffer.create_kb("kb")
            assert coffer.ingest_url("kb", f"{allowed}/page.html").status == "created"
            with pytest.raises(UrlRefusedError):
                coffer.ingest_url("kb", f"{allowed}/redirect")


@pytest.mark.anyio
async def test_an_allowed_test_server_page_becomes_a_searchable_document(home: Path) -> None:
    with web_server("127.0.0.1") as local, Coffer(load_settings(home=home, url_allow_private=["127.0.0.1"])) as coffer:
        coffer.create_kb("kb")
        async with Client(build_server(coffer), client_info=CLIENT) as client:
            added = await client.call_tool("coffer__ingest_url", {"kb": "kb", "url": f"{local}/notes/lantern"})
            again = await client.call_tool("coffer__ingest_url", {"kb": "kb", "url": f"{local}/notes/lantern"})
        assert added.structured_content["title"] == "Lantern field notes"
        assert again.structured_content["status"] == "unchanged"
        [passage] = coffer.search("kb", "glowworms dusk").passages
        document = coffer.read_document("kb", passage.document_id)
        assert document.metadata["source_url"] == f"{local}/notes/lantern"
        assert "source_path" not in document.metadata


# -- sources -------------------------------------------------------------------------------------


def make_sources(tmp_path: Path) -> dict[str, Path]:
    folder = tmp_path / "sources"
    folder.mkdir()
    files = {name: folder / f"{name}.md" for name in ("same", "changes", "goes", "edited", "auto")}
    for name, path in files.items():
        path.write_text(f"# {name}\n\nfirst version of {name}", encoding="utf-8")
    return files


def test_check_sources_classifies_every_tracked_document(coffer: Coffer, tmp_path: Path) -> None:
    files = make_sources(tmp_path)
    coffer.create_kb("kb")
    coffer.ingest_path("kb", files["same"].parent)
    ids = {d.title: d.document_id for d in coffer.list_documents("kb").documents}
    coffer.add_document("kb", "upload.md", "# upload\n\nan upload has no source")
    coffer.edit_document("kb", ids["edited"], "# edited\n\nhand edit")
    for name in ("changes", "edited", "auto"):
        files[name].write_text(f"# {name}\n\nsecond version of {name}", encoding="utf-8")
    files["goes"].unlink()
    report = coffer.check_sources("kb")
    statuses = {c.title: c.status for c in report.documents}
    assert statuses == {
        "same": "unchanged",
        "changes": "changed",
        "goes": "missing",
        "edited": "edited",
        "auto": "changed",
    }
    assert "second version" not in coffer.read_document("kb", ids["changes"]).markdown  # detection writes nothing

    coffer.update_kb("kb", auto_update_sources=True)
    report = coffer.check_sources("kb")
    statuses = {c.title: c.status for c in report.documents}
    assert (statuses["changes"], statuses["auto"], statuses["edited"]) == ("updated", "updated", "edited")
    assert "second version of auto" in coffer.read_document("kb", ids["auto"]).markdown
    assert "hand edit" in coffer.read_document("kb", ids["edited"]).markdown
    assert coffer.list_documents("kb").total == 6  # updated in place, same ids


def test_update_from_source_refreshes_in_place_and_refuses_edited_documents(coffer: Coffer, tmp_path: Path) -> None:
    from coffer_mcp.errors import ReconversionBlockedError

    files = make_sources(tmp_path)
    coffer.create_kb("kb")
    coffer.ingest_path("kb", files["same"].parent)
    ids = {d.title: d.document_id for d in coffer.list_documents("kb").documents}
    files["changes"].write_text("# changes\n\nthe newest words", encoding="utf-8")
    updated = coffer.update_from_source("kb", ids["changes"])
    assert (updated.document_id, updated.status) == (ids["changes"], "updated")
    assert coffer.search("kb", "newest words").passages[0].document_id == ids["changes"]
    assert coffer.read_document("kb", ids["changes"]).markdown == "# changes\n\nthe newest words"
    coffer.edit_document("kb", ids["edited"], "# edited\n\nmine now")
    with pytest.raises(ReconversionBlockedError):
        coffer.update_from_source("kb", ids["edited"])


def test_check_sources_from_the_cli(home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = make_sources(tmp_path)
    assert main(["--home", str(home), "kb", "create", "kb"]) == 0
    assert main(["--home", str(home), "kb", "ingest", "kb", str(files["same"].parent)]) == 0
    files["goes"].unlink()
    capsys.readouterr()
    assert main(["--home", str(home), "kb", "check-sources", "kb", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["missing"], report["unchanged"]) == (1, 4)


# -- context reads --------------------------------------------------------------------------------


def test_a_passage_can_be_expanded_with_its_neighbours(coffer: Coffer) -> None:
    coffer.create_kb("kb", chunk_size=128, chunk_overlap=0)
    body = "# Long\n\n" + "\n\n".join(f"Paragraph {i} about topic {i} with some padding words." for i in range(20))
    doc = coffer.add_document("kb", "long.md", body)
    [hit, *_] = coffer.search("kb", "topic 7").passages
    window = coffer.read_document("kb", doc.document_id, around_position=hit.position, window=1)
    assert [c.position for c in window.chunks] == [hit.position - 1, hit.position, hit.position + 1]
    assert hit.text in window.markdown
    assert window.unit == "chunks"
    assert window.has_more


def test_long_documents_page_by_lines(coffer: Coffer) -> None:
    coffer.create_kb("kb")
    doc = coffer.add_document("kb", "lines.md", "# L\n\n" + "\n".join(f"line {i}" for i in range(100)))
    page = coffer.read_document("kb", doc.document_id, offset=10, limit=5, unit="lines")
    assert page.markdown.splitlines() == [f"line {i}" for i in range(8, 13)]
    assert page.has_more
    assert page.total_lines == 102
