"""The scale benchmark: its corpus is deterministic, and one tiny end-to-end run reports every field."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from bench._corpus import generate_document, load_vocabulary, make_queries, write_corpus
from bench._measure import page_cache_reclaim
from bench._report import at_documents
from bench.scale import main

LATENCY = {"n", "p50", "p95", "p99", "mean", "min", "max"}


def test_a_document_depends_only_on_the_seed_and_its_index() -> None:
    vocab = load_vocabulary(None)
    assert generate_document(vocab, 1, 5) == generate_document(vocab, 1, 5)
    assert generate_document(vocab, 1, 5) != generate_document(vocab, 2, 5)
    assert generate_document(vocab, 1, 5).startswith("# ")
    assert "\n## " in generate_document(vocab, 1, 5)


def test_the_corpus_is_written_until_it_makes_the_chunks_asked_for(tmp_path: Path) -> None:
    vocab = load_vocabulary(tmp_path / "absent.jsonl")  # the built-in words
    info = write_corpus(tmp_path / "corpus", vocab, seed=3, chunks=120)
    files = sorted((tmp_path / "corpus").glob("*.md"))
    assert len(files) == info.documents
    assert 120 <= info.chunks < 140
    assert 900 < info.bytes / info.documents < 1600  # ~1,200-character documents
    queries = make_queries(vocab, info.phrases, 50, seed=3)
    assert len(queries) == 50
    assert all(1 <= len(query.split()) <= 4 for query in queries)
    assert queries == make_queries(vocab, info.phrases, 50, seed=3)


def test_a_value_at_ten_thousand_documents_is_interpolated_between_the_sizes_around_it() -> None:
    value, how, fair = at_documents([(5_000, 2.0), (15_000, 4.0)], 10_000)
    assert (value, how, fair) == (3.0, "interpolated between 5,000 and 15,000 documents", True)
    value, how, fair = at_documents([(100, 1.0)], 10_000)
    assert value == 100.0
    assert "scaled" in how
    assert not fair


def damon(root: Path, *, state: str, action: str, age: int, aggregate_us: int) -> Path:
    """A kdamonds folder laid out as Linux's DAMON sysfs interface lays it out, one scheme."""
    context = root / "0" / "contexts" / "0"
    scheme = context / "schemes" / "0"
    (scheme / "access_pattern" / "age").mkdir(parents=True)
    (context / "monitoring_attrs" / "intervals").mkdir(parents=True)
    (root / "0" / "state").write_text(f"{state}\n")
    (context / "monitoring_attrs" / "intervals" / "aggr_us").write_text(f"{aggregate_us}\n")
    (scheme / "action").write_text(f"{action}\n")
    (scheme / "access_pattern" / "age" / "min").write_text(f"{age}\n")
    return root


def test_the_machine_description_says_when_idle_memory_is_paged_out(tmp_path: Path) -> None:
    # A file untouched for that long is read from disk again: first searches after a quiet spell.
    paging = damon(tmp_path / "a", state="on", action="pageout", age=12, aggregate_us=5_000_000)
    assert page_cache_reclaim(paging) == "DAMON pages out memory idle for 60 s or more"
    assert (
        page_cache_reclaim(damon(tmp_path / "b", state="off", action="pageout", age=12, aggregate_us=5_000_000)) is None
    )
    assert page_cache_reclaim(damon(tmp_path / "c", state="on", action="stat", age=12, aggregate_us=5_000_000)) is None
    assert page_cache_reclaim(tmp_path / "no-damon") is None


def test_a_tiny_run_end_to_end_reports_every_field(tmp_path: Path) -> None:
    out = tmp_path / "scale.json"
    main(
        [
            "--chunks",
            "120",
            "--queries",
            "5",
            "--fake-embedder",
            "--grep-mb",
            "0.3",
            "--add-sample",
            "10",
            "--startup-runs",
            "1",
            "--out",
            str(out),
            "--workdir",
            str(tmp_path),
        ]
    )
    data = json.loads(out.read_text(encoding="utf-8"))
    assert {"command", "date", "machine", "options", "sizes", "targets", "coffer_source_sha256"} <= data.keys()
    assert {
        "platform",
        "cpu_model",
        "cpu_count",
        "ram_gb",
        "python",
        "sqlite_binding",
        "sqlite_version",
        "sqlite_vec",
        "ripgrep",
    } <= data["machine"].keys()
    (size,) = data["sizes"]
    assert size["documents"] == size["corpus"]["documents"]
    assert size["chunks"] >= 120
    assert {"docs_per_s", "mb_per_s", "seconds"} <= size["ingest"].keys()
    assert size["add_document"]["documents"] == 10
    assert size["rebuild"]["documents"] == size["documents"]
    assert size["rebuild"]["chunks"] == size["chunks"]
    for name in (
        "keyword",
        "keyword_without_refresh",
        "refresh",
        "refresh_every_file",
        "read",
        "grep_literal",
        "grep_regex",
    ):
        assert set(size["latency_ms"][name]) == LATENCY
        assert size["latency_ms"][name]["n"] == 5
    assert set(size["latency_ms"]["keyword_content_words"]) == LATENCY  # the queries with a content word
    assert size["latency_ms"]["grep_no_match"]["n"] == 5  # max(5, queries / 10) full scans
    assert size["grep_target"]["mb"] >= 0.3
    assert set(size["grep_target"]["grep_no_match"]) == LATENCY
    assert size["mcp"]["strategies"] == ["keyword"]
    assert set(size["mcp"]["search"]) == LATENCY
    hybrid = size["hybrid"]
    assert hybrid["identity"] == "bench:word-hash-384"
    assert hybrid["vectors"] == size["chunks"]
    for name in ("hybrid", "vector", "embed_query", "knn", "knn_top5_like_stored"):
        assert set(hybrid["latency_ms"][name]) == LATENCY
    if Path("/proc/self/status").exists():
        assert size["memory"]["idle"]["rss_mb"] > 0
        assert size["memory"]["after_search"]["hwm_mb"] > 0
    assert set(size["startup"]["tools_list_ms"]) == LATENCY
    assert data["targets"][0]["target"] == "keyword search P95, in-process"
    assert all(row["verdict"] for row in data["targets"])


def test_skipped_parts_say_why(tmp_path: Path) -> None:
    out = tmp_path / "scale.json"
    main(
        [
            "--chunks",
            "60",
            "--queries",
            "3",
            "--skip-mcp",
            "--skip-hybrid",
            "--grep-mb",
            "0",
            "--add-sample",
            "5",
            "--startup-runs",
            "0",
            "--out",
            str(out),
            "--workdir",
            str(tmp_path),
        ]
    )
    (size,) = json.loads(out.read_text(encoding="utf-8"))["sizes"]
    assert size["mcp"] == {"skipped": "--skip-mcp"}
    assert size["hybrid"] == {"skipped": "--skip-hybrid"}
    assert "skipped" in size["grep_target"]
    assert size["startup"] == {"skipped": "--startup-runs 0"}


@pytest.mark.parametrize("argv", [["--chunks", "ten"], ["--chunks", "0"], ["--queries", "0"], ["--backend", "oracle"]])
def test_bad_sizes_and_backends_are_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        main(argv)


def test_a_tiny_run_on_both_backends_reports_them_side_by_side(
    tmp_path: Path, postgres_server: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "scale.json"
    argv = ["--chunks", "60", "--queries", "3", "--fake-embedder", "--grep-mb", "0", "--add-sample", "5"]
    # No start-up timing: the run above reports it, and it would start four more servers here.
    argv += ["--startup-runs", "0", "--out", str(out), "--workdir", str(tmp_path), "--backend", "sqlite,postgres"]
    environ = {name: os.environ.get(name) for name in ("COFFER_INDEX_BACKEND", "COFFER_DATABASE_URL")}

    main([*argv, "--postgres-url", postgres_server.get_uri()])

    data = json.loads(out.read_text(encoding="utf-8"))
    sqlite, postgres = data["sizes"]
    assert (sqlite["backend"], postgres["backend"]) == ("sqlite", "postgres")
    assert data["backends"]["postgres"]["server_version"].startswith("18")
    assert (postgres["documents"], postgres["chunks"]) == (sqlite["documents"], sqlite["chunks"])
    assert postgres["rebuild"]["chunks"] == postgres["chunks"]  # rebuilt into a new, empty database
    assert postgres["hybrid"]["vectors"] == postgres["chunks"]
    assert postgres["mcp"]["strategies"] == ["keyword"]  # coffer serve found the PostgreSQL index
    assert set(postgres["latency_ms"]["keyword"]) == LATENCY
    assert data["pg_targets"] == []  # the targets of issue #14 are at 100,000 chunks and more
    printed = capsys.readouterr().out
    assert "## PostgreSQL" in printed
    assert "| | SQLite | PostgreSQL |" in printed
    assert {name: os.environ.get(name) for name in environ} == environ  # the subprocesses' variables are undone


def test_postgres_can_be_built_from_files_ingested_through_sqlite(tmp_path: Path, postgres_server: Any) -> None:
    out = tmp_path / "scale.json"
    argv = ["--chunks", "60", "--queries", "3", "--fake-embedder", "--backend", "postgres", "--files-via-sqlite"]
    argv += ["--vectors-then-index"]
    main([*argv, "--out", str(out), "--workdir", str(tmp_path), "--postgres-url", postgres_server.get_uri()])

    (size,) = json.loads(out.read_text(encoding="utf-8"))["sizes"]
    assert "ingest" not in size  # SQLite's ingest rate is not reported as PostgreSQL's
    assert size["files_ingest"]["documents"] == size["documents"]
    assert size["rebuild"]["chunks"] == size["chunks"]  # the PostgreSQL index was built from the files
    assert set(size["latency_ms"]["keyword"]) == LATENCY
    assert size["hybrid"]["vectors"] == size["chunks"]
    assert size["hybrid"]["hnsw_built_after_seconds"] > 0  # the index built after the vectors
    assert size["hybrid"]["latency_ms"]["vector"]["n"] == 3
