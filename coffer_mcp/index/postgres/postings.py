"""The keyword index's postings in PostgreSQL: written, checked, packed and rebuilt.

``postings`` holds (kb, term, chunk, tf, dl), keyed so that a term's postings in one knowledge base
are one index range; ``keyword_stats`` per knowledge base its chunks and tokens (a row per knowledge
base, so writers of different ones never wait on each other). Terms are cut from
``fts.search_text`` by ``tokens.terms``, FTS5's tokenizer rebuilt in Python. Postings keep no
positions, so each chunk also keeps its terms in order (``chunks.terms``) for phrases, and each
adjacent pair of function words is a posting term of its own (``"for the"``, holding a space no
token has). A term longer than ``_MAX_TERM_BYTES`` is stored by its hash (a B-tree entry has a size
limit). Searching them is ``keyword.py``'s.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

from coffer_mcp.errors import counted
from coffer_mcp.index.fts import STOPWORDS, search_text
from coffer_mcp.index.postgres.connection import Connection, clean
from coffer_mcp.index.tokens import terms
from coffer_mcp.models import Chunk

__all__ = [
    "FUNCTION_TERMS",
    "check",
    "delete_chunks",
    "function_pairs",
    "insert_chunks",
    "loose",
    "pack",
    "rebuild",
    "term_key",
]

_MAX_TERM_BYTES = 512

# The function words' index terms (stemmed: "was" is "wa"). Changing STOPWORDS changes which pairs
# the postings hold: it needs a migration that writes them again (0007_function_word_pairs).
FUNCTION_TERMS = frozenset(term for word in STOPWORDS for term in terms(word))

_STATS_ADD = (
    "ON CONFLICT (kb) DO UPDATE SET chunks = keyword_stats.chunks + excluded.chunks, "
    "tokens = keyword_stats.tokens + excluded.tokens"
)


# A document's postings go as three strings, split by the server, not as three arrays: psycopg
# spends ~0.6 ms per document (191 postings) putting the arrays together in Python, the strings
# ~0.04 ms. A term is never cut at _TERM_SEPARATOR: it separates tokens (tokens.py), and the pairs
# of function words hold a space.
_TERM_SEPARATOR = "\x1f"


def _postings(postings: tuple[list[str], list[int], list[int]]) -> dict[str, str]:
    """A statement's postings ``(terms, keys, tfs)`` as the strings ``_unnest_postings`` splits."""
    terms, keys, tfs = postings
    joined = _TERM_SEPARATOR.join(terms)
    if joined.count(_TERM_SEPARATOR) != max(len(terms) - 1, 0):
        raise ValueError("an index term holds the term separator")  # tokens.py would have cut it there
    return {"terms": joined, "keys": ",".join(map(str, keys)), "tfs": ",".join(map(str, tfs))}


def _unnest_postings(key: str) -> str:
    """The rows ``(term, key, tf)`` of ``_postings``' strings, the key a chunk's position or id (``key``'s type)."""
    return (
        f"unnest(string_to_array(%(terms)s, E'\\x{ord(_TERM_SEPARATOR):02x}'), "
        f"string_to_array(%(keys)s, ',')::{key}[], string_to_array(%(tfs)s, ',')::int[])"
    )


def insert_chunks(conn: Connection, documents: Sequence[tuple[str, str, Sequence[Chunk]]]) -> int:
    """Insert the chunks of documents ``(kb, id, chunks)`` with their postings and their knowledge
    bases' share of the statistics, in one statement whatever their number; returns how many.

    The chunks go as one JSON array (``json.dumps`` builds it in C, where psycopg would build an
    array per column in Python), each numbered (``n``), and their postings as ``_postings``' strings
    keyed by that number; the chunk ids are drawn in the chunks' order. A group commit's 64
    documents so cost one statement and one update of each statistics row, not 64.
    """
    rows: list[dict[str, Any]] = []
    terms_at: tuple[list[str], list[int], list[int]] = ([], [], [])
    for kb, doc_id, chunks in documents:
        for chunk in chunks:
            joined = "\n".join(chunk.heading_path)
            counts, length, sequence = _analyzed(f"{joined}\n{chunk.text}")
            place = chunk.source_location
            rows.append(
                {
                    "n": len(rows),
                    "document_id": doc_id,
                    "kb": kb,
                    "position": chunk.position,
                    "heading_path": json.dumps(list(chunk.heading_path), ensure_ascii=False),
                    "headings": clean(joined),
                    "text": clean(chunk.text),
                    "length": length,
                    "terms": sequence,
                    "source_location": json.dumps(place, ensure_ascii=False) if place else None,
                }
            )
            for term, tf in counts.items():
                terms_at[0].append(term)
                terms_at[1].append(len(rows) - 1)
                terms_at[2].append(tf)
    if not rows:
        return 0
    conn.execute(
        f"""WITH new AS MATERIALIZED (
                SELECT nextval('chunk_ids') AS id, u.*
                FROM json_to_recordset(%(chunks)s::json) AS u(
                    n int, document_id text, kb text, position int, heading_path text, headings text, text text,
                    length int, terms text, source_location text
                )
            ), written AS (
                INSERT INTO chunks (
                    id, document_id, kb, position, heading_path, headings, text, length, terms, source_location
                )
                SELECT id, document_id, kb, position, heading_path, headings, text, length, terms, source_location
                FROM new
            ), indexed AS (
                INSERT INTO postings (kb, term, chunk_id, tf, dl)
                SELECT new.kb, p.term, new.id, p.tf, new.length
                FROM {_unnest_postings("int")} AS p(term, n, tf)
                JOIN new ON new.n = p.n
            )
            INSERT INTO keyword_stats (kb, chunks, tokens)
            SELECT kb, count(*), sum(length) FROM new GROUP BY kb {_STATS_ADD}""",
        {"chunks": json.dumps(rows, ensure_ascii=False), **_postings(terms_at)},
    )
    return len(rows)


def delete_chunks(conn: Connection, where: str, params: Sequence[Any]) -> list[int]:
    """Delete the chunks ``where`` selects with their postings and share of the statistics, in one
    statement; returns their ids (their vectors are the caller's)."""
    row = conn.execute(
        f"""WITH gone AS (
                DELETE FROM chunks WHERE {where} RETURNING id, kb, length
            ), unindexed AS (
                DELETE FROM postings WHERE chunk_id IN (SELECT id FROM gone)
            ), uncounted AS (
                INSERT INTO keyword_stats (kb, chunks, tokens)
                SELECT kb, -count(*), -coalesce(sum(length), 0) FROM gone GROUP BY kb {_STATS_ADD}
            )
            SELECT coalesce(array_agg(id), '{{}}') AS ids FROM gone""",
        params,
    ).fetchone()
    return [] if row is None else list(row["ids"])


def _analyzed(text: str) -> tuple[Counter[str], int, str]:
    """A chunk's ``({posting term: occurrences}, length in tokens, its terms in order space-separated)``
    from its headings and text; the postings include its pairs of function words, the last is
    ``chunks.terms`` for phrases."""
    found = [term_key(term) for term in terms(search_text(text))]
    return Counter(found) + function_pairs(found), len(found), " ".join(found)


def function_pairs(keys: Sequence[str]) -> Counter[str]:
    """Each pair of adjacent function words in ``keys`` as one term (``"for the"``) with its
    occurrences, overlapping ones too (``"to to"`` twice in ``to to to``, as FTS5 counts them)."""
    return Counter(f"{a} {b}" for a, b in itertools.pairwise(keys) if a in FUNCTION_TERMS and b in FUNCTION_TERMS)


def term_key(term: str) -> str:
    """The posting term for an index term: itself, or its hash when too long for a B-tree entry."""
    if len(term.encode("utf-8")) <= _MAX_TERM_BYTES:
        return term
    return "~" + hashlib.sha256(term.encode("utf-8")).hexdigest()  # "~" is never a token character


# -- verification ------------------------------------------------------------------------------


def check(conn: Connection) -> list[str]:
    """Problems of the keyword index: postings without a chunk, chunks without postings, statistics."""
    problems = []
    orphans = _count(
        conn,
        "SELECT count(DISTINCT chunk_id) AS n FROM postings p "
        "WHERE NOT EXISTS (SELECT 1 FROM chunks c WHERE c.id = p.chunk_id AND c.kb = p.kb)",
    )
    if orphans:  # or filed under another knowledge base than their chunk's
        problems.append(f"keyword index: {counted(orphans, 'entry', 'entries')} without a chunk")
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


# A B-tree leaf page: a block less its 24-byte header and 16-byte special space, filled to 90 % by a
# build. An entry: its 8-byte header with kb and term, padded to 8 bytes for the bigint; then
# chunk_id, tf and dl, and its 4-byte line pointer.
_PAGE_OVERHEAD_BYTES = 24 + 16
_BUILD_FILL = 0.9
_ENTRY_FIXED_BYTES = 8 + 4 + 4 + 4
LOOSE_RATIO = 1.4  # packed when the postings index takes this many times the pages of a fresh build
LOOSE_MIN_PAGES = 1024  # 8 MB: below, a loose index costs nothing worth a rebuild


def loose(conn: Connection) -> bool:
    """Whether the postings index takes over ``LOOSE_RATIO`` times the pages it would if built afresh.

    Postings arrive in chunk order, each term's at the end of its range in the key, so each page
    split leaves two half-full pages that later inserts seldom fill: a rebuild of 100,000 chunks
    left its leaves 54 % full, 457 MB against 262 MB built afresh. Random inserts settle near 70 %,
    under the ratio. Needs fresh statistics (``VACUUM ANALYZE``): the entries are the table's
    ``reltuples``, their kb and term widths ``pg_stats``'.
    """
    row = conn.execute(
        """SELECT current_setting('block_size')::int AS block,
                  pg_relation_size('postings_pkey') / current_setting('block_size')::int AS pages,
                  (SELECT reltuples FROM pg_class WHERE oid = 'postings'::regclass) AS entries,
                  (SELECT sum(avg_width) FROM pg_stats
                   WHERE schemaname = current_schema() AND tablename = 'postings' AND attname IN ('kb', 'term'))
                   AS width"""
    ).fetchone()
    if row is None or row["pages"] < LOOSE_MIN_PAGES or row["entries"] <= 0 or row["width"] is None:
        return False
    entry = -(-(8 + int(row["width"])) // 8) * 8 + _ENTRY_FIXED_BYTES
    packed_leaf = (row["block"] - _PAGE_OVERHEAD_BYTES) * _BUILD_FILL
    return bool(row["pages"] > LOOSE_RATIO * row["entries"] * entry / packed_leaf)


def pack(conn: Connection) -> None:
    """Rebuild the postings index by ``REINDEX CONCURRENTLY``: reads and writes go on meanwhile.

    A pack that died half-way (its process killed) left an invalid copy, ``postings_pkey_ccnew``,
    that every write still maintains: it is dropped first. The caller holds the lock that keeps
    other processes from packing at the same time (whose copy, while built, is invalid too).
    """
    leftovers = conn.execute(
        """SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
           WHERE i.indrelid = 'postings'::regclass AND NOT i.indisvalid"""
    ).fetchall()
    for row in leftovers:
        conn.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{row["relname"]}"')
    conn.execute("SET maintenance_work_mem = '256MB'")
    try:
        conn.execute("REINDEX INDEX CONCURRENTLY postings_pkey")
    finally:
        conn.execute("RESET maintenance_work_mem")


def rebuild(conn: Connection, batch: int = 1000) -> int:
    """Rebuild every posting, chunk length and statistic from the chunks' text (repairs any drift)."""
    conn.execute("DELETE FROM postings")
    conn.execute("DELETE FROM keyword_stats")
    after, done = 0, 0
    while True:
        rows = conn.execute(
            "SELECT id, headings, text FROM chunks WHERE id > %s ORDER BY id LIMIT %s", (after, batch)
        ).fetchall()
        if not rows:
            break
        ids: list[int] = []
        lengths: list[int] = []
        sequences: list[str] = []
        terms_of: tuple[list[str], list[int], list[int]] = ([], [], [])
        for row in rows:
            counts, length, sequence = _analyzed(f"{row['headings']}\n{row['text']}")
            ids.append(row["id"])
            lengths.append(length)
            sequences.append(sequence)
            for term, tf in counts.items():
                terms_of[0].append(term)
                terms_of[1].append(row["id"])
                terms_of[2].append(tf)
        conn.execute(
            f"""WITH measured AS (
                   UPDATE chunks SET length = m.length, terms = m.terms
                   FROM unnest(%(ids)s::bigint[], %(lengths)s::int[], %(sequences)s::text[]) AS m(id, length, terms)
                   WHERE chunks.id = m.id RETURNING chunks.id, chunks.kb, chunks.length
               )
               INSERT INTO postings (kb, term, chunk_id, tf, dl)
               SELECT measured.kb, p.term, p.chunk_id, p.tf, measured.length
               FROM {_unnest_postings("bigint")} AS p(term, chunk_id, tf)
               JOIN measured ON measured.id = p.chunk_id""",
            {
                "ids": ids,
                "lengths": lengths,
                "sequences": sequences,
                **_postings(terms_of),
            },
        )
        after, done = rows[-1]["id"], done + len(rows)
    conn.execute(
        "INSERT INTO keyword_stats (kb, chunks, tokens) SELECT kb, count(*), coalesce(sum(length), 0) FROM chunks "
        "GROUP BY kb"
    )
    return done


def _count(conn: Connection, sql: str) -> int:
    row = conn.execute(sql).fetchone()
    return 0 if row is None else int(row["n"])
