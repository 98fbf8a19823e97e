"""The MCP surface end to end through the SDK's in-memory client (a real MCP session)."""

from __future__ import annotations

from pathlib import Path

import pytest

from coffer_mcp import Coffer, load_settings
from coffer_mcp.mcp_server import CORE_TOOLS, READ_TOOLS, TOOL_NAMES, build_server
from tests.mcp_clients import call, call_error, client_for, stdio_client

pytestmark = [pytest.mark.anyio, pytest.mark.transports("memory", "stdio")]

ENGLISH = """# Approximate nearest neighbour search

Vector databases answer similarity queries with approximate nearest neighbour indexes such as
HNSW graphs. Recall and latency trade off through the ef parameter.
"""
OTHER = """# Sourdough baking

A starter of flour and water ferments for days before the dough is mixed and proofed overnight.
"""
CHINESE = """# 向量数据库

向量检索依赖近邻搜索算法。常见的近邻搜索索引包括图索引和倒排索引，它们在召回率和延迟之间取得平衡。
"""
TABLE_AND_CODE = """# Configuration reference

| setting | default |
|---------|---------|
| chunk_size | 512 |

```python
def configure(chunk_size=512):
    return {"chunk_size": chunk_size}
```
"""

# Pinned tool contract: names, parameters, and annotations (readOnly, destructive, idempotent).
CONTRACT = {
    "coffer__list_knowledge_bases": ([], (True, None, None)),
    "coffer__search_knowledge": (["kb", "query", "top_k", "filters"], (True, None, None)),
    "coffer__grep_knowledge": (
        ["kb", "pattern", "max_matches", "ignore_case", "fixed_strings", "filters"],
        (True, None, None),
    ),
    "coffer__read_document": (
        ["kb", "doc_id", "offset", "limit", "unit", "around_position", "window", "details"],
        (True, None, None),
    ),
    "coffer__add_document": (
        ["kb", "filename", "content", "replace", "content_encoding", "tags"],
        (False, False, True),
    ),
    "coffer__edit_document": (["kb", "doc_id", "content", "tags", "expected_content_sha256"], (False, True, True)),
    "coffer__delete_document": (["kb", "doc_id"], (False, True, True)),
    "coffer__list_documents": (["kb", "q", "limit", "offset", "details", "filters"], (True, None, None)),
    "coffer__create_knowledge_base": (["name", "description", "vector"], (False, False, False)),
    "coffer__delete_knowledge_base": (["name", "confirm"], (False, True, True)),
    "coffer__knowledge_base_metrics": (["kb"], (True, None, None)),
    "coffer__check_sources": (["kb"], (False, True, True)),
    "coffer__update_knowledge_base": (
        ["name", "description", "chunk_size", "chunk_overlap", "vector", "auto_update_sources"],
        (False, True, True),
    ),
    "coffer__reindex_knowledge_base": (["kb", "force"], (False, False, True)),
    "coffer__ingest_path": (["kb", "path", "replace", "follow"], (False, True, True)),
    "coffer__ingest_url": (["kb", "url", "replace"], (False, False, True)),
    "coffer__update_from_source": (["kb", "doc_id"], (False, True, True)),
    "coffer__list_snapshots": (["kb"], (True, None, None)),
    "coffer__export_knowledge_base": (["kb", "path", "with_vectors"], (False, False, True)),
    "coffer__snapshot_knowledge_base": (["kb", "note"], (False, False, False)),
    "coffer__restore_snapshot": (["kb", "snapshot_id", "confirm"], (False, True, True)),
}


@pytest.fixture
def connect(transport: str, coffer: Coffer, home: Path):
    """Both transports: the SDK's in-memory session and a real ``coffer serve`` over stdio (on SQLite)."""
    return (lambda: client_for(coffer)) if transport == "memory" else (lambda: stdio_client(home))


async def test_the_tool_list_matches_the_pinned_contract(coffer: Coffer) -> None:
    async with client_for(coffer) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert set(tools) == set(CONTRACT) == set(TOOL_NAMES)
    for name, (params, (read_only, destructive, idempotent)) in CONTRACT.items():
        tool = tools[name]
        assert list(tool.input_schema["properties"]) == params, name
        assert tool.annotations.read_only_hint is read_only, name
        assert tool.annotations.destructive_hint is destructive, name
        assert tool.annotations.idempotent_hint is idempotent, name
        assert tool.output_schema is not None, name
        assert tool.description, name
        assert len(tool.description.splitlines()) <= 15, name
    search = tools["coffer__search_knowledge"].input_schema["properties"]["top_k"]
    assert (search["minimum"], search["maximum"], search["default"]) == (1, 20, 5)


async def test_switching_curation_off_leaves_the_seven_core_tools(coffer: Coffer) -> None:
    async with client_for(coffer, curation=False) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
    assert names == set(CORE_TOOLS)
    assert len(CORE_TOOLS) == 7


async def test_a_read_only_server_lists_no_write_tool_and_refuses_nothing_it_lists(coffer: Coffer) -> None:
    coffer.create_kb("kb")
    doc = coffer.add_document("kb", "a.md", "# A\n\nreadable text")
    arguments = {
        "coffer__list_knowledge_bases": {},
        "coffer__search_knowledge": {"kb": "kb", "query": "readable"},
        "coffer__grep_knowledge": {"kb": "kb", "pattern": "readable"},
        "coffer__read_document": {"kb": "kb", "doc_id": doc.document_id},
        "coffer__list_documents": {"kb": "kb"},
        "coffer__knowledge_base_metrics": {"kb": "kb"},
        "coffer__check_sources": {"kb": "kb"},
        "coffer__list_snapshots": {"kb": "kb"},
    }
    async with client_for(coffer, read_only=True) as client:
        tools = (await client.list_tools()).tools
        assert {tool.name for tool in tools} == set(READ_TOOLS) == set(arguments)
        assert all(tool.annotations.read_only_hint for tool in tools)
        for tool in tools:
            await call(client, tool.name, **arguments[tool.name])
        unknown = await client.call_tool("coffer__add_document", {"kb": "kb", "filename": "b.md", "content": "x"})
    assert unknown.is_error


async def test_an_agent_builds_searches_edits_and_deletes_documents(connect) -> None:
    async with connect() as client:
        await call(client, "coffer__create_knowledge_base", name="research", description="papers")
        english = await call(client, "coffer__add_document", kb="research", filename="ann.md", content=ENGLISH)
        await call(client, "coffer__add_document", kb="research", filename="bread.md", content=OTHER)
        chinese = await call(client, "coffer__add_document", kb="research", filename="zh.md", content=CHINESE)
        config = await call(client, "coffer__add_document", kb="research", filename="config.md", content=TABLE_AND_CODE)

        found = await call(client, "coffer__search_knowledge", kb="research", query="nearest neighbour indexes")
        assert found["strategy"] == "keyword"
        assert found["passages"][0]["document_id"] == english["document_id"]
        passage = found["passages"][0]
        # lean: see test_lean_results; where it is in ann.md: tests/indexing/test_source_locations.py
        assert set(passage) == {"text", "document_id", "title", "score", "position", "source_location"}
        assert passage["title"] == "Approximate nearest neighbour search"

        for query in ("近邻搜索", "向量"):
            hits = await call(client, "coffer__search_knowledge", kb="research", query=query)
            assert hits["passages"][0]["document_id"] == chinese["document_id"], query

        code = await call(client, "coffer__search_knowledge", kb="research", query="configure chunk_size")
        assert code["passages"][0]["document_id"] == config["document_id"]
        assert "```python" in code["passages"][0]["text"] or "| chunk_size |" in code["passages"][0]["text"]

        weird = await call(client, "coffer__search_knowledge", kb="research", query='"unbalanced AND (NEAR x* OR')
        assert weird["strategy"] == "keyword"

        grep = await call(client, "coffer__grep_knowledge", kb="research", pattern=r"HNSW\s+graphs")
        hit = grep["hits"][0]
        assert set(hit) == {"document_id", "line_number", "line", "kb", "source_location"}
        assert hit["document_id"] == english["document_id"]
        assert "HNSW" in hit["line"]
        assert grep["truncated"] is False
        line = await call(
            client,
            "coffer__read_document",
            kb="research",
            doc_id=hit["document_id"],
            unit="lines",
            offset=hit["line_number"] - 1,
            limit=1,
        )
        assert line["markdown"].rstrip("\n") == hit["line"]

        read = await call(client, "coffer__read_document", kb="research", doc_id=english["document_id"])
        assert read["markdown"].startswith("# Approximate nearest neighbour search")
        assert read["metadata"]["original_filename"] == "ann.md"
        detailed = await call(
            client, "coffer__read_document", kb="research", doc_id=english["document_id"], details=True
        )
        assert Path(detailed["path"]).is_file()

        await call(
            client,
            "coffer__edit_document",
            kb="research",
            doc_id=english["document_id"],
            content="# Approximate nearest neighbour search\n\nProduct quantization compresses vectors.",
        )
        assert (await call(client, "coffer__search_knowledge", kb="research", query="quantization"))["passages"]
        gone = await call(client, "coffer__search_knowledge", kb="research", query="HNSW")
        assert english["document_id"] not in {p["document_id"] for p in gone["passages"]}
        edited = await call(client, "coffer__read_document", kb="research", doc_id=english["document_id"])
        assert edited["metadata"]["source_mode"] == "edited"

        await call(client, "coffer__delete_document", kb="research", doc_id=chinese["document_id"])
        assert not (await call(client, "coffer__search_knowledge", kb="research", query="近邻搜索"))["passages"]
        error = await call_error(client, "coffer__read_document", kb="research", doc_id=chinese["document_id"])
        assert error["code"] == "unknown_document"


@pytest.mark.transports("memory")  # the wire is checked by this module's stdio tests
async def test_re_uploads_are_idempotent_refused_or_replaced(connect) -> None:
    async with connect() as client:
        await call(client, "coffer__create_knowledge_base", name="kb")
        first = await call(client, "coffer__add_document", kb="kb", filename="report.md", content="# R\n\nversion one")
        again = await call(client, "coffer__add_document", kb="kb", filename="report.md", content="# R\n\nversion one")
        assert (again["document_id"], again["status"]) == (first["document_id"], "unchanged")

        error = await call_error(client, "coffer__add_document", kb="kb", filename="report.md", content="# R\n\nv2")
        assert error["code"] == "duplicate"
        assert "replace" in error["hint"]

        replaced = await call(
            client, "coffer__add_document", kb="kb", filename="report.md", content="# R\n\nv2", replace=True
        )
        assert (replaced["document_id"], replaced["status"]) == (first["document_id"], "updated")
        listing = await call(client, "coffer__list_documents", kb="kb")
        assert listing["total"] == 1


async def test_an_agents_upload_is_refused_the_name_of_a_file_ingested_from_a_path(
    coffer: Coffer, tmp_path: Path
) -> None:
    source = tmp_path / "notes.md"
    source.write_text("# My notes\n\nfrom my folder", encoding="utf-8")
    coffer.create_kb("kb")
    ingested = coffer.ingest_path("kb", source).items[0].document_id
    async with client_for(coffer) as client:
        upload = {"kb": "kb", "filename": "notes.md", "content": "# Agent note\n\nmine"}
        error = await call_error(client, "coffer__add_document", **upload, replace=True)
        assert error["code"] == "duplicate"
        assert f"{ingested} from {source}" in error["message"]
        assert "coffer__edit_document" in error["hint"]
        read = await call(client, "coffer__read_document", kb="kb", doc_id=ingested)
    assert "from my folder" in read["markdown"]
    assert read["metadata"]["source_path"] == str(source)


async def test_an_agents_edit_never_overwrites_what_the_user_saved_after_its_read(connect) -> None:
    async with connect() as client:
        await call(client, "coffer__create_knowledge_base", name="kb")
        added = await call(client, "coffer__add_document", kb="kb", filename="plan.md", content="# Plan\n\nstep 1\n")
        doc = {"kb": "kb", "doc_id": added["document_id"]}
        read = await call(client, "coffer__read_document", **doc)
        with open(added["path"], "a", encoding="utf-8") as file:  # the user saves a line in their editor
            file.write("\nstep 2 (the user's)\n")
        mine = read["markdown"] + "\n\nstep 3 (agent)"
        stale = await call_error(
            client, "coffer__edit_document", **doc, content=mine, expected_content_sha256=read["content_sha256"]
        )
        unversioned = await call_error(client, "coffer__edit_document", **doc, content=mine)
        again = await call(client, "coffer__read_document", **doc)
        edited = await call(
            client,
            "coffer__edit_document",
            **doc,
            content=again["markdown"] + "\n\nstep 3 (agent)",
            expected_content_sha256=again["content_sha256"],
        )
        final = await call(client, "coffer__read_document", **doc)
    assert stale["code"] == unversioned["code"] == "edit_conflict"
    assert "coffer__read_document" in stale["hint"]
    assert "expected_content_sha256" in stale["hint"]
    assert edited["status"] == "updated"
    assert final["markdown"] == "# Plan\n\nstep 1\n\nstep 2 (the user's)\n\nstep 3 (agent)"


@pytest.mark.transports("memory")  # the wire is checked by this module's stdio tests
async def test_a_traversal_filename_cannot_write_outside_the_knowledge_base(connect, home: Path) -> None:
    async with connect() as client:
        await call(client, "coffer__create_knowledge_base", name="kb")
        added = await call(client, "coffer__add_document", kb="kb", filename="../../x.md", content="# X\n\nescape")
    assert added["original_filename"] == "x.md"
    assert Path(added["path"]).parent == home / "knowledge" / "kb" / "docs"
    assert not list(home.parent.glob("x.md"))
    assert not (home / "x.md").exists()


async def test_an_edit_made_on_disk_is_seen_by_the_next_search(connect) -> None:
    async with connect() as client:
        await call(client, "coffer__create_knowledge_base", name="kb")
        added = await call(client, "coffer__add_document", kb="kb", filename="a.md", content="# A\n\nold words")
        path = Path(added["path"])
        path.write_text(path.read_text(encoding="utf-8").replace("old words", "fresh wording"), encoding="utf-8")
        assert (await call(client, "coffer__search_knowledge", kb="kb", query="fresh wording"))["passages"]
        assert not (await call(client, "coffer__search_knowledge", kb="kb", query="old"))["passages"]


@pytest.mark.transports("memory")  # the wire is checked by this module's stdio tests
async def test_an_unknown_knowledge_base_error_names_the_existing_ones(connect) -> None:
    async with connect() as client:
        await call(client, "coffer__create_knowledge_base", name="alpha")
        await call(client, "coffer__create_knowledge_base", name="beta")
        error = await call_error(client, "coffer__search_knowledge", kb="gamma", query="x")
    assert error["code"] == "unknown_kb"
    assert "alpha" in error["hint"]
    assert "beta" in error["hint"]


@pytest.mark.transports("memory")  # the wire is checked by this module's stdio tests
async def test_search_can_span_several_or_all_knowledge_bases(connect) -> None:
    async with connect() as client:
        for name in ("one", "two", "three"):
            await call(client, "coffer__create_knowledge_base", name=name)
            await call(client, "coffer__add_document", kb=name, filename="d.md", content=f"# {name}\n\nshared term")
        some = await call(client, "coffer__search_knowledge", kb=["one", "two"], query="shared term")
        everything = await call(client, "coffer__search_knowledge", kb="*", query="shared term")
    assert {p["kb"] for p in some["passages"]} == {"one", "two"}
    assert {p["kb"] for p in everything["passages"]} == {"one", "two", "three"}


async def test_deleting_a_knowledge_base_needs_confirmation(coffer: Coffer, home: Path) -> None:
    async with client_for(coffer) as client:
        await call(client, "coffer__create_knowledge_base", name="doomed")
        error = await call_error(client, "coffer__delete_knowledge_base", name="doomed", confirm=False)
        assert error["code"] == "confirmation_required"
        assert (home / "knowledge" / "doomed").is_dir()
        await call(client, "coffer__delete_knowledge_base", name="doomed", confirm=True)
    assert not (home / "knowledge" / "doomed").exists()


async def test_binary_formats_can_be_added_as_base64(coffer: Coffer) -> None:
    import base64

    from tests.conftest import FIXTURES

    data = base64.b64encode((FIXTURES / "sample.docx").read_bytes()).decode()
    async with client_for(coffer) as client:
        await call(client, "coffer__create_knowledge_base", name="kb")
        added = await call(
            client, "coffer__add_document", kb="kb", filename="sample.docx", content=data, content_encoding="base64"
        )
        bad = await call_error(
            client, "coffer__add_document", kb="kb", filename="x.pdf", content="%%%", content_encoding="base64"
        )
    assert added["status"] == "created"
    assert bad["code"] == "invalid_argument"


async def test_text_an_agent_sends_with_nul_characters_is_added_without_them(connect) -> None:
    # It was refused as "binary": text the agent sent, which an edit would have kept without the NULs.
    async with connect() as client:
        await call(client, "coffer__create_knowledge_base", name="kb")
        added = await call(client, "coffer__add_document", kb="kb", filename="log.md", content="# Log\n\nab\x00cd")
        read = await call(client, "coffer__read_document", kb="kb", doc_id=added["document_id"])
        edited = await call(client, "coffer__edit_document", kb="kb", doc_id=added["document_id"], content="e\x00f")
        again = await call(client, "coffer__read_document", kb="kb", doc_id=added["document_id"])
    assert added["status"] == "created"
    assert added["note"] == "1 NUL character (\\x00) was removed from the content, the first at offset 9."
    assert read["markdown"] == "# Log\n\nabcd"
    assert (edited["status"], again["markdown"]) == ("updated", "ef")


async def test_a_filename_that_would_display_as_another_is_stored_without_its_hidden_characters(connect) -> None:
    """A right-to-left override shows "invoice\u202efdp.exe" as "invoiceexe.pdf"; a NUL hides nothing
    but no file system holds it. Both are removed, and the note says so."""
    async with connect() as client:
        await call(client, "coffer__create_knowledge_base", name="kb")
        spoofed = await call(
            client, "coffer__add_document", kb="kb", filename="invoice\u202efdp.md", content="# A\n\nx"
        )
        nul = await call(client, "coffer__add_document", kb="kb", filename="lo\x00g.md", content="# B\n\ny")
        listed = await call(client, "coffer__list_documents", kb="kb")
    assert (
        spoofed["note"] == "The filename is 'invoicefdp.md': 1 control or text-direction character was removed from it."
    )
    assert nul["note"] == "The filename is 'log.md': 1 control or text-direction character was removed from it."
    assert sorted(row["original_filename"] for row in listed["documents"]) == ["invoicefdp.md", "log.md"]


@pytest.mark.transports("memory")  # the wire is checked by this module's stdio tests
async def test_a_filename_with_folders_is_stored_by_its_last_part_and_the_note_says_so(connect) -> None:
    async with connect() as client:
        await call(client, "coffer__create_knowledge_base", name="kb")
        added = await call(client, "coffer__add_document", kb="kb", filename="../../escape.md", content="# E\n\nx")
    assert added["note"] == (
        "The filename is 'escape.md': an upload's name holds no folders ('../../escape.md' was given)."
    )


async def test_every_call_is_logged_and_writes_are_audited_with_the_agent_as_actor(coffer: Coffer) -> None:
    async with client_for(coffer) as client:
        await call(client, "coffer__create_knowledge_base", name="kb")
        added = await call(client, "coffer__add_document", kb="kb", filename="a.md", content="# A\n\ntext")
        await call_error(client, "coffer__search_knowledge", kb="missing", query="x")
    calls = [(c.tool, c.client, c.outcome, c.error_code) for c in coffer.invocations()]
    assert calls == [
        ("coffer__create_knowledge_base", "test-agent", "ok", None),
        ("coffer__add_document", "test-agent", "ok", None),
        ("coffer__search_knowledge", "test-agent", "error", "unknown_kb"),
    ]
    audit = [(e.event, e.document_id, e.actor) for e in coffer.index.audit_events()]
    assert audit == [
        ("KB_CREATED", None, "agent:test-agent"),
        ("KB_DOCUMENT_INGESTED", added["document_id"], "agent:test-agent"),
    ]


async def test_the_server_instructions_name_the_knowledge_bases(coffer: Coffer) -> None:
    coffer.create_kb("handbook")
    coffer.add_document("handbook", "a.md", "# A\n\ntext")
    server = build_server(coffer)
    assert "handbook (1 document)" in server.instructions
    coffer.add_document("handbook", "b.md", "# B\n\ntext")
    assert "handbook (2 documents)" in build_server(coffer).instructions


def test_a_server_started_with_its_database_unreachable_says_the_knowledge_bases_were_not_listed(
    home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # It logged a traceback and named no knowledge base, as if there were none.
    url = "postgresql://coffer:s3cret@127.0.0.1:9/coffer"  # nothing listens on port 9
    with Coffer(load_settings(home=home, index_backend="postgres", database_url=url)) as coffer:
        server = build_server(coffer)
    assert "The knowledge bases could not be listed when this server started" in server.instructions
    assert "coffer__list_knowledge_bases lists them" in server.instructions
    logged = [r for r in caplog.records if r.name == "coffer_mcp.mcp_server"]
    assert [(r.levelname, r.exc_info) for r in logged] == [("WARNING", None)]  # one line, no traceback
    assert "Cannot connect to the PostgreSQL index" in logged[0].getMessage()
    assert "COFFER_DATABASE_URL" in logged[0].getMessage()  # the hint
    assert "s3cret" not in logged[0].getMessage() + server.instructions


async def test_documents_are_listable_and_readable_as_resources(coffer: Coffer) -> None:
    coffer.create_kb("kb")
    doc = coffer.add_document("kb", "a.md", "# Alpha\n\nresource body")
    async with client_for(coffer) as client:
        listed = (await client.list_resources()).resources
        templates = (await client.list_resource_templates()).resource_templates
        read = await client.read_resource(f"coffer://kb/{doc.document_id}")
    assert [(str(r.uri), r.title, r.mime_type) for r in listed] == [
        (f"coffer://kb/{doc.document_id}", "Alpha", "text/markdown")
    ]
    assert [t.uri_template for t in templates] == ["coffer://{kb}/{doc_id}"]
    assert read.contents[0].text == "# Alpha\n\nresource body"


async def test_reading_an_unknown_resource_is_a_protocol_error(coffer: Coffer) -> None:
    from mcp.shared.exceptions import MCPError

    coffer.create_kb("kb")
    async with client_for(coffer) as client:
        with pytest.raises(MCPError):
            await client.read_resource("coffer://kb/01M8NP4MZTN0XVCZWDXQ46XW1Z")


async def test_an_agent_snapshots_exports_and_restores_a_knowledge_base(home: Path, tmp_path: Path) -> None:
    from coffer_mcp import load_settings

    exports = tmp_path / "exports"
    exports.mkdir()
    with Coffer(load_settings(home=home, allowed_dirs=[str(exports)])) as coffer:
        coffer.create_kb("kb")
        doc = coffer.add_document("kb", "a.md", "# A\n\nthe original words")
        async with client_for(coffer) as client:
            snap = await call(client, "coffer__snapshot_knowledge_base", kb="kb", note="before edits")
            await call(client, "coffer__edit_document", kb="kb", doc_id=doc.document_id, content="# A\n\nruined")
            refused = await call_error(
                client, "coffer__restore_snapshot", kb="kb", snapshot_id=snap["id"], confirm=False
            )
            restored = await call(client, "coffer__restore_snapshot", kb="kb", snapshot_id=snap["id"], confirm=True)
            listed = await call(client, "coffer__list_snapshots", kb="kb")
            pack = await call(client, "coffer__export_knowledge_base", kb="kb", path=str(exports / "kb.cofferpack"))
            outside = await call_error(
                client, "coffer__export_knowledge_base", kb="kb", path=str(tmp_path / "kb.cofferpack")
            )
        assert refused["code"] == "confirmation_required"
        assert restored["pre_restore_snapshot_id"] in {s["id"] for s in listed["snapshots"]}
        assert coffer.read_document("kb", doc.document_id).markdown == "# A\n\nthe original words"
        assert Path(pack["path"]).is_file()
        assert outside["code"] == "path_not_allowed"


@pytest.mark.parametrize("page", [{"offset": 5, "unit": "lines"}, {"limit": 10}, {"unit": "lines"}])
async def test_read_document_refuses_page_arguments_beside_around_position(coffer: Coffer, page: dict) -> None:
    coffer.create_kb("kb", chunk_size=128, chunk_overlap=0)
    body = "# Long\n\n" + "\n\n".join(f"Paragraph {i} about topic {i} with some padding words." for i in range(20))
    doc = {"kb": "kb", "doc_id": coffer.add_document("kb", "long.md", body).document_id}
    async with client_for(coffer) as client:
        error = await call_error(client, "coffer__read_document", **doc, around_position=2, **page)
        assert error["code"] == "invalid_argument"
        assert all(name in error["message"] for name in page)
        assert "around_position" in error["hint"]
        window = await call(client, "coffer__read_document", **doc, around_position=2)  # alone, as before
    assert window["unit"] == "chunks"
