"""Over streamable HTTP on loopback: log messages and confirmations ride the call's own stream."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp.types import ElicitResult, LoggingMessageNotificationParams, PromptReference

from coffer_mcp import Coffer, load_settings
from tests.fakes import HashEmbedder
from tests.mcp_clients import error_of, structured
from tests.web.support import running

pytestmark = pytest.mark.anyio


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Coffer]:
    """A store whose embedder is down, with a vector knowledge base 'notes'."""
    embedder = HashEmbedder()
    embedder.failing = True
    with Coffer(load_settings(home=tmp_path / "home"), embedder=embedder) as coffer:
        coffer.create_kb("notes", vector=True)
        yield coffer


async def yes(context: Any, params: Any) -> ElicitResult:
    return ElicitResult(action="accept", content={"confirm": True})


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_an_http_client_hears_about_a_degraded_embed_and_confirms_a_deletion(service: Coffer, mode: str) -> None:
    received: list[LoggingMessageNotificationParams] = []

    async def on_log(params: LoggingMessageNotificationParams) -> None:
        received.append(params)

    options: dict[str, Any] = {"log_level": "warning"} if mode == "auto" else {}
    with running(service) as url, anyio.fail_after(60):
        async with Client(
            f"{url}/mcp", mode=mode, logging_callback=on_log, elicitation_callback=yes, **options
        ) as client:
            if mode == "legacy":
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", MCPDeprecationWarning)
                    await client.set_logging_level("warning")
            added = await client.call_tool(
                "coffer__add_document", {"kb": "notes", "filename": "a.md", "content": "# A"}
            )
            listed = await client.complete(
                PromptReference(type="ref/prompt", name="research"), {"name": "kb", "value": ""}
            )
            deleted = await client.call_tool("coffer__delete_knowledge_base", {"name": "notes"})
    assert structured(added)["status"] == "created"
    assert any(m.logger == "coffer" and "could not be embedded" in str(m.data) for m in received)
    assert listed.completion.values == ["*", "notes"]
    assert structured(deleted)["deleted"] is True


async def test_with_json_responses_a_confirmation_falls_back_to_the_confirm_argument(service: Coffer) -> None:
    # A JSON response carries no request to the client, so nobody can be asked mid-call.
    with running(service, json_response=True) as url, anyio.fail_after(60):
        async with Client(f"{url}/mcp", mode="legacy", elicitation_callback=yes) as client:
            refused = await client.call_tool("coffer__delete_knowledge_base", {"name": "notes"})
            deleted = await client.call_tool("coffer__delete_knowledge_base", {"name": "notes", "confirm": True})
    assert error_of(refused)["code"] == "confirmation_required"
    assert structured(deleted)["deleted"] is True
