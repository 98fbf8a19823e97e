"""Shared fixtures: a real Coffer home under tmp_path, the repo's fixture files, ../shared data."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

# Its helpers assert; tests in several folders import it, so it is registered before any of them.
pytest.register_assert_rewrite("tests.reliability.support")

from coffer_mcp import Coffer, load_settings  # noqa: E402 - after the assert-rewrite registration
from tests.postgres import (  # noqa: F401, E402  (fixtures)
    empty_postgres_url,
    postgres_databases,
    postgres_server,
    postgres_template,
    postgres_url,
)

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "fixtures"
SHARED = REPO.parent / "shared"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "coffer-home"


BACKENDS = ("sqlite", "postgres")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "transports(*names): runs each test that takes ``transport`` over these MCP transports "
        "(tests/mcp_clients.py), each on both index backends but stdio on SQLite only",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # Every test built on the ``coffer`` fixture runs once per index backend, except those marked
    # ``sqlite_only`` (they read SQLite's own tables to check what the port hides).
    if "index_backend" not in metafunc.fixturenames:
        return
    sqlite_only = metafunc.definition.get_closest_marker("sqlite_only") is not None
    backends = BACKENDS[:1] if sqlite_only else BACKENDS
    transports = metafunc.definition.get_closest_marker("transports")
    if transports is None or "transport" not in metafunc.fixturenames or _parametrized(metafunc, "transport"):
        metafunc.parametrize("index_backend", backends)
        return
    # ``coffer serve`` over stdio opens the test's home with the settings of its own environment,
    # which name no PostgreSQL: beside a PostgreSQL ``coffer`` it would run the SQLite case again
    # (a server start, ~2 s of CPU, for nothing).
    pairs = [(name, backend) for name in transports.args for backend in backends]
    metafunc.parametrize(("transport", "index_backend"), [pair for pair in pairs if pair != ("stdio", "postgres")])


def _parametrized(metafunc: pytest.Metafunc, name: str) -> bool:
    """Whether the test's own ``parametrize`` marks give ``name`` its values."""
    for mark in metafunc.definition.iter_markers("parametrize"):
        names = mark.args[0]
        if name in ([n.strip() for n in names.split(",")] if isinstance(names, str) else names):
            return True
    return False


@pytest.fixture
def backend_settings(index_backend: str, request: pytest.FixtureRequest) -> dict[str, str]:
    """Settings that put the index on ``index_backend`` (a fresh PostgreSQL database for postgres)."""
    if index_backend == "sqlite":
        return {}
    return {"index_backend": "postgres", "database_url": request.getfixturevalue("postgres_url")}


@pytest.fixture
def coffer(home: Path, backend_settings: dict[str, str]):
    with Coffer(load_settings(home=home, **backend_settings)) as service:
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
