"""Chunk vectors in sqlite-vec, one ``vec0`` table per embedding model.

Each model identity (``fastembed:BAAI/bge-small-en-v1.5``, ``openai:text-embedding-3-small@256``)
gets its own table with its own fixed dimension, registered in ``embedding_models``, so vectors
of two models can never be compared or mixed. A document records the identity its vectors were
made with (``documents.embedding_model``); when the configured model changes, those documents
are simply due for embedding again, into the new model's table. Tables are keyed by chunk id and
partitioned by knowledge base, so a KNN query only visits the knowledge bases asked for.

Every write of a (model, KB) that has an ANN graph is logged in the same transaction
(``ann_rows.log_changes``), so every process's graph can catch up (``ann``). ``rescore`` scores
chosen chunks exactly, with the same expression as the scan. A document filter restricts the scan
itself (vec0 takes ``chunk_id IN (subquery)`` inside its KNN), so it returns ``limit`` rows
whenever that many chunks pass the filter.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from coffer_mcp.errors import counted
from coffer_mcp.index.port import DocumentFilter
from coffer_mcp.index.sqlite import ann_rows
from coffer_mcp.index.sqlite.db import Connection
from coffer_mcp.index.sqlite.filters import filtered_chunks, scope
from coffer_mcp.timeutil import utc_now

__all__ = [
    "count_vectors",
    "current_vectors",
    "delete_kb_vectors",
    "delete_vectors",
    "dimensions_of",
    "drop_orphans",
    "embedded_chunk_count",
    "knn",
    "model_id",
    "model_table",
    "orphans",
    "partition_batches",
    "partition_count",
    "pending_documents",
    "rescore",
    "serialize",
    "store_vectors",
    "stored_vectors",
    "table_by_id",
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


def table_by_id(conn: Connection, model_id: int) -> str | None:
    """The vec0 table of the model with this ``embedding_models`` id, or None if there is none."""
    row = conn.execute("SELECT id FROM embedding_models WHERE id = ?", (model_id,)).fetchone()
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


def model_id(table: str) -> int:
    """The ``embedding_models`` id of a vec0 table."""
    return int(table.removeprefix("vec_chunks_"))


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
            problems.append(f"{table}: {counted(found, 'vector')} without a chunk")
    return problems


def delete_vectors(conn: Connection, chunk_ids: Sequence[int], kb: str, *, keep: str | None = None) -> None:
    """Remove the vectors of these chunks of ``kb`` from every model's table (but ``keep``)."""
    if not chunk_ids:
        return
    logged = ann_rows.logged_models(conn, kb)
    for table in _tables(conn):
        if table == keep:
            continue
        conn.executemany(f"DELETE FROM {table} WHERE chunk_id = ?", [(cid,) for cid in chunk_ids])
        if model_id(table) in logged:
            ann_rows.log_changes(conn, model_id(table), kb, chunk_ids)


def delete_kb_vectors(conn: Connection, kb: str) -> None:
    for table in _tables(conn):
        ids = [row[0] for row in conn.execute(f"SELECT chunk_id FROM {table} WHERE kb = ?", (kb,))]
        conn.executemany(f"DELETE FROM {table} WHERE chunk_id = ?", [(cid,) for cid in ids])
    ann_rows.delete_kb(conn, kb)


def drop_orphans(conn: Connection) -> int:
    """Delete vectors whose chunk no longer exists, in every model's table."""
    dropped = 0
    for table in _tables(conn):
        doomed = conn.execute(
            f"SELECT v.chunk_id, v.kb FROM {table} v WHERE NOT EXISTS (SELECT 1 FROM chunks c WHERE c.id = v.chunk_id)"
        ).fetchall()
        conn.executemany(f"DELETE FROM {table} WHERE chunk_id = ?", [(row[0],) for row in doomed])
        for kb in {row[1] for row in doomed}:
            if model_id(table) in ann_rows.logged_models(conn, kb):
                ann_rows.log_changes(conn, model_id(table), kb, [row[0] for row in doomed if row[1] == kb])
        dropped += len(doomed)
    return dropped


def store_vectors(conn: Connection, table: str, kb: str, rows: Sequence[tuple[int, Sequence[float] | bytes]]) -> None:
    """Insert ``(chunk_id, vector)`` rows, a vector as floats or as a stored blob (vec0 has no
    upsert: stale rows are deleted first)."""
    conn.executemany(f"DELETE FROM {table} WHERE chunk_id = ?", [(cid,) for cid, _ in rows])
    conn.executemany(
        f"INSERT INTO {table} (chunk_id, kb, embedding) VALUES (?, ?, ?)",
        [(cid, kb, vector if isinstance(vector, bytes) else serialize(vector)) for cid, vector in rows],
    )
    if rows and model_id(table) in ann_rows.logged_models(conn, kb):
        ann_rows.log_changes(conn, model_id(table), kb, [cid for cid, _ in rows])


def knn(
    conn: Connection,
    table: str,
    query: Sequence[float],
    kbs: Sequence[str],
    where: DocumentFilter,
    limit: int,
) -> list[Any]:
    """The ``limit`` nearest chunks ``where`` lets through, with passage columns and ``score`` = 1 - cosine distance."""
    marks = ", ".join("?" * len(kbs))
    # vec0 answers k per partition; the outer query keeps the overall best.
    nearest = f"""
        SELECT chunk_id, distance FROM {table}
        WHERE embedding MATCH ? AND k = ? AND kb IN ({marks})"""
    params: list[Any] = [serialize(query), limit, *kbs]
    if where:  # inside the scan: vec0 skips every other chunk, and still finds ``limit``
        chunks, chunk_params = filtered_chunks(kbs, where)
        nearest += f" AND chunk_id IN ({chunks})"
        params.extend(chunk_params)
    sql = f"""
        SELECT c.id, c.document_id, c.kb, c.position, c.heading_path, c.text, d.title,
               c.source_location, d.original_filename, 1.0 - v.distance AS score, v.distance
        FROM ({nearest}) v JOIN chunks c ON c.id = v.chunk_id JOIN documents d ON d.id = c.document_id
        ORDER BY v.distance, c.document_id, c.position
        LIMIT ?"""
    return conn.execute(sql, [*params, limit]).fetchall()


_PASSAGE_COLUMNS = (
    "c.id, c.document_id, c.kb, c.position, c.heading_path, c.text, d.title, c.source_location, d.original_filename"
)


def rescore(
    conn: Connection,
    table: str,
    query: Sequence[float],
    candidates: Mapping[int, bytes | None],
    kbs: Sequence[str],
    limit: int,
    where: DocumentFilter | None = None,
) -> list[Any]:
    """The ``limit`` nearest of these chunks of ``kbs`` that ``where`` lets through, scored exactly as
    ``knn`` scores (ANN candidates, each with its stored vector when the graph holds it).

    Only live chunks come back: a candidate whose chunk was deleted since the graph was built
    does not join. (A vector removed or replaced since is not proposed with its old bytes: the
    change log takes it out of the graph's answers, ``ann.Partition.dead``.)
    """
    if not candidates:
        return []
    clause, params = scope(kbs, where or DocumentFilter())
    if where:  # only the candidates the filter lets through carry their vector into SQL
        candidates = {key: candidates[key] for key in _passing(conn, list(candidates), clause, params)}
    stored = {key: vector for key, vector in candidates.items() if vector is not None}
    # A quantized graph's candidates come without their vector: read from the vec0 table (hnsw.py).
    stored.update(stored_vectors(conn, table, [key for key, vector in candidates.items() if vector is None]))
    # Every candidate's distance from its vector alone, then the passages of the nearest only:
    # reading a chunk's row is the dear part at 1M chunks (~0.2 ms each, beyond the memory map).
    nearest = _distances(conn, query, stored)
    rows: list[Any] = []
    start = 0
    while len(rows) < limit and start < len(nearest):
        end = min(len(nearest), start + limit - len(rows))
        while end < len(nearest) and nearest[end][1] == nearest[end - 1][1]:
            end += 1  # equal distances are ordered by document and position: all of them in one look
        rows += _passages_at(conn, nearest[start:end], clause, params)  # fewer: deleted since
        start = end
    return rows[:limit]


def _distances(conn: Connection, query: Sequence[float], stored: Mapping[int, bytes]) -> list[tuple[int, float]]:
    """``(chunk_id, distance)`` of each stored vector, nearest first: vec_distance_cosine, the
    function vec0's scan applies (the same floats, the same order)."""
    if not stored:
        return []
    sql = f"""
        WITH v (chunk_id, embedding) AS (VALUES {", ".join("(?, ?)" for _ in stored)})
        SELECT chunk_id, vec_distance_cosine(embedding, ?) FROM v"""
    pairs = [item for pair in stored.items() for item in pair]
    # No distance (NULL) for bytes that are no vector: a graph file changed under its memory map.
    # Such a candidate is left out (the caller sees the graph answered short, and stops trusting it).
    found = [(row[0], row[1]) for row in conn.execute(sql, [*pairs, serialize(query)]) if row[1] is not None]
    return sorted(found, key=lambda pair: pair[1])


def _passages_at(
    conn: Connection, nearest: Sequence[tuple[int, float]], clause: str, params: Sequence[Any]
) -> list[Any]:
    """The passages of these ``(chunk_id, distance)`` that are live and pass ``clause``, as ``knn``
    returns them."""
    sql = f"""
        WITH v (chunk_id, distance) AS (VALUES {", ".join("(?, ?)" for _ in nearest)})
        SELECT {_PASSAGE_COLUMNS}, v.distance, 1.0 - v.distance AS score
        FROM v CROSS JOIN chunks c ON c.id = v.chunk_id JOIN documents d ON d.id = c.document_id
        WHERE {clause}
        ORDER BY v.distance, c.document_id, c.position"""
    return conn.execute(sql, [*(item for pair in nearest for item in pair), *params]).fetchall()


def _passing(conn: Connection, chunk_ids: list[int], clause: str, params: Sequence[Any]) -> list[int]:
    """Those of ``chunk_ids`` that are live and pass ``clause`` (a ``scope``)."""
    sql = f"""
        SELECT c.id FROM chunks c JOIN documents d ON d.id = c.document_id
        WHERE c.id IN ({", ".join("?" * len(chunk_ids))}) AND {clause}"""
    return [row[0] for row in conn.execute(sql, [*chunk_ids, *params])]


def current_vectors(conn: Connection, table: str, chunk_ids: Sequence[int]) -> dict[int, tuple[str, bytes]]:
    """``{chunk_id: (kb, float32 blob)}`` of those live chunks that have a vector in ``table``."""
    found: dict[int, tuple[str, bytes]] = {}
    for start in range(0, len(chunk_ids), 500):
        batch = chunk_ids[start : start + 500]
        rows = conn.execute(
            f"SELECT v.chunk_id, v.kb, v.embedding FROM chunks c JOIN {table} v ON v.chunk_id = c.id "
            f"WHERE c.id IN ({', '.join('?' * len(batch))})",
            list(batch),
        )
        found.update((row[0], (row[1], row[2])) for row in rows)
    return found


def partition_batches(conn: Connection, table: str, kb: str, size: int = 10_000) -> Iterator[list[tuple[int, bytes]]]:
    """Every ``(chunk_id, float32 blob)`` of ``kb`` in ``table`` (live chunks only), in batches."""
    batch: list[tuple[int, bytes]] = []
    cursor = conn.execute(
        f"SELECT v.chunk_id, v.embedding FROM {table} v WHERE v.kb = ? "
        "AND EXISTS (SELECT 1 FROM chunks c WHERE c.id = v.chunk_id)",
        (kb,),
    )
    for row in cursor:
        batch.append((row[0], row[1]))
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def embedded_chunk_count(conn: Connection, kb: str, identity: str) -> int:
    """How many chunks of ``kb`` belong to documents embedded with ``identity`` (each has a vector):
    ``partition_count`` without visiting the vectors (25 ms at 100k chunks, against ~400)."""
    return conn.execute(
        "SELECT count(*) FROM chunks c JOIN documents d ON d.id = c.document_id "
        "WHERE c.kb = ? AND d.embedding_model = ? AND d.embed_pending = 0",
        (kb, identity),
    ).fetchone()[0]


def partition_count(conn: Connection, table: str, kb: str) -> int:
    """How many live chunks of ``kb`` have a vector in ``table`` (a point lookup per chunk)."""
    return conn.execute(
        f"SELECT count(*) FROM chunks c JOIN {table} v ON v.chunk_id = c.id WHERE c.kb = ?", (kb,)
    ).fetchone()[0]


def pending_documents(conn: Connection, kb: str, identity: str, *, limit: int = -1) -> list[str]:
    """Documents of ``kb`` whose vectors are missing, failed, or from another model."""
    rows = conn.execute(
        "SELECT id FROM documents WHERE kb = ? AND (embed_pending = 1 OR embedding_model IS NOT ?) ORDER BY id LIMIT ?",
        (kb, identity, limit),
    )
    return [row[0] for row in rows]
