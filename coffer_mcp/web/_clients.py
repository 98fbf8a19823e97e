"""A client as the SDK's OAuth handlers see it, with Coffer's rules for redirect URIs and scopes.

The SDK matches redirect URIs exactly; RFC 8252 §7.3 lets a native client's loopback redirect use
any port (it listens on whichever is free), so a loopback ``http`` URI matches on any port. And the
SDK allows only the scopes a client registered with, while MCP clients ask for more scopes later
(a step-up after a 403): here any scope this server has may be asked for, and the owner decides
on the consent page. Redirect URIs themselves must be https, or http to loopback (MCP's rule).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from mcp.shared.auth import InvalidRedirectUriError, InvalidScopeError, OAuthClientInformationFull
from pydantic import AnyUrl

from coffer_mcp.services.authorization import SCOPES

__all__ = ["CofferClient", "usable_redirect"]

_LOOPBACK = ("127.0.0.1", "[::1]", "localhost")


class CofferClient(OAuthClientInformationFull):
    """A registered or metadata-document client (``client_secret`` holds the SHA-256 of its secret)."""

    def validate_redirect_uri(self, redirect_uri: AnyUrl | None) -> AnyUrl:
        if redirect_uri is None:
            return super().validate_redirect_uri(None)
        if any(_redirect_matches(str(redirect_uri), str(known)) for known in self.redirect_uris or ()):
            return redirect_uri
        raise InvalidRedirectUriError(f"Redirect URI '{redirect_uri}' not registered for client")

    def validate_scope(self, requested_scope: str | None) -> list[str] | None:
        if requested_scope is None:
            return None
        requested = requested_scope.split()
        unknown = [scope for scope in requested if scope not in SCOPES]
        if unknown or not requested:
            raise InvalidScopeError(f"Unknown scope {' '.join(unknown)!r}; this server has {' '.join(SCOPES)}")
        return requested


def usable_redirect(uri: str) -> bool:
    """MCP's rule for a redirect URI: https, or http to loopback; never a fragment."""
    parts = urlsplit(uri)
    return not parts.fragment and (parts.scheme == "https" or (parts.scheme == "http" and _host(uri) in _LOOPBACK))


def _redirect_matches(given: str, registered: str) -> bool:
    """Exactly the registered URI, or a loopback ``http`` one on another port (RFC 8252 §7.3)."""
    if given == registered:
        return True
    a, b = urlsplit(given), urlsplit(registered)
    loopback = a.scheme == b.scheme == "http" and _host(given) in _LOOPBACK
    return loopback and _host(given) == _host(registered) and (a.path, a.query) == (b.path, b.query)


def _host(uri: str) -> str:
    """The host as written, without the port (``[::1]`` keeps its brackets)."""
    netloc = urlsplit(uri).netloc.rpartition("@")[2]
    host, sep, port = netloc.rpartition(":")
    return host if sep and port.isdigit() and not netloc.endswith("]") else netloc
