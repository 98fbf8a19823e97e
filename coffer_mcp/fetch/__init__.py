"""Fetching a URL for ingest, guarded against server-side request forgery.

Only ``http`` and ``https``. Each URL — the one given and every redirect's ``Location`` — is
parsed once (``_url``): credentials and backslashes are refused, a non-ASCII host is normalised
(IDNA, NFKC) to the ASCII host that is then both checked and connected to. The guard (``_guard``)
resolves that host itself, refuses it if *any* address is loopback, private, link-local (cloud
metadata lives there), CGNAT, multicast, unspecified or reserved (IPv4 and IPv6, including
IPv4-mapped and NAT64/6to4 forms that embed one), and pins the checked address: the connection
goes there and nowhere else, so a DNS answer cannot change between the check and the connection.
Proxies from the environment are ignored (a proxy would connect on our behalf, unchecked). Size,
redirects and the total time (one deadline over every hop, header and byte) are bounded.
``allow`` names hosts or networks the guard lets through (tests, an intranet wiki the user trusts).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import unquote

import httpcore

from coffer_mcp.errors import FetchError, IngestRejectedError, UrlRefusedError
from coffer_mcp.fetch._guard import REFUSED_HINT, Allow, Deadline, GuardedBackend, check, is_public_address
from coffer_mcp.fetch._url import Target, parse_location, parse_url

__all__ = ["Fetched", "fetch_url", "is_public_address"]

MAX_REDIRECTS = 5
USER_AGENT = "coffer-mcp (+https://github.com/coffer-mcp/coffer-mcp)"
_REDIRECTS = {301, 302, 303, 307, 308}
_TYPES = {
    "text/html": "html",
    "application/xhtml+xml": "html",
    "text/plain": "txt",
    "text/markdown": "md",
    "text/x-markdown": "md",
    "text/csv": "csv",
    "application/pdf": "pdf",
    "application/json": "json",
    "application/xml": "xml",
    "text/xml": "xml",
    "application/epub+zip": "epub",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "docx",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation": "pptx",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": "xlsx",
}


@dataclass(frozen=True, slots=True)
class Fetched:
    """A fetched document: the final URL (after redirects), its bytes and a filename for ingest."""

    url: str
    content: bytes
    content_type: str
    filename: str


def fetch_url(url: str, *, max_bytes: int, timeout: float, allow: Sequence[str] = ()) -> Fetched:
    """GET ``url`` through the SSRF guard, following up to 5 redirects, within size and time bounds.

    Args:
        url: An http(s) URL.
        max_bytes: The largest body accepted.
        timeout: Seconds the whole fetch may take: resolving, connecting, every redirect, the body.
        allow: Hosts or networks the guard lets through although they are not public.

    Raises:
        UrlRefusedError: not http(s), credentials or a backslash in the URL, or the host (or a
            redirect's) is not a public address.
        InvalidArgumentError: ``invalid_url``, a URL (or a redirect's ``Location``) that cannot be parsed.
        FetchError: network failure, an error status, too many redirects, or ``timeout`` ran out.
        IngestRejectedError: the body is larger than ``max_bytes`` (``too_large``).
    """
    deadline = Deadline(timeout)
    backend = GuardedBackend(deadline)
    guard = Allow(allow)
    with httpcore.ConnectionPool(network_backend=backend, retries=0) as pool:
        current = parse_url(url)
        for _ in range(MAX_REDIRECTS + 1):
            backend.pin(current, check(current, guard, deadline))
            location, fetched = _get(pool, current, deadline, max_bytes)
            if fetched is not None:
                return fetched
            current = parse_location(current, location)
    raise FetchError(f"More than {MAX_REDIRECTS} redirects from {url}.", hint="Pass the final URL instead.")


def _request_url(target: Target) -> httpcore.URL:
    """The request built from the parsed target: httpcore never parses the URL a second time."""
    return httpcore.URL(
        scheme=target.scheme.encode(), host=target.host.encode(), port=target.port, target=target.target.encode()
    )


def _get(
    pool: httpcore.ConnectionPool, target: Target, deadline: Deadline, max_bytes: int
) -> tuple[str, Fetched | None]:
    """One hop: ``(redirect location, None)`` or ``("", the document)``."""
    url = target.url
    left = deadline.left(url)
    extensions = {"timeout": {"connect": left, "read": left, "write": left, "pool": left}}
    headers: dict[bytes | str, bytes | str] = {"Host": target.authority, "User-Agent": USER_AGENT, "Accept": "*/*"}
    try:
        with pool.stream("GET", _request_url(target), headers=headers, extensions=extensions) as response:
            if response.status in _REDIRECTS:
                return _location(response, url), None
            if not 200 <= response.status < 300:
                raise FetchError(f"{url} answered HTTP {response.status}.", hint="Check the URL is right and public.")
            body = _read(response, deadline, max_bytes, url)
            content_type = _header(response, b"content-type").split(";")[0].strip().lower()
    except httpcore.TimeoutException as exc:  # every socket operation is cut to the deadline
        raise deadline.expired(url) from exc
    except httpcore.UnsupportedProtocol as exc:
        raise UrlRefusedError(f"Unsupported URL {url[:100]!r}.", hint=REFUSED_HINT) from exc
    except (httpcore.NetworkError, httpcore.ProtocolError) as exc:
        raise FetchError(f"Could not fetch {url}: {exc}.", hint="Check the address and your connection.") from exc
    return "", Fetched(url=url, content=body, content_type=content_type, filename=_filename(target, content_type))


def _location(response: httpcore.Response, url: str) -> str:
    for key, value in response.headers:
        if key.lower() == b"location":
            try:  # servers send UTF-8 more often than the Latin-1 HTTP once specified
                return value.decode("utf-8").strip()
            except UnicodeDecodeError:
                return value.decode("latin-1").strip()
    raise FetchError(f"{url} answered a redirect without a Location.", hint="Pass the final URL instead.")


def _read(response: httpcore.Response, deadline: Deadline, max_bytes: int, url: str) -> bytes:
    declared = _header(response, b"content-length")
    if declared.isdigit() and int(declared) > max_bytes:
        raise _too_large(url, max_bytes)
    body = bytearray()
    for piece in response.iter_stream():
        body += piece
        if len(body) > max_bytes:
            raise _too_large(url, max_bytes)
        deadline.left(url)
    return bytes(body)


def _too_large(url: str, limit: int) -> IngestRejectedError:
    return IngestRejectedError(
        "too_large", f"{url} is larger than {limit:,} bytes.", hint="Raise max_url_bytes in config.yaml if you need it."
    )


def _header(response: httpcore.Response, name: bytes) -> str:
    for key, value in response.headers:
        if key.lower() == name:
            return value.decode("latin-1").strip()
    return ""


def _filename(target: Target, content_type: str) -> str:
    """A filename for the converter registry: the URL's last segment, its extension fixed by type."""
    segment = unquote(target.target.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]) or target.host
    _, dot, ext = segment.rpartition(".")
    wanted = _TYPES.get(content_type)
    if wanted is None:
        return segment
    if dot and ext.lower() == wanted:
        return segment
    return f"{segment}.{wanted}"
