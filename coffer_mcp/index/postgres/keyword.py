"""Keyword search in PostgreSQL: FTS5's BM25, computed in SQL over a postings table.

Ranking must match the SQLite index, so this is not ``ts_rank`` but FTS5's own ``bm25()``:

    score(chunk) = Σ over the query's phrases  idf · tf · (k1 + 1) / (tf + k1 · (1 - b + b · dl / avgdl))
    idf = ln((N - n + 0.5) / (n + 0.5)), or 1e-6 when that is ≤ 0;  k1 = 1.2, b = 0.75

with ``N`` the chunks of the whole index (every knowledge base, as FTS5 counts its rows), ``n``
those holding the phrase, ``dl`` a chunk's length in tokens and ``avgdl`` the mean length; each
phrase counts once per occurrence in the query (FTS5 scores ``"a" AND "a"`` twice). Terms are cut
from ``fts.search_text`` by ``tokens.terms``, FTS5's tokenizer rebuilt in Python, and each query
term goes through the same function, as a quoted phrase in an FTS5 ``MATCH`` does.

``postings`` holds (term, chunk, tf, dl); ``keyword_stats`` per knowledge base its chunks and
tokens (a row per knowledge base, so writers of different ones never wait on each other). A phrase
of several tokens (``हिन्दी`` is three, as FTS5 splits at vowel signs) matches where its tokens are
adjacent: postings keep no positions, so such a phrase is checked by re-tokenizing the chunks
holding all its tokens (exact, slower; only text with separating marks yields such phrases).
A term longer than ``_MAX_TERM_BYTES`` is stored by its hash (a B-tree entry has a size limit).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Sequence
from typing import Any

from coffer_mcp.index.fts import search_text
from coffer_mcp.index.postgres.connection import Connection
from coffer_mcp.index.postgres.tokens import term_counts, terms

__all__ = [
    "add_postings",
    "check",
    "matches_more_than",
    "rebuild",
    "remove_postings",
    "search",
    "substring_search",
]

_MAX_TERM_BYTES = 512
_SLACK = 16
_MAX_DEPTH = 4096

_PASSAGE = "c.id, c.document_id, c.kb, c.position, c.heading_path, c.text, d.title"

# Every matching chunk's BM25, in one statement (one snapshot of postings and statistics).
# %(terms)s: one term per single-token phrase (NULL for the others); %(hit_*)s: the matches of the
# multi-token phrases, found in Python. Arithmetic in FTS5's order, so scores agree to the last bits.
_SCORED = """
WITH q AS (
    SELECT i::int AS i, term FROM unnest(%(terms)s::text[]) WITH ORDINALITY AS q(term, i)
), hits AS MATERIALIZED (
    SELECT q.i, p.chunk_id, p.tf, p.dl FROM q JOIN postings p ON p.term = q.term
    UNION ALL
    SELECT * FROM unnest(%(hit_i)s::int[], %(hit_chunk)s::bigint[], %(hit_tf)s::int[], %(hit_dl)s::int[])
), stats AS (
    SELECT coalesce(sum(chunks), 0)::float8 AS n, coalesce(sum(tokens), 0)::float8 AS tokens FROM keyword_stats
), ratio AS (
    SELECT q.i, (s.n - count(h.chunk_id) + 0.5::float8) / (count(h.chunk_id) + 0.5::float8) AS x
    FROM q CROSS JOIN stats s LEFT JOIN hits h ON h.i = q.i
    GROUP BY q.i, s.n
), idf AS (
    SELECT i, CASE WHEN x > 1 THEN ln(x) ELSE 1e-6::float8 END AS w FROM ratio
), scored AS (
    SELECT h.chunk_id, count(*) AS matched,
           sum(idf.w * (h.tf::float8 * (1.2::float8 + 1.0::float8))
               / (h.tf::float8 + 1.2::float8 * (1::float8 - 0.75::float8 + 0.75::float8 * h.dl::float8
                                                 / (s.tokens / nullif(s.n, 0))))) AS score
    FROM hits h JOIN idf ON idf.i = h.i CROSS JOIN stats s
    GROUP BY h.chunk_id
)
"""


# -- writing -----------------------------------------------------------------------------------


def add_postings(conn: Connection, kb: str, chunks: Sequence[tuple[int, Counter[str], int]]) -> None:
    """Index ``(chunk id, term counts, length)`` of new chunks of ``kb``."""
    with conn.cursor() as cursor, cursor.copy("COPY postings (term, chunk_id, tf, dl) FROM STDIN") as copy:
        for chunk_id, counts, length in chunks:
            for term, tf in counts.items():
                copy.write_row((_key(term), chunk_id, tf, length))
    conn.execute(
        "INSERT INTO keyword_stats AS s (kb, chunks, tokens) VALUES (%s, %s, %s) ON CONFLICT (kb) DO UPDATE "
        "SET chunks = s.chunks + excluded.chunks, tokens = s.tokens + excluded.tokens",
        (kb, len(chunks), sum(length for _, _, length in chunks)),
    )


def remove_postings(conn: Connection, doomed: str, params: Sequence[Any]) -> None:
    """Unindex the chunks ``doomed`` (a ``SELECT id FROM chunks ...``) selects, before they are deleted."""
    conn.execute(f"DELETE FROM postings WHERE chunk_id IN ({doomed})", params)
    conn.execute(
        f"""INSERT INTO keyword_stats AS s (kb, chunks, tokens)
            SELECT kb, -count(*), -coalesce(sum(length), 0) FROM chunks WHERE id IN ({doomed}) GROUP BY kb
            ON CONFLICT (kb) DO UPDATE SET chunks = s.chunks + excluded.chunks, tokens = s.tokens + excluded.tokens""",
        params,
    )


def _key(term: str) -> str:
    if len(term.encode("utf-8")) <= _MAX_TERM_BYTES:
        return term
    return "~" + hashlib.sha256(term.encode("utf-8")).hexdigest()  # "~" is never a token character


# -- searching ---------------------------------------------------------------------------------


def search(
    conn: Connection,
    query_terms: Sequence[str],
    operator: str,
    kbs: Sequence[str],
    doc_ids: Sequence[str] | None,
    limit: int,
) -> list[dict[str, Any]]:
    """Chunks matching the terms (all, or any), best BM25 first, then by document and position.

    As on SQLite, the best ``limit`` (plus slack for ties) of the whole index are ranked first and
    only those joined and filtered to the scope; when the scope leaves too few, the look goes
    deeper, then falls back to ranking inside the scope.
    """
    if operator not in ("AND", "OR"):
        raise ValueError(operator)
    params = _phrases(conn, query_terms, operator)
    if params is None or limit <= 0:
        return []
    depth = limit + _SLACK
    while depth <= _MAX_DEPTH:
        top = conn.execute(
            _SCORED + "SELECT chunk_id, score FROM scored WHERE matched >= %(need)s "
            "ORDER BY score DESC, chunk_id LIMIT %(depth)s",
            {**params, "depth": depth},
        ).fetchall()
        rows = _passages(conn, {row["chunk_id"]: row["score"] for row in top}, kbs, doc_ids)
        if len(rows) >= limit or len(top) < depth:
            return rows[:limit]
        depth *= 8
    scope, scope_params = _scope(kbs, doc_ids)
    sql = (
        _SCORED + f"SELECT {_PASSAGE}, s.score FROM scored s JOIN chunks c ON c.id = s.chunk_id "
        f"JOIN documents d ON d.id = c.document_id WHERE s.matched >= %(need)s AND {scope} "
        "ORDER BY s.score DESC, c.document_id, c.position LIMIT %(limit)s"
    )
    return conn.execute(sql, {**params, **scope_params, "limit": limit}).fetchall()


def matches_more_than(conn: Connection, term: str, count: int) -> bool:
    """Whether more than ``count`` chunks (in any knowledge base) hold the term: a bounded walk."""
    phrase = terms(term)
    if not phrase:
        return False
    if len(phrase) > 1:
        return len(_phrase_hits(conn, phrase)) > count
    row = conn.execute(
        "SELECT count(*) AS n FROM (SELECT 1 FROM postings WHERE term = %s LIMIT %s) AS found",
        (_key(phrase[0]), count + 1),
    ).fetchone()
    return row is not None and row["n"] > count


def _phrases(conn: Connection, query_terms: Sequence[str], operator: str) -> dict[str, Any] | None:
    """The statement's parameters for the query's phrases, or None when nothing can match.

    As in FTS5, a term with no token (only separators) matches nothing: it empties an AND and
    drops out of an OR.
    """
    phrases = [terms(term) for term in query_terms]
    if operator == "AND" and not all(phrases):
        return None
    phrases = [phrase for phrase in phrases if phrase]
    if not phrases:
        return None
    single: list[str | None] = []
    hit_i, hit_chunk, hit_tf, hit_dl = [], [], [], []
    found: dict[tuple[str, ...], list[tuple[int, int, int]]] = {}
    for i, phrase in enumerate(phrases, 1):
        if len(phrase) == 1:
            single.append(_key(phrase[0]))
            continue
        single.append(None)
        if tuple(phrase) not in found:
            found[tuple(phrase)] = _phrase_hits(conn, phrase)
        for chunk_id, tf, dl in found[tuple(phrase)]:
            hit_i.append(i)
            hit_chunk.append(chunk_id)
            hit_tf.append(tf)
            hit_dl.append(dl)
    return {
        "terms": single,
        "hit_i": hit_i,
        "hit_chunk": hit_chunk,
        "hit_tf": hit_tf,
        "hit_dl": hit_dl,
        "need": len(phrases) if operator == "AND" else 1,
    }


def _phrase_hits(conn: Connection, phrase: list[str]) -> list[tuple[int, int, int]]:
    """``(chunk id, occurrences, length)`` of the chunks where the phrase's tokens are adjacent."""
    distinct = sorted({_key(term) for term in phrase})
    rows = conn.execute(
        """SELECT id, headings, text, length FROM chunks WHERE id IN (
               SELECT chunk_id FROM postings WHERE term = ANY(%s::text[]) GROUP BY chunk_id HAVING count(*) = %s)
           ORDER BY id""",
        (distinct, len(distinct)),
    ).fetchall()
    hits = []
    width = len(phrase)
    for row in rows:
        tokens = terms(search_text(f"{row['headings']}\n{row['text']}"))
        occurrences = sum(tokens[at : at + width] == phrase for at in range(len(tokens) - width + 1))
        if occurrences:
            hits.append((row["id"], occurrences, row["length"]))
    return hits


def _scope(kbs: Sequence[str], doc_ids: Sequence[str] | None) -> tuple[str, dict[str, Any]]:
    clause, params = "c.kb = ANY(%(kbs)s::text[])", {"kbs": list(kbs)}
    if doc_ids:
        clause += " AND c.document_id = ANY(%(doc_ids)s::text[])"
        params["doc_ids"] = list(doc_ids)
    return clause, params


def _passages(
    conn: Connection, scores: dict[int, float], kbs: Sequence[str], doc_ids: Sequence[str] | None
) -> list[dict[str, Any]]:
    """Passage rows for the given chunk ids inside the scope, best score first."""
    if not scores:
        return []
    scope, params = _scope(kbs, doc_ids)
    rows = conn.execute(
        f"SELECT {_PASSAGE} FROM chunks c JOIN documents d ON d.id = c.document_id "
        f"WHERE c.id = ANY(%(ids)s::bigint[]) AND {scope}",
        {**params, "ids": list(scores)},
    ).fetchall()
    found = [{**row, "score": scores[row["id"]]} for row in rows]
    return sorted(found, key=lambda r: (-r["score"], r["document_id"], r["position"]))


def substring_search(
    conn: Connection,
    query_terms: Sequence[str],
    operator: str,
    kbs: Sequence[str],
    doc_ids: Sequence[str] | None,
    limit: int,
    scan_limit: int,
) -> list[dict[str, Any]]:
    """Chunks holding the terms as substrings, by occurrences per 1,000 characters (as on SQLite:
    the text is lower-cased ASCII-only, the terms fully; at most ``scan_limit`` chunks are scanned)."""
    if operator not in ("AND", "OR"):
        raise ValueError(operator)
    if not query_terms:
        return []
    scope, params = _scope(kbs, doc_ids)
    lowered = {f"t{i}": term.lower() for i, term in enumerate(query_terms)}
    tests = f" {operator} ".join(f"strpos(h.text, %({name})s) > 0" for name in lowered)
    counts = " + ".join(
        f"(length(h.text) - length(replace(h.text, %({name})s, ''))) / nullif(length(%({name})s), 0)"
        for name in lowered
    )
    sql = f"""
        SELECT * FROM (
            SELECT {_PASSAGE}, 1000.0::float8 * ({counts}) / (length(c.text) + 1) AS score
            FROM chunks c JOIN documents d ON d.id = c.document_id
            CROSS JOIN LATERAL (SELECT ascii_lower(c.headings || ' ' || c.text) AS text) h
            WHERE {scope} AND ({tests})
            ORDER BY c.id
            LIMIT %(scan_limit)s) AS found
        ORDER BY score DESC, document_id, position LIMIT %(limit)s"""
    return conn.execute(sql, {**params, **lowered, "scan_limit": scan_limit, "limit": limit}).fetchall()


# -- verification ------------------------------------------------------------------------------


def check(conn: Connection) -> list[str]:
    """Problems of the keyword index: postings without a chunk, chunks without postings, statistics."""
    problems = []
    orphans = _count(
        conn,
        "SELECT count(DISTINCT chunk_id) AS n FROM postings p "
        "WHERE NOT EXISTS (SELECT 1 FROM chunks c WHERE c.id = p.chunk_id)",
    )
    if orphans:
        problems.append(f"keyword index: {orphans} entries without a chunk")
    missing = _count(
        conn,
        "SELECT count(*) AS n FROM chunks c WHERE c.length > 0 "
        "AND NOT EXISTS (SELECT 1 FROM postings p WHERE p.chunk_id = c.id)",
    )
    if missing:
        problems.append(f"keyword index: {missing} chunks not indexed")
    off = conn.execute(
        """SELECT coalesce(a.kb, s.kb) AS kb FROM
               (SELECT kb, count(*) AS chunks, sum(length) AS tokens FROM chunks GROUP BY kb) a
               FULL JOIN (SELECT * FROM keyword_stats WHERE chunks <> 0 OR tokens <> 0) s ON s.kb = a.kb
           WHERE a.chunks IS DISTINCT FROM s.chunks OR a.tokens IS DISTINCT FROM s.tokens
           ORDER BY 1"""
    ).fetchall()
    if off:
        problems.append(f"keyword index: statistics wrong for {', '.join(row['kb'] for row in off)}")
    return problems


def rebuild(conn: Connection, batch: int = 1000) -> int:
    """Rebuild every posting, chunk length and statistic from the chunks' text (repairs any drift)."""
    conn.execute("DELETE FROM postings")
    conn.execute("DELETE FROM keyword_stats")
    after, done = 0, 0
    while True:
        rows = conn.execute(
            "SELECT id, kb, headings, text FROM chunks WHERE id > %s ORDER BY id LIMIT %s", (after, batch)
        ).fetchall()
        if not rows:
            return done
        by_kb: dict[str, list[tuple[int, Counter[str], int]]] = {}
        for row in rows:
            counts, length = term_counts(search_text(f"{row['headings']}\n{row['text']}"))
            by_kb.setdefault(row["kb"], []).append((row["id"], counts, length))
        for kb, indexed in by_kb.items():
            conn.execute(
                "UPDATE chunks SET length = v.length FROM unnest(%s::bigint[], %s::int[]) AS v(id, length) "
                "WHERE chunks.id = v.id",
                ([chunk_id for chunk_id, _, _ in indexed], [length for _, _, length in indexed]),
            )
            add_postings(conn, kb, indexed)
        after, done = rows[-1]["id"], done + len(rows)


def _count(conn: Connection, sql: str) -> int:
    row = conn.execute(sql).fetchone()
    return 0 if row is None else int(row["n"])
