"""MCP logging through real clients: ``logging/setLevel`` and the log messages a user sees when embedding degrades."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp.types import LoggingMessageNotificationParams

from coffer_mcp import Coffer, load_settings
from coffer_mcp.embed.base import CooldownEmbedder
from tests.embed.fake_openai_server import fake_openai_server
from tests.fakes import HashEmbedder
from tests.mcp_clients import open_client, structured

pytestmark = pytest.mark.anyio

NOTE = "# Fermentation\n\nA sourdough starter ferments flour and water for days.\n"


class Messages:
    """A client's logging callback and what it received."""

    def __init__(self) -> None:
        self.received: list[LoggingMessageNotificationParams] = []

    async def __call__(self, params: LoggingMessageNotificationParams) -> None:
        self.received.append(params)

    def of(self, logger: str) -> list[str]:
        return [str(m.data) for m in self.received if m.logger == logger]


@pytest.fixture
def embedder() -> HashEmbedder:
    return HashEmbedder()


@pytest.fixture
def service(home: Path, backend_settings: dict[str, str], embedder: HashEmbedder) -> Iterator[Coffer]:
    """A Coffer whose embedder the test can break, with an empty vector knowledge base 'notes'."""
    with Coffer(load_settings(home=home, **backend_settings), embedder=embedder) as coffer:
        coffer.create_kb("notes", vector=True)
        yield coffer


async def set_level(client: Client, level: str) -> None:
    # The SDK deprecates logging as of 2026-07-28; clients of the handshake versions still set it.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        await client.set_logging_level(level)


async def add_note(client: Client, name: str = "fermentation.md") -> dict:
    return structured(
        await client.call_tool("coffer__add_document", {"kb": "notes", "filename": name, "content": NOTE})
    )


async def test_a_client_that_set_a_level_hears_that_a_document_was_left_without_vectors(
    service: Coffer, home: Path, embedder: HashEmbedder
) -> None:
    messages = Messages()
    embedder.failing = True
    async with open_client("legacy", service, home, logging_callback=messages) as client:
        await set_level(client, "info")
        added = await add_note(client)
    assert added["status"] == "created"  # the write itself succeeded, keyword-only
    [notice] = messages.of("coffer")
    assert notice.startswith("1 document of 'notes' could not be embedded")
    assert "keyword only" in notice
    assert [m.level for m in messages.received if m.logger == "coffer"] == ["warning"]
    # The core's own warning says why.
    assert any("the test provider is down" in text for text in messages.of("coffer_mcp.indexing.vectorize"))


async def test_a_document_skipped_while_the_provider_cools_down_is_reported_too(
    service: Coffer, home: Path, embedder: HashEmbedder
) -> None:
    # While a provider cools down Coffer does not call it, so nothing fails and nothing is logged.
    embedder.cooling_down = True
    messages = Messages()
    async with open_client("legacy", service, home, logging_callback=messages) as client:
        await add_note(client)
        await add_note(client, "second.md")
    assert embedder.calls == 0
    notices = messages.of("coffer")
    assert notices[0].startswith("1 document of 'notes' could not be embedded")
    assert "'notes' has 2 waiting" in notices[1]


async def test_switching_vectors_on_while_the_provider_is_down_is_reported(
    service: Coffer, home: Path, embedder: HashEmbedder
) -> None:
    service.create_kb("plain")
    service.add_document("plain", "a.md", NOTE)
    service.add_document("plain", "b.md", "# Other\n\nsomething else entirely")
    embedder.failing = True
    messages = Messages()
    async with open_client("legacy", service, home, logging_callback=messages) as client:
        updated = await client.call_tool("coffer__update_knowledge_base", {"name": "plain", "vector": True})
    assert structured(updated)["documents_degraded"] == 2
    [notice] = messages.of("coffer")
    assert notice.startswith("2 documents of 'plain' could not be embedded")


async def test_nothing_is_said_when_embedding_works(service: Coffer, home: Path) -> None:
    messages = Messages()
    async with open_client("legacy", service, home, logging_callback=messages) as client:
        await set_level(client, "debug")
        await add_note(client)
    assert messages.received == []


async def test_a_level_above_warning_silences_the_warning(service: Coffer, home: Path, embedder: HashEmbedder) -> None:
    messages = Messages()
    embedder.failing = True
    async with open_client("legacy", service, home, logging_callback=messages) as client:
        await set_level(client, "error")
        await add_note(client)
    assert messages.received == []


async def test_warnings_reach_a_client_that_set_no_level(service: Coffer, home: Path, embedder: HashEmbedder) -> None:
    messages = Messages()
    embedder.failing = True
    async with open_client("legacy", service, home, logging_callback=messages) as client:
        await add_note(client)
    assert len(messages.of("coffer")) == 1


async def test_one_clients_level_is_not_another_clients(service: Coffer, home: Path, embedder: HashEmbedder) -> None:
    quiet, default = Messages(), Messages()
    embedder.failing = True
    async with (
        open_client("legacy", service, home, logging_callback=quiet) as first,
        open_client("legacy", service, home, logging_callback=default) as second,
    ):
        await set_level(first, "critical")
        await add_note(first, "one.md")
        await add_note(second, "two.md")
    assert quiet.received == []
    assert len(default.of("coffer")) == 1


@pytest.mark.parametrize(("opt_in", "heard"), [("warning", 1), ("error", 0), (None, 0)])
async def test_from_2026_07_28_a_request_hears_what_it_opts_in_to(
    service: Coffer, home: Path, embedder: HashEmbedder, opt_in: str | None, heard: int
) -> None:
    messages = Messages()
    embedder.failing = True
    async with open_client("memory", service, home, logging_callback=messages, log_level=opt_in) as client:
        assert client.protocol_version == "2026-07-28"
        await add_note(client)
    assert len(messages.of("coffer")) == heard


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_coffer_serve_over_stdio_reports_a_failing_embedding_provider(home: Path, mode: str) -> None:
    messages = Messages()
    with fake_openai_server() as provider:
        provider.reply = lambda body: (400, {"error": {"message": "model not loaded", "type": "invalid_request"}})
        env = {
            "COFFER_EMBEDDING_PROVIDER": "openai",
            "COFFER_EMBEDDING_BASE_URL": provider.base_url,
            "COFFER_EMBEDDING_MODEL": "fake-embed",
            "NO_PROXY": "127.0.0.1",
        }
        options = {"mode": mode, "log_level": "warning"} if mode == "auto" else {"mode": mode}
        with anyio.fail_after(90):
            async with open_client("stdio", None, home, env=env, logging_callback=messages, **options) as client:
                created = await client.call_tool("coffer__create_knowledge_base", {"name": "notes", "vector": True})
                assert not created.is_error, created.content
                added = await add_note(client)
    assert added["status"] == "created"
    [notice] = messages.of("coffer")
    assert "could not be embedded" in notice
    assert any("model not loaded" in text for text in messages.of("coffer_mcp.indexing.vectorize"))


async def test_a_reindex_or_new_settings_that_cannot_embed_say_so_in_the_result_and_to_the_user(
    home: Path, backend_settings: dict[str, str]
) -> None:
    # The report's case: the provider failed on an earlier write and now cools down, so the reindex
    # calls nothing, fails nothing and logs nothing, and the degraded count does not grow.
    now = [0.0]
    provider = HashEmbedder()
    embedder = CooldownEmbedder(provider, cooldown_seconds=60, clock=lambda: now[0])
    with Coffer(load_settings(home=home, **backend_settings), embedder=embedder) as service:
        service.create_kb("notes", vector=True)
        provider.failing = True
        service.add_document("notes", "fermentation.md", NOTE)
        service.add_document("notes", "rye.md", "# Rye\n\nRye flour holds more water than wheat.\n")
        messages = Messages()
        async with open_client("legacy", service, home, logging_callback=messages) as client:
            reindexed = structured(await client.call_tool("coffer__reindex_knowledge_base", {"kb": "notes"}))
            updated = structured(
                await client.call_tool("coffer__update_knowledge_base", {"name": "notes", "chunk_size": 512})
            )
            now[0] += 61  # the provider is back
            provider.failing = False
            healthy = structured(await client.call_tool("coffer__reindex_knowledge_base", {"kb": "notes"}))
    assert reindexed["embedded"] == 0
    assert reindexed["documents_degraded"] == 2
    assert updated["documents_degraded"] == 2
    for result in (reindexed, updated):
        assert result["warning"].startswith("2 documents of 'notes' could not be embedded")
        assert "the test provider is down" in result["warning"]  # the provider's error, as the CLI's note has it
        assert "keyword only" in result["warning"]
        assert "coffer doctor" in result["warning"]
    assert messages.of("coffer") == [reindexed["warning"], updated["warning"]]
    assert healthy["embedded"] == 2
    assert healthy["documents_degraded"] == 0
    assert "warning" not in healthy
