"""An MCP request over HTTP holding a lone UTF-16 surrogate gets Coffer's parse error, with a hint.

Raw JSON-RPC bodies to a real server on loopback: no SDK client can send such text (its JSON
encoder refuses it). Before, the SDK answered a bare ``-32700`` "Parse error: lone leading
surrogate in hex escape at line 1 column 127" with a null id.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest

from coffer_mcp import Coffer
from tests.mcp_clients import UNPARSABLE
from tests.web.support import Seeded

MODERN = "2026-07-28"  # the protocol version without a handshake: each request carries its envelope
HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


def body(message_id: int, method: str, params: dict[str, Any] | None = None) -> str:
    """A JSON-RPC request; ``json.dumps`` writes a lone surrogate as its ``\\udcff`` escape."""
    return json.dumps(
        {"jsonrpc": "2.0", "id": message_id, "method": method, **({"params": params} if params is not None else {})}
    )


def answer(response: httpx2.Response) -> dict[str, Any]:
    """The JSON-RPC message of a response: plain JSON, or the data of its one SSE event."""
    if response.headers["content-type"].startswith("text/event-stream"):
        data = [line.removeprefix("data:").strip() for line in response.text.splitlines() if line.startswith("data:")]
        return json.loads(data[-1])
    return response.json()


class Session:
    """A streamable HTTP session of protocol 2025-11-25 (initialized, with its session id)."""

    def __init__(self, http: httpx2.Client, url: str) -> None:
        self.http = http
        self.url = f"{url}/mcp"
        client = {"name": "raw", "version": "1"}
        params = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": client}
        started = self.http.post(self.url, headers=HEADERS, content=body(1, "initialize", params))
        assert started.status_code == 200, started.text
        self.headers = {
            **HEADERS,
            "mcp-session-id": started.headers["mcp-session-id"],
            "mcp-protocol-version": "2025-11-25",
        }
        notified = self.http.post(
            self.url,
            headers=self.headers,
            content=json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        )
        assert notified.status_code == 202, notified.text

    def post(self, content: str) -> httpx2.Response:
        return self.http.post(self.url, headers=self.headers, content=content)


@pytest.fixture
def session(base_url: str) -> Iterator[Session]:
    with httpx2.Client(timeout=30) as http:
        yield Session(http, base_url)


def assert_parse_error_with_hint(response: httpx2.Response, message_id: int) -> dict[str, Any]:
    assert response.status_code == 400, response.text
    error = response.json()
    assert error["id"] == message_id
    assert error["error"]["code"] == -32700
    data = error["error"]["data"]
    assert data["code"] == "invalid_request"
    assert "lone UTF-16 surrogate (\\udcff)" in data["message"]
    assert "valid UTF-8" in data["hint"]
    assert error["error"]["message"] == f"{data['message']} {data['hint']}"
    return data


@pytest.mark.parametrize("where", UNPARSABLE)
def test_a_request_holding_a_lone_surrogate_gets_a_parse_error_with_a_hint(
    session: Session, store: tuple[Coffer, Seeded], where: str
) -> None:
    method, params = UNPARSABLE[where]
    assert_parse_error_with_hint(session.post(body(7, method, params)), 7)
    # The session still serves: a ping, and a real search.
    assert answer(session.post(body(8, "ping"))) == {"jsonrpc": "2.0", "id": 8, "result": {}}
    found = answer(
        session.post(
            body(
                9,
                "tools/call",
                {"name": "coffer__search_knowledge", "arguments": {"kb": "notes", "query": "retrieval"}},
            )
        )
    )
    assert found["id"] == 9
    assert store[1].alpha in {passage["document_id"] for passage in found["result"]["structuredContent"]["passages"]}


def test_the_parse_error_says_where_the_lone_surrogate_is(session: Session) -> None:
    method, params = UNPARSABLE["tool argument"]
    assert (
        "in params.arguments.query" in assert_parse_error_with_hint(session.post(body(7, method, params)), 7)["message"]
    )


def test_a_request_of_the_handshake_free_protocol_gets_the_same_parse_error(base_url: str) -> None:
    """Before: the SDK read it, and the tool answered that a one-character query was not 1 to 2000 characters."""
    method, params = UNPARSABLE["tool argument"]
    envelope = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}
    headers = {**HEADERS, "mcp-protocol-version": MODERN, "mcp-method": method, "mcp-name": params["name"]}
    with httpx2.Client(timeout=30) as http:
        response = http.post(f"{base_url}/mcp", headers=headers, content=body(7, method, {**params, "_meta": envelope}))
    assert_parse_error_with_hint(response, 7)
