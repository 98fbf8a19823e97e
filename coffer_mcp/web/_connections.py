"""Hold against hostile connections: request deadlines, a connection ceiling, quiet failed accepts.

uvicorn (its h11 protocol) times out only a connection idle *between* requests, and every byte a
client sends restarts that timer; it counts connections but refuses one only after reading its
request; and asyncio logs a traceback for every accept that fails for want of descriptors, up to
the listen backlog (2,048) per wake-up. An attacker without a token held every descriptor with
1,100 half-sent requests, starved authenticated clients and wrote 31 MB of tracebacks in 25 s
(docs/reliability.md). Here, for one server:

- a request's headers must be complete ``header_timeout`` seconds after the connection opened (or
  after the previous response), its body ``body_timeout`` seconds after the headers; sending
  slowly does not extend either, and the connection is closed when one passes;
- ``GuardedListener`` accepts at most ``max_connections`` connections, below the descriptor limit.
  At the ceiling a new connection closes the oldest one still waiting for its request's headers
  (one that never sent a whole request, as an attacker's; else an idle kept-alive one) and is
  served; when every connection is busy with a request, the new one gets a 503 and is closed;
- a failed accept and each of the events above log one line per 10 s, with how many there were.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import itertools
import logging
import socket
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, ClassVar

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from coffer_mcp.settings import Settings

__all__ = ["ConnectionBook", "ConnectionLimits", "GuardedListener", "GuardedServer", "default_max_connections"]

log = logging.getLogger(__name__)

_CEILING = 10_000  # connections, whatever the descriptor limit (each costs memory too)
# Descriptors kept for the rest of the process: SQLite (3 per connection, one per worker thread),
# files being written, the converter's pipes, the embedding service, the watcher, and the accepts
# of one wake-up of the event loop (_BURST).
_RESERVE = 192
_BURST = 32  # connections accepted, or closing, before the event loop must catch up
_WINDOW = 10.0  # seconds over which a repeated event is counted into one log line
_ACCEPT_FAILED = "socket.accept() out of system resource"  # asyncio's message for these (since 3.5)
_OUT_OF = {
    errno.EMFILE: "too many open files",
    errno.ENFILE: "too many open files in the system",
    errno.ENOBUFS: "out of memory",
    errno.ENOMEM: "out of memory",
}
_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\nconnection: close\r\n"
    b"retry-after: 1\r\ncontent-length: 42\r\n\r\nThe server is busy; try again in a moment.\n"
)


def default_max_connections() -> int:
    """The connection ceiling for this process's descriptor limit (``RLIMIT_NOFILE``, soft).

    The limit less ``_RESERVE`` descriptors (half the limit when that is smaller), at most
    ``_CEILING``; the ceiling alone where there is no such limit (Windows, unlimited).
    """
    try:
        import resource
    except ImportError:  # Windows
        return _CEILING
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return _CEILING
    return max(1, min(_CEILING, soft - min(_RESERVE, soft // 2)))


@dataclass(frozen=True)
class ConnectionLimits:
    """What one HTTP server allows a connection."""

    header_timeout: float
    body_timeout: float
    max_connections: int

    @classmethod
    def from_settings(cls, settings: Settings) -> ConnectionLimits:
        return cls(
            header_timeout=settings.http_header_timeout,
            body_timeout=settings.http_body_timeout,
            max_connections=settings.http_max_connections or default_max_connections(),
        )


class Tally:
    """An event logged at most once per window, with its count: ``MESSAGE (N in the last 10 s)``."""

    def __init__(self, level: int, message: str) -> None:
        self.level, self.message = level, message
        self.count = 0
        self.next_line = 0.0

    def note(self) -> None:
        self.count += 1
        self.flush()

    def flush(self) -> None:
        """Log the events counted since the last line, if a window has passed since it."""
        now = time.monotonic()
        if self.count and now >= self.next_line:
            log.log(self.level, "%s (%d in the last %g s)", self.message, self.count, _WINDOW)
            self.count, self.next_line = 0, now + _WINDOW


class ConnectionBook:
    """One server's connections: how many, which wait for a request, and what happened to others."""

    def __init__(self, limits: ConnectionLimits) -> None:
        self.limits = limits
        self.made = 0  # connections between connection_made and connection_lost
        self.closing = 0  # closed by us, their descriptor not yet released
        self._accepted: deque[float] = deque()  # when the listener accepted each connection not yet made
        # Connections waiting for a request's headers, oldest first: those that never sent a whole
        # request (an attacker's half-sent ones), then those kept alive after a response (a real
        # client's, which it may be about to reuse: closed last).
        self._fresh: dict[GuardedH11Protocol, None] = {}
        self._idle: dict[GuardedH11Protocol, None] = {}
        self._accept_failed_until = 0.0
        self._tallies: dict[str, Tally] = {}
        self._limit = f"at the connection limit ({limits.max_connections})"

    # -- admission ------------------------------------------------------------------------------

    @property
    def pending(self) -> int:
        """Connections accepted and not yet made (one not made within a second never will be)."""
        stale = time.monotonic() - 1.0
        while self._accepted and self._accepted[0] < stale:
            self._accepted.popleft()
        return len(self._accepted)

    def must_wait(self) -> bool:
        """Whether accepting now would outrun the event loop (or follows a failed accept)."""
        return self.pending + self.closing >= _BURST or time.monotonic() < self._accept_failed_until

    def admit_accepted(self) -> bool:
        """Count a connection just accepted, making room by closing a waiting one; False: refuse it."""
        if self.made - self.closing + self.pending >= self.limits.max_connections:
            victim = self._oldest_waiting()
            if victim is None:
                self.tally(logging.WARNING, f"{self._limit}, every connection busy: new ones refused with 503")
                return False
            self.tally(logging.WARNING, f"{self._limit}: closed the oldest connections still waiting for a request")
            victim.close_now()
        self._accepted.append(time.monotonic())
        return True

    def accept_failed(self, exc: OSError) -> None:
        """An accept failed for want of descriptors: pause accepting, free some, log (rate-limited)."""
        self._accept_failed_until = time.monotonic() + 0.5  # asyncio retries after 1 s
        for victim in list(itertools.islice(itertools.chain(self._fresh, self._idle), _BURST)):
            victim.close_now()
        self.tally(logging.WARNING, f"accept failed: {_OUT_OF.get(exc.errno or 0, exc.strerror)}")

    # -- connections ----------------------------------------------------------------------------

    def made_one(self, protocol: GuardedH11Protocol) -> bool:
        """A connection starts; False when it is over the ceiling and was closed (loops without our listener)."""
        if self._accepted:
            self._accepted.popleft()
        self.made += 1
        if self.made - self.closing <= self.limits.max_connections:
            return True
        victim = self._oldest_waiting(besides=protocol)
        if victim is not None:
            victim.close_now()
            return True
        protocol.refuse()
        return False

    def lost_one(self, protocol: GuardedH11Protocol) -> None:
        self.made -= 1
        self.waiting(protocol, False)

    def waiting(self, protocol: GuardedH11Protocol, waits: bool) -> None:
        """Note whether ``protocol`` waits for a request's headers (newest last)."""
        self._fresh.pop(protocol, None)
        self._idle.pop(protocol, None)
        if waits:
            (self._idle if protocol.served else self._fresh)[protocol] = None

    def _oldest_waiting(self, besides: GuardedH11Protocol | None = None) -> GuardedH11Protocol | None:
        return next((p for p in itertools.chain(self._fresh, self._idle) if p is not besides), None)

    # -- log lines ------------------------------------------------------------------------------

    def tally(self, level: int, message: str) -> None:
        self._tallies.setdefault(message, Tally(level, message)).note()

    def flush(self) -> None:
        for tally in self._tallies.values():
            tally.flush()

    def loop_exception(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """The event loop's exception handler: a failed accept is counted, not a traceback."""
        exc = context.get("exception")
        if context.get("message") == _ACCEPT_FAILED and isinstance(exc, OSError):
            self.accept_failed(exc)
            return
        loop.default_exception_handler(context)

    def protocol_class(self) -> type[asyncio.Protocol]:
        """The HTTP protocol for uvicorn's ``Config(http=...)``, bound to this book."""
        return type("CofferHttpProtocol", (GuardedH11Protocol,), {"book": self})


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with deadlines for a request's headers and body, in a ``ConnectionBook``."""

    book: ClassVar[ConnectionBook]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._phase: str | None = None  # "headers", "body" or None (the app has the request; idle after)
        self.served = False  # a response was sent on it
        self._deadline: asyncio.TimerHandle | None = None
        self._closing = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if self.book.made_one(self):
            self._follow()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._follow()

    def on_response_complete(self) -> None:
        self.served = True
        super().on_response_complete()
        self._follow()

    def connection_lost(self, exc: Exception | None) -> None:
        self._enter(None)
        if self._closing:
            self.book.closing -= 1
        self.book.lost_one(self)
        super().connection_lost(exc)

    def close_now(self) -> None:
        """Close the connection; its descriptor is released on the loop's next turn.

        Aborted rather than closed: a close waits for unsent data, which a client that does not
        read would hold back forever, and the ``closing`` count with it.
        """
        if self._closing:
            return
        self._enter(None)
        self._closing = True
        self.book.closing += 1
        self.transport.abort()

    def refuse(self) -> None:
        """Answer 503 before any request and close (the ceiling was passed).

        A new connection's send buffer is empty, so the answer reaches the kernel before the abort.
        """
        self.transport.write(_BUSY)
        self.close_now()

    def _follow(self) -> None:
        """Start, keep or stop the deadline as the client's side of the exchange moves on."""
        state = self.conn.their_state
        if self._closing or self.transport.is_closing():
            phase = None
        elif state is h11.IDLE:
            phase = "headers"
        elif state is h11.SEND_BODY:
            phase = "body"
        else:
            phase = None
        if phase != self._phase:
            self._enter(phase)

    def _enter(self, phase: str | None) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._phase = phase
        self.book.waiting(self, phase == "headers")
        if phase is not None:
            limits = self.book.limits
            timeout = limits.header_timeout if phase == "headers" else limits.body_timeout
            self._deadline = self.loop.call_later(timeout, self._expire)

    def _expire(self) -> None:
        self._deadline = None
        limits = self.book.limits
        if self._phase == "headers":
            what = f"closed connections that sent no complete request headers within {limits.header_timeout:g} s"
        else:
            what = f"closed connections whose request body took over {limits.body_timeout:g} s"
        self.book.tally(logging.INFO, what)
        self.close_now()


class GuardedListener(socket.socket):
    """A listening socket whose ``accept`` keeps to a ``ConnectionBook``'s ceiling.

    asyncio's selector loop calls ``accept`` in a loop at each wake-up. Raising
    ``InterruptedError`` ends that loop quietly (connections left wait in the kernel's backlog for
    the next turn). An accept that fails for want of descriptors raises to asyncio, which pauses
    accepting for a second and reports it to ``ConnectionBook.loop_exception``: that report stops
    the loop too (``must_wait``), where asyncio would go on failing up to the backlog's length.
    """

    book: ConnectionBook | None = None

    def accept(self) -> tuple[socket.socket, Any]:
        book = self.book
        if book is None:
            return super().accept()
        for _ in range(_BURST):
            if book.must_wait():
                break
            conn, address = super().accept()  # a failure goes to asyncio, then to book.loop_exception
            if book.admit_accepted():
                return conn, address
            _refuse(conn)
        raise InterruptedError


def _refuse(conn: socket.socket) -> None:
    """Answer 503 to a connection never handed to the server, and release its descriptor now.

    What the client sent already is read first: closing with it unread would reset the
    connection, and the client could lose the answer. A request still on its way may do so still.
    """
    conn.setblocking(False)
    with contextlib.suppress(OSError):
        conn.recv(65536)
    with contextlib.suppress(OSError):
        conn.send(_BUSY)
    conn.close()


class GuardedServer(uvicorn.Server):
    """uvicorn's server, with the book's exception handler on its loop and its log lines flushed."""

    def __init__(self, config: uvicorn.Config, book: ConnectionBook) -> None:
        super().__init__(config)
        self.book = book

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        asyncio.get_running_loop().set_exception_handler(self.book.loop_exception)
        await super().serve(sockets)

    async def on_tick(self, counter: int) -> bool:
        self.book.flush()
        return await super().on_tick(counter)
