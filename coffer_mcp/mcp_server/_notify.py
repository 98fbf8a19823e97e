"""Clients hear about changes: resource subscriptions and list-changed notifications, batched.

Two protocol eras, one source of changes (``services.changes.ChangeFeed``, which compares the index
with what it said before, so another process's or another server's writes count like ours):

- up to 2025-11-25, ``resources/subscribe`` / ``resources/unsubscribe`` add and drop document URIs
  per connection, and ``notifications/resources/updated`` goes out on the connection's own channel
  (stdio, or the HTTP session's GET stream); a connection that has listed the resources gets
  ``notifications/resources/list_changed`` when a document or knowledge base is added or deleted;
- from 2026-07-28, each ``subscriptions/listen`` request is one stream carrying what its filter
  asked for (``resourceSubscriptions``, ``resourcesListChanged``), served by the SDK's own
  ``ListenHandler`` over a bus of its own, so every stream is batched apart.

A thread of the ``Notifier`` looks for changes while anyone listens: at once when this process
wrote (the registry wakes it), else every ``POLL_SECONDS`` (other processes' writes), never sooner
than a few times what its last look cost. Each client gets at most one notification per resource,
and one list change, per ``BATCH_SECONDS``: the first change of a burst goes out at once, the rest
of the burst in one notification per resource when the second is up.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.session import ServerSession
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ResourcesListChanged, ResourceUpdated
from mcp.shared.exceptions import MCPError
from mcp.types import (
    INTERNAL_ERROR,
    EmptyResult,
    SubscribeRequestParams,
    SubscriptionsListenRequestParams,
    SubscriptionsListenResult,
    UnsubscribeRequestParams,
)
from mcp.types.version import MODERN_PROTOCOL_VERSIONS

from coffer_mcp.errors import CofferError, InvalidArgumentError
from coffer_mcp.mcp_server._prompts import invalid_params
from coffer_mcp.mcp_server._uris import DOCUMENT_TEMPLATE, document_of, document_uri
from coffer_mcp.services.changes import Change, ChangeFeed

__all__ = ["BATCH_SECONDS", "POLL_SECONDS", "Notifier"]

log = logging.getLogger(__name__)

POLL_SECONDS = 0.5
"""How often the notifier looks for other processes' writes while anyone listens."""
BATCH_SECONDS = 1.0
"""At most one notification per resource (and one list change) per client in this time."""
MIN_GAP_SECONDS = 0.05
"""The least time between two looks; also at least ``LOOK_SHARE`` times what the last one cost."""
LOOK_SHARE = 4
SEND_SECONDS = 5.0
"""How long a delivery to one client may take before it is given up (a client that stopped reading)."""
MAX_LISTENERS = 1024


@dataclass(eq=False)
class _Listener:
    """One client's interest: a handshake-era connection, or one ``subscriptions/listen`` stream."""

    token: anyio.lowlevel.EventLoopToken
    deliver: Callable[[list[str], bool], Awaitable[None]]
    uris: dict[str, str] = field(default_factory=dict)
    """The documents it subscribed to: their URI as Coffer writes it, and as the client did."""
    lists: bool = False
    pending: set[str] = field(default_factory=set)
    list_pending: bool = False
    sent: dict[str, float] = field(default_factory=dict)
    list_sent: float = -math.inf

    def hear(self, change: Change) -> None:
        """Note what ``change`` means for this client."""
        if change.document_id is not None:
            given = self.uris.get(document_uri(change.kb, change.document_id))
            if given is not None:
                self.pending.add(given)
        if self.lists and (change.document_id is None or change.kind != "edited"):
            self.list_pending = True

    def due(self, now: float) -> tuple[list[str], bool]:
        """What may go out now, taken off what is pending."""
        uris = sorted(uri for uri in self.pending if now - self.sent.get(uri, -math.inf) >= BATCH_SECONDS)
        lists = self.list_pending and now - self.list_sent >= BATCH_SECONDS
        self.pending.difference_update(uris)
        self.sent = {uri: at for uri, at in self.sent.items() if now - at < BATCH_SECONDS}
        self.sent.update(dict.fromkeys(uris, now))
        if lists:
            self.list_pending, self.list_sent = False, now
        return uris, lists

    def next_due(self) -> float:
        """When something pending may go out (infinity: nothing is pending)."""
        times = [self.sent.get(uri, -math.inf) + BATCH_SECONDS for uri in self.pending]
        if self.list_pending:
            times.append(self.list_sent + BATCH_SECONDS)
        return min(times, default=math.inf)


class Notifier:
    """Who listens for what, and the thread that tells them (see the module docstring).

    One per ``ChangeFeed`` (``Notifier.of``): servers over one core share it, since a look takes
    the changes it finds.
    """

    _made: ClassVar[weakref.WeakKeyDictionary[ChangeFeed, Notifier]] = weakref.WeakKeyDictionary()
    _making: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, feed: ChangeFeed) -> None:
        self.feed = feed
        self._guard = threading.Lock()
        self._listeners: set[_Listener] = set()
        self._sessions: dict[object, _Listener] = {}  # handshake-era listeners, by connection
        self._thread: threading.Thread | None = None
        self._closing = threading.Event()
        self._serving = 0

    @classmethod
    def of(cls, feed: ChangeFeed) -> Notifier:
        """The notifier of ``feed``, made on first use."""
        with cls._making:
            notifier = cls._made.get(feed)
            if notifier is None:
                notifier = cls._made[feed] = cls(feed)
            return notifier

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[None]:
        """While a server runs (its lifespan): when the last one stops, so does the thread, before the core closes."""
        with self._guard:
            self._serving += 1
            self._closing.clear()
        try:
            yield
        finally:
            with self._guard:
                self._serving -= 1
                last = self._serving == 0
            if last:
                await anyio.to_thread.run_sync(self.close)

    # -- the handshake era ---------------------------------------------------------------------------

    async def subscribe(self, ctx: ServerRequestContext[Any, Any], params: SubscribeRequestParams) -> EmptyResult:
        """``resources/subscribe``: tell this connection when the document changes (until it unsubscribes)."""
        canonical, given = _document_uri(params.uri)
        listener = self._session(ctx)
        with self._guard:
            listener.uris[canonical] = given
        await anyio.to_thread.run_sync(self._track)  # from now on: what changes after the answer is told
        self._start()
        return EmptyResult()

    async def unsubscribe(self, ctx: ServerRequestContext[Any, Any], params: UnsubscribeRequestParams) -> EmptyResult:
        """``resources/unsubscribe``: stop telling this connection about the document."""
        found = document_of(str(params.uri))
        with self._guard:
            listener = self._sessions.get(_connection(ctx))
            if listener is not None and found is not None:
                given = listener.uris.pop(document_uri(*found), None)
                listener.pending.discard(given or "")
        return EmptyResult()

    async def hear_lists(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """Middleware: a handshake-era connection that lists the resources hears when the list changes."""
        result = await call_next(ctx)
        if ctx.method == "resources/list" and ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            listener = self._session(ctx)
            with self._guard:
                new, listener.lists = not listener.lists, True
            if new:
                await anyio.to_thread.run_sync(self._track)
                self._start()
        return result

    def _session(self, ctx: ServerRequestContext[Any, Any]) -> _Listener:
        """This connection's listener, made on first use (and dropped when the connection closes)."""
        key = _connection(ctx)
        with self._guard:
            listener = self._sessions.get(key)
        if listener is None:
            listener = _Listener(anyio.lowlevel.current_token(), _session_delivery(ctx.session))
            self._add(listener, key)
            closing = getattr(key, "exit_stack", None)
            if closing is not None:
                closing.callback(self._drop_session, key)
        return listener

    def _drop_session(self, key: object) -> None:
        with self._guard:
            listener = self._sessions.pop(key, None)
        if listener is not None:
            self._remove(listener)

    # -- 2026-07-28 ----------------------------------------------------------------------------------

    async def listen(
        self, ctx: ServerRequestContext[Any, Any], params: SubscriptionsListenRequestParams
    ) -> SubscriptionsListenResult:
        """``subscriptions/listen``: one stream of what its filter asks for, until the client closes it."""
        wanted = params.notifications
        uris = dict(_document_uri(uri) for uri in wanted.resource_subscriptions or ())
        bus = InMemorySubscriptionBus()
        lists = bool(wanted.resources_list_changed)
        listener = _Listener(anyio.lowlevel.current_token(), _bus_delivery(bus), uris, lists)
        self._add(listener)
        try:
            await anyio.to_thread.run_sync(self._track)  # before the acknowledgement: nothing after it is missed
            self._start()
            return await ListenHandler(bus, max_subscriptions=1)(ctx, params)
        finally:
            self._remove(listener)

    # -- listeners and the thread ------------------------------------------------------------------

    def close(self) -> None:
        """Stop the thread (the last server is shutting down); listeners are left to their connections."""
        self._closing.set()
        self.feed.touched()  # wakes the thread
        thread = self._thread
        if thread is not None:
            thread.join(10)

    def _add(self, listener: _Listener, session: object = None) -> None:
        with self._guard:
            if len(self._listeners) >= MAX_LISTENERS:
                raise MCPError(INTERNAL_ERROR, "Subscription limit reached: too many clients listen for changes.")
            self._listeners.add(listener)
            if session is not None:
                self._sessions[session] = listener

    def _remove(self, listener: _Listener) -> None:
        with self._guard:
            self._listeners.discard(listener)

    def _track(self) -> None:
        """Make the feed look at what the listeners want: every knowledge base if one hears list changes."""
        with self._guard:
            every = any(listener.lists for listener in self._listeners)
            uris = [uri for listener in self._listeners for uri in listener.uris]
        self.feed.track(None if every else {found[0] for uri in uris if (found := document_of(uri))})

    def _start(self) -> None:
        with self._guard:
            if self._thread is None and self._listeners and not self._closing.is_set():
                self._thread = threading.Thread(target=self._run, name="coffer-notify", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        tracked: frozenset[int] = frozenset()
        while True:
            with self._guard:
                listeners = list(self._listeners)
                if not listeners or self._closing.is_set():
                    self._thread = None
                    return
            started = time.thread_time()
            ids = frozenset(map(id, listeners))
            if ids != tracked:  # someone left: stop reading what nobody wants
                self._safely(self._track)
                tracked = ids
            changes = self._safely(self.feed.look) or ()
            now = time.monotonic()
            with self._guard:
                for change in changes:
                    for listener in listeners:
                        listener.hear(change)
                batches = [(listener, *listener.due(now)) for listener in listeners]
                next_due = min((listener.next_due() for listener in listeners), default=math.inf)
            self._deliver(batches)
            cost = time.thread_time() - started
            if self._closing.wait(max(MIN_GAP_SECONDS, LOOK_SHARE * cost)):
                continue
            self.feed.wait(min(POLL_SECONDS, max(0.0, next_due - time.monotonic())))

    def _deliver(self, batches: Iterable[tuple[_Listener, list[str], bool]]) -> None:
        for listener, uris, lists in batches:
            if not uris and not lists:
                continue
            try:
                anyio.from_thread.run(_send, listener.deliver, uris, lists, token=listener.token)
            except Exception as exc:  # noqa: BLE001 - a client gone or its loop stopped: the others still hear
                log.debug("could not notify a client of %d changes: %s", len(uris) + lists, exc)
                self._remove(listener)

    def _safely(self, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except CofferError as exc:  # e.g. the database is away: look again later
            log.warning("could not look for changes to notify: %s", exc.message)
        except Exception:  # a bug must not end the notifications of every client
            log.exception("could not look for changes to notify")
        return None


async def _send(deliver: Callable[[list[str], bool], Awaitable[None]], uris: list[str], lists: bool) -> None:
    with anyio.move_on_after(SEND_SECONDS):
        await deliver(uris, lists)


def _session_delivery(session: ServerSession) -> Callable[[list[str], bool], Awaitable[None]]:
    """Notifications on a handshake-era connection's own channel (not a request's: they outlive it)."""

    async def deliver(uris: list[str], lists: bool) -> None:
        for uri in uris:
            await session.send_resource_updated(uri)
        if lists:
            await session.send_resource_list_changed()

    return deliver


def _bus_delivery(bus: InMemorySubscriptionBus) -> Callable[[list[str], bool], Awaitable[None]]:
    """Events for one listen stream: its ``ListenHandler`` stamps, filters and writes them."""

    async def deliver(uris: list[str], lists: bool) -> None:
        for uri in uris:
            await bus.publish(ResourceUpdated(uri=uri))
        if lists:
            await bus.publish(ResourcesListChanged())

    return deliver


def _document_uri(uri: object) -> tuple[str, str]:
    """The URI of the document ``uri`` names, as Coffer writes it, and ``uri``; else the invalid-params error."""
    text = str(uri)
    found = document_of(text)
    if found is None:
        raise invalid_params(
            InvalidArgumentError(
                f"{text[:200]!r} is not a document of this server: only documents can be subscribed to.",
                hint=f"Subscribe to a document URI, {DOCUMENT_TEMPLATE} (resources/list lists them).",
            )
        )
    return document_uri(*found), text


_PROCESS = object()  # the key of a connection the SDK does not expose: one client per process (stdio)


def _connection(ctx: ServerRequestContext[Any, Any]) -> object:
    """The client connection a request came on, which holds its subscriptions."""
    # As in ``_client_log``: the SDK keeps the connection on the per-request session, not publicly yet.
    return getattr(ctx.session, "_connection", None) or _PROCESS
