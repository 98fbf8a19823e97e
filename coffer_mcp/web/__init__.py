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

With a team's identity provider (``auth_issuer``), ``external_verifier(settings, resource_url)``
gives the MCP SDK's ``TokenVerifier`` for the access tokens it issues (``_external``).

Against hostile connections (``_connections``): deadlines for a request's headers and body, a
connection ceiling below the descriptor limit, failed accepts counted in one log line; idle MCP
sessions end after ``http_session_idle_timeout``.
"""

from coffer_mcp.web._actions import NoOpenerError, OpenerFailedError, OutsideStoreError
from coffer_mcp.web._api import ACTION_HEADER
from coffer_mcp.web._app import STATIC_DIR, build_app
from coffer_mcp.web._external import ExternalTokenVerifier, Introspection, external_verifier
from coffer_mcp.web._security import COOKIE_NAME
from coffer_mcp.web._serve import HttpServer, bind_http, check_bind, serve_http

__all__ = [
    "ACTION_HEADER",
    "COOKIE_NAME",
    "STATIC_DIR",
    "ExternalTokenVerifier",
    "HttpServer",
    "Introspection",
    "NoOpenerError",
    "OpenerFailedError",
    "OutsideStoreError",
    "bind_http",
    "build_app",
    "check_bind",
    "external_verifier",
    "serve_http",
]
