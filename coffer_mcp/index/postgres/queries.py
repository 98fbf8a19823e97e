"""The SQL of the PostgreSQL index for knowledge bases, documents, chunks and history.

Chunks are written and deleted with their postings by ``postings``; vectors are in ``vectors``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from psycopg.rows import tuple_row

from coffer_mcp.index.port import DocumentFilter
from coffer_mcp.index.postgres import postings, vectors
from coffer_mcp.index.postgres.connection import Connection, clean, lower_sql
from coffer_mcp.index.postgres.filters import document_condition
from coffer_mcp.models import Chunk, tag_key
from coffer_mcp.timeutil import time_key, utc_now

__all__ = [
    "DOC_COLUMNS",
    "EMBEDDING_COLUMNS",
    "audit_entry",
    "chunk_count",
    "chunk_texts",
    "chunk_window",
    "clear_kb_embeddings",
    "delete_document",
    "delete_kb",
    "doc_stamps",
    "document_chunk_count",
    "document_counts",
    "document_values",
    "documents",
    "documents_named",
    "embedded_models",
    "find_by_source_paths",
    "find_document",
    "get_document",
    "ids_outside",
    "insert_audit",
    "kb_counts",
    "kb_generation",
    "kb_stamps",
    "list_documents",
    "pending_documents",
    "recent_documents",
    "record_invocation",
    "replace_chunks",
    "replace_many_chunks",
    "set_embedding",
    "upsert_documents",
    "upsert_kb",
    "vector_kbs",
]

DOC_COLUMNS = (
    "id",
    "kb",
    "title",
    "original_filename",
    "original_format",
    "source_sha256",
    "content_sha256",
    "source_mode",
    "source_path",
    "source_url",
    "conversion_engine",
    "converted_at",
    "created_at",
    "updated_at",
    "metadata",
    "tags",
    "file_stamp",
    "chunk_params",
    "source_stamp",
)
_JSON_COLUMNS = ("metadata", "tags")
_STORED = (*DOC_COLUMNS, "created_key", "updated_key")
EMBEDDING_COLUMNS = ("embed_pending", "embedding_model")
"""Written by ``upsert_document`` when its row holds them (``Index.upsert_document(embedding=True)``)."""


# -- knowledge bases ---------------------------------------------------------------------------


def kb_stamps(conn: Connection) -> dict[str, str]:
    return {row["name"]: row["config_stamp"] for row in conn.execute("SELECT name, config_stamp FROM knowledge_bases")}


def kb_generation(conn: Connection, name: str) -> int | None:
    """The knowledge base's generation: a new value whenever its documents' stamps change (``stamps``)."""
    row = conn.execute("SELECT generation FROM knowledge_bases WHERE name = %s", (name,)).fetchone()
    return None if row is None else int(row["generation"])


def upsert_kb(conn: Connection, name: str, config: Any, stamp: str) -> None:
    conn.execute(
        """INSERT INTO knowledge_bases
               (name, description, chunk_size, chunk_overlap, vector, created_at, updated_at, config_stamp)
           VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
           ON CONFLICT (name) DO UPDATE SET description = excluded.description,
               chunk_size = excluded.chunk_size, chunk_overlap = excluded.chunk_overlap,
               vector = excluded.vector, created_at = excluded.created_at,
               updated_at = excluded.updated_at, config_stamp = excluded.config_stamp""",
        (
            name,
            clean(config.description),
            config.chunk_size,
            config.chunk_overlap,
            bool(config.vector),
            config.created_at,
            config.updated_at,
            stamp,
        ),
    )


def delete_kb(conn: Connection, name: str) -> None:
    """Drop every row of a knowledge base: vectors, postings and chunks first."""
    vectors.delete_kb_vectors(conn, name)
    _delete_chunks(conn, "kb = %s", (name,))
    conn.execute("DELETE FROM keyword_stats WHERE kb = %s", (name,))
    conn.execute("DELETE FROM document_tags WHERE document_id IN (SELECT id FROM documents WHERE kb = %s)", (name,))
    conn.execute("DELETE FROM documents WHERE kb = %s", (name,))
    conn.execute("DELETE FROM knowledge_bases WHERE name = %s", (name,))


def vector_kbs(conn: Connection) -> set[str]:
    return {row["name"] for row in conn.execute("SELECT name FROM knowledge_bases WHERE vector")}


def kb_counts(conn: Connection, name: str, vector_model: str | None) -> tuple[int, int, int]:
    """(documents, chunks, degraded documents): see ``index.sqlite.queries.kb_counts``."""
    row = conn.execute(
        "SELECT count(*) AS docs, count(*) FILTER (WHERE embed_pending OR embedding_model IS DISTINCT FROM %s) "
        "AS degraded FROM documents WHERE kb = %s",
        (vector_model, name),
    ).fetchone()
    assert row is not None
    return row["docs"], chunk_count(conn, name), row["degraded"] if vector_model is not None else 0


def chunk_count(conn: Connection, name: str) -> int:
    return _one(conn, "SELECT count(*) AS n FROM chunks WHERE kb = %s", (name,))


def claimed_store(conn: Connection) -> str | None:
    """The store id this database is the index of, or None when no store has claimed it yet."""
    row = conn.execute("SELECT id FROM store_identity").fetchone()
    return None if row is None else str(row["id"])


def claim_store(conn: Connection, store_id: str) -> str:
    """Record ``store_id`` as this database's store unless one is (another server may claim it at
    the same moment); the store id recorded."""
    conn.execute("INSERT INTO store_identity (id) VALUES (%s) ON CONFLICT DO NOTHING", (store_id,))
    claimed = claimed_store(conn)
    assert claimed is not None  # inserted, or there already
    return claimed


def document_counts(conn: Connection) -> dict[str, int]:
    return {row["kb"]: row["n"] for row in conn.execute("SELECT kb, count(*) AS n FROM documents GROUP BY kb")}


# -- documents ---------------------------------------------------------------------------------


def doc_stamps(conn: Connection, kb: str) -> dict[str, tuple[str, str]]:
    """``{document_id: (file_stamp, chunk_params)}`` for the drift check (cached by ``stamps``)."""
    with conn.cursor(row_factory=tuple_row) as cursor:  # plain tuples: this runs over every document
        rows = cursor.execute("SELECT id, file_stamp, chunk_params FROM documents WHERE kb = %s", (kb,)).fetchall()
    return {doc_id: (stamp, params) for doc_id, stamp, params in rows}


def get_document(conn: Connection, kb: str, doc_id: str) -> dict[str, Any] | None:
    return conn.execute("SELECT * FROM documents WHERE kb = %s AND id = %s", (kb, doc_id)).fetchone()


_MATCH_COLUMN = {"filename": "original_filename", "source_path": "source_path", "source_url": "source_url"}


def find_document(conn: Connection, kb: str, by: str, value: str) -> dict[str, Any] | None:
    """The oldest document whose ``by`` (a key of ``_MATCH_COLUMN``) is ``value``."""
    return conn.execute(
        f"SELECT * FROM documents WHERE kb = %s AND {_MATCH_COLUMN[by]} = %s ORDER BY created_at, id LIMIT 1",
        (kb, clean(value)),
    ).fetchone()


def find_by_source_paths(conn: Connection, kb: str, source_paths: Sequence[str]) -> list[dict[str, Any]]:
    """The oldest document of each of ``source_paths`` that has one, with the path as asked (``asked``)."""
    return conn.execute(
        """SELECT p.asked, d.* FROM unnest(%s::text[], %s::text[]) AS p(asked, stored)
           CROSS JOIN LATERAL (
               SELECT * FROM documents WHERE kb = %s AND source_path = p.stored ORDER BY created_at, id LIMIT 1
           ) d""",
        (list(source_paths), [clean(path) for path in source_paths], kb),
    ).fetchall()


def documents_named(conn: Connection, kb: str, filename: str, limit: int) -> list[dict[str, Any]]:
    """Documents named ``filename``, uploads (no source path or URL) first, then oldest first."""
    return conn.execute(
        "SELECT * FROM documents WHERE kb = %s AND original_filename = %s "
        "ORDER BY (COALESCE(source_path, '') = '' AND COALESCE(source_url, '') = '') DESC, created_at, id LIMIT %s",
        (kb, clean(filename), limit),
    ).fetchall()


def documents(conn: Connection, kb: str, *, with_source_path: bool = False) -> list[dict[str, Any]]:
    having = " AND source_path IS NOT NULL" if with_source_path else ""
    return conn.execute(f"SELECT * FROM documents WHERE kb = %s{having} ORDER BY created_at, id", (kb,)).fetchall()


def list_documents(
    conn: Connection,
    kb: str,
    title_filter: str,
    limit: int,
    offset: int,
    where: DocumentFilter,
    collation: str | None = None,
) -> tuple[list[dict[str, Any]], int]:
    """A page of documents, oldest first, filtered by a title substring (any case; beyond ASCII,
    under ``collation``: ``lower_sql``) and ``where``."""
    condition, params = document_condition(where)
    condition, params = f"d.kb = %(kb)s AND {condition}", {**params, "kb": kb}
    if title_filter:
        condition += f" AND strpos({lower_sql('d.title', title_filter, collation)}, %(title)s) > 0"
        params["title"] = clean(title_filter.lower())
    total = _one(conn, f"SELECT count(*) AS n FROM documents d WHERE {condition}", params)
    rows = conn.execute(
        f"SELECT d.* FROM documents d WHERE {condition} ORDER BY d.created_at, d.id LIMIT %(limit)s OFFSET %(offset)s",
        {**params, "limit": _limit(limit), "offset": max(offset, 0)},
    ).fetchall()
    return rows, total


def document_ids(conn: Connection, kb: str, where: DocumentFilter) -> list[str]:
    condition, params = document_condition(where)
    with conn.cursor(row_factory=tuple_row) as cursor:
        rows = cursor.execute(f"SELECT d.id FROM documents d WHERE d.kb = %(kb)s AND {condition}", {**params, "kb": kb})
        return [row[0] for row in rows.fetchall()]


def recent_documents(conn: Connection, limit: int) -> list[dict[str, Any]]:
    return conn.execute("SELECT * FROM documents ORDER BY updated_at DESC, id LIMIT %s", (_limit(limit),)).fetchall()


def ids_outside(conn: Connection, kb: str, among: Sequence[str]) -> dict[str, str]:
    rows = conn.execute("SELECT id, kb FROM documents WHERE kb <> %s AND id = ANY(%s::text[])", (kb, list(among)))
    return {row["id"]: row["kb"] for row in rows}


def document_values(row: dict[str, Any]) -> dict[str, Any]:
    """A document row as ``upsert_documents`` writes it: every column of ``DOC_COLUMNS`` that ``row``
    holds, and those of ``EMBEDDING_COLUMNS`` to write them too, ready for the database, and its
    tags' keys (``tag_keys``, for ``document_tags``)."""
    row = {**row, "tags": list(row["tags"])}
    row.update(created_key=time_key(row["created_at"]), updated_key=time_key(row["updated_at"]))
    stored = (*_STORED, *(c for c in EMBEDDING_COLUMNS if c in row))
    values = {c: json.dumps(row[c], ensure_ascii=False) if c in _JSON_COLUMNS else clean(row[c]) for c in stored}
    return {**values, "tag_keys": [clean(tag_key(tag)) for tag in row["tags"]]}


def upsert_documents(conn: Connection, rows: Sequence[dict[str, Any]]) -> None:
    """Insert or update document rows (``document_values``, each with the same columns, each of
    another document) and their tags, in one statement, whatever their number.

    The rows go as one JSON array, typed by the table's own row type (``json_populate_recordset``):
    psycopg builds arrays in Python, a JSON array ``json.dumps`` builds in C.
    """
    if not rows:
        return
    stored = [column for column in rows[0] if column != "tag_keys"]
    updates = ", ".join(f"{c} = excluded.{c}" for c in stored[1:])
    conn.execute(
        f"""WITH doc AS (
                INSERT INTO documents ({", ".join(stored)})
                SELECT {", ".join(stored)} FROM json_populate_recordset(NULL::documents, %(rows)s::json)
                ON CONFLICT (id) DO UPDATE SET {updates}
            ), keys AS (
                SELECT id, tag_keys FROM json_to_recordset(%(rows)s::json) AS k(id text, tag_keys text[])
            ), untagged AS (
                DELETE FROM document_tags t USING keys k WHERE t.document_id = k.id AND NOT t.tag = ANY(k.tag_keys)
            )
            INSERT INTO document_tags (tag, document_id) SELECT DISTINCT unnest(k.tag_keys), k.id FROM keys k
            ON CONFLICT DO NOTHING""",
        {"rows": json.dumps(rows, ensure_ascii=False)},
    )


def delete_document(conn: Connection, doc_id: str) -> None:
    _delete_chunks(conn, "document_id = %s", (doc_id,))
    conn.execute("DELETE FROM document_tags WHERE document_id = %s", (doc_id,))
    conn.execute("DELETE FROM documents WHERE id = %s", (doc_id,))


# -- chunks ------------------------------------------------------------------------------------


def replace_chunks(conn: Connection, kb: str, doc_id: str, chunks: Iterable[Chunk], *, fresh: bool = False) -> int:
    """Swap a document's chunks, and their postings (their vectors are dropped; ``fresh``: it has none yet)."""
    if not fresh:
        _delete_chunks(conn, "document_id = %s", (doc_id,))
    return postings.insert_chunks(conn, [(kb, doc_id, list(chunks))])


def replace_many_chunks(
    conn: Connection, documents: Sequence[tuple[str, str, Sequence[Chunk]]], stale: Sequence[str]
) -> int:
    """``replace_chunks`` for many documents ``(kb, id, chunks)`` at once: the chunks of the documents
    ``stale`` (those not ``fresh``) deleted in one statement, every new chunk written in another."""
    if stale:
        _delete_chunks(conn, "document_id = ANY(%s::text[])", (list(stale),))
    return postings.insert_chunks(conn, documents)


def _delete_chunks(conn: Connection, where: str, params: Sequence[Any]) -> None:
    """Delete chunks with their postings, share of the keyword statistics and vectors."""
    gone = postings.delete_chunks(conn, where, params)
    if gone:
        vectors.delete_chunk_vectors(conn, gone)


def chunk_texts(conn: Connection, doc_id: str) -> list[tuple[int, str]]:
    rows = conn.execute("SELECT id, text FROM chunks WHERE document_id = %s ORDER BY position", (doc_id,))
    return [(row["id"], row["text"]) for row in rows]


def chunk_window(conn: Connection, doc_id: str, first: int, last: int) -> tuple[list[dict[str, Any]], int | None]:
    rows = conn.execute(
        "SELECT position, heading_path, text, source_location FROM chunks "
        "WHERE document_id = %s AND position BETWEEN %s AND %s "
        "ORDER BY position",
        (doc_id, first, last),
    ).fetchall()
    end = conn.execute("SELECT max(position) AS last FROM chunks WHERE document_id = %s", (doc_id,)).fetchone()
    return rows, None if end is None else end["last"]


def document_chunk_count(conn: Connection, doc_id: str) -> int:
    return _one(conn, "SELECT count(*) AS n FROM chunks WHERE document_id = %s", (doc_id,))


# -- embeddings --------------------------------------------------------------------------------


def remember_source_stamps(conn: Connection, stamps: Sequence[tuple[str, str, str]]) -> None:
    """Each ``(document id, source_sha256, stamp)``: the stamp, if the row still has that hash."""
    with conn.cursor() as cursor:
        cursor.executemany(
            "UPDATE documents SET source_stamp = %s WHERE id = %s AND source_sha256 = %s",
            [(stamp, doc_id, sha) for doc_id, sha, stamp in stamps],
        )


def set_embedding(conn: Connection, doc_id: str, *, pending: bool, model: str | None) -> None:
    conn.execute(
        "UPDATE documents SET embed_pending = %s, embedding_model = %s WHERE id = %s", (pending, model, doc_id)
    )


def clear_kb_embeddings(conn: Connection, kb: str) -> None:
    """Forget a knowledge base's vectors (its vector switch was turned off)."""
    vectors.delete_kb_vectors(conn, kb)
    conn.execute("UPDATE documents SET embed_pending = false, embedding_model = NULL WHERE kb = %s", (kb,))


def pending_documents(conn: Connection, kb: str, identity: str, *, limit: int = -1) -> list[str]:
    """Documents of ``kb`` whose vectors are missing, failed, or from another model.

    One index range per way of being due (``schema``, ``0005_pending_index``): the drift check
    asks this of every read of a vector knowledge base, usually to find none.
    """
    rows = conn.execute(
        """SELECT id FROM documents WHERE kb = %(kb)s AND embed_pending
           UNION SELECT id FROM documents WHERE kb = %(kb)s AND embedding_model IS NULL
           UNION SELECT id FROM documents WHERE kb = %(kb)s AND embedding_model COLLATE "C" < %(model)s
           UNION SELECT id FROM documents WHERE kb = %(kb)s AND embedding_model COLLATE "C" > %(model)s
           ORDER BY id LIMIT %(limit)s""",
        {"kb": kb, "model": identity, "limit": _limit(limit)},
    )
    return [row["id"] for row in rows]


def embedded_models(conn: Connection, kb: str) -> list[str]:
    rows = conn.execute("SELECT embedding_model FROM documents WHERE kb = %s AND embedding_model IS NOT NULL", (kb,))
    return [row["embedding_model"] for row in rows]


# -- history -----------------------------------------------------------------------------------


def audit_entry(
    event: str, kb: str, actor: str, document_id: str | None = None, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    """An ``audit_log`` row as ``audit`` writes it, stamped now."""
    return {
        "at": utc_now(),
        "event": event,
        "kb": clean(kb),
        "document_id": clean(document_id),
        "actor": clean(actor),
        "details": json.dumps(details or {}, ensure_ascii=False),
    }


def insert_audit(conn: Connection, entries: Sequence[dict[str, Any]]) -> None:
    """Append ``audit_entry`` rows to the audit log, in their order, in one statement."""
    if not entries:
        return
    conn.execute(
        """INSERT INTO audit_log (at, event, kb, document_id, actor, details)
           SELECT at, event, kb, document_id, actor, details
           FROM json_to_recordset(%s::json)
               AS a(at text, event text, kb text, document_id text, actor text, details text)""",
        (json.dumps(entries, ensure_ascii=False),),
    )


def record_invocation(
    conn: Connection,
    tool: str,
    client: str,
    duration_ms: float,
    outcome: str,
    error_code: str | None,
    at: str | None = None,
) -> None:
    conn.execute(
        "INSERT INTO mcp_invocations (at, tool, client, duration_ms, outcome, error_code) "
        "VALUES (%s, %s, %s, %s, %s, %s)",
        (at or utc_now(), clean(tool), clean(client), duration_ms, outcome, error_code),
    )


def audit_events(conn: Connection, kb: str | None, limit: int) -> list[Any]:
    where, params = ("WHERE kb = %s", [kb]) if kb is not None else ("", [])
    sql = f"SELECT * FROM (SELECT * FROM audit_log {where} ORDER BY id DESC LIMIT %s) AS last ORDER BY id"
    return conn.execute(sql, [*params, limit]).fetchall()


def document_events(conn: Connection, kb: str, document_id: str, event: str) -> list[Any]:
    sql = "SELECT * FROM audit_log WHERE kb = %s AND document_id = %s AND event = %s ORDER BY id"
    return conn.execute(sql, (clean(kb), clean(document_id), event)).fetchall()


def invocations(conn: Connection, limit: int) -> list[Any]:
    sql = "SELECT * FROM (SELECT * FROM mcp_invocations ORDER BY id DESC LIMIT %s) AS last ORDER BY id"
    return conn.execute(sql, (limit,)).fetchall()


def _one(conn: Connection, sql: str, params: Sequence[Any] | dict[str, Any]) -> int:
    row = conn.execute(sql, params).fetchone()
    assert row is not None
    return int(next(iter(row.values())))


def _limit(limit: int) -> int | None:
    """SQLite's ``LIMIT -1`` (no limit) as PostgreSQL's ``LIMIT NULL``."""
    return None if limit < 0 else limit
