"""The SQL statements of the SQLite index, as small functions (``SqliteIndex`` calls them)."""

from __future__ import annotations

import json
from bisect import insort
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from coffer_mcp.index.fts import match_expression, settled
from coffer_mcp.index.port import DocumentFilter
from coffer_mcp.index.sqlite import keyword, vectors
from coffer_mcp.index.sqlite.db import Connection, database_errors
from coffer_mcp.index.sqlite.filters import document_condition, scope
from coffer_mcp.index.tokens import terms
from coffer_mcp.models import Chunk, tag_key
from coffer_mcp.timeutil import time_key, utc_now

__all__ = [
    "DOC_COLUMNS",
    "EMBEDDING_COLUMNS",
    "audit",
    "chunk_count",
    "chunk_texts",
    "chunk_window",
    "clear_kb_embeddings",
    "count_chunks",
    "delete_document",
    "delete_kb",
    "doc_stamps",
    "document_chunk_count",
    "document_counts",
    "documents",
    "documents_named",
    "embedded_models",
    "find_by_source_paths",
    "find_document",
    "fts_matches_more_than",
    "fts_search",
    "get_document",
    "has_fts5",
    "ids_outside",
    "kb_counts",
    "kb_stamps",
    "list_documents",
    "rebuild_fts",
    "recent_documents",
    "record_invocation",
    "replace_chunks",
    "set_embedding",
    "substring_search",
    "upsert_document",
    "upsert_kb",
    "vector_kbs",
    "verify_fts",
    "write",
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


@contextmanager
def write(conn: Connection) -> Iterator[Connection]:
    """One write transaction; taken with ``BEGIN IMMEDIATE`` so it never deadlocks on upgrade."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


# -- knowledge bases ---------------------------------------------------------------------------


def kb_stamps(conn: Connection) -> dict[str, str]:
    return {row[0]: row[1] for row in conn.execute("SELECT name, config_stamp FROM knowledge_bases")}


def upsert_kb(conn: Connection, name: str, config: Any, stamp: str) -> None:
    conn.execute(
        """INSERT INTO knowledge_bases
               (name, description, chunk_size, chunk_overlap, vector, created_at, updated_at, config_stamp)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?)
           ON CONFLICT (name) DO UPDATE SET description = excluded.description,
               chunk_size = excluded.chunk_size, chunk_overlap = excluded.chunk_overlap,
               vector = excluded.vector, created_at = excluded.created_at,
               updated_at = excluded.updated_at, config_stamp = excluded.config_stamp""",
        (
            name,
            config.description,
            config.chunk_size,
            config.chunk_overlap,
            int(config.vector),
            config.created_at,
            config.updated_at,
            stamp,
        ),
    )


def delete_kb(conn: Connection, name: str) -> None:
    """Drop every row of a knowledge base, its full-text table and vectors first."""
    vectors.delete_kb_vectors(conn, name)
    _delete_chunks(conn, "kb = ?", (name,))
    keyword.drop(conn, name)
    conn.execute("DELETE FROM document_tags WHERE document_id IN (SELECT id FROM documents WHERE kb = ?)", (name,))
    conn.execute("DELETE FROM documents WHERE kb = ?", (name,))
    conn.execute("DELETE FROM knowledge_bases WHERE name = ?", (name,))


def kb_counts(conn: Connection, name: str, vector_model: str | None) -> tuple[int, int, int]:
    """(documents, chunks, degraded documents) of one knowledge base.

    With ``vector_model`` (the KB wants vectors of that model), a document is degraded when its
    embedding failed or its vectors are missing or from another model.
    """
    docs, degraded = conn.execute(
        "SELECT count(*), coalesce(sum(embed_pending = 1 OR embedding_model IS NOT ?), 0) FROM documents WHERE kb = ?",
        (vector_model, name),
    ).fetchone()
    return docs, chunk_count(conn, name), degraded if vector_model is not None else 0


def chunk_count(conn: Connection, name: str) -> int:
    return conn.execute("SELECT count(*) FROM chunks WHERE kb = ?", (name,)).fetchone()[0]


def document_counts(conn: Connection) -> dict[str, int]:
    return {row[0]: row[1] for row in conn.execute("SELECT kb, count(*) FROM documents GROUP BY kb")}


# -- documents ---------------------------------------------------------------------------------


def doc_stamps(conn: Connection, kb: str) -> dict[str, tuple[str, str]]:
    """``{document_id: (file_stamp, chunk_params)}`` for the drift check."""
    cursor = conn.cursor()
    cursor.row_factory = None  # plain tuples: this runs on every read, over every document
    rows = cursor.execute("SELECT id, file_stamp, chunk_params FROM documents WHERE kb = ?", (kb,))
    return {doc_id: (stamp, params) for doc_id, stamp, params in rows}


def get_document(conn: Connection, kb: str, doc_id: str) -> Any:
    return conn.execute("SELECT * FROM documents WHERE kb = ? AND id = ?", (kb, doc_id)).fetchone()


_MATCH_COLUMN = {
    "filename": "original_filename",
    "source_path": "source_path",
    "source_url": "json_extract(metadata, '$.source_url')",
}


def find_document(conn: Connection, kb: str, by: str, value: str) -> Any:
    """The oldest document whose ``by`` (a key of ``_MATCH_COLUMN``) is ``value``."""
    return conn.execute(
        f"SELECT * FROM documents WHERE kb = ? AND {_MATCH_COLUMN[by]} = ? ORDER BY created_at, id LIMIT 1",
        (kb, value),
    ).fetchone()


def find_by_source_paths(conn: Connection, kb: str, source_paths: Sequence[str]) -> list[Any]:
    """The oldest document of each of ``source_paths`` that has one (SQLite answers a query each
    without a round trip: one per path is as cheap as one for all)."""
    found = (find_document(conn, kb, "source_path", path) for path in dict.fromkeys(source_paths))
    return [row for row in found if row is not None]


def documents_named(conn: Connection, kb: str, filename: str, limit: int) -> list[Any]:
    """Documents named ``filename``, uploads (no source path or URL) first, then oldest first."""
    return conn.execute(
        "SELECT * FROM documents WHERE kb = ? AND original_filename = ? ORDER BY (COALESCE(source_path, '') = '' "
        f"AND COALESCE({_MATCH_COLUMN['source_url']}, '') = '') DESC, created_at, id LIMIT ?",
        (kb, filename, limit),
    ).fetchall()


def documents(conn: Connection, kb: str, *, with_source_path: bool = False) -> list[Any]:
    having = " AND source_path IS NOT NULL" if with_source_path else ""
    return conn.execute(f"SELECT * FROM documents WHERE kb = ?{having} ORDER BY created_at, id", (kb,)).fetchall()


def document_ids(conn: Connection, kb: str, where: DocumentFilter) -> list[str]:
    condition, params = document_condition(where)
    rows = conn.execute(f"SELECT d.id FROM documents d WHERE d.kb = ? AND {condition}", [kb, *params])
    return [row[0] for row in rows]


def recent_documents(conn: Connection, limit: int) -> list[Any]:
    return conn.execute("SELECT * FROM documents ORDER BY updated_at DESC, id LIMIT ?", (limit,)).fetchall()


def ids_outside(conn: Connection, kb: str, among: Sequence[str]) -> dict[str, str]:
    taken: dict[str, str] = {}
    for start in range(0, len(among), 500):
        part = list(among[start : start + 500])
        sql = f"SELECT id, kb FROM documents WHERE kb != ? AND id IN ({', '.join('?' * len(part))})"
        taken.update((row[0], row[1]) for row in conn.execute(sql, [kb, *part]))
    return taken


def vector_kbs(conn: Connection) -> set[str]:
    return {row[0] for row in conn.execute("SELECT name FROM knowledge_bases WHERE vector = 1")}


def embedded_models(conn: Connection, kb: str) -> list[str]:
    """The model of each embedded document of ``kb`` (one entry per document)."""
    rows = conn.execute("SELECT embedding_model FROM documents WHERE kb = ? AND embedding_model IS NOT NULL", (kb,))
    return [row[0] for row in rows]


def chunk_window(conn: Connection, doc_id: str, first: int, last: int) -> tuple[list[Any], int | None]:
    rows = conn.execute(
        "SELECT position, heading_path, text, source_location FROM chunks "
        "WHERE document_id = ? AND position BETWEEN ? AND ? "
        "ORDER BY position",
        (doc_id, first, last),
    ).fetchall()
    end = conn.execute("SELECT max(position) FROM chunks WHERE document_id = ?", (doc_id,)).fetchone()[0]
    return rows, end


def document_chunk_count(conn: Connection, doc_id: str) -> int:
    return conn.execute("SELECT count(*) FROM chunks WHERE document_id = ?", (doc_id,)).fetchone()[0]


def upsert_document(conn: Connection, row: dict[str, Any]) -> None:
    """Insert or update a document row (``row`` holds every column of ``DOC_COLUMNS``, and those of
    ``EMBEDDING_COLUMNS`` to write them too), and its tags."""
    row = {**row, "tags": list(row["tags"])}
    row.update(created_key=time_key(row["created_at"]), updated_key=time_key(row["updated_at"]))
    stored = (*_STORED, *(c for c in EMBEDDING_COLUMNS if c in row))
    values = [json.dumps(row[c], ensure_ascii=False) if c in _JSON_COLUMNS else row[c] for c in stored]
    updates = ", ".join(f"{c} = excluded.{c}" for c in stored[1:])
    conn.execute(
        f"INSERT INTO documents ({', '.join(stored)}) VALUES ({', '.join('?' * len(stored))}) "
        f"ON CONFLICT (id) DO UPDATE SET {updates}",
        values,
    )
    conn.execute("DELETE FROM document_tags WHERE document_id = ?", (row["id"],))
    conn.executemany(
        "INSERT OR IGNORE INTO document_tags (tag, document_id) VALUES (?, ?)",
        [(tag_key(tag), row["id"]) for tag in row["tags"]],
    )


def replace_chunks(conn: Connection, kb: str, doc_id: str, chunks: Iterable[Chunk], *, fresh: bool = False) -> int:
    """Swap a document's chunks and their full-text entries (``fresh``: it has none yet)."""
    if not fresh:
        _delete_chunks(conn, "document_id = ?", (doc_id,))
    first = conn.execute("SELECT coalesce(max(id), 0) + 1 FROM chunks").fetchone()[0]
    rows = [
        (
            first + i,
            doc_id,
            kb,
            c.position,
            json.dumps(list(c.heading_path), ensure_ascii=False),
            "\n".join(c.heading_path),
            c.text,
            _location_json(c.source_location),
        )
        for i, c in enumerate(chunks)
    ]
    conn.executemany(
        "INSERT INTO chunks (id, document_id, kb, position, heading_path, headings, text, source_location) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        rows,
    )
    keyword.index_rows(conn, kb, [(r[0], r[5], r[6]) for r in rows])
    return len(rows)


def _location_json(location: dict[str, Any] | None) -> str | None:
    return json.dumps(location, ensure_ascii=False, separators=(",", ":")) if location else None


def _delete_chunks(conn: Connection, where: str, params: tuple[Any, ...]) -> None:
    """Delete chunks and their FTS entries (a contentless FTS5 delete needs the indexed text)."""
    doomed = conn.execute(f"SELECT id, headings, text, kb FROM chunks WHERE {where}", params).fetchall()
    for kb in sorted({row[3] for row in doomed}):
        vectors.delete_vectors(conn, [row[0] for row in doomed if row[3] == kb], kb)
        keyword.unindex_rows(conn, kb, [(row[0], row[1], row[2]) for row in doomed if row[3] == kb])
    conn.execute(f"DELETE FROM chunks WHERE {where}", params)


def chunk_texts(conn: Connection, doc_id: str) -> list[tuple[int, str]]:
    """``(chunk id, text)`` of a document, in order."""
    rows = conn.execute("SELECT id, text FROM chunks WHERE document_id = ? ORDER BY position", (doc_id,))
    return [(row[0], row[1]) for row in rows]


def remember_source_stamps(conn: Connection, stamps: Sequence[tuple[str, str, str]]) -> None:
    """Each ``(document id, source_sha256, stamp)``: the stamp, if the row still has that hash."""
    conn.executemany(
        "UPDATE documents SET source_stamp = ? WHERE id = ? AND source_sha256 = ?",
        [(stamp, doc_id, sha) for doc_id, sha, stamp in stamps],
    )


def set_embedding(conn: Connection, doc_id: str, *, pending: bool, model: str | None) -> None:
    conn.execute(
        "UPDATE documents SET embed_pending = ?, embedding_model = ? WHERE id = ?", (int(pending), model, doc_id)
    )


def clear_kb_embeddings(conn: Connection, kb: str) -> None:
    """Forget a knowledge base's vectors (its vector switch was turned off)."""
    vectors.delete_kb_vectors(conn, kb)
    conn.execute("UPDATE documents SET embed_pending = 0, embedding_model = NULL WHERE kb = ?", (kb,))


def rebuild_fts(conn: Connection) -> int:
    """Rebuild every knowledge base's full-text table from the chunks table (repairs any drift)."""
    return keyword.rebuild(conn)


def delete_document(conn: Connection, doc_id: str) -> None:
    _delete_chunks(conn, "document_id = ?", (doc_id,))
    conn.execute("DELETE FROM document_tags WHERE document_id = ?", (doc_id,))
    conn.execute("DELETE FROM documents WHERE id = ?", (doc_id,))


def list_documents(
    conn: Connection, kb: str, title_filter: str, limit: int, offset: int, where: DocumentFilter
) -> tuple[list, int]:
    """A page of documents, oldest first, filtered by a case-insensitive title substring and ``where``."""
    condition, params = document_condition(where)
    condition, params = f"d.kb = ? AND {condition}", [kb, *params]
    if title_filter:
        condition += f" AND instr({_lower(title_filter)}(d.title), ?) > 0"
        params.append(title_filter.lower())
    total = conn.execute(f"SELECT count(*) FROM documents d WHERE {condition}", params).fetchone()[0]
    rows = conn.execute(
        f"SELECT d.* FROM documents d WHERE {condition} ORDER BY d.created_at, d.id LIMIT ? OFFSET ?",
        [*params, limit, offset],
    ).fetchall()
    return rows, total


# -- retrieval ---------------------------------------------------------------------------------


def count_chunks(conn: Connection, kbs: Sequence[str], where: DocumentFilter) -> int:
    """How many chunks of ``kbs`` ``where`` lets through."""
    clause, params = scope(kbs, where)
    sql = f"SELECT count(*) FROM chunks c JOIN documents d ON d.id = c.document_id WHERE {clause}"
    return conn.execute(sql, params).fetchone()[0]


_FTS_SLACK = 16
_FTS_MAX_DEPTH = 4096


def fts_search(
    conn: Connection, phrases: Sequence[str], operator: str, kbs: Sequence[str], where: DocumentFilter, limit: int
) -> list[Any]:
    """Chunks matching ``phrases`` (all, or any), best BM25 first (``score`` is -bm25: higher is better).

    Each knowledge base has its own full-text table (``keyword``), so a search of one scores with
    its own statistics; a search of several ranks as one collection of them would (``_union``).
    FTS5 ranks every match, but joining every match to its chunk row costs more than ranking:
    so a table's best ``limit`` (plus slack, for ties) come from it alone, and only those are
    joined and filtered. When ``where`` leaves too few, the look goes deeper, then falls back to
    filtering every match inside the query. With a document filter, which may leave out nearly
    every match, one look at the best matches comes before that fallback.
    """
    tables = keyword.tables(conn, kbs)
    expression = match_expression(list(phrases), operator)
    if len(kbs) > 1:
        return _union(conn, tables, phrases, expression, where, limit)
    return [row for kb, table in tables.items() for row in _fts_search_one(conn, table, expression, kb, where, limit)]


def _union(
    conn: Connection, tables: dict[str, str], phrases: Sequence[str], expression: str, where: DocumentFilter, limit: int
) -> list[dict[str, Any]]:
    """The best ``limit`` matches of several knowledge bases, scored as one collection of them.

    A phrase's IDF is taken from all their rows and matches together; each candidate is scored
    with it by FTS5's formula, from its own tokens (``tokens.terms``, FTS5's tokenizer rebuilt:
    FTS5 cannot rescore a list of rows, as ``rowid IN (…)`` makes it count each phrase's matches
    again for every row) and its own knowledge base's mean length. Each table's matches come in
    its own order, best first. In its own table a chunk scores the sum over the phrases of the IDF
    there times the phrase's weight in it, so it scores here at most ``_bound`` of its own score,
    and so does every chunk after it. Candidates are scored lazily, the one of highest bound next,
    until no bound reaches the ``limit``-th score: a table is read deeper only while its bound
    could (rarely: the two IDFs differ little for a large table, and a small one gives all its
    matches at once), and at most ``_FTS_MAX_DEPTH`` deep. Tokenizing is most of the cost, and
    most candidates of a table ranked much like the rest are never tokenized.
    """
    if limit <= 0:
        return []
    stats = {kb: keyword.statistics(conn, table, phrases) for kb, table in tables.items()}
    rows = sum(rows for rows, _, _ in stats.values())
    idf = [keyword.idf(rows, sum(matches[i] for _, _, matches in stats.values())) for i in range(len(phrases))]
    parts = {  # per knowledge base: its phrases' (ratio, cap) for ``_bound``, highest ratio first
        kb: _parts([idf[i] / keyword.idf(own, n) if n else 0.0 for i, n in enumerate(matches)], idf)
        for kb, (own, _, matches) in stats.items()
    }
    tokens = [terms(phrase) for phrase in phrases]
    readers = {kb: _Candidates(conn, table, expression, kb, where, limit + _FTS_SLACK) for kb, table in tables.items()}
    best: list[dict[str, Any]] = []  # the best ``limit`` scored so far, best first
    while True:
        owns = {kb: reader.next_score() for kb, reader in readers.items()}
        bounds = {kb: _bound(own, parts[kb]) for kb, own in owns.items() if own is not None}
        if not bounds:
            return best
        kb = max(bounds, key=lambda name: (bounds[name], name))
        if len(best) == limit and bounds[kb] < best[-1]["score"]:
            return best
        row = readers[kb].take()
        row["score"] = _score(row, tokens, idf, stats[kb][1] / max(stats[kb][0], 1))
        insort(best, row, key=_best_first)
        del best[limit:]


class _Candidates:
    """One table's matches in its own order, best first, read deeper (eight times as deep, up to ``_FTS_MAX_DEPTH``)
    when its first ones are taken."""

    def __init__(
        self, conn: Connection, table: str, expression: str, kb: str, where: DocumentFilter, depth: int
    ) -> None:
        self._look = lambda depth: _fts_search_one(conn, table, expression, kb, where, depth)
        self._depth = depth
        self._rows = self._look(depth)
        self._taken: set[int] = set()
        self._next = 0

    def next_score(self) -> float | None:
        """The own score of the next match not taken (``None``: none is left)."""
        while True:
            while self._next < len(self._rows) and self._rows[self._next]["id"] in self._taken:
                self._next += 1  # a deeper look gives the rows taken again
            if self._next < len(self._rows):
                return float(self._rows[self._next]["score"])
            if len(self._rows) < self._depth or self._depth >= _FTS_MAX_DEPTH:
                return None
            self._depth = min(self._depth * 8, _FTS_MAX_DEPTH)
            self._rows, self._next = self._look(self._depth), 0

    def take(self) -> dict[str, Any]:
        row = dict(self._rows[self._next])
        self._taken.add(row["id"])
        self._next += 1
        return row


def _score(row: dict[str, Any], phrases: list[list[str]], idf: list[float], avgdl: float) -> float:
    """``row``'s score among all the tables, in FTS5's arithmetic (k1 = 1.2, b = 0.75): each phrase's
    occurrences (adjacent tokens, overlapping ones too) and the chunk's length in tokens, from its
    full-text entry as ``keyword.body`` renders it."""
    found = terms(keyword.body(row["headings"], row["text"]))
    length, score = len(found), 0.0
    for phrase, weight in zip(phrases, idf, strict=True):
        tf = _occurrences(found, phrase)
        if tf:
            score += weight * ((tf * (1.2 + 1.0)) / (tf + 1.2 * (1 - 0.75 + 0.75 * length / avgdl)))
    return settled(score)


def _occurrences(found: list[str], phrase: list[str]) -> int:
    if not phrase:
        return 0
    if len(phrase) == 1:
        return found.count(phrase[0])
    size = len(phrase)
    return sum(found[i : i + size] == phrase for i in range(len(found) - size + 1))


def _parts(ratios: list[float], idf: list[float]) -> list[tuple[float, float]]:
    """Each matching phrase's ``(ratio, cap)``, highest ratio first: the IDF among all the tables over
    the one in its own, and the most it can add to an own score there (that IDF times ``k1 + 1``:
    BM25's weight of a phrase in a chunk stays below it). Computed once a search, not once a row."""
    return sorted(((r, v * 2.2 / r) for r, v in zip(ratios, idf, strict=True) if r), reverse=True)


def _bound(own_score: float, parts: list[tuple[float, float]]) -> float:
    """The most a chunk scoring at most ``own_score`` in its table can score among all the tables.

    Its own score is the sum of its phrases' parts, each at most that phrase's cap (``_parts``);
    here each part counts ``ratio`` times. The most is had by giving the own score to the phrases
    of the highest ratios first, each up to its cap.
    """
    most, left = 0.0, own_score
    for ratio, cap in parts:
        part = min(left, cap)
        most, left = most + ratio * part, left - part
        if left <= 0:
            break
    return most * (1 + 1e-9)


def _best_first(row: dict[str, Any]) -> tuple[float, str, int]:
    return (-row["score"], row["document_id"], row["position"])


def _fts_search_one(
    conn: Connection, table: str, expression: str, kb: str, where: DocumentFilter, limit: int
) -> list[Any]:
    depth, deepest = limit + _FTS_SLACK, (limit + _FTS_SLACK if where else _FTS_MAX_DEPTH)
    while depth <= deepest:
        top = keyword.ranked(conn, table, expression, depth)
        rows = _chunk_rows(conn, dict(top), [kb], where)
        if len(rows) >= limit or len(top) < depth:
            return rows[:limit]
        depth *= 8
    clause, params = scope([kb], where)
    sql = f"""
        SELECT c.id, c.document_id, c.kb, c.position, c.heading_path, c.headings, c.text, d.title,
               c.source_location, d.original_filename, -bm25({table}) AS score
        FROM {table} JOIN chunks c ON c.id = {table}.rowid JOIN documents d ON d.id = c.document_id
        WHERE {table} MATCH ? AND {clause}
        ORDER BY bm25({table}), c.document_id, c.position
        LIMIT ?"""
    return [dict(row) for row in conn.execute(sql, [expression, *params, limit])]


def fts_matches_more_than(conn: Connection, expression: str, count: int, kbs: Sequence[str] | None = None) -> bool:
    """Whether more than ``count`` chunks (of ``kbs``, or any knowledge base) match: a bounded walk."""
    return keyword.matches_more_than(conn, expression, count, kbs)


def _chunk_rows(
    conn: Connection, scores: dict[int, float], kbs: Sequence[str], where: DocumentFilter
) -> list[dict[str, Any]]:
    """Passage rows for the given chunk ids inside the scope, best score first."""
    if not scores:
        return []
    clause, params = scope(kbs, where)
    rows = conn.execute(
        f"""SELECT c.id, c.document_id, c.kb, c.position, c.heading_path, c.headings, c.text, d.title,
                   c.source_location, d.original_filename
            FROM chunks c JOIN documents d ON d.id = c.document_id
            WHERE c.id IN ({", ".join("?" * len(scores))}) AND {clause}""",
        [*scores, *params],
    ).fetchall()
    found = [{**dict(zip(row.keys(), row, strict=True)), "score": scores[row["id"]]} for row in rows]
    return sorted(found, key=lambda r: (-r["score"], r["document_id"], r["position"]))


def _lower(*terms: str) -> str:
    """The SQL function that lower-cases text for ``terms``: SQLite's own (ASCII letters only, in C)
    when they are ASCII, else Python's, registered by ``db.connect`` (a call per row)."""
    return "lower" if all(term.isascii() for term in terms) else "unicode_lower"


def substring_search(
    conn: Connection,
    terms: Sequence[str],
    operator: str,
    kbs: Sequence[str],
    where: DocumentFilter,
    limit: int,
    scan_limit: int,
) -> list[Any]:
    """Chunks containing the terms as substrings (partial words, single CJK characters).

    Scans at most ``scan_limit`` matching chunks; ranks by occurrences per 1,000 characters.
    """
    clause, params = scope(kbs, where)
    haystack = f"{_lower(*terms)}(c.headings || ' ' || c.text)"
    tests = [f"instr({haystack}, ?) > 0" for _ in terms]
    counts = " + ".join(f"(length({haystack}) - length(replace({haystack}, ?, ''))) / length(?)" for _ in terms)
    lowered = [t.lower() for t in terms]
    sql = f"""
        SELECT * FROM (
            SELECT c.id, c.document_id, c.kb, c.position, c.heading_path, c.text, d.title,
                   c.source_location, d.original_filename, 1000.0 * ({counts}) / (length(c.text) + 1) AS score
            FROM chunks c JOIN documents d ON d.id = c.document_id
            WHERE {clause} AND ({f" {operator} ".join(tests)})
            LIMIT ?)
        ORDER BY score DESC, document_id, position LIMIT ?"""
    count_params = [p for t in lowered for p in (t, t)]
    return conn.execute(sql, [*count_params, *params, *lowered, scan_limit, limit]).fetchall()


# -- history -----------------------------------------------------------------------------------


def audit(
    conn: Connection,
    event: str,
    kb: str,
    actor: str,
    document_id: str | None = None,
    details: dict[str, Any] | None = None,
) -> None:
    conn.execute(
        "INSERT INTO audit_log (at, event, kb, document_id, actor, details) VALUES (?, ?, ?, ?, ?, ?)",
        (utc_now(), event, kb, document_id, actor, json.dumps(details or {}, ensure_ascii=False)),
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
        "INSERT INTO mcp_invocations (at, tool, client, duration_ms, outcome, error_code) VALUES (?, ?, ?, ?, ?, ?)",
        (at or utc_now(), tool, client, duration_ms, outcome, error_code),
    )


def audit_events(conn: Connection, kb: str | None, limit: int) -> list[Any]:
    where, params = ("WHERE kb = ?", [kb]) if kb is not None else ("", [])
    sql = f"SELECT * FROM (SELECT * FROM audit_log {where} ORDER BY id DESC LIMIT ?) ORDER BY id"
    return conn.execute(sql, [*params, limit]).fetchall()


def document_events(conn: Connection, kb: str, document_id: str, event: str) -> list[Any]:
    sql = "SELECT * FROM audit_log WHERE kb = ? AND document_id = ? AND event = ? ORDER BY id"
    return conn.execute(sql, (kb, document_id, event)).fetchall()


def invocations(conn: Connection, limit: int) -> list[Any]:
    sql = "SELECT * FROM (SELECT * FROM mcp_invocations ORDER BY id DESC LIMIT ?) ORDER BY id"
    return conn.execute(sql, (limit,)).fetchall()


# -- verification ------------------------------------------------------------------------------


def verify_fts(conn: Connection) -> list[str]:
    """Problems of every knowledge base's full-text table: integrity, and rowids ⇔ chunk ids."""
    return keyword.verify(conn)


def has_fts5(conn: Connection) -> bool:
    try:
        conn.execute("CREATE VIRTUAL TABLE temp.fts5_probe USING fts5(x)")
        conn.execute("DROP TABLE temp.fts5_probe")
    except database_errors():
        return False
    return True
