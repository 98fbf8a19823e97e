"""grep over ~50 MB of Markdown: every file read (the scan) against grep's file map, pattern by pattern.

Run from the repository root::

    python -m bench.grep [--mb 50] [--queries 200] [--workdir DIR] [--out bench/results/grep-50mb.json]

The corpus is ``bench.scale``'s synthetic Markdown (``bench/_corpus.py``), ingested once into a
keyword-only KB under ``--workdir`` (kept there: a second run with the same folder times at once;
the ingest of 29,000 documents takes a few minutes). Two services open the same home: one with
grep's file map (``retrieval/prefilter.py``) mapped before timing, one with it closed, which reads
every file as grep did before the map. Each pattern is timed on both, one after the other, so that
a busy neighbour slows both sides alike: a Zipf-drawn literal word, a small regex
(``\\bpref\\w*\\s+word\\b``) and a word in no file, ``max_matches`` 50, and the three pooled ("mixed",
the figure of the 150 ms target). Progress goes to stderr, the table to stdout, all to the JSON.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import coffer_mcp
from bench._corpus import CHUNK_OVERLAP, CHUNK_SIZE, grep_words, load_vocabulary, regex_patterns, write_corpus
from bench._measure import log, machine_info, proc_memory, source_fingerprint, summarize, write_report
from coffer_mcp import Coffer, load_settings
from coffer_mcp.settings import Settings

KB = "bench"
NO_MATCH = "qzxjvkwpq"  # in no document: read in full, unless grep's file map knows it is in no file
SOURCE_SHARE = 0.7  # MB of Markdown per MB of document files once ingested (frontmatter added)
REPO = Path(__file__).resolve().parents[1]
DEFAULT_VOCAB = REPO.parent / "shared" / "eval" / "scifact" / "corpus.jsonl"
KINDS = ("literal", "regex", "no_match")
GREP_TIMEOUT = 120.0


def prepare(args: argparse.Namespace, settings: Settings) -> dict[str, Any]:
    """The KB of about ``--mb`` MB of document files, ingested unless ``--workdir`` has it already."""
    with Coffer(settings) as coffer:
        if KB in {kb.name for kb in coffer.list_kbs()}:
            log("  the corpus is there already")
            return {"ingest_seconds": None}
        vocab = load_vocabulary(args.vocab)
        info = write_corpus(args.workdir / "corpus", vocab, args.seed, megabytes=args.mb * SOURCE_SHARE)
        log(f"  ingesting {info.documents:,} documents ({info.mb:.1f} MB of Markdown)")
        coffer.create_kb(KB, chunk_size=CHUNK_SIZE, chunk_overlap=CHUNK_OVERLAP)
        started = time.perf_counter()
        coffer.ingest_path(KB, info.folder)
        return {"ingest_seconds": time.perf_counter() - started}


def patterns(args: argparse.Namespace) -> dict[str, list[tuple[str, bool]]]:
    """(pattern, fixed_strings) per kind, warm-up included, as ``bench.scale`` draws them."""
    vocab = load_vocabulary(args.vocab)
    n = args.queries + _warmup(args)
    return {
        "literal": [(word, True) for word in grep_words(vocab, n, args.seed)],
        "regex": [(pattern, False) for pattern in regex_patterns(vocab, n, args.seed)],
        "no_match": [(NO_MATCH, True)] * n,
    }


def map_folder(coffer: Coffer) -> dict[str, Any]:
    """Two greps start the map; the time until it is ready and the memory it took (the first grep,
    which loads the KB's documents to check the files against the index, before the RSS is read)."""
    docs = coffer.paths.kb(KB).docs
    coffer.grep(KB, NO_MATCH, 50, fixed_strings=True)
    before = proc_memory(os.getpid())
    started = time.perf_counter()
    coffer.grep(KB, NO_MATCH, 50, fixed_strings=True)
    ready = coffer.retrieval.prefilter.wait_until_mapped([docs], timeout=600)
    seconds = time.perf_counter() - started
    after = proc_memory(os.getpid())
    grown = after["rss_mb"] - before["rss_mb"] if before and after else None
    held = coffer.retrieval.prefilter.held_bytes() / 1e6
    log(f"  mapped: {ready} in {seconds:.1f} s, holding {held:.1f} MB, RSS +{grown or 0:.0f} MB")
    return {"ready": ready, "seconds": seconds, "held_mb": held, "rss_growth_mb": grown}


def time_both(
    scan: Coffer, mapped: Coffer, items: list[tuple[str, bool]], warmup: int
) -> tuple[list[float], list[float], list[int]]:
    """Each pattern on the scanning service, then on the mapped one; milliseconds, and hits that differ."""
    times: dict[str, list[float]] = {"scan": [], "mapped": []}
    differ = []
    for number, (pattern, fixed) in enumerate(items):
        results = []
        for side, coffer in (("scan", scan), ("mapped", mapped)):
            elapsed, result = _timed(lambda c=coffer, p=pattern, f=fixed: c.grep(KB, p, 50, fixed_strings=f))
            results.append(result)
            if number >= warmup:
                times[side].append(elapsed)
        if results[0].model_dump() != results[1].model_dump() or any(result.timed_out for result in results):
            differ.append(number)  # a grep that timed out counts as differing: it was not compared whole
    return times["scan"], times["mapped"], differ


def _timed(call: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = call()
    return (time.perf_counter() - started) * 1000, result


def _warmup(args: argparse.Namespace) -> int:
    return max(3, args.queries // 10)


def _folder_mb(folder: Path) -> tuple[float, int]:
    sizes = [path.stat().st_size for path in folder.glob("*.md")]
    return sum(sizes) / 1e6, len(sizes)


def run(args: argparse.Namespace) -> dict[str, Any]:
    # A grep cut short by its timeout (5 s by default; a loaded box's full scan can take that) would
    # differ from the other side's for that reason alone: give both sides time to finish.
    settings = load_settings(home=args.workdir / "home", embedding_provider="none", grep_timeout=GREP_TIMEOUT)
    result: dict[str, Any] = {"load_average": {"start": os.getloadavg()[0]}}
    result["corpus"] = prepare(args, settings)
    drawn = patterns(args)
    with Coffer(settings) as scan, Coffer(settings) as mapped:
        scan.retrieval.prefilter.close()  # reads every file, as grep did before the map
        mb, files = _folder_mb(mapped.paths.kb(KB).docs)
        result["corpus"].update({"mb": mb, "files": files})
        log(f"  grep over {mb:.1f} MB in {files:,} files")
        result["map"] = map_folder(mapped)
        pooled: dict[str, list[float]] = {"scan": [], "mapped": []}
        for kind in KINDS:
            log(f"  {kind}")
            on_scan, on_map, differ = time_both(scan, mapped, drawn[kind], _warmup(args))
            result[kind] = {"scan": summarize(on_scan), "mapped": summarize(on_map), "results_differ": differ}
            pooled["scan"] += on_scan
            pooled["mapped"] += on_map
        result["mixed"] = {side: summarize(times) for side, times in pooled.items()}
    result["load_average"]["end"] = os.getloadavg()[0]
    return result


def markdown(data: dict[str, Any]) -> str:
    result = data["result"]
    corpus, load = result["corpus"], result["load_average"]
    lines = [
        f"### grep over {corpus['mb']:.1f} MB in {corpus['files']:,} files",
        "",
        (
            f"Load average (1 min) at start / end: {load['start']:.2f} / {load['end']:.2f}. "
            f"Map ready in {result['map']['seconds']:.1f} s, holding {result['map']['held_mb']:.1f} MB "
            f"(RSS +{result['map']['rss_growth_mb'] or 0:.0f} MB)."
        ),
        "",
        "| grep (max 50 lines) | every file: P50 | P95 | P99 | with the map: P50 | P95 | P99 |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    labels = {"literal": "literal word", "regex": "small regex", "no_match": "word in no file", "mixed": "mixed"}
    for kind, label in labels.items():
        scan, mapped = result[kind]["scan"], result[kind]["mapped"]
        cells = [f"{side[q]:.1f}" for side in (scan, mapped) for q in ("p50", "p95", "p99")]
        lines.append(f"| {label} | {' | '.join(cells)} |")
    differ = sum(len(result[kind]["results_differ"]) for kind in KINDS)
    lines += ["", f"Results that differ between the two: {differ}."]
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.grep", description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=50.0, help="MB of document files to grep (default 50)")
    parser.add_argument("--queries", type=int, default=200, help="timed greps of each kind (default 200)")
    parser.add_argument("--workdir", type=Path, help="where the corpus and its home are kept (default: a new folder)")
    parser.add_argument("--seed", type=int, default=20261130, help="the corpus and pattern seed")
    parser.add_argument("--vocab", type=Path, default=DEFAULT_VOCAB, help="a BEIR corpus.jsonl for the words")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "grep-50mb.json")
    args = parser.parse_args(argv)
    if args.mb <= 0 or args.queries < 1:
        parser.error("--mb and --queries must be positive")
    if args.workdir is None:
        args.workdir = Path(tempfile.gettempdir()) / f"coffer-bench-grep-{args.mb:g}mb"
    return args


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    data = {
        "command": " ".join(["python -m bench.grep", *(sys.argv[1:] if argv is None else argv)]),
        "date": datetime.now(timezone.utc).replace(microsecond=0).isoformat(),
        "coffer_version": coffer_mcp.__version__,
        "coffer_source_sha256": source_fingerprint(),
        "machine": machine_info(None),
        "options": {"mb": args.mb, "queries": args.queries, "warmup": _warmup(args), "seed": args.seed},
    }
    data["result"] = run(args)
    write_report(args.out, data, markdown(data))
    return data


if __name__ == "__main__":
    main()
