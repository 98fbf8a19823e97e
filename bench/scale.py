"""Speed at scale: ingest, rebuild, search / grep / read latency, MCP stdio, hybrid, memory, start-up.

Run from the repository root::

    python -m bench.scale --chunks 1000,10000,100000 [--out bench/results/scale.json]
                          [--queries 200] [--skip-mcp] [--skip-hybrid] [--grep-mb 50]
                          [--ann-min-chunks N] [--only-vectors] [--files-via-sqlite] [--vectors-then-index]
                          [--backend sqlite,postgres] [--postgres-url URL]

For each size a deterministic synthetic Markdown corpus (~1,200-character documents, ~3.5 chunks
each) is written to a temporary folder until it makes that many chunks; it is ingested into a
fresh ``COFFER_HOME``, the index is deleted and rebuilt from the files, and every read path is
timed in-process and through a real ``coffer serve`` subprocess. Hybrid search runs over
synthetic stored vectors with queries embedded for real by the local MiniLM model, first by the
exact scan, then through the ANN graph (built from scratch, timed; recall@10 against the scan).
Progress goes to stderr, the Markdown tables to stdout, everything to the JSON file. With
``--backend sqlite,postgres`` every size runs on each index backend in turn (PostgreSQL: a
throwaway embedded server, ``bench._backends``), and the tables end side by side (``bench._compare``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

import coffer_mcp
from bench import _compare, _report
from bench._backends import Backend, drop_index, open_backend, parse_backends
from bench._corpus import (
    CHUNK_OVERLAP,
    CHUNK_SIZE,
    CorpusInfo,
    Vocabulary,
    grep_words,
    load_vocabulary,
    make_queries,
    regex_patterns,
    write_corpus,
)
from bench._measure import latency, log, machine_info, source_fingerprint, write_report
from bench._serve import mcp_search_latency, serve_memory, startup_times
from bench._vectors import DIMENSIONS, MINILM, FakeEmbedder, fill_vectors, held_out_vectors, index_vectors, minilm
from coffer_mcp import Coffer, load_settings
from coffer_mcp.embed import Embedder
from coffer_mcp.index.fts import STOPWORDS, analyze
from coffer_mcp.index.sqlite import SqliteIndex
from coffer_mcp.index.sqlite.db import connect, vec_version
from coffer_mcp.retrieval.search import keyword_search, vector_search
from coffer_mcp.services.retrieval import FUSION_DEPTH
from coffer_mcp.settings import Settings

KB = "bench"
GREP_KB = "bench-grep"
NO_MATCH = "qzxjvkwpq"  # in no document: read in full, unless grep's file map knows it is in no file
REPO = Path(__file__).resolve().parents[1]
DEFAULT_VOCAB = REPO.parent / "shared" / "eval" / "scifact" / "corpus.jsonl"
DEFAULT_MODEL = REPO.parent / "shared" / "models" / "all-MiniLM-L6-v2-int8"
# What a top_k=5 hybrid search asked of each list before MIN_FUSION_DEPTH became 100 (kept: the
# rows stay comparable with earlier runs).
HYBRID_DEPTH = 50
VECTOR_DEPTH = 5 * FUSION_DEPTH  # what a top_k=5 vector search asks of the index (room for 5 documents)


def run_size(
    args: argparse.Namespace, vocab: Vocabulary, target: int, root: Path, grep_mb: float, backend: Backend
) -> dict[str, Any]:
    """Every measurement at one corpus size on ``backend``; ``grep_mb`` > 0 also times grep over that many MB."""
    log(f"== {target:,} chunks on {backend.name}")
    load_start = os.getloadavg()[0]
    corpus_dir, home = root / "corpus", root / "home"
    started = time.perf_counter()
    info = write_corpus(corpus_dir, vocab, args.seed, chunks=target)
    log(
        f"  corpus: {info.documents:,} documents, {info.chunks:,} chunks, {info.mb:.1f} MB "
        f"({time.perf_counter() - started:.1f} s)"
    )
    index = backend.new_index()
    backend.export(index)  # for the coffer serve subprocesses below
    settings = load_settings(home=home, embedding_provider="none", **index)
    result: dict[str, Any] = {"target_chunks": target, "backend": backend.name}
    result["corpus"] = _corpus_json(info, time.perf_counter() - started)
    moved = args.files_via_sqlite and backend.name != "sqlite"
    if moved:  # the files go in through SQLite's faster ingest, then the index moves to this backend
        files = load_settings(home=home, embedding_provider="none", index_backend="sqlite")
        result["files_ingest"], counts = ingest(files, corpus_dir, info)
        (home / "coffer.db").unlink()
        result["rebuild"] = rebuild(settings, counts)  # as `coffer index rebuild --backend postgres`
    else:
        result["ingest"], counts = ingest(settings, corpus_dir, info)
    result["documents"], result["chunks"] = counts
    queries = make_queries(vocab, info.phrases, args.queries + _warmup(args), args.seed)
    if args.only_vectors or moved:  # keyword and the vector side (a million chunks: the rest takes an hour more)
        with Coffer(settings) as coffer:
            result["docs_folder_mb"] = _folder_mb(coffer.paths.kb(KB).docs)
            result["latency_ms"] = keyword_latency(coffer, queries, args)
        result["hybrid"], model_env = hybrid(args, settings, queries)
        result["memory"] = memory(home, model_env, queries[0])
        result["load_average"] = {"start": load_start, "end": os.getloadavg()[0]}
        return result
    result["add_document"] = add_document_rate(
        root / "home-add", corpus_dir, min(args.add_sample, info.documents), backend
    )
    result["rebuild"] = rebuild(settings, counts)
    with Coffer(settings) as coffer:
        result["docs_folder_mb"] = _folder_mb(coffer.paths.kb(KB).docs)
        result["latency_ms"] = in_process_latency(coffer, vocab, queries, args)
        result["latency_ms"]["refresh_every_file"] = strict_refresh(settings, args)
    result["mcp"] = _skipped("--skip-mcp") if args.skip_mcp else mcp_latency(home, queries, args)
    result["hybrid"], model_env = hybrid(args, settings, queries)
    result["memory"] = memory(home, model_env, queries[0])
    result["startup"] = startup(home, args.startup_runs)
    # Last: a second KB shares the one full-text index, and would slow every search measured after it.
    with Coffer(settings) as coffer:
        result["grep_target"] = grep_target(coffer, args, vocab, root, info, result["docs_folder_mb"], grep_mb)
    result["load_average"] = {"start": load_start, "end": os.getloadavg()[0]}
    return result


def _corpus_json(info: CorpusInfo, seconds: float) -> dict[str, Any]:
    return {
        "documents": info.documents,
        "chunks_expected": info.chunks,
        "mb": info.mb,
        "mean_document_chars": info.bytes / max(1, info.documents),
        "generate_seconds": seconds,
    }


def _warmup(args: argparse.Namespace) -> int:
    return max(3, args.queries // 10)


def _skipped(reason: str) -> dict[str, str]:
    return {"skipped": reason}


def _folder_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.glob("*.md")) / 1e6


# -- writes --------------------------------------------------------------------------------------


def ingest(settings: Settings, corpus_dir: Path, info: CorpusInfo) -> tuple[dict[str, Any], tuple[int, int]]:
    """One ``ingest_path`` call over the corpus folder into a fresh keyword-only KB."""
    log(f"  ingest_path: {info.documents:,} documents")
    with Coffer(settings) as coffer:
        coffer.create_kb(KB, chunk_size=CHUNK_SIZE, chunk_overlap=CHUNK_OVERLAP)
        started = time.perf_counter()
        outcome = coffer.ingest_path(KB, corpus_dir, progress=_progress("ingested"))
        seconds = time.perf_counter() - started
        if outcome.created != info.documents:
            raise RuntimeError(
                f"ingest created {outcome.created} of {info.documents} documents ({outcome.rejected} rejected)"
            )
        details = coffer.describe_kb(KB)
    return {
        "documents": info.documents,
        "seconds": seconds,
        "docs_per_s": info.documents / seconds,
        "mb_per_s": info.mb / seconds,
    }, (details.document_count, details.chunk_count)


def add_document_rate(home: Path, corpus_dir: Path, n: int, backend: Backend) -> dict[str, Any]:
    """The one-document-at-a-time rate agents see: ``add_document`` for the first ``n`` files."""
    log(f"  add_document loop: {n:,} documents")
    files = sorted(corpus_dir.glob("*.md"))[:n]
    with Coffer(load_settings(home=home, embedding_provider="none", **backend.new_index())) as coffer:
        coffer.create_kb(KB, chunk_size=CHUNK_SIZE, chunk_overlap=CHUNK_OVERLAP)
        started = time.perf_counter()
        for file in files:
            coffer.add_document(KB, file.name, file.read_text(encoding="utf-8"))
        seconds = time.perf_counter() - started
    shutil.rmtree(home, ignore_errors=True)
    return {"documents": n, "seconds": seconds, "docs_per_s": n / seconds if seconds else math.inf}


def rebuild(settings: Settings, counts: tuple[int, int]) -> dict[str, Any]:
    """Delete the index (coffer.db, or the PostgreSQL database), open a new service, time ``reindex_all``;
    the counts must return."""
    log("  rebuild from files")
    drop_index(settings)
    with Coffer(settings) as coffer:
        started = time.perf_counter()
        coffer.reindex_all(progress=_progress("reindexed"))
        seconds = time.perf_counter() - started
        details = coffer.describe_kb(KB)
    again = (details.document_count, details.chunk_count)
    if again != counts:
        raise RuntimeError(f"the rebuild gave (documents, chunks) = {again}, not {counts}")
    return {"seconds": seconds, "documents": again[0], "chunks": again[1], "docs_per_s": again[0] / seconds}


def _progress(verb: str):
    def report(done: int, total: int, _message: str) -> None:
        if done % 5000 == 0 or done == total:
            log(f"    {verb} {done:,}/{total:,}")

    return report


# -- reads ---------------------------------------------------------------------------------------


def in_process_latency(
    coffer: Coffer, vocab: Vocabulary, queries: list[str], args: argparse.Namespace
) -> dict[str, Any]:
    """P50/P95/P99 of keyword search (with and without reconcile), reconcile alone, grep and read."""
    log("  in-process latency")
    warm, n = _warmup(args), args.queries
    doc_ids = sorted(row.id for row in coffer.index.documents(KB))
    picks = np.random.default_rng([args.seed, 5_000_011]).integers(len(doc_ids), size=n + warm)
    out = keyword_latency(coffer, queries, args)
    out["refresh"] = latency(lambda _: coffer.refresh(KB), range(n + warm), warmup=warm)
    out["read"] = latency(lambda i: coffer.read_document(KB, doc_ids[i]), picks, warmup=warm)
    out.update(grep_latency(coffer, [KB], vocab, args))
    return out


def keyword_latency(coffer: Coffer, queries: list[str], args: argparse.Namespace) -> dict[str, Any]:
    """P50/P95/P99 of keyword search with and without reconcile, and of the queries with a content word."""
    warm = _warmup(args)
    return {
        "keyword": latency(lambda query: coffer.search(KB, query, 5, strategy="keyword"), queries, warmup=warm),
        "keyword_without_refresh": latency(
            lambda query: keyword_search(coffer.index, [KB], query, 5), queries, warmup=warm
        ),
        # Zipf draws make one query in eight all function words ("the", "in is"), which BM25 must
        # score over most of the corpus; the queries with a content word, apart:
        "keyword_content_words": latency(
            lambda query: coffer.search(KB, query, 5, strategy="keyword"),
            [q for q in queries if _has_content_word(q)],
            warmup=warm,
        ),
    }


def _has_content_word(query: str) -> bool:
    return any(word not in STOPWORDS for word in analyze(query).words)


def strict_refresh(settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    """``refresh`` with every file stat-ed (``reconcile_interval`` 0): what a read pays once the
    interval has passed since the last full check, e.g. an agent searching every few seconds."""
    with Coffer(settings.model_copy(update={"reconcile_interval": 0})) as coffer:
        return latency(lambda _: coffer.refresh(KB), range(args.queries + _warmup(args)), warmup=_warmup(args))


def grep_latency(coffer: Coffer, kbs: list[str], vocab: Vocabulary, args: argparse.Namespace) -> dict[str, Any]:
    """Grep a Zipf-drawn literal word, a small regex, and a word in no file; max 50 lines. Timed once
    grep's file map of the folders is ready, as a server that greps has it (``bench.grep`` times both)."""
    warm, n = _warmup(args), args.queries
    words, patterns = grep_words(vocab, n + warm, args.seed), regex_patterns(vocab, n + warm, args.seed)
    full_scans = max(5, n // 10)
    for _ in range(2):  # a folder is mapped from its second grep, in the background
        coffer.grep(kbs, NO_MATCH, 1, fixed_strings=True)
    folders = [coffer.paths.kb(kb).docs for kb in kbs]
    mapped = coffer.retrieval.prefilter.wait_until_mapped(folders, timeout=600)
    return {
        "grep_mapped": mapped,
        "grep_literal": latency(lambda w: coffer.grep(kbs, w, 50, fixed_strings=True), words, warmup=warm),
        "grep_regex": latency(lambda p: coffer.grep(kbs, p, 50), patterns, warmup=warm),
        "grep_no_match": latency(
            lambda _: coffer.grep(kbs, NO_MATCH, 50, fixed_strings=True), range(full_scans + 1), warmup=1
        ),
        "grep_engine": coffer.grep(kbs, NO_MATCH, 1, fixed_strings=True).engine,
    }


def grep_target(
    coffer: Coffer,
    args: argparse.Namespace,
    vocab: Vocabulary,
    root: Path,
    info: CorpusInfo,
    docs_mb: float,
    grep_mb: float,
) -> dict[str, Any]:
    """Grep over ``grep_mb`` MB of document files: this KB topped up by a second KB of more documents."""
    if grep_mb <= 0:
        return _skipped("only measured at the largest size (and not with --grep-mb 0)")
    kbs = [KB]
    if docs_mb < grep_mb:
        extra_mb = (grep_mb - docs_mb) * info.mb / docs_mb  # source MB grow by frontmatter once ingested
        log(f"  grep corpus: topping {docs_mb:.1f} MB up to {grep_mb:.0f} MB with a second KB")
        extra = write_corpus(root / "corpus-grep", vocab, args.seed, megabytes=extra_mb, start=info.documents)
        coffer.create_kb(GREP_KB, chunk_size=CHUNK_SIZE, chunk_overlap=CHUNK_OVERLAP)
        coffer.ingest_path(GREP_KB, extra.folder, progress=_progress("ingested"))
        kbs.append(GREP_KB)
    total_mb = sum(_folder_mb(coffer.paths.kb(name).docs) for name in kbs)
    files = sum(1 for name in kbs for _ in coffer.paths.kb(name).docs.glob("*.md"))
    log(f"  grep over {total_mb:.1f} MB")
    return {"knowledge_bases": kbs, "mb": total_mb, "files": files, **grep_latency(coffer, kbs, vocab, args)}


def mcp_latency(home: Path, queries: list[str], args: argparse.Namespace) -> dict[str, Any]:
    log("  MCP stdio latency")
    return mcp_search_latency(home, KB, queries, warmup=_warmup(args))


# -- hybrid and memory ---------------------------------------------------------------------------


def hybrid(
    args: argparse.Namespace, settings: Settings, queries: list[str]
) -> tuple[dict[str, Any], dict[str, str] | None]:
    """Vector on, synthetic vectors stored, then timed hybrid / vector search with real query embedding:
    by the exact scan, then through the ANN graph.

    Returns the report and, when the real model ran, the environment that makes ``coffer serve``
    use it (for the memory measurement).
    """
    if args.skip_hybrid:
        return _skipped("--skip-hybrid"), None
    embedder: Embedder | None = FakeEmbedder() if args.fake_embedder else minilm(args.model_path)
    if embedder is None:
        reason = f"no local model at {args.model_path}"
        log(f"  hybrid skipped: {reason}")
        return _skipped(reason), None
    log(f"  hybrid: storing synthetic {DIMENSIONS}-dimension vectors as {embedder.identity}")
    with Coffer(settings) as coffer:
        coffer.update_kb(KB, vector=True)
        started = time.perf_counter()
        stored = fill_vectors(coffer, KB, embedder.identity, args.seed, unindexed=args.vectors_then_index)
        fill_seconds = time.perf_counter() - started
        index_seconds = index_vectors(coffer, embedder.identity) if args.vectors_then_index else None
    with Coffer(settings.model_copy(update={"ann_min_chunks": 0}), embedder=embedder) as coffer:
        report = {
            "identity": embedder.identity,
            "vectors": stored,
            "fill_seconds": fill_seconds,
            "hnsw_built_after_seconds": index_seconds,  # --vectors-then-index on PostgreSQL
            "latency_ms": hybrid_latency(coffer, embedder, queries, args, stored),
            "restore": restore(coffer, embedder.identity, stored),
        }
    report["ann"] = ann(args, settings, embedder, queries, stored)
    env = (
        None
        if args.fake_embedder
        else {
            "COFFER_EMBEDDING_PROVIDER": "fastembed",
            "COFFER_EMBEDDING_MODEL": MINILM,
            "COFFER_EMBEDDING_MODEL_PATH": str(args.model_path),
        }
    )
    return report, env


def hybrid_latency(
    coffer: Coffer, embedder: Embedder, queries: list[str], args: argparse.Namespace, stored: int
) -> dict[str, Any]:
    log("  hybrid latency")
    warm = _warmup(args)
    ran = coffer.search(KB, queries[0], 5, strategy="hybrid").strategy  # also loads the model
    if ran != "hybrid":
        raise RuntimeError(f"a hybrid search ran as {ran}: the vectors are not being used")
    query_vectors = [embedder.embed_query(query) for query in queries]
    # The text queries have no near neighbours among synthetic vectors: a graph walks about twice
    # as long for them as for queries like the stored vectors, as a real model's queries are.
    like_stored = [v.tolist() for v in held_out_vectors(stored, args.seed, len(queries))]
    content = [query for query in queries if _has_content_word(query)]
    return {
        "hybrid": latency(lambda query: coffer.search(KB, query, 5, strategy="hybrid"), queries, warmup=warm),
        # What bounds hybrid's P95: its keyword half (depth 50), and the all-function-word queries.
        "hybrid_content_words": latency(
            lambda query: coffer.search(KB, query, 5, strategy="hybrid"), content, warmup=warm
        ),
        "keyword_depth_50": latency(
            lambda query: keyword_search(coffer.index, [KB], query, HYBRID_DEPTH), queries, warmup=warm
        ),
        "vector": latency(lambda query: coffer.search(KB, query, 5, strategy="vector"), queries, warmup=warm),
        "embed_query": latency(embedder.embed_query, queries, warmup=warm),
        "knn": latency(
            lambda v: vector_search(coffer.index, embedder.identity, v, [KB], HYBRID_DEPTH), query_vectors, warmup=warm
        ),
        "knn_top5_like_stored": latency(
            lambda v: vector_search(coffer.index, embedder.identity, v, [KB], VECTOR_DEPTH), like_stored, warmup=warm
        ),
    }


def ann(
    args: argparse.Namespace, settings: Settings, embedder: Embedder, queries: list[str], stored: int
) -> dict[str, Any]:
    """The same searches through the ANN graph: its build from scratch, latency, recall@10, logged writes."""
    if settings.index_backend != "sqlite":
        return _skipped("the ANN graph is the SQLite index's (PostgreSQL searches through pgvector's HNSW)")
    threshold = settings.ann_min_chunks if args.ann_min_chunks is None else args.ann_min_chunks
    if not threshold or stored < threshold:
        return _skipped(f"{stored:,} vectors, below ann_min_chunks ({threshold:,}): the exact scan answers")
    log("  ANN: building the graph from scratch")
    with Coffer(settings.model_copy(update={"ann_min_chunks": threshold}), embedder=embedder) as coffer:
        index = coffer.index
        assert isinstance(index, SqliteIndex)
        started = time.perf_counter()
        index.build_ann(embedder.identity, KB)
        out: dict[str, Any] = {
            "min_chunks": threshold,
            "build_seconds": time.perf_counter() - started,
            "file_mb": sum(p.stat().st_size for p in index.ann.folder.glob("*.usearch")) / 1e6,
        }
        out["latency_ms"] = hybrid_latency(coffer, embedder, queries, args, stored)
        if not index.ann_status(KB)[embedder.identity]["ann"]:
            raise RuntimeError("the searches did not use the ANN graph")
        out["recall_at_10"] = recall(args, index, embedder, queries, stored)
        out["logged_writes"] = logged_writes(coffer, embedder, queries, stored)
    return out


def recall(
    args: argparse.Namespace, index: SqliteIndex, embedder: Embedder, queries: list[str], stored: int
) -> dict[str, Any]:
    """Recall@10 of the graph's knn against the exact scan's, at depth 50 (hybrid's) and 10.

    Two query sets: vectors drawn like the stored ones (as a model's queries resemble its
    documents), and the text queries embedded by MiniLM, unrelated to the synthetic vectors: their
    nearest neighbours are near-ties in every direction, the hard case for any graph.
    """
    log("  ANN recall")
    exact = SqliteIndex(index.path, ann_threshold=0)
    sets = {
        "like_stored": [v.tolist() for v in held_out_vectors(stored, args.seed, args.queries)],
        "text_queries": [embedder.embed_query(query) for query in queries[: args.queries]],
    }
    out: dict[str, Any] = {}
    for name, vectors in sets.items():
        hits = {HYBRID_DEPTH: 0, 10: 0}
        for vector in vectors:
            truth = {row.chunk_id for row in exact.knn(embedder.identity, vector, [KB], None, 10)}
            for depth in hits:
                found = index.knn(embedder.identity, vector, [KB], None, depth)[:10]
                hits[depth] += len(truth & {row.chunk_id for row in found})
        out.update({f"{name}_depth_{depth}": n / (10 * len(vectors)) for depth, n in hits.items()})
    exact.close()
    return out


def restore(coffer: Coffer, identity: str, stored: int) -> dict[str, Any]:
    """Store again the vectors of the first 2 % of chunks (at most 10,000), as a re-embedding would."""
    index = coffer.index
    n = max(1, min(stored // 50, 10_000))  # 2 %: below the 5 % that rewrites the graph file
    first = sorted(cid for doc in index.documents(KB)[:n] for cid, _ in index.chunk_texts(doc.id))[:n]
    vectors = index.stored_vectors(identity, first)
    rows = [(cid, vectors[cid]) for cid in first if cid in vectors]
    started = time.perf_counter()
    with index.transaction():
        index.store_vectors(identity, DIMENSIONS, KB, rows)
    seconds = time.perf_counter() - started
    return {"vectors": len(rows), "seconds": seconds, "per_s": len(rows) / seconds}


def logged_writes(coffer: Coffer, embedder: Embedder, queries: list[str], stored: int) -> dict[str, Any]:
    """Vectors re-stored with the graph present (every write logged), and the KNN that catches up."""
    vector = embedder.embed_query(queries[0])
    out = restore(coffer, embedder.identity, stored)
    started = time.perf_counter()
    vector_search(coffer.index, embedder.identity, vector, [KB], HYBRID_DEPTH)
    caught_up = (time.perf_counter() - started) * 1000
    started = time.perf_counter()
    vector_search(coffer.index, embedder.identity, vector, [KB], HYBRID_DEPTH)
    return {**out, "first_search_ms": caught_up, "next_search_ms": (time.perf_counter() - started) * 1000}


def memory(home: Path, model_env: dict[str, str] | None, query: str) -> dict[str, Any]:
    """RSS of ``coffer serve``: idle after tools/list, then after one search (hybrid when the model ran)."""
    if not Path("/proc/self/status").exists():
        return _skipped("needs Linux /proc")
    log("  serve memory")
    env = model_env or {"COFFER_EMBEDDING_PROVIDER": "none"}
    return {"embedder": "MiniLM (fastembed)" if model_env else None, **serve_memory(home, env, search=(KB, query))}


def startup(home: Path, runs: int) -> dict[str, Any]:
    if runs <= 0:
        return _skipped("--startup-runs 0")
    log("  start-up")
    return startup_times(home, runs)


# -- command line --------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", default="1000,10000,100000", help="comma-separated corpus sizes in chunks")
    parser.add_argument("--out", type=Path, default=Path("bench/results/scale.json"), help="the JSON report")
    parser.add_argument("--queries", type=int, default=200, help="timed operations per measurement (after warm-up)")
    parser.add_argument("--skip-mcp", action="store_true", help="no search latency through MCP stdio")
    parser.add_argument("--skip-hybrid", action="store_true", help="no vector / hybrid measurement")
    parser.add_argument(
        "--only-vectors",
        action="store_true",
        help="after the ingest, only keyword search, hybrid / vector / ANN and memory",
    )
    parser.add_argument(
        "--vectors-then-index",
        action="store_true",
        help=(
            "PostgreSQL: store the synthetic vectors without the HNSW index, then build it in one "
            "CREATE INDEX, timed (pgvector's way to load many; inserting a million into the index "
            "one by one takes hours here)"
        ),
    )
    parser.add_argument(
        "--files-via-sqlite",
        action="store_true",
        help=(
            "PostgreSQL at a million chunks: ingest the files through the SQLite backend, build the "
            "index from them by a timed full rebuild (`coffer index rebuild --backend postgres`), then "
            "what --only-vectors measures"
        ),
    )
    parser.add_argument(
        "--ann-min-chunks",
        type=int,
        default=None,
        help="the ANN side's ann_min_chunks (default: the setting's; 1 forces a graph at every size)",
    )
    parser.add_argument(
        "--fake-embedder",
        action="store_true",
        help="hybrid with a deterministic word-hash embedder instead of MiniLM (tests)",
    )
    parser.add_argument(
        "--grep-mb", type=float, default=50.0, help="at the largest size, also grep over this many MB of files (0: off)"
    )
    parser.add_argument("--add-sample", type=int, default=1000, help="documents for the add_document loop")
    parser.add_argument("--startup-runs", type=int, default=5, help="timed coffer serve start-ups per size (0: none)")
    parser.add_argument("--seed", type=int, default=20261130, help="the corpus and query seed")
    parser.add_argument(
        "--vocab",
        type=Path,
        default=DEFAULT_VOCAB,
        help="a BEIR corpus.jsonl for the vocabulary (built-in words when absent)",
    )
    parser.add_argument("--model-path", type=Path, default=DEFAULT_MODEL, help="the local MiniLM model folder")
    parser.add_argument("--workdir", type=Path, default=None, help="where the temporary corpora and homes go")
    parser.add_argument("--backend", default="sqlite", help="comma-separated index backends: sqlite, postgres")
    parser.add_argument(
        "--postgres-url",
        default=None,
        help="for postgres: a server whose role may create databases (default: embedded)",
    )
    parser.add_argument(
        "--report",
        type=Path,
        nargs="+",
        default=None,
        metavar="JSON",
        help="run nothing: print the tables of these result files, their sizes pooled",
    )
    args = parser.parse_args(argv)
    try:
        args.chunks = [int(size.replace("_", "")) for size in args.chunks.split(",") if size.strip()]
    except ValueError:
        parser.error(f"--chunks takes comma-separated integers, got {args.chunks!r}")
    if not args.chunks or min(args.chunks) < 1 or args.queries < 1:
        parser.error("--chunks and --queries must be positive")
    try:
        args.backends = parse_backends(args.backend)
    except ValueError as exc:
        parser.error(str(exc))
    return args


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the benchmark, print the tables, write the JSON; returns what was written."""
    args = parse_args(argv)
    if args.report:
        return render(args.report)
    command = " ".join(["python -m bench.scale", *(sys.argv[1:] if argv is None else argv)])
    date = datetime.now(timezone.utc).replace(microsecond=0).isoformat()
    fingerprint = source_fingerprint()  # before the run: the sources may change while it runs
    vocab = load_vocabulary(args.vocab)
    sizes, backends = [], {}
    with tempfile.TemporaryDirectory(prefix="coffer-scale-", dir=args.workdir) as tmp:
        for name in args.backends:
            with open_backend(name, args.postgres_url) as backend:
                backends[name] = backend.describe()
                for target in args.chunks:
                    root = Path(tmp) / f"{name}-chunks-{target}"
                    grep_mb = args.grep_mb if target == max(args.chunks) else 0
                    sizes.append(run_size(args, vocab, target, root, grep_mb, backend))
                    shutil.rmtree(root, ignore_errors=True)
        data = {
            "command": command,
            "date": date,
            "coffer_version": coffer_mcp.__version__,
            "coffer_source_sha256": fingerprint,
            "machine": machine_info(_vec_version(Path(tmp))),
            "options": {
                "chunks": args.chunks,
                "queries": args.queries,
                "warmup": _warmup(args),
                "skip_mcp": args.skip_mcp,
                "skip_hybrid": args.skip_hybrid,
                "fake_embedder": args.fake_embedder,
                "ann_min_chunks": args.ann_min_chunks,
                "only_vectors": args.only_vectors,
                "files_via_sqlite": args.files_via_sqlite,
                "vectors_then_index": args.vectors_then_index,
                "grep_mb": args.grep_mb,
                "add_sample": args.add_sample,
                "startup_runs": args.startup_runs,
                "seed": args.seed,
                "vocabulary": vocab.source,
                "model_path": str(args.model_path),
            },
            "sizes": sizes,
        }
    data["backends"], data["pg_targets"] = backends, _compare.pg_targets(sizes)
    if source_fingerprint() != fingerprint:
        log("warning: the coffer_mcp sources changed during the run; the figures may mix two versions")
        data["sources_changed_during_run"] = True
    data["targets"] = _report.targets(_compare.of_backend(sizes, args.backends[0]))
    data["ann_targets"] = _report.ann_targets(_compare.of_backend(sizes, "sqlite"))
    write_report(args.out, data, _compare.markdown(data))
    return data


def render(files: Sequence[Path]) -> dict[str, Any]:
    """The tables of earlier runs, their sizes pooled, so targets read at 10,000 documents can be
    interpolated between runs (e.g. ``scale-1k-10k.json`` and ``scale-100k.json``)."""
    runs = [json.loads(path.read_text(encoding="utf-8")) for path in files]
    sizes = sorted((size for run in runs for size in run["sizes"]), key=lambda size: size["target_chunks"])
    data = {**runs[-1], "sizes": sizes, "command": " && ".join(run["command"] for run in runs)}
    data["targets"] = _report.targets(sizes)
    data["ann_targets"] = _report.ann_targets(sizes)
    print(_report.markdown(data))
    return data


def _vec_version(folder: Path) -> str | None:
    conn = connect(folder / "probe.db")
    try:
        return vec_version(conn)
    finally:
        conn.close()


if __name__ == "__main__":
    main()
