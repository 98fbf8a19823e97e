"""A document's original, served read-only by the viewer's API: a PDF shown in place, anything else downloaded."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from coffer_mcp import Coffer
from tests.conftest import FIXTURES
from tests.web.conftest import TOKEN
from tests.web.support import make_coffer, running

HOSTILE_PAGE = b"<html><body><script>window.__pwned = 1</script><p>A page that runs script.</p></body></html>"


@pytest.fixture(scope="module")
def originals(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Coffer, dict[str, str]]]:
    with make_coffer(tmp_path_factory.mktemp("web") / "home") as service:
        service.create_kb("papers")
        ids = {
            name: service.add_document("papers", name, data).document_id
            for name, data in [
                ("sample.pdf", (FIXTURES / "sample.pdf").read_bytes()),
                ('Café "menu".pdf', (FIXTURES / "sample.pdf").read_bytes()),
                ("page.html", HOSTILE_PAGE),
                ("note.md", b"# Note\n\nWritten in Coffer.\n"),
            ]
        }
        yield service, ids


@pytest.fixture(scope="module")
def server(originals: tuple[Coffer, dict[str, str]]) -> Iterator[str]:
    with running(originals[0], token=TOKEN) as url:
        yield url


def get(server: str, doc_id: str, *, token: str | None = TOKEN) -> httpx.Response:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    return httpx.get(f"{server}/api/v1/knowledge_bases/papers/documents/{doc_id}/original", headers=headers, timeout=30)


def test_a_pdf_original_is_shown_in_place_with_a_policy_that_lets_only_the_browsers_pdf_viewer_work(
    server: str, originals: tuple[Coffer, dict[str, str]]
) -> None:
    answer = get(server, originals[1]["sample.pdf"])
    assert answer.status_code == 200
    assert answer.content == (FIXTURES / "sample.pdf").read_bytes()
    assert answer.headers["content-type"] == "application/pdf"
    assert answer.headers["content-disposition"] == "inline; filename=\"sample.pdf\"; filename*=UTF-8''sample.pdf"
    [policy] = answer.headers.get_list("content-security-policy")  # its own, not the viewer's too
    assert policy == (
        "default-src 'none'; object-src 'self'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'"
    )
    assert answer.headers["x-content-type-options"] == "nosniff"
    assert answer.headers["x-frame-options"] == "DENY"


def test_an_original_that_is_no_pdf_is_downloaded_and_never_runs_as_a_page_of_the_server(
    server: str, originals: tuple[Coffer, dict[str, str]]
) -> None:
    answer = get(server, originals[1]["page.html"])
    assert answer.content == HOSTILE_PAGE
    assert answer.headers["content-type"] == "application/octet-stream"
    assert answer.headers["content-disposition"].startswith('attachment; filename="page.html"')
    [policy] = answer.headers.get_list("content-security-policy")
    assert policy.startswith("default-src 'none'")
    assert policy.endswith("sandbox")
    assert answer.headers["x-content-type-options"] == "nosniff"


def test_an_original_is_named_by_its_file_name_in_either_form_a_browser_reads(
    server: str, originals: tuple[Coffer, dict[str, str]]
) -> None:
    disposition = get(server, originals[1]['Café "menu".pdf']).headers["content-disposition"]
    assert disposition == "inline; filename=\"Caf_ _menu_.pdf\"; filename*=UTF-8''Caf%C3%A9%20%22menu%22.pdf"


def test_an_original_needs_the_token_like_every_route(server: str, originals: tuple[Coffer, dict[str, str]]) -> None:
    assert get(server, originals[1]["sample.pdf"], token=None).status_code == 401
    assert get(server, originals[1]["sample.pdf"], token="not-the-token-at-all").status_code == 401


def test_a_document_whose_original_is_gone_answers_404_saying_so(
    server: str, originals: tuple[Coffer, dict[str, str]]
) -> None:
    service, ids = originals
    raw: Path = service.paths.kb("papers").raw / f"{ids['note.md']}.md"
    raw.unlink()
    answer = get(server, ids["note.md"])
    assert answer.status_code == 404
    assert answer.json()["code"] == "no_original"
    unknown = get(server, "01J00000000000000000000000")
    assert (unknown.status_code, unknown.json()["code"]) == (404, "unknown_document")
