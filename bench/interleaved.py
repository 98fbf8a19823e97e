"""Search latency of SQLite and PostgreSQL over one corpus, query by query in turn.

Run from the repository root::

    python -m bench.interleaved [--chunks 100000] [--queries 200] [--postgres-url URL]
                                [--out bench/results/interleaved-100k.json]

``bench.scale --backend sqlite,postgres`` measures one backend after the other, so on a shared
machine each sees a different load. Here the scale benchmark's corpus is ingested once into a
SQLite home, the same files are indexed into PostgreSQL (``reindex_all`` of a copy of the home),
both get the same synthetic vectors, and every timed operation runs each query on both backends
back to back (the order alternating), so both see the same load. Reports P50/P95/P99 per
operation and backend, and the ingest, rebuild and vector-fill times.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import coffer_mcp
from bench._backends import autovacuums_since, flush_writes, open_backend
from bench._corpus import CHUNK_OVERLAP, CHUNK_SIZE, load_vocabulary, make_queries, write_corpus
from bench._measure import log, machine_info, source_fingerprint, summarize, write_report
from bench._vectors import FakeEmbedder, fill_vectors, minilm
from bench.scale import DEFAULT_MODEL, DEFAULT_VOCAB, KB, _has_content_word
from coffer_mcp import Coffer, load_settings
from coffer_mcp.embed import Embedder
from coffer_mcp.index.sqlite import SqliteIndex
from coffer_mcp.retrieval.search import keyword_search, vector_search
from coffer_mcp.services.retrieval import Alongside

__all__ = ["main"]

BACKENDS = ("sqlite", "postgres")
NAMES = {"sqlite": "SQLite", "postgres": "PostgreSQL"}


def interleaved(calls: dict[str, Callable[[Any], object]], items: Sequence[Any], warmup: int) -> dict[str, Any]:
    """Each item through every call in turn (the order rotating per item); timings per call, with
    the slowest ten (milliseconds, the item when it is a query, seconds into the run): whether a
    tail is some queries' or a moment's."""
    names = list(calls)
    timings: dict[str, list[tuple[float, Any, float]]] = {name: [] for name in names}
    begun = time.perf_counter()
    for n, item in enumerate(items):
        order = names[n % len(names) :] + names[: n % len(names)]
        for name in order:
            started = time.perf_counter()
            calls[name](item)
            if n >= warmup:
                timings[name].append(((time.perf_counter() - started) * 1000, item, started - begun))
    return {
        name: {
            **summarize([ms for ms, _, _ in values]),
            "slowest": [
                [round(ms, 1), item if isinstance(item, str) else None, round(at, 2)]
                for ms, item, at in sorted(values, key=lambda value: -value[0])[:10]
            ],
        }
        for name, values in timings.items()
    }


def build(args: argparse.Namespace, root: Path, backend: Any, embedder: Embedder | None) -> dict[str, Any]:
    """The corpus, its SQLite home (ingested) and PostgreSQL home (rebuilt from a copy); vectors in both."""
    vocab = load_vocabulary(args.vocab)
    info = write_corpus(root / "corpus", vocab, args.seed, chunks=args.chunks)
    log(f"corpus: {info.documents:,} documents, {info.chunks:,} chunks")
    settings = {
        "sqlite": load_settings(home=root / "sqlite", embedding_provider="none", index_backend="sqlite"),
        "postgres": load_settings(home=root / "postgres", embedding_provider="none", **backend.new_index()),
    }
    out: dict[str, Any] = {"documents": info.documents, "settings": settings}
    with Coffer(settings["sqlite"]) as coffer:
        coffer.create_kb(KB, chunk_size=CHUNK_SIZE, chunk_overlap=CHUNK_OVERLAP)
        started = time.perf_counter()
        coffer.ingest_path(KB, root / "corpus")
        out["sqlite_ingest_seconds"] = time.perf_counter() - started
    log(f"sqlite ingest: {out['sqlite_ingest_seconds']:.0f} s; copying the home and rebuilding it into PostgreSQL")
    shutil.copytree(root / "sqlite" / "knowledge", root / "postgres" / "knowledge")
    with Coffer(settings["postgres"]) as coffer:
        started = time.perf_counter()
        coffer.reindex_all()
        out["postgres_rebuild_seconds"] = time.perf_counter() - started
        out["chunks"] = coffer.describe_kb(KB).chunk_count
    if embedder is not None:
        for name in BACKENDS:
            log(f"{name}: storing synthetic vectors")
            with Coffer(settings[name]) as coffer:
                coffer.update_kb(KB, vector=True)
                started = time.perf_counter()
                fill_vectors(coffer, KB, embedder.identity, args.seed)
                out[f"{name}_fill_seconds"] = time.perf_counter() - started
                index = coffer.index
                if isinstance(index, SqliteIndex) and 0 < settings[name].ann_min_chunks <= out["chunks"]:
                    # Built now, as a served knowledge base has it: left to the first search, the
                    # graph is built in the background while the timed searches run the exact scan.
                    started = time.perf_counter()
                    index.build_ann(embedder.identity, KB)
                    out["sqlite_ann_build_seconds"] = time.perf_counter() - started
    for name in BACKENDS:
        flush_writes(settings[name])
    out["queries"] = make_queries(vocab, info.phrases, args.queries + args.warmup, args.seed)
    out["content_queries"] = _content_queries(vocab, info.phrases, args.queries + args.warmup, args.seed)
    return out


def _content_queries(vocab: Any, phrases: list[str], n: int, seed: int) -> list[str]:
    """``n`` queries holding a content word, drawn as the others are: the first ones of a longer draw,
    so that this operation times as many queries as every other (the others' own subset could be short)."""
    drawn = n
    while drawn <= 1000 * n:
        content = [q for q in make_queries(vocab, phrases, drawn, seed) if _has_content_word(q)]
        if len(content) >= n:
            return content[:n]
        drawn *= 2
    raise ValueError(f"the vocabulary gave fewer than {n} queries with a content word in {drawn // 2} draws")


def measure(
    args: argparse.Namespace, built: dict[str, Any], embedder: Embedder | None
) -> tuple[dict[str, Any], str | None, float, dict[str, float]]:
    """Each operation's latencies on both backends, which vector search SQLite ran (``ann``,
    ``exact``; None without vectors), and when each operation began (seconds into the timings)."""
    queries, content, warm = built["queries"], built["content_queries"], args.warmup
    results: dict[str, Any] = {}
    began, began_at = time.time(), {}
    sqlite_search = None
    with (
        Coffer(built["settings"]["sqlite"], embedder=embedder) as sqlite,
        Coffer(built["settings"]["postgres"], embedder=embedder) as postgres,
    ):
        coffers = {"sqlite": sqlite, "postgres": postgres}

        def each(make: Callable[[Coffer], Callable[[Any], object]]) -> dict[str, Callable[[Any], object]]:
            return {name: make(coffer) for name, coffer in coffers.items()}

        def timed(key: str, calls: dict[str, Callable[[Any], object]], items: Sequence[Any], warmup: int) -> Any:
            began_at[key] = round(time.time() - began, 1)
            return interleaved(calls, items, warmup)

        log("keyword")
        results["keyword"] = timed(
            "keyword", each(lambda c: lambda q: c.search(KB, q, 5, strategy="keyword")), queries, warm
        )
        results["keyword_without_refresh"] = timed(
            "keyword_without_refresh", each(lambda c: lambda q: keyword_search(c.index, [KB], q, 5)), queries, warm
        )
        results["keyword_content_words"] = timed(
            "keyword_content_words", each(lambda c: lambda q: c.search(KB, q, 5, strategy="keyword")), content, warm
        )
        results["keyword_depth_100"] = timed(
            "keyword_depth_100", each(lambda c: lambda q: keyword_search(c.index, [KB], q, 100)), queries, warm
        )
        if embedder is not None:
            log("hybrid and vector")
            vectors = [embedder.embed_query(query) for query in queries]
            # Hybrid as shipped (its keyword half in a worker thread, alongside the vector half) and
            # with the halves one after the other, each query both ways back to back.
            in_turn = {f"{name}_in_turn": _halves_in_turn(coffer) for name, coffer in coffers.items()}
            both = timed(
                "hybrid", {**each(lambda c: lambda q: c.search(KB, q, 5, strategy="hybrid")), **in_turn}, queries, warm
            )
            results["hybrid"] = {name: both[name] for name in BACKENDS}
            results["hybrid_in_turn"] = {name: both[f"{name}_in_turn"] for name in BACKENDS}
            results["vector"] = timed(
                "vector", each(lambda c: lambda q: c.search(KB, q, 5, strategy="vector")), queries, warm
            )
            results["knn_depth_100"] = timed(
                "knn_depth_100",
                each(lambda c: lambda v: vector_search(c.index, embedder.identity, v, [KB], 100)),
                vectors,
                warm,
            )
            sqlite_search = sqlite.index.vector_status(KB)[embedder.identity]["search"]
        # The first operation again, last: whether its tail was the first touch after the build.
        results["keyword_again"] = timed(
            "keyword_again", each(lambda c: lambda q: c.search(KB, q, 5, strategy="keyword")), queries, warm
        )
    return results, sqlite_search, began, began_at


def _halves_in_turn(coffer: Coffer) -> Callable[[Any], object]:
    """A hybrid search whose keyword half runs after the vector half, in the caller's thread."""
    one_by_one = Alongside(0)

    def search(query: str) -> object:
        shipped, coffer.retrieval.alongside = coffer.retrieval.alongside, one_by_one
        try:
            return coffer.search(KB, query, 5, strategy="hybrid")
        finally:
            coffer.retrieval.alongside = shipped

    return search


_LABELS = {
    "keyword": "keyword search (`search`, top_k 5)",
    "keyword_without_refresh": "keyword search without reconcile (`keyword_search`)",
    "keyword_content_words": "keyword search, queries with a content word",
    "keyword_depth_100": "keyword search at depth 100 (what a top-5 hybrid asks)",
    "hybrid": "hybrid search (MiniLM query embedding included)",
    "hybrid_in_turn": "hybrid search, its keyword half after the vector half (before 8b07c8f)",
    "vector": "vector search (query embedding included)",
    "knn_depth_100": "vector KNN alone, depth 100",
    "keyword_again": "keyword search (`search`, top_k 5) again, after all the others",
}


def to_markdown(data: dict[str, Any]) -> str:
    load = data["load_average"]
    lines = [
        f"{data['chunks']:,} chunks ({data['documents']:,} documents); load average {load[0]:.1f} → {load[1]:.1f}"
        + (f"; SQLite vector search: {data['sqlite_vector_search']}" if data.get("sqlite_vector_search") else ""),
        "",
        "| operation | SQLite P50 | SQLite P95 | PostgreSQL P50 | PostgreSQL P95 |",
        "|---|---:|---:|---:|---:|",
    ]
    for key, stats in data["latency_ms"].items():
        s, p = stats["sqlite"], stats["postgres"]
        lines.append(f"| {_LABELS[key]} | {s['p50']:.1f} | {s['p95']:.1f} | {p['p50']:.1f} | {p['p95']:.1f} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.interleaved", description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200, help="timed queries per operation (after the warm-up)")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--seed", type=int, default=20261130)
    parser.add_argument("--vocab", type=Path, default=DEFAULT_VOCAB)
    parser.add_argument("--model-path", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--fake-embedder", action="store_true", help="a word-hash embedder instead of MiniLM (tests)")
    parser.add_argument("--skip-hybrid", action="store_true")
    parser.add_argument("--postgres-url", default=None)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=Path("bench/results/interleaved.json"))
    args = parser.parse_args(argv)
    command = " ".join(["python -m bench.interleaved", *(sys.argv[1:] if argv is None else argv)])
    fingerprint = source_fingerprint()
    embedder = None if args.skip_hybrid else FakeEmbedder() if args.fake_embedder else minilm(args.model_path)
    with (
        tempfile.TemporaryDirectory(prefix="coffer-interleaved-", dir=args.workdir) as tmp,
        open_backend("postgres", args.postgres_url) as backend,
    ):
        built = build(args, Path(tmp), backend, embedder)
        load = [round(os.getloadavg()[0], 2)]
        latency, sqlite_search, began, began_at = measure(args, built, embedder)
        load.append(round(os.getloadavg()[0], 2))
        autovacuums = autovacuums_since(built["settings"]["postgres"], began)
        data = {
            "command": command,
            "date": datetime.now(timezone.utc).replace(microsecond=0).isoformat(),
            "coffer_version": coffer_mcp.__version__,
            "coffer_source_sha256": fingerprint,
            "machine": machine_info(None),
            "postgres": backend.describe(),
            "embedder": None if embedder is None else embedder.identity,
            "documents": built["documents"],
            "chunks": built["chunks"],
            **{key: value for key, value in built.items() if key.endswith("_seconds")},
            "sqlite_vector_search": sqlite_search,
            "load_average": load,
            "latency_ms": {key: {name: stats[name] for name in BACKENDS} for key, stats in latency.items()},
            # When each operation's timings began and PostgreSQL's automatic VACUUM / ANALYZE runs
            # ended, in seconds into the timings: whether the server vacuumed while they ran.
            "began_s": began_at,
            "postgres_autovacuums": autovacuums,
        }
    write_report(args.out, data, to_markdown(data))
    return data


if __name__ == "__main__":
    main()
