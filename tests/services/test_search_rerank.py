"""Reranking in search, end to end: a real index, a real /rerank server on loopback, real MCP clients.

The fake server (``tests/rerank/fake_rerank_server.py``) prefers passages holding its
``favourite`` word, which keyword search ranks last here, so a reranked result is told apart from
an unreranked one by its order alone.
"""

from __future__ import annotations

import os
import re
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from coffer_mcp import Coffer, load_settings
from coffer_mcp.cli import main
from tests.conftest import installed_script
from tests.mcp_clients import CLIENT, call, client_for
from tests.rerank.fake_rerank_server import FakeRerankServer, fake_rerank_server

pytestmark = pytest.mark.anyio

DOCUMENTS = {
    "alpha.md": "# Vector search\n\nVector search finds nearest neighbours: vector search, vector search.",
    "beta.md": "# Graphs\n\nHNSW graphs make vector search fast.",
    "gamma.md": "# Baking\n\nA sourdough starter, and a word on vector search.",
}
QUERY = "vector search"
KEYWORD_ORDER = ["alpha.md", "beta.md", "gamma.md"]
RERANKED_ORDER = ["gamma.md", "alpha.md", "beta.md"]  # the favourite first, then the most query words
WAIT = 60.0


@pytest.fixture
def rerank_server() -> Iterator[FakeRerankServer]:
    with fake_rerank_server() as server:
        server.favourite = "sourdough"
        yield server


def rerank_env(server: FakeRerankServer, **extra: str) -> dict[str, str]:
    return {
        "COFFER_EMBEDDING_PROVIDER": "none",
        "COFFER_RERANK_PROVIDER": "http",
        "COFFER_RERANK_URL": server.url,
        "COFFER_RERANK_MODEL": "fake-reranker",
        "NO_PROXY": "127.0.0.1",
        **extra,
    }


@contextmanager
def open_coffer(home: Path, server: FakeRerankServer | None, **extra: str) -> Iterator[Coffer]:
    """A Coffer over ``home`` (SQLite) whose settings come from the environment, as the CLI's do."""
    environ = rerank_env(server, **extra) if server is not None else {"COFFER_EMBEDDING_PROVIDER": "none"}
    with Coffer(load_settings(environ, home=home)) as coffer:
        yield coffer


@pytest.fixture
def names(home: Path) -> dict[str, str]:
    """The knowledge base 'notes' holding ``DOCUMENTS``: document id -> filename."""
    with open_coffer(home, None) as coffer:
        coffer.create_kb("notes")
        return {coffer.add_document("notes", name, text).document_id: name for name, text in DOCUMENTS.items()}


def order(result: Any, names: dict[str, str]) -> list[str]:
    passages = result["passages"] if isinstance(result, dict) else [p.model_dump() for p in result.passages]
    return [names[p["document_id"]] for p in passages]


async def test_without_a_reranker_the_result_has_no_rerank_and_the_keyword_order(
    home: Path, names: dict[str, str]
) -> None:
    with open_coffer(home, None) as coffer:
        result = coffer.search("notes", QUERY)
        async with client_for(coffer) as client:
            found = await call(client, "coffer__search_knowledge", kb="notes", query=QUERY)
    assert order(result, names) == order(found, names) == KEYWORD_ORDER
    assert result.rerank is None
    assert "rerank" not in found  # over MCP an empty field is left out


async def test_over_mcp_the_reranker_reorders_the_passages_and_the_result_says_so(
    home: Path, names: dict[str, str], rerank_server: FakeRerankServer
) -> None:
    with open_coffer(home, rerank_server) as coffer:
        async with client_for(coffer) as client:
            found = await call(client, "coffer__search_knowledge", kb="notes", query=QUERY)
    assert order(found, names) == RERANKED_ORDER
    assert found["rerank"] == {"applied": True, "model": "http:fake-reranker", "candidates": 3}
    assert [p["score"] for p in found["passages"]] != sorted(p["score"] for p in found["passages"])[::-1]
    (request,) = rerank_server.requests
    assert request.body["query"] == QUERY
    assert request.body["model"] == "fake-reranker"
    assert len(request.body["documents"]) == 3
    assert request.body["documents"][0].startswith("Vector search\n")  # the title above the passage


def test_the_search_looks_deeper_than_top_k_so_the_reranker_can_promote_a_passage(
    home: Path, names: dict[str, str], rerank_server: FakeRerankServer
) -> None:
    with open_coffer(home, rerank_server) as coffer:
        assert order(coffer.search("notes", QUERY, top_k=1, rerank=False), names) == ["alpha.md"]
        result = coffer.search("notes", QUERY, top_k=1)
    assert order(result, names) == ["gamma.md"]
    assert len(rerank_server.requests[0].body["documents"]) == 3
    assert result.rerank is not None
    assert result.rerank.candidates == 3


def test_the_candidate_cap_is_honoured_and_the_rest_keep_their_place(
    home: Path, names: dict[str, str], rerank_server: FakeRerankServer
) -> None:
    rerank_server.favourite = "graphs"
    with open_coffer(home, rerank_server, COFFER_RERANK_CANDIDATES="2") as coffer:
        result = coffer.search("notes", QUERY, top_k=3)
    assert len(rerank_server.requests[0].body["documents"]) == 2
    assert order(result, names) == ["beta.md", "alpha.md", "gamma.md"]
    assert result.rerank is not None
    assert result.rerank.candidates == 2


async def test_a_reranker_slower_than_the_budget_is_not_waited_for_and_the_result_says_timeout(
    home: Path, names: dict[str, str], rerank_server: FakeRerankServer
) -> None:
    rerank_server.hold()  # answers only after release (or, by itself, after a minute)
    try:
        with open_coffer(home, rerank_server, COFFER_RERANK_TIMEOUT_MS="300") as coffer:
            async with client_for(coffer) as client:
                with anyio.fail_after(WAIT):
                    found = await call(client, "coffer__search_knowledge", kb="notes", query=QUERY)
            assert rerank_server.arrived.is_set()
    finally:
        rerank_server.release()
    assert order(found, names) == KEYWORD_ORDER
    assert found["rerank"] == {"applied": False, "reason": "timeout"}


async def test_after_three_timeouts_searches_leave_the_reranker_alone_for_the_cooldown_and_say_so(
    home: Path, names: dict[str, str], rerank_server: FakeRerankServer
) -> None:
    rerank_server.hold()
    with open_coffer(home, rerank_server, COFFER_RERANK_TIMEOUT_MS="300") as coffer:
        try:
            async with client_for(coffer) as client:
                with anyio.fail_after(WAIT):
                    found = [await call(client, "coffer__search_knowledge", kb="notes", query=QUERY) for _ in range(4)]
        finally:
            rerank_server.release()
            for thread in [t for t in threading.enumerate() if t.name == "coffer-rerank"]:
                thread.join(WAIT)  # the held requests end before their client closes
    assert [order(result, names) for result in found] == [KEYWORD_ORDER] * 4
    assert [result["rerank"] for result in found[:3]] == [{"applied": False, "reason": "timeout"}] * 3
    assert found[3]["rerank"]["applied"] is False
    said = re.fullmatch(
        r"cooldown: not tried for (\d+) more seconds after 3 timeouts or errors in a row \(the last: timeout\)",
        found[3]["rerank"]["reason"],
    )
    assert said is not None, found[3]["rerank"]
    assert 0 < int(said[1]) <= 30
    assert len(rerank_server.requests) == 3  # the fourth search did not ask


async def test_a_failing_reranker_leaves_the_order_and_the_result_says_why(
    home: Path, names: dict[str, str], rerank_server: FakeRerankServer
) -> None:
    rerank_server.reply = lambda body: (500, {"detail": "model crashed"})
    with open_coffer(home, rerank_server) as coffer:
        async with client_for(coffer) as client:
            found = await call(client, "coffer__search_knowledge", kb="notes", query=QUERY)
    assert order(found, names) == KEYWORD_ORDER
    assert found["rerank"]["applied"] is False
    assert found["rerank"]["reason"].startswith(f"error: The reranker at {rerank_server.url} answered HTTP 500")
    assert "model crashed" in found["rerank"]["reason"]


def test_a_reranker_that_is_down_leaves_the_order_and_the_result_says_why(
    home: Path, names: dict[str, str], rerank_server: FakeRerankServer
) -> None:
    rerank_server.stop()
    with open_coffer(home, rerank_server) as coffer:
        result = coffer.search("notes", QUERY)
    assert order(result, names) == KEYWORD_ORDER
    assert result.rerank is not None
    assert result.rerank.reason is not None
    assert result.rerank.reason.startswith(f"error: Could not reach the reranker at {rerank_server.url}")


def test_no_passages_ask_nothing_of_the_reranker(
    home: Path, names: dict[str, str], rerank_server: FakeRerankServer
) -> None:
    with open_coffer(home, rerank_server) as coffer:
        result = coffer.search("notes", "nothing matches xylophone")
    assert (result.passages, result.rerank, rerank_server.requests) == ([], None, [])


def stdio_client(home: Path, env: dict[str, str]) -> Client:
    command = installed_script("coffer") or sys.executable
    args = ["serve"] if command != sys.executable else ["-m", "coffer_mcp", "serve"]
    params = StdioServerParameters(command=command, args=args, env={**os.environ, "COFFER_HOME": str(home), **env})
    return Client(params, client_info=CLIENT)


async def test_over_stdio_coffer_serve_reranks_as_configured_in_the_environment(
    home: Path, names: dict[str, str], rerank_server: FakeRerankServer
) -> None:
    with anyio.fail_after(WAIT):
        async with stdio_client(home, rerank_env(rerank_server)) as client:
            found = await call(client, "coffer__search_knowledge", kb="notes", query=QUERY)
    assert order(found, names) == RERANKED_ORDER
    assert found["rerank"]["applied"] is True


def test_the_cli_says_whether_the_reranker_ran_and_can_skip_it(
    home: Path,
    names: dict[str, str],
    rerank_server: FakeRerankServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for variable, value in rerank_env(rerank_server).items():
        monkeypatch.setenv(variable, value)
    assert main(["--home", str(home), "kb", "search", "notes", QUERY]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("1. Baking")
    assert out.rstrip().endswith("(strategy: keyword; reranked by http:fake-reranker)")
    assert main(["--home", str(home), "kb", "search", "notes", QUERY, "--no-rerank"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("1. Vector search")
    assert out.rstrip().endswith("(strategy: keyword)")
    assert len(rerank_server.requests) == 1


def test_doctor_reports_a_working_reranker_and_a_broken_one_as_a_problem(
    home: Path, names: dict[str, str], rerank_server: FakeRerankServer
) -> None:
    with open_coffer(home, rerank_server) as coffer:
        report = coffer.doctor()
        unchecked = coffer.doctor(check_embedder=False)
    status = report.reranker
    assert (status.provider, status.identity, status.reachable) == ("http", "http:fake-reranker", True)
    assert (status.candidates, status.timeout_ms) == (30, 2000)
    assert not report.problems
    assert unchecked.reranker.reachable is None
    assert len(rerank_server.requests) == 1
    rerank_server.reply = lambda body: (401, {"detail": "bad key"})
    with open_coffer(home, rerank_server) as coffer:
        broken = coffer.doctor()
    assert broken.reranker.reachable is False
    assert broken.reranker.error is not None
    assert "HTTP 401" in broken.reranker.error
    assert any(p.startswith("The reranker is not working") and "API key" in p for p in broken.problems)


def test_doctor_says_the_reranker_is_off_by_default(home: Path) -> None:
    with open_coffer(home, None) as coffer:
        status = coffer.doctor(check_embedder=False).reranker
    assert (status.provider, status.identity, status.reachable) == ("none", None, None)
