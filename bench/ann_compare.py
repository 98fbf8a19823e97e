"""Which ANN library: recall@10, latency, memory and build time of usearch, faiss (and hnswlib).

Run from the repository root (heavy: run it niced, in the background)::

    python -m bench.ann_compare --vectors 100000 [--configs usearch-f16,faiss-hnsw-flat,...]
                                [--queries 200] [--threads 2] [--out bench/results/ann-compare-100k.json]

The vectors are ``bench._vectors.synthetic_vectors`` (clustered, L2-normalized, 384 dimensions,
what ``bench.scale`` stores); two query sets: *near* (held-out vectors of the same distribution)
and *far* (random directions: like a real model's query against synthetic vectors). The truth is
the exact top 10 by inner product (= cosine). Each library configuration runs in its own
subprocess so its memory is its own: build time (``--threads`` workers), anonymous RSS added by
the index, file size, time to open the saved file, and per query (one thread) the search alone
and recall@10 after exact re-scoring of the ``count`` candidates, as ``SqliteIndex.knn`` does.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench._measure import log, machine_info, summarize
from bench._vectors import DIMENSIONS, synthetic_vectors

CONFIGS = ["usearch-f32", "usearch-f16", "usearch-i8", "faiss-hnsw-flat", "faiss-hnsw-sq8", "faiss-ivf-flat", "hnswlib"]
CONNECTIVITY = 16  # HNSW "M" for every HNSW library (usearch's default)
EF_ADD = 128  # efConstruction (usearch's default)
# (candidates asked of the index, search breadth ef): what knn asks for limit 5 and 50, and a wider search.
SEARCHES = [(64, 128), (100, 128), (100, 256)]
TOP = 10


def make_data(folder: Path, count: int, queries: int, seed: int) -> dict[str, Path]:
    """Vectors, the two query sets and their exact top 10, as .npy files (made once per size)."""
    paths = {name: folder / f"{name}-{count}-{seed}.npy" for name in ("data", "near", "far", "near-top", "far-top")}
    if all(path.exists() for path in paths.values()):
        return paths
    log(f"data: {count:,} vectors + {queries} held out")
    data = np.lib.format.open_memmap(paths["data"], mode="w+", dtype=np.float32, shape=(count, DIMENSIONS))
    near = np.empty((queries, DIMENSIONS), np.float32)
    for start, rows in synthetic_vectors(count + queries, seed):
        stored = rows[: max(0, count - start)]
        data[start : start + len(stored)] = stored
        held = rows[len(stored) :]
        near[max(0, start - count) : max(0, start - count) + len(held)] = held
    data.flush()
    far = np.random.default_rng([seed, 7]).standard_normal((queries, DIMENSIONS)).astype(np.float32)
    far /= np.linalg.norm(far, axis=1, keepdims=True)
    np.save(paths["near"], near)
    np.save(paths["far"], far)
    for name, query in (("near", near), ("far", far)):
        np.save(paths[f"{name}-top"], exact_top(data, query, TOP))
    return paths


def make_real_data(folder: Path, corpus: Path, model_path: Path) -> dict[str, Path]:
    """SciFact abstracts' sentences and its queries embedded by MiniLM: a real distribution.

    *near* are the real queries; *far* are random directions, as for the synthetic data.
    """
    import re

    from bench._vectors import minilm

    paths = {name: folder / f"{name}-scifact.npy" for name in ("data", "near", "far", "near-top", "far-top")}
    if all(path.exists() for path in paths.values()):
        return paths
    embedder = minilm(model_path)
    if embedder is None:
        raise SystemExit(f"no MiniLM model at {model_path}")
    sentences = [
        sentence
        for line in corpus.read_text(encoding="utf-8").splitlines()
        for sentence in re.split(r"(?<=[.!?])\s+", json.loads(line)["text"])
        if len(sentence) >= 40
    ]
    queries = [
        json.loads(line)["text"] for line in (corpus.parent / "queries.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    log(f"data: embedding {len(sentences):,} SciFact sentences and {len(queries)} queries with MiniLM")
    data = np.concatenate(
        [
            np.asarray(embedder.embed_documents(sentences[i : i + 256]), np.float32)
            for i in range(0, len(sentences), 256)
        ]
    )
    data /= np.linalg.norm(data, axis=1, keepdims=True)
    near = np.asarray([embedder.embed_query(query) for query in queries], np.float32)
    near /= np.linalg.norm(near, axis=1, keepdims=True)
    far = np.random.default_rng(7).standard_normal((len(queries), data.shape[1])).astype(np.float32)
    far /= np.linalg.norm(far, axis=1, keepdims=True)
    for name, array in (("data", data), ("near", near), ("far", far)):
        np.save(paths[name], array)
    for name, query in (("near", near), ("far", far)):
        np.save(paths[f"{name}-top"], exact_top(data, query, TOP))
    return paths


def exact_top(data: np.ndarray, queries: np.ndarray, k: int, batch: int = 100_000) -> np.ndarray:
    """The ids of the ``k`` best inner products of each query (ties: lower id first)."""
    best_ids = np.zeros((len(queries), 0), np.int64)
    best_scores = np.zeros((len(queries), 0), np.float32)
    for start in range(0, len(data), batch):
        scores = queries @ np.asarray(data[start : start + batch]).T
        ids = np.broadcast_to(np.arange(start, start + scores.shape[1]), scores.shape)
        all_scores = np.concatenate([best_scores, scores], axis=1)
        all_ids = np.concatenate([best_ids, ids], axis=1)
        order = np.lexsort((all_ids, -all_scores), axis=1)[:, :k]
        best_ids = np.take_along_axis(all_ids, order, axis=1)
        best_scores = np.take_along_axis(all_scores, order, axis=1)
    return best_ids


# -- one library configuration, in its own process -----------------------------------------------


class Built:
    """A built index: ``search(query, count, ef) -> ids``, ``save(path)``, ``open(path)``."""

    def __init__(
        self,
        search: Callable[[np.ndarray, int, int], np.ndarray],
        save: Callable[[Path], None],
        open_: Callable[[Path], object],
    ) -> None:
        self.search, self.save, self.open = search, save, open_


def build(config: str, data: np.ndarray, threads: int) -> Built:
    if config.startswith("usearch-"):
        return _usearch(config.removeprefix("usearch-"), data, threads)
    if config.startswith("faiss-"):
        return _faiss(config.removeprefix("faiss-"), data, threads)
    if config == "hnswlib":
        return _hnswlib(data, threads)
    raise ValueError(f"unknown configuration {config}")


def _usearch(dtype: str, data: np.ndarray, threads: int) -> Built:
    from usearch.index import Index

    index = Index(ndim=data.shape[1], metric="cos", dtype=dtype, connectivity=CONNECTIVITY, expansion_add=EF_ADD)
    for start in range(0, len(data), 50_000):
        rows = np.asarray(data[start : start + 50_000])
        index.add(np.arange(start, start + len(rows), dtype=np.uint64), rows, threads=threads)

    def search(query: np.ndarray, count: int, ef: int) -> np.ndarray:
        index.expansion_search = ef
        return index.search(query, count, threads=1).keys

    return Built(search, lambda path: index.save(str(path)), lambda path: Index.restore(str(path), view=True))


def _faiss(kind: str, data: np.ndarray, threads: int) -> Built:
    import faiss

    faiss.omp_set_num_threads(threads)
    dims = data.shape[1]
    if kind == "ivf-flat":
        nlist = int(4 * np.sqrt(len(data)))
        index = faiss.IndexIVFFlat(faiss.IndexFlatIP(dims), dims, nlist, faiss.METRIC_INNER_PRODUCT)
        index.train(np.asarray(data[:: max(1, len(data) // (nlist * 40))]))
    elif kind == "hnsw-sq8":
        index = faiss.IndexHNSWSQ(dims, faiss.ScalarQuantizer.QT_8bit, CONNECTIVITY, faiss.METRIC_INNER_PRODUCT)
        index.train(np.asarray(data[: min(len(data), 100_000)]))
    else:
        index = faiss.IndexHNSWFlat(dims, CONNECTIVITY, faiss.METRIC_INNER_PRODUCT)
    if kind != "ivf-flat":
        index.hnsw.efConstruction = EF_ADD
    for start in range(0, len(data), 50_000):
        index.add(np.asarray(data[start : start + 50_000]))
    faiss.omp_set_num_threads(1)

    def search(query: np.ndarray, count: int, ef: int) -> np.ndarray:
        if kind == "ivf-flat":
            index.nprobe = max(1, ef // 4)  # ef 128/256 -> 32/64 of ~4 sqrt(n) lists
        else:
            index.hnsw.efSearch = ef
        return index.search(query.reshape(1, -1), count)[1][0]

    return Built(
        search,
        lambda path: faiss.write_index(index, str(path)),
        lambda path: faiss.read_index(str(path), faiss.IO_FLAG_MMAP),
    )


def _hnswlib(data: np.ndarray, threads: int) -> Built:
    import hnswlib

    index = hnswlib.Index(space="ip", dim=data.shape[1])
    index.init_index(max_elements=len(data), M=CONNECTIVITY, ef_construction=EF_ADD)
    index.set_num_threads(threads)
    for start in range(0, len(data), 50_000):
        rows = np.asarray(data[start : start + 50_000])
        index.add_items(rows, np.arange(start, start + len(rows)))
    index.set_num_threads(1)

    def search(query: np.ndarray, count: int, ef: int) -> np.ndarray:
        index.set_ef(max(ef, count))
        return index.knn_query(query, count)[0][0]

    def open_(path: Path) -> object:
        other = hnswlib.Index(space="ip", dim=data.shape[1])
        other.load_index(str(path))
        return other

    return Built(search, lambda path: index.save_index(str(path)), open_)


def rss_anon_mb() -> float:
    """Anonymous resident memory of this process (index memory; mapped files are not counted)."""
    for line in Path("/proc/self/status").read_text(encoding="utf-8").splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def run_one(config: str, paths: dict[str, Path], threads: int, folder: Path) -> dict[str, Any]:
    """Build, save, reopen and search one configuration; the measurements."""
    data = np.load(paths["data"], mmap_mode="r")
    before = rss_anon_mb()
    started = time.perf_counter()
    built = build(config, data, threads)
    result: dict[str, Any] = {
        "config": config,
        "build_seconds": time.perf_counter() - started,
        "rss_anon_added_mb": rss_anon_mb() - before,
    }
    file = folder / f"{config}.index"
    started = time.perf_counter()
    built.save(file)
    result["save_seconds"] = time.perf_counter() - started
    result["file_mb"] = file.stat().st_size / 1e6
    before = rss_anon_mb()
    started = time.perf_counter()
    opened = built.open(file)
    result["open_seconds"] = time.perf_counter() - started
    result["open_rss_anon_added_mb"] = rss_anon_mb() - before
    del opened
    file.unlink()
    result["searches"] = [_searches(built, data, paths, count, ef) for count, ef in SEARCHES]
    return result


def _searches(built: Built, data: np.ndarray, paths: dict[str, Path], count: int, ef: int) -> dict[str, Any]:
    out: dict[str, Any] = {"count": count, "ef": ef}
    for name in ("near", "far"):
        queries, truth = np.load(paths[name]), np.load(paths[f"{name}-top"])
        timings, hits = [], 0
        for query, expected in zip(queries, truth, strict=True):
            started = time.perf_counter()
            ids = built.search(query, count, ef)
            timings.append((time.perf_counter() - started) * 1000)
            ids = np.asarray(ids, dtype=np.int64)
            ids = ids[ids >= 0]
            scores = np.asarray(data[np.sort(ids)]) @ query  # exact re-scoring of the candidates
            best = np.sort(ids)[np.lexsort((np.sort(ids), -scores))][:TOP]
            hits += len(set(best.tolist()) & set(expected.tolist()))
        out[name] = {"recall_at_10": hits / (TOP * len(queries)), "search_ms": summarize(timings)}
    return out


# -- driver --------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.ann_compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("--vectors", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--configs", default=",".join(CONFIGS), help=f"comma-separated, of {', '.join(CONFIGS)}")
    parser.add_argument("--threads", type=int, default=2, help="build workers")
    parser.add_argument("--seed", type=int, default=20261130)
    parser.add_argument(
        "--real",
        type=Path,
        default=None,
        metavar="CORPUS",
        help="instead of synthetic vectors: a BEIR corpus.jsonl's sentences embedded by MiniLM",
    )
    parser.add_argument(
        "--model-path",
        type=Path,
        default=Path(__file__).resolve().parents[1].parent / "shared" / "models" / "all-MiniLM-L6-v2-int8",
    )
    parser.add_argument("--workdir", type=Path, default=None, help="where the data files go (kept between runs)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    folder = args.workdir or Path(tempfile.gettempdir()) / "coffer-ann-compare"
    folder.mkdir(parents=True, exist_ok=True)
    if args.real:
        paths = make_real_data(folder, args.real, args.model_path)
        args.vectors, args.queries = len(np.load(paths["data"], mmap_mode="r")), len(np.load(paths["near"]))
    else:
        paths = make_data(folder, args.vectors, args.queries, args.seed)
    if args.one:
        print(json.dumps(run_one(args.one, paths, args.threads, folder)))
        return {}
    results = []
    for config in args.configs.split(","):
        log(f"{config}: {args.vectors:,} vectors")
        command = [
            sys.executable,
            "-m",
            "bench.ann_compare",
            "--one",
            config,
            "--vectors",
            str(args.vectors),
            "--queries",
            str(args.queries),
            "--threads",
            str(args.threads),
            "--seed",
            str(args.seed),
            "--workdir",
            str(folder),
            *(["--real", str(args.real)] if args.real else []),
        ]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            log(f"  failed: {done.stderr.strip().splitlines()[-1:] or done.returncode}")
            results.append({"config": config, "error": done.stderr.strip()[-500:]})
            continue
        results.append(json.loads(done.stdout))
        log("  " + _line(results[-1]))
    report = {
        "data": "SciFact sentences, MiniLM" if args.real else "synthetic",
        "command": " ".join(["python -m bench.ann_compare", *(sys.argv[1:] if argv is None else argv)]),
        "vectors": args.vectors,
        "queries": args.queries,
        "threads": args.threads,
        "machine": machine_info(None),
        "results": results,
    }
    out = args.out or Path(f"bench/results/ann-compare-{'scifact' if args.real else args.vectors}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(markdown(report))
    return report


def _line(result: dict[str, Any]) -> str:
    parts = [
        f"build {result['build_seconds']:.1f} s",
        f"{result['rss_anon_added_mb']:.0f} MB",
        f"file {result['file_mb']:.0f} MB",
    ]
    parts += [
        f"c{search['count']}/ef{search['ef']}: near {search['near']['recall_at_10']:.3f} "
        f"far {search['far']['recall_at_10']:.3f} {search['far']['search_ms']['p50']:.2f} ms"
        for search in result["searches"]
    ]
    return "; ".join(parts)


def markdown(report: dict[str, Any]) -> str:
    title = (
        f"{report['data']}: {report['vectors']:,} vectors of {DIMENSIONS} dimensions, {report['queries']} "
        f"queries per set, build with {report['threads']} threads; search one thread, recall@10 after exact "
        "re-scoring"
    )
    header = (
        "| library | build s | index RAM MB | file MB | open (mmap) s | candidates / ef | recall near | "
        "recall far | search P50 / P95 ms |"
    )
    lines = [title, "", header, "|---|---:|---:|---:|---:|---|---:|---:|---:|"]
    for result in report["results"]:
        if "error" in result:
            lines.append(f"| {result['config']} | failed | | | | | | | |")
            continue
        for i, search in enumerate(result["searches"]):
            head = (
                (
                    f"| {result['config']} | {result['build_seconds']:.1f} | {result['rss_anon_added_mb']:.0f} | "
                    f"{result['file_mb']:.0f} | {result['open_seconds']:.2f} |"
                )
                if i == 0
                else "| | | | | |"
            )
            ms = search["far"]["search_ms"]
            lines.append(
                f"{head} {search['count']} / {search['ef']} | {search['near']['recall_at_10']:.3f} | "
                f"{search['far']['recall_at_10']:.3f} | {ms['p50']:.2f} / {ms['p95']:.2f} |"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
