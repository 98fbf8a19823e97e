"""One Starlette app: the MCP server at ``/mcp``, the JSON API at ``/api/v1``, the viewer at ``/``.

Every route sits behind one ``Guard`` (Host, Origin, token). The SDK's own DNS-rebinding check
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

from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from coffer_mcp.mcp_server import build_server
from coffer_mcp.services import Coffer
from coffer_mcp.web._api import api_routes
from coffer_mcp.web._body_limit import TooLargeAsJsonRpc, mcp_body_limit
from coffer_mcp.web._security import Guard, HostPolicy, check_token
from coffer_mcp.web._surrogates import LoneSurrogateAsJsonRpc

__all__ = ["STATIC_DIR", "build_app"]

STATIC_DIR = Path(__file__).resolve().parents[1] / "static"
_PAGE = "index.html"
_TOKEN_SLOT = "{{ACTION_TOKEN}}"


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

    Raises:
        ConfigError: the token is weak (see ``check_token``).
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
    routes = [
        *mcp_routes,
        Route("/", _viewer_page(action_token), methods=["GET", "HEAD"]),
        Mount("/api/v1", routes=api_routes(service, action_token)),
        Mount("/static", StaticFiles(directory=STATIC_DIR), name="static"),
    ]
    guard = Middleware(Guard, policy=HostPolicy.build(host, port, allowed_hosts), token=token)
    return Starlette(routes=routes, middleware=[guard], lifespan=lifespan)


def _viewer_page(action_token: str) -> Callable[[Request], Awaitable[Response]]:
    """The viewer's HTML with this process's action token embedded (read once, served many times)."""
    page = (STATIC_DIR / _PAGE).read_text(encoding="utf-8").replace(_TOKEN_SLOT, html.escape(action_token))

    async def viewer(request: Request) -> Response:
        return HTMLResponse(page, headers={"cache-control": "no-store"})

    return viewer
