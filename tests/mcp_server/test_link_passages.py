"""Links stay in the Markdown, but their addresses are left out of the passages search indexes and returns."""

from __future__ import annotations

import anyio
import pytest
from mcp import Client

from coffer_mcp import Coffer
from coffer_mcp.index.sqlite import queries as q
from coffer_mcp.mcp_server import build_server
from coffer_mcp.models import Chunk

URL = "https://archive.example.invalid/reports/2024/harbour-authority/annual-review-platypusroute-final-v3.pdf"
IMAGE = "https://img.example.invalid/charts/tonnage-wallabyimage.png"
NOTE = (
    f'# Harbour review\n\nThe [annual harbour review]({URL} "Annual review") counts ferry crossings.\n\n'
    f"![Tonnage by month]({IMAGE})\n\nSee `[kept](in-code)` for the link syntax."
)


def test_a_search_passage_keeps_the_link_text_and_leaves_out_its_address(coffer: Coffer, notes: str) -> None:
    doc_id = coffer.add_document(notes, "review.md", NOTE).document_id

    [passage] = coffer.search(notes, "annual harbour review").passages
    assert "The annual harbour review counts ferry crossings." in passage.text
    assert "Tonnage by month" in passage.text
    assert "[kept](in-code)" in passage.text
    assert URL not in passage.text
    assert IMAGE not in passage.text
    # A word found only inside an address does not make the document a hit ...
    assert coffer.search(notes, "platypusroute").passages == []
    assert coffer.search(notes, "wallabyimage").passages == []
    # ... but the file keeps its links, and grep, which reads the files, finds them.
    assert URL in coffer.read_document(notes, doc_id).markdown
    assert [h.document_id for h in coffer.grep(notes, "platypusroute").hits] == [doc_id]


@pytest.mark.anyio
async def test_over_mcp_a_passage_and_its_neighbours_come_without_link_addresses(coffer: Coffer, notes: str) -> None:
    doc_id = coffer.add_document(notes, "review.md", NOTE).document_id
    with anyio.fail_after(60):
        async with Client(build_server(coffer)) as client:
            found = await client.call_tool("coffer__search_knowledge", {"kb": notes, "query": "ferry crossings"})
            [hit] = found.structured_content["passages"]
            around = await client.call_tool(
                "coffer__read_document", {"kb": notes, "doc_id": doc_id, "around_position": hit["position"]}
            )
    assert "annual harbour review counts" in hit["text"]
    assert URL not in hit["text"]
    assert around.structured_content["chunks"]
    assert all(URL not in chunk["text"] for chunk in around.structured_content["chunks"])


@pytest.mark.sqlite_only  # writes the rows an older Coffer left, in SQL
def test_a_document_chunked_by_an_older_coffer_loses_its_link_addresses_on_the_next_read(
    coffer: Coffer, notes: str
) -> None:
    doc_id = coffer.add_document(notes, "review.md", NOTE).document_id
    # The index as the previous chunker left it: the chunk holds the link, the row its parameters.
    with q.write(coffer.index.conn):
        q.replace_chunks(coffer.index.conn, notes, doc_id, [Chunk(position=0, text=NOTE.split("\n\n", 1)[1])])
        coffer.index.conn.execute("UPDATE documents SET chunk_params = '512:64' WHERE id = ?", (doc_id,))

    found = coffer.search(notes, "platypusroute").passages

    assert found == []
    assert URL not in coffer.search(notes, "ferry crossings").passages[0].text


def test_brackets_before_parentheses_that_hold_no_address_stay_as_written(coffer: Coffer, notes: str) -> None:
    coffer.add_document(notes, "calcium.md", "# Calcium\n\nSlow changes in [Ca(2+)](i) reflect neuronal firing.")
    [passage] = coffer.search(notes, "neuronal firing").passages
    assert "Slow changes in [Ca(2+)](i) reflect" in passage.text
