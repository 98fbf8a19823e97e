"""The SSRF guard and the network it lets through: checked addresses only, within one deadline.

:func:`check` resolves a parsed URL's host itself and refuses it if *any* address is not public
(unless ``url_allow_private`` names it); the :class:`GuardedBackend` then connects to exactly the
address that was checked (pinned per host and port), never resolving again, so a DNS answer that
changes between the check and the connection (DNS rebinding) reaches nothing. Every socket
operation is bounded by the fetch's one :class:`Deadline`, so a server answering one byte at a
time cannot stretch a fetch past ``url_timeout``.
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
import threading
import time
from collections.abc import Iterable
from typing import Any

import httpcore

from coffer_mcp.errors import FetchError, UrlRefusedError
from coffer_mcp.fetch._url import Target, normalise_host

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

REFUSED_HINT = (
    "Coffer fetches only public http(s) addresses. If you trust this host (e.g. an intranet wiki), "
    "add it to url_allow_private in config.yaml."
)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_SIXTO4 = ipaddress.ip_network("2002::/16")


def is_public_address(address: Address) -> bool:
    """True if ``address`` is routable on the public internet (and embeds no private address)."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is None and address in _NAT64:
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is not None and not is_public_address(embedded):
            return False
        if address in _SIXTO4 and address.sixtofour is None:
            return False
    return address.is_global and not (
        address.is_multicast
        or address.is_reserved
        or address.is_loopback
        or address.is_link_local
        or address.is_unspecified
        or address.is_private
    )


class Deadline:
    """The one time budget of a fetch: connect, TLS, headers, body and every redirect share it."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._at = time.monotonic() + seconds

    def left(self, url: str) -> float:
        """Seconds left; raises ``fetch_failed`` once none are."""
        left = self._at - time.monotonic()
        if left <= 0:
            raise self.expired(url)
        return left

    def bound(self, timeout: float | None) -> float:
        """``timeout`` cut to what is left, for one socket operation (``0`` once time is up)."""
        left = max(self._at - time.monotonic(), 0.0)
        return left if timeout is None else min(timeout, left)

    def expired(self, url: str) -> FetchError:
        return FetchError(
            f"Fetching {url} took longer than url_timeout ({self.seconds:g} s).",
            hint="Try again later, or raise url_timeout in config.yaml for a slow server.",
        )


class Allow:
    """Hosts and networks the guard lets through (``url_allow_private``)."""

    def __init__(self, entries: Iterable[str]) -> None:
        self.hosts: set[str] = set()
        self.networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
        for entry in entries:
            try:
                self.networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
            except ValueError:  # a host name, compared in the same normalised form as the URL's
                self.hosts.add((normalise_host(entry) or entry.lower()).rstrip("."))

    def permits(self, host: str, address: Address) -> bool:
        return host.rstrip(".") in self.hosts or any(address in net for net in self.networks)


def check(target: Target, allow: Allow, deadline: Deadline) -> list[Address]:
    """Resolve ``target``'s host and return its addresses, if every one of them may be reached.

    Raises:
        UrlRefusedError: an address is not public and ``allow`` does not permit it.
        FetchError: the host does not resolve, or the deadline passed while resolving.
    """
    addresses = _resolve(target, deadline)
    for address in addresses:
        if not is_public_address(address) and not allow.permits(target.host, address):
            raise UrlRefusedError(
                f"Refusing to connect to {_described(target, address)}: not a public address.", hint=REFUSED_HINT
            )
    return addresses


def _described(target: Target, address: Address) -> str:
    """The host, what it resolved to, and how the URL spelled it when normalisation changed it."""
    notes = [str(address)] if str(address) != target.host else []
    if target.written_host.lower() != target.host:
        notes.append(f"written {target.written_host!r}")
    return f"{target.host} ({', '.join(notes)})" if notes else target.host


def _resolve(target: Target, deadline: Deadline) -> list[Address]:
    """``getaddrinfo`` within the deadline.

    The C call cannot be interrupted, so it runs on a daemon thread that is left behind (and ends
    on its own when the resolver gives up) if the deadline passes first.
    """
    answer: list[list[tuple] | Exception] = []

    def lookup() -> None:
        try:
            answer.append(socket.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM))
        except (OSError, UnicodeError) as exc:
            answer.append(exc)

    thread = threading.Thread(target=lookup, name="coffer-resolve", daemon=True)
    thread.start()
    thread.join(deadline.left(target.url))
    if not answer:
        raise deadline.expired(target.url)
    [infos] = answer
    if isinstance(infos, Exception):
        raise FetchError(f"Cannot resolve {target.host}: {infos}.", hint="Check the URL's host name.") from infos
    addresses = list(dict.fromkeys(ipaddress.ip_address(info[4][0].split("%")[0]) for info in infos))
    if not addresses:
        raise FetchError(f"{target.host} has no address.", hint="Check the URL's host name.")
    return addresses


class GuardedBackend(httpcore.NetworkBackend):
    """Connects only to addresses :func:`check` pinned, each socket operation within the deadline."""

    def __init__(self, deadline: Deadline) -> None:
        self._inner = httpcore.SyncBackend()
        self._deadline = deadline
        self._pinned: dict[tuple[str, int], list[Address]] = {}

    def pin(self, target: Target, addresses: list[Address]) -> None:
        """Let connections to ``target``'s host and port go to ``addresses`` (and only there)."""
        self._pinned[(target.host, target.port)] = addresses

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        addresses = self._pinned.get((host, port))
        if not addresses:  # every hop is checked and pinned first; anything else is a bug, refused
            raise UrlRefusedError(f"Refusing to connect to {host}: it was not checked.", hint=REFUSED_HINT)
        failure = httpcore.ConnectError(f"cannot connect to {host}")
        for address in addresses:  # in resolver order, as a browser would: "localhost" may listen on ::1 only
            left = _cut(self._deadline, timeout, httpcore.ConnectTimeout)
            try:
                stream = self._inner.connect_tcp(str(address), port, left, local_address, socket_options)
            except httpcore.ConnectError as exc:
                failure = exc
                continue
            return _DeadlineStream(stream, self._deadline)
        raise failure

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        raise UrlRefusedError("Unix sockets are not fetched.", hint=REFUSED_HINT)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class _DeadlineStream(httpcore.NetworkStream):
    """A stream whose every read and write is cut to the time the whole fetch has left.

    httpcore's timeouts apply to one socket operation each; a server sending a header line a
    second never trips them. Cutting each operation to the deadline bounds their sum.
    """

    def __init__(self, inner: httpcore.NetworkStream, deadline: Deadline) -> None:
        self._inner = inner
        self._deadline = deadline

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _cut(self._deadline, timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _cut(self._deadline, timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        left = _cut(self._deadline, timeout, httpcore.ConnectTimeout)
        stream = self._inner.start_tls(ssl_context, server_hostname, left)
        return _DeadlineStream(stream, self._deadline)

    def get_extra_info(self, info: str) -> object:
        return self._inner.get_extra_info(info)


def _cut(deadline: Deadline, timeout: float | None, timed_out: type[httpcore.TimeoutException]) -> float:
    """``timeout`` cut to the deadline; a timeout of 0 would make the socket non-blocking, so raise."""
    left = deadline.bound(timeout)
    if left <= 0:
        raise timed_out("url_timeout reached")
    return left
