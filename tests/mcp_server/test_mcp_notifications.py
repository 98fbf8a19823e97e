"""Clients hear about changes: resource subscriptions and list changes, batched, in both protocol eras.

Real clients of the SDK: in memory, ``coffer serve`` over stdio (a process of its own, so the test's
writes are another process's to it), and streamable HTTP on loopback; up to 2025-11-25 through
``resources/subscribe``, from 2026-07-28 through ``subscriptions/listen``. Every wait is a
condition with a generous deadline: a notification must arrive before the next change is made.
"""

from __future__ import annotations

import contextlib
import math
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.subscriptions import ResourcesListChanged, ResourceUpdated
from mcp.types import (
    EmptyResult,
    Implementation,
    ResourceListChangedNotification,
    ResourceUpdatedNotification,
    SubscribeRequest,
    SubscribeRequestParams,
    UnsubscribeRequest,
    UnsubscribeRequestParams,
)

from bench.http_load import http_server, server_env
from coffer_mcp import Coffer, load_settings
from coffer_mcp.mcp_server import build_server
from coffer_mcp.mcp_server._notify import BATCH_SECONDS
from tests.web.support import running

pytestmark = pytest.mark.anyio

CLIENT = Implementation(name="listener", version="1")
LEGACY, MODERN = "2025-11-25", "2026-07-28"
ERAS = (LEGACY, MODERN)
WAIT = 30.0  # a generous bound: the box is shared; the report gives the latency measured
LIST = "list"
BURST = 100  # edits of one document, and as many documents added, as fast as the core takes them


class Ear:
    """What one client heard, in order: a document URI for ``resources/updated``, ``LIST`` for a list change."""

    def __init__(self) -> None:
        self._send, self._receive = anyio.create_memory_object_stream[tuple[float, str]](100_000)
        self.heard: list[tuple[float, str]] = []

    def hear(self, what: str) -> None:
        self._send.send_nowait((time.monotonic(), what))

    async def next(self, what: str, *, after: float = 0.0) -> float:
        """Wait for ``what`` to be heard (again, or first after the moment ``after``); when it arrived."""
        with anyio.fail_after(WAIT):
            while True:
                at, got = await self._receive.receive()
                self.heard.append((at, got))
                if got == what and at > after:
                    return at

    def settle(self) -> list[str]:
        """Everything heard so far (including what was waited for)."""
        while True:
            try:
                self.heard.append(self._receive.receive_nowait())
            except anyio.WouldBlock:
                return [what for _, what in self.heard]

    def close(self) -> None:
        self._send.close()
        self._receive.close()


@pytest.fixture
def make_ear() -> Iterator[Callable[[], Ear]]:
    """Makes ears, closed when the test ends."""
    made: list[Ear] = []

    def make() -> Ear:
        made.append(Ear())
        return made[-1]

    yield make
    for each in made:
        each.close()


@pytest.fixture
def store(home: Path) -> Iterator[Coffer]:
    with Coffer(load_settings(home=home, embedding_provider="none")) as service:
        yield service


def uri(kb: str, doc_id: str) -> str:
    return f"coffer://{kb}/{doc_id}"


def _hearing(ear: Ear) -> Callable[[Any], Any]:
    """A 2025-11-25 client's message handler that tells ``ear`` what it heard."""

    async def heard(message: Any) -> None:
        if isinstance(message, ResourceUpdatedNotification):
            ear.hear(str(message.params.uri))
        elif isinstance(message, ResourceListChangedNotification):
            ear.hear(LIST)

    return heard


@contextlib.asynccontextmanager
async def client(where: str, era: str, service: Coffer, ear: Ear) -> AsyncIterator[Client]:
    """A client of a server over ``service``'s home: ``memory``, ``stdio`` (its own process) or ``http``."""

    options: dict[str, Any] = {"client_info": CLIENT, "mode": "legacy" if era == LEGACY else "auto"}
    if era == LEGACY:
        options["message_handler"] = _hearing(ear)
    with contextlib.ExitStack() as stack:
        if where == "memory":
            target: Any = build_server(service)
        elif where == "http":
            target = f"{stack.enter_context(running(service))}/mcp"
        else:
            env = {k: v for k, v in os.environ.items() if not k.startswith("COFFER_")}
            env.update({"COFFER_HOME": str(service.settings.home), "COFFER_EMBEDDING_PROVIDER": "none"})
            target = StdioServerParameters(command=sys.executable, args=["-m", "coffer_mcp", "serve"], env=env)
        async with Client(target, **options) as connected:
            assert connected.protocol_version == era
            yield connected


@contextlib.asynccontextmanager
async def listening(
    connected: Client, era: str, ear: Ear, uris: list[str], *, lists: bool = False
) -> AsyncIterator[None]:
    """Subscribe to ``uris`` (and list changes) the way the client's era does."""
    if era == LEGACY:
        for each in uris:
            await connected.session.send_request(SubscribeRequest(params=SubscribeRequestParams(uri=each)), EmptyResult)
        if lists:
            await connected.list_resources()
        yield
        return
    async with connected.listen(resource_subscriptions=uris, resources_list_changed=lists) as events:

        async def feed() -> None:
            async for event in events:
                if isinstance(event, ResourceUpdated):
                    ear.hear(event.uri)
                elif isinstance(event, ResourcesListChanged):
                    ear.hear(LIST)

        async with anyio.create_task_group() as group:
            group.start_soon(feed)
            yield
            group.cancel_scope.cancel()


async def in_thread(call: Any, *args: Any, **kwargs: Any) -> Any:
    return await anyio.to_thread.run_sync(lambda: call(*args, **kwargs))


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("where", ["memory", "stdio", "http"])
async def test_a_subscribed_client_hears_of_every_change_to_its_documents_before_the_next_one(
    store: Coffer, tmp_path: Path, where: str, era: str, make_ear: Callable[[], Ear]
) -> None:
    store.create_kb("notes")
    doc = store.add_document("notes", "a.md", "# A\n\nalpha").document_id
    followed = tmp_path / "followed"
    followed.mkdir()
    (followed / "f.md").write_text("# F\n\nfirst words\n", encoding="utf-8")
    store.follow_folder("notes", followed)
    source = store.list_documents("notes", "F", 10, 0).documents[0].document_id
    a, f = uri("notes", doc), uri("notes", source)
    ear = make_ear()
    # The stdio server runs its own watcher; in this process, the test runs one for the others.
    watcher = contextlib.nullcontext() if where == "stdio" else store.watching()
    with watcher:
        async with client(where, era, store, ear) as connected, listening(connected, era, ear, [a, f], lists=True):
            await in_thread(store.edit_document, "notes", doc, "# A\n\nedited through the service")
            await ear.next(a)
            (store.paths.kb("notes").doc(doc)).write_text(
                (store.paths.kb("notes").doc(doc)).read_text(encoding="utf-8") + "\nedited by hand\n", encoding="utf-8"
            )
            await ear.next(a)  # once the watcher has taken the edit up
            (followed / "f.md").write_text("# F\n\nsecond words\n", encoding="utf-8")
            await ear.next(f)  # once the followed folder is synced
            await in_thread(store.add_document, "notes", "b.md", "# B\n\nbeta")
            await ear.next(LIST)
            await in_thread(store.delete_document, "notes", doc)
            await ear.next(a)
            await ear.next(LIST)


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("where", ["memory", "http"])
async def test_an_edit_through_another_client_reaches_the_subscriber(
    store: Coffer, where: str, era: str, make_ear: Callable[[], Ear]
) -> None:
    store.create_kb("notes")
    doc = store.add_document("notes", "a.md", "# A\n\nalpha").document_id
    ear, other_ear = make_ear(), make_ear()
    async with (
        client(where, era, store, ear) as subscriber,
        listening(subscriber, era, ear, [uri("notes", doc)]),
        client("memory", LEGACY, store, other_ear) as editor,
    ):
        result = await editor.call_tool(
            "coffer__edit_document", {"kb": "notes", "doc_id": doc, "content": "# A\n\nnew"}
        )
        assert not result.is_error
        await ear.next(uri("notes", doc))
    assert other_ear.settle() == []  # the editor subscribed to nothing, and listed nothing


@pytest.mark.parametrize("era", ERAS)
async def test_a_change_made_by_the_command_line_in_another_process_reaches_the_subscriber(
    store: Coffer, home: Path, tmp_path: Path, era: str, make_ear: Callable[[], Ear]
) -> None:
    store.create_kb("notes")
    doc = store.add_document("notes", "a.md", "# A\n\nalpha").document_id
    env = {k: v for k, v in os.environ.items() if not k.startswith("COFFER_")}
    env.update({"COFFER_HOME": str(home), "COFFER_EMBEDDING_PROVIDER": "none"})
    (tmp_path / "b.md").write_text("# B\n\nbeta\n", encoding="utf-8")
    cli = [sys.executable, "-m", "coffer_mcp", "kb"]
    ear = make_ear()
    async with (
        client("memory", era, store, ear) as connected,
        listening(connected, era, ear, [uri("notes", doc)], lists=True),
    ):
        await anyio.run_process([*cli, "tag", "notes", doc, "reviewed"], env=env)
        await ear.next(uri("notes", doc))
        await anyio.run_process([*cli, "ingest", "notes", str(tmp_path / "b.md")], env=env, stdout=subprocess.DEVNULL)
        await ear.next(LIST)


@pytest.mark.parametrize("era", ERAS)
async def test_knowledge_bases_made_and_deleted_change_the_resource_list(
    store: Coffer, era: str, make_ear: Callable[[], Ear]
) -> None:
    ear = make_ear()
    async with client("memory", era, store, ear) as connected, listening(connected, era, ear, [], lists=True):
        await in_thread(store.create_kb, "papers")
        await in_thread(store.add_document, "papers", "a.md", "# A\n\nalpha")
        await ear.next(LIST)
        await in_thread(store.delete_kb, "papers")
        await ear.next(LIST)


@pytest.mark.parametrize("era", ERAS)
async def test_a_burst_of_changes_sends_at_most_one_notification_per_resource_per_second(
    store: Coffer, era: str, make_ear: Callable[[], Ear]
) -> None:
    store.create_kb("notes")
    doc = store.add_document("notes", "a.md", "# A\n\nalpha").document_id
    ear = make_ear()
    async with (
        client("memory", era, store, ear) as connected,
        listening(connected, era, ear, [uri("notes", doc)], lists=True),
    ):

        def burst() -> float:
            for i in range(BURST):
                final = time.monotonic()
                store.edit_document("notes", doc, f"# A\n\nversion {i}")
                store.add_document("notes", f"n{i}.md", f"# N{i}\n\nnote {i}")
            return final

        started = time.monotonic()
        final = await in_thread(burst)
        # The last changes are heard after they were made: the batch holds changes back, never drops them.
        await ear.next(uri("notes", doc), after=final)
        last = await ear.next(LIST, after=final)
        heard = ear.settle()
    # At most one of each per second (the first at once), however long the burst took on this box.
    most = math.ceil((last - started) / BATCH_SECONDS) + 1
    assert 2 <= heard.count(uri("notes", doc)) <= most
    assert heard.count(LIST) <= most
    assert len(heard) < 2 * BURST


@pytest.mark.parametrize("era", ERAS)
async def test_a_client_hears_nothing_of_documents_it_did_not_subscribe_to(
    store: Coffer, era: str, make_ear: Callable[[], Ear]
) -> None:
    store.create_kb("notes")
    mine = store.add_document("notes", "mine.md", "# Mine\n\nalpha").document_id
    theirs = store.add_document("notes", "theirs.md", "# Theirs\n\nbeta").document_id
    ear = make_ear()
    async with client("memory", era, store, ear) as connected, listening(connected, era, ear, [uri("notes", mine)]):
        await in_thread(store.edit_document, "notes", theirs, "# Theirs\n\nchanged")
        await in_thread(store.edit_document, "notes", mine, "# Mine\n\nchanged after theirs")
        await ear.next(uri("notes", mine))
        await in_thread(store.edit_document, "notes", mine, "# Mine\n\nchanged again")
        await ear.next(uri("notes", mine))  # a batch later: anything about theirs would have come by now
    assert uri("notes", theirs) not in ear.settle()


async def test_an_unsubscribed_document_is_heard_of_no_more(store: Coffer, make_ear: Callable[[], Ear]) -> None:
    store.create_kb("notes")
    kept = store.add_document("notes", "kept.md", "# Kept\n\nalpha").document_id
    dropped = store.add_document("notes", "dropped.md", "# Dropped\n\nbeta").document_id
    ear = make_ear()
    uris = [uri("notes", kept), uri("notes", dropped)]
    async with client("memory", LEGACY, store, ear) as connected, listening(connected, LEGACY, ear, uris):
        request = UnsubscribeRequest(params=UnsubscribeRequestParams(uri=uri("notes", dropped)))
        await connected.session.send_request(request, EmptyResult)
        await in_thread(store.edit_document, "notes", dropped, "# Dropped\n\nchanged")
        await in_thread(store.edit_document, "notes", kept, "# Kept\n\nchanged")
        await ear.next(uri("notes", kept))
        await in_thread(store.edit_document, "notes", kept, "# Kept\n\nchanged again")
        await ear.next(uri("notes", kept))
    assert uri("notes", dropped) not in ear.settle()


@pytest.mark.parametrize("era", ERAS)
async def test_the_server_declares_subscriptions_and_list_changes_of_resources_only(
    store: Coffer, era: str, make_ear: Callable[[], Ear]
) -> None:
    async with client("memory", era, store, make_ear()) as connected:
        capabilities = connected.server_capabilities
    assert capabilities.resources is not None
    assert (capabilities.resources.subscribe, capabilities.resources.list_changed) == (True, True)
    assert capabilities.tools is not None
    assert capabilities.prompts is not None
    assert not capabilities.tools.list_changed
    assert not capabilities.prompts.list_changed


async def test_subscribing_to_what_is_not_a_document_is_refused_with_a_hint(
    store: Coffer, make_ear: Callable[[], Ear]
) -> None:
    from mcp.shared.exceptions import MCPError

    async with client("memory", LEGACY, store, make_ear()) as connected:
        request = SubscribeRequest(params=SubscribeRequestParams(uri="file:///etc/passwd"))
        with pytest.raises(MCPError) as refused:
            await connected.session.send_request(request, EmptyResult)
    assert refused.value.error.data["code"] == "invalid_argument"
    assert "coffer://{kb}/{doc_id}" in refused.value.error.data["hint"]


@pytest.mark.parametrize("era", ERAS)
async def test_a_change_made_through_another_server_on_the_same_postgresql_reaches_a_subscriber(
    home: Path, postgres_url: str, era: str, make_ear: Callable[[], Ear]
) -> None:
    # A team's deployment (docs/deploy.md): two servers share the knowledge/ folder and one
    # PostgreSQL database. Nothing tells the first of the second's writes but the index itself.
    env = server_env(home, {"COFFER_INDEX_BACKEND": "postgres", "COFFER_DATABASE_URL": postgres_url})
    with Coffer(load_settings(env, home=home)) as core:
        core.create_kb("notes")
        doc = core.add_document("notes", "a.md", "# A\n\nalpha").document_id
    ear = make_ear()
    options: dict[str, Any] = {"client_info": CLIENT, "mode": "legacy" if era == LEGACY else "auto"}
    if era == LEGACY:
        options["message_handler"] = _hearing(ear)
    with http_server(home, env) as first, http_server(home, env) as second:
        async with (
            Client(first.mcp_url, **options) as subscriber,
            listening(subscriber, era, ear, [uri("notes", doc)], lists=True),
            Client(second.mcp_url, client_info=CLIENT) as editor,
        ):
            edit = {"kb": "notes", "doc_id": doc, "content": "# A\n\nchanged on the other server"}
            assert not (await editor.call_tool("coffer__edit_document", edit)).is_error
            await ear.next(uri("notes", doc))
            add = {"kb": "notes", "filename": "b.md", "content": "# B\n\nadded on the other server"}
            assert not (await editor.call_tool("coffer__add_document", add)).is_error
            await ear.next(LIST)
    assert "Traceback" not in "".join(first.stderr + second.stderr)
