"""Destructive calls confirmed by the user through the client (elicitation), else with the ``confirm`` argument."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.types import ElicitRequestParams, ElicitResult

from coffer_mcp import Coffer
from tests.mcp_clients import TRANSPORTS, error_of, open_client, structured

pytestmark = [pytest.mark.anyio, pytest.mark.transports(*TRANSPORTS)]


NOTHING: dict[str, Any] = {}  # stands for an accepted answer without content (an ``ElicitResult`` with none)


class User:
    """A client's elicitation callback: what the user was asked, and how they answer."""

    def __init__(self, action: str = "accept", content: dict[str, Any] | None = None) -> None:
        self.action = action
        self.content = {"confirm": True} if content is None and action == "accept" else content
        if content is NOTHING:
            self.content = None
        self.asked: list[ElicitRequestParams] = []

    async def __call__(self, context: Any, params: ElicitRequestParams) -> ElicitResult:
        self.asked.append(params)
        return ElicitResult(action=self.action, content=self.content)

    @property
    def questions(self) -> list[str]:
        return [params.message for params in self.asked]


@pytest.fixture
def pantry(coffer: Coffer, home: Path) -> Path:
    """A knowledge base 'pantry' with two documents; returns its folder."""
    coffer.create_kb("pantry")
    coffer.add_document("pantry", "flour.md", "# Flour\n\nStrong white flour.")
    coffer.add_document("pantry", "salt.md", "# Salt\n\nFine sea salt.")
    return home / "knowledge" / "pantry"


async def delete_pantry(coffer: Coffer, home: Path, transport: str, user: User | None, **arguments: Any) -> Any:
    options = {"elicitation_callback": user} if user is not None else {}
    with anyio.fail_after(60):
        async with open_client(transport, coffer, home, **options) as client:
            return await client.call_tool("coffer__delete_knowledge_base", {"name": "pantry", **arguments})


async def test_the_user_is_asked_and_their_yes_deletes_the_knowledge_base(
    coffer: Coffer, home: Path, pantry: Path, transport: str
) -> None:
    user = User("accept")
    result = await delete_pantry(coffer, home, transport, user)
    assert structured(result)["deleted"] is True
    assert not pantry.exists()
    assert user.questions == [
        (
            "Delete the knowledge base 'pantry' and its 2 documents? Their files and index entries are removed; "
            "this cannot be undone."
        )
    ]
    [asked] = user.asked
    assert asked.requested_schema["properties"]["confirm"]["type"] == "boolean"


def texts_of(schema: Any) -> list[str]:
    """Every title and description in a JSON schema: what a client may show the user."""
    if isinstance(schema, dict):
        own = [value for key, value in schema.items() if key in ("title", "description") and isinstance(value, str)]
        return own + [text for value in schema.values() for text in texts_of(value)]
    if isinstance(schema, list):
        return [text for value in schema for text in texts_of(value)]
    return []


@pytest.mark.transports("legacy", "stdio")
async def test_the_form_a_2025_11_25_client_shows_holds_only_words_meant_for_the_user(
    coffer: Coffer, home: Path, pantry: Path, transport: str
) -> None:
    user = User("accept")
    with anyio.fail_after(60):
        async with open_client(transport, coffer, home, elicitation_callback=user, mode="legacy") as client:
            assert client.protocol_version == "2025-11-25"
            structured(await client.call_tool("coffer__delete_knowledge_base", {"name": "pantry"}))
    [asked] = user.asked
    assert "description" not in asked.requested_schema  # was the model's docstring, for developers
    assert sorted(texts_of(asked.requested_schema)) == ["Confirmation", "Tick to let Coffer go ahead.", "Yes, go ahead"]


@pytest.mark.parametrize(
    ("action", "content", "said"),
    [
        ("decline", None, "declined"),
        ("cancel", None, "dismissed the question"),
        ("accept", {"confirm": False}, "without ticking"),
        # What a client sends that is not a yes is a no, not a Coffer bug (internal_error).
        ("accept", {"confirm": ""}, "without ticking"),
        ("accept", {"confirm": "maybe"}, "without ticking"),
        ("accept", {"confirm": None}, "without ticking"),
        ("accept", {"confirm": ["yes"]}, "without ticking"),
        ("accept", {"sure": True}, "without ticking"),
        ("accept", NOTHING, "without an answer"),
    ],
    ids=["declined", "dismissed", "unticked", "empty-string", "maybe", "null", "list", "other-field", "no-content"],
)
@pytest.mark.transports("memory", "legacy")  # every answer, as the server reads it; the wire: the tests above
async def test_anything_but_a_ticked_yes_refuses_even_with_confirm_true(
    coffer: Coffer, home: Path, pantry: Path, transport: str, action: str, content: dict | None, said: str
) -> None:
    user = User(action, content)
    error = error_of(await delete_pantry(coffer, home, transport, user, confirm=True))
    assert error["code"] == "confirmation_declined"
    assert said in error["message"]
    assert "unless the user asks" in error["hint"]
    assert pantry.is_dir()
    assert len(user.asked) == 1


async def test_a_client_that_cannot_ask_falls_back_to_the_confirm_argument(
    coffer: Coffer, home: Path, pantry: Path, transport: str
) -> None:
    refused = error_of(await delete_pantry(coffer, home, transport, None))
    assert refused["code"] == "confirmation_required"
    assert pantry.is_dir()
    assert structured(await delete_pantry(coffer, home, transport, None, confirm=True))["deleted"] is True
    assert not pantry.exists()


UNKNOWN_SNAPSHOT = "01M8NP4MZTN0XVCZWDXQ46XW1Z"


@pytest.mark.parametrize(
    ("tool", "arguments", "code"),
    [
        ("coffer__delete_knowledge_base", {"name": "pantri"}, "unknown_kb"),
        ("coffer__delete_knowledge_base", {"name": ""}, "invalid_name"),
        ("coffer__restore_snapshot", {"kb": "pantri", "snapshot_id": UNKNOWN_SNAPSHOT}, "unknown_kb"),
        ("coffer__restore_snapshot", {"kb": "kept", "snapshot_id": "bogus"}, "unknown_snapshot"),
        ("coffer__restore_snapshot", {"kb": "kept", "snapshot_id": UNKNOWN_SNAPSHOT}, "unknown_snapshot"),
        ("coffer__restore_snapshot", {"kb": "", "snapshot_id": UNKNOWN_SNAPSHOT}, "invalid_name"),
    ],
    ids=["delete-unknown", "delete-empty", "restore-unknown-kb", "restore-bogus", "restore-unknown", "restore-empty"],
)
@pytest.mark.parametrize("can_ask", [True, False], ids=["asking", "not-asking"])
async def test_an_unknown_target_is_refused_as_such_and_nobody_is_asked(
    coffer: Coffer, home: Path, tool: str, arguments: dict[str, Any], code: str, can_ask: bool
) -> None:
    coffer.create_kb("kept")
    coffer.snapshot_kb("kept")
    user = User("accept")
    options = {"elicitation_callback": user} if can_ask else {}
    async with open_client("memory", coffer, home, **options) as client:
        errors = [
            error_of(await client.call_tool(tool, {**arguments, **confirm}))
            for confirm in ({}, {"confirm": False}, {"confirm": True})
        ]
    unconfirmed, refused, confirmed = errors
    assert unconfirmed["code"] == code
    assert unconfirmed == refused == confirmed  # the same error as once the user agreed
    assert user.asked == []
    assert [kb.name for kb in coffer.list_kbs()] == ["kept"]


async def test_the_snapshot_of_a_deleted_knowledge_base_is_still_confirmed_not_refused(
    coffer: Coffer, home: Path
) -> None:
    coffer.create_kb("gone")
    taken = coffer.snapshot_kb("gone")
    coffer.delete_kb("gone")
    async with open_client("memory", coffer, home) as client:
        arguments = {"kb": "gone", "snapshot_id": taken.id}
        refused = error_of(await client.call_tool("coffer__restore_snapshot", arguments))
        restored = structured(await client.call_tool("coffer__restore_snapshot", {**arguments, "confirm": True}))
    assert refused["code"] == "confirmation_required"
    assert restored["created"] is True


@pytest.mark.parametrize("transport", ["memory", "legacy"])
async def test_restoring_a_snapshot_asks_the_user_with_its_date(coffer: Coffer, home: Path, transport: str) -> None:
    coffer.create_kb("kb")
    doc = coffer.add_document("kb", "a.md", "# A\n\nthe original words")
    user = User("accept")
    async with open_client(transport, coffer, home, elicitation_callback=user) as client:
        snap = structured(await client.call_tool("coffer__snapshot_knowledge_base", {"kb": "kb", "note": "before"}))
        await client.call_tool("coffer__edit_document", {"kb": "kb", "doc_id": doc.document_id, "content": "# A\n\nx"})
        restored = structured(
            await client.call_tool("coffer__restore_snapshot", {"kb": "kb", "snapshot_id": snap["id"]})
        )
        unknown = error_of(
            await client.call_tool("coffer__restore_snapshot", {"kb": "kb", "snapshot_id": UNKNOWN_SNAPSHOT})
        )
    assert restored["snapshot_id"] == snap["id"]
    assert coffer.read_document("kb", doc.document_id).markdown == "# A\n\nthe original words"
    [question] = user.questions
    assert f"snapshot of {snap['created_at']} ('before'), 1 document?" in question
    assert "can be undone" in question
    assert unknown["code"] == "unknown_snapshot"  # refused before asking
