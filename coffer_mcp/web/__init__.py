"""The HTTP surface: MCP over streamable HTTP, the viewer's JSON API, the viewer page, file actions.

    build_app(service, token=...)      one Starlette app (run its lifespan)
    serve_http(service, host=, port=)  uvicorn, blocking; check_bind refuses an open public bind
    bind_http(...) -> HttpServer       bound but not yet serving (tests; ``start()``/``stop()``)

Security, on every route: the ``Host`` must be this server (DNS rebinding), an ``Origin`` must be
same-origin, and with a token configured (a strong one: ``check_token``) the request must carry
it (``Authorization: Bearer``, or the viewer's cookie, set by the login page a browser gets at
``/`` or by opening ``/?token=...`` once). Parameters of ``/api/v1`` are range-checked in
``_params``; bad input is a 400 with ``{code, message, hint}``. Filesystem actions also need the
per-process action token the viewer page carries, and act only inside ``COFFER_HOME/knowledge``.

With ``auth`` ``oauth`` the app is also an OAuth 2.1 authorization server for the store's owner
(``_oauth``: metadata, registration, PKCE S256, tokens bound to ``/mcp``, rotation, revocation;
``_consent``: the owner's consent page; ``_cimd``: client ID metadata documents) and a protected
resource (``_resource``: its metadata, 401 and 403 challenges, scopes per request); with
``external`` a protected resource for an identity provider's tokens (``auth_issuer``: checked by
``_external``'s ``ExternalTokenVerifier``, built by ``external_verifier(settings, resource_url)``).

Against hostile connections (``_connections``): deadlines for a request's headers and body, a
connection ceiling below the descriptor limit, failed accepts counted in one log line; idle MCP
sessions end after ``http_session_idle_timeout``.
"""

from coffer_mcp.web._actions import NoOpenerError, OpenerFailedError, OutsideStoreError
from coffer_mcp.web._api import ACTION_HEADER
from coffer_mcp.web._app import STATIC_DIR, build_app
from coffer_mcp.web._external import ExternalTokenVerifier, Introspection, external_verifier
from coffer_mcp.web._resource import ExternalAuth
from coffer_mcp.web._security import COOKIE_NAME
from coffer_mcp.web._serve import HttpServer, bind_http, check_bind, check_owner, serve_http

__all__ = [
    "ACTION_HEADER",
    "COOKIE_NAME",
    "STATIC_DIR",
    "ExternalAuth",
    "ExternalTokenVerifier",
    "HttpServer",
    "Introspection",
    "NoOpenerError",
    "OpenerFailedError",
    "OutsideStoreError",
    "bind_http",
    "build_app",
    "check_bind",
    "check_owner",
    "external_verifier",
    "serve_http",
]
