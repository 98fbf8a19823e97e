"""The MCP call log is written off the calls' threads: a search never waits for a writer to log itself."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.types import Implementation

from coffer_mcp import Coffer, load_settings
from coffer_mcp.mcp_server import build_server

pytestmark = pytest.mark.anyio

CLIENT = Implementation(name="log-test", version="1")
WAIT = 60.0  # generous: the box is shared; nothing here is timed


@contextmanager
def writer_holding_the_index(coffer: Coffer) -> Iterator[threading.Event]:
    """Another thread in a write transaction that holds what logging a call writes to, until the block ends.

    SQLite: its ``BEGIN IMMEDIATE`` holds the database's one write lock, as a writer's transaction
    does. PostgreSQL: the call log's table is locked against inserts. Yields an event set once the
    writer has let go (at the end of the block, or after ``WAIT`` seconds at the latest).
    """
    held, release, let_go = threading.Event(), threading.Event(), threading.Event()

    def hold() -> None:
        try:
            with coffer.index.transaction():
                if coffer.settings.index_backend == "postgres":
                    coffer.index.conn.execute("LOCK TABLE mcp_invocations IN EXCLUSIVE MODE")
                held.set()
                release.wait(WAIT)
        finally:
            let_go.set()

    thread = threading.Thread(target=hold, name="test-writer")
    thread.start()
    try:
        assert held.wait(WAIT), "the writer never got the index"
        yield let_go
    finally:
        release.set()
        thread.join(WAIT)


async def test_a_search_is_answered_while_a_writer_holds_the_index_and_logged_once_it_lets_go(coffer: Coffer) -> None:
    coffer.create_kb("notes")
    coffer.add_document("notes", "a.md", "# A\n\nretrieval while others write")
    with writer_holding_the_index(coffer) as let_go:
        async with Client(build_server(coffer), client_info=CLIENT) as client:
            with anyio.fail_after(2 * WAIT):
                result = await client.call_tool("coffer__search_knowledge", {"kb": "notes", "query": "retrieval"})
            answered_while_held = not let_go.is_set()
    assert not result.is_error, result.content
    assert result.structured_content["passages"]  # type: ignore[index]
    assert answered_while_held, "the search waited for the writer"
    assert [(c.tool, c.client, c.outcome) for c in coffer.invocations()] == [
        ("coffer__search_knowledge", "log-test", "ok")
    ]


async def test_every_call_is_in_the_log_once_the_service_closes_even_those_queued_behind_a_writer(
    home: Path, backend_settings: dict[str, str]
) -> None:
    settings = load_settings(home=home, **backend_settings)
    with Coffer(settings) as coffer:
        coffer.create_kb("notes")
        with writer_holding_the_index(coffer):  # nothing can be written yet: every record stays queued
            async with Client(build_server(coffer), client_info=CLIENT) as client:
                for query in ("one", "two", "three"):
                    await client.call_tool("coffer__search_knowledge", {"kb": "notes", "query": query})
    with Coffer(settings) as reopened:
        logged = [(c.tool, c.outcome) for c in reopened.index.invocations()]
    assert logged == [("coffer__search_knowledge", "ok")] * 3
