"""Fetching a URL for ingest, guarded against server-side request forgery.

Only ``http`` and ``https``. Every connection — the first request and every redirect hop — goes
through ``_GuardedBackend``, which resolves the host itself, refuses the connection if *any*
address is loopback, private, link-local (cloud metadata lives there), CGNAT, multicast,
unspecified or reserved (IPv4 and IPv6, including IPv4-mapped and NAT64/6to4 forms that embed
one), and then connects to the address it checked — so a DNS answer cannot change between the
check and the connection. Proxies from the environment are ignored (a proxy would connect on our
behalf, unchecked). Size, redirects and total time are bounded. ``allow`` names hosts or networks
the guard lets through (tests, an intranet wiki the user trusts).
"""

from __future__ import annotations

import ipaddress
import socket
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import unquote, urljoin, urlsplit

import httpcore

from coffer_mcp.errors import FetchError, IngestRejectedError, UrlRefusedError

__all__ = ["Fetched", "fetch_url", "is_public_address"]

MAX_REDIRECTS = 5
USER_AGENT = "coffer-mcp (+https://github.com/coffer-mcp/coffer-mcp)"
_REDIRECTS = {301, 302, 303, 307, 308}
_REFUSED_HINT = (
    "Coffer fetches only public http(s) addresses. If you trust this host (e.g. an intranet wiki), "
    "add it to url_allow_private in config.yaml."
)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_SIXTO4 = ipaddress.ip_network("2002::/16")
_TYPES = {
    "text/html": "html", "application/xhtml+xml": "html", "text/plain": "txt", "text/markdown": "md",
    "text/x-markdown": "md", "text/csv": "csv", "application/pdf": "pdf", "application/json": "json",
    "application/xml": "xml", "text/xml": "xml", "application/epub+zip": "epub",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "docx",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation": "pptx",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": "xlsx",
}  # fmt: skip

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True, slots=True)
class Fetched:
    """A fetched document: the final URL (after redirects), its bytes and a filename for ingest."""

    url: str
    content: bytes
    content_type: str
    filename: str


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
        address.is_multicast or address.is_reserved or address.is_loopback or address.is_link_local
        or address.is_unspecified or address.is_private
    )  # fmt: skip


class _Allow:
    """Hosts and networks the guard lets through."""

    def __init__(self, entries: Iterable[str]) -> None:
        self.hosts: set[str] = set()
        self.networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
        for entry in entries:
            try:
                self.networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
            except ValueError:
                self.hosts.add(entry.lower().rstrip("."))

    def permits(self, host: str, address: Address) -> bool:
        return host.lower().rstrip(".") in self.hosts or any(address in net for net in self.networks)


class _GuardedBackend(httpcore.NetworkBackend):
    """Resolves, checks and connects to the checked address; refuses anything non-public."""

    def __init__(self, allow: _Allow) -> None:
        self._inner = httpcore.SyncBackend()
        self._allow = allow

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):  # noqa: ANN001
        addresses = _resolve(host, port)
        for address in addresses:
            if not is_public_address(address) and not self._allow.permits(host, address):
                raise UrlRefusedError(f"Refusing to connect to {host} ({address}): not a public address.",
                                      hint=_REFUSED_HINT)  # fmt: skip
        return self._inner.connect_tcp(str(addresses[0]), port, timeout, local_address, socket_options)

    def connect_unix_socket(self, path, timeout=None, socket_options=None):  # noqa: ANN001
        raise UrlRefusedError("Unix sockets are not fetched.", hint=_REFUSED_HINT)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def _resolve(host: str, port: int) -> list[Address]:
    try:
        infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise FetchError(f"Cannot resolve {host}: {exc}.", hint="Check the URL's host name.") from exc
    addresses = [ipaddress.ip_address(info[4][0].split("%")[0]) for info in infos]
    if not addresses:
        raise FetchError(f"{host} has no address.", hint="Check the URL's host name.")
    return addresses


def fetch_url(url: str, *, max_bytes: int, timeout: float, allow: Sequence[str] = ()) -> Fetched:
    """GET ``url`` through the SSRF guard, following up to 5 redirects, within size and time bounds.

    Raises:
        UrlRefusedError: not http(s), or the host (or a redirect's) is not a public address.
        FetchError: network failure, an error status, too many redirects, or the time ran out.
        IngestRejectedError: the body is larger than ``max_bytes`` (``too_large``).
    """
    deadline = time.monotonic() + timeout
    with httpcore.ConnectionPool(network_backend=_GuardedBackend(_Allow(allow)), retries=0) as pool:
        current = _check_scheme(url)
        for _ in range(MAX_REDIRECTS + 1):
            location, fetched = _get(pool, current, deadline, max_bytes)
            if fetched is not None:
                return fetched
            current = _check_scheme(urljoin(current, location))
    raise FetchError(f"More than {MAX_REDIRECTS} redirects from {url}.", hint="Pass the final URL instead.")


def _check_scheme(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise UrlRefusedError(f"Only http and https URLs are fetched, not {url[:100]!r}.",
                              hint="Pass an http:// or https:// address; for local files use {tool:ingest_path}.")  # fmt: skip
    return url


def _get(pool: httpcore.ConnectionPool, url: str, deadline: float, max_bytes: int) -> tuple[str, Fetched | None]:
    """One hop: ``(redirect location, None)`` or ``("", the document)``."""
    remaining = _remaining(deadline, url)
    extensions = {"timeout": {"connect": remaining, "read": remaining, "write": remaining, "pool": remaining}}
    headers = {"User-Agent": USER_AGENT, "Accept": "*/*"}
    try:
        with pool.stream("GET", url, headers=headers, extensions=extensions) as response:
            if response.status in _REDIRECTS:
                return _header(response, b"location"), None
            if not 200 <= response.status < 300:
                raise FetchError(f"{url} answered HTTP {response.status}.", hint="Check the URL is right and public.")
            body = _read(response, deadline, max_bytes, url)
            content_type = _header(response, b"content-type").split(";")[0].strip().lower()
    except httpcore.TimeoutException as exc:
        raise FetchError(f"Timed out fetching {url}.", hint="Try again, or raise url_timeout.") from exc
    except httpcore.UnsupportedProtocol as exc:
        raise UrlRefusedError(f"Unsupported URL {url[:100]!r}.", hint=_REFUSED_HINT) from exc
    except (httpcore.NetworkError, httpcore.ProtocolError) as exc:
        raise FetchError(f"Could not fetch {url}: {exc}.", hint="Check the address and your connection.") from exc
    return "", Fetched(url=url, content=body, content_type=content_type, filename=_filename(url, content_type))


def _read(response: httpcore.Response, deadline: float, max_bytes: int, url: str) -> bytes:
    declared = _header(response, b"content-length")
    if declared.isdigit() and int(declared) > max_bytes:
        raise _too_large(url, max_bytes)
    body = bytearray()
    for piece in response.iter_stream():
        body += piece
        if len(body) > max_bytes:
            raise _too_large(url, max_bytes)
        _remaining(deadline, url)
    return bytes(body)


def _too_large(url: str, limit: int) -> IngestRejectedError:
    return IngestRejectedError("too_large", f"{url} is larger than {limit:,} bytes.",
                               hint="Raise max_url_bytes in config.yaml if you need it.")  # fmt: skip


def _remaining(deadline: float, url: str) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise FetchError(f"Timed out fetching {url}.", hint="Try again, or raise url_timeout.")
    return left


def _header(response: httpcore.Response, name: bytes) -> str:
    for key, value in response.headers:
        if key.lower() == name:
            return value.decode("latin-1").strip()
    return ""


def _filename(url: str, content_type: str) -> str:
    """A filename for the converter registry: the URL's last segment, its extension fixed by type."""
    parts = urlsplit(url)
    segment = unquote(parts.path.rstrip("/").rsplit("/", 1)[-1]) or (parts.hostname or "page")
    stem, dot, ext = segment.rpartition(".")
    wanted = _TYPES.get(content_type)
    if wanted is None:
        return segment
    if dot and ext.lower() == wanted:
        return segment
    return f"{segment}.{wanted}"
