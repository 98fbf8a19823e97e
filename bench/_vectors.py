"""Synthetic chunk vectors for the hybrid measurement, and the embedders that query them.

Embedding 100k chunks with MiniLM on two cores takes hours, and the search side does not care
where stored vectors came from: so the current model's vec0 table is filled directly with
clustered, L2-normalized random vectors, and the documents are marked as embedded with that
model. Queries are then embedded for real (MiniLM), so a timed hybrid search pays the query
embedding, the KNN scan and the fusion exactly as it would on a really embedded corpus.
"""

from __future__ import annotations

import hashlib
import math
import re
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from coffer_mcp import Coffer
from coffer_mcp.embed import Embedder, EmbeddingConfig, make_embedder
from coffer_mcp.index.postgres import PostgresIndex
from coffer_mcp.index.postgres.vectors import create_hnsw, table_of

__all__ = [
    "DIMENSIONS",
    "MINILM",
    "FakeEmbedder",
    "fill_vectors",
    "held_out_vectors",
    "index_vectors",
    "minilm",
    "synthetic_vectors",
]

DIMENSIONS = 384
MINILM = "sentence-transformers/all-MiniLM-L6-v2"
BATCH = 2_000


class FakeEmbedder:
    """A deterministic 384-dimension word-hash embedder (for the smoke test: no model needed)."""

    identity = f"bench:word-hash-{DIMENSIONS}"

    def dimensions(self) -> int:
        return DIMENSIONS

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return [self._vector(text) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._vector(text)

    def _vector(self, text: str) -> list[float]:
        vector = [0.0] * DIMENSIONS
        for word in re.findall(r"\w+", text.lower()):
            vector[int.from_bytes(hashlib.blake2b(word.encode(), digest_size=4).digest(), "big") % DIMENSIONS] += 1.0
        norm = math.sqrt(sum(v * v for v in vector)) or 1.0
        return [v / norm for v in vector]


def minilm(model_path: Path) -> Embedder | None:
    """The real local MiniLM embedder (as ``coffer serve`` would make it), or None without the model."""
    if not (model_path / "model.onnx").exists() and not any(model_path.glob("*.onnx")):
        return None
    return make_embedder(EmbeddingConfig(provider="fastembed", model=MINILM, model_path=model_path))


def fill_vectors(coffer: Coffer, kb: str, identity: str, seed: int, *, unindexed: bool = False) -> int:
    """Give every chunk of ``kb`` a synthetic vector in ``identity``'s table; mark its documents embedded.

    Vectors are drawn around ``sqrt(chunks)`` random centroids (topics), then L2-normalized.
    ``unindexed`` (PostgreSQL): the table's HNSW index is dropped after the first batch, for
    ``index_vectors`` to build at the end. Returns the number of vectors stored.
    """
    index = coffer.index
    doc_ids = [row.id for row in index.documents(kb)]
    chunk_ids = sorted(chunk_id for doc_id in doc_ids for chunk_id, _ in index.chunk_texts(doc_id))
    for start, batch in synthetic_vectors(len(chunk_ids), seed):
        ids = chunk_ids[start : start + len(batch)]
        with index.transaction():
            index.store_vectors(identity, DIMENSIONS, kb, list(zip(ids, batch.tolist(), strict=True)))
            if unindexed and start == 0 and isinstance(index, PostgresIndex):
                index.conn.execute(f"DROP INDEX {_vector_table(index, identity)}_hnsw")
    with index.transaction():
        for doc_id in doc_ids:
            index.set_embedding(doc_id, pending=False, model=identity)
    index.settle()  # as an ingest or reindex that embedded them ends
    return len(chunk_ids)


def index_vectors(coffer: Coffer, identity: str, memory: str = "4GB") -> float | None:
    """Build the HNSW index ``fill_vectors(unindexed=True)`` left out, in one ``CREATE INDEX`` with
    ``memory`` of ``maintenance_work_mem`` (pgvector's way to load many vectors); its seconds.
    None on SQLite (its ANN graphs are built by ``build_ann``)."""
    index = coffer.index
    if not isinstance(index, PostgresIndex):
        return None
    started = time.perf_counter()
    with index.transaction():
        index.conn.execute("SELECT set_config('maintenance_work_mem', %s, true)", (memory,))
        create_hnsw(index.conn, _vector_table(index, identity))
    seconds = time.perf_counter() - started
    index.settle()
    return seconds


def _vector_table(index: PostgresIndex, identity: str) -> str:
    table = table_of(index.conn, identity)
    assert table is not None, identity
    return table


def synthetic_vectors(count: int, seed: int, batch: int = BATCH) -> Iterator[tuple[int, np.ndarray]]:
    """``(start, float32 rows)`` batches of ``count`` clustered unit vectors (``fill_vectors``'s data).

    Vectors are drawn around ``sqrt(count)`` random centroids (topics), then L2-normalized.
    """
    rng, centroids = _topics(count, seed)
    for start in range(0, count, batch):
        yield start, _draw(rng, centroids, min(batch, count - start))


def held_out_vectors(count: int, seed: int, n: int) -> np.ndarray:
    """``n`` more vectors of the distribution ``synthetic_vectors(count, seed)`` draws from (queries
    that look like the stored vectors, as a real model's queries look like its documents)."""
    _, centroids = _topics(count, seed)
    return _draw(np.random.default_rng([seed, 7_000_001]), centroids, n)


def _topics(count: int, seed: int) -> tuple[np.random.Generator, np.ndarray]:
    rng = np.random.default_rng([seed, 4_000_037])
    return rng, _unit(rng.standard_normal((max(8, int(math.sqrt(count))), DIMENSIONS)))


def _draw(rng: np.random.Generator, centroids: np.ndarray, size: int) -> np.ndarray:
    topics = centroids[rng.integers(len(centroids), size=size)]
    return _unit(topics + 0.8 * rng.standard_normal((size, DIMENSIONS)) / math.sqrt(DIMENSIONS)).astype(np.float32)


def _unit(matrix: np.ndarray) -> np.ndarray:
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
