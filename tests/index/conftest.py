"""Fixtures of the index tests: the session's PostgreSQL comes from tests/conftest.py (``tests.postgres``)."""
