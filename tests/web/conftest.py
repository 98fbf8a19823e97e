"""Fixtures of the web tests: one seeded store and one real server per module where possible."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from coffer_mcp import Coffer
from tests.web.support import Seeded, make_coffer, running, seed

TOKEN = "s3cret-test-token"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Coffer, Seeded]]:
    """A Coffer with two knowledge bases and documents, shared by a module's tests (read-only use)."""
    with make_coffer(tmp_path_factory.mktemp("web") / "home") as service:
        yield service, seed(service, extra_docs=3)


@pytest.fixture(scope="module")
def base_url(store: tuple[Coffer, Seeded]) -> Iterator[str]:
    """The server without a token."""
    with running(store[0]) as url:
        yield url


@pytest.fixture(scope="module")
def token_url(store: tuple[Coffer, Seeded]) -> Iterator[str]:
    """The server with a bearer token (``TOKEN``)."""
    with running(store[0], token=TOKEN) as url:
        yield url
