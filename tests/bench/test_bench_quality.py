"""The retrieval-quality benchmark: its metrics on hand-computed cases and one tiny end-to-end run."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from bench.quality import (
    Document,
    cjk_bigrams,
    is_mostly_cjk,
    load_dataset,
    main,
    mrr_at_k,
    ndcg_at_k,
    percentile,
    rank_documents,
    recall_at_k,
    to_markdown,
)
from tests.rerank.fake_rerank_server import fake_rerank_server

# -- metrics -------------------------------------------------------------------------------------


def test_ndcg_uses_graded_gain_and_log2_discount_against_the_ideal_order() -> None:
    # DCG = 1/log2(2) + 0 + 2/log2(4) = 2;  IDCG = 2/log2(2) + 1/log2(3)
    expected = 2 / (2 + 1 / math.log2(3))
    assert ndcg_at_k(["b", "x", "a"], {"a": 2, "b": 1}, 10) == pytest.approx(expected)
    assert expected == pytest.approx(0.76018, abs=1e-5)


def test_ndcg_is_one_for_the_ideal_order_and_zero_without_relevant_hits() -> None:
    assert ndcg_at_k(["a", "b", "x"], {"a": 2, "b": 1}, 10) == pytest.approx(1.0)
    assert ndcg_at_k(["x", "y"], {"a": 1}, 10) == 0.0
    assert ndcg_at_k([], {"a": 1}, 10) == 0.0


def test_ndcg_takes_its_ideal_from_the_judgements_not_from_what_was_retrieved() -> None:
    # Three relevant documents, one retrieved at rank 1: 1 / (1 + 1/log2(3) + 1/2).
    expected = 1 / (1 + 1 / math.log2(3) + 0.5)
    assert ndcg_at_k(["a"], {"a": 1, "b": 1, "c": 1}, 10) == pytest.approx(expected)


def test_ndcg_ignores_hits_below_the_cutoff() -> None:
    ranked = [f"x{i}" for i in range(10)] + ["a"]
    assert ndcg_at_k(ranked, {"a": 1}, 10) == 0.0
    assert ndcg_at_k(ranked, {"a": 1}, 11) == pytest.approx(1 / math.log2(12))


def test_recall_counts_relevant_documents_found_within_the_cutoff() -> None:
    relevance = {"a": 1, "b": 2, "c": 1, "d": 1}
    ranked = ["a", "x", "b", "y", "z", "c"]
    assert recall_at_k(ranked, relevance, 5) == pytest.approx(2 / 4)
    assert recall_at_k(ranked, relevance, 100) == pytest.approx(3 / 4)


def test_recall_does_not_count_zero_scored_judgements_as_relevant() -> None:
    assert recall_at_k(["a"], {"a": 1, "b": 0}, 5) == 1.0
    assert recall_at_k(["a"], {"b": 0}, 5) == 0.0


def test_mrr_is_the_reciprocal_rank_of_the_first_relevant_document_within_the_cutoff() -> None:
    assert mrr_at_k(["x", "y", "a", "b"], {"a": 1, "b": 1}, 10) == pytest.approx(1 / 3)
    assert mrr_at_k(["a"], {"a": 1}, 10) == 1.0
    assert mrr_at_k([f"x{i}" for i in range(10)] + ["a"], {"a": 1}, 10) == 0.0


def test_passages_fold_into_documents_at_the_rank_of_their_best_passage() -> None:
    assert rank_documents(["d1", "d2", "d1", "d3", "d2"]) == ["d1", "d2", "d3"]
    assert rank_documents(["d1", "d1", "d2", "d3"], limit=2) == ["d1", "d2"]


def test_percentile_interpolates_between_order_statistics() -> None:
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == pytest.approx(2.5)
    assert percentile([1.0, 2.0, 3.0, 4.0], 95) == pytest.approx(3.85)
    assert percentile([7.0], 95) == 7.0
    assert math.isnan(percentile([], 50))


# -- text handling -------------------------------------------------------------------------------


def test_chinese_text_is_tokenized_into_overlapping_bigrams_with_other_words_whole() -> None:
    assert cjk_bigrams("向量搜索 BM25 是") == ["向量", "量搜", "搜索", "BM25", "是"]


def test_a_corpus_is_cjk_when_most_of_its_letters_are() -> None:
    assert is_mostly_cjk(["战国无双3是由光荣开发的游戏 (ω-force)"])
    assert not is_mostly_cjk(["Diffusion tensor imaging of 早产儿 white matter"])
    assert not is_mostly_cjk(["123 456"])


def test_a_titled_document_becomes_markdown_with_its_title_as_a_heading() -> None:
    assert to_markdown(Document("1", "Title", "Body.")) == "# Title\n\nBody."
    assert to_markdown(Document("2", "  ", "Body.")) == "Body."


# -- end to end ----------------------------------------------------------------------------------

CORPUS = [
    ("d1", "Volcanoes", "Basaltic lava erupts from shield volcanoes in Hawaii."),
    ("d2", "Honeybees", "Honeybee colonies communicate nectar locations through the waggle dance."),
    ("d3", "Glaciers", "Glacier retreat in the Alps accelerated during the last decade."),
    ("d4", "Tides", "Ocean tides follow the gravitational pull of the moon and the sun."),
    ("d5", "", "Sourdough bread rises thanks to wild yeast and lactobacilli."),
    ("d6", "Comets", "A comet's tail points away from the sun, pushed by the solar wind."),
]
QUERIES = {
    "q1": "lava from shield volcanoes",
    "q2": "waggle dance of honeybee colonies",
    "q3": "sourdough wild yeast",
    "q4": "tail of a comet and the solar wind",
    "q8": "  ",
    "q9": "a query without judgements is skipped",
}
QRELS = [("q1", "d1", 1), ("q2", "d2", 2), ("q8", "d3", 1), ("q3", "d5", 1), ("q4", "d6", 1), ("q4", "d4", 0)]


def write_beir(root: Path) -> Path:
    (root / "qrels").mkdir(parents=True)
    with (root / "corpus.jsonl").open("w", encoding="utf-8") as out:
        for doc_id, title, text in CORPUS:
            out.write(json.dumps({"_id": doc_id, "title": title, "text": text}) + "\n")
    with (root / "queries.jsonl").open("w", encoding="utf-8") as out:
        for qid, text in QUERIES.items():
            out.write(json.dumps({"_id": qid, "text": text, "metadata": {}}) + "\n")
    rows = ["query-id\tcorpus-id\tscore", *(f"{q}\t{d}\t{s}" for q, d, s in QRELS)]
    (root / "qrels" / "test.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return root


def test_loading_keeps_judged_queries_with_text_in_qrels_order(tmp_path: Path) -> None:
    dataset = load_dataset(write_beir(tmp_path / "tiny"), "test", limit_queries=3)
    assert list(dataset.queries) == ["q1", "q2", "q3"]
    assert dataset.skipped_queries == ["q8"]
    assert dataset.qrels["q2"] == {"d2": 2}
    assert len(dataset.corpus) == 6


def test_a_tiny_corpus_runs_end_to_end_and_writes_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, out = write_beir(tmp_path / "tiny"), tmp_path / "results" / "tiny.json"
    argv = ["--data", str(data), "--split", "test", "--modes", "keyword", "--chunk-size", "256", "--out", str(out)]

    main(argv)

    written = json.loads(out.read_text(encoding="utf-8"))
    systems = {s["name"]: s for s in written["systems"]}
    assert list(systems) == ["coffer-keyword", "coffer-keyword@chunk256", "bm25s"]
    for system in systems.values():
        assert system["metrics"]["ndcg@10"] == pytest.approx(1.0)
        assert system["metrics"]["mrr@10"] == pytest.approx(1.0)
        assert set(system["per_query_ndcg10"]) == {"q1", "q2", "q3", "q4"}
    assert systems["bm25s"]["ndcg@10_ratio_to_baseline"] == pytest.approx(1.0)
    assert systems["coffer-keyword@chunk256"]["details"]["chunk_size"] == 256
    assert (written["dataset"], written["split"], written["queries"], written["documents"]) == ("tiny", "test", 4, 6)
    assert written["skipped_queries"] == ["q8"]
    assert len(written["coffer_source_sha256"]) == 16
    assert written["command"].startswith("python -m bench.quality --data")
    assert {"platform", "python", "cpu_count", "sqlite_version"} <= set(written["machine"])
    assert "| coffer-keyword | 1.0000 |" in capsys.readouterr().out


def test_an_unknown_mode_is_refused_with_the_available_ones(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--data", "nowhere", "--modes", "keyword,telepathy"])
    assert "telepathy" in capsys.readouterr().err


def test_every_system_also_runs_on_postgres_and_is_compared_with_its_sqlite_twin(
    tmp_path: Path, postgres_server: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    data, out = write_beir(tmp_path / "tiny"), tmp_path / "results" / "tiny.json"
    argv = ["--data", str(data), "--split", "test", "--backend", "sqlite,postgres", "--out", str(out)]

    main([*argv, "--postgres-url", postgres_server.get_uri()])

    written = json.loads(out.read_text(encoding="utf-8"))
    assert [s["name"] for s in written["systems"]] == ["coffer-keyword", "coffer-keyword/postgres", "bm25s"]
    assert [b["backend"] for b in written["backends"]] == ["sqlite", "postgres"]
    (agreement,) = written["backend_agreement"]
    assert (agreement["system"], agreement["sqlite"]) == ("coffer-keyword/postgres", "coffer-keyword")
    assert agreement["ndcg@10_delta"] == 0.0
    assert agreement["identical_top10"] == agreement["queries"] == 4
    assert "| coffer-keyword/postgres | coffer-keyword | +0.0000 | 4 of 4 |" in capsys.readouterr().out


def test_an_unknown_backend_is_refused_with_the_available_ones(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--data", "nowhere", "--backend", "sqlite,oracle"])
    assert "oracle" in capsys.readouterr().err


def test_with_rerank_each_mode_runs_again_through_the_configured_reranker_and_counts_what_happened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data, out = write_beir(tmp_path / "tiny"), tmp_path / "results" / "tiny.json"
    with fake_rerank_server() as server:
        for variable, value in {"COFFER_RERANK_PROVIDER": "http", "COFFER_RERANK_URL": server.url}.items():
            monkeypatch.setenv(variable, value)
        main(["--data", str(data), "--split", "test", "--rerank", "--out", str(out)])
        asked = len(server.requests)

    written = json.loads(out.read_text(encoding="utf-8"))
    systems = {s["name"]: s for s in written["systems"]}
    assert list(systems) == ["coffer-keyword", "coffer-keyword+rerank", "bm25s"]
    reranked = systems["coffer-keyword+rerank"]
    assert reranked["details"]["reranker"] == f"http:127.0.0.1:{server.port}/v1/rerank"
    assert reranked["details"]["rerank_candidates"] == 30
    outcomes = reranked["details"]["rerank_outcomes"]
    assert sum(outcomes.values()) == 4
    assert outcomes.get("reranked", 0) == asked  # each query with two or more passages asked once
    assert reranked["metrics"]["ndcg@10"] == pytest.approx(1.0)
    assert "coffer-keyword+rerank: http:" in capsys.readouterr().out


def test_rerank_without_a_configured_reranker_is_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("COFFER_RERANK_PROVIDER", raising=False)
    with pytest.raises(SystemExit):
        main(["--data", "nowhere", "--rerank"])
    assert "COFFER_RERANK_PROVIDER" in capsys.readouterr().err
