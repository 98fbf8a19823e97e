"""The viewer's JSON API: knowledge bases, documents, search, metrics, and errors as JSON."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from coffer_mcp import Coffer
from tests.web.support import Seeded


@pytest.fixture
def api(base_url: str):
    with httpx.Client(base_url=f"{base_url}/api/v1", timeout=10) as http:
        yield http


def test_the_knowledge_bases_are_listed_with_their_document_counts(api: httpx.Client) -> None:
    kbs = {kb["name"]: kb for kb in api.get("/knowledge_bases").json()["knowledge_bases"]}
    assert set(kbs) == {"notes", "empty-kb"}
    assert kbs["notes"]["document_count"] == 6
    assert kbs["notes"]["description"] == "Notes about Coffer"


def test_a_knowledge_base_reports_its_metrics(api: httpx.Client, store: tuple[Coffer, Seeded]) -> None:
    details = api.get("/knowledge_bases/notes").json()
    assert details["document_count"] == 6
    assert details["chunk_count"] >= 6
    assert details["disk_bytes"] > 0
    assert details["path"] == str(store[0].paths.kb("notes").root)


def test_documents_are_paginated(api: httpx.Client) -> None:
    first = api.get("/knowledge_bases/notes/documents", params={"limit": 4}).json()
    second = api.get("/knowledge_bases/notes/documents", params={"limit": 4, "offset": 4}).json()
    assert first["total"] == second["total"] == 6
    assert len(first["documents"]) == 4
    assert len(second["documents"]) == 2
    ids = [d["document_id"] for d in first["documents"] + second["documents"]]
    assert len(set(ids)) == 6


def test_documents_are_filtered_by_title(api: httpx.Client, store: tuple[Coffer, Seeded]) -> None:
    page = api.get("/knowledge_bases/notes/documents", params={"q": "alpha"}).json()
    assert [d["document_id"] for d in page["documents"]] == [store[1].alpha]
    assert page["total"] == 1


def test_one_document_comes_with_markdown_metadata_its_path_and_its_folder(
    api: httpx.Client, store: tuple[Coffer, Seeded]
) -> None:
    service, seeded = store
    doc = api.get(f"/knowledge_bases/notes/documents/{seeded.alpha}").json()
    expected = service.paths.kb("notes").doc(seeded.alpha)
    assert doc["title"] == "Alpha guide"
    assert doc["markdown"].startswith("# Alpha guide")
    assert "---" not in doc["markdown"].splitlines()[0]
    assert doc["metadata"]["original_filename"] == "alpha.md"
    assert doc["path"] == str(expected)
    assert Path(doc["path"]).is_absolute()
    assert doc["folder"] == str(expected.parent)


def test_search_returns_passages_from_one_knowledge_base(api: httpx.Client, store: tuple[Coffer, Seeded]) -> None:
    result = api.get("/knowledge_bases/notes/search", params={"q": "vector retrieval", "top_k": 3}).json()
    assert result["strategy"] == "keyword"
    assert result["knowledge_bases"] == ["notes"]
    assert 1 <= len(result["passages"]) <= 3
    assert store[1].beta in {p["document_id"] for p in result["passages"]}
    assert {"text", "title", "score", "heading_path", "chunk_id", "kb"} <= set(result["passages"][0])


def test_search_across_every_knowledge_base(api: httpx.Client) -> None:
    result = api.get("/search", params={"q": "hybrid"}).json()
    assert set(result["knowledge_bases"]) == {"notes", "empty-kb"}
    assert result["passages"]


@pytest.mark.parametrize(
    ("path", "params", "status", "code"),
    [
        ("/knowledge_bases/nope", {}, 404, "unknown_kb"),
        ("/knowledge_bases/nope/documents", {}, 404, "unknown_kb"),
        ("/knowledge_bases/notes/documents/01ARZ3NDEKTSV4RRFFQ69G5FAV", {}, 404, "unknown_document"),
        ("/knowledge_bases/notes/documents/not-an-id", {}, 400, "invalid_argument"),
        ("/knowledge_bases/Bad%20Name/documents", {}, 400, "invalid_name"),
        ("/knowledge_bases/notes/documents", {"limit": "many"}, 400, "invalid_argument"),
        ("/knowledge_bases/notes/documents", {"limit": 0}, 400, "invalid_argument"),
        ("/knowledge_bases/notes/search", {"q": ""}, 400, "invalid_argument"),
        ("/knowledge_bases/notes/search", {"q": "x", "top_k": 0}, 400, "invalid_argument"),
        ("/no/such/endpoint", {}, 404, "not_found"),
    ],
)
def test_errors_are_json_with_a_code_a_message_and_a_hint(
    api: httpx.Client, path: str, params: dict, status: int, code: str
) -> None:
    response = api.get(path, params=params)
    assert response.status_code == status
    body = response.json()
    assert set(body) == {"code", "message", "hint"}
    assert body["message"]
    assert body["code"] == code


def test_an_error_hint_speaks_of_the_viewer_not_of_mcp_tools(api: httpx.Client) -> None:
    hint = api.get("/knowledge_bases/notes/documents/01ARZ3NDEKTSV4RRFFQ69G5FAV").json()["hint"]
    assert "the search box" in hint
    assert "coffer__" not in hint


def test_an_unknown_knowledge_base_hint_names_the_existing_ones(api: httpx.Client) -> None:
    assert "notes" in api.get("/knowledge_bases/nope").json()["hint"]


def test_a_knowledge_base_folder_that_is_a_symlink_is_refused_as_unknown_not_a_server_error(
    api: httpx.Client, store: tuple[Coffer, Seeded], tmp_path: Path
) -> None:
    # knowledge/linked -> a folder elsewhere: open_kb followed the link, the index never registered
    # it, and every read answered 500 (a foreign key failed while indexing its files).
    coffer, _ = store
    outside = tmp_path / "elsewhere"
    (outside / "docs").mkdir(parents=True)
    (outside / "docs" / "secret.md").write_text("# Secret\n\nlaunch codes", encoding="utf-8")
    (coffer.paths.knowledge / "linked").symlink_to(outside, target_is_directory=True)
    for path, params in [
        ("/knowledge_bases/linked", {}),
        ("/knowledge_bases/linked/documents", {}),
        ("/knowledge_bases/linked/search", {"q": "launch"}),
        ("/search", {"q": "launch", "kb": "linked"}),
    ]:
        response = api.get(path, params=params)
        assert (response.status_code, response.json()["code"]) == (404, "unknown_kb"), path
        assert "symbolic link" in response.json()["message"]


def test_query_text_with_fts_syntax_is_data_not_an_error(api: httpx.Client) -> None:
    response = api.get("/knowledge_bases/notes/search", params={"q": 'alpha" OR NEAR(( *'})
    assert response.status_code == 200
