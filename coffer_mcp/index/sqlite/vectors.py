"""Chunk vectors in sqlite-vec, one ``vec0`` table per embedding model.

Each model identity (``fastembed:BAAI/bge-small-en-v1.5``, ``openai:text-embedding-3-small@256``)
gets its own table with its own fixed dimension, registered in ``embedding_models``, so vectors
of two models can never be compared or mixed. A document records the identity its vectors were
made with (``documents.embedding_model``); when the configured model changes, those documents
are simply due for embedding again, into the new model's table. Tables are keyed by chunk id and
partitioned by knowledge base, so a KNN query only visits the knowledge bases asked for.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from coffer_mcp.index.sqlite.db import Connection
from coffer_mcp.timeutil import utc_now

__all__ = [
    "count_vectors",
    "delete_kb_vectors",
    "delete_vectors",
    "dimensions_of",
    "drop_orphans",
    "knn",
    "model_table",
    "orphans",
    "pending_documents",
    "serialize",
    "store_vectors",
    "stored_vectors",
    "table_of",
]


def serialize(vector: Sequence[float]) -> bytes:
    """A vector as sqlite-vec's float32 blob."""
    return struct.pack(f"{len(vector)}f", *vector)


def model_table(conn: Connection, identity: str, dimensions: int, *, create: bool = True) -> str | None:
    """The vec0 table holding ``identity``'s vectors (created on first use), or None.

    Raises:
        ValueError: the identity is registered with another dimension (a misconfigured model).
    """
    row = conn.execute("SELECT id, dimensions FROM embedding_models WHERE identity = ?", (identity,)).fetchone()
    if row is not None:
        if row["dimensions"] != dimensions:
            raise ValueError(f"{identity} has {row['dimensions']} dimensions in the index, not {dimensions}")
        return _table(row["id"])
    if not create:
        return None
    cursor = conn.execute(
        "INSERT INTO embedding_models (identity, dimensions, created_at) VALUES (?, ?, ?)",
        (identity, dimensions, utc_now()),
    )
    table = _table(cursor.lastrowid)
    conn.execute(
        f"CREATE VIRTUAL TABLE {table} USING vec0("
        f"chunk_id INTEGER PRIMARY KEY, kb TEXT PARTITION KEY, embedding float[{int(dimensions)}] "
        "distance_metric=cosine)"
    )
    return table


def table_of(conn: Connection, identity: str) -> str | None:
    """The vec0 table of ``identity``'s vectors, or None if it has none."""
    row = conn.execute("SELECT id FROM embedding_models WHERE identity = ?", (identity,)).fetchone()
    return None if row is None else _table(row[0])


def stored_vectors(conn: Connection, table: str, chunk_ids: Sequence[int]) -> dict[int, bytes]:
    """``{chunk_id: float32 blob}`` of those chunks that have a vector in ``table``."""
    found = {}
    for chunk_id in chunk_ids:  # point lookups by vec0's primary key
        row = conn.execute(f"SELECT embedding FROM {table} WHERE chunk_id = ?", (chunk_id,)).fetchone()
        if row is not None:
            found[chunk_id] = row[0]
    return found


def _table(model_id: int) -> str:
    return f"vec_chunks_{int(model_id)}"


def _tables(conn: Connection) -> list[str]:
    return [_table(row[0]) for row in conn.execute("SELECT id FROM embedding_models")]


def dimensions_of(conn: Connection, identity: str) -> int | None:
    row = conn.execute("SELECT dimensions FROM embedding_models WHERE identity = ?", (identity,)).fetchone()
    return None if row is None else row[0]


def count_vectors(conn: Connection, identity: str, chunk_ids: Sequence[int]) -> int | None:
    """How many of these chunks have a vector of ``identity`` (None: the model has no table)."""
    table = table_of(conn, identity)
    if table is None:
        return None
    marks = ", ".join("?" * len(chunk_ids))
    return conn.execute(f"SELECT count(*) FROM {table} WHERE chunk_id IN ({marks})", list(chunk_ids)).fetchone()[0]


def orphans(conn: Connection) -> list[str]:
    """Vectors whose chunk no longer exists, in any model's table."""
    problems = []
    for table in _tables(conn):
        found = conn.execute(
            f"SELECT count(*) FROM {table} v WHERE NOT EXISTS (SELECT 1 FROM chunks c WHERE c.id = v.chunk_id)"
        ).fetchone()[0]
        if found:
            problems.append(f"{table}: {found} vectors without a chunk")
    return problems


def delete_vectors(conn: Connection, chunk_ids: Sequence[int]) -> None:
    """Remove the vectors of these chunks from every model's table."""
    if not chunk_ids:
        return
    for table in _tables(conn):
        conn.executemany(f"DELETE FROM {table} WHERE chunk_id = ?", [(cid,) for cid in chunk_ids])


def delete_kb_vectors(conn: Connection, kb: str) -> None:
    for table in _tables(conn):
        ids = [row[0] for row in conn.execute(f"SELECT chunk_id FROM {table} WHERE kb = ?", (kb,))]
        conn.executemany(f"DELETE FROM {table} WHERE chunk_id = ?", [(cid,) for cid in ids])


def drop_orphans(conn: Connection) -> int:
    """Delete vectors whose chunk no longer exists, in every model's table."""
    dropped = 0
    for table in _tables(conn):
        cursor = conn.execute(
            f"DELETE FROM {table} WHERE chunk_id IN (SELECT v.chunk_id FROM {table} v "
            "WHERE NOT EXISTS (SELECT 1 FROM chunks c WHERE c.id = v.chunk_id))"
        )
        dropped += max(cursor.rowcount, 0)
    return dropped


def store_vectors(conn: Connection, table: str, kb: str, rows: Sequence[tuple[int, Sequence[float] | bytes]]) -> None:
    """Insert ``(chunk_id, vector)`` rows, a vector as floats or as a stored blob (vec0 has no
    upsert: stale rows are deleted first)."""
    conn.executemany(f"DELETE FROM {table} WHERE chunk_id = ?", [(cid,) for cid, _ in rows])
    conn.executemany(
        f"INSERT INTO {table} (chunk_id, kb, embedding) VALUES (?, ?, ?)",
        [(cid, kb, vector if isinstance(vector, bytes) else serialize(vector)) for cid, vector in rows],
    )


def knn(
    conn: Connection,
    table: str,
    query: Sequence[float],
    kbs: Sequence[str],
    doc_ids: Sequence[str] | None,
    limit: int,
) -> list[Any]:
    """The ``limit`` nearest chunks, with passage columns and ``score`` = 1 - cosine distance."""
    marks = ", ".join("?" * len(kbs))
    # vec0 answers k per partition; the outer query keeps the overall best.
    nearest = f"""
        SELECT chunk_id, distance FROM {table}
        WHERE embedding MATCH ? AND k = ? AND kb IN ({marks})"""
    params: list[Any] = [serialize(query), limit, *kbs]
    scope = ""
    if doc_ids:
        scope = f"AND c.document_id IN ({', '.join('?' * len(doc_ids))})"
        params.extend(doc_ids)
    sql = f"""
        SELECT c.id, c.document_id, c.kb, c.position, c.heading_path, c.text, d.title,
               1.0 - v.distance AS score
        FROM ({nearest}) v JOIN chunks c ON c.id = v.chunk_id JOIN documents d ON d.id = c.document_id
        WHERE 1 {scope}
        ORDER BY v.distance, c.document_id, c.position
        LIMIT ?"""
    return conn.execute(sql, [*params, limit]).fetchall()


def pending_documents(conn: Connection, kb: str, identity: str, *, limit: int = -1) -> list[str]:
    """Documents of ``kb`` whose vectors are missing, failed, or from another model."""
    rows = conn.execute(
        "SELECT id FROM documents WHERE kb = ? AND (embed_pending = 1 OR embedding_model IS NOT ?) ORDER BY id LIMIT ?",
        (kb, identity, limit),
    )
    return [row[0] for row in rows]
