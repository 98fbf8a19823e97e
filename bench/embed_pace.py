"""Embedding at the machine's pace: Coffer's ingest against the same model called directly, side by side.

Usage (from the repo root; Linux, reads /proc)::

    python -m bench.embed_pace [--chunks 24] [--long 16] [--only GROUP_OR_RUN ...]
                               [--model-path ../shared/models/all-MiniLM-L6-v2-int8]
                               [--out bench/results/embed-pace.json]

The corpus is this repository's own documentation: ``docs/*.md`` and ``README.md`` cut at their
``## `` headings into documents, taken from each file in turn until they make ``--chunks`` chunks
(Coffer's default chunking). Each run (``bench/_pace_runs.py``) is a process of its own, so its
peak RSS is its own, and embeds exactly the texts Coffer embeds for those documents. The groups
of runs (``--only``, repeatable; all but ``shapes`` by default):

- **throughput**: chunks/s and CPU ms per chunk of fastembed called directly (its documented
  defaults, Coffer's old call shape, its worker-per-core parallelism), onnxruntime called
  directly with sleeping threads (texts sorted by length in batches of at most 1,024 padded
  tokens; one text per call), and Coffer's ingest into a vector knowledge base, in-process and
  through the shared model service. The ratio of the best direct figure to Coffer's is the
  target (at most 1.3).
- **shapes**: what the shapes are made of: one text per call in fastembed's own session,
  4,096-token batches, one text per call with spinning threads.
- **latency**: a query's vector, and a whole search, asked every 0.25 s while the corpus is
  ingested, in-process and through the service: how long each took, and whether it came back
  before the ingest finished.
- **memory**: ``--long`` texts longer than the model's 512 tokens, embedded as Coffer did before
  (batches of 16) and as it does now: the peak RSS of the process, and of the service.

The 1-minute load average is recorded before each run: on a shared machine it is the noise.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bench._measure import log, machine_info, source_fingerprint, write_report
from bench._pace_runs import RUNS
from bench._vectors import MINILM
from coffer_mcp import Coffer, load_settings
from coffer_mcp.indexing.chunking import chunk_markdown
from coffer_mcp.settings import default_of

__all__ = ["main"]

REPO = Path(__file__).resolve().parents[1]
DEFAULT_MODEL = REPO.parent / "shared" / "models" / "all-MiniLM-L6-v2-int8"
DIRECT = "fastembed", "onnxruntime"
SHAPES = [  # what the shapes above are made of: spinning threads, bigger batches, fastembed's session
    "fastembed, one text per call",
    "onnxruntime, sorted, 4,096-token batches",
    "onnxruntime, one text per call, spinning threads",
]
GROUPS = {
    "throughput": [name for name in RUNS if name.startswith((*DIRECT, "Coffer ingest")) and name not in SHAPES],
    "latency": [name for name in RUNS if name.startswith("queries")],
    "memory": [name for name in RUNS if name.startswith("long texts")],
    "shapes": SHAPES,
}
DEFAULT_GROUPS = "throughput", "latency", "memory"
WORDS = "the river carried silt from distant mountains across a wide delta where farmers planted rice".split()


def sections(root: Path = REPO) -> list[list[tuple[str, str]]]:
    """Per documentation file, its ``## `` sections as (file name, Markdown) documents."""
    files = []
    for path in [*sorted((root / "docs").glob("*.md")), root / "README.md"]:
        parts = path.read_text(encoding="utf-8").split("\n## ")[1:]
        files.append(
            [
                (f"{path.stem}-{n:02d}.md", f"# {path.stem}: {heading}\n\n{body}")
                for n, (heading, _, body) in enumerate((part.partition("\n") for part in parts), 1)
            ]
        )
    return files


def pick(files: list[list[tuple[str, str]]], chunks: int) -> list[tuple[str, str]]:
    """Documents taken from each file in turn until they make ``chunks`` chunks."""
    size, overlap = default_of("chunk_size"), default_of("chunk_overlap")
    picked: list[tuple[str, str]] = []
    total, turn = 0, 0
    while total < chunks and any(files):
        queue = files[turn % len(files)]
        turn += 1
        if queue:
            name, markdown = queue.pop(0)
            picked.append((name, markdown))
            total += len(chunk_markdown(markdown, size, overlap))
    return picked


def long_texts(count: int) -> list[str]:
    """``count`` distinct texts longer than the model's 512 tokens."""
    return [" ".join(WORDS[(i * 7 + n) % len(WORDS)] for n in range(700)) + f" text {i}" for i in range(count)]


def corpus(documents: list[tuple[str, str]], long: int, workdir: Path) -> dict[str, Any]:
    """The documents with the texts Coffer embeds for them, read from a keyword-only ingest."""
    with Coffer(load_settings({"COFFER_EMBEDDING_PROVIDER": "none"}, home=workdir / "keyword")) as coffer:
        coffer.create_kb("texts", "the texts to embed")
        docs = []
        for name, markdown in documents:
            result = coffer.add_document("texts", name, markdown)
            chunks = coffer.index.chunk_texts(result.document_id)
            texts = [f"{result.title}\n\n{text}" for _, text in chunks]
            docs.append({"name": name, "markdown": markdown, "texts": texts})
    return {"documents": docs, "long": long_texts(long)}


def run(name: str, corpus_file: Path, model: Path) -> dict[str, Any]:
    load = os.getloadavg()[0]
    log(f"{name} (load {load:.1f})")
    done = subprocess.run(
        [sys.executable, "-m", "bench._pace_runs", name, str(corpus_file), str(model)],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
    )
    if done.returncode != 0:
        raise SystemExit(f"{name} failed:\n{done.stderr}")
    return {"run": name, "load_1min": load, **json.loads(done.stdout.splitlines()[-1])}


def measure(args: argparse.Namespace) -> dict[str, Any]:
    names = [name for item in args.only for name in GROUPS.get(item) or [n for n in RUNS if item in n]]
    with tempfile.TemporaryDirectory(prefix="coffer-pace-", dir=args.workdir) as work:
        data = corpus(pick(sections(), args.chunks), args.long, Path(work))
        corpus_file = Path(work) / "corpus.json"
        corpus_file.write_text(json.dumps(data), encoding="utf-8")
        load = os.getloadavg()
        runs = [run(name, corpus_file, args.model_path) for name in names]
    return {
        "model": MINILM,
        "model_path": str(args.model_path),
        "documents": len(data["documents"]),
        "chunks": sum(len(doc["texts"]) for doc in data["documents"]),
        "long_texts": args.long,
        "load_average_start": load,
        "load_average_end": os.getloadavg(),
        "runs": runs,
    }


def _per_s(run: dict[str, Any]) -> float:
    return run["chunks"] / run["seconds"]


def tables(report: dict[str, Any]) -> str:
    runs = {r["run"]: r for r in report["runs"]}
    lines = [f"{report['documents']} documents, {report['chunks']} chunks; load average {_loads(report)}", ""]
    through = [r for name, r in runs.items() if name in GROUPS["throughput"] + SHAPES]
    if through:
        best = max((r for r in through if r["run"].startswith(DIRECT)), key=_per_s, default=None)
        lines += _throughput(through, best)
    latency = [r for name, r in runs.items() if name in GROUPS["latency"]]
    if latency:
        lines += ["", "| run | query alone | query during ingest (answered before it ended) | search during ingest |"]
        lines.append("|---|---:|---|---|")
        lines += [
            f"| {r['run']} | {r['idle_query_ms']:.0f} ms | {_during(r['during_query_ms'])} | "
            f"{_during(r['during_search_ms'])} |"
            for r in latency
        ]
    memory = [r for name, r in runs.items() if name in GROUPS["memory"]]
    if memory:
        lines += ["", "| run | texts | s | process peak RSS | service peak RSS |", "|---|---:|---:|---:|---:|"]
        lines += [
            f"| {r['run']} | {r['chunks']} | {r['seconds']:.1f} | {r['peak_rss_mb']:.0f} MB | "
            f"{_mb(r.get('service_peak_rss_mb'))} |"
            for r in memory
        ]
    return "\n".join(lines)


def _throughput(through: list[dict[str, Any]], best: dict[str, Any] | None) -> list[str]:
    lines = [
        "| run | load | chunks/s | CPU ms/chunk | process peak RSS | service peak RSS | best direct / this |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in through:
        cpu = f"{r['cpu_seconds'] / r['chunks'] * 1000:.0f}" if "cpu_seconds" in r else "—"
        ratio = f"{_per_s(best) / _per_s(r):.2f}" if best else "—"
        lines.append(
            f"| {r['run']} | {r['load_1min']:.1f} | {_per_s(r):.2f} | {cpu} | {r['peak_rss_mb']:.0f} MB | "
            f"{_mb(r.get('service_peak_rss_mb'))} | {ratio} |"
        )
    if best:
        lines += ["", f"best direct: {best['run']}, {_per_s(best):.2f} chunks/s (target: Coffer within 1.3 times)"]
    return lines


def _during(summary: dict[str, Any]) -> str:
    if not summary["n"]:
        return "—"
    return (
        f"p50 {summary['p50']:.0f} ms, max {summary['max']:.0f} ms "
        f"({summary['before_the_bulk_finished']} of {summary['n']})"
    )


def _mb(value: float | None) -> str:
    return "—" if value is None else f"{value:.0f} MB"


def _loads(report: dict[str, Any]) -> str:
    start, end = report["load_average_start"], report["load_average_end"]
    return f"{start[0]:.1f} → {end[0]:.1f} (1 min)"


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.embed_pace", description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=24, help="at least this many chunks of documentation")
    parser.add_argument("--long", type=int, default=16, help="how many long texts the memory runs embed")
    parser.add_argument(
        "--only",
        action="append",
        help=f"a group ({', '.join(GROUPS)}) or part of a run's name (e.g. 'Coffer ingest'); repeatable; "
        f"default: {', '.join(DEFAULT_GROUPS)}",
    )
    parser.add_argument("--model-path", type=Path, default=DEFAULT_MODEL, help="the local MiniLM model folder")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "embed-pace.json")
    parser.add_argument("--workdir", type=Path, default=None, help="where the temporary homes go")
    args = parser.parse_args(argv)
    args.only = args.only or list(DEFAULT_GROUPS)
    if unknown := [item for item in args.only if item not in GROUPS and not any(item in name for name in RUNS)]:
        parser.error(f"no group or run is called {', '.join(unknown)}")
    if not Path("/proc/self/status").exists():
        parser.error("needs Linux (/proc/<pid>/status)")
    if not (args.model_path / "model.onnx").exists():
        parser.error(f"no model at {args.model_path}")
    report = {
        "command": " ".join(["python -m bench.embed_pace", *(argv if argv is not None else sys.argv[1:])]),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": machine_info(None),
        "coffer_source_sha256": source_fingerprint(),
        **measure(args),
    }
    write_report(args.out, report, tables(report))
    return report


if __name__ == "__main__":
    main()
