"""Fixtures of the index tests: the session's PostgreSQL (``tests.postgres``)."""

from tests.postgres import postgres_server, postgres_url  # noqa: F401
