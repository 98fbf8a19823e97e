"""The index port's part for the built-in OAuth authorization server: clients, tokens, the owner.

The authorization server of ``coffer serve --http --auth oauth`` keeps its state in the index, so
that every server of a team (one PostgreSQL index) accepts what any of them issued, and a
revocation through one is seen by all. Unlike the rest of the index this is not derived from the
files: deleting ``coffer.db`` signs every client out (and forgets the owner's password).

Nothing secret is stored as given: a token (an authorization request's id, a code, an access or
refresh token, a viewer session) is kept as the SHA-256 of its 256 random bits, a client secret
likewise, the owner's password as a salted scrypt hash (``services.authorization``). Expiry times
are seconds since the epoch (what OAuth and the SDK count in); other times are ISO 8601 text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

__all__ = ["OAuthClientRow", "OAuthStore", "OAuthTokenRow", "TokenKind"]

TokenKind = Literal["request", "code", "access", "refresh", "session"]
"""``request``: an authorization request waiting for the owner's consent; ``code``: an authorization
code; ``access`` and ``refresh``: the tokens of a grant; ``session``: a viewer signed in with the
owner's password."""


@dataclass(frozen=True, slots=True)
class OAuthClientRow:
    """One OAuth client: registered (RFC 7591) or known by its metadata document (``fetched_at`` set).

    ``metadata`` is the client's registration as the SDK models it (``OAuthClientInformationFull``)
    without its secret, whose SHA-256 is ``secret_sha256`` (None for a public client).
    ``approved_at`` is when the owner first consented to one of its requests: a registered client
    never approved is forgotten after a day (``purge_oauth``).
    """

    client_id: str
    name: str
    metadata: dict[str, Any]
    secret_sha256: str | None
    created_at: str
    fetched_at: float | None = None
    approved_at: str | None = None


@dataclass(frozen=True, slots=True)
class OAuthTokenRow:
    """One stored token, by the SHA-256 of its value.

    ``grant_id`` ties together what one consent led to (its code, and every access and refresh
    token rotated from it): revoking the grant revokes them all. ``used_at`` is set once a code or
    a refresh token has been exchanged; presenting it again is a replay. ``details`` holds what
    the kind needs besides (a code's PKCE challenge and redirect URI, a request's parameters).
    ``client_name`` is read from the client's row, for display and the audit log's actor.
    """

    token_sha256: str
    kind: TokenKind
    grant_id: str
    client_id: str
    subject: str
    scopes: tuple[str, ...]
    resource: str
    expires_at: float
    created_at: str
    used_at: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    client_name: str = ""


class OAuthStore(Protocol):
    """What the authorization server asks of the index (part of ``index.port.Index``).

    Writes run inside ``Index.transaction()``, like every other write.
    """

    def save_oauth_client(self, client: OAuthClientRow) -> None:
        """Insert ``client``, or replace the row with its ``client_id``."""
        ...

    def oauth_client(self, client_id: str) -> OAuthClientRow | None: ...

    def oauth_clients(self) -> list[OAuthClientRow]:
        """Every client, oldest first."""
        ...

    def approve_oauth_client(self, client_id: str, at: str) -> None:
        """Record the owner's first consent to the client (a later one keeps the first time)."""
        ...

    def delete_oauth_client(self, client_id: str) -> bool:
        """Forget the client and every token issued to it; whether it existed."""
        ...

    def add_oauth_token(self, token: OAuthTokenRow) -> None: ...

    def oauth_token(self, token_sha256: str) -> OAuthTokenRow | None:
        """The token with this hash, used or not, expired or not (the caller judges)."""
        ...

    def use_oauth_token(self, token_sha256: str, at: str) -> OAuthTokenRow | None:
        """Mark the token used, if it was not: the row as it was, or None when it is unknown or was
        used already. Atomic: of two servers exchanging one code at once, one gets the row."""
        ...

    def oauth_tokens(self) -> list[OAuthTokenRow]:
        """Every stored token, oldest first (for listing grants; the caller judges expiry)."""
        ...

    def revoke_oauth_grant(self, grant_id: str) -> int:
        """Delete every token of the grant; how many there were."""
        ...

    def purge_oauth(self, now: float, unapproved_before: str) -> int:
        """Delete the tokens expired at ``now`` and the registered clients never approved, created
        before ``unapproved_before``; how many rows went."""
        ...

    def owner_secret(self) -> str | None:
        """The owner's password hash, or None when no password is set."""
        ...

    def set_owner_secret(self, secret: str | None, at: str) -> None:
        """Store the owner's password hash (None: remove the password)."""
        ...
