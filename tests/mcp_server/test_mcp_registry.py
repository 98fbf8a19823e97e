"""The tool registry: what each server offers and logs follows from one entry per tool."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client
from mcp.types import Implementation

from coffer_mcp import Coffer, load_settings
from coffer_mcp.mcp_server import READ_TOOLS, TOOL_NAMES, TOOL_SCOPES, build_server
from coffer_mcp.mcp_server._registry import TOOLS
from coffer_mcp.mcp_server._scopes import beyond_scope

pytestmark = pytest.mark.anyio

CLIENT = Implementation(name="registry-test", version="1")


@pytest.fixture
def tracked(tmp_path: Path):
    """A knowledge base with auto_update_sources whose one source file, in an allowed folder, has changed."""
    sources = tmp_path / "sources"
    sources.mkdir()
    source = sources / "lantern.md"
    source.write_text("# Lantern\n\nfirst version", encoding="utf-8")
    with Coffer(load_settings(home=tmp_path / "home", allowed_dirs=[sources])) as coffer:
        coffer.create_kb("kb")
        coffer.ingest_path("kb", source)
        coffer.update_kb("kb", auto_update_sources=True)
        source.write_text("# Lantern\n\nsecond version", encoding="utf-8")
        yield coffer


async def check_sources(coffer: Coffer, *, read_only: bool) -> tuple[str, bool, str]:
    """The changed document's status, whether the tool was annotated read-only, and the body afterwards."""
    async with Client(build_server(coffer, read_only=read_only), client_info=CLIENT) as client:
        tool = next(t for t in (await client.list_tools()).tools if t.name == "coffer__check_sources")
        result = await client.call_tool("coffer__check_sources", {"kb": "kb"})
    assert not result.is_error, result.content[0].text
    doc_id = coffer.list_documents("kb").documents[0].document_id
    status = result.structured_content["documents"][0]["status"]
    return status, tool.annotations.read_only_hint, coffer.read_document("kb", doc_id).markdown


async def test_check_sources_on_a_read_only_server_reports_a_changed_source_and_changes_nothing(
    tracked: Coffer,
) -> None:
    status, read_only_hint, body = await check_sources(tracked, read_only=True)
    assert (status, read_only_hint) == ("changed", True)
    assert "first version" in body


async def test_check_sources_on_a_writing_server_refreshes_a_changed_source(tracked: Coffer) -> None:
    status, read_only_hint, body = await check_sources(tracked, read_only=False)
    assert (status, read_only_hint) == ("updated", False)
    assert "second version" in body


async def test_every_call_is_logged_under_the_name_the_client_called(coffer: Coffer) -> None:
    coffer.create_kb("kb")
    doc = coffer.add_document("kb", "a.md", "# A\n\nreadable text")
    arguments = {"kb": "kb", "query": "readable", "pattern": "readable", "doc_id": doc.document_id}
    async with Client(build_server(coffer, read_only=True), client_info=CLIENT) as client:
        for tool in (await client.list_tools()).tools:
            wanted = {k: v for k, v in arguments.items() if k in tool.input_schema["properties"]}
            result = await client.call_tool(tool.name, wanted)
            assert not result.is_error, (tool.name, result.content[0].text)
    logged = [(call.tool, call.outcome) for call in coffer.invocations()]
    assert logged == [(name, "ok") for name in READ_TOOLS]
    assert set(READ_TOOLS) < set(TOOL_NAMES)


# The scope each tool needs, pinned: a tool added or moved between scopes changes this table on purpose.
PINNED_SCOPES = {
    "coffer:read": {
        "coffer__list_knowledge_bases",
        "coffer__search_knowledge",
        "coffer__grep_knowledge",
        "coffer__read_document",
        "coffer__list_documents",
        "coffer__knowledge_base_metrics",
        "coffer__check_sources",
        "coffer__list_snapshots",
    },
    "coffer:write": {
        "coffer__add_document",
        "coffer__edit_document",
        "coffer__delete_document",
        "coffer__reindex_knowledge_base",
        "coffer__ingest_path",
        "coffer__ingest_url",
        "coffer__update_from_source",
        "coffer__export_knowledge_base",
        "coffer__snapshot_knowledge_base",
    },
    "coffer:admin": {
        "coffer__create_knowledge_base",
        "coffer__update_knowledge_base",
        "coffer__delete_knowledge_base",
        "coffer__restore_snapshot",
    },
}


def test_every_tool_needs_exactly_one_scope_and_the_table_is_pinned() -> None:
    assert set(TOOL_SCOPES) == set(TOOL_NAMES)
    assert {scope: {n for n, s in TOOL_SCOPES.items() if s == scope} for scope in PINNED_SCOPES} == PINNED_SCOPES


def test_a_tool_needs_the_read_scope_exactly_when_a_read_only_server_offers_it() -> None:
    for entry in TOOLS:
        assert (TOOL_SCOPES[entry.name] == "coffer:read") == (entry.name in READ_TOOLS), entry.name
        if entry.annotations.read_only_hint:
            assert TOOL_SCOPES[entry.name] == "coffer:read", entry.name


def test_a_call_beyond_the_tokens_scope_is_refused_by_the_mcp_layer_as_well() -> None:
    # Over HTTP the guard answers such a call with 403 first; this is the MCP layer's own rule.
    refused = beyond_scope("coffer__add_document", frozenset({"coffer:read"}))
    assert refused is not None
    assert refused.code == "insufficient_scope"
    assert "coffer:write" in refused.message
    assert beyond_scope("coffer__add_document", None) is None  # no OAuth token in play: every tool
    assert beyond_scope("coffer__search_knowledge", frozenset({"coffer:read"})) is None
