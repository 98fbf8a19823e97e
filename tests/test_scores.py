"""Keyword scores as an agent sees them over MCP: what a query of common words alone returns."""

from __future__ import annotations

import pytest

from coffer_mcp import Coffer
from tests.test_mcp_server import client_for


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
