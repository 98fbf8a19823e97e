"""One Starlette app: the MCP server at ``/mcp``, the JSON API at ``/api/v1``, the viewer at ``/``.

Every route sits behind one ``Guard`` (Host, Origin, token). With ``auth`` ``oauth`` the app is also
an OAuth authorization server (``_oauth``, ``_consent``) and, with ``oauth`` or ``external``, a
protected resource publishing its metadata (``_resource``). The SDK's own DNS-rebinding check
is switched off on purpose: the guard applies the same rule to ``/mcp`` as to everything else,
with the operator's allowed hosts, and answers 403 like the other routes. An MCP request may be
as large as ``max_document_bytes`` allows a document to be (``_body_limit``); one holding a lone
UTF-16 surrogate gets Coffer's parse error (``_surrogates``).
"""

from __future__ import annotations

import contextlib
import html
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from mcp.server.auth.provider import ProviderTokenVerifier
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from coffer_mcp.errors import ConfigError
from coffer_mcp.mcp_server import build_server
from coffer_mcp.services import Coffer
from coffer_mcp.web._api import api_routes
from coffer_mcp.web._body_limit import TooLargeAsJsonRpc, mcp_body_limit
from coffer_mcp.web._cimd import ClientDocuments
from coffer_mcp.web._consent import consent_route
from coffer_mcp.web._external import external_verifier
from coffer_mcp.web._oauth import OAUTH_PATHS, CofferProvider, authorization_routes
from coffer_mcp.web._owner import OwnerSignIn
from coffer_mcp.web._resource import ExternalAuth, OAuthGate, ResourceServer
from coffer_mcp.web._security import Guard, HostPolicy, check_token, is_loopback
from coffer_mcp.web._surrogates import LoneSurrogateAsJsonRpc

__all__ = ["STATIC_DIR", "AuthMode", "build_app"]

STATIC_DIR = Path(__file__).resolve().parents[1] / "static"
_PAGE = "index.html"
_TOKEN_SLOT = "{{ACTION_TOKEN}}"
AuthMode = Literal["token", "oauth", "external"]


def build_app(
    service: Coffer,
    *,
    token: str | None,
    json_response: bool = False,
    allowed_hosts: Sequence[str] = (),
    curation: bool | None = None,
    read_only: bool | None = None,
    host: str = "127.0.0.1",
    port: int | None = None,
    auth: AuthMode = "token",
    public_url: str | None = None,
    external: ExternalAuth | None = None,
) -> Starlette:
    """The HTTP surface of Coffer as one ASGI app (run its lifespan: it runs the MCP sessions).

    Args:
        service: The core service every route calls.
        token: Bearer token every request must carry; None or empty for none (only sensible on
            loopback).
        json_response: Answer MCP requests with plain JSON instead of SSE streams.
        allowed_hosts: Extra ``Host`` values to answer (``name`` any port, ``name:port``).
        curation: Expose the curation tools (None: as the settings say).
        read_only: Expose no MCP tool that writes (None: as the settings say).
        host: The address the server is bound to (its Host rule).
        port: The bound port; None accepts any port on the allowed names.
        auth: ``token`` (the HTTP token only), ``oauth`` (also the built-in authorization server's
            tokens: ``_oauth``) or ``external`` (also the identity provider's in ``external``).
        public_url: The address clients use (the OAuth issuer; the resource is ``PUBLIC_URL/mcp``);
            None: ``http://host:port``, which needs a loopback ``host`` and a known ``port``.
        external: The external identity provider, for ``auth="external"`` (None: the settings' ``auth_issuer``).

    Raises:
        ConfigError: the token is weak (see ``check_token``), or OAuth lacks what it needs.
        ValueError: an ``allowed_hosts`` entry is not a host or host:port.
    """
    if token:
        check_token(token)  # here, not only in the guard: Starlette builds middleware on the first request
    server = build_server(service, curation=curation, read_only=read_only)
    max_document_bytes = service.settings.max_document_bytes
    body_limit = mcp_body_limit(max_document_bytes)
    mcp_app = server.streamable_http_app(
        json_response=json_response,
        max_request_body_size=body_limit,
        session_idle_timeout=service.settings.http_session_idle_timeout,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    session_manager = server.session_manager
    action_token = secrets.token_urlsafe(32)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with session_manager.run():
            yield

    # The SDK's /mcp route, served by the session manager run above; its 413 answered in JSON-RPC,
    # and a body holding a lone surrogate answered before it (its parse error has no hint).
    mcp_routes = [
        Route(
            route.path,
            LoneSurrogateAsJsonRpc(
                TooLargeAsJsonRpc(route.endpoint, limit=body_limit, max_document_bytes=max_document_bytes),
                limit=body_limit,
            ),
        )
        for route in mcp_app.routes
        if isinstance(route, Route)
    ]
    oauth_routes, gate = _oauth(service, token, auth, _public_url(public_url, host, port), external, body_limit)
    routes = [
        *mcp_routes,
        *oauth_routes,
        Route("/", _viewer_page(action_token), methods=["GET", "HEAD"]),
        Mount("/api/v1", routes=api_routes(service, action_token)),
        Mount("/static", StaticFiles(directory=STATIC_DIR), name="static"),
    ]
    hosts = [*allowed_hosts, urlsplit(public_url).netloc] if public_url else allowed_hosts
    guard = Middleware(Guard, policy=HostPolicy.build(host, port, hosts), token=token, oauth=gate)
    return Starlette(routes=routes, middleware=[guard], lifespan=lifespan)


def _public_url(given: str | None, host: str, port: int | None) -> str:
    """The server's public address: as given, else ``http://HOST:PORT`` of a loopback bind (else "")."""
    if given:
        return given.rstrip("/")
    if port is None or not is_loopback(host):
        return ""
    address = host.strip("[]")
    return f"http://[{address}]:{port}" if ":" in address else f"http://{address}:{port}"


def _oauth(
    service: Coffer,
    token: str | None,
    auth: AuthMode,
    base: str,
    external: ExternalAuth | None,
    body_limit: int,
) -> tuple[list[Route], OAuthGate | None]:
    """The routes and the guard's part of OAuth: none for ``token``; the protected resource metadata,
    and with ``oauth`` the authorization server and its consent page.

    Raises:
        ConfigError: no public address is known, or ``external`` without its identity provider.
    """
    if auth == "token":
        return [], None
    if not base:
        raise ConfigError(
            "OAuth needs the address clients reach this server at.",
            hint="Set COFFER_PUBLIC_URL (e.g. https://coffer.example.com), or bind to a loopback address.",
        )
    if not base.startswith("https:") and not is_loopback(urlsplit(base).hostname or ""):
        raise ConfigError(
            f"OAuth tokens and passwords must not cross the network in clear: {base} is not https.",
            hint="Put a TLS proxy in front and set COFFER_PUBLIC_URL to its https:// address.",
        )
    resource = f"{base}/mcp"
    if auth == "external":
        external = external or _identity_provider(service, resource)
        server = ResourceServer(resource, [external.issuer], external.verifier)
        return server.routes(), OAuthGate(server, server.paths, body_limit, secure_cookies=base.startswith("https:"))
    documents = ClientDocuments(service.authorization, service.settings.auth_client_metadata_hosts)
    provider = CofferProvider(service.authorization, resource, documents)
    server = ResourceServer(resource, [base], ProviderTokenVerifier(provider))
    sign_in = OwnerSignIn(service.authorization, token)
    consent = consent_route(service.authorization, sign_in, base)
    routes = [*server.routes(), *authorization_routes(provider, base), consent]
    gate = OAuthGate(server, server.paths | OAUTH_PATHS, body_limit, sign_in, secure_cookies=base.startswith("https:"))
    return routes, gate


def _identity_provider(service: Coffer, resource: str) -> ExternalAuth:
    """The identity provider of the settings (``auth_issuer``), checking tokens issued for ``resource``.

    Raises:
        ConfigError: no ``auth_issuer`` is set.
    """
    verifier = external_verifier(service.settings, resource)
    if verifier is None:
        raise ConfigError(
            "--auth external needs an identity provider: auth_issuer is not set.",
            hint="Set COFFER_AUTH_ISSUER to the issuer URL its tokens name; see docs/deploy.md.",
        )
    return ExternalAuth(verifier.issuer, verifier)


def _viewer_page(action_token: str) -> Callable[[Request], Awaitable[Response]]:
    """The viewer's HTML with this process's action token embedded (read once, served many times)."""
    page = (STATIC_DIR / _PAGE).read_text(encoding="utf-8").replace(_TOKEN_SLOT, html.escape(action_token))

    async def viewer(request: Request) -> Response:
        return HTMLResponse(page, headers={"cache-control": "no-store"})

    return viewer
