"""Fixtures for the rerankers: a fake /rerank server on loopback."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.rerank.fake_rerank_server import FakeRerankServer, fake_rerank_server


@pytest.fixture
def rerank_server() -> Iterator[FakeRerankServer]:
    with fake_rerank_server() as server:
        yield server
