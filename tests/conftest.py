"""Shared fixtures: a real Coffer home under tmp_path, the repo's fixture files, ../shared data."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from coffer_mcp import Coffer, load_settings

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "fixtures"
SHARED = REPO.parent / "shared"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "coffer-home"


@pytest.fixture
def coffer(home: Path):
    with Coffer(load_settings(home=home)) as service:
        yield service


@pytest.fixture
def notes(coffer: Coffer) -> str:
    """An empty knowledge base named 'notes'."""
    coffer.create_kb("notes", "test notes")
    return "notes"


def installed_script(name: str) -> str | None:
    """The console script ``name`` of the interpreter running the tests (a venv's own), else on PATH.

    Beside ``sys.executable`` first: another ``coffer`` on PATH may belong to another checkout.
    """
    beside = Path(sys.executable).with_name(name)
    return str(beside) if beside.exists() else shutil.which(name)


def shared_path(*parts: str) -> Path:
    """A path under ../shared, skipping the test when the shared data is absent."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} is absent (the shared evaluation data lives beside the repository)")
    return path
