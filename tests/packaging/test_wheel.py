"""The sdist and the wheel: what they hold, and a wheel installed outside the clone serving real clients."""

from __future__ import annotations

import re
import subprocess
import tarfile
import threading
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import httpx
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.types import Implementation

from coffer_mcp import __version__
from tests.conftest import REPO
from tests.packaging.conftest import Dist, Installed

pytestmark = pytest.mark.anyio

CLIENT = Implementation(name="packaging-test", version="1")
STATIC = sorted(p.name for p in (REPO / "coffer_mcp" / "static").iterdir())
_BANNER = re.compile(r"MCP over streamable HTTP at (http://\S+)/mcp")
DEADLINE = 120


def test_the_wheel_holds_the_package_its_viewer_and_nothing_of_the_clone(dist: Dist) -> None:
    names = zipfile.ZipFile(dist.wheel).namelist()
    assert sorted(n.rsplit("/", 1)[1] for n in names if n.startswith("coffer_mcp/static/")) == STATIC
    assert "coffer_mcp/index/unicode61.py" in names  # FTS5's tables, read when the index tokenizes
    assert {n.split("/")[0] for n in names} == {"coffer_mcp", f"coffer_mcp-{__version__}.dist-info"}
    metadata = zipfile.ZipFile(dist.wheel).read(f"coffer_mcp-{__version__}.dist-info/METADATA").decode()
    assert "Requires-Python: >=3.10" in metadata
    entry_points = zipfile.ZipFile(dist.wheel).read(f"coffer_mcp-{__version__}.dist-info/entry_points.txt").decode()
    assert "coffer = coffer_mcp.cli:main" in entry_points


def test_the_sdist_holds_what_the_wheel_is_built_from_and_no_tests(dist: Dist) -> None:
    with tarfile.open(dist.sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert {"pyproject.toml", "README.md", "coffer_mcp/cli/__init__.py", "coffer_mcp/cli/_commands.py"} <= names
    assert {f"coffer_mcp/static/{name}" for name in STATIC} <= names
    assert not any(name.startswith("tests/") for name in names)


def test_the_installed_coffer_is_the_wheels_not_the_clones(installed: Installed, tmp_path: Path) -> None:
    where = subprocess.run(
        [installed.script("python"), "-c", "import coffer_mcp; print(coffer_mcp.__file__)"],
        cwd=tmp_path,
        env=installed.env(tmp_path / "home"),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.strip()
    assert Path(where).is_relative_to(installed.root)
    version = installed.run("--version", home=tmp_path / "home", cwd=tmp_path).stdout.strip()
    assert version == f"coffer-mcp {__version__}"


async def test_a_client_lists_creates_adds_and_searches_through_the_installed_stdio_server(
    installed: Installed, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    params = StdioServerParameters(
        command=installed.script("coffer"),
        args=["serve"],
        env=installed.env(home, COFFER_EMBEDDING_PROVIDER="none"),
        cwd=tmp_path,
    )
    with anyio.fail_after(DEADLINE):
        async with Client(params, client_info=CLIENT) as client:
            before = await client.call_tool("coffer__list_knowledge_bases", {})
            await client.call_tool("coffer__create_knowledge_base", {"name": "notes"})
            note = {"kb": "notes", "filename": "graphs.md", "content": "# Graphs\n\nHNSW graphs find neighbours."}
            added = await client.call_tool("coffer__add_document", note)
            found = await client.call_tool("coffer__search_knowledge", {"kb": "notes", "query": "neighbours"})
    assert not before.is_error, before.content
    assert not added.is_error, added.content
    assert before.structured_content["knowledge_bases"] == []
    assert [p["title"] for p in found.structured_content["passages"]] == ["Graphs"]
    assert (home / "knowledge" / "notes" / "docs").is_dir()


@contextmanager
def http_server(installed: Installed, home: Path, cwd: Path) -> Iterator[str]:
    """``coffer serve --http --port 0`` from the venv; yields its base URL (from the banner on stderr)."""
    proc = subprocess.Popen(
        [installed.script("coffer"), "serve", "--http", "--host", "127.0.0.1", "--port", "0"],
        cwd=cwd,
        env=installed.env(home, COFFER_EMBEDDING_PROVIDER="none"),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    found: list[str] = []
    ready = threading.Event()

    def drain() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            found.append(line)
            if _BANNER.search(line):
                ready.set()
        ready.set()

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        ready.wait(DEADLINE)
        match = next((m for m in map(_BANNER.search, found) if m), None)
        assert match is not None, "".join(found)
        yield match.group(1)
    finally:
        proc.terminate()
        proc.wait(30)
        reader.join(10)
        assert proc.stderr is not None
        proc.stderr.close()


def get(url: str) -> bytes:
    response = httpx.get(url, timeout=30)
    response.raise_for_status()
    return response.content


def test_the_installed_http_server_serves_the_viewer_and_its_assets(installed: Installed, tmp_path: Path) -> None:
    with http_server(installed, tmp_path / "home", tmp_path) as url:
        page, script = get(f"{url}/").decode("utf-8"), get(f"{url}/static/viewer.js")
    assert "viewer.js" in page
    assert script == (REPO / "coffer_mcp" / "static" / "viewer.js").read_bytes()
