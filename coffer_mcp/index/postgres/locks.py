"""Cross-process locks as PostgreSQL advisory locks, for Coffer servers sharing one index.

Coffer holds its file lock of a name first (which orders this process's threads), then this one,
which excludes every other process using the database, on any machine. A lock is a session lock
on a connection kept for locking only: the index's other connections may be replaced after an
error without losing it, and if its own connection dies the server releases it (no lock outlives
a dead process). Nested locks of one thread (the registry, then a knowledge base) share that
connection; PostgreSQL counts a session's re-locks of one key, so each release undoes one.
"""

from __future__ import annotations

import hashlib

import psycopg

from coffer_mcp.errors import StoreError
from coffer_mcp.index.postgres.connection import Connection

__all__ = ["acquire", "key_of", "release"]


def key_of(name: str) -> int:
    """The advisory lock key of ``name``: 64 bits of its hash (signed, as PostgreSQL's bigint)."""
    digest = hashlib.blake2b(f"coffer-mcp:{name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def acquire(conn: Connection, name: str, timeout: float) -> None:
    """Take the lock, waiting at most ``timeout`` seconds.

    Raises:
        StoreError: code ``busy`` when another process held it all that time.
    """
    key = key_of(name)
    # Free (the usual case): one round trip. Held elsewhere: wait, under a timeout (four).
    row = conn.execute("SELECT pg_try_advisory_lock(%s) AS got", (key,)).fetchone()
    if row is not None and row["got"]:
        return
    if timeout <= 0:
        raise _busy(name)
    try:
        with conn.transaction():  # lock_timeout for this wait only; the session lock outlives the transaction
            conn.execute("SELECT set_config('lock_timeout', %s, true)", (f"{max(1, round(timeout * 1000))}ms",))
            conn.execute("SELECT pg_advisory_lock(%s)", (key,))
    except psycopg.errors.LockNotAvailable as exc:
        raise _busy(name) from exc


def release(conn: Connection, name: str) -> None:
    conn.execute("SELECT pg_advisory_unlock(%s)", (key_of(name),))


def _busy(name: str) -> StoreError:
    return StoreError(
        f"Timed out waiting for another writer on '{name}' (a PostgreSQL advisory lock).",
        code="busy",
        hint="Another Coffer process is writing; retry when it has finished.",
    )
