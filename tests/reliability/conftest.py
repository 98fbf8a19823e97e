"""Fixtures of the reliability tests: one seeded store that hostile input must leave as it is."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from coffer_mcp import Coffer, load_settings
from tests.reliability.support import GREP_TIMEOUT, Store


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    """A seeded store, shared by a module's tests: each leaves it as it found it (or fails)."""
    home = tmp_path_factory.mktemp("hostile") / "home"
    settings = load_settings(
        home=home, embedding_provider="none", grep_timeout=GREP_TIMEOUT, conversion_timeout=30, conversion_memory_mb=512
    )
    with Coffer(settings) as coffer:
        yield Store(coffer)
