"""What reranking adds to a search's latency, measured query by query against the same search without it.

Run from the repository root, with one or more ``/rerank`` endpoints (``bench.rerank_server``
makes local ones)::

    python -m bench.rerank_overhead --data ../shared/eval/scifact --split train --limit-queries 300 \\
        --run 2000,http://127.0.0.1:PORT/v1/rerank --run 200,http://127.0.0.1:SLOW_PORT/v1/rerank

The corpus is ingested once (keyword only) into a fresh home; each ``--run TIMEOUT_MS,URL`` then
opens the home with an http reranker at ``URL`` under a ``TIMEOUT_MS`` budget and searches every
query twice, with and without the reranker, alternating which goes first so a busy machine's
drift falls on both alike. It reports P50 / P95 of each and of the paired difference, and how
many searches were reranked or fell back (timeout, busy, error). Wall-clock figures: run it on an
otherwise idle machine, and compare runs made in one invocation.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench._measure import percentile, source_fingerprint
from bench.quality import KB, coffer_index, load_dataset
from coffer_mcp import Coffer, load_settings


def measure(coffer: Coffer, queries: Sequence[str], top_k: int) -> dict[str, Any]:
    """Each query searched with and without the reranker, alternating which runs first."""
    off: list[float] = []
    on: list[float] = []
    outcomes: dict[str, int] = {}
    for n, query in enumerate(queries):
        for rerank in (n % 2 == 0, n % 2 != 0):
            started = time.perf_counter()
            result = coffer.search(KB, query, top_k, strategy="keyword", rerank=rerank)
            (on if rerank else off).append((time.perf_counter() - started) * 1000)
            if rerank:
                info = result.rerank
                why = "reranked" if info is not None and info.applied else "no passages"
                why = str(info.reason).split(":", 1)[0] if info is not None and not info.applied else why
                outcomes[why] = outcomes.get(why, 0) + 1
    added = [b - a for a, b in zip(off, on, strict=True)]
    return {
        "off_ms": {"p50": percentile(off, 50), "p95": percentile(off, 95)},
        "on_ms": {"p50": percentile(on, 50), "p95": percentile(on, 95)},
        "added_ms": {"p50": percentile(added, 50), "p95": percentile(added, 95), "max": max(added)},
        "outcomes": outcomes,
    }


def parse_run(text: str) -> tuple[int, str]:
    budget, _, url = text.partition(",")
    if not budget.isdigit() or not url.startswith(("http://", "https://")):
        raise argparse.ArgumentTypeError(f"expected TIMEOUT_MS,URL, got {text!r}")
    return int(budget), url


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(prog="python -m bench.rerank_overhead", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="a BEIR-format folder")
    parser.add_argument("--split", default="test")
    parser.add_argument("--limit-queries", type=int, default=None)
    parser.add_argument("--top-k", type=int, default=10)
    parser.add_argument("--candidates", type=int, default=30, help="rerank_candidates for every run")
    parser.add_argument("--run", type=parse_run, action="append", required=True, help="TIMEOUT_MS,URL (repeatable)")
    parser.add_argument("--out", type=Path, default=None, help="also write the figures as JSON here")
    args = parser.parse_args(argv)
    fingerprint = source_fingerprint()
    load_before = os.getloadavg()[0]
    dataset = load_dataset(args.data, args.split, args.limit_queries)
    queries = list(dataset.queries.values())
    rows = []
    environ = {**os.environ, "COFFER_EMBEDDING_PROVIDER": "none"}
    with coffer_index(dataset.corpus) as (coffer, _, _):
        home = coffer.settings.home
        for budget, url in args.run:
            settings = load_settings(
                environ,
                home=home,
                rerank_provider="http",
                rerank_url=url,
                rerank_timeout_ms=budget,
                rerank_candidates=args.candidates,
            )
            with Coffer(settings) as reranking:
                print(f"{url} within {budget} ms: {len(queries)} queries", file=sys.stderr, flush=True)
                rows.append({"url": url, "timeout_ms": budget, **measure(reranking, queries, args.top_k)})
    print("| endpoint | budget ms | without P50 / P95 ms | with P50 / P95 ms | added P50 / P95 / max ms | outcomes |")
    print("|---|---:|---:|---:|---:|---|")
    for row in rows:
        off, on, added = row["off_ms"], row["on_ms"], row["added_ms"]
        outcomes = ", ".join(f"{why} {count}" for why, count in sorted(row["outcomes"].items()))
        print(
            f"| {row['url']} | {row['timeout_ms']} | {off['p50']:.1f} / {off['p95']:.1f} "
            f"| {on['p50']:.1f} / {on['p95']:.1f} | {added['p50']:.1f} / {added['p95']:.1f} / {added['max']:.1f} "
            f"| {outcomes} |"
        )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        report: dict[str, Any] = {"dataset": dataset.name, "split": args.split, "queries": len(queries)}
        report |= {"top_k": args.top_k, "candidates": args.candidates, "coffer_source_sha256": fingerprint}
        report["command"] = " ".join(["python -m bench.rerank_overhead", *(sys.argv[1:] if argv is None else argv)])
        report["load_average_1min"] = {"before": load_before, "after": os.getloadavg()[0]}
        report["cpu_count"] = os.cpu_count()
        report["runs"] = rows
        args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return rows


if __name__ == "__main__":
    main()
