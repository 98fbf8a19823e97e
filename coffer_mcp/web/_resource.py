"""Coffer as an OAuth protected resource (RFC 9728, MCP authorization 2025-06-18 and 2025-11-25).

``ResourceServer`` publishes the protected resource metadata of ``/mcp`` (at
``/.well-known/oauth-protected-resource/mcp``, and at the root form for clients that look there),
naming the authorization server (the built-in one, or an external identity provider), and turns a
bearer token into a ``Principal`` through a ``TokenVerifier`` (the SDK's protocol): unknown,
expired, and tokens issued for another resource are refused alike.

A request without a valid token gets 401 with ``WWW-Authenticate: Bearer resource_metadata=...,
scope=...`` (the scope a general client should ask for: reading and curating); one whose token
lacks the scope the request needs gets 403 with ``error="insufficient_scope"`` and ``scope``
naming what the token holds plus what is needed, so a client steps up to a token with both (the
spec's "recommended approach"). What a request needs (``required_scope``): ``/mcp`` reads, except
a ``tools/call`` of a tool that writes or administers (``TOOL_SCOPES``, from the tool registry),
which is found by reading the JSON-RPC body, and only when the token lacks some scope; the JSON
API reads with GET and acts (opens files) with POST, which needs ``coffer:write``.

An external identity provider (``ExternalAuth``) is built by ``_app`` from the settings' ``auth_issuer``
(``_external.external_verifier``) for this server's ``/mcp`` URL, or given by a test.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import anyio.to_thread
from mcp.server.auth.handlers.metadata import ProtectedResourceMetadataHandler
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken, TokenVerifier
from mcp.server.auth.routes import build_resource_metadata_url
from mcp.shared.auth import ProtectedResourceMetadata
from pydantic import AnyHttpUrl
from starlette.authentication import AuthCredentials
from starlette.routing import Route
from starlette.types import Message, Receive, Scope

from coffer_mcp.mcp_server import ACTOR_KEY, GRANTED_SCOPES_KEY, TOOL_SCOPES
from coffer_mcp.services.authorization import OWNER, SCOPES, effective_scopes
from coffer_mcp.services.authorization import Scope as OAuthScope
from coffer_mcp.web._oauth import DEFAULT_SCOPES, same_resource
from coffer_mcp.web._owner import OwnerSignIn

__all__ = [
    "MCP_PATH",
    "SESSION_COOKIE",
    "ExternalAuth",
    "OAuthGate",
    "Principal",
    "ResourceServer",
    "required_scope",
]

MCP_PATH = "/mcp"
PRM_ROOT = "/.well-known/oauth-protected-resource"
SESSION_COOKIE = "coffer_session"
VIEWER_CLIENT = "coffer-viewer"
VIEWER_SCOPES = (OAuthScope.READ.value, OAuthScope.WRITE.value)  # pages, and the file actions


@dataclass(frozen=True)
class Principal:
    """Who a request acts for, and what it may do.

    Attributes:
        scopes: Every scope it holds (``effective_scopes``: write reads too).
        actor: The audit log's actor for an OAuth token (``oauth:<subject> via <client>``); None for
            the HTTP token and the viewer, whose MCP calls keep ``agent:<client name>``.
        token: The OAuth access token (the SDK binds an MCP session to its client and subject).
    """

    scopes: frozenset[str]
    actor: str | None = None
    token: AccessToken | None = None

    @classmethod
    def everything(cls) -> Principal:
        """The HTTP token, or a loopback server without authentication: every scope."""
        return cls(frozenset(SCOPES))

    def attach(self, scope: Scope) -> None:
        """Put the principal where the MCP layer and the SDK look for it (the ASGI scope)."""
        if self.token is None:
            return
        scope["user"] = AuthenticatedUser(self.token)
        scope["auth"] = AuthCredentials(sorted(self.scopes))
        scope[GRANTED_SCOPES_KEY] = self.scopes
        scope[ACTOR_KEY] = self.actor


@dataclass(frozen=True)
class ExternalAuth:
    """An external identity provider, as the resource server needs it: its issuer and a verifier of its tokens."""

    issuer: str
    verifier: TokenVerifier


@dataclass
class ResourceServer:
    """The resource server's side of OAuth for one MCP endpoint.

    Args:
        resource: The MCP endpoint's URL (``PUBLIC_URL/mcp``): the resource tokens must be for.
        authorization_servers: The issuers clients get tokens from.
        verifier: Turns a bearer token into the SDK's ``AccessToken`` (None: not one it knows).
    """

    resource: str
    authorization_servers: list[str]
    verifier: TokenVerifier
    metadata_url: str = field(init=False)

    def __post_init__(self) -> None:
        self.metadata_url = str(build_resource_metadata_url(AnyHttpUrl(self.resource)))

    def routes(self) -> list[Route]:
        """The metadata, at the path form for ``/mcp`` and at the root form."""
        metadata = ProtectedResourceMetadata.model_validate(
            {
                "resource": self.resource,
                "authorization_servers": self.authorization_servers,
                "scopes_supported": list(SCOPES),
                "resource_name": "Coffer",
            }
        )
        handler = ProtectedResourceMetadataHandler(metadata).handle
        return [Route(f"{PRM_ROOT}{MCP_PATH}", handler, methods=["GET"]), Route(PRM_ROOT, handler, methods=["GET"])]

    @property
    def paths(self) -> frozenset[str]:
        return frozenset({f"{PRM_ROOT}{MCP_PATH}", PRM_ROOT})

    async def principal(self, token: str) -> Principal | None:
        """The principal of a bearer token, or None (unknown, expired, or for another resource)."""
        access = await self.verifier.verify_token(token)
        if access is None or (access.expires_at is not None and access.expires_at <= time.time()):
            return None
        if not same_resource(access.resource or "", self.resource):
            return None
        client = (access.claims or {}).get("client_name") or access.client_id
        actor = f"oauth:{access.subject or access.client_id} via {client}"
        return Principal(effective_scopes(access.scopes), actor[:300], access)

    def challenge(self, *, error: str | None = None, scopes: Any = DEFAULT_SCOPES, description: str = "") -> str:
        """A ``WWW-Authenticate`` value pointing at the metadata and naming the scopes to ask for."""
        parts = [f'error="{error}"'] if error else []
        parts += [f'resource_metadata="{self.metadata_url}"', f'scope="{" ".join(scopes)}"']
        if description:
            parts.append(f'error_description="{_quoted(description)}"')
        return "Bearer " + ", ".join(parts)


def _quoted(text: str) -> str:
    return text.replace("\\", "").replace('"', "'")


async def required_scope(scope: Scope, receive: Receive, principal: Principal, limit: int) -> tuple[str, Receive]:
    """The scope the request needs, and the ``receive`` to pass on (the body replayed if it was read).

    Only a ``POST /mcp`` from a principal lacking some scope has its body read (up to ``limit``
    bytes; a larger one passes untouched to the MCP endpoint's own 413).
    """
    path, method = scope["path"], scope["method"]
    if path.startswith("/api/") and method == "POST":
        return OAuthScope.WRITE.value, receive
    if path != MCP_PATH or method != "POST" or principal.scopes >= set(SCOPES):
        return OAuthScope.READ.value, receive
    body, complete, replay = await _read(receive, limit)
    needed = _needed_by(body) if complete else OAuthScope.READ.value
    return needed, replay


async def _read(receive: Receive, limit: int) -> tuple[bytes, bool, Receive]:
    chunks: list[Message] = []
    size, more = 0, True
    while more and size <= limit:
        message = await receive()
        chunks.append(message)
        if message["type"] != "http.request":
            break
        size += len(message.get("body", b""))
        more = message.get("more_body", False)
    body = b"".join(m.get("body", b"") for m in chunks if m["type"] == "http.request")

    async def replay() -> Message:
        return chunks.pop(0) if chunks else await receive()

    return body, not more and size <= limit, replay


def _needed_by(body: bytes) -> str:
    """The widest scope the JSON-RPC message (or batch) needs: a tool's, or reading."""
    try:
        parsed = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return OAuthScope.READ.value  # the MCP endpoint answers a parse error
    messages = parsed if isinstance(parsed, list) else [parsed]
    needed = [OAuthScope.READ.value]
    for message in messages:
        if isinstance(message, dict) and message.get("method") == "tools/call":
            params = message.get("params")
            name = params.get("name") if isinstance(params, dict) else None
            if isinstance(name, str) and name in TOOL_SCOPES:
                needed.append(TOOL_SCOPES[name].value)
    return max(needed, key=SCOPES.index)


@dataclass
class OAuthGate:
    """What the guard needs when OAuth is on (``--auth oauth`` or ``external``).

    Attributes:
        resource: Checks bearer tokens and answers with challenges.
        public: Paths served without a token (metadata, the authorization server's endpoints).
        body_limit: The most of a ``POST /mcp`` read to find the tool it calls.
        sign_in: The built-in server's owner sign-in: the viewer's login form takes the owner's
            password too, and keeps a session (a cookie) instead of the token.
        secure_cookies: Mark cookies ``Secure`` (the public address is https).
    """

    resource: ResourceServer
    public: frozenset[str]
    body_limit: int
    sign_in: OwnerSignIn | None = None
    secure_cookies: bool = False

    async def session(self, value: str) -> Principal | None:
        """The viewer session a cookie holds, or None."""
        if self.sign_in is None:
            return None
        row = await anyio.to_thread.run_sync(self.sign_in.auth.session, value)
        return None if row is None else Principal(effective_scopes(row.scopes))

    async def open_session(self) -> str:
        """A new viewer session for the owner (after the password): the cookie's value."""
        assert self.sign_in is not None  # only the built-in server's login opens sessions
        auth, resource = self.sign_in.auth, self.resource.resource
        return await anyio.to_thread.run_sync(lambda: auth.open_session(OWNER, VIEWER_CLIENT, VIEWER_SCOPES, resource))
