"""The guard in front of every route: Host and Origin checks (DNS rebinding), then the bearer token.

Order matters: a request from a foreign site is refused (403) before the token is looked at, so
such a page gets the same answer whatever token it tries. Tokens are compared in constant time,
and a configured token must be strong (``check_token``): a blank or short one is refused at
start-up, and an empty or blank presented value never matches. The viewer cannot send an
``Authorization`` header on a page load, so it may present the token once as ``/?token=...``:
the guard answers with an HttpOnly, SameSite=Strict
cookie holding a value *derived* from the token (never the token itself) and redirects to ``/``
so the token leaves the address bar and the history. A browser opening ``/`` without the token
gets a login page (``_login``) whose form posts the token and gets the same cookie; scripts and
MCP clients get ``401`` JSON. The cookie is accepted everywhere except ``/mcp``, which wants the
bearer header, as MCP clients send it.

With OAuth on (``--auth oauth`` or ``external``, ``_resource.OAuthGate``) a token is always
required, on loopback too: the HTTP token (every scope), or an OAuth access token checked by the
resource server (``_resource``), whose scopes must cover what the request needs, else 403 with a
step-up challenge; a 401 then names the protected resource metadata. The viewer's login form also
takes the owner's password (the built-in server), for a session cookie kept in the index.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from coffer_mcp.errors import ConfigError
from coffer_mcp.services.authorization import SCOPES
from coffer_mcp.web._login import (
    PUBLIC_PATHS,
    login_page,
    read_form_token,
    wants_login_form,
    wants_login_page,
)
from coffer_mcp.web._oauth import CONSENT_PATH
from coffer_mcp.web._owner import SignIn
from coffer_mcp.web._resource import SESSION_COOKIE, OAuthGate, Principal, required_scope

__all__ = [
    "COOKIE_NAME",
    "MIN_TOKEN_CHARS",
    "TOKEN_RECIPE",
    "Guard",
    "HostPolicy",
    "check_token",
    "is_loopback",
    "same_origin",
    "tokens_equal",
]

COOKIE_NAME = "coffer_viewer"
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
_WILDCARDS = ("", "0.0.0.0", "::")
_MCP_PATH = "/mcp"
# The viewer page and its assets: no framing (the open buttons must not be clickjacked), no
# script or style from anywhere but this server, no referrer leaking a KB path.
_PAGE_HEADERS = [
    (
        b"content-security-policy",
        (
            b"default-src 'self'; img-src 'self' data:; object-src 'none'; "
            b"base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
        ),
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
]


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback IP literals (``127.0.0.0/8``, ``::1``)."""
    name = host.strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


# A token guards every knowledge base: 16 visible characters at the least (``token_urlsafe(32)``
# gives 43), never padded with spaces an operator cannot see, and not one or two characters repeated.
MIN_TOKEN_CHARS = 16
_MIN_DISTINCT_CHARS = 5
_TOKEN_SHAPE = re.compile(r"[\x21-\x7e]+")  # printable ASCII without spaces: survives headers, URLs, shells
TOKEN_RECIPE = 'python3 -c "import secrets; print(secrets.token_urlsafe(32))"  (or: openssl rand -hex 24)'


def check_token(token: str) -> None:
    """Refuse a token too weak to protect the server (any bind: loopback is shared by local users).

    Nothing is stripped or fixed silently: a token the operator typed with a stray space is refused,
    so what the server checks is exactly what they will send.

    Raises:
        ConfigError: (``invalid_config``) the token is blank, short, padded, or nearly one character.
    """
    problem = _token_problem(token)
    if problem is not None:
        raise ConfigError(
            f"The HTTP token is unusable: {problem}.",
            hint=f"Set COFFER_HTTP_TOKEN (or --token) to a random value made with: {TOKEN_RECIPE}",
        )


def _token_problem(token: str) -> str | None:
    if not token.strip():
        return "it is blank"
    if token != token.strip():
        return "it starts or ends with whitespace"
    if not _TOKEN_SHAPE.fullmatch(token):
        return "it holds spaces, control or non-ASCII characters"
    if len(token) < MIN_TOKEN_CHARS:
        return f"it has {len(token)} characters; at least {MIN_TOKEN_CHARS} are needed"
    if len(set(token)) < _MIN_DISTINCT_CHARS:
        return f"it uses fewer than {_MIN_DISTINCT_CHARS} distinct characters"
    return None


def tokens_equal(given: str | None, expected: str) -> bool:
    """Compare a presented secret with the expected one in constant time; blank never matches."""
    if given is None or not given.strip() or not expected.strip():
        return False
    return hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8"))


def cookie_value(token: str) -> str:
    """What the viewer cookie holds: derived from the token, so the browser never stores the token."""
    return hmac.new(token.encode("utf-8"), b"coffer viewer cookie v1", hashlib.sha256).hexdigest()


def _split_host(value: str) -> tuple[str, int | None] | None:
    """``"[::1]:8765"`` -> ``("::1", 8765)``; None when it is not a plain host[:port]."""
    try:
        parts = urlsplit(f"//{value}")
        port = parts.port
    except ValueError:
        return None
    name = parts.hostname
    if not name or parts.username is not None or parts.path or parts.query or parts.fragment:
        return None
    return name.lower(), port


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class HostPolicy:
    """Which ``Host`` header values this server answers.

    A DNS-rebinding attack reaches the server under the attacker's *host name*, so the rule is:
    the loopback names and the bound address (on the bound port, when known); on a wildcard bind
    (``0.0.0.0``, ``::``) any IP literal too, since an IP literal cannot be rebound; and the
    operator's ``allowed_hosts``, where an entry without a port matches any port (a reverse
    proxy on 443 in front of 8765) and ``name:port`` only that port (a ``Host`` without a port
    being the default one, 80 or 443).
    """

    bound: frozenset[str]
    extra: frozenset[str]
    pinned: frozenset[tuple[str, int]]
    port: int | None
    any_ip: bool

    @classmethod
    def build(cls, host: str, port: int | None, allowed_hosts: Iterable[str] = ()) -> HostPolicy:
        """The policy for a server bound to ``host:port`` (port None: not known, so any port).

        Raises:
            ValueError: an ``allowed_hosts`` entry is not a host or host:port.
        """
        bare = host.strip("[]").lower()
        bound = set(LOOPBACK_NAMES)
        if bare not in _WILDCARDS:
            bound.add(bare)
        extra: set[str] = set()
        pinned: set[tuple[str, int]] = set()
        for entry in allowed_hosts:
            split = _split_host(entry.strip())
            if split is None:
                raise ValueError(f"not a host or host:port: {entry!r}")
            name, entry_port = split
            if entry_port is None:
                extra.add(name)
            else:
                pinned.add((name, entry_port))
        return cls(frozenset(bound), frozenset(extra), frozenset(pinned), port, any_ip=bare in _WILDCARDS)

    def allows(self, host_header: str | None) -> bool:
        """True when a request carrying this ``Host`` header is addressed to us."""
        split = _split_host(host_header or "")
        if split is None:
            return False
        name, port = split
        # A Host without a port names the scheme's default: 80 for http, 443 for https (a browser
        # leaves ":443" out, and behind a TLS proxy this server cannot tell which scheme was used).
        ports = (port,) if port is not None else (80, 443)
        if name in self.extra or any((name, p) in self.pinned for p in ports):
            return True
        if name not in self.bound and not (self.any_ip and _is_ip(name)):
            return False
        return self.port is None or (port or 80) == self.port


def same_origin(origin: str, host_header: str) -> bool:
    """True when ``Origin`` names the very host and port the request was sent to."""
    try:
        parts = urlsplit(origin)
        origin_port = parts.port
    except ValueError:
        return False
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/"):
        return False
    default = 443 if parts.scheme == "https" else 80
    split = _split_host(host_header)
    if split is None:
        return False
    name, port = split
    return parts.hostname.lower() == name and (origin_port or default) == (port or default)


@dataclass(frozen=True)
class Refusal:
    """Why the guard refused a request: the status and the JSON error body."""

    status: int
    code: str
    message: str
    hint: str

    def body(self) -> bytes:
        return json.dumps({"code": self.code, "message": self.message, "hint": self.hint}).encode("utf-8")


class Guard:
    """ASGI middleware checking Host, Origin, then who the request acts for and what it may do.

    Args:
        app: The application to protect (every route, including ``/mcp`` and static files).
        policy: The Host rule.
        token: The bearer token every request must carry, or None for none (loopback only).
        oauth: With OAuth on: OAuth bearer tokens too, the scope each request needs, the paths
            served to anyone (``_resource.OAuthGate``). Then a request always needs a token.
    """

    def __init__(self, app: ASGIApp, policy: HostPolicy, token: str | None, oauth: OAuthGate | None = None) -> None:
        if token:
            check_token(token)
        self.app = app
        self.policy = policy
        self.token = token or None
        self.oauth = oauth
        self.required = self.token is not None or oauth is not None
        self._cookie = cookie_value(token) if token else None
        self._public = PUBLIC_PATHS | (oauth.public if oauth else frozenset())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":
            await send({"type": "websocket.close", "code": 1008})  # no WebSocket endpoints here
            return
        headers = Headers(scope=scope)
        refusal = self.check_origin(headers)
        if refusal is None and self.required and wants_login_form(scope, headers):
            await self._login(receive, send)  # logged in or not: a resubmitted form must not hit a 405
            return
        principal = Principal.everything() if refusal or not self.required else await self.identify(scope, headers)
        if principal is None:
            await self._unauthorized(scope, headers, send)
            return
        refusal = refusal or _check_path(scope)
        if refusal is not None:
            await _refuse(refusal, send)
            return
        if self.oauth is not None and scope["path"] not in self._public:
            needed, receive = await required_scope(scope, receive, principal, self.oauth.body_limit)
            if needed not in principal.scopes:
                await self._insufficient(principal, needed, send)
                return
        if self.token and scope["path"] == "/" and tokens_equal(_query(scope).get("token"), self.token):
            await self._set_cookie(send, COOKIE_NAME, self._cookie or "")
            return
        principal.attach(scope)
        await self.app(scope, receive, _with_page_headers(scope, send))

    async def identify(self, scope: Scope, headers: Headers) -> Principal | None:
        """Who the request acts for: the HTTP token, an OAuth token, the viewer's cookie; None: nobody.

        ``/mcp`` takes a bearer token only, as MCP clients send it; a public path needs nothing.
        """
        path = scope["path"]
        if path in self._public:
            return Principal.everything()
        kind, _, given = headers.get("authorization", "").partition(" ")
        if kind.lower() == "bearer" and given.strip():
            if self.token and tokens_equal(given.strip(), self.token):
                return Principal.everything()
            return await self.oauth.resource.principal(given.strip()) if self.oauth else None
        if path == _MCP_PATH or path.startswith(_MCP_PATH + "/"):
            return None
        cookies = _cookies(headers)
        if self._cookie and tokens_equal(cookies.get(COOKIE_NAME), self._cookie):
            return Principal.everything()
        session = cookies.get(SESSION_COOKIE)
        if self.oauth and session:
            return await self.oauth.session(session)
        if self.token and path == "/" and tokens_equal(_query(scope).get("token"), self.token):
            return Principal.everything()
        return None

    async def _login(self, receive: Receive, send: Send) -> None:
        """The login form: the token (or the owner's password) gets a cookie, anything else the page again."""
        secret = await read_form_token(receive)
        if self.token and tokens_equal(secret, self.token):
            await self._set_cookie(send, COOKIE_NAME, self._cookie or "")
            return
        sign_in = self.oauth.sign_in if self.oauth else None
        if self.oauth is None or sign_in is None:
            await _send_login_page(send, _WRONG_TOKEN)
            return
        outcome = await sign_in.check(secret)
        if outcome is SignIn.THROTTLED:
            minutes = max(1, round(sign_in.retry_after() / 60))
            await _send_login_page(send, _TOO_MANY.format(minutes=minutes), 429, password=True)
        elif outcome is SignIn.PASSWORD:
            await self._set_cookie(send, SESSION_COOKIE, await self.oauth.open_session())
        else:
            await _send_login_page(send, _WRONG_SECRET, password=True)

    async def _unauthorized(self, scope: Scope, headers: Headers, send: Send) -> None:
        """No valid token: a browser opening the viewer gets the login page, anything else 401 JSON."""
        if wants_login_page(scope, headers):
            tried = _query(scope).get("token") is not None
            password = self.oauth is not None and self.oauth.sign_in is not None
            await _send_login_page(
                send, (_WRONG_SECRET if password else _WRONG_TOKEN) if tried else "", password=password
            )
            return
        if self.oauth is None:
            await _refuse(_UNAUTHORIZED, send)
            return
        presented = headers.get("authorization", "").lower().startswith("bearer ")
        challenge = self.oauth.resource.challenge(error="invalid_token" if presented else None)
        await _refuse(_UNAUTHORIZED_OAUTH, send, challenge)

    async def _insufficient(self, principal: Principal, needed: str, send: Send) -> None:
        """403 naming the scope to step up to: what the token holds, and what the request needs."""
        assert self.oauth is not None  # scopes are checked with OAuth on only
        wanted = sorted(principal.scopes | {needed}, key=SCOPES.index)
        refusal = Refusal(
            403,
            "insufficient_scope",
            f"This request needs the {needed} scope, which the token does not hold.",
            f"Authorize again granting {needed} (MCP clients ask by themselves on this answer).",
        )
        challenge = self.oauth.resource.challenge(
            error="insufficient_scope", scopes=wanted, description=f"{needed} required"
        )
        await _refuse(refusal, send, challenge)

    def check_origin(self, headers: Headers) -> Refusal | None:
        """403 unless ``Host`` is ours and ``Origin`` (when present) is same-origin."""
        host = headers.get("host")
        if not self.policy.allows(host):
            return Refusal(
                403,
                "forbidden_host",
                f"Host {host!r} is not served here.",
                "Connect through the address the server listens on, or add the name to the allowed hosts.",
            )
        origin = headers.get("origin")
        if origin is not None and not same_origin(origin, host or ""):
            return Refusal(
                403,
                "forbidden_origin",
                f"Cross-origin request from {origin!r} refused.",
                "Only pages served by this Coffer server may call it from a browser.",
            )
        return None

    async def _set_cookie(self, send: Send, name: str, value: str) -> None:
        secure = "; Secure" if self.oauth and self.oauth.secure_cookies else ""
        cookie = f"{name}={value}; Path=/; HttpOnly; SameSite=Strict{secure}"
        await send(
            {
                "type": "http.response.start",
                "status": 303,
                "headers": [
                    (b"location", b"/"),
                    (b"set-cookie", cookie.encode("latin-1")),
                    (b"cache-control", b"no-store"),
                    (b"content-length", b"0"),
                    *_PAGE_HEADERS,
                ],
            }
        )
        await send({"type": "http.response.body", "body": b""})


_UNAUTHORIZED = Refusal(
    401,
    "unauthorized",
    "This Coffer server requires a token.",
    "Send 'Authorization: Bearer <token>' (the server's COFFER_HTTP_TOKEN); in a browser "
    "open / and enter the token once.",
)
_UNAUTHORIZED_OAUTH = Refusal(
    401,
    "unauthorized",
    "This Coffer server requires a token: an OAuth access token, or its COFFER_HTTP_TOKEN.",
    "Connect an MCP client to /mcp: it finds the authorization server from this answer's WWW-Authenticate "
    "header and asks you to sign in; scripts send 'Authorization: Bearer <COFFER_HTTP_TOKEN>'.",
)
_WRONG_TOKEN = "That token is not right. Check it and try again."
_WRONG_SECRET = "That token or password is not right. Check it and try again."
_TOO_MANY = "Too many wrong attempts: try again in {minutes} min."
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _check_path(scope: Scope) -> Refusal | None:
    """400 for a path with control characters: no route has one, and routing would mangle it."""
    if _CONTROL.search(scope["path"]):
        return Refusal(
            400,
            "invalid_argument",
            "The request path holds control characters.",
            "Remove control characters (such as %0A or %00) from the path.",
        )
    return None


# Under "no-referrer" a browser posts a form with "Origin: null", which the Origin rule refuses;
# "same-origin" lets the login form name its origin and still sends nothing to other sites.
_LOGIN_HEADERS = [
    (b"referrer-policy", b"same-origin") if name == b"referrer-policy" else (name, value)
    for name, value in _PAGE_HEADERS
]


async def _send_login_page(send: Send, message: str, status: int = 401, *, password: bool = False) -> None:
    body = login_page(message, password=password)
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/html; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
                (b"cache-control", b"no-store"),
                (b"www-authenticate", b'Bearer realm="coffer"'),
                *_LOGIN_HEADERS,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _refuse(refusal: Refusal, send: Send, challenge: str | None = None) -> None:
    body = refusal.body()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"cache-control", b"no-store"),
    ]
    if challenge is not None:
        headers.append((b"www-authenticate", challenge.encode("latin-1")))
    elif refusal.status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="coffer"'))
    headers += _PAGE_HEADERS  # a browser may render a refusal too
    await send({"type": "http.response.start", "status": refusal.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _with_page_headers(scope: Scope, send: Send) -> Send:
    """Add the browser hardening headers to everything but the MCP endpoint and the consent page
    (which sends its own: its form may lead to the client's redirect URI). A response that sets one
    of them itself keeps its own (a document's original, shown by the browser's PDF viewer)."""
    if scope["path"] in (_MCP_PATH, CONSENT_PATH):
        return send

    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = list(message.get("headers", []))
            own = {name.lower() for name, _ in headers}
            message = {**message, "headers": headers + [(n, v) for n, v in _PAGE_HEADERS if n not in own]}
        await send(message)

    return wrapped


def _query(scope: Scope) -> dict[str, str]:
    raw = scope.get("query_string", b"").decode("latin-1")
    return {key: values[0] for key, values in parse_qs(raw).items()}


def _cookies(headers: Headers) -> dict[str, str]:
    """The cookies of a request, by name (the first of a name wins).

    Split by hand, as browsers send them (``name=value`` pairs joined by ``; ``): a browser sends
    every cookie of 127.0.0.1 to every port, and ``http.cookies.SimpleCookie`` gives up on the
    whole header at one value it does not parse (``prefs={"theme":"dark"}``, ``theme=dark mode``
    from another local app), which lost ours and kept a logged-in viewer at its login page.
    """
    found: dict[str, str] = {}
    for pair in headers.get("cookie", "").split(";"):
        name, sep, value = pair.partition("=")
        if sep:
            found.setdefault(name.strip(), value.strip())
    return found
