"""How large an MCP request over HTTP may be: as large as ``max_document_bytes`` lets a document be.

A real server on loopback and the SDK's own client: the SDK's transport alone refuses any body
over 4 MiB with a plain-text 413, which its client shows as "Server returned an error response".
"""

from __future__ import annotations

import base64
from collections.abc import Iterator

import anyio
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_REQUEST

from coffer_mcp import Coffer
from tests.web.support import make_coffer, running

pytestmark = pytest.mark.anyio

MB = 1024 * 1024
MAX_DOCUMENT_BYTES = 4 * MB  # the request limit is then 9 MiB: twice this, plus 1 MiB


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Coffer, str]]:
    with make_coffer(tmp_path_factory.mktemp("limit") / "home", max_document_bytes=MAX_DOCUMENT_BYTES) as service:
        service.create_kb("big", "Large uploads")
        with running(service) as url:
            yield service, url


def sized_markdown(size: int) -> str:
    line = "Lorem ipsum dolor sit amet, consectetur adipiscing elit.\n"
    return "# Sized\n\n" + line * (size // len(line))


async def test_a_document_whose_base64_request_is_over_4_mib_is_added_over_http(limited: tuple[Coffer, str]) -> None:
    service, url = limited
    text = sized_markdown(MAX_DOCUMENT_BYTES - 4096)
    content = base64.b64encode(text.encode("utf-8")).decode("ascii")
    assert len(content) > 4 * MB  # over the SDK's default request limit
    with anyio.fail_after(120):
        async with Client(f"{url}/mcp") as client:
            result = await client.call_tool(
                "coffer__add_document",
                {"kb": "big", "filename": "sized.md", "content": content, "content_encoding": "base64"},
            )
    assert not result.is_error, result.content
    assert result.structured_content["status"] == "created"
    original = service.settings.home / "knowledge" / "big" / "raw" / f"{result.structured_content['document_id']}.md"
    assert original.read_bytes() == text.encode("utf-8")


async def test_a_request_over_the_limit_gets_a_too_large_error_with_a_hint(limited: tuple[Coffer, str]) -> None:
    _, url = limited
    content = sized_markdown(10 * MB)  # over 9 MiB: twice max_document_bytes plus 1 MiB
    with anyio.fail_after(60):
        async with Client(f"{url}/mcp") as client:
            with pytest.raises(MCPError) as caught:
                await client.call_tool("coffer__add_document", {"kb": "big", "filename": "huge.md", "content": content})
            # The session survives the refusal.
            listed = await client.call_tool("coffer__list_documents", {"kb": "big"})
    error = caught.value
    assert error.code == INVALID_REQUEST
    assert error.data["code"] == "too_large"
    assert f"{9 * MB:,} bytes" in error.message
    assert "max_document_bytes" in error.data["hint"]
    assert error.message == error.data["message"]
    assert "huge.md" not in str(listed.structured_content)
