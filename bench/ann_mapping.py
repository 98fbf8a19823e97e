"""How a process holds a saved ANN graph: mapped by itself, read into its memory, or mapped by the viewer.

Run from the repository root (Linux: reads /proc)::

    python -m bench.ann_mapping [--vectors 50000] [--queries 300] [--out bench/results/ann-mapping-50k.json]

Issue 39: a graph file truncated in place under a process that maps it kills that process with
SIGBUS. The ways out cost memory, time to open, or time per search; this measures the three.
One float32 graph of ``--vectors`` synthetic 384-dimension vectors (``bench._vectors``) is built
with ``hnsw.Builder`` and saved (in ``--workdir``, kept between runs). Then each way runs in a
subprocess of its own, so its memory is its own:

- ``mapped here``: ``Index.restore(view=True)`` in the searching process (before issue 39);
- ``read into memory``: ``Index.restore(view=False)``;
- ``viewer process``: ``hnsw.open_graph`` (what ships: mapped in a process of its own).

Each reports the anonymous memory the graph added (``RssAnon``; for the viewer, the viewer
process's whole), the time to open it (its SHA-256 check included; for the viewer, its start
too), and per query 64 candidates with their vectors, as ``AnnCache.candidates`` asks: the
latency, and the CPU time of the searching process and of the viewer process. Run it twice on a
busy machine: a round trip between processes waits for the scheduler twice.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench._measure import log, machine_info, proc_cpu_seconds, summarize, write_report
from bench._vectors import DIMENSIONS, synthetic_vectors
from coffer_mcp.index.sqlite import hnsw, viewer

WAYS = ("mapped here", "read into memory", "viewer process")
CANDIDATES = 64


def build(folder: Path, count: int, seed: int) -> tuple[Path, hnsw.FileStamp]:
    """The graph of ``count`` vectors and its stamp, built once per size and seed."""
    record = folder / f"graph-{count}-{seed}.json"
    if record.exists():
        stamp = hnsw.FileStamp(**json.loads(record.read_text(encoding="utf-8")))
        if (folder / stamp.name).exists():
            return folder / stamp.name, stamp
    log(f"building a graph of {count:,} vectors")
    builder = hnsw.Builder(DIMENSIONS, threads=2)
    for start, batch in synthetic_vectors(count, seed):
        rows = np.ascontiguousarray(batch, dtype=np.float32)
        builder.add([(start + i + 1, row.tobytes()) for i, row in enumerate(rows)])
    stamp = builder.save(folder, f"graph-{count}-{seed}")
    record.write_text(json.dumps(dataclasses.asdict(stamp)), encoding="utf-8")
    return folder / stamp.name, stamp


def anonymous_mb(pid: int) -> float:
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["RssAnon"].split()[0]) / 1024


def measure(way: str, path: Path, stamp: hnsw.FileStamp, queries: int, seed: int) -> dict[str, Any]:
    """One way, in this process: memory, opening, latency and CPU per search."""
    hnsw._index_class()  # the library loaded before the baseline, as in a server that searched before
    before = anonymous_mb(os.getpid())
    started = time.perf_counter()
    search = _opened(way, path, stamp)
    opened = time.perf_counter() - started
    rng = np.random.default_rng([seed, 3])
    vectors = rng.standard_normal((queries + 50, DIMENSIONS)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    for query in vectors[:50]:
        search(query)
    helper = viewer.VIEWER._process.proc.pid if way == "viewer process" and viewer.VIEWER._process else None
    cpu, helper_cpu = time.process_time(), proc_cpu_seconds(helper) if helper else 0.0
    timings = []
    for query in vectors[50:]:
        begun = time.perf_counter()
        search(query)
        timings.append((time.perf_counter() - begun) * 1000)
    cpu = (time.process_time() - cpu) * 1000 / queries
    helper_cpu = ((proc_cpu_seconds(helper) or 0.0) - (helper_cpu or 0.0)) * 1000 / queries if helper else 0.0
    added = anonymous_mb(helper) if helper else anonymous_mb(os.getpid()) - before
    return {
        "way": way,
        "anonymous_mb": round(added, 1),
        "open_s": round(opened, 3),
        "search_ms": summarize(timings),
        "cpu_ms_per_search": round(cpu, 3),
        "viewer_cpu_ms_per_search": round(helper_cpu, 3),
        "load_average": os.getloadavg()[0],
    }


def _opened(way: str, path: Path, stamp: hnsw.FileStamp) -> Callable[[Any], object]:
    if way == "viewer process":
        graph = hnsw.open_graph(path, stamp)
        return lambda query: graph.nearest(query, CANDIDATES)
    hnsw._check(path, stamp)
    index = hnsw._index_class().restore(str(path), view=way == "mapped here")

    def search(query: Any) -> object:
        index.expansion_search = hnsw.EXPANSION_SEARCH
        keys = index.search(query, CANDIDATES, threads=1, exact=False).keys
        return index.get(keys, dtype=np.float32)

    return search


def table(rows: Sequence[dict[str, Any]], stamp: hnsw.FileStamp) -> str:
    lines = [
        f"graph: {stamp.vectors:,} vectors, {stamp.size / 2**20:.1f} MB",
        "| way | anonymous memory | open (with SHA-256) | search P50 / P95 ms | CPU ms per search (viewer) | load |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        search = row["search_ms"]
        lines.append(
            f"| {row['way']} | {row['anonymous_mb']:.1f} MB | {row['open_s']:.2f} s | {search['p50']:.2f} / "
            f"{search['p95']:.2f} | {row['cpu_ms_per_search']:.2f} ({row['viewer_cpu_ms_per_search']:.2f}) "
            f"| {row['load_average']:.1f} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.ann_mapping", description=__doc__.split("\n\n")[0])
    parser.add_argument("--vectors", type=int, default=50_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--seed", type=int, default=20261207)
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "coffer-ann-mapping")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    path, stamp = build(args.workdir, args.vectors, args.seed)
    if args.one:
        result = measure(args.one, path, stamp, args.queries, args.seed)
        print(json.dumps(result))
        return result
    rows = []
    for way in WAYS:
        log(f"measuring: {way}")
        command = [sys.executable, "-m", "bench.ann_mapping", "--one", way, *_passed(args)]
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    data = {"machine": machine_info(None), "graph": dataclasses.asdict(stamp), "ways": rows}
    if args.out:
        write_report(args.out, data, table(rows, stamp))
    else:
        print(table(rows, stamp))
    return data


def _passed(args: argparse.Namespace) -> list[str]:
    return [
        *("--vectors", str(args.vectors), "--queries", str(args.queries)),
        *("--seed", str(args.seed), "--workdir", str(args.workdir)),
    ]


if __name__ == "__main__":
    main()
