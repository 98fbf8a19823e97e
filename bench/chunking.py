"""Chunk size, overlap and per-document ranking, swept on BEIR-format data (issue #17, item 6).

Run from the repository root::

    python -m bench.chunking --data ../shared/eval/scifact --split train \\
        --config 512:64 --config 1024:128 --cache ../scratch/chunking

For each ``chunk_size:chunk_overlap`` the corpus is ingested once into a fresh knowledge base
(with vectors when ``COFFER_EMBEDDING_*`` configures an embedder), and every judged query's
keyword passages (and vector passages) are fetched through ``Coffer.search``, 1,000 deep, and
kept in ``--cache`` (ingesting with MiniLM takes ~13 minutes per configuration here; the
analysis takes seconds). Then the passages are turned into ranked documents in several ways and
scored with nDCG@10 against the bm25s baseline of ``bench.quality``:

- ``max``: a document ranks by its best passage (what ``bench.quality`` measures);
- ``max+B*rest``: its best passage's score plus ``B`` times the sum of its other passages' scores
  (document-level evidence from the hits folded into the best one);
- hybrid: passages fused as the service fuses them (min-max-normalized, ``(1 - a) * keyword +
  a * vector``) at the depth the service fuses for ``top_k`` 10 (100 passages) and at 1,000,
  then aggregated the same ways.

It also counts how many distinct documents the first ten passages come from.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import bm25s
import Stemmer

from bench.quality import (
    BASELINE,
    KB,
    PASSAGE_DEPTH,
    Dataset,
    bm25_system,
    coffer_index,
    evaluate,
    is_mostly_cjk,
    load_dataset,
    ndcg_at_k,
    recall_at_k,
)
from coffer_mcp.retrieval.search import VECTOR_WEIGHT

Hit = tuple[str, int, float]
"""(corpus id, passage position, score) — higher scores first."""
Ranked = dict[str, dict[str, list[Hit]]]
"""query id -> {"keyword": hits, "vector": hits}."""

SERVICE_FUSION_DEPTH = 100  # what the service fuses for top_k 10 (retrieval.MIN_FUSION_DEPTH)
BETAS = (0.05, 0.1, 0.2, 0.3, 0.5)
GAMMAS = (0.2, 0.3, 0.5)


# -- capture -------------------------------------------------------------------------------------


def capture(dataset: Dataset, chunk_size: int, overlap: int, vector: bool) -> dict[str, Any]:
    """Ingest the corpus with one chunking; every query's passages by keyword (and vector)."""
    with coffer_index(dataset.corpus, chunk_size, vector, chunk_overlap=overlap) as (coffer, ids, seconds):
        kb = coffer.describe_kb(KB)
        strategies = ["keyword", "vector"] if vector else ["keyword"]
        ranked: Ranked = {}
        for n, (qid, text) in enumerate(dataset.queries.items(), 1):
            ranked[qid] = {
                strategy: [
                    (ids[p.document_id], p.position, p.score)
                    for p in coffer.search(
                        KB,
                        text,
                        PASSAGE_DEPTH,
                        strategy=strategy,
                        rerank=False,
                        per_document=False,  # type: ignore[arg-type]
                    ).passages
                ]
                for strategy in strategies
            }
            if n % 200 == 0:
                _log(f"  {n}/{len(dataset.queries)} queries")
        return {
            "chunk_size": chunk_size,
            "chunk_overlap": overlap,
            "chunks": kb.chunk_count,
            "ingest_seconds": seconds,
            "ranked": ranked,
        }


def captured(dataset: Dataset, chunk_size: int, overlap: int, vector: bool, cache: Path) -> dict[str, Any]:
    """``capture``'s result, from ``cache`` when an earlier run kept it."""
    name = f"{dataset.name}-{dataset.split}-{chunk_size}-{overlap}-{'vector' if vector else 'keyword'}.json.gz"
    path = cache / name
    if path.exists():
        return json.loads(gzip.decompress(path.read_bytes()))
    _log(f"{dataset.name} chunk {chunk_size}/{overlap}: ingesting {len(dataset.corpus)} documents")
    data = capture(dataset, chunk_size, overlap, vector)
    cache.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(json.dumps(data).encode()))
    return data


# -- from passages to documents (pure) -----------------------------------------------------------


def fuse(keyword: Sequence[Hit], vector: Sequence[Hit], alpha: float = VECTOR_WEIGHT) -> list[Hit]:
    """The service's convex fusion (``retrieval.search.fuse_convex``) over hits."""
    combined: dict[tuple[str, int], float] = {}
    for weight, hits in ((1 - alpha, keyword), (alpha, vector)):
        if not hits:
            continue
        low, high = min(h[2] for h in hits), max(h[2] for h in hits)
        for doc, position, score in hits:
            norm = (score - low) / (high - low) if high > low else 1.0
            combined[(doc, position)] = combined.get((doc, position), 0.0) + weight * norm
    best = sorted(combined, key=lambda key: (-combined[key], key))
    return [(doc, position, combined[(doc, position)]) for doc, position in best]


def by_best(hits: Sequence[Hit]) -> list[str]:
    """Documents in the order of their best passage."""
    return list(dict.fromkeys(doc for doc, _, _ in hits))


def with_rest(beta: float) -> Callable[[Sequence[Hit]], list[str]]:
    """Documents by best passage score + ``beta`` x the sum of their other passages' scores."""

    def rank(hits: Sequence[Hit]) -> list[str]:
        best: dict[str, float] = {}
        rest: dict[str, float] = {}
        for doc, _, score in hits:  # best first: a document's first hit is its best
            if doc in best:
                rest[doc] = rest.get(doc, 0.0) + score
            else:
                best[doc] = score
        total = {doc: score + beta * rest.get(doc, 0.0) for doc, score in best.items()}
        return sorted(total, key=lambda doc: -total[doc])

    return rank


def with_second(beta: float) -> Callable[[Sequence[Hit]], list[str]]:
    """Documents by best passage score + ``beta`` x their second best passage's score."""

    def rank(hits: Sequence[Hit]) -> list[str]:
        scores: dict[str, list[float]] = {}
        for doc, _, score in hits:
            scores.setdefault(doc, []).append(score)
        total = {doc: s[0] + beta * (s[1] if len(s) > 1 else 0.0) for doc, s in scores.items()}
        return sorted(total, key=lambda doc: -total[doc])

    return rank


AGGREGATIONS: dict[str, Callable[[Sequence[Hit]], list[str]]] = {
    "max": by_best,
    **{f"max+{beta:g}*rest": with_rest(beta) for beta in BETAS},
    **{f"max+{beta:g}*second": with_second(beta) for beta in BETAS},
}


def with_document(documents: dict[str, float], gamma: float) -> Callable[[Sequence[Hit]], list[str]]:
    """Documents by ``(1 - gamma)`` x their best passage + ``gamma`` x a document-level BM25, each min-max normalized.

    ``documents`` is one query's whole-document BM25 scores (bm25s: what a document-level index
    would add), for the documents it ranks first.
    """

    def rank(hits: Sequence[Hit]) -> list[str]:
        best: dict[str, float] = {}
        for doc, _, value in hits:
            best.setdefault(doc, value)
        total: dict[str, float] = {}
        for weight, scores in ((1 - gamma, best), (gamma, documents)):
            if not scores:
                continue
            low, high = min(scores.values()), max(scores.values())
            for doc, value in scores.items():
                total[doc] = total.get(doc, 0.0) + weight * ((value - low) / (high - low) if high > low else 1.0)
        return sorted(total, key=lambda doc: -total[doc])

    return rank


def document_bm25(dataset: Dataset, depth: int = 100) -> dict[str, dict[str, float]]:
    """Every query's bm25s scores over whole documents (``title + text``, English analysis), ``depth`` deep."""
    tokenizer = bm25s.tokenization.Tokenizer(stopwords="en", stemmer=Stemmer.Stemmer("english"))
    retriever = bm25s.BM25()
    texts = [f"{doc.title} {doc.text}" for doc in dataset.corpus]
    retriever.index(tokenizer.tokenize(texts, return_as="tuple", show_progress=False), show_progress=False)
    scores = {}
    for qid, text in dataset.queries.items():
        tokens = tokenizer.tokenize([text], update_vocab=False, return_as="ids", show_progress=False)
        hits, values = retriever.retrieve(tokens, k=min(depth, len(texts)), show_progress=False, n_threads=1)
        scores[qid] = {dataset.corpus[i].id: float(v) for i, v in zip(hits[0], values[0], strict=True)}
    return scores


def distinct_in_first(hits: Sequence[Hit], n: int = 10) -> int:
    return len({doc for doc, _, _ in hits[:n]})


# -- evaluation ----------------------------------------------------------------------------------


def score(dataset: Dataset, ranked: dict[str, list[str]]) -> dict[str, float]:
    ndcg = [ndcg_at_k(ranked[qid], dataset.qrels[qid], 10) for qid in dataset.queries]
    recall = [recall_at_k(ranked[qid], dataset.qrels[qid], 100) for qid in dataset.queries]
    return {"ndcg@10": statistics.fmean(ndcg), "recall@100": statistics.fmean(recall)}


def analyse(
    dataset: Dataset,
    data: dict[str, Any],
    alphas: Sequence[float],
    documents: dict[str, dict[str, float]] | None = None,
) -> list[dict[str, Any]]:
    """Every (strategy, depth, aggregation) over one capture, with nDCG@10 and Recall@100."""
    ranked: Ranked = data["ranked"]
    lists: dict[str, dict[str, list[Hit]]] = {}
    for depth in (SERVICE_FUSION_DEPTH, PASSAGE_DEPTH):
        lists[f"keyword@{depth}"] = {qid: r["keyword"][:depth] for qid, r in ranked.items()}
        if "vector" in next(iter(ranked.values()), {}):
            lists[f"vector@{depth}"] = {qid: r["vector"][:depth] for qid, r in ranked.items()}
            for alpha in alphas:
                lists[f"hybrid(a={alpha:g})@{depth}"] = {
                    qid: fuse(r["keyword"][:depth], r["vector"][:depth], alpha) for qid, r in ranked.items()
                }
    rows = []
    for name, hits in lists.items():
        distinct = statistics.fmean(distinct_in_first(h) for h in hits.values())
        aggregations = {name: (lambda qid, h, rank=rank: rank(h)) for name, rank in AGGREGATIONS.items()}
        for gamma in GAMMAS if documents else ():
            aggregations[f"max+doc-bm25({gamma:g})"] = lambda qid, h, g=gamma: with_document(documents[qid], g)(h)
        for aggregation, rank in aggregations.items():
            metrics = score(dataset, {qid: rank(qid, h) for qid, h in hits.items()})
            rows.append(
                {
                    "chunk_size": data["chunk_size"],
                    "chunk_overlap": data["chunk_overlap"],
                    "chunks": data["chunks"],
                    "passages": name,
                    "aggregation": aggregation,
                    "distinct_documents_in_first_10_passages": distinct,
                    **metrics,
                }
            )
    return rows


def parse_config(text: str) -> tuple[int, int]:
    size, _, overlap = text.partition(":")
    return int(size), int(overlap or 0)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.chunking", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="a BEIR-format folder")
    parser.add_argument("--split", default="test", help="qrels/<split>.tsv to evaluate (default: test)")
    parser.add_argument("--config", action="append", required=True, help="chunk_size:chunk_overlap (repeatable)")
    parser.add_argument("--cache", type=Path, required=True, help="folder keeping each configuration's passages")
    parser.add_argument("--alpha", action="append", type=float, default=None, help="hybrid vector weights to try")
    parser.add_argument("--out", type=Path, default=None, help="JSON output")
    parser.add_argument(
        "--document-bm25",
        action="store_true",
        help="also rank with whole-document BM25 (bm25s, English) as document-level evidence",
    )
    args = parser.parse_args(argv)
    dataset = load_dataset(args.data, args.split)
    vector = os.environ.get("COFFER_EMBEDDING_PROVIDER", "none") not in ("", "none")
    alphas = args.alpha or [VECTOR_WEIGHT]
    documents = document_bm25(dataset) if args.document_bm25 else None
    rows = []
    for config in args.config:
        size, overlap = parse_config(config)
        rows.extend(analyse(dataset, captured(dataset, size, overlap, vector, args.cache), alphas, documents))
    cjk = is_mostly_cjk(f"{doc.title} {doc.text}" for doc in dataset.corpus)
    baseline = evaluate(bm25_system(dataset.corpus, cjk), dataset).metrics["ndcg@10"]
    for row in rows:
        row["ratio_to_bm25s"] = row["ndcg@10"] / baseline
    print(f"{dataset.name} ({dataset.split}): {BASELINE} nDCG@10 {baseline:.4f}\n")
    print("| chunk | passages | aggregation | distinct docs in 10 passages | nDCG@10 | / bm25s | R@100 |")
    print("|---|---|---|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row['chunk_size']}/{row['chunk_overlap']} ({row['chunks']:,}) | {row['passages']} "
            f"| {row['aggregation']} | {row['distinct_documents_in_first_10_passages']:.1f} "
            f"| {row['ndcg@10']:.4f} | {row['ratio_to_bm25s']:.3f} | {row['recall@100']:.4f} |"
        )
    command = " ".join(["python -m bench.chunking", *(sys.argv[1:] if argv is None else argv)])
    data = {"dataset": dataset.name, "split": dataset.split, "command": command, "bm25s_ndcg@10": baseline}
    data["rows"] = rows
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return data


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
