"""The SQL of the authorization server's rows in PostgreSQL (``index.oauth``; migration ``0011_oauth``)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from coffer_mcp.index.oauth import OAuthClientRow, OAuthTokenRow
from coffer_mcp.index.postgres.connection import Connection, clean
from coffer_mcp.index.rows import client_row, token_row

__all__ = [
    "SCHEMA",
    "add_token",
    "approve_client",
    "client",
    "clients",
    "delete_client",
    "owner_secret",
    "purge",
    "revoke_grant",
    "save_client",
    "set_owner_secret",
    "token",
    "tokens",
    "use_token",
]

SCHEMA = """
-- The built-in OAuth authorization server (index/oauth.py): not derived from the files. Tokens
-- and client secrets are kept as SHA-256 hashes, the owner's password as a scrypt hash.
CREATE TABLE oauth_clients (
    client_id text COLLATE "C" PRIMARY KEY,
    name text NOT NULL DEFAULT '',
    metadata text NOT NULL DEFAULT '{}',
    secret_sha256 text,
    created_at text COLLATE "C" NOT NULL,
    fetched_at double precision,
    approved_at text COLLATE "C"
);
CREATE TABLE oauth_tokens (
    token_sha256 text COLLATE "C" PRIMARY KEY,
    kind text NOT NULL,
    grant_id text COLLATE "C" NOT NULL,
    client_id text COLLATE "C" NOT NULL,
    subject text NOT NULL,
    scopes text NOT NULL,
    resource text NOT NULL,
    expires_at double precision NOT NULL,
    created_at text COLLATE "C" NOT NULL,
    used_at text,
    details text NOT NULL DEFAULT '{}'
);
CREATE INDEX oauth_tokens_by_grant ON oauth_tokens (grant_id);
CREATE INDEX oauth_tokens_by_client ON oauth_tokens (client_id);
CREATE INDEX oauth_tokens_by_expiry ON oauth_tokens (expires_at);
CREATE TABLE oauth_owner (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    secret text NOT NULL,
    set_at text NOT NULL
);
"""

_TOKEN = """SELECT t.*, coalesce(c.name, '') AS client_name
            FROM oauth_tokens t LEFT JOIN oauth_clients c ON c.client_id = t.client_id"""


def save_client(conn: Connection, row: OAuthClientRow) -> None:
    conn.execute(
        """INSERT INTO oauth_clients (client_id, name, metadata, secret_sha256, created_at, fetched_at, approved_at)
           VALUES (%s, %s, %s, %s, %s, %s, %s)
           ON CONFLICT (client_id) DO UPDATE SET name = excluded.name, metadata = excluded.metadata,
               secret_sha256 = excluded.secret_sha256, fetched_at = excluded.fetched_at,
               approved_at = coalesce(oauth_clients.approved_at, excluded.approved_at)""",
        _clean(
            row.client_id,
            row.name,
            json.dumps(row.metadata, ensure_ascii=False),
            row.secret_sha256,
            row.created_at,
            row.fetched_at,
            row.approved_at,
        ),
    )


def client(conn: Connection, client_id: str) -> OAuthClientRow | None:
    row = conn.execute("SELECT * FROM oauth_clients WHERE client_id = %s", (clean(client_id),)).fetchone()
    return None if row is None else client_row(row)


def clients(conn: Connection) -> list[OAuthClientRow]:
    return [client_row(row) for row in conn.execute("SELECT * FROM oauth_clients ORDER BY created_at, client_id")]


def approve_client(conn: Connection, client_id: str, at: str) -> None:
    conn.execute(
        "UPDATE oauth_clients SET approved_at = %s WHERE client_id = %s AND approved_at IS NULL", (at, clean(client_id))
    )


def delete_client(conn: Connection, client_id: str) -> bool:
    conn.execute("DELETE FROM oauth_tokens WHERE client_id = %s", (clean(client_id),))
    return conn.execute("DELETE FROM oauth_clients WHERE client_id = %s", (clean(client_id),)).rowcount > 0


def add_token(conn: Connection, row: OAuthTokenRow) -> None:
    conn.execute(
        """INSERT INTO oauth_tokens (token_sha256, kind, grant_id, client_id, subject, scopes, resource,
               expires_at, created_at, used_at, details)
           VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)""",
        _clean(
            row.token_sha256,
            row.kind,
            row.grant_id,
            row.client_id,
            row.subject,
            " ".join(row.scopes),
            row.resource,
            row.expires_at,
            row.created_at,
            row.used_at,
            json.dumps(row.details, ensure_ascii=False),
        ),
    )


def token(conn: Connection, token_sha256: str) -> OAuthTokenRow | None:
    row = conn.execute(f"{_TOKEN} WHERE t.token_sha256 = %s", (clean(token_sha256),)).fetchone()
    return None if row is None else token_row(row)


def use_token(conn: Connection, token_sha256: str, at: str) -> OAuthTokenRow | None:
    # One statement decides: of two writers, the second finds used_at set and changes nothing.
    changed = conn.execute(
        "UPDATE oauth_tokens SET used_at = %s WHERE token_sha256 = %s AND used_at IS NULL", (at, clean(token_sha256))
    ).rowcount
    if not changed:
        return None
    found = token(conn, token_sha256)
    return None if found is None else dataclasses.replace(found, used_at=None)  # the row as it was


def tokens(conn: Connection) -> list[OAuthTokenRow]:
    return [token_row(row) for row in conn.execute(f"{_TOKEN} ORDER BY t.created_at, t.token_sha256")]


def revoke_grant(conn: Connection, grant_id: str) -> int:
    return conn.execute("DELETE FROM oauth_tokens WHERE grant_id = %s", (clean(grant_id),)).rowcount


def purge(conn: Connection, now: float, unapproved_before: str) -> int:
    expired = conn.execute("DELETE FROM oauth_tokens WHERE expires_at <= %s", (now,)).rowcount
    forgotten = conn.execute(
        """DELETE FROM oauth_clients WHERE approved_at IS NULL AND fetched_at IS NULL AND created_at < %s
               AND NOT EXISTS (SELECT 1 FROM oauth_tokens t WHERE t.client_id = oauth_clients.client_id)""",
        (unapproved_before,),
    ).rowcount
    return expired + forgotten


def owner_secret(conn: Connection) -> str | None:
    row = conn.execute("SELECT secret FROM oauth_owner WHERE one").fetchone()
    return None if row is None else row["secret"]


def set_owner_secret(conn: Connection, secret: str | None, at: str) -> None:
    if secret is None:
        conn.execute("DELETE FROM oauth_owner")
        return
    conn.execute(
        """INSERT INTO oauth_owner (one, secret, set_at) VALUES (true, %s, %s)
           ON CONFLICT (one) DO UPDATE SET secret = excluded.secret, set_at = excluded.set_at""",
        (secret, at),
    )


def _clean(*values: Any) -> tuple[Any, ...]:
    """Parameters PostgreSQL can store (text without NUL, ``connection.clean``)."""
    return tuple(map(clean, values))
