"""Connections to PostgreSQL, and psycopg's errors turned into ``StoreError`` with a hint.

``psycopg`` is imported here and in the other modules of this package only. Every connection is
opened by ``connect`` (autocommit: a write is one ``transaction()``; rows as dicts). Its commits
do not wait for the WAL flush (``synchronous_commit=off``, unless the URL's ``options`` set it):
the same trade as SQLite's ``synchronous=NORMAL`` — a crash of the database server may roll back
the last fraction of a second of commits, never corrupt — since the files are the truth and the
next reconcile or reindex restores those rows; waiting costs a disk flush per write transaction,
several per ingested document (docs/benchmarks.md, "PostgreSQL backend"). Errors
never carry the password: ``display_url`` is the URL without it, and ``scrub`` removes it (and
anything shaped like one) from a message before it is shown.
"""

from __future__ import annotations

import re
from typing import Any

import psycopg
from psycopg import conninfo
from psycopg.rows import dict_row

from coffer_mcp.errors import StoreError

__all__ = [
    "CONNECT_TIMEOUT_S",
    "Connection",
    "clean",
    "connect",
    "display_connection",
    "display_url",
    "lost",
    "lower_sql",
    "refused",
    "scrub",
    "unicode_collation",
]

CONNECT_TIMEOUT_S = 10

Connection = psycopg.Connection[dict[str, Any]]

_URL_HINT = (
    "Check COFFER_DATABASE_URL (postgresql://USER@HOST:5432/DATABASE) and that the server is running and "
    "reachable from here; keep the password out of config files (the environment, or a libpq passfile)."
)
_SECRETS = [
    (re.compile(r"(://[^:/@\s]*:)[^@\s]*@"), r"\1***@"),  # scheme://user:PASSWORD@host
    (re.compile(r"(password\s*=\s*)(?:'(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE), r"\1***"),  # key=value form
]


def clean(value: Any) -> Any:
    """A string PostgreSQL can store: text cannot hold NUL (SQLite's can), written as U+FFFD (both
    separate tokens, so keyword search is unchanged). Anything else is returned as is."""
    return value.replace("\x00", "\ufffd") if isinstance(value, str) else value


# Collations under which lower() lower-cases every letter, whatever the database's locale:
# PostgreSQL 17's built-in C.UTF-8, and ICU's root locale; the first the server has is used.
_UNICODE_COLLATIONS = ["pg_c_utf8", "und-x-icu"]


def unicode_collation(conn: Connection) -> str | None:
    """The collation ``lower_sql`` uses beyond ASCII, or None when the server has none of them."""
    row = conn.execute(
        """SELECT collname FROM pg_collation
           WHERE collname = ANY(%(names)s) AND collencoding IN (-1, pg_char_to_encoding(getdatabaseencoding()))
           ORDER BY array_position(%(names)s, collname::text) LIMIT 1""",
        {"names": _UNICODE_COLLATIONS},
    ).fetchone()
    return None if row is None else str(row["collname"])


def lower_sql(expression: str, text: str, collation: str | None) -> str:
    """SQL lower-casing ``expression`` to compare with ``text`` lower-cased in Python.

    For ASCII ``text``, ASCII letters only (``ascii_lower``, as SQLite's ``lower()``, cheap); beyond
    it, every letter under ``collation`` (``unicode_collation``): without one, ASCII letters only.
    """
    if text.isascii() or collation is None:
        return f"ascii_lower({expression})"
    return f'lower({expression} COLLATE "{collation}")'


def connect(url: str) -> Connection:
    """A new autocommit connection to ``url``.

    Raises:
        StoreError: the URL is malformed, or the server cannot be reached or refuses us.
    """
    try:
        options = conninfo.conninfo_to_dict(url)
    except psycopg.Error as exc:
        raise StoreError(
            f"The database URL {display_url(url)} is not a valid PostgreSQL URL: {scrub(str(exc), url)}.",
            hint=_URL_HINT,
        ) from exc
    extra: dict[str, Any] = {} if "connect_timeout" in options else {"connect_timeout": CONNECT_TIMEOUT_S}
    extra.setdefault("application_name", options.get("application_name", "coffer-mcp"))
    given = str(options.get("options") or "")
    if "synchronous_commit" not in given:
        extra["options"] = f"{given} -c synchronous_commit=off".strip()
    try:
        return psycopg.connect(url, autocommit=True, row_factory=dict_row, **extra)
    except psycopg.Error as exc:
        raise StoreError(
            f"Cannot connect to the PostgreSQL index at {display_url(url)}: {_first_line(exc, url)}.", hint=_URL_HINT
        ) from exc


def lost(url: str, exc: BaseException) -> StoreError:
    """The error for a connection that failed during a call (server restarted, network gone)."""
    return StoreError(
        f"The PostgreSQL index at {display_url(url)} is unreachable: {_first_line(exc, url)}.",
        hint="Check that the database server is up; Coffer reconnects on the next call once it is back.",
    )


def refused(url: str, exc: BaseException) -> StoreError:
    """The error for a statement the server refused (a role without a privilege, a bug, or a damaged
    or foreign schema)."""
    if isinstance(exc, psycopg.errors.InsufficientPrivilege):  # e.g. PostgreSQL 15+: only the owner creates in public
        hint = (
            "The role in COFFER_DATABASE_URL lacks a privilege on the database: make it the database's owner "
            "(createdb -O ROLE DBNAME, or ALTER DATABASE DBNAME OWNER TO ROLE), or GRANT CREATE ON SCHEMA public "
            "TO ROLE."
        )
    else:
        hint = "Run 'coffer doctor'; the index is rebuildable from the files with 'coffer kb reindex --all'."
    return StoreError(
        f"The PostgreSQL index at {display_url(url)} refused a statement: {_first_line(exc, url)}.", hint=hint
    )


def display_url(url: str) -> str:
    """Where ``url`` points, without its password (or a placeholder when it does not parse)."""
    try:
        options = conninfo.conninfo_to_dict(url)
    except psycopg.Error:
        return "(an unparsable URL)"
    return _where(options.get("host"), options.get("port"), options.get("user"), options.get("dbname"))


def display_connection(conn: Connection) -> str:
    """Where ``conn`` is connected, from the parameters it really used (libpq's defaults filled in)."""
    info = conn.info
    return _where(info.host, info.port, info.user, info.dbname)


def _where(host: Any, port: Any, user: Any, dbname: Any) -> str:
    """A URL for a TCP host; for a Unix socket (a host that is a folder), the socket's own path, as libpq
    names it: a URL cannot hold a folder as its host, and a made-up one misleads whoever checks it."""
    port = port or 5432
    if host and not str(host).startswith("/"):
        return f"postgresql://{f'{user}@' if user else ''}{host}:{port}/{dbname or ''}"
    socket = f"{host}/.s.PGSQL.{port}" if host else f"the default socket (port {port})"
    as_user = f" as user {user!r}" if user else ""
    return f"database {str(dbname or user or '')!r}{as_user} on {socket}"


def scrub(message: str, url: str) -> str:
    """``message`` without the password of ``url`` nor anything that looks like a password."""
    try:
        password = conninfo.conninfo_to_dict(url).get("password")
    except psycopg.Error:
        password = None
    for pattern, replacement in _SECRETS:
        message = pattern.sub(replacement, message)
    if password and len(str(password)) >= 3:  # shorter ones would blank out ordinary words
        message = message.replace(str(password), "***")
    return message


def _first_line(exc: BaseException, url: str) -> str:
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    return scrub(" ".join(lines[:2]) if lines else type(exc).__name__, url).rstrip(".?! ")  # our "." ends it
