"""One passage per document first: what an agent gets from a search, over a real MCP session.

A document that matches in many passages used to fill most of a result (SciFact: the first ten
passages came from 6.2 documents on average); now each document appears once, by its best
passage, with where its other matches are, and further passages only fill a result that would
otherwise be short.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client
from mcp.types import Implementation

from coffer_mcp import Coffer, load_settings
from coffer_mcp.mcp_server import build_server
from tests.fakes import HashEmbedder

pytestmark = pytest.mark.anyio

CLIENT = Implementation(name="by-document-test", version="1")
# Chunks of at most 96 characters: each paragraph below is its own passage.
MANUAL = "# Ferry manual\n\n" + "\n\n".join(
    f"Ferry rule {n}: the ferry crew checks tide tables, and the ferry waits for the tide." for n in range(8)
)
SHORT = {f"port{n}.md": f"# Port {n}\n\nOne ferry calls here on day {n}." for n in range(4)}


@pytest.fixture
def harbour(coffer: Coffer) -> dict[str, str]:
    coffer.create_kb("harbour", chunk_size=96, chunk_overlap=0)
    ids = {name: coffer.add_document("harbour", name, text).document_id for name, text in SHORT.items()}
    ids["manual.md"] = coffer.add_document("harbour", "manual.md", MANUAL).document_id
    return ids


async def search(coffer: Coffer, **arguments: object) -> list[dict]:
    async with Client(build_server(coffer), client_info=CLIENT) as client:
        result = await client.call_tool("coffer__search_knowledge", {"kb": "harbour", **arguments})
        assert not result.is_error, result.content[0].text
        return result.structured_content["passages"]


async def test_each_document_comes_once_and_says_where_its_other_matches_are(
    coffer: Coffer, harbour: dict[str, str]
) -> None:
    passages = await search(coffer, query="ferry tide", top_k=5)

    documents = [p["document_id"] for p in passages]
    assert sorted(documents) == sorted(harbour.values())  # five documents, each once
    manual = next(p for p in passages if p["document_id"] == harbour["manual.md"])
    assert documents[0] == harbour["manual.md"]  # it matches both words
    assert len(manual["more_positions"]) == 7  # its seven other rules, each a passage
    assert manual["position"] not in manual["more_positions"]
    assert all("more_positions" not in p for p in passages if p is not manual)  # nothing else matched


async def test_a_more_position_reads_back_as_a_matching_passage(coffer: Coffer, harbour: dict[str, str]) -> None:
    [manual, *_] = await search(coffer, query="ferry tide", top_k=5)
    page = coffer.read_document("harbour", harbour["manual.md"], around_position=manual["more_positions"][0], window=0)

    assert page.markdown is not None
    assert f"Ferry rule {manual['more_positions'][0]}:" in page.markdown


async def test_a_short_answer_is_filled_with_the_next_passages_of_the_documents_found(
    coffer: Coffer, harbour: dict[str, str]
) -> None:
    passages = await search(coffer, query="tide tables", top_k=3)  # only the manual says it

    assert [p["document_id"] for p in passages] == [harbour["manual.md"]] * 3
    positions = [p["position"] for p in passages]
    assert len(set(positions)) == 3
    assert set(passages[0]["more_positions"]) == set(range(8)) - set(positions)  # shown ones are not listed again


@pytest.mark.parametrize("vector", [False, True], ids=["keyword", "hybrid"])
async def test_documents_ranked_below_another_ones_many_passages_still_fill_the_answer(
    home: Path, backend_settings: dict[str, str], vector: bool
) -> None:
    # The manual's 40 rules outrank every port: the 4 x top_k passages looked at held the manual
    # alone, and the answer was its passages, although four other documents match.
    manual = "# Ferry manual\n\n" + "\n\n".join(f"Ferry rule {n}: the ferry crew checks the ferry." for n in range(40))
    with Coffer(load_settings(home=home, **backend_settings), embedder=HashEmbedder()) as coffer:
        coffer.create_kb("fleet", chunk_size=96, chunk_overlap=0, vector=vector)
        ids = {coffer.add_document("fleet", "manual.md", manual).document_id}
        ids |= {coffer.add_document("fleet", name, text).document_id for name, text in SHORT.items()}
        async with Client(build_server(coffer), client_info=CLIENT) as client:
            result = await client.call_tool("coffer__search_knowledge", {"kb": "fleet", "query": "ferry", "top_k": 5})
    assert result.structured_content["strategy"] == ("hybrid" if vector else "keyword")
    passages = result.structured_content["passages"]

    assert {p["document_id"] for p in passages} == ids  # five documents, each once
    assert len(passages) == 5


def test_a_search_looks_no_deeper_once_it_has_every_document_there_is(
    home: Path, backend_settings: dict[str, str]
) -> None:
    # Two manuals of 40 matching rules each, top_k 5: no depth finds a third document, and each
    # deeper look embedded the query again (a paid provider bills each one).
    embedder = HashEmbedder()
    with Coffer(load_settings(home=home, **backend_settings), embedder=embedder) as coffer:
        coffer.create_kb("fleet", chunk_size=96, chunk_overlap=0, vector=True)
        for n in range(2):
            rules = "\n\n".join(f"Ferry rule {r}: the ferry crew checks the ferry." for r in range(40))
            coffer.add_document("fleet", f"manual{n}.md", f"# Manual {n}\n\n{rules}")
        calls = embedder.calls
        result = coffer.search("fleet", "ferry", 5)
    assert result.strategy == "hybrid"
    assert len({p.document_id for p in result.passages}) == 2
    assert len(result.passages) == 5  # the two documents' next passages fill the answer
    assert embedder.calls == calls + 1


def test_passages_as_they_rank_are_still_there_for_who_asks(coffer: Coffer, harbour: dict[str, str]) -> None:
    grouped = coffer.search("harbour", "ferry tide", 5).passages
    ranked = coffer.search("harbour", "ferry tide", 5, per_document=False).passages

    assert len({p.document_id for p in grouped}) == 5
    assert [p.document_id for p in ranked] == [harbour["manual.md"]] * 5  # its rules outrank every port
    assert all(p.more_positions == [] for p in ranked)
