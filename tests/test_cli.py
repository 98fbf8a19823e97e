"""The ``coffer`` command: every kb subcommand, --json output, one-line errors."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from coffer_mcp.cli import main
from tests.conftest import FIXTURES, installed_script


@pytest.fixture
def run(home: Path, capsys: pytest.CaptureFixture[str]):
    def invoke(*argv: str, code: int = 0) -> str:
        status = main(["--home", str(home), *argv])
        out, err = capsys.readouterr()
        assert status == code, (out, err)
        return out if code == 0 else err

    return invoke


def as_json(text: str):
    return json.loads(text)


def test_a_two_minute_tour_from_the_command_line(run, tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name in ("sample.md", "sample.csv", "sample_zh.md", "sample.html"):
        shutil.copy(FIXTURES / name, corpus / name)
    assert as_json(run("kb", "create", "tour", "--description", "a tour", "--json"))["name"] == "tour"
    ingested = as_json(run("kb", "ingest", "tour", str(corpus), "--json"))
    assert ingested["created"] == 4 and ingested["rejected"] == 0
    listed = as_json(run("kb", "list", "--json"))
    assert [(k["name"], k["document_count"]) for k in listed] == [("tour", 4)]
    found = as_json(run("kb", "search", "tour", "向量", "--json"))
    doc_id = found["passages"][0]["document_id"]
    assert "向量" in run("kb", "read", "tour", doc_id)
    grep = as_json(run("kb", "grep", "tour", "向量", "--max-matches", "1", "--json"))
    assert len(grep["hits"]) == 1
    described = as_json(run("kb", "describe", "tour", "--json"))
    assert described["document_count"] == 4 and described["chunk_count"] >= 4
    page = as_json(run("kb", "documents", "tour", "--limit", "2", "--json"))
    assert page["total"] == 4 and len(page["documents"]) == 2
    assert as_json(run("kb", "update", "tour", "--chunk-size", "256", "--json"))["chunk_size"] == 256
    assert as_json(run("kb", "reindex", "tour", "--json"))[0]["documents"] == 4
    assert as_json(run("kb", "rm", "tour", doc_id, "--json"))["deleted"] is True
    assert as_json(run("kb", "delete", "tour", "--yes", "--json"))["deleted"] is True
    assert as_json(run("kb", "list", "--json")) == []


def test_human_output_is_readable(run) -> None:
    run("kb", "create", "notes")
    assert "no knowledge bases" not in run("kb", "list")
    run("kb", "ingest", "notes", str(FIXTURES / "sample.md"))
    text = run("kb", "search", "notes", *"code fence".split())
    assert text.startswith("1. ") and "(strategy: keyword)" in text
    assert run("kb", "search", "notes", "zzzqqq").startswith("no passages found")


def test_errors_are_one_line_with_a_hint_and_exit_one(run) -> None:
    run("kb", "create", "notes")
    err = run("kb", "search", "nope", "x", code=1)
    assert err.startswith("coffer: Knowledge base 'nope' does not exist.") and "hint: Existing knowledge bases: notes" in err
    assert "Traceback" not in err
    assert "Invalid knowledge base name" in run("kb", "create", "Bad Name", code=1)


def test_deleting_without_yes_in_a_pipe_refuses(run) -> None:
    run("kb", "create", "notes")
    assert "--yes" in run("kb", "delete", "notes", code=1)
    assert as_json(run("kb", "list", "--json"))[0]["name"] == "notes"


def test_reindex_needs_a_name_or_all(run) -> None:
    assert "--all" in run("kb", "reindex", code=2)
    run("kb", "create", "a")
    assert [r["kb"] for r in as_json(run("kb", "reindex", "--all", "--json"))] == ["a"]


def test_an_ingest_where_every_file_is_rejected_exits_non_zero(run, tmp_path: Path) -> None:
    run("kb", "create", "notes")
    empty = tmp_path / "empty.md"
    empty.write_text("", encoding="utf-8")
    summary = run("kb", "ingest", "notes", str(empty), code=1)
    assert "0 created" in summary and "1 rejected" in summary


def test_the_console_scripts_are_installed() -> None:
    for script in ("coffer", "coffer-mcp"):
        assert installed_script(script), f"{script} is not installed; run pip install -e ."
    result = subprocess.run([installed_script("coffer") or "coffer", "--version"], capture_output=True, text=True)
    assert result.returncode == 0 and "coffer-mcp" in result.stdout


def test_serving_http_beyond_loopback_without_a_token_refuses_to_start(home: Path) -> None:
    env = {k: v for k, v in __import__("os").environ.items() if k != "COFFER_HTTP_TOKEN"}
    result = subprocess.run(
        [sys.executable, "-m", "coffer_mcp", "--home", str(home), "serve", "--http", "--host", "0.0.0.0", "--port", "0"],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert result.returncode == 1
    assert "COFFER_HTTP_TOKEN" in result.stderr and result.stdout == ""
