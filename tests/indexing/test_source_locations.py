"""Passages, grep hits and pages say where they are in the original: page, slide, sheet and rows, lines.

Through the SDK's in-memory MCP client, on both index backends; the locations come back the same
after the index is dropped and rebuilt from the files, and an edited document never reports a
wrong one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from coffer_mcp import Coffer, load_settings
from coffer_mcp.cli import main
from coffer_mcp.convert import convert
from coffer_mcp.mcp_server import build_server
from coffer_mcp.store import parse_document, render_document
from tests.conftest import FIXTURES, shared_path
from tests.mcp_clients import CLIENT, structured

pytestmark = pytest.mark.anyio

# (fixture, a phrase on one page / slide / row / line, where it is)
FIXTURE_PHRASES = [
    ("sample.pdf", "granite weather station", {"page": 2}),
    ("sample.pdf", "Copper meadow telemetry report", {"page": 1}),
    ("sample.pptx", "Lantern uptime", {"slide": 2}),
    ("sample.xlsx", "Marigold Traders", {"sheet": "Suppliers", "rows": [1, 2]}),
    ("sample.md", "heron protocol handshake", {"line": 3}),
    ("sample.txt", "forty-two jars of marmalade", {"line": 3}),
]
SMALL = {"chunk_size": 64, "chunk_overlap": 0}  # a chunk a paragraph: each on one page


@pytest.fixture
def papers(coffer: Coffer) -> str:
    """A knowledge base holding the fixtures of ``FIXTURE_PHRASES``, chunked small."""
    coffer.create_kb("papers", "fixtures", **SMALL)
    for name in sorted({name for name, _, _ in FIXTURE_PHRASES} | {"sample.csv", "sample.py", "sample.docx"}):
        coffer.add_document("papers", name, (FIXTURES / name).read_bytes())
    return "papers"


def client_for(coffer: Coffer) -> Client:
    return Client(build_server(coffer), client_info=CLIENT)


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    return structured(await client.call_tool(tool, arguments))


async def top_location(client: Client, kb: str, phrase: str) -> dict[str, Any] | None:
    found = await call(client, "coffer__search_knowledge", kb=kb, query=phrase, top_k=1)
    [passage] = found["passages"]
    assert phrase.lower() in " ".join(passage["text"].split()).lower()
    return passage.get("source_location")


async def locations_of(coffer: Coffer, kb: str) -> list[dict[str, Any] | None]:
    async with client_for(coffer) as client:
        return [await top_location(client, kb, phrase) for _, phrase, _ in FIXTURE_PHRASES]


async def test_a_search_over_mcp_says_the_page_slide_sheet_rows_or_lines_of_its_passage(
    coffer: Coffer, papers: str
) -> None:
    assert await locations_of(coffer, papers) == [where for _, _, where in FIXTURE_PHRASES]


async def test_grep_hits_and_read_pages_say_where_they_are_in_the_original(coffer: Coffer, papers: str) -> None:
    async with client_for(coffer) as client:
        grep = await call(client, "coffer__grep_knowledge", kb=papers, pattern="granite|Lantern uptime|Marigold")
        hits = {hit["line"]: hit["source_location"] for hit in grep["hits"]}
        pdf = next(hit["document_id"] for hit in grep["hits"] if "granite" in hit["line"])
        page = await call(client, "coffer__read_document", kb=papers, doc_id=pdf, unit="lines", offset=4, limit=1)
        found = await call(client, "coffer__search_knowledge", kb=papers, query="granite weather station", top_k=1)
        position = found["passages"][0]["position"]
        around = await call(client, "coffer__read_document", kb=papers, doc_id=pdf, around_position=position)
    assert hits == {
        "Second page: granite weather station. Wind came from the west.": {"page": 2},
        "- Lantern uptime stayed above ninety-nine percent.": {"slide": 2},
        "| Marigold Traders | Valencia |": {"sheet": "Suppliers", "row": 2},
    }
    assert "granite" in page["markdown"]
    assert page["source_location"] == {"page": 2}
    assert [chunk["source_location"] for chunk in around["chunks"]][-2:] == [{"page": 1}, {"page": 2}]


async def test_a_word_passage_says_its_heading_once_over_mcp_and_the_core_gives_it_as_its_location(
    coffer: Coffer, papers: str
) -> None:
    [passage] = coffer.search(papers, "bramble yield forecast", 1).passages
    assert passage.source_location == {"heading": ["Quarterly Bramble Report"]}
    assert passage.original_filename == "sample.docx"
    async with client_for(coffer) as client:
        found = await call(client, "coffer__search_knowledge", kb=papers, query="bramble yield forecast", top_k=1)
    assert "source_location" not in found["passages"][0]  # heading_path already says it
    assert "original_filename" not in found["passages"][0]


async def test_the_research_prompt_cites_the_file_and_page_of_each_passage(coffer: Coffer, papers: str) -> None:
    async with client_for(coffer) as client:
        prompt = await client.get_prompt("research", {"question": "granite weather station", "kb": papers})
    text = prompt.messages[0].content.text
    assert 'source="sample.pdf, p. 2"' in text
    assert "(contract.pdf, p. 37)" in text  # how to cite it


async def test_the_locations_come_back_the_same_after_the_index_is_dropped_and_rebuilt_from_the_files(
    coffer: Coffer,
    papers: str,
    home: Path,
    index_backend: str,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    before = await locations_of(coffer, papers)
    coffer.close()
    if index_backend == "sqlite":
        for suffix in ("", "-wal", "-shm"):
            Path(f"{home / 'coffer.db'}{suffix}").unlink(missing_ok=True)
        settings: dict[str, str] = {}
    else:  # a new, empty database: the old one is left behind as a dropped index would be
        settings = {"index_backend": "postgres", "database_url": request.getfixturevalue("empty_postgres_url")}
        monkeypatch.setenv("COFFER_INDEX_BACKEND", "postgres")
        monkeypatch.setenv("COFFER_DATABASE_URL", settings["database_url"])
    assert main(["--home", str(home), "index", "rebuild"]) == 0
    assert f"{papers}: 8 documents, 8 indexed" in capsys.readouterr().out
    with Coffer(load_settings(home=home, **settings)) as rebuilt:
        assert await locations_of(rebuilt, papers) == before


async def test_a_document_edited_by_hand_keeps_the_locations_of_the_lines_it_kept_and_no_other(
    coffer: Coffer, papers: str
) -> None:
    pdf = coffer.search(papers, "granite weather station", 1).passages[0].document_id
    path = coffer.open_kb(papers)[0].doc(pdf)
    meta, body = parse_document(path.read_text(encoding="utf-8"))
    body = body.replace("granite weather station", "basalt weather station")
    body = body.replace(
        "# Copper Meadow Telemetry\n\n", "# Copper Meadow Telemetry\n\nA quokka paragraph typed by hand.\n\n"
    )
    path.write_text(render_document(meta, body), encoding="utf-8")
    async with client_for(coffer) as client:
        assert await top_location(client, papers, "basalt weather station") is None  # changed: not on page 2
        assert await top_location(client, papers, "quokka paragraph typed by hand") is None  # in no page
        assert await top_location(client, papers, "Copper meadow telemetry report") == {"page": 1}
        grep = await call(client, "coffer__grep_knowledge", kb=papers, pattern="basalt|quokka|Copper meadow")
    assert {hit["line"].split()[0]: hit.get("source_location") for hit in grep["hits"]} == {
        "Second": None,
        "A": None,
        "Copper": {"page": 1},
    }


async def test_an_edit_through_mcp_keeps_each_untouched_line_at_its_line_of_the_original_file(
    coffer: Coffer, papers: str
) -> None:
    [passage] = coffer.search(papers, "heron protocol handshake", 1).passages
    body = coffer.read_document(papers, passage.document_id).markdown or ""
    lines = body.split("\n")
    edited = "\n".join([lines[0], "", "A new paragraph that moves the rest down.", *lines[1:]])
    async with client_for(coffer) as client:
        await call(client, "coffer__edit_document", kb=papers, doc_id=passage.document_id, content=edited)
        assert await top_location(client, papers, "heron protocol handshake") == {
            "line": 3
        }  # still line 3 of sample.md
        assert await top_location(client, papers, "moves the rest down") is None
        hit = await call(client, "coffer__grep_knowledge", kb=papers, pattern="heron protocol handshake")
    assert (hit["hits"][0]["line_number"], hit["hits"][0]["source_location"]) == (5, {"line": 3})


async def test_a_reupload_whose_markdown_is_the_same_but_whose_lines_moved_is_located_anew(coffer: Coffer) -> None:
    coffer.create_kb("lists", **SMALL)
    alpha, beta = "Alpha paragraph, long enough to be a chunk.", "Beta paragraph, long enough to be a chunk."
    coffer.add_document("lists", "list.txt", f"{alpha}\n\n{beta}\n")
    async with client_for(coffer) as client:
        assert await top_location(client, "lists", "Beta paragraph") == {"line": 3}
        # Blank lines cleaning collapses: the same Markdown, from other lines of the file.
        coffer.add_document("lists", "list.txt", f"\n\n\n{alpha}\n\n\n{beta}\n", replace=True)
        assert await top_location(client, "lists", "Beta paragraph") == {"line": 7}


async def test_the_source_map_goes_with_its_document_into_a_pack_and_out_with_a_deletion(
    coffer: Coffer, papers: str, tmp_path: Path
) -> None:
    before = await locations_of(coffer, papers)
    coffer.export_kb(papers, tmp_path / "papers.cofferpack")
    coffer.import_pack(tmp_path / "papers.cofferpack", as_name="copy")  # new ids: the store has these
    async with client_for(coffer) as client:
        assert [await top_location(client, "copy", phrase) for _, phrase, _ in FIXTURE_PHRASES] == before
    raw = coffer.open_kb(papers)[0].raw
    maps = sorted(path.name for path in raw.glob("*.map.json"))
    assert len(maps) == 8
    pdf = coffer.search(papers, "granite weather station", 1).passages[0].document_id
    coffer.delete_document(papers, pdf)
    assert not any(path.name.startswith(pdf) for path in raw.iterdir())


async def test_a_reindex_keeps_the_source_maps_of_live_documents_and_verify_finds_none_orphaned(
    coffer: Coffer, papers: str
) -> None:
    raw = coffer.open_kb(papers)[0].raw
    before = sorted(path.name for path in raw.glob("*.map.json"))
    coffer.reindex(papers)  # tidies raw/ of originals without a document
    assert sorted(path.name for path in raw.glob("*.map.json")) == before
    assert coffer.verify(papers).ok
    async with client_for(coffer) as client:
        assert await top_location(client, papers, "granite weather station") == {"page": 2}


async def test_a_document_converted_again_by_a_forced_reindex_gets_its_source_map(coffer: Coffer, papers: str) -> None:
    kb = coffer.open_kb(papers)[0]
    pdf = coffer.search(papers, "granite weather station", 1).passages[0].document_id
    meta, body = parse_document(kb.doc(pdf).read_text(encoding="utf-8"))
    kb.doc(pdf).write_text(render_document({**meta, "conversion_engine": "markitdown"}, body), encoding="utf-8")
    kb.source_map(pdf).unlink()  # as a document converted before source maps has none
    result = coffer.reindex(papers, force=True)
    assert result.reconverted == 1
    assert json.loads(kb.source_map(pdf).read_bytes())["format"] == "coffer-source-map"
    assert coffer.search(papers, "granite weather station", 1).passages[0].source_location == {"page": 2}


@pytest.mark.parametrize("name", ["normal_4pages.pdf", "multi_page.pdf", "test.pptx", "test.xlsx"])
async def test_a_line_on_a_later_page_of_a_real_document_is_found_there(coffer: Coffer, name: str) -> None:
    path = shared_path("eval", "docs-multiformat", name)
    conversion = convert(name, path.read_bytes(), timeout=120)
    unit = {"pdf": "page", "pptx": "slide", "xlsx": "row"}[path.suffix[1:]]
    # The longest line of text whose place is past the first page, slide or row.
    candidates = [
        (line, place)
        for line, place in zip(conversion.markdown.split("\n"), conversion.places, strict=False)
        if place and place.get(unit, 0) > 1 and len(line.split()) >= 4 and not line.startswith(("|", "#"))
    ] or [
        (line, place)
        for line, place in zip(conversion.markdown.split("\n"), conversion.places, strict=False)
        if place and place.get(unit, 0) > 1 and line.strip("| -")
    ]
    line, place = max(candidates, key=lambda pair: len(pair[0]))
    coffer.create_kb("real", chunk_size=256, chunk_overlap=0)
    doc = coffer.add_document("real", name, path.read_bytes()).document_id
    grep = coffer.grep("real", line, fixed_strings=True)
    assert [(hit.document_id, hit.source_location) for hit in grep.hits][:1] == [(doc, place)]
    words = " ".join(line.strip("| -#").split()[:8])
    passages = coffer.search("real", words, 20, per_document=False).passages
    located = [p.source_location for p in passages if words.split()[0] in p.text]
    assert any(_covers(location, unit, place[unit]) for location in located if location)


def _covers(location: dict[str, Any], unit: str, number: int) -> bool:
    if location.get(unit) == number:
        return True
    first, last = location.get(f"{unit}s", (0, 0))
    return first <= number <= last
