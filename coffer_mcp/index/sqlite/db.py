"""The one connection factory: every SQLite connection Coffer opens comes from ``connect``.

The stdlib ``sqlite3`` is used when it can load extensions; many builds cannot (this Linux
Python, macOS system Pythons), and then ``sqlean`` — a drop-in ``sqlite3`` with wheels for
every platform — is used instead, so sqlite-vec loads everywhere. ``sqlite_vec`` is imported
here and nowhere else (located by ``importlib``: importing it would import numpy).
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import os
import sqlite3 as _stdlib_sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from coffer_mcp.errors import StoreError

__all__ = ["Binding", "Connection", "binding", "connect", "database_errors", "vec_missing", "vec_version"]

log = logging.getLogger(__name__)

BUSY_TIMEOUT_MS = 30_000

Connection = Any  # a DB-API connection of whichever binding ``binding()`` chose


@dataclass(frozen=True, slots=True)
class Binding:
    """The SQLite module in use and what it can do."""

    module: ModuleType
    name: str
    sqlite_version: str
    can_load_extensions: bool


@functools.cache
def binding() -> Binding:
    """Choose the SQLite binding once per process."""
    if hasattr(_stdlib_sqlite3.Connection, "enable_load_extension"):
        return Binding(_stdlib_sqlite3, "sqlite3", _stdlib_sqlite3.sqlite_version, True)
    try:
        import sqlean
    except ImportError:
        # Not a warning on every command: a platform without sqlean.py's wheels runs keyword-only by
        # design, and `coffer doctor` and every vector search say what to install (vec_missing).
        log.info("sqlite3 cannot load extensions and sqlean.py is not installed: no vector search")
        return Binding(_stdlib_sqlite3, "sqlite3", _stdlib_sqlite3.sqlite_version, False)
    return Binding(sqlean, "sqlean", sqlean.sqlite_version, True)


@functools.cache
def database_errors() -> tuple[type[Exception], ...]:
    """The ``sqlite3.Error`` classes of every binding that may be in use."""
    errors: list[type[Exception]] = [_stdlib_sqlite3.Error]
    module = binding().module
    if module is not _stdlib_sqlite3:
        errors.append(module.Error)
    return tuple(errors)


def connect(path: Path | str, *, load_vec: bool = True) -> Connection:
    """Open a connection in autocommit mode with Coffer's PRAGMAs applied.

    Transactions are explicit (``BEGIN IMMEDIATE`` for writes, see ``index.queries.write``).
    """
    chosen = binding()
    try:
        conn = chosen.module.connect(
            str(path), timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False
        )
    except chosen.module.Error as exc:
        raise StoreError(
            f"Cannot open the index database {path}: {exc}.",
            hint="Check COFFER_HOME is writable; the index can be rebuilt with 'coffer kb reindex --all'.",
        ) from exc
    conn.row_factory = chosen.module.Row
    # SQLite's lower() folds ASCII letters only: a title filter or substring scan beyond ASCII
    # lower-cases with Python's (queries.py uses it only then: it costs a call per row).
    conn.create_function("unicode_lower", 1, _unicode_lower, deterministic=True)
    _apply_pragmas(conn)
    if load_vec and chosen.can_load_extensions:
        _load_sqlite_vec(conn)
    return conn


def _unicode_lower(value: object) -> object:
    return value.lower() if isinstance(value, str) else value


def _apply_pragmas(conn: Connection) -> None:
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    mode = _enable_wal(conn)
    if mode.lower() not in ("wal", "memory"):
        log.warning("SQLite refused WAL mode (got %s); concurrent writers will wait longer", mode)
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute("PRAGMA temp_store = MEMORY")
    conn.execute("PRAGMA cache_size = -32000")
    # Reads of big indexes (full-text posting lists, vector tables) from the OS page cache without
    # copying: measured 220 -> 155 ms for a brute-force KNN over 100,000 vectors here.
    conn.execute("PRAGMA mmap_size = 268435456")


@functools.cache
def _sqlite_vec_path() -> str | None:
    """The sqlite-vec loadable extension, found without importing the package (which imports numpy)."""
    spec = importlib.util.find_spec("sqlite_vec")
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.join(next(iter(spec.submodule_search_locations)), "vec0")


def _enable_wal(conn: Connection) -> str:
    """Switch a new database to WAL (the mode persists in the file).

    Switching needs an exclusive lock and SQLite does not wait on the busy handler for it, so
    processes opening a brand-new database at the same moment retry briefly.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        if mode.lower() == "wal":
            return mode
        try:
            return conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        except database_errors() as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def _load_sqlite_vec(conn: Connection) -> None:
    path = _sqlite_vec_path()
    if path is None:
        log.info("sqlite-vec is not installed: vector search is unavailable")
        return
    try:
        conn.enable_load_extension(True)
        conn.load_extension(path)
    except Exception as exc:  # noqa: BLE001 - a broken extension must not take keyword search down
        log.warning("could not load sqlite-vec (%s): vector search is unavailable", exc)
    finally:
        conn.enable_load_extension(False)


def vec_missing() -> str:
    """Why sqlite-vec is not loaded, with the command that adds what is missing."""
    if not binding().can_load_extensions:
        return "Python's sqlite3 cannot load extensions and sqlean.py is not installed (pip install sqlean.py)"
    if _sqlite_vec_path() is None:
        return "sqlite-vec is not installed (pip install sqlite-vec)"
    return "sqlite-vec is installed but did not load (the log says why; pip install --force-reinstall sqlite-vec)"


def vec_version(conn: Connection) -> str | None:
    """The loaded sqlite-vec version, or None."""
    try:
        return conn.execute("SELECT vec_version()").fetchone()[0]
    except database_errors():
        return None
