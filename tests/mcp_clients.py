"""Real MCP clients of a Coffer server over each transport the tests of the MCP surface use.

- ``memory``: the SDK's in-process client, which speaks the 2026-07-28 protocol (no handshake);
- ``legacy``: the same server through the initialize handshake (2025-11-25), as most clients speak it;
- ``stdio``: ``coffer serve`` started as a subprocess, as an MCP client starts it.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.types import CallToolResult, Implementation

from coffer_mcp import Coffer
from coffer_mcp.mcp_server import build_server
from tests.conftest import installed_script

__all__ = [
    "CLIENT",
    "TRANSPORTS",
    "UNPARSABLE",
    "call",
    "call_error",
    "client_for",
    "error_of",
    "open_client",
    "stdio_client",
    "structured",
]

CLIENT = Implementation(name="test-agent", version="1.0")
TRANSPORTS = ("memory", "legacy", "stdio")
# Requests no SDK client can send, by where they hold a lone surrogate (method, params), for raw
# JSON-RPC over stdio and HTTP. json.dumps writes "\udcff" as that escape: a lone surrogate, no Unicode
# character.
LONE = "\udcff"
UNPARSABLE = {
    "tool argument": ("tools/call", {"name": "coffer__search_knowledge", "arguments": {"kb": "notes", "query": LONE}}),
    "tool name": ("tools/call", {"name": f"coffer__search_{LONE}", "arguments": {"kb": "notes", "query": "graphs"}}),
    "prompt argument": ("prompts/get", {"name": "research", "arguments": {"question": LONE}}),
    "completion value": (
        "completion/complete",
        {"ref": {"type": "ref/prompt", "name": "summarize_document"}, "argument": {"name": "kb", "value": LONE}},
    ),
    "resource URI": ("resources/read", {"uri": f"coffer://notes/{LONE}"}),
}


def open_client(
    transport: str, service: Coffer | None, home: Path, *, env: dict[str, str] | None = None, **options: Any
) -> Client:
    """A client of a server over ``service`` (``memory``, ``legacy``) or of ``coffer serve`` on ``home`` (``stdio``).

    Args:
        transport: One of ``TRANSPORTS``.
        service: The core the in-process server wraps (unused for ``stdio``).
        home: The ``COFFER_HOME`` of the subprocess.
        env: More environment for the subprocess (its embedding provider is ``none`` unless set).
        **options: ``Client`` keywords (callbacks, ``mode``, ``log_level``).
    """
    if transport == "stdio":
        environment = {**os.environ, "COFFER_HOME": str(home), "COFFER_EMBEDDING_PROVIDER": "none", **(env or {})}
        params = StdioServerParameters(command=sys.executable, args=["-m", "coffer_mcp", "serve"], env=environment)
        return Client(params, client_info=CLIENT, **options)
    assert service is not None, "an in-process client needs the service"
    mode = "legacy" if transport == "legacy" else "auto"
    return Client(build_server(service), client_info=CLIENT, **{"mode": mode, **options})


def structured(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content[0].text
    assert result.structured_content is not None
    return result.structured_content


def error_of(result: CallToolResult) -> dict[str, Any]:
    assert result.is_error
    return json.loads(result.content[0].text)


def client_for(coffer: Coffer, **kwargs) -> Client:
    """An in-memory client session with a server over ``coffer``."""
    return Client(build_server(coffer, **kwargs), client_info=CLIENT)


def stdio_client(home: Path) -> Client:
    """A client of ``coffer serve`` started as the README says, as a subprocess."""
    command = installed_script("coffer") or sys.executable
    args = ["serve"] if command != sys.executable else ["-m", "coffer_mcp", "serve"]
    params = StdioServerParameters(command=command, args=args, env={**os.environ, "COFFER_HOME": str(home)})
    return Client(params, client_info=CLIENT)


async def call(client: Client, tool: str, **arguments) -> dict:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content[0].text
    return result.structured_content


async def call_error(client: Client, tool: str, **arguments) -> dict:
    result = await client.call_tool(tool, arguments)
    assert result.is_error
    return json.loads(result.content[0].text)
