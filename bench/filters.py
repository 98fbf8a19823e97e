"""What a document filter costs a keyword search: SciFact in one knowledge base, filtered and not.

Run from the repository root::

    python -m bench.filters --data ../shared/eval/scifact [--backend sqlite|postgres] [--queries 200]

The corpus is chunked as Coffer chunks it and written straight through the index port (no files:
this measures the queries). Every third document is tagged ``third`` and every hundredth ``rare``;
each query runs unfiltered, then with ``tags=["third"]`` and ``tags=["rare"]``, for top_k 10 and
100 (a hybrid search's keyword depth), P50 and P95 of one thread, after 20 warm-up queries.
PostgreSQL is a throwaway embedded server (``tests.postgres.embedded_server``).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

from coffer_mcp.index import DocumentFilter, DocumentRow, Index
from coffer_mcp.indexing.chunking import chunk_markdown
from coffer_mcp.retrieval.search import keyword_search

FILTERS = {"none": None, "third": DocumentFilter(tags=("third",)), "rare": DocumentFilter(tags=("rare",))}


def load(index: Index, corpus: Path) -> int:
    """Index every document of ``corpus`` (tagged as the module docstring says); the chunk count."""
    config = SimpleNamespace(
        description="", chunk_size=512, chunk_overlap=64, vector=False, created_at="t", updated_at="t"
    )
    with index.transaction():
        index.upsert_kb("bench", config, "stamp")
    docs = [json.loads(line) for line in corpus.open(encoding="utf-8")]
    chunks = 0
    for start in range(0, len(docs), 500):
        with index.transaction():
            for i, doc in enumerate(docs[start : start + 500], start):
                tags = tuple(tag for tag, every in (("third", 3), ("rare", 100)) if i % every == 0)
                row = DocumentRow(
                    id=f"d{doc['_id']}",
                    kb="bench",
                    title=doc["title"],
                    original_filename=f"{doc['_id']}.md",
                    original_format="md",
                    source_sha256="",
                    content_sha256="",
                    source_mode="converted",
                    source_path=None,
                    conversion_engine="",
                    converted_at=None,
                    created_at="2025-01-01T00:00:00.000Z",
                    updated_at="2025-01-01T00:00:00.000Z",
                    tags=tags,
                )
                index.upsert_document(row)
                chunks += index.replace_chunks("bench", row.id, chunk_markdown(doc["text"], 512, 64))
    return chunks


def measure(index: Index, queries: list[str]) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for name, where in FILTERS.items():
        for top_k in (10, 100):
            for query in queries[:20]:
                keyword_search(index, ["bench"], query, top_k, where)
            times = []
            for query in queries:
                started = time.perf_counter()
                keyword_search(index, ["bench"], query, top_k, where)
                times.append((time.perf_counter() - started) * 1000)
            times.sort()
            p50, p95 = times[len(times) // 2], times[int(len(times) * 0.95)]
            rows.append({"filter": name, "top_k": top_k, "p50_ms": round(p50, 1), "p95_ms": round(p95, 1)})
            print(f"filter={name:5} top_k={top_k:3}: p50 {p50:6.1f} ms  p95 {p95:6.1f} ms", flush=True)
    return rows


@contextmanager
def open_index(backend: str) -> Iterator[Index]:
    if backend == "sqlite":
        from coffer_mcp.index.sqlite import SqliteIndex

        with tempfile.TemporaryDirectory() as folder:
            local = SqliteIndex(Path(folder) / "coffer.db")
            yield local
            local.close()
        return
    from coffer_mcp.index.postgres import PostgresIndex
    from tests.postgres import embedded_server

    with embedded_server("coffer-bench-") as server:
        shared = PostgresIndex(server.get_uri())
        yield shared
        shared.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="a BEIR folder (corpus.jsonl, queries.jsonl)")
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    queries = [json.loads(line)["text"] for line in (args.data / "queries.jsonl").open(encoding="utf-8")]
    with open_index(args.backend) as index:
        print(f"{load(index, args.data / 'corpus.jsonl'):,} chunks ({args.backend})", flush=True)
        measure(index, queries[: args.queries])


if __name__ == "__main__":
    main()
