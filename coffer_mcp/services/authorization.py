"""The built-in OAuth authorization server's core: scopes, the owner, clients, grants and tokens.

Synchronous, over the index (``index.oauth``), so every server of a team shares it; the HTTP
surface (``web._oauth``) adapts it to the MCP SDK's provider protocol and the CLI (``coffer
auth``) lists and revokes. One grant is what one consent of the owner leads to: an authorization
code, then access tokens and refresh tokens, each refresh rotating to a new pair. A code or a
refresh token is used once: presenting it again is a replay (it was stolen, or the client is
confused), and revokes the whole grant (OAuth 2.1 §4.3.1, RFC 6749 §4.1.2).

Every token is 256 random bits (``secrets.token_urlsafe(32)``) behind a prefix naming its kind
(``coffer_at_`` for access tokens, so a leaked one is recognised), stored as its SHA-256. The
owner's password is stored as a salted scrypt hash; there is no default password.
"""

from __future__ import annotations

import base64
import enum
import hashlib
import hmac
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from coffer_mcp.errors import InvalidArgumentError, NotFoundError
from coffer_mcp.index import Index, OAuthClientRow, OAuthTokenRow, TokenKind
from coffer_mcp.settings import AUTH_SCOPES
from coffer_mcp.timeutil import from_epoch_ns, utc_now

__all__ = [
    "OWNER",
    "AuthorizationService",
    "Grant",
    "GrantRefusedError",
    "Issued",
    "OAuthClient",
    "Scope",
    "effective_scopes",
    "hash_password",
    "sha256_hex",
    "verify_password",
]


class Scope(str, enum.Enum):
    """What a token may do; each includes the ones below it (admin ⊃ write ⊃ read)."""

    # The names are declared once, with the settings that map an identity provider's roles to them.
    READ = AUTH_SCOPES[0]
    """List, search, grep and read documents; prompts and resources; the viewer's pages."""
    WRITE = AUTH_SCOPES[1]
    """Add, edit, delete, ingest, tag, reindex, snapshot, export; the viewer's file actions."""
    ADMIN = AUTH_SCOPES[2]
    """Create, reconfigure and delete knowledge bases; restore snapshots."""

    def __str__(self) -> str:
        return self.value


SCOPES: tuple[str, ...] = tuple(scope.value for scope in Scope)
_RANK = {scope.value: rank for rank, scope in enumerate(Scope)}

OWNER = "owner"
"""The subject of every token the built-in server issues: the store has one owner."""

ACCESS_PREFIX, REFRESH_PREFIX, CODE_PREFIX, REQUEST_PREFIX, SESSION_PREFIX = (
    "coffer_at_",
    "coffer_rt_",
    "coffer_ac_",
    "coffer_rq_",
    "coffer_vs_",
)
REQUEST_SECONDS = 600  # the owner has ten minutes to answer the consent page
CODE_SECONDS = 120  # a client exchanges its code at once
SESSION_SECONDS = 12 * 3600
UNAPPROVED_CLIENT_SECONDS = 24 * 3600  # a registration nobody approved is forgotten after a day
MIN_PASSWORD_CHARS = 12
MAX_PASSWORD_CHARS = 1024
# scrypt with N=2^15, r=8: 32 MiB and some 0.1 s per check, the cost that makes guessing slow.
_SCRYPT = {"n": 2**15, "r": 8, "p": 1}
_SCRYPT_MAXMEM = 64 * 1024 * 1024


def effective_scopes(scopes: Iterable[str]) -> frozenset[str]:
    """Every scope ``scopes`` grant, the ones they include counted (``coffer:write`` reads too)."""
    top = max((_RANK[s] for s in scopes if s in _RANK), default=-1)
    return frozenset(SCOPES[: top + 1])


def sha256_hex(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8")).hexdigest()


def hash_password(password: str) -> str:
    """``scrypt$N$r$p$salt$hash`` of ``password`` with a new random salt."""
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode("utf-8"), salt=salt, maxmem=_SCRYPT_MAXMEM, dklen=32, **_SCRYPT)
    n, r, p = _SCRYPT["n"], _SCRYPT["r"], _SCRYPT["p"]
    return f"scrypt${n}${r}${p}${_b64(salt)}${_b64(digest)}"


def verify_password(password: str, encoded: str) -> bool:
    """Whether ``password`` is the one ``encoded`` (``hash_password``) was made from; constant time."""
    try:
        kind, n, r, p, salt, digest = encoded.split("$")
        if kind != "scrypt":
            return False
        computed = hashlib.scrypt(
            password.encode("utf-8"),
            salt=base64.b64decode(salt),
            n=int(n),
            r=int(r),
            p=int(p),
            maxmem=_SCRYPT_MAXMEM,
            dklen=32,
        )
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(computed, base64.b64decode(digest))


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


class GrantRefusedError(Exception):
    """A token request refused as OAuth says (``error`` is RFC 6749's code); not a ``CofferError``:
    the HTTP surface answers it in OAuth's own error format."""

    def __init__(self, error: str, description: str) -> None:
        super().__init__(description)
        self.error = error
        self.description = description


@dataclass(frozen=True, slots=True)
class Issued:
    """A new access token and its refresh token (what a token endpoint answers)."""

    access_token: str
    refresh_token: str
    expires_in: int
    scopes: tuple[str, ...]


class OAuthClient(BaseModel):
    """A client, as ``coffer auth clients`` lists it (never its secret)."""

    client_id: str
    name: str
    kind: str
    """``registered`` (dynamic client registration) or ``metadata document`` (its client_id is a URL)."""
    redirect_uris: list[str]
    registered_at: str
    approved_at: str | None
    grants: int


class Grant(BaseModel):
    """One live grant, as ``coffer auth tokens`` lists it (never a token)."""

    grant_id: str
    client_id: str
    client_name: str
    subject: str
    scopes: list[str]
    resource: str
    granted_at: str
    expires_at: str
    """When its last token expires, unless refreshed."""


class AuthorizationService:
    """The authorization server's state over ``index``.

    Args:
        index: Where clients, tokens and the owner's password live.
        access_seconds: How long an access token lasts.
        refresh_seconds: How long a refresh token lasts (each refresh issues a new one).
        clock: Seconds since the epoch (tests pass one that lags, to mint expired tokens).
    """

    def __init__(
        self,
        index: Index,
        *,
        access_seconds: int = 3600,
        refresh_seconds: int = 30 * 86400,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.index = index
        self.access_seconds = access_seconds
        self.refresh_seconds = refresh_seconds
        self.clock = clock

    # -- the owner ---------------------------------------------------------------------------------

    def set_password(self, password: str) -> None:
        """Set the owner's password (replacing any), which the consent page and the viewer accept.

        Raises:
            InvalidArgumentError: shorter than ``MIN_PASSWORD_CHARS``, longer than
                ``MAX_PASSWORD_CHARS``, or blank at either end.
        """
        if password != password.strip() or not MIN_PASSWORD_CHARS <= len(password) <= MAX_PASSWORD_CHARS:
            raise InvalidArgumentError(
                f"The password must have {MIN_PASSWORD_CHARS} to {MAX_PASSWORD_CHARS} characters and no "
                "spaces at either end.",
                hint="Choose a longer passphrase (several words), or make one with: "
                'python3 -c "import secrets; print(secrets.token_urlsafe(16))"',
            )
        encoded = hash_password(password)
        with self.index.transaction():
            self.index.set_owner_secret(encoded, utc_now())

    def has_password(self) -> bool:
        return self.index.owner_secret() is not None

    def check_password(self, password: str) -> bool:
        """Whether ``password`` is the owner's (slow on purpose: scrypt); False when none is set."""
        encoded = self.index.owner_secret()
        return encoded is not None and bool(password) and verify_password(password, encoded)

    # -- clients -----------------------------------------------------------------------------------

    def save_client(
        self, client_id: str, name: str, metadata: dict[str, Any], secret: str | None, fetched_at: float | None = None
    ) -> None:
        """Store a client registered or fetched (its secret as a hash); forget stale registrations."""
        now = self.clock()
        existing = self.index.oauth_client(client_id)
        row = OAuthClientRow(
            client_id=client_id,
            name=name,
            metadata=metadata,
            secret_sha256=None if secret is None else sha256_hex(secret),
            created_at=existing.created_at if existing else utc_now(),
            fetched_at=fetched_at,
        )
        with self.index.transaction():
            self.index.save_oauth_client(row)
            self.index.purge_oauth(now, _iso(now - UNAPPROVED_CLIENT_SECONDS))

    def client(self, client_id: str) -> OAuthClientRow | None:
        return self.index.oauth_client(client_id)

    def clients(self) -> list[OAuthClient]:
        counts: dict[str, set[str]] = {}
        for token in self._live_grant_tokens():
            counts.setdefault(token.client_id, set()).add(token.grant_id)
        return [
            OAuthClient(
                client_id=row.client_id,
                name=row.name,
                kind="registered" if row.fetched_at is None else "metadata document",
                redirect_uris=[str(uri) for uri in row.metadata.get("redirect_uris") or []],
                registered_at=row.created_at,
                approved_at=row.approved_at,
                grants=len(counts.get(row.client_id, ())),
            )
            for row in self.index.oauth_clients()
        ]

    def revoke_client(self, client_id: str) -> None:
        """Forget the client and every token issued to it.

        Raises:
            NotFoundError: ``unknown_client``.
        """
        with self.index.transaction():
            found = self.index.delete_oauth_client(client_id)
        if not found:
            raise NotFoundError(
                f"There is no OAuth client {client_id[:200]!r}.",
                code="unknown_client",
                hint="List the clients with: coffer auth clients",
            )

    # -- an authorization, step by step ------------------------------------------------------------

    def start_request(self, client_id: str, scopes: Iterable[str], resource: str, details: dict[str, Any]) -> str:
        """Keep an authorization request until the owner answers it; its id (the consent page's).

        Anyone may start one, so the expired ones go first: requests never answered do not pile up.
        """
        now = self.clock()
        with self.index.transaction():
            self.index.purge_oauth(now, _iso(now - UNAPPROVED_CLIENT_SECONDS))
        return self._issue(
            REQUEST_PREFIX,
            "request",
            REQUEST_SECONDS,
            grant_id=_grant_id(),
            client_id=client_id,
            subject="",
            scopes=scopes,
            resource=resource,
            details=details,
        )

    def pending_request(self, request_id: str) -> OAuthTokenRow | None:
        """The request waiting for the owner, or None (unknown, answered, or over ten minutes old)."""
        row = self._live(request_id, "request")
        return None if row is None or row.used_at is not None else row

    def approve(self, request_id: str, subject: str, scopes: Iterable[str]) -> tuple[OAuthTokenRow, str] | None:
        """The owner said yes to ``scopes`` (those of the request they kept): the request and a new code.

        None when the request is unknown, already answered or expired.
        """
        request = self._answer(request_id)
        if request is None:
            return None
        granted = [scope for scope in request.scopes if scope in set(scopes)]
        code = self._issue(
            CODE_PREFIX,
            "code",
            CODE_SECONDS,
            grant_id=request.grant_id,
            client_id=request.client_id,
            subject=subject,
            scopes=granted,
            resource=request.resource,
            details=request.details,
        )
        with self.index.transaction():
            self.index.approve_oauth_client(request.client_id, utc_now())
        return request, code

    def deny(self, request_id: str) -> OAuthTokenRow | None:
        """The owner said no: the request (answered now), or None as for ``approve``."""
        return self._answer(request_id)

    def code(self, code: str) -> OAuthTokenRow | None:
        """The unexpired, unused authorization code; a used one is a replay and revokes its grant."""
        return self._once(code, "code")

    def exchange_code(self, code: str) -> Issued:
        """The code's first exchange: a new access token and refresh token.

        Raises:
            GrantRefusedError: ``invalid_grant``, the code was exchanged already (its grant is revoked).
        """
        return self._rotate(code, "code", None)

    def refresh_token(self, token: str) -> OAuthTokenRow | None:
        """The unexpired, unused refresh token; a used one is a replay and revokes its grant."""
        return self._once(token, "refresh")

    def refresh(self, token: str, scopes: Iterable[str] | None) -> Issued:
        """Rotate a refresh token: a new pair, ``scopes`` (None: the same) within the grant's.

        Raises:
            GrantRefusedError: ``invalid_grant``, the refresh token was used already (its grant is revoked).
        """
        return self._rotate(token, "refresh", None if scopes is None else tuple(scopes))

    def access_token(self, token: str) -> OAuthTokenRow | None:
        """The access token, or None (unknown, expired or revoked)."""
        return self._live(token, "access")

    def revoke(self, token: str, client_id: str) -> None:
        """RFC 7009: revoke the grant of ``token`` (an access or refresh token of ``client_id``)."""
        row = self.index.oauth_token(sha256_hex(token))
        if row is not None and row.client_id == client_id and row.kind in ("access", "refresh"):
            self._revoke(row.grant_id)

    def grants(self) -> list[Grant]:
        """Every grant with a token still valid, oldest first."""
        tokens: dict[str, list[OAuthTokenRow]] = {}
        for token in self._live_grant_tokens():
            tokens.setdefault(token.grant_id, []).append(token)
        return [
            Grant(
                grant_id=grant_id,
                client_id=rows[-1].client_id,
                client_name=rows[-1].client_name,
                subject=rows[-1].subject,
                scopes=list(rows[-1].scopes),
                resource=rows[-1].resource,
                granted_at=rows[0].created_at,
                expires_at=_iso(max(row.expires_at for row in rows)),
            )
            for grant_id, rows in tokens.items()
        ]

    def revoke_grant(self, grant_id: str) -> None:
        """Revoke every token of a grant.

        Raises:
            NotFoundError: ``unknown_grant``.
        """
        if not self._revoke(grant_id):
            raise NotFoundError(
                f"There is no grant {grant_id[:100]!r}.",
                code="unknown_grant",
                hint="List the grants with: coffer auth tokens",
            )

    # -- the viewer --------------------------------------------------------------------------------

    def open_session(self, subject: str, client_id: str, scopes: Iterable[str], resource: str) -> str:
        """A viewer session for the owner who signed in with the password (the cookie's value)."""
        return self._issue(
            SESSION_PREFIX,
            "session",
            SESSION_SECONDS,
            grant_id=_grant_id(),
            client_id=client_id,
            subject=subject,
            scopes=scopes,
            resource=resource,
        )

    def session(self, token: str) -> OAuthTokenRow | None:
        return self._live(token, "session")

    # -- internals ---------------------------------------------------------------------------------

    def _issue(
        self,
        prefix: str,
        kind: TokenKind,
        seconds: int,
        *,
        grant_id: str,
        client_id: str,
        subject: str,
        scopes: Iterable[str],
        resource: str,
        details: dict[str, Any] | None = None,
    ) -> str:
        value = prefix + secrets.token_urlsafe(32)
        now = self.clock()
        row = OAuthTokenRow(
            token_sha256=sha256_hex(value),
            kind=kind,
            grant_id=grant_id,
            client_id=client_id,
            subject=subject,
            scopes=tuple(scopes),
            resource=resource,
            expires_at=now + seconds,
            created_at=_iso(now),
            details=details or {},
        )
        with self.index.transaction():
            self.index.add_oauth_token(row)
        return value

    def _live(self, value: str, kind: TokenKind) -> OAuthTokenRow | None:
        row = self.index.oauth_token(sha256_hex(value))
        if row is None or row.kind != kind or row.expires_at <= self.clock():
            return None
        return row

    def _once(self, value: str, kind: TokenKind) -> OAuthTokenRow | None:
        row = self._live(value, kind)
        if row is not None and row.used_at is not None:
            self._revoke(row.grant_id)
            return None
        return row

    def _answer(self, request_id: str) -> OAuthTokenRow | None:
        with self.index.transaction():
            row = self.index.use_oauth_token(sha256_hex(request_id), utc_now())
        if row is None or row.kind != "request" or row.expires_at <= self.clock():
            return None
        return row

    def _rotate(self, value: str, kind: TokenKind, scopes: tuple[str, ...] | None) -> Issued:
        access = ACCESS_PREFIX + secrets.token_urlsafe(32)
        refresh = REFRESH_PREFIX + secrets.token_urlsafe(32)
        now = self.clock()
        with self.index.transaction():
            used = self.index.use_oauth_token(sha256_hex(value), _iso(now))
            if used is not None and used.kind == kind:
                granted = used.scopes if scopes is None else tuple(s for s in used.scopes if s in scopes)
                self.index.add_oauth_token(_successor(used, access, "access", granted, now, self.access_seconds))
                self.index.add_oauth_token(_successor(used, refresh, "refresh", granted, now, self.refresh_seconds))
                self.index.purge_oauth(now, _iso(now - UNAPPROVED_CLIENT_SECONDS))
                return Issued(access, refresh, self.access_seconds, granted)
        # Exchanged by another request between its load and now: a replay as well.
        row = self.index.oauth_token(sha256_hex(value))
        if row is not None:
            self._revoke(row.grant_id)
        raise GrantRefusedError("invalid_grant", f"the {'code' if kind == 'code' else 'refresh token'} was used")

    def _revoke(self, grant_id: str) -> int:
        with self.index.transaction():
            return self.index.revoke_oauth_grant(grant_id)

    def _live_grant_tokens(self) -> list[OAuthTokenRow]:
        now = self.clock()
        return [
            t
            for t in self.index.oauth_tokens()
            if t.kind in ("access", "refresh") and t.expires_at > now and not t.used_at
        ]


def _successor(
    used: OAuthTokenRow, value: str, kind: TokenKind, scopes: tuple[str, ...], now: float, seconds: int
) -> OAuthTokenRow:
    return OAuthTokenRow(
        token_sha256=sha256_hex(value),
        kind=kind,
        grant_id=used.grant_id,
        client_id=used.client_id,
        subject=used.subject,
        scopes=scopes,
        resource=used.resource,
        expires_at=now + seconds,
        created_at=_iso(now),
    )


def _grant_id() -> str:
    return "g_" + secrets.token_hex(6)


def _iso(epoch: float) -> str:
    return from_epoch_ns(int(epoch * 1_000_000_000))
