"""Chunk vectors in pgvector, one table per embedding model.

As on SQLite (``index.sqlite.vectors``), each model identity gets its own table with its own fixed
dimension, registered in ``embedding_models``, so vectors of two models are never compared.
A table has an HNSW index (cosine) when the dimension allows one (pgvector indexes up to 2,000;
beyond, KNN is an exact scan). A knowledge-base filter would starve a plain HNSW scan (it stops
after ``ef_search`` candidates, most from other knowledge bases), so KNN runs with pgvector 0.8's
iterative scan, which keeps walking the graph until ``limit`` rows pass the filter. That walk is
bounded (``hnsw.max_scan_tuples``): when a narrow document filter leaves it short, the exact scan of
the filtered chunks answers instead, so ``limit`` rows come back whenever that many pass.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from coffer_mcp.errors import counted
from coffer_mcp.index.port import DocumentFilter
from coffer_mcp.index.postgres.connection import Connection
from coffer_mcp.index.postgres.filters import filtered_chunks
from coffer_mcp.timeutil import utc_now

__all__ = [
    "count_vectors",
    "delete_chunk_vectors",
    "delete_kb_vectors",
    "dimensions_of",
    "drop_orphans",
    "knn",
    "model_table",
    "orphans",
    "store_vectors",
    "stored_vectors",
    "table_of",
]

HNSW_MAX_DIMENSIONS = 2000
_EF_SEARCH_MAX = 1000


def model_table(conn: Connection, identity: str, dimensions: int, *, create: bool = True) -> str | None:
    """The table holding ``identity``'s vectors (created on first use), or None.

    Raises:
        ValueError: the identity is registered with another dimension (a misconfigured model).
    """
    row = _model(conn, identity)
    if row is None and create:
        with conn.transaction():  # the model's row and its table appear together
            made = conn.execute(
                "INSERT INTO embedding_models (identity, dimensions, created_at) VALUES (%s, %s, %s) "
                "ON CONFLICT (identity) DO NOTHING RETURNING id, dimensions",
                (identity, dimensions, utc_now()),
            ).fetchone()
            if made is not None:
                _create_table(conn, made["id"], dimensions)
        row = made or _model(conn, identity)  # or another process made it meanwhile
    if row is None:
        return None
    if row["dimensions"] != dimensions:
        raise ValueError(f"{identity} has {row['dimensions']} dimensions in the index, not {dimensions}")
    return _table(row["id"])


def _create_table(conn: Connection, model_id: int, dimensions: int) -> None:
    table = _table(model_id)
    conn.execute(
        f'CREATE TABLE {table} (chunk_id bigint PRIMARY KEY, kb text COLLATE "C" NOT NULL, '
        f"embedding vector({int(dimensions)}) NOT NULL)"
    )
    conn.execute(f"CREATE INDEX {table}_by_kb ON {table} (kb)")
    if dimensions <= HNSW_MAX_DIMENSIONS:
        create_hnsw(conn, table)


def create_hnsw(conn: Connection, table: str) -> None:
    """The vector table's HNSW index (cosine), as a new table gets it."""
    conn.execute(f"CREATE INDEX {table}_hnsw ON {table} USING hnsw (embedding vector_cosine_ops)")


def _model(conn: Connection, identity: str) -> dict[str, Any] | None:
    return conn.execute("SELECT id, dimensions FROM embedding_models WHERE identity = %s", (identity,)).fetchone()


def _table(model_id: int) -> str:
    return f"vec_chunks_{int(model_id)}"


def _tables(conn: Connection) -> list[str]:
    return [_table(row["id"]) for row in conn.execute("SELECT id FROM embedding_models ORDER BY id")]


def table_of(conn: Connection, identity: str) -> str | None:
    row = _model(conn, identity)
    return None if row is None else _table(row["id"])


def dimensions_of(conn: Connection, identity: str) -> int | None:
    row = _model(conn, identity)
    return None if row is None else int(row["dimensions"])


def store_vectors(
    conn: Connection, table: str, dimensions: int, kb: str, rows: Sequence[tuple[int, Sequence[float] | bytes]]
) -> None:
    """Insert ``(chunk_id, vector)`` rows, a vector as floats or packed float32, replacing any."""
    values = []
    for chunk_id, vector in rows:
        floats = struct.unpack(f"{len(vector) // 4}f", vector) if isinstance(vector, bytes) else vector
        if len(floats) != dimensions:
            raise ValueError(f"a vector of {len(floats)} dimensions for a model of {dimensions}")
        values.append((chunk_id, kb, list(map(float, floats))))
    with conn.cursor() as cursor:
        cursor.executemany(
            f"INSERT INTO {table} (chunk_id, kb, embedding) VALUES (%s, %s, %s::float8[]::vector) "
            "ON CONFLICT (chunk_id) DO UPDATE SET kb = excluded.kb, embedding = excluded.embedding",
            values,
        )


def stored_vectors(conn: Connection, table: str, chunk_ids: Sequence[int]) -> dict[int, bytes]:
    """``{chunk_id: packed float32}`` of those chunks that have a vector in ``table``."""
    rows = conn.execute(
        f"SELECT chunk_id, embedding::real[] AS floats FROM {table} WHERE chunk_id = ANY(%s::bigint[])",
        (list(chunk_ids),),
    )
    return {row["chunk_id"]: struct.pack(f"{len(row['floats'])}f", *row["floats"]) for row in rows}


def count_vectors(conn: Connection, identity: str, chunk_ids: Sequence[int]) -> int | None:
    """How many of these chunks have a vector of ``identity`` (None: the model has no table)."""
    table = table_of(conn, identity)
    if table is None:
        return None
    row = conn.execute(f"SELECT count(*) AS n FROM {table} WHERE chunk_id = ANY(%s::bigint[])", (list(chunk_ids),))
    found = row.fetchone()
    return 0 if found is None else int(found["n"])


def kb_vector_counts(conn: Connection, kb: str) -> dict[str, tuple[int, int]]:
    """``{model identity: (vectors of kb, dimensions)}`` of the models that have vectors of ``kb``."""
    out: dict[str, tuple[int, int]] = {}
    for model in conn.execute("SELECT id, identity, dimensions FROM embedding_models ORDER BY id").fetchall():
        row = conn.execute(f"SELECT count(*) AS n FROM {_table(model['id'])} WHERE kb = %s", (kb,)).fetchone()
        if row is not None and row["n"]:
            out[model["identity"]] = (int(row["n"]), int(model["dimensions"]))
    return out


def delete_chunk_vectors(conn: Connection, chunk_ids: Sequence[int]) -> None:
    """Remove these chunks' vectors from every model's table."""
    for table in _tables(conn):
        conn.execute(f"DELETE FROM {table} WHERE chunk_id = ANY(%s::bigint[])", (list(chunk_ids),))


def delete_kb_vectors(conn: Connection, kb: str) -> None:
    for table in _tables(conn):
        conn.execute(f"DELETE FROM {table} WHERE kb = %s", (kb,))


def orphans(conn: Connection) -> list[str]:
    """Vectors whose chunk no longer exists, in any model's table."""
    problems = []
    for table in _tables(conn):
        row = conn.execute(
            f"SELECT count(*) AS n FROM {table} v WHERE NOT EXISTS (SELECT 1 FROM chunks c WHERE c.id = v.chunk_id)"
        ).fetchone()
        if row and row["n"]:
            problems.append(f"{table}: {counted(row['n'], 'vector')} without a chunk")
    return problems


def drop_orphans(conn: Connection) -> int:
    dropped = 0
    for table in _tables(conn):
        cursor = conn.execute(
            f"DELETE FROM {table} v WHERE NOT EXISTS (SELECT 1 FROM chunks c WHERE c.id = v.chunk_id)"
        )
        dropped += max(cursor.rowcount, 0)
    return dropped


def knn(
    conn: Connection,
    table: str,
    query: Sequence[float],
    kbs: Sequence[str],
    where: DocumentFilter,
    limit: int,
    *,
    iterative: bool,
) -> list[dict[str, Any]]:
    """The ``limit`` nearest chunks in scope, with passage columns and ``score`` = 1 - cosine distance."""
    if limit <= 0:
        return []
    scope = "kb = ANY(%(kbs)s::text[])"
    params: dict[str, Any] = {"query": list(map(float, query)), "kbs": list(kbs), "limit": limit}
    if where:
        chunks, chunk_params = filtered_chunks(kbs, where)
        scope += f" AND chunk_id IN ({chunks})"
        params.update(chunk_params)
    with conn.transaction():  # SET LOCAL lasts until its end
        conn.execute("SELECT set_config('hnsw.ef_search', %s, true)", (str(min(max(limit, 40), _EF_SEARCH_MAX)),))
        if iterative:
            conn.execute("SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true)")
        rows = conn.execute(_knn_sql(table, scope, exact=False), params).fetchall()
        if len(rows) < limit and where:  # the graph's walk ended first: scan the filtered chunks
            rows = conn.execute(_knn_sql(table, scope, exact=True), params).fetchall()
        return rows


def _knn_sql(table: str, scope: str, *, exact: bool) -> str:
    """The KNN statement; ``exact`` keeps the HNSW index out (``OFFSET 0`` fences the ordering off it)."""
    distance = "embedding <=> %(query)s::float8[]::vector"
    nearest = (
        f"SELECT chunk_id, distance FROM (SELECT chunk_id, {distance} AS distance FROM {table} WHERE {scope} "
        "OFFSET 0) AS scanned ORDER BY distance LIMIT %(limit)s"
        if exact
        else f"SELECT chunk_id, {distance} AS distance FROM {table} WHERE {scope} ORDER BY {distance} LIMIT %(limit)s"
    )
    return f"""
        SELECT c.id, c.document_id, c.kb, c.position, c.heading_path, c.text, d.title,
               c.source_location, d.original_filename, 1.0::float8 - v.distance AS score
        FROM ({nearest}) v
        JOIN chunks c ON c.id = v.chunk_id JOIN documents d ON d.id = c.document_id
        ORDER BY v.distance, c.document_id, c.position"""
