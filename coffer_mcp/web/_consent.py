"""The consent page: the owner signs in and allows (or denies) an application's authorization request.

``/authorize`` (the SDK's handler) checks the request (client, redirect URI, PKCE, scopes, resource)
and sends the browser here with the request's id. The page names the client, where it will
return, and what it asks for, one checkbox per scope (the owner may grant fewer); the owner
types the password (``coffer auth set-password``) or the HTTP token (``_owner``, throttled) and
allows, or denies without signing in. The answer goes back to the client's redirect URI with a
code (or ``error=access_denied``), ``state`` and ``iss`` (RFC 9207).

Like the viewer's login page: static HTML without script, a strict Content-Security-Policy (its
``form-action`` also names the client's redirect origin: browsers apply it to the redirect after
the form), no framing, and the guard's Host and Origin checks. The form carries a CSRF token
that must match a SameSite=Strict cookie set with the page (double submit): a request id alone
never lets another page answer for the owner.
"""

from __future__ import annotations

import hmac
import html
import secrets
from pathlib import Path
from urllib.parse import urlsplit

import anyio.to_thread
from mcp.server.auth.provider import construct_redirect_uri
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from coffer_mcp.index import OAuthTokenRow
from coffer_mcp.services.authorization import OWNER, AuthorizationService, Scope
from coffer_mcp.web._oauth import CONSENT_PATH, limited
from coffer_mcp.web._owner import OwnerSignIn, SignIn

__all__ = ["consent_route"]

CSRF_COOKIE = "coffer_csrf"
_STATIC = Path(__file__).resolve().parents[1] / "static"
_SCOPE_WORDS = {
    Scope.READ.value: "read and search your knowledge bases",
    Scope.WRITE.value: "add, edit, delete and ingest documents",
    Scope.ADMIN.value: "create, reconfigure, delete and restore whole knowledge bases",
}
_EXPIRED = (
    "This request has expired or was answered already.",
    "Go back to the application and connect again: it starts a new request.",
)


def consent_route(auth: AuthorizationService, sign_in: OwnerSignIn, issuer: str) -> Route:
    """The ``/authorize/consent`` route (GET shows the page, POST answers it)."""
    return Route(CONSENT_PATH, limited(_Consent(auth, sign_in, issuer).handle), methods=["GET", "POST"])


class _Consent:
    def __init__(self, auth: AuthorizationService, sign_in: OwnerSignIn, issuer: str) -> None:
        self.auth = auth
        self.sign_in = sign_in
        self.issuer = issuer

    async def handle(self, request: Request) -> Response:
        if request.method == "GET":
            request_id = request.query_params.get("request", "")
            pending = await self._pending(request_id)
            return await self._page(pending, request_id) if pending else _notice(400, "Request expired", *_EXPIRED)
        form = await request.form()
        request_id, csrf = str(form.get("request", "")), str(form.get("csrf", ""))
        if not csrf or not hmac.compare_digest(csrf.encode(), request.cookies.get(CSRF_COOKIE, "").encode()):
            return _notice(403, "Form expired", "This form is out of date.", "Reload the page and answer again.")
        pending = await self._pending(request_id)
        if pending is None:
            return _notice(400, "Request expired", *_EXPIRED)
        if form.get("decision") == "deny":
            denied = await anyio.to_thread.run_sync(self.auth.deny, request_id)
            return self._back(denied, error="access_denied") if denied else _notice(400, "Request expired", *_EXPIRED)
        return await self._approve(pending, request_id, form.get("secret"), [str(s) for s in form.getlist("scope")])

    async def _approve(self, pending: OAuthTokenRow, request_id: str, secret: object, scopes: list[str]) -> Response:
        outcome = await self.sign_in.check(secret if isinstance(secret, str) else None)
        if outcome is SignIn.THROTTLED:
            minutes = max(1, round(self.sign_in.retry_after() / 60))
            return await self._page(pending, request_id, f"Too many wrong attempts: try again in {minutes} min.", 429)
        if outcome is SignIn.WRONG:
            return await self._page(pending, request_id, "That password (or token) is not right.", 401)
        chosen = [scope for scope in pending.scopes if scope in scopes]
        if not chosen:
            return await self._page(pending, request_id, "Tick at least one permission, or deny.", 400)
        approved = await anyio.to_thread.run_sync(lambda: self.auth.approve(request_id, OWNER, chosen))
        if approved is None:
            return _notice(400, "Request expired", *_EXPIRED)
        return self._back(approved[0], code=approved[1])

    async def _pending(self, request_id: str) -> OAuthTokenRow | None:
        return await anyio.to_thread.run_sync(self.auth.pending_request, request_id) if request_id else None

    async def _page(self, pending: OAuthTokenRow, request_id: str, message: str = "", status: int = 200) -> Response:
        client = await anyio.to_thread.run_sync(self.auth.client, pending.client_id)
        csrf = secrets.token_urlsafe(32)
        redirect = str(pending.details.get("redirect_uri", ""))
        values = {
            "CLIENT_NAME": (client.name if client and client.name else "An unnamed application"),
            "CLIENT_ID": pending.client_id,
            "REDIRECT_URI": redirect,
            "REQUEST": request_id,
            "CSRF": csrf,
            "MESSAGE": message,
        }
        page = (_STATIC / "consent.html").read_text(encoding="utf-8")
        for key, value in values.items():
            page = page.replace("{{" + key + "}}", html.escape(value))
        page = page.replace("{{SCOPES}}", _scope_boxes(pending.scopes))
        response = Response(page, status_code=status, media_type="text/html", headers=_headers(_origin(redirect)))
        response.set_cookie(CSRF_COOKIE, csrf, path=CONSENT_PATH, httponly=True, samesite="strict")
        return response

    def _back(self, answered: OAuthTokenRow, **params: str) -> Response:
        """303 to the client's redirect URI with the answer, its ``state`` and our ``iss``."""
        state = answered.details.get("state")
        state = state if isinstance(state, str) else None
        location = construct_redirect_uri(str(answered.details["redirect_uri"]), **params, state=state, iss=self.issuer)
        headers = {"location": location, "cache-control": "no-store", "referrer-policy": "no-referrer"}
        return Response(status_code=303, headers=headers)


def _scope_boxes(scopes: tuple[str, ...]) -> str:
    boxes = [
        f'        <label><input type="checkbox" name="scope" value="{html.escape(scope)}" checked> '
        f"<code>{html.escape(scope)}</code>: {html.escape(_SCOPE_WORDS.get(scope, scope))}</label>"
        for scope in scopes
    ]
    return "\n".join(boxes)


def _origin(uri: str) -> str:
    parts = urlsplit(uri)
    return f"{parts.scheme}://{parts.netloc}" if parts.scheme in ("http", "https") and parts.netloc else ""


def _headers(redirect_origin: str) -> dict[str, str]:
    """The viewer's hardening headers, the form allowed to lead to the client's redirect origin."""
    form_action = f"'self' {redirect_origin}" if redirect_origin else "'self'"
    return {
        "content-security-policy": (
            "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; "
            f"form-action {form_action}; frame-ancestors 'none'"
        ),
        "x-content-type-options": "nosniff",
        "x-frame-options": "DENY",
        "referrer-policy": "same-origin",  # "no-referrer" makes a browser post "Origin: null", which the guard refuses
        "cache-control": "no-store",
    }


def _notice(status: int, title: str, message: str, advice: str) -> Response:
    page = (_STATIC / "notice.html").read_text(encoding="utf-8")
    page = page.replace("{{TITLE}}", html.escape(title)).replace("{{MESSAGE}}", html.escape(f"{message} {advice}"))
    return Response(page, status_code=status, media_type="text/html", headers=_headers(""))
