"""MCP over streamable HTTP on loopback: the Python SDK client and the TypeScript SDK client."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from coffer_mcp import Coffer
from tests.web.conftest import TOKEN
from tests.web.support import WEB_TESTS, Seeded, running

pytestmark = pytest.mark.anyio

TS_CLIENT = WEB_TESTS / "mcp_client.mjs"
NODE_MODULES = WEB_TESTS / "node_modules" / "@modelcontextprotocol" / "sdk"


@pytest.fixture(scope="module")
def json_url(store: tuple[Coffer, Seeded]) -> Iterator[str]:
    """The server answering MCP with plain JSON instead of SSE streams."""
    with running(store[0], json_response=True) as url:
        yield url


async def search_over_http(client: Client) -> tuple[list[str], dict[str, Any]]:
    tools = await client.list_tools()
    result = await client.call_tool("coffer__search_knowledge", {"kb": "notes", "query": "retrieval", "top_k": 3})
    assert not result.is_error, result.content
    return [tool.name for tool in tools.tools], result.structured_content


def check_search(names: list[str], structured: dict[str, Any], seeded: Seeded) -> None:
    assert "coffer__search_knowledge" in names
    assert "coffer__read_document" in names
    assert structured["strategy"] == "keyword"
    found = {passage["document_id"] for passage in structured["passages"]}
    assert seeded.alpha in found


async def test_the_python_sdk_client_lists_tools_and_searches_over_streamable_http(
    base_url: str, store: tuple[Coffer, Seeded]
) -> None:
    with anyio.fail_after(30):
        async with Client(f"{base_url}/mcp") as client:
            names, structured = await search_over_http(client)
    check_search(names, structured, store[1])


async def test_the_python_sdk_client_works_with_json_responses(json_url: str, store: tuple[Coffer, Seeded]) -> None:
    with anyio.fail_after(30):
        async with Client(f"{json_url}/mcp") as client:
            names, structured = await search_over_http(client)
    check_search(names, structured, store[1])


async def test_the_python_sdk_client_connects_with_a_bearer_token(token_url: str, store: tuple[Coffer, Seeded]) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with anyio.fail_after(30):
        async with (
            httpx2.AsyncClient(headers=headers, timeout=20) as http,
            Client(streamable_http_client(f"{token_url}/mcp", http_client=http)) as client,
        ):
            names, structured = await search_over_http(client)
    check_search(names, structured, store[1])


async def test_the_python_sdk_client_without_the_token_cannot_connect(token_url: str) -> None:
    with anyio.fail_after(30):
        # The SDK reports the 401 as a generic error inside task groups; the status itself is
        # checked in test_web_security.
        with pytest.raises(Exception):  # noqa: B017, PT011
            async with Client(f"{token_url}/mcp", mode="legacy") as client:
                await client.list_tools()


DOCS_HTTP = WEB_TESTS.parents[1] / "docs" / "http.md"
DOCS_URL_LINE = 'URL, TOKEN = "http://127.0.0.1:8765/mcp", "your-token"'


def test_the_token_snippet_of_docs_http_md_connects_and_calls_a_tool(token_url: str) -> None:
    blocks = re.findall(r"```python\n(.+?)```", DOCS_HTTP.read_text(encoding="utf-8"), flags=re.DOTALL)
    snippet = next(block for block in blocks if "streamable_http_client" in block)
    assert DOCS_URL_LINE in snippet
    code = snippet.replace(DOCS_URL_LINE, f"URL, TOKEN = {f'{token_url}/mcp'!r}, {TOKEN!r}")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "'strategy': 'keyword'" in done.stdout
    assert "'knowledge_bases': ['notes']" in done.stdout


# -- the TypeScript SDK --------------------------------------------------------------------------


def run_ts_client(url: str, token: str | None = None) -> dict[str, Any]:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed (the TypeScript SDK test needs Node 18+)")
    if not NODE_MODULES.is_dir():
        pytest.skip("tests/web/node_modules is missing: run 'npm ci' in tests/web (.ci/run does)")
    env = {**os.environ, "COFFER_TEST_TOKEN": token or ""}
    done = subprocess.run(
        [node, str(TS_CLIENT), f"{url}/mcp", "notes", "retrieval"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=WEB_TESTS,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_typescript_sdk_client_lists_tools_and_searches_over_streamable_http(
    base_url: str, store: tuple[Coffer, Seeded]
) -> None:
    out = run_ts_client(base_url)
    assert out["isError"] is False
    check_search(out["tools"], out["structured"], store[1])


def test_the_typescript_sdk_client_connects_with_a_bearer_token(token_url: str, store: tuple[Coffer, Seeded]) -> None:
    out = run_ts_client(token_url, TOKEN)
    check_search(out["tools"], out["structured"], store[1])
