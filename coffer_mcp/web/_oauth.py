"""The built-in authorization server: the MCP SDK's OAuth handlers over ``services.authorization``.

The SDK's handlers do the protocol: authorization server metadata (RFC 8414), the authorization
request (PKCE S256 only: its model refuses ``plain``), the token endpoint (code with its PKCE
verifier, refresh) and dynamic client registration (RFC 7591). ``CofferProvider`` is the SDK's
``OAuthAuthorizationServerProvider`` over the synchronous core. Written here instead, and why:

- ``HashedSecretAuthenticator``: the SDK compares a client's secret as stored; Coffer stores only
  its SHA-256, and accepts HTTP Basic for a client registered for ``client_secret_post`` too.
- ``ResourceTokenHandler``: the SDK ignores the token request's ``resource`` (RFC 8707); a token
  for another resource is refused with ``invalid_target``.
- ``revoke``: the SDK's revocation handler requires a ``client_secret`` field, which a public
  client (PKCE only, as MCP clients are) does not have, and so refuses every public client.
- ``CofferClient`` (``_clients``): loopback redirects on any port, any known scope.

The authorization request ends on Coffer's own consent page (``_consent``), which authenticates
the owner; client ID metadata documents (a URL as client_id) are fetched by ``_cimd``.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import anyio.to_thread
from mcp.server.auth.handlers.authorize import AuthorizationHandler
from mcp.server.auth.handlers.metadata import MetadataHandler
from mcp.server.auth.handlers.register import RegistrationHandler
from mcp.server.auth.handlers.token import TokenHandler
from mcp.server.auth.middleware.client_auth import AuthenticationError, ClientAuthenticator
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    AuthorizeError,
    RefreshToken,
    RegistrationError,
    TokenError,
)
from mcp.server.auth.routes import build_metadata
from mcp.server.auth.settings import ClientRegistrationOptions, RevocationOptions
from mcp.server.transport_security import RequestBodyLimitMiddleware
from mcp.shared.auth import (
    OAuthClientInformationFull,
    OAuthMetadata,
    OAuthToken,
)
from pydantic import AnyHttpUrl, AnyUrl, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, request_response
from starlette.types import ASGIApp

from coffer_mcp.index import OAuthTokenRow
from coffer_mcp.services.authorization import SCOPES, AuthorizationService, GrantRefusedError, Scope, sha256_hex
from coffer_mcp.web._cimd import ClientDocuments, is_metadata_url
from coffer_mcp.web._clients import CofferClient, usable_redirect

__all__ = [
    "CONSENT_PATH",
    "DEFAULT_SCOPES",
    "OAUTH_PATHS",
    "CofferProvider",
    "authorization_routes",
    "limited",
    "same_resource",
]

AUTHORIZE_PATH, CONSENT_PATH, TOKEN_PATH, REGISTER_PATH, REVOKE_PATH = (
    "/authorize",
    "/authorize/consent",
    "/token",
    "/register",
    "/revoke",
)
METADATA_PATH = "/.well-known/oauth-authorization-server"
OAUTH_PATHS = frozenset({METADATA_PATH, AUTHORIZE_PATH, CONSENT_PATH, TOKEN_PATH, REGISTER_PATH, REVOKE_PATH})
"""The authorization server's paths: reached without a bearer token (each authenticates on its own)."""
DEFAULT_SCOPES = (Scope.READ.value, Scope.WRITE.value)
"""What a client that names no scope asks for: reading and curating documents, not administration."""
_PKCE_CHALLENGE = re.compile(r"[A-Za-z0-9._~-]{43,128}")
_NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}
MAX_FORM_BYTES = 64 * 1024  # a registration with many redirect URIs, a token request: all small


def same_resource(given: str, ours: str) -> bool:
    """Whether ``given`` names ``ours`` (compared as URLs: case and a default port aside, a trailing slash too)."""
    try:
        return str(AnyHttpUrl(given)).removesuffix("/") == str(AnyHttpUrl(ours)).removesuffix("/")
    except ValidationError:
        return False


class CofferProvider:
    """The SDK's ``OAuthAuthorizationServerProvider`` over the authorization service.

    Args:
        auth: The core.
        resource: This server's MCP endpoint (``PUBLIC_URL/mcp``): every token is bound to it.
        documents: Fetches clients whose client_id is a URL (their metadata documents).
    """

    def __init__(self, auth: AuthorizationService, resource: str, documents: ClientDocuments) -> None:
        self.auth = auth
        self.resource = resource
        self.documents = documents

    async def get_client(self, client_id: str) -> CofferClient | None:
        if is_metadata_url(client_id):
            return await self.documents.client(client_id)
        row = await anyio.to_thread.run_sync(self.auth.client, client_id)
        if row is None or row.fetched_at is not None:
            return None
        stored = {**row.metadata, "client_id": row.client_id, "client_secret": row.secret_sha256}
        return CofferClient.model_validate(stored)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        bad = [str(uri) for uri in client_info.redirect_uris or () if not usable_redirect(str(uri))]
        if bad:
            raise RegistrationError(
                "invalid_redirect_uri", f"redirect URIs must be https, or http to loopback: {', '.join(bad)}"
            )
        metadata = client_info.model_dump(mode="json", exclude={"client_secret"}, exclude_none=True)
        name = (client_info.client_name or "")[:200]
        await anyio.to_thread.run_sync(
            lambda: self.auth.save_client(client_info.client_id, name, metadata, client_info.client_secret)
        )

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        if params.resource is not None and not same_resource(params.resource, self.resource):
            raise AuthorizeError("invalid_target", f"this server issues tokens for {self.resource} only")
        if not _PKCE_CHALLENGE.fullmatch(params.code_challenge):
            raise AuthorizeError("invalid_request", "code_challenge must be an S256 challenge (43 characters)")
        details = {
            "state": params.state,
            "redirect_uri": str(params.redirect_uri),
            "redirect_uri_provided_explicitly": params.redirect_uri_provided_explicitly,
            "code_challenge": params.code_challenge,
        }
        scopes = params.scopes or list(DEFAULT_SCOPES)
        request = await anyio.to_thread.run_sync(
            lambda: self.auth.start_request(client.client_id, scopes, self.resource, details)
        )
        return f"{CONSENT_PATH}?request={request}"

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        row = await anyio.to_thread.run_sync(self.auth.code, authorization_code)
        if row is None or row.client_id != client.client_id:
            return None
        return AuthorizationCode(
            code=authorization_code,
            scopes=list(row.scopes),
            expires_at=row.expires_at,
            client_id=row.client_id,
            code_challenge=row.details["code_challenge"],
            redirect_uri=AnyUrl(row.details["redirect_uri"]),
            redirect_uri_provided_explicitly=row.details["redirect_uri_provided_explicitly"],
            resource=row.resource,
            subject=row.subject,
        )

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        return await self._tokens(lambda: self.auth.exchange_code(authorization_code.code))

    async def load_refresh_token(self, client: OAuthClientInformationFull, refresh_token: str) -> RefreshToken | None:
        row = await anyio.to_thread.run_sync(self.auth.refresh_token, refresh_token)
        if row is None or row.client_id != client.client_id:
            return None
        return RefreshToken(
            token=refresh_token,
            client_id=row.client_id,
            scopes=list(row.scopes),
            expires_at=int(row.expires_at),
            resource=row.resource,
            subject=row.subject,
        )

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        return await self._tokens(lambda: self.auth.refresh(refresh_token.token, scopes))

    async def load_access_token(self, token: str) -> AccessToken | None:
        row = await anyio.to_thread.run_sync(self.auth.access_token, token)
        return None if row is None else access_token(token, row)

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        await anyio.to_thread.run_sync(self.auth.revoke, token.token, token.client_id)

    async def exchange_identity_assertion(self, client: OAuthClientInformationFull, params: Any) -> OAuthToken:
        raise TokenError("unsupported_grant_type", "this authorization server does not take identity assertions")

    async def _tokens(self, issue: Any) -> OAuthToken:
        try:
            issued = await anyio.to_thread.run_sync(issue)
        except GrantRefusedError as exc:
            raise TokenError("invalid_grant", exc.description) from exc
        return OAuthToken(
            access_token=issued.access_token,
            expires_in=issued.expires_in,
            scope=" ".join(issued.scopes),
            refresh_token=issued.refresh_token,
        )


def access_token(token: str, row: OAuthTokenRow) -> AccessToken:
    """The SDK's view of a stored access token (``claims`` carries the client's name for the audit log)."""
    return AccessToken(
        token=token,
        client_id=row.client_id,
        scopes=list(row.scopes),
        expires_at=int(row.expires_at),
        resource=row.resource,
        subject=row.subject,
        claims={"client_name": row.client_name or row.client_id},
    )


class HashedSecretAuthenticator(ClientAuthenticator):
    """The SDK's client authentication, against a secret stored as its SHA-256 (module docstring)."""

    async def authenticate_request(self, request: Request) -> OAuthClientInformationFull:
        form = await request.form()
        basic = _basic_credentials(request.headers.get("authorization", ""))
        form_id = form.get("client_id")
        client_id = basic[0] if basic else form_id
        if not isinstance(client_id, str) or not client_id or (basic and form_id not in (None, basic[0])):
            raise AuthenticationError("Missing or mismatched client_id")
        client = await self.provider.get_client(client_id)
        if client is None:
            raise AuthenticationError("Invalid client_id")
        if client.client_secret is None:
            return client  # a public client: PKCE proves the code is its own
        presented = basic[1] if basic else form.get("client_secret")
        if not isinstance(presented, str) or not presented:
            raise AuthenticationError("Client secret is required")
        digest = sha256_hex(presented)
        if not hmac.compare_digest(digest.encode("ascii"), client.client_secret.encode("ascii", "replace")):
            raise AuthenticationError("Invalid client_secret")
        return client


def _basic_credentials(header: str) -> tuple[str, str] | None:
    if not header.lower().startswith("basic "):
        return None
    try:
        decoded = base64.b64decode(header[6:].strip(), validate=True).decode("utf-8")
    except (ValueError, binascii.Error, UnicodeDecodeError):
        return None
    client_id, sep, secret = decoded.partition(":")
    return (unquote(client_id), unquote(secret)) if sep else None


@dataclass
class ResourceTokenHandler(TokenHandler):
    """The SDK's token endpoint, refusing a ``resource`` other than this server's (RFC 8707 §2)."""

    resource: str = ""

    async def handle(self, request: Request) -> Response:
        form = await request.form()  # Starlette keeps it: the SDK's handler reads the same form
        resource = form.get("resource")
        if isinstance(resource, str) and not same_resource(resource, self.resource):
            return JSONResponse(
                {"error": "invalid_target", "error_description": f"this server issues tokens for {self.resource} only"},
                status_code=400,
                headers=_NO_STORE,
            )
        return await super().handle(request)


def _revocation(authenticator: HashedSecretAuthenticator, auth: AuthorizationService) -> Any:
    """RFC 7009: revoke the grant of the token a client presents; 200 whether or not it existed."""

    async def revoke(request: Request) -> Response:
        try:
            client = await authenticator.authenticate_request(request)
        except AuthenticationError as exc:
            return JSONResponse({"error": "invalid_client", "error_description": exc.message}, 401, _NO_STORE)
        token = (await request.form()).get("token")
        if not isinstance(token, str) or not token:
            return JSONResponse({"error": "invalid_request", "error_description": "token is required"}, 400, _NO_STORE)
        await anyio.to_thread.run_sync(auth.revoke, token, client.client_id)
        return Response(status_code=200, headers=_NO_STORE)

    return revoke


def server_metadata(issuer: str) -> OAuthMetadata:
    """RFC 8414 metadata: the SDK's, with what this server adds (CIMD, RFC 9207's ``iss``, public clients).

    The issuer is written as given (``https://host``, no slash added): clients compare it as a string
    with the protected resource metadata's ``authorization_servers`` and with ``iss``.
    """
    metadata = build_metadata(AnyHttpUrl(issuer), None, _registration(), RevocationOptions(enabled=True))
    methods = ["none", "client_secret_post", "client_secret_basic"]
    return OAuthMetadata.model_validate(
        {
            **metadata.model_dump(mode="json", exclude_none=True),
            "issuer": issuer,
            "client_id_metadata_document_supported": True,
            "authorization_response_iss_parameter_supported": True,
            "token_endpoint_auth_methods_supported": methods,
            "revocation_endpoint_auth_methods_supported": methods,
        }
    )


def _registration() -> ClientRegistrationOptions:
    return ClientRegistrationOptions(enabled=True, valid_scopes=list(SCOPES), default_scopes=list(DEFAULT_SCOPES))


def authorization_routes(provider: CofferProvider, issuer: str) -> list[Route]:
    """The authorization server's endpoints but the consent page (``_consent``)."""
    authenticator = HashedSecretAuthenticator(provider)
    token = ResourceTokenHandler(provider, authenticator, resource=provider.resource)
    return [
        Route(METADATA_PATH, MetadataHandler(server_metadata(issuer)).handle, methods=["GET"]),
        Route(AUTHORIZE_PATH, limited(AuthorizationHandler(provider).handle), methods=["GET", "POST"]),
        Route(TOKEN_PATH, limited(token.handle), methods=["POST"]),
        Route(REGISTER_PATH, limited(RegistrationHandler(provider, _registration()).handle), methods=["POST"]),
        Route(REVOKE_PATH, limited(_revocation(authenticator, provider.auth)), methods=["POST"]),
    ]


def limited(handler: Any) -> ASGIApp:
    """A request-response endpoint refusing a body over ``MAX_FORM_BYTES`` (413)."""
    return RequestBodyLimitMiddleware(request_response(handler), MAX_FORM_BYTES)
