"""Retrieval quality of Coffer's search against a word-level BM25 baseline, on BEIR-format data.

Run from the repository root::

    python -m bench.quality --data ../shared/eval/scifact --split train [--backend sqlite,postgres]

Every corpus document is ingested as Markdown into a fresh knowledge base in a temporary
``COFFER_HOME``; every query with relevance judgements is searched through the public
``Coffer.search`` API; the ranked passages are folded into ranked documents (a document ranks
where its best passage ranks). The same queries run against ``bm25s`` over ``title + text`` in
the same process. Metrics follow BEIR / trec_eval conventions: nDCG@10 with linear graded gain
and a log2 discount, Recall@5, Recall@100, MRR@10.

Adding a retrieval mode (``vector``, ``hybrid``) is one function registered in ``MODES``.
With ``--rerank`` each of the keyword, vector and hybrid modes runs a second time through the
reranker the ``COFFER_RERANK_*`` environment configures (``<mode>+rerank``); the report counts
the queries it reranked and why it did not rerank the others (timeout, busy, error).
With ``--backend sqlite,postgres`` every Coffer system runs once per index backend (PostgreSQL:
a throwaway embedded server, ``bench._backends``), and each PostgreSQL system is compared with its
SQLite twin: the nDCG@10 difference and how many queries got the same top 10.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import bm25s
import regex
import Stemmer

import coffer_mcp
from bench._backends import Backend, open_backend, parse_backends
from bench._measure import percentile, source_fingerprint
from coffer_mcp import Coffer, load_settings
from coffer_mcp.index.sqlite.db import binding
from coffer_mcp.models import Passage
from coffer_mcp.retrieval.search import fuse_rrf

KB = "bench"
PASSAGE_DEPTH = 1000  # chunks asked of Coffer per query: the service's maximum
DOCUMENT_DEPTH = 100  # documents kept per query, for every system
BASELINE = "bm25s"

Qrels = dict[str, dict[str, int]]
"""query id -> {corpus id: graded relevance}."""


# -- data ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Document:
    id: str
    title: str
    text: str


@dataclass(frozen=True, slots=True)
class Dataset:
    """One BEIR-format dataset restricted to the queries of one split that have judgements."""

    name: str
    split: str
    corpus: list[Document]
    queries: dict[str, str]
    """query id -> text, in qrels order."""
    qrels: Qrels
    skipped_queries: list[str] = field(default_factory=list)
    """Judged query ids left out because their text is missing or blank (whatever the limit)."""


def load_dataset(path: Path, split: str, limit_queries: int | None = None) -> Dataset:
    """Read ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/<split>.tsv`` from a BEIR folder."""
    corpus = [
        Document(id=str(row["_id"]), title=row.get("title") or "", text=row.get("text") or "")
        for row in _jsonl(path / "corpus.jsonl")
    ]
    texts = {str(row["_id"]): row["text"] for row in _jsonl(path / "queries.jsonl")}
    qrels = read_qrels(path / "qrels" / f"{split}.tsv")
    skipped = [qid for qid in qrels if not texts.get(qid, "").strip()]
    usable = [qid for qid in qrels if qid not in skipped][:limit_queries]
    return Dataset(
        name=path.resolve().name,
        split=split,
        corpus=corpus,
        queries={qid: texts[qid] for qid in usable},
        qrels={qid: qrels[qid] for qid in usable},
        skipped_queries=skipped,
    )


def read_qrels(path: Path) -> Qrels:
    """A BEIR qrels file (header ``query-id  corpus-id  score``) as nested dicts, in file order."""
    qrels: Qrels = {}
    lines = path.read_text(encoding="utf-8").splitlines()
    for line in lines[1:]:
        if line.strip():
            qid, doc_id, score = line.split("\t")
            qrels.setdefault(qid, {})[doc_id] = int(score)
    return qrels


def _jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                yield json.loads(line)


def to_markdown(doc: Document) -> str:
    """The document as Coffer ingests it: the title as a level-1 heading above the text."""
    return f"# {doc.title}\n\n{doc.text}" if doc.title.strip() else doc.text


# -- metrics (pure) ------------------------------------------------------------------------------


def ndcg_at_k(ranked: Sequence[str], relevance: dict[str, int], k: int) -> float:
    """nDCG@k with linear graded gain and a log2 discount (trec_eval, BEIR); ideal from qrels."""
    gains = [relevance.get(doc_id, 0) for doc_id in ranked[:k]]
    ideal = sorted((r for r in relevance.values() if r > 0), reverse=True)[:k]
    best = _dcg(ideal)
    return _dcg(gains) / best if best > 0 else 0.0


def _dcg(gains: Iterable[int]) -> float:
    return sum(gain / math.log2(rank + 2) for rank, gain in enumerate(gains) if gain > 0)


def recall_at_k(ranked: Sequence[str], relevance: dict[str, int], k: int) -> float:
    """The share of relevant documents (relevance > 0) found in the first ``k``."""
    relevant = {doc_id for doc_id, r in relevance.items() if r > 0}
    if not relevant:
        return 0.0
    return len(relevant.intersection(ranked[:k])) / len(relevant)


def mrr_at_k(ranked: Sequence[str], relevance: dict[str, int], k: int) -> float:
    """1 / rank of the first relevant document within the first ``k``, else 0."""
    for rank, doc_id in enumerate(ranked[:k], start=1):
        if relevance.get(doc_id, 0) > 0:
            return 1.0 / rank
    return 0.0


METRICS: dict[str, Callable[[Sequence[str], dict[str, int]], float]] = {
    "ndcg@10": lambda ranked, rel: ndcg_at_k(ranked, rel, 10),
    "recall@5": lambda ranked, rel: recall_at_k(ranked, rel, 5),
    "recall@100": lambda ranked, rel: recall_at_k(ranked, rel, 100),
    "mrr@10": lambda ranked, rel: mrr_at_k(ranked, rel, 10),
}


def rank_documents(passage_doc_ids: Iterable[str], limit: int = DOCUMENT_DEPTH) -> list[str]:
    """Ranked passages' document ids -> ranked documents: each at its best passage's rank."""
    ranked = list(dict.fromkeys(passage_doc_ids))
    return ranked[:limit]


# -- language ------------------------------------------------------------------------------------

_CJK = r"\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}"
_CJK_CHAR = regex.compile(rf"[{_CJK}]")
_LETTER = regex.compile(r"\p{L}")
# Runs of CJK characters, or runs of other letters and digits (Latin words, numbers).
_PIECE = regex.compile(rf"[{_CJK}]+|[\p{{L}}\p{{N}}--[{_CJK}]]+", regex.V1)


def is_mostly_cjk(texts: Iterable[str]) -> bool:
    """True when most letters of ``texts`` are CJK (scripts written without spaces)."""
    cjk = letters = 0
    for text in texts:
        cjk += len(_CJK_CHAR.findall(text))
        letters += len(_LETTER.findall(text))
    return letters > 0 and cjk / letters > 0.5


def cjk_bigrams(text: str) -> list[str]:
    """Tokens for CJK text: overlapping character bigrams of each CJK run, whole other words.

    A one-character CJK run is kept as a unigram so it stays searchable.
    """
    tokens: list[str] = []
    for piece in _PIECE.findall(text):
        if _CJK_CHAR.match(piece) and len(piece) > 1:
            tokens.extend(piece[i : i + 2] for i in range(len(piece) - 1))
        else:
            tokens.append(piece)
    return tokens


# -- systems -------------------------------------------------------------------------------------

SearchFn = Callable[[Coffer, str, int], list[Passage]]


def keyword(coffer: Coffer, query: str, top_k: int) -> list[Passage]:
    """Coffer's keyword search (FTS5 BM25 over chunks)."""
    return coffer.search(KB, query, top_k=top_k, strategy="keyword", rerank=False).passages


def vector(coffer: Coffer, query: str, top_k: int) -> list[Passage]:
    """Coffer's vector search (sqlite-vec KNN over chunk embeddings)."""
    return coffer.search(KB, query, top_k=top_k, strategy="vector", rerank=False).passages


def hybrid(coffer: Coffer, query: str, top_k: int) -> list[Passage]:
    """Coffer's hybrid search as it ships (min-max-normalized scores, 0.6 keyword + 0.4 vector)."""
    return coffer.search(KB, query, top_k=top_k, strategy="hybrid", rerank=False).passages


def hybrid_rrf(coffer: Coffer, query: str, top_k: int) -> list[Passage]:
    """The usual baseline fusion, for comparison: reciprocal rank fusion, K = 60 (of passages as they rank)."""
    lists = [
        coffer.search(KB, query, top_k=top_k, strategy=strategy, rerank=False, per_document=False).passages
        for strategy in ("keyword", "vector")
    ]
    return fuse_rrf(lists, top_k)


MODES: dict[str, SearchFn] = {"keyword": keyword, "vector": vector, "hybrid": hybrid, "hybrid-rrf": hybrid_rrf}
"""Coffer retrieval modes the benchmark can run; a new mode is one function added here."""
VECTOR_MODES = {"vector", "hybrid", "hybrid-rrf"}
RERANKABLE = ("keyword", "vector", "hybrid")
"""Modes ``--rerank`` runs again through the configured reranker (they are ``Coffer.search`` strategies)."""


@dataclass(slots=True)
class System:
    """Something that ranks corpus ids for a query, with how long it took to index the corpus."""

    name: str
    search: Callable[[str], list[str]]
    ingest_seconds: float
    details: dict[str, Any] = field(default_factory=dict)


@contextmanager
def coffer_index(
    corpus: Sequence[Document],
    chunk_size: int | None = None,
    vector: bool = False,
    backend: Backend | None = None,
    chunk_overlap: int | None = None,
) -> Iterator[tuple[Coffer, dict[str, str], float]]:
    """A fresh Coffer home holding the corpus: yields (coffer, document id -> corpus id, seconds).

    The embedding provider comes from the ``COFFER_EMBEDDING_*`` environment, as for the CLI; the
    index is a fresh one of ``backend`` (default: SQLite).
    """
    index = (backend or Backend()).new_index()
    with (
        tempfile.TemporaryDirectory(prefix="coffer-bench-") as home,
        Coffer(load_settings(os.environ, home=home, **index)) as coffer,
    ):
        coffer.create_kb(KB, chunk_size=chunk_size, chunk_overlap=chunk_overlap, vector=vector)
        ids: dict[str, str] = {}
        started = time.perf_counter()
        for done, doc in enumerate(corpus, start=1):
            ids[coffer.add_document(KB, f"{doc.id}.md", to_markdown(doc)).document_id] = doc.id
            if done % 1000 == 0:
                _log(f"  ingested {done}/{len(corpus)} documents")
        yield coffer, ids, time.perf_counter() - started


def coffer_system(coffer: Coffer, ids: dict[str, str], mode: str, ingest_seconds: float, name: str) -> System:
    """A System searching ``coffer`` with one of ``MODES``."""
    search_fn = MODES[mode]

    def search(query: str) -> list[str]:
        passages = search_fn(coffer, query, PASSAGE_DEPTH)
        return rank_documents(ids[p.document_id] for p in passages)

    kb = coffer.describe_kb(KB)
    details = {
        "mode": mode,
        "chunk_size": kb.chunk_size,
        "chunk_overlap": kb.chunk_overlap,
        "chunks": kb.chunk_count,
        "passage_depth": PASSAGE_DEPTH,
    }
    return System(name=name, search=search, ingest_seconds=ingest_seconds, details=details)


def reranked_system(coffer: Coffer, ids: dict[str, str], mode: str, ingest_seconds: float, name: str) -> System:
    """A System searching ``coffer`` with strategy ``mode`` through its reranker, counting what happened."""
    outcomes: dict[str, int] = {}  # a plain dict: dataclasses.asdict rebuilds a Counter wrongly

    def search(query: str) -> list[str]:
        result = coffer.search(KB, query, top_k=PASSAGE_DEPTH, strategy=mode)  # type: ignore[arg-type]
        info = result.rerank
        outcome = "reranked" if info is not None and info.applied else _why_not(info)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        return rank_documents(ids[p.document_id] for p in result.passages)

    reranker = coffer.providers.reranker
    assert reranker is not None  # parse_args checked that one is configured
    system = coffer_system(coffer, ids, mode, ingest_seconds, name)
    details = {
        **system.details,
        "reranker": reranker.identity,
        "rerank_candidates": reranker.candidates,
        "rerank_timeout_ms": reranker.timeout_ms,
        "rerank_outcomes": outcomes,  # filled in as the queries run
    }
    return System(name=name, search=search, ingest_seconds=ingest_seconds, details=details)


def _why_not(info: Any) -> str:
    """``timeout``, ``busy``, ``error`` or ``nothing to rerank`` (fewer than two passages)."""
    return "nothing to rerank" if info is None else str(info.reason).split(":", 1)[0]


def bm25_system(corpus: Sequence[Document], cjk: bool) -> System:
    """The bm25s baseline over ``title + " " + text``.

    English: bm25s's tokenizer with its English stop words and the Snowball English stemmer.
    CJK: overlapping character bigrams (``cjk_bigrams``), no stop words, no stemming.
    """
    if cjk:
        tokenizer = bm25s.tokenization.Tokenizer(splitter=cjk_bigrams, stopwords=None)
        analysis = "cjk character bigrams (+ whole non-CJK words), lower-cased, no stop words"
    else:
        tokenizer = bm25s.tokenization.Tokenizer(stopwords="en", stemmer=Stemmer.Stemmer("english"))
        analysis = "bm25s regex words, stopwords=en, PyStemmer english"
    started = time.perf_counter()
    texts = [f"{doc.title} {doc.text}" for doc in corpus]
    retriever = bm25s.BM25()
    retriever.index(tokenizer.tokenize(texts, return_as="tuple", show_progress=False), show_progress=False)
    seconds = time.perf_counter() - started
    depth = min(DOCUMENT_DEPTH, len(corpus))

    def search(query: str) -> list[str]:
        tokens = tokenizer.tokenize([query], update_vocab=False, return_as="ids", show_progress=False)
        hits, _ = retriever.retrieve(tokens, k=depth, show_progress=False, n_threads=1)
        return [corpus[i].id for i in hits[0]]

    details = {"analysis": analysis, "k1": retriever.k1, "b": retriever.b, "method": retriever.method}
    return System(name=BASELINE, search=search, ingest_seconds=seconds, details=details)


# -- evaluation ----------------------------------------------------------------------------------


@dataclass(slots=True)
class Result:
    """One system's scores on one dataset."""

    name: str
    metrics: dict[str, float]
    latency_ms: dict[str, float]
    ingest_docs_per_s: float
    ingest_seconds: float
    details: dict[str, Any]
    per_query_ndcg10: dict[str, float]
    top10: dict[str, list[str]] = field(default_factory=dict, repr=False)
    """query id -> the first ten corpus ids (compared across backends; not written to the report)."""


def evaluate(system: System, dataset: Dataset) -> Result:
    """Run every query through ``system``; mean metrics, latency percentiles, ingest rate."""
    scores: dict[str, list[float]] = {metric: [] for metric in METRICS}
    per_query: dict[str, float] = {}
    latencies: list[float] = []
    top10: dict[str, list[str]] = {}
    for qid, text in dataset.queries.items():
        started = time.perf_counter()
        ranked = system.search(text)
        latencies.append((time.perf_counter() - started) * 1000)
        top10[qid] = ranked[:10]
        for metric, fn in METRICS.items():
            scores[metric].append(fn(ranked, dataset.qrels[qid]))
        per_query[qid] = round(scores["ndcg@10"][-1], 4)
    return Result(
        name=system.name,
        metrics={metric: statistics.fmean(values) if values else math.nan for metric, values in scores.items()},
        latency_ms={"p50": percentile(latencies, 50), "p95": percentile(latencies, 95)},
        ingest_docs_per_s=len(dataset.corpus) / system.ingest_seconds if system.ingest_seconds else math.inf,
        ingest_seconds=system.ingest_seconds,
        details=system.details,
        per_query_ndcg10=per_query,
        top10=top10,
    )


def run_coffer(
    dataset: Dataset,
    modes: Sequence[str],
    chunk_size: int | None,
    backend: Backend | None = None,
    ann_min_chunks: int | None = None,
    rerank: bool = False,
) -> list[Result]:
    """Index the corpus once with ``chunk_size`` on ``backend`` and evaluate each mode over it.

    Systems on SQLite are named ``coffer-<mode>[@chunk<size>]``, on another backend with
    ``/<backend>`` after that. With ``ann_min_chunks`` (SQLite), the vector modes run again over the
    same index with that setting (``+ann``: through the ANN graph, built before the first query).
    """
    backend = backend or Backend()
    suffix = ("" if chunk_size is None else f"@chunk{chunk_size}") + (
        "" if backend.name == "sqlite" else f"/{backend.name}"
    )
    _log(f"coffer{suffix}: ingesting {len(dataset.corpus)} documents")  # one index serves every mode
    vector = bool(VECTOR_MODES & set(modes))
    with coffer_index(dataset.corpus, chunk_size, vector, backend) as (coffer, ids, seconds):
        results = []
        for mode in modes:
            _log(f"coffer-{mode}{suffix}: {len(dataset.queries)} queries")
            system = coffer_system(coffer, ids, mode, seconds, name=f"coffer-{mode}{suffix}")
            results.append(evaluate(system, dataset))
            if rerank and mode in RERANKABLE:
                _log(f"coffer-{mode}+rerank{suffix}: {len(dataset.queries)} queries")
                system = reranked_system(coffer, ids, mode, seconds, name=f"coffer-{mode}+rerank{suffix}")
                results.append(evaluate(system, dataset))
        vector_modes = [mode for mode in modes if mode in VECTOR_MODES]
        if ann_min_chunks and vector_modes:
            settings = load_settings(os.environ, home=coffer.settings.home, ann_min_chunks=ann_min_chunks)
            with Coffer(settings) as ann_coffer:
                ann_coffer.search(KB, next(iter(dataset.queries.values())), 5, strategy="vector")  # starts the build
                ann_coffer.index.ann.join()  # type: ignore[attr-defined]
                for mode in vector_modes:
                    _log(f"coffer-{mode}+ann{suffix}: {len(dataset.queries)} queries")
                    system = coffer_system(ann_coffer, ids, mode, seconds, name=f"coffer-{mode}+ann{suffix}")
                    results.append(evaluate(system, dataset))
    return results


def run_benchmark(
    dataset: Dataset,
    modes: Sequence[str],
    chunk_sizes: Sequence[int | None],
    backends: Sequence[Backend] = (),
    ann_min_chunks: int | None = None,
    rerank: bool = False,
) -> list[Result]:
    """Every Coffer mode at every chunk size on every backend (default: SQLite), then the bm25s baseline."""
    results = [
        result
        for backend in backends or [Backend()]
        for size in chunk_sizes
        for result in run_coffer(
            dataset, modes, size, backend, ann_min_chunks if backend.name == "sqlite" else None, rerank
        )
    ]
    cjk = is_mostly_cjk(f"{doc.title} {doc.text}" for doc in dataset.corpus)
    _log(f"{BASELINE}: indexing and {len(dataset.queries)} queries")
    results.append(evaluate(bm25_system(dataset.corpus, cjk), dataset))
    return results


# -- reporting -----------------------------------------------------------------------------------


def markdown_table(results: Sequence[Result]) -> str:
    """Rows per system; the nDCG@10 ratio is against the bm25s baseline."""
    baseline = next((r.metrics["ndcg@10"] for r in results if r.name == BASELINE), math.nan)
    lines = [
        "| system | nDCG@10 | R@5 | R@100 | MRR@10 | nDCG@10 / bm25s | query P50 ms | query P95 ms | ingest docs/s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        m = r.metrics
        ratio = m["ndcg@10"] / baseline if baseline else math.nan
        lines.append(
            f"| {r.name} | {m['ndcg@10']:.4f} | {m['recall@5']:.4f} | {m['recall@100']:.4f} | {m['mrr@10']:.4f} "
            f"| {ratio:.3f} | {r.latency_ms['p50']:.1f} | {r.latency_ms['p95']:.1f} | {r.ingest_docs_per_s:,.0f} |"
        )
    return "\n".join(lines)


def backend_agreement(results: Sequence[Result]) -> list[dict[str, Any]]:
    """Each system on another backend against its SQLite twin (same mode and chunk size)."""
    by_name = {r.name: r for r in results}
    rows = []
    for result in results:
        base, _, backend = result.name.partition("/")
        twin = by_name.get(base)
        if not backend or twin is None:
            continue
        same = sum(result.top10[qid] == ranked for qid, ranked in twin.top10.items())
        rows.append(
            {
                "system": result.name,
                "sqlite": twin.name,
                "ndcg@10_delta": result.metrics["ndcg@10"] - twin.metrics["ndcg@10"],
                "identical_top10": same,
                "queries": len(twin.top10),
                "query_p95_ms": {"sqlite": twin.latency_ms["p95"], backend: result.latency_ms["p95"]},
            }
        )
    return rows


def agreement_table(rows: Sequence[dict[str, Any]]) -> str:
    lines = [
        "| system | against | nDCG@10 difference | same top 10 | query P95 ms (SQLite / other) |",
        "|---|---|---:|---:|---:|",
    ]
    for row in rows:
        sqlite, other = row["query_p95_ms"].values()
        lines.append(
            f"| {row['system']} | {row['sqlite']} | {row['ndcg@10_delta']:+.4f} "
            f"| {row['identical_top10']} of {row['queries']} | {sqlite:.1f} / {other:.1f} |"
        )
    return "\n".join(lines)


def machine_info() -> dict[str, Any]:
    """Where the numbers were measured."""
    chosen = binding()
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "sqlite_binding": chosen.name,
        "sqlite_version": chosen.sqlite_version,
        "bm25s": bm25s.__version__,
    }


def report(
    dataset: Dataset,
    results: Sequence[Result],
    command: str,
    data_path: Path,
    fingerprint: str,
    backends: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """Everything the JSON file records."""
    baseline = next((r.metrics["ndcg@10"] for r in results if r.name == BASELINE), math.nan)
    systems = []
    for result in results:
        entry = asdict(result)
        del entry["top10"]
        entry["ndcg@10_ratio_to_baseline"] = result.metrics["ndcg@10"] / baseline if baseline else None
        systems.append(entry)
    return {
        "dataset": dataset.name,
        "data_path": str(data_path),
        "split": dataset.split,
        "documents": len(dataset.corpus),
        "queries": len(dataset.queries),
        "skipped_queries": dataset.skipped_queries,
        "date": datetime.now(timezone.utc).replace(microsecond=0).isoformat(),
        "command": command,
        "coffer_version": coffer_mcp.__version__,
        "coffer_source_sha256": fingerprint,
        "machine": machine_info(),
        "backends": list(backends),
        "systems": systems,
        "backend_agreement": backend_agreement(results),
    }


# -- command line --------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.quality", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="a BEIR-format folder")
    parser.add_argument("--split", default="test", help="qrels/<split>.tsv to evaluate (default: test)")
    parser.add_argument(
        "--modes", default="keyword", help=f"comma-separated Coffer modes from {sorted(MODES)} (default: keyword)"
    )
    parser.add_argument("--limit-queries", type=int, default=None, help="only the first N judged queries")
    parser.add_argument(
        "--backend",
        default="sqlite",
        help="comma-separated index backends to run every Coffer system on: sqlite, postgres (default: sqlite)",
    )
    parser.add_argument(
        "--postgres-url",
        default=None,
        help="for postgres: a server URL whose role may create databases (default: an embedded server)",
    )
    parser.add_argument(
        "--chunk-size",
        type=int,
        action="append",
        default=None,
        dest="chunk_sizes",
        help="also index with this KB chunk_size (repeatable); the default KB setting always runs",
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="JSON output (default: bench/results/quality-<dataset>-<split>.json)"
    )
    parser.add_argument(
        "--ann-min-chunks",
        type=int,
        default=None,
        help="also run the vector modes with this ann_min_chunks (1: through the ANN graph)",
    )
    parser.add_argument(
        "--rerank",
        action="store_true",
        help="also run the keyword, vector and hybrid modes through the reranker COFFER_RERANK_* configures",
    )
    args = parser.parse_args(argv)
    if args.rerank and os.environ.get("COFFER_RERANK_PROVIDER", "none") == "none":
        parser.error("--rerank needs a reranker: set COFFER_RERANK_PROVIDER (http or fastembed) and its settings")
    args.modes = [mode.strip() for mode in args.modes.split(",") if mode.strip()]
    unknown = [mode for mode in args.modes if mode not in MODES]
    if unknown:
        parser.error(f"unknown mode(s) {', '.join(unknown)}; available: {', '.join(sorted(MODES))}")
    try:
        args.backends = parse_backends(args.backend)
    except ValueError as exc:
        parser.error(str(exc))
    return args


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the benchmark, print the table, write the JSON; returns what was written."""
    args = parse_args(argv)
    dataset = load_dataset(args.data, args.split, args.limit_queries)
    if not dataset.queries:
        raise SystemExit(f"No judged queries in {args.data / 'qrels' / (args.split + '.tsv')}.")
    chunk_sizes: list[int | None] = [None, *(args.chunk_sizes or [])]
    fingerprint = source_fingerprint()  # before the run: the sources may change while it runs
    with contextlib.ExitStack() as stack:
        backends = [stack.enter_context(open_backend(name, args.postgres_url)) for name in args.backends]
        results = run_benchmark(dataset, args.modes, chunk_sizes, backends, args.ann_min_chunks, args.rerank)
        described = [backend.describe() for backend in backends]
    command = " ".join(["python -m bench.quality", *(sys.argv[1:] if argv is None else argv)])
    data = report(dataset, results, command, args.data, fingerprint, described)
    out = args.out or Path("bench/results") / f"quality-{dataset.name}-{dataset.split}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    skipped = (
        f" ({len(dataset.skipped_queries)} judged queries without text skipped)" if dataset.skipped_queries else ""
    )
    print(
        f"{dataset.name} ({dataset.split}): {len(dataset.corpus)} documents, {len(dataset.queries)} queries{skipped}\n"
    )
    print(markdown_table(results))
    if data["backend_agreement"]:
        print("\n" + agreement_table(data["backend_agreement"]))
    for result in results:
        if "rerank_outcomes" in result.details:
            outcomes = ", ".join(f"{why} {count}" for why, count in sorted(result.details["rerank_outcomes"].items()))
            print(f"\n{result.name}: {result.details['reranker']}, {outcomes} (of {len(dataset.queries)} queries)")
    print(f"\nwritten to {out}")
    return data


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
