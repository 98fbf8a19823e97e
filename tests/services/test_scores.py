"""Keyword scores as an agent sees them over MCP: what a query of common words, or of symbols, alone returns."""

from __future__ import annotations

import pytest

from coffer_mcp import Coffer
from tests.mcp_clients import call, client_for


@pytest.fixture
def hamlet(coffer: Coffer, notes: str) -> str:
    coffer.add_document(notes, "other.md", "# Other\n\nNot all who are to go will be there or here.")
    return coffer.add_document(notes, "hamlet.md", "# Hamlet\n\nTo be, or not to be, that is the question.").document_id


@pytest.mark.anyio
async def test_common_words_alone_come_back_as_a_phrase_or_not_at_all_with_a_hint(
    coffer: Coffer, notes: str, hamlet: str
) -> None:
    async with client_for(coffer) as client:
        phrase = await client.call_tool("coffer__search_knowledge", {"kb": notes, "query": "to be or not to be"})
        lone = await client.call_tool("coffer__search_knowledge", {"kb": notes, "query": "the"})
    assert not phrase.is_error
    assert [p["document_id"] for p in phrase.structured_content["passages"]] == [hamlet]
    assert "phrase" in phrase.structured_content["hint"]
    assert not lone.is_error
    assert lone.structured_content["passages"] == []
    assert "common word" in lone.structured_content["hint"]


@pytest.mark.anyio
async def test_an_emoji_alone_finds_the_passage_grep_finds_and_a_miss_says_to_grep(coffer: Coffer, notes: str) -> None:
    party = coffer.add_document(notes, "party.md", "# Party\n\nThe launch went well 🎉 and the → arrow too.")
    async with client_for(coffer) as client:
        found = await call(client, "coffer__search_knowledge", kb=notes, query="🎉")
        grepped = await call(client, "coffer__grep_knowledge", kb=notes, pattern="🎉")
        missing = await call(client, "coffer__search_knowledge", kb=notes, query="★")
    assert [p["document_id"] for p in found["passages"]] == [party.document_id]
    assert [h["document_id"] for h in grepped["hits"]] == [party.document_id]
    assert "coffer__grep_knowledge" in found["hint"]
    assert missing["passages"] == []
    assert "no passage holds '★'" in missing["hint"]


@pytest.mark.anyio
async def test_a_note_all_about_the_query_comes_first_across_knowledge_bases_however_small_its_own(
    coffer: Coffer, notes: str
) -> None:
    """A knowledge base of one document gives every word in it the IDF 1e-6 (FTS5's floor): merged
    as they were, its scores (0.000) put the note all about ducks below a passing mention."""
    coffer.create_kb("tiny")
    note = coffer.add_document("tiny", "ducks.md", "# Ducks\n\nThe mallard is a duck; a duck dabbles on the pond.")
    for n in range(12):
        coffer.add_document(notes, f"minutes-{n}.md", f"# Minutes {n}\n\nBudget, planning and the weekly review.")
    walk = "# Walk\n\nA long walk by the river: we talked of budgets, saw a duck, went home."
    coffer.add_document(notes, "walk.md", walk)
    async with client_for(coffer) as client:
        found = await client.call_tool("coffer__search_knowledge", {"kb": "*", "query": "duck"})
    assert not found.is_error
    passages = found.structured_content["passages"]
    assert [p["document_id"] for p in passages][:1] == [note.document_id]
    assert passages[0]["score"] > passages[1]["score"] > 0.01
