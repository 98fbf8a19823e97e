"""Hostile content and queries: stored as clean UTF-8 or refused, searched as plain text, grep bounded.

Lone surrogates, control characters and invalid UTF-8 in uploads and edits; a 50 MB upload; FTS
syntax and SQL-looking queries; regexes built to backtrack catastrophically. Through the service
(property-based), the MCP tools and the HTTP JSON API.
"""

from __future__ import annotations

import base64
import itertools
import json
import re
from pathlib import Path

import anyio
import anyio.to_thread
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client

from coffer_mcp import Coffer, load_settings
from coffer_mcp.errors import CofferError
from coffer_mcp.mcp_server import build_server
from coffer_mcp.models import GrepResult, SearchResult
from coffer_mcp.store import body_sha256, parse_document
from tests.reliability.hostile import ANY_CHARACTER, CATASTROPHIC_PATTERNS, PROPERTY, QUERIES, patterns, queries
from tests.reliability.support import GREP_TIMEOUT, Store, expected_sha, store_fingerprint, tool_error_code
from tests.web.support import running

FIFTY_MB = 50 * 1024 * 1024
UNIQUE = itertools.count()
UPLOAD_REFUSALS = {"empty", "unsupported_type"}  # nothing left after cleaning; bytes that are not text
LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def stored_cleanly(store: Store, doc_id: str) -> str:
    """The document's body, after checking its file is strict UTF-8 with matching frontmatter."""
    data = (store.home / "knowledge" / "notes" / "docs" / f"{doc_id}.md").read_bytes()
    meta, body = parse_document(data.decode("utf-8"))  # strict: raises on invalid UTF-8
    assert meta is not None
    assert meta["content_sha256"] == body_sha256(body)
    return body


@PROPERTY
@given(text=st.text(ANY_CHARACTER, max_size=400))
def test_uploaded_text_with_lone_surrogates_and_control_characters_is_stored_as_clean_utf8_or_refused(
    store: Store, text: str
) -> None:
    try:
        added = store.coffer.add_document("notes", f"text-{next(UNIQUE)}.md", text)
    except CofferError as exc:
        assert exc.code in UPLOAD_REFUSALS
        assert store.changed() == []
        return
    body = stored_cleanly(store, added.document_id)
    assert body_sha256(body) == expected_sha(LONE_SURROGATE.sub("\ufffd", text))
    store.coffer.delete_document("notes", added.document_id)
    assert store.changed() == []


@PROPERTY
@given(data=st.binary(max_size=2_000))
def test_uploaded_bytes_that_are_not_utf8_are_stored_as_clean_utf8_or_refused(store: Store, data: bytes) -> None:
    try:
        added = store.coffer.add_document("notes", f"bytes-{next(UNIQUE)}.md", data)
    except CofferError as exc:
        assert exc.code in UPLOAD_REFUSALS
        assert store.changed() == []
        return
    stored_cleanly(store, added.document_id)
    store.coffer.delete_document("notes", added.document_id)
    assert store.changed() == []


@pytest.fixture
def edited(store: Store):
    """A document that the edit test may change at will (deleted afterwards)."""
    doc_id = store.coffer.add_document("notes", "edited.md", "# Edited\n\nThe first body.\n").document_id
    yield doc_id
    store.coffer.delete_document("notes", doc_id)


@settings(PROPERTY, suppress_health_check=[HealthCheck.function_scoped_fixture])  # one document for all examples
@given(text=st.text(ANY_CHARACTER, max_size=400))
def test_an_edit_with_any_unicode_is_stored_as_clean_utf8_or_refused_as_empty_without_a_change(
    store: Store, edited: str, text: str
) -> None:
    before = store_fingerprint(store.home)
    try:
        store.coffer.edit_document("notes", edited, text)
    except CofferError as exc:
        assert exc.code == "empty"
        assert store_fingerprint(store.home) == before
        return
    assert body_sha256(stored_cleanly(store, edited)) == expected_sha(text)


def test_a_50_mb_upload_is_refused_as_too_large_by_the_service_and_over_mcp_and_nothing_is_written(
    store: Store,
) -> None:
    huge = "# Huge\n\n" + "x" * FIFTY_MB
    with pytest.raises(CofferError) as refused:
        store.coffer.add_document("notes", "huge.md", huge)
    assert refused.value.code == "too_large"

    async def over_mcp() -> dict[str, str]:
        async with Client(build_server(store.coffer)) as client:
            result = await client.call_tool(
                "coffer__add_document", {"kb": "notes", "filename": "huge.md", "content": huge}
            )
        assert result.is_error
        return json.loads(result.content[0].text)

    assert anyio.run(over_mcp)["code"] == "too_large"
    assert store.changed() == []


def test_an_edit_larger_than_max_document_bytes_is_refused_as_too_large_and_changes_nothing(tmp_path: Path) -> None:
    settings = load_settings(home=tmp_path / "home", embedding_provider="none", max_document_bytes=64 * 1024)
    with Coffer(settings) as c:
        c.create_kb("notes")
        doc_id = c.add_document("notes", "small.md", "# Small\n\nFits the limit.\n").document_id
        before = store_fingerprint(c.paths.home)
        with pytest.raises(CofferError) as refused:
            c.edit_document("notes", doc_id, "# Grown\n\n" + "y" * (128 * 1024))
        assert refused.value.code == "too_large"
        assert store_fingerprint(c.paths.home) == before


# -- queries -------------------------------------------------------------------------------------


@PROPERTY
@given(query=queries())
def test_any_search_query_including_fts_and_sql_syntax_gives_passages_or_a_typed_error(
    store: Store, query: str
) -> None:
    for kb in ("notes", ["notes", "other"], "*"):
        try:
            result = store.coffer.search(kb, query, top_k=5)
        except CofferError as exc:
            assert exc.code == "invalid_argument", exc
            continue
        assert isinstance(result, SearchResult)
    assert store.changed() == []


@pytest.mark.parametrize(
    "query",
    [
        '"tides" AND NEAR(herons',
        "tides OR ) herons*",
        "title:tides -herons",
        "'; DROP TABLE documents; -- tides",
        "tides\x00herons",
    ],
)
def test_query_syntax_is_plain_text_so_the_words_around_it_still_find_the_document(store: Store, query: str) -> None:
    passages = store.coffer.search("notes", query).passages
    assert store.doc in {p.document_id for p in passages}


@PROPERTY
@given(pattern=patterns(), fixed=st.booleans(), ignore_case=st.booleans())
def test_any_grep_pattern_gives_bounded_hits_or_a_typed_error(
    store: Store, pattern: str, fixed: bool, ignore_case: bool
) -> None:
    try:
        result = store.coffer.grep("*", pattern, 20, ignore_case=ignore_case, fixed_strings=fixed)
    except CofferError as exc:
        assert exc.code in {"invalid_pattern", "invalid_argument"}, exc
        return
    assert isinstance(result, GrepResult)
    assert len(result.hits) <= 20


@pytest.fixture(scope="module", params=["ripgrep", "python"])
def grep_engine(store: Store, request: pytest.FixtureRequest):
    """The store's service with ripgrep, or a second service over the same home with ripgrep off."""
    if request.param == "ripgrep":
        yield store.coffer
        return
    settings = store.coffer.settings.model_copy(update={"rg_path": ""})
    with Coffer(settings) as python_only:
        yield python_only


@pytest.mark.anyio
@pytest.mark.parametrize("pattern", CATASTROPHIC_PATTERNS)
async def test_a_catastrophically_backtracking_regex_returns_within_the_grep_timeout(
    grep_engine: Coffer, pattern: str
) -> None:
    with anyio.fail_after(GREP_TIMEOUT + 15):  # bounded: a hung scan fails the test instead of hanging it
        try:
            result = await anyio.to_thread.run_sync(
                lambda: grep_engine.grep("notes", pattern, 50), abandon_on_cancel=True
            )
        except CofferError as exc:
            assert exc.code == "invalid_pattern"  # ripgrep refuses what its engine cannot run linearly
            return
    # No line matches; a backtracking engine runs out of time first and says the answer is partial,
    # unless grep's file map knows that no file holds the pattern's literal ("!x"): nothing to read.
    assert result.hits == []
    if result.engine == "python":
        no_file = grep_engine.retrieval.prefilter.narrow([grep_engine.paths.kb("notes").docs], pattern) == []
        assert result.truncated is not no_file


# -- the same through MCP and HTTP ---------------------------------------------------------------


@pytest.mark.anyio
async def test_hostile_content_queries_and_patterns_through_mcp_get_results_or_tool_errors(store: Store) -> None:
    with anyio.fail_after(120):
        async with Client(build_server(store.coffer)) as client:
            for query in QUERIES:
                result = await client.call_tool("coffer__search_knowledge", {"kb": "*", "query": query})
                assert not result.is_error or tool_error_code(result) == "invalid_argument", query
            for pattern in CATASTROPHIC_PATTERNS:
                result = await client.call_tool("coffer__grep_knowledge", {"kb": "notes", "pattern": pattern})
                assert not result.is_error or tool_error_code(result) == "invalid_pattern", pattern
            cases = [
                ("%%% not base64 %%%", "base64", "invalid_argument"),
                ("\x00\x01\x02", "text", "empty"),  # text: NUL and control characters dropped, nothing left
                (base64.b64encode(b"ab\x00cd").decode(), "base64", "unsupported_type"),  # a file's bytes: binary
                ("\x01\x02\x1f", "text", "empty"),
                ("   \n\t  ", "text", "empty"),
                (base64.b64encode(b"\xff\xfe\x00\x00").decode(), "base64", None),
                (base64.b64encode(b"caf\xe9 \xff\xfe invalid utf-8").decode(), "base64", None),
            ]
            for content, encoding, code in cases:
                arguments = {"kb": "notes", "filename": "c.md", "content": content, "content_encoding": encoding}
                result = await client.call_tool("coffer__add_document", arguments)
                if code is not None:
                    assert tool_error_code(result) == code, content
                elif not result.is_error:
                    doc_id = result.structured_content["document_id"]
                    stored_cleanly(store, doc_id)
                    await client.call_tool("coffer__delete_document", {"kb": "notes", "doc_id": doc_id})
    assert store.changed() == []


def test_hostile_queries_through_the_http_api_get_passages_or_json_errors(store: Store) -> None:
    with running(store.coffer) as url, httpx.Client(base_url=f"{url}/api/v1", timeout=30) as http:
        for query in QUERIES:
            text = query.encode("utf-8", "replace").decode("utf-8")
            for response in (
                http.get("/knowledge_bases/notes/search", params={"q": text}),
                http.get("/search", params={"q": text, "top_k": "5"}),
            ):
                assert response.status_code in (200, 400), (query, response.text)
                body = response.json()
                assert "passages" in body if response.status_code == 200 else body["code"] == "invalid_argument"
        for top_k in ("-1", "0", "999999999", "1e9", "x", ""):
            response = http.get("/knowledge_bases/notes/search", params={"q": "tides", "top_k": top_k})
            assert response.status_code in (200, 400), (top_k, response.text)
    assert store.changed() == []
