"""The viewer's login page: what a browser gets instead of 401 JSON when it opens ``/`` without the token.

The page is static HTML (no script: the Content-Security-Policy stays as strict as the viewer's)
holding one form that POSTs the token to ``/``. The guard checks it and answers like ``/?token=``
does: the viewer cookie and a 303 to ``/``, which keeps the address's ``#/…`` fragment, so a
bookmarked view opens after the login. The token travels in the request body, never in a URL
that access logs and browser history would keep. Only the page's stylesheet and icon are served
without the token; they hold nothing but presentation.
"""

from __future__ import annotations

import html
from pathlib import Path
from urllib.parse import parse_qs

from starlette.datastructures import Headers
from starlette.types import Receive, Scope

__all__ = ["MAX_FORM_BYTES", "PUBLIC_PATHS", "login_page", "read_form_token", "wants_login_form", "wants_login_page"]

PUBLIC_PATHS = frozenset({"/static/login.css", "/static/favicon.svg"})
MAX_FORM_BYTES = 4096  # a token and a little form encoding; anything longer is not a login
_PAGE = Path(__file__).resolve().parents[1] / "static" / "login.html"
_MESSAGE_SLOT = "{{MESSAGE}}"
_PASSWORD_SLOT = "{{PASSWORD}}"
_PASSWORD_WORDS = ", or the owner's password (set with <code>coffer auth set-password</code>)"
_FORM_TYPE = "application/x-www-form-urlencoded"


def wants_login_page(scope: Scope, headers: Headers) -> bool:
    """A browser opening the viewer (``GET /`` asking for HTML), not a script or an MCP client."""
    return scope["method"] == "GET" and scope["path"] == "/" and "text/html" in headers.get("accept", "").lower()


def wants_login_form(scope: Scope, headers: Headers) -> bool:
    """The login page's form being submitted (``POST /`` with a URL-encoded body)."""
    content_type = headers.get("content-type", "").partition(";")[0].strip().lower()
    return scope["method"] == "POST" and scope["path"] == "/" and content_type == _FORM_TYPE


def login_page(message: str = "", *, password: bool = False) -> bytes:
    """The login page's HTML, with ``message`` (escaped) shown above the form; ``password``: it says the
    owner's password is accepted too (the built-in authorization server's)."""
    page = _PAGE.read_text(encoding="utf-8")  # small, and read per refused page load only
    page = page.replace(_PASSWORD_SLOT, _PASSWORD_WORDS if password else "")
    return page.replace(_MESSAGE_SLOT, html.escape(message)).encode("utf-8")


async def read_form_token(receive: Receive) -> str | None:
    """The ``token`` field of a URL-encoded body, or None (absent, or a body over ``MAX_FORM_BYTES``)."""
    body = b""
    more = True
    while more:
        message = await receive()
        if message["type"] != "http.request":  # the client went away
            return None
        body += message.get("body", b"")
        if len(body) > MAX_FORM_BYTES:
            return None
        more = message.get("more_body", False)
    values = parse_qs(body.decode("utf-8", errors="replace")).get("token")
    return values[0] if values else None
