"""A URL parsed once: the host the SSRF guard checks is the host the connection uses.

Two parsers that disagree are how a guard is walked around (``http://x\\@host/`` is one host to
one parser and another to the next), so a URL is parsed here, once, into a :class:`Target`, and
both the guard and the HTTP request are built from that object. What the parsers disagree on is
refused outright: backslashes, credentials (``user:pw@``), control characters. A non-ASCII host is
normalised the way a browser would (IDNA, which applies NFKC: ``①②⑦.⓪.⓪.①`` and ``127。0。0。1`` are
``127.0.0.1``), and the normalised ASCII host is the one checked and connected to.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import SplitResult, quote, urljoin, urlsplit

from coffer_mcp.errors import InvalidArgumentError, UrlRefusedError

_DEFAULT_PORTS = {"http": 80, "https": 443}
_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?")
_INVALID_HINT = "Pass a complete address such as https://example.com/page, as a browser shows it."
# Printable ASCII a request target may carry as is; everything else is percent-encoded.
_TARGET_SAFE = "!#$%&'()*+,/:;=?@[]~"


@dataclass(frozen=True, slots=True)
class Target:
    """One parsed http(s) URL.

    Attributes:
        scheme: ``http`` or ``https``.
        host: The ASCII host: an IDNA-encoded name, or an IP literal (IPv6 without brackets).
        port: The port to connect to (the scheme's default when the URL names none).
        target: The request target, path and query, percent-encoded ASCII.
        fragment: The fragment, kept for the document's ``source_url`` and never sent.
        written_host: The host as the URL spelled it, for messages.
    """

    scheme: str
    host: str
    port: int
    target: str
    fragment: str
    written_host: str

    @property
    def authority(self) -> str:
        """``host[:port]`` as the ``Host`` header and the URL write it (IPv6 in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == _DEFAULT_PORTS[self.scheme] else f"{host}:{self.port}"

    @property
    def url(self) -> str:
        """The URL in its normalised form (what is fetched, and kept as ``source_url``)."""
        return f"{self.scheme}://{self.authority}{self.target}" + (f"#{self.fragment}" if self.fragment else "")


def parse_url(url: str) -> Target:
    """Parse ``url`` once into the :class:`Target` both the guard and the connection use.

    Raises:
        UrlRefusedError: another scheme, no host, credentials or a backslash in the URL.
        InvalidArgumentError: ``invalid_url``, a URL that cannot be parsed (a bad port, an unclosed
            IPv6 bracket, a host that is not a valid name).
    """
    text = url.strip() if isinstance(url, str) else ""
    _refuse_backslash(text)
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in text):
        raise _invalid(text, "it contains control characters")
    parts = _split(text)
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.netloc or not parts.hostname:
        raise UrlRefusedError(
            f"Only http and https URLs with a host are fetched, not {_shown(text)}.",
            hint="Pass an http:// or https:// address; for local files use {tool:ingest_path}.",
        )
    if "@" in parts.netloc:
        raise UrlRefusedError(
            f"Refusing {_shown(text)}: it carries a user name or password.",
            hint="Remove the 'user:password@' part; Coffer never sends credentials.",
        )
    written = _written_host(parts, text)
    host = _normalise_host(written, text)
    port = _port(parts, text)
    return Target(
        scheme=scheme,
        host=host,
        port=port if port is not None else _DEFAULT_PORTS[scheme],
        target=_request_target(parts),
        fragment=parts.fragment,
        written_host=written,
    )


def parse_location(base: Target, location: str) -> Target:
    """A redirect's ``Location``, resolved against the URL that answered it, parsed like any URL."""
    _refuse_backslash(location)  # before urljoin, which would take it for part of a relative path
    try:
        joined = urljoin(base.url, location)
    except ValueError as exc:
        raise _invalid(location, str(exc)) from exc
    return parse_url(joined)


def normalise_host(host: str) -> str | None:
    """``host`` as :func:`parse_url` would connect to it, or ``None`` if it is not a valid host name."""
    try:
        return _normalise_host(host, host)
    except InvalidArgumentError:
        return None


def _refuse_backslash(text: str) -> None:
    if "\\" in text:
        raise UrlRefusedError(
            f"Refusing {_shown(text)}: it contains a backslash, which parsers read differently.",
            hint="Write the URL with forward slashes only.",
        )


def _split(text: str) -> SplitResult:
    try:
        return urlsplit(text)
    except ValueError as exc:  # an unclosed "[", or a netloc NFKC turns into another URL
        raise _invalid(text, str(exc)) from exc


def _written_host(parts: SplitResult, text: str) -> str:
    """The host part of the netloc as written, without brackets, port or lower-casing."""
    netloc = parts.netloc
    if not netloc.startswith("["):
        return netloc.rsplit(":", 1)[0]
    host, _, rest = netloc[1:].partition("]")
    if rest and not rest.startswith(":"):  # "[::1]x": urlsplit ignores the tail, others would not
        raise _invalid(text, f"{netloc!r} has text after the IPv6 address")
    return host


def _normalise_host(written: str, text: str) -> str:
    """The ASCII host to check and to connect to: an IPv6 literal, or a name through IDNA."""
    if ":" in written:  # only a bracketed IPv6 literal keeps a colon here
        try:
            if "%" in written:  # a zone id ("%25eth0") names an interface, not a host
                raise ValueError(written)
            return str(ipaddress.IPv6Address(written))
        except ValueError as exc:
            raise _invalid(text, f"{written!r} is not an IPv6 address") from exc
    try:
        # The idna codec maps the way browsers do (NFKC, case folding, "。" as a dot) and checks
        # label lengths; ASCII hosts go through it too, so "a..b" fails here, not at DNS.
        host = written.encode("idna").decode("ascii").lower()
    except UnicodeError as exc:
        raise _invalid(text, f"the host {written!r} is not a valid name") from exc
    if not all(_LABEL.fullmatch(label) for label in host.removesuffix(".").split(".")):
        raise _invalid(text, f"the host {written!r} is not a valid name")  # "%41", "a b", "*" ...
    return host


def _port(parts: SplitResult, text: str) -> int | None:
    try:
        return parts.port
    except ValueError as exc:  # "http://a:x/", "http://a:99999/"
        raise _invalid(text, str(exc)) from exc


def _request_target(parts: SplitResult) -> str:
    """Path and query as ASCII: non-ASCII and spaces percent-encoded (existing escapes kept)."""
    target = quote(parts.path or "/", safe=_TARGET_SAFE)
    return f"{target}?{quote(parts.query, safe=_TARGET_SAFE)}" if parts.query else target


def _invalid(text: str, why: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"{_shown(text)} is not a valid URL: {why}.", code="invalid_url", hint=_INVALID_HINT)


def _shown(text: str) -> str:
    return repr(text[:100])
