"""Keyword search in PostgreSQL: FTS5's BM25, computed in SQL over a postings table.

Ranking must match the SQLite index, so this is not ``ts_rank`` but FTS5's own ``bm25()``:

    score(chunk) = Σ over the query's phrases  idf · tf · (k1 + 1) / (tf + k1 · (1 - b + b · dl / avgdl))
    idf = ln((N - n + 0.5) / (n + 0.5)), or 1e-6 when that is ≤ 0;  k1 = 1.2, b = 0.75

with ``N`` the chunks of the chunk's knowledge base (the SQLite index has a FTS5 table per
knowledge base, and FTS5 counts its rows), ``n`` those of them holding the phrase, ``dl`` a chunk's
length in tokens and ``avgdl`` the knowledge base's mean length; each phrase counts once per
occurrence in the query (FTS5 scores ``"a" AND "a"`` twice). A knowledge base's scores so depend on
its own chunks only. A search of several ranks as one collection of them would: ``N`` and ``n`` are
summed over the searched knowledge bases (``avgdl`` stays each one's own), as the SQLite index
rescales FTS5's scores (docs/design.md). Terms are cut
from ``fts.search_text`` by ``tokens.terms``, FTS5's tokenizer rebuilt in Python, and each query
term goes through the same function, as a quoted phrase in an FTS5 ``MATCH`` does.

``postings`` holds (kb, term, chunk, tf, dl), keyed so that a term's postings in one knowledge base
are one index range; ``keyword_stats`` per knowledge base its chunks and tokens (a row per knowledge
base, so writers of different ones never wait on each other). A phrase
of several tokens (a query of function words only, ``"for the"``, or ``हिन्दी``, three tokens as
FTS5 splits at vowel signs) matches where its tokens are adjacent: postings keep no positions, so
each chunk also keeps its terms in order (``chunks.terms``), searched in SQL. Function words are in
most chunks, so each adjacent pair of them is a posting term of its own (``"for the"``, holding a
space no token has): a phrase of two is one term's postings, a longer one checked only in the
chunks holding all its pairs.
A term longer than ``_MAX_TERM_BYTES`` is stored by its hash (a B-tree entry has a size limit).
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

from coffer_mcp.errors import counted
from coffer_mcp.index.fts import STOPWORDS, search_text, settled
from coffer_mcp.index.port import DocumentFilter
from coffer_mcp.index.postgres.connection import Connection, clean, lower_sql
from coffer_mcp.index.postgres.filters import scope
from coffer_mcp.index.tokens import terms
from coffer_mcp.models import Chunk

__all__ = [
    "FUNCTION_TERMS",
    "TermCounts",
    "check",
    "delete_chunks",
    "insert_chunks",
    "loose",
    "matches_more_than",
    "pack",
    "pruned_or",
    "rebuild",
    "search",
    "substring_search",
]

_MAX_TERM_BYTES = 512
_SLACK = 16
_MAX_DEPTH = 4096
WHOLE_POSTINGS = 1024  # a term in fewer chunks is never cut (pruned_or)
PRUNED_POSTINGS = 20_000  # nor are terms holding fewer postings in all

# The function words' index terms (stemmed: "was" is "wa"). Changing STOPWORDS changes which pairs
# the postings hold: it needs a migration that writes them again (0007_function_word_pairs).
FUNCTION_TERMS = frozenset(term for word in STOPWORDS for term in terms(word))

_PASSAGE = (
    "c.id, c.document_id, c.kb, c.position, c.heading_path, c.text, d.title, c.source_location, d.original_filename"
)

# One phrase's BM25 term for a posting, in FTS5's arithmetic (as in _SCORED): ``{x}`` is the
# phrase's (N - n + 0.5) / (n + 0.5) in the searched knowledge bases, ``{avgdl}`` the mean length of
# the posting's own.
_TERM_WEIGHT = """CASE WHEN {x} > 1 THEN ln({x}) ELSE 1e-6::float8 END * ({tf}::float8 * (1.2::float8 + 1.0::float8))
    / ({tf}::float8 + 1.2::float8 * (1::float8 - 0.75::float8 + 0.75::float8 * {dl}::float8 / {avgdl}))"""
_WEIGHTED_ROW = _TERM_WEIGHT.format(x="w.x", tf="w.tf", dl="w.dl", avgdl="w.avgdl")  # a ``weighted`` row's
_POSTING_WEIGHT = _TERM_WEIGHT.format(x="d.x", tf="p.tf", dl="p.dl", avgdl="d.avgdl")  # posting p of term d

# Every matching chunk's BM25 in the knowledge base %(kbs)s, in one statement (one snapshot of
# postings and statistics), from its N, avgdl and document frequencies.
# %(terms)s: one term per single-token phrase (NULL for the others); %(hit_*)s: the matches of the
# multi-token phrases, found in Python. Arithmetic in FTS5's order: each row carries its phrase's
# match count (df), so one pass over the postings gives every row its IDF, and one hashed
# aggregation sums each chunk's phrases (reading the postings twice, or sorting them by chunk to sum
# them in query order as FTS5 does, cost a fifth more at 100k chunks, measured). The hash join
# delivers them mostly but not always in query order, so a score may differ from FTS5's in its
# last bit (one chunk of a three-word SciFact query, found while measuring ``pruned_or``). Each
# term's postings are read through the primary key: the window in the LATERAL keeps the planner
# from a hash join over the whole table, which it picks while the table has no statistics yet
# (40 ms against 4 ms per SciFact query, measured).
_HITS = """
WITH q AS (
    SELECT i::int AS i, term FROM unnest(%(terms)s::text[]) WITH ORDINALITY AS q(term, i)
), stats AS (
    SELECT kb, chunks::float8 AS n, tokens::float8 AS tokens FROM keyword_stats WHERE kb = ANY(%(kbs)s::text[])
), hits AS (
    SELECT q.i, s.kb, p.chunk_id, p.tf, p.dl, p.df FROM q CROSS JOIN stats s
    CROSS JOIN LATERAL (
        SELECT chunk_id, tf, dl, count(*) OVER () AS df FROM postings WHERE kb = s.kb AND term = q.term
    ) p
    UNION ALL
    SELECT e.i, e.kb, e.chunk_id, e.tf, e.dl, count(*) OVER (PARTITION BY e.i, e.kb)
    FROM unnest(%(hit_i)s::int[], %(hit_kb)s::text[], %(hit_chunk)s::bigint[], %(hit_tf)s::int[], %(hit_dl)s::int[])
        AS e(i, kb, chunk_id, tf, dl)
)"""
_SUMMED = f"""
, scored AS (
    SELECT w.chunk_id, count(*) AS matched,
           sum({_WEIGHTED_ROW}) AS score
    FROM weighted w
    GROUP BY w.chunk_id
)
"""
_SCORED = f"""{_HITS}, weighted AS (
    SELECT h.chunk_id, h.tf, h.dl, (s.n - h.df + 0.5::float8) / (h.df + 0.5::float8) AS x,
           s.tokens / nullif(s.n, 0) AS avgdl
    FROM hits h JOIN stats s ON s.kb = h.kb
){_SUMMED}"""
# The same for several knowledge bases: each phrase's N and n summed over them (``together``; its
# pass over the hits is left out of a one-KB search, where they are the knowledge base's own).
_SCORED_TOGETHER = f"""{_HITS}, together AS (
    SELECT i, sum(df)::float8 AS df, (SELECT sum(n) FROM stats) AS n
    FROM (SELECT DISTINCT i, kb, df FROM hits) f GROUP BY i
), weighted AS (
    SELECT h.chunk_id, h.tf, h.dl, (t.n - t.df + 0.5::float8) / (t.df + 0.5::float8) AS x,
           s.tokens / nullif(s.n, 0) AS avgdl
    FROM hits h JOIN stats s ON s.kb = h.kb JOIN together t ON t.i = h.i
){_SUMMED}"""


# Each term's match count in each knowledge base, as the statements below take it: remembered by
# ``TermCounts`` with the knowledge base's write stamp, and counted again (an index-only count of
# its postings) where the stamp read in the statement's own snapshot differs, or none is known.
# The statements return the counts they used (rows without a chunk), for the next search.
_KNOWN = """known AS (
    SELECT * FROM unnest(%(known_kb)s::text[], %(known_term)s::text[], %(known_writes)s::bigint[],
                         %(known_df)s::bigint[]) AS k(kb, term, writes, df)
)"""
_DF = "coalesce(k.df, (SELECT count(*) FROM postings p WHERE p.kb = s.kb AND p.term = q.term))"
_KNOWN_JOIN = "LEFT JOIN known k ON k.kb = s.kb AND k.term = q.term AND k.writes = s.writes"

# The same scores for an AND of single-token phrases, read from the rarest term's postings: each
# term's match count in each knowledge base first (an index-only count), then the chunks holding
# the rarest one, then the other terms' postings of those chunks only, looked up by key. _SCORED
# reads every posting of every term, so a query that pairs a rare word with a common one ("cells"
# in 45,000 of 100,000 chunks) cost 60-100 ms where this costs 8-18 (docs/design.md). The
# ``OFFSET 0`` keeps the planner from turning the lookups back into a join over all the postings.
# Each chunk's phrases are summed in query order (``ORDER BY i``), as FTS5 sums them.
_SCORED_AND = f"""
WITH q AS (
    SELECT i::int AS i, term FROM unnest(%(terms)s::text[]) WITH ORDINALITY AS q(term, i)
), {_KNOWN}, counted AS MATERIALIZED (
    SELECT q.i, q.term, s.kb, s.writes, s.chunks::float8 AS n, s.tokens::float8 / nullif(s.chunks, 0) AS avgdl,
           {_DF} AS df
    FROM q CROSS JOIN keyword_stats s {_KNOWN_JOIN} WHERE s.kb = ANY(%(kbs)s::text[])
), candidates AS MATERIALIZED (
    SELECT r.kb, array_agg(p.chunk_id) AS ids
    FROM (SELECT DISTINCT ON (kb) kb, term FROM counted ORDER BY kb, df, i) r
    CROSS JOIN LATERAL (SELECT chunk_id FROM postings WHERE kb = r.kb AND term = r.term) p
    GROUP BY r.kb
), together AS (
    SELECT i, kb, term, avgdl,
           (sum(n) OVER w - sum(df::float8) OVER w + 0.5::float8) / (sum(df::float8) OVER w + 0.5::float8) AS x
    FROM counted WINDOW w AS (PARTITION BY i)
), weighted AS (
    SELECT d.i, p.chunk_id, p.tf, p.dl, d.x, d.avgdl
    FROM together d JOIN candidates c ON c.kb = d.kb
    CROSS JOIN LATERAL (
        SELECT chunk_id, tf, dl FROM postings WHERE kb = d.kb AND term = d.term AND chunk_id = ANY(c.ids) OFFSET 0
    ) p
), scored AS (
    SELECT w.chunk_id, count(*) AS matched,
           sum({_WEIGHTED_ROW} ORDER BY w.i) AS score
    FROM weighted w
    GROUP BY w.chunk_id
)
"""


_NO_COUNT = "NULL::text AS kb, NULL::text AS term, NULL::bigint AS writes, NULL::bigint AS df"
_TOP = "SELECT chunk_id, score FROM scored WHERE matched >= %(need)s ORDER BY score DESC, chunk_id LIMIT %(depth)s"
_TOP_AND_COUNTS = f"""
SELECT chunk_id, score, {_NO_COUNT} FROM ({_TOP}) t
UNION ALL
SELECT NULL, NULL, kb, term, writes, df FROM counted
"""

# The best %(depth)s chunks of an OR of single-token phrases without scoring every chunk that holds
# a common one: Fagin's threshold algorithm, in one round. Per knowledge base, each term's postings
# are counted (its n). A term in more than %(depth)s and %(whole)s chunks is common; when the
# common terms hold at least %(worth)s postings in all (fewer are cheaper to score than to prune),
# each is cut: only its %(depth)s best postings by its own weight are kept, where the other terms'
# are kept whole. The chunks kept are the candidates, scored in full: the kept postings of the whole
# terms, and a lookup by key of each cut term's. A chunk outside the candidates holds only cut
# terms, each weighing at most that term's last kept weight, so it ranks below the depth-th
# candidate when that one's score is above the sum of those last weights (per knowledge base, added
# in query order: floats add monotonically), or when its knowledge base has one cut term only (such
# a chunk then ranks below that term's last kept posting, itself a candidate with at least that
# score and a lower id). ``pruned_or`` checks that from the ``bound`` rows, and falls back to
# _SCORED when it fails. With nothing cut, every posting is scored here. Each chunk's phrases are
# summed in query order, as FTS5 sums them.
_PRUNED_OR = f"""
WITH q AS (
    SELECT i::int AS i, term FROM unnest(%(terms)s::text[]) WITH ORDINALITY AS q(term, i)
), {_KNOWN}, found AS MATERIALIZED (
    SELECT q.i, q.term, s.kb, s.writes, s.chunks, s.tokens, {_DF} AS df
    FROM q CROSS JOIN keyword_stats s {_KNOWN_JOIN} WHERE s.kb = ANY(%(kbs)s::text[])
), counted AS MATERIALIZED (
    SELECT * FROM (
        SELECT i, term, kb, df, df > greatest(%(depth)s, %(whole)s) AS common,
               tokens::float8 / nullif(chunks, 0) AS avgdl,
               (sum(chunks::float8) OVER w - sum(df::float8) OVER w + 0.5::float8)
                   / (sum(df::float8) OVER w + 0.5::float8) AS x
        FROM found WINDOW w AS (PARTITION BY i)
    ) f WHERE df > 0
), terms AS MATERIALIZED (
    SELECT c.*, c.common AND w.worth AS cut
    FROM counted c CROSS JOIN (
        SELECT coalesce(sum(df) FILTER (WHERE common), 0) >= %(worth)s AS worth FROM counted
    ) w
), kept AS MATERIALIZED (
    SELECT d.i, d.kb, true AS cut, t.chunk_id, t.w
    FROM terms d CROSS JOIN LATERAL (
        SELECT p.chunk_id, {_POSTING_WEIGHT} AS w
        FROM postings p WHERE p.kb = d.kb AND p.term = d.term
        ORDER BY w DESC, p.chunk_id LIMIT %(depth)s
    ) t
    WHERE d.cut
    UNION ALL
    SELECT d.i, d.kb, false, p.chunk_id, {_POSTING_WEIGHT}
    FROM terms d CROSS JOIN LATERAL (SELECT chunk_id, tf, dl FROM postings WHERE kb = d.kb AND term = d.term OFFSET 0) p
    WHERE NOT d.cut
), candidates AS MATERIALIZED (
    SELECT kb, array_agg(DISTINCT chunk_id) AS ids FROM kept WHERE (SELECT bool_or(cut) FROM terms) GROUP BY kb
), weighted AS (
    SELECT i, chunk_id, w FROM kept WHERE NOT cut
    UNION ALL
    SELECT d.i, p.chunk_id, {_POSTING_WEIGHT}
    FROM terms d JOIN candidates c ON c.kb = d.kb
    CROSS JOIN LATERAL (
        SELECT chunk_id, tf, dl FROM postings WHERE kb = d.kb AND term = d.term AND chunk_id = ANY(c.ids) OFFSET 0
    ) p
    WHERE d.cut
), top AS (
    SELECT chunk_id, sum(w ORDER BY i) AS score FROM weighted GROUP BY chunk_id
    ORDER BY score DESC, chunk_id LIMIT %(depth)s
), bound AS (
    SELECT kb, count(*) AS cut_terms, sum(last ORDER BY i) AS total
    FROM (SELECT i, kb, min(w) AS last FROM kept WHERE cut GROUP BY i, kb) l
    GROUP BY kb
)
SELECT chunk_id, score, NULL::bigint AS cut_terms, NULL::float8 AS total, {_NO_COUNT} FROM top
UNION ALL
SELECT NULL, NULL, cut_terms, total, {_NO_COUNT} FROM bound
UNION ALL
SELECT NULL, NULL, NULL, NULL, kb, term, writes, df FROM found
"""


# -- writing -----------------------------------------------------------------------------------

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


def insert_chunks(conn: Connection, kb: str, doc_id: str, chunks: Sequence[Chunk]) -> int:
    """Insert a document's chunks with their postings and share of the statistics, in one statement."""
    positions, paths, headings, texts, lengths, sequences, places = [], [], [], [], [], [], []
    terms_at: tuple[list[str], list[int], list[int]] = ([], [], [])
    for chunk in chunks:
        joined = "\n".join(chunk.heading_path)
        counts, length, sequence = _analyzed(f"{joined}\n{chunk.text}")
        positions.append(chunk.position)
        paths.append(json.dumps(list(chunk.heading_path), ensure_ascii=False))
        headings.append(clean(joined))
        texts.append(clean(chunk.text))
        lengths.append(length)
        sequences.append(sequence)
        places.append(json.dumps(chunk.source_location, ensure_ascii=False) if chunk.source_location else None)
        for term, tf in counts.items():
            terms_at[0].append(term)
            terms_at[1].append(chunk.position)
            terms_at[2].append(tf)
    conn.execute(
        f"""WITH new AS (
                INSERT INTO chunks (
                    id, document_id, kb, position, heading_path, headings, text, length, terms, source_location
                )
                SELECT nextval('chunk_ids'), %(doc)s, %(kb)s, u.*
                FROM unnest(%(positions)s::int[], %(paths)s::text[], %(headings)s::text[], %(texts)s::text[],
                            %(lengths)s::int[], %(sequences)s::text[], %(places)s::text[])
                    AS u(position, heading_path, headings, text, length, terms, source_location)
                RETURNING id, position, length
            ), indexed AS (
                INSERT INTO postings (kb, term, chunk_id, tf, dl)
                SELECT %(kb)s, p.term, new.id, p.tf, new.length
                FROM {_unnest_postings("int")} AS p(term, position, tf)
                JOIN new ON new.position = p.position
            )
            INSERT INTO keyword_stats (kb, chunks, tokens) VALUES (%(kb)s, %(n)s, %(tokens)s) {_STATS_ADD}""",
        {
            "doc": doc_id,
            "kb": kb,
            "positions": positions,
            "paths": paths,
            "headings": headings,
            "texts": texts,
            "lengths": lengths,
            "sequences": sequences,
            "places": places,
            **_postings(terms_at),
            "n": len(positions),
            "tokens": sum(lengths),
        },
    )
    return len(positions)


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
    found = [_key(term) for term in terms(search_text(text))]
    return Counter(found) + _pairs(found), len(found), " ".join(found)


def _pairs(keys: Sequence[str]) -> Counter[str]:
    """Each pair of adjacent function words in ``keys`` as one term (``"for the"``) with its
    occurrences, overlapping ones too (``"to to"`` twice in ``to to to``, as FTS5 counts them)."""
    return Counter(f"{a} {b}" for a, b in itertools.pairwise(keys) if a in FUNCTION_TERMS and b in FUNCTION_TERMS)


def _unpaired(conn: Connection, kbs: Sequence[str]) -> bool:
    """Whether ``kbs`` hold chunks written before 0006_chunk_terms: without terms, they have no pairs
    either (an index range of ``chunks_without_terms``, empty once every chunk was written again)."""
    row = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM chunks WHERE terms IS NULL AND kb = ANY(%s::text[])) AS found", (list(kbs),)
    ).fetchone()
    return bool(row and row["found"])


def _key(term: str) -> str:
    if len(term.encode("utf-8")) <= _MAX_TERM_BYTES:
        return term
    return "~" + hashlib.sha256(term.encode("utf-8")).hexdigest()  # "~" is never a token character


# -- searching ---------------------------------------------------------------------------------


class TermCounts:
    """How many chunks of each knowledge base hold a term, kept between searches (one per index
    object, shared by its threads).

    A common term's count is an index-only scan of its postings (~2.7 ms per 14,000), taken by the
    AND and again by the OR it widens to, in every search that has the term. A count is kept with
    its knowledge base's write stamp (``keyword_stats.writes``: a sequence's next value, set by a
    trigger whenever a statement changes the knowledge base's postings and so its row, so never the
    same for two states). Each statement that takes a count compares the stamp in its own snapshot
    and counts again where it differs: a score never rests on a count another writer has changed.
    """

    LIMIT = 100_000  # counts kept before starting over

    def __init__(self) -> None:
        self._known: dict[tuple[str, str], tuple[int, int]] = {}

    def params(self, query_terms: Sequence[str | None], kbs: Sequence[str]) -> dict[str, list[Any]]:
        """The ``known_*`` parameters: the counts kept for ``query_terms`` in ``kbs``."""
        wanted, kept = {term for term in query_terms if term is not None}, self._known  # learn() may replace it
        known = [(kb, term, *count) for kb in kbs for term in wanted if (count := kept.get((kb, term)))]
        return {
            "known_kb": [row[0] for row in known],
            "known_term": [row[1] for row in known],
            "known_writes": [row[2] for row in known],
            "known_df": [row[3] for row in known],
        }

    def learn(self, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Keep the counts among a statement's rows (those with a ``term``); returns the others."""
        counted = [row for row in rows if row["term"] is not None]
        if len(self._known) + len(counted) > self.LIMIT:
            self._known = {}
        for row in counted:
            self._known[row["kb"], row["term"]] = (row["writes"], row["df"])
        return [row for row in rows if row["term"] is None]


def search(
    conn: Connection,
    query_terms: Sequence[str],
    operator: str,
    kbs: Sequence[str],
    where: DocumentFilter,
    limit: int,
    counts: TermCounts | None = None,
) -> list[dict[str, Any]]:
    """Chunks matching the terms (all, or any), best BM25 first, then by document and position.

    Only the postings of ``kbs`` are read, scored as one collection of them. The
    best ``limit`` (plus slack for ties) are ranked first and only those joined and filtered; when
    ``where`` leaves too few, the look goes deeper, then falls back to ranking inside the scope
    (with a document filter, after one look). ``counts`` keeps the terms' match counts for the
    next search.
    """
    if operator not in ("AND", "OR"):
        raise ValueError(operator)
    params = _phrases(conn, query_terms, operator, kbs)
    if params is None or limit <= 0:
        return []
    # Every phrase a single token: an AND of several is read from the rarest one's postings, an OR
    # (or one term alone) from each term's best postings.
    single, several = None not in params["terms"], len(params["terms"]) > 1
    scored = _SCORED_AND if operator == "AND" and single and several else _SCORED if len(kbs) == 1 else _SCORED_TOGETHER
    pruned = single and (operator == "OR" or not several)
    counts = counts or TermCounts()
    depth, deepest = limit + _SLACK, (limit + _SLACK if where else _MAX_DEPTH)
    while depth <= deepest:
        if single:  # _SCORED counts as it reads; the others take each term's count
            params.update(counts.params(params["terms"], kbs))
        top = pruned_or(conn, params, depth, counts) if pruned else None
        if top is None and scored is _SCORED_AND:
            rows = conn.execute(_SCORED_AND + _TOP_AND_COUNTS, {**params, "depth": depth}).fetchall()
            top = sorted(counts.learn(rows), key=lambda row: (-row["score"], row["chunk_id"]))
        elif top is None:
            top = conn.execute(scored + _TOP, {**params, "depth": depth}).fetchall()
        rows = _passages(conn, {row["chunk_id"]: _score(row["score"], kbs) for row in top}, kbs, where)
        if len(rows) >= limit or len(top) < depth:
            return rows[:limit]
        depth *= 8
    clause, scope_params = scope(kbs, where)
    sql = (
        scored + f"SELECT {_PASSAGE}, s.score FROM scored s JOIN chunks c ON c.id = s.chunk_id "
        f"JOIN documents d ON d.id = c.document_id WHERE s.matched >= %(need)s AND {clause} "
        "ORDER BY s.score DESC, c.document_id, c.position LIMIT %(limit)s"
    )
    rows = [
        {**row, "score": _score(row["score"], kbs)}
        for row in conn.execute(sql, {**params, **scope_params, "limit": limit})
    ]
    return sorted(rows, key=lambda r: (-r["score"], r["document_id"], r["position"]))


def _score(score: float, kbs: Sequence[str]) -> float:
    """A chunk's score as the SQLite index gives it: settled when several knowledge bases are searched."""
    return settled(score) if len(kbs) > 1 else score


def pruned_or(conn: Connection, params: dict[str, Any], depth: int, counts: TermCounts) -> list[dict[str, Any]] | None:
    """The best ``depth`` chunks (``chunk_id``, ``score``) of an OR of single-token phrases, ranked as
    _SCORED ranks them, read from each common term's best postings only; None when those cannot
    prove to be the best (then every posting has to be scored).

    At 100,000 chunks an OR that pairs a rare word with "cells" (in half of them) took 58-121 ms
    with _SCORED and takes 20-36 ms this way (docs/design.md, "How PostgreSQL reads the postings").
    ``WHOLE_POSTINGS`` and ``PRUNED_POSTINGS`` are where pruning starts to pay (measured on that
    corpus and on SciFact's 9,000 chunks, whose long queries it would slow down).
    """
    rows = conn.execute(
        _PRUNED_OR,
        {
            "terms": params["terms"],
            "kbs": params["kbs"],
            "depth": depth,
            "whole": WHOLE_POSTINGS,
            "worth": PRUNED_POSTINGS,
            **{name: params[name] for name in params if name.startswith("known_")},
        },
    ).fetchall()
    rows = counts.learn(rows)
    top = sorted((row for row in rows if row["chunk_id"] is not None), key=lambda row: (-row["score"], row["chunk_id"]))
    bounds = [row for row in rows if row["chunk_id"] is None]
    if not bounds:  # nothing was cut: every matching chunk was scored
        return top
    threshold = top[-1]["score"]  # a cut term alone brings ``depth`` candidates
    return None if any(row["cut_terms"] > 1 and not threshold > row["total"] for row in bounds) else top


def matches_more_than(conn: Connection, term: str, count: int, kbs: Sequence[str] | None = None) -> bool:
    """Whether more than ``count`` chunks (of ``kbs``, or any knowledge base) hold the term: a bounded
    walk, one index range per knowledge base."""
    phrase = terms(term)
    if not phrase:
        return False
    if kbs is None:
        kbs = [row["kb"] for row in conn.execute("SELECT kb FROM keyword_stats ORDER BY kb")]
    if len(phrase) > 1:
        return len(_phrase_hits(conn, phrase, kbs)) > count
    row = conn.execute(
        """SELECT count(*) AS n FROM (
               SELECT 1 FROM unnest(%(kbs)s::text[]) AS k(kb)
               CROSS JOIN LATERAL (SELECT 1 FROM postings WHERE kb = k.kb AND term = %(term)s LIMIT %(n)s) AS p
               LIMIT %(n)s) AS found""",
        {"kbs": list(kbs), "term": _key(phrase[0]), "n": count + 1},
    ).fetchone()
    return row is not None and row["n"] > count


def _phrases(conn: Connection, query_terms: Sequence[str], operator: str, kbs: Sequence[str]) -> dict[str, Any] | None:
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
    unpaired: bool | None = None  # asked once, if a phrase needs it
    single: list[str | None] = []
    hit_i, hit_kb, hit_chunk, hit_tf, hit_dl = [], [], [], [], []
    found: dict[tuple[str, ...], list[tuple[str, int, int, int]]] = {}
    for i, phrase in enumerate(phrases, 1):
        if len(phrase) == 1:
            single.append(_key(phrase[0]))
            continue
        if len(phrase) == 2 and set(phrase) <= FUNCTION_TERMS:
            unpaired = _unpaired(conn, kbs) if unpaired is None else unpaired
            if not unpaired:  # a term of its own, ranked as one
                single.append(" ".join(phrase))
                continue
        single.append(None)
        if tuple(phrase) not in found:
            found[tuple(phrase)] = _phrase_hits(conn, phrase, kbs)
        for kb, chunk_id, tf, dl in found[tuple(phrase)]:
            hit_i.append(i)
            hit_kb.append(kb)
            hit_chunk.append(chunk_id)
            hit_tf.append(tf)
            hit_dl.append(dl)
    return {
        "terms": single,
        "kbs": list(kbs),
        "hit_i": hit_i,
        "hit_kb": hit_kb,
        "hit_chunk": hit_chunk,
        "hit_tf": hit_tf,
        "hit_dl": hit_dl,
        "need": len(phrases) if operator == "AND" else 1,
    }


def _phrase_hits(conn: Connection, phrase: list[str], kbs: Sequence[str]) -> list[tuple[str, int, int, int]]:
    """``(kb, chunk id, occurrences, length)`` of the chunks of ``kbs`` where the phrase's tokens are
    adjacent.

    Found in SQL from each chunk's ``terms`` (its index terms in order, space-separated): a chunk
    holds the phrase where ``" for the "`` occurs in ``" " || terms || " "``, and only the chunks
    that do have their matches counted, with spaces doubled: ``" for  the "`` occurs in
    ``" of  the  for  the  cell "`` once per match, counted by ``replace`` (testing on the doubled
    text as well took 220 against 120 ms for ``"for the"``'s 35,226 candidates at 100,000 chunks).
    That misses overlapping matches, possible only for a phrase that ends the way it begins
    (``"the the"``), so those are counted here from the fetched terms. Chunks written before
    ``terms`` existed (NULL) are tokenized again here, as all were before (2-3 s for ``"for the"``
    at 100,000 chunks, against 0.3 s in SQL; docs/benchmarks.md).

    The candidates are the chunks holding every term of the phrase or, for function words, every
    pair of it: ``"to have been"``'s hold both its pairs, and ``"for the"``'s own postings are its
    hits. At 100,000 chunks that is 1,720 postings read in 3.5 ms, against 113 ms for checking the
    35,226 chunks that hold both words (scratch; docs/benchmarks.md).
    """
    keys = [_key(term) for term in phrase]
    width = len(keys)
    pairs = sorted(_pairs(keys)) if set(keys) <= FUNCTION_TERMS and not _unpaired(conn, kbs) else []
    if width == 2 and pairs:
        found = conn.execute(
            "SELECT kb, chunk_id, tf, dl FROM postings WHERE kb = ANY(%s::text[]) AND term = %s ORDER BY chunk_id",
            (list(kbs), pairs[0]),
        )
        return [(row["kb"], row["chunk_id"], row["tf"], row["dl"]) for row in found]
    held = pairs or sorted(set(keys))
    overlapping = any(keys[:k] == keys[-k:] for k in range(1, width))
    rows = conn.execute(
        # The candidates as one sorted array: one index scan over them reads the chunks in
        # order: 300 against 380 ms for "for the" (35,226 candidates) with a lookup per candidate.
        """WITH candidates AS MATERIALIZED (
               SELECT array_agg(chunk_id ORDER BY chunk_id) AS ids FROM (
                   SELECT chunk_id FROM postings WHERE kb = ANY(%(kbs)s::text[]) AND term = ANY(%(terms)s::text[])
                   GROUP BY chunk_id HAVING count(*) = %(distinct)s) AS holding_all
           )
           SELECT c.id, c.kb, c.length,
                  (length(s.spaced) - length(replace(s.spaced, %(needle)s, ''))) / length(%(needle)s) AS occurrences,
                  CASE WHEN %(overlapping)s THEN c.terms END AS terms,
                  CASE WHEN c.terms IS NULL THEN c.headings END AS headings,
                  CASE WHEN c.terms IS NULL THEN c.text END AS text
           FROM candidates, chunks c
           CROSS JOIN LATERAL (SELECT ' ' || replace(c.terms, ' ', '  ') || ' ' AS spaced) s
           WHERE c.id = ANY(candidates.ids) AND (c.terms IS NULL OR strpos(' ' || c.terms || ' ', %(run)s) > 0)
           ORDER BY c.id""",
        {
            "kbs": list(kbs),
            "terms": held,
            "distinct": len(held),
            "needle": " " + "  ".join(keys) + " ",
            "run": " " + " ".join(keys) + " ",
            "overlapping": overlapping,
        },
    ).fetchall()
    hits = []
    for row in rows:
        if row["occurrences"] is not None and not overlapping:
            occurrences = row["occurrences"]
        else:
            if row["occurrences"] is None:  # written before 0006_chunk_terms
                tokens = [_key(term) for term in terms(search_text(f"{row['headings']}\n{row['text']}"))]
            else:
                tokens = row["terms"].split(" ")
            occurrences = sum(tokens[at : at + width] == keys for at in range(len(tokens) - width + 1))
        if occurrences:
            hits.append((row["kb"], row["id"], occurrences, row["length"]))
    return hits


def _passages(
    conn: Connection, scores: dict[int, float], kbs: Sequence[str], where: DocumentFilter
) -> list[dict[str, Any]]:
    """Passage rows for the given chunk ids inside the scope, best score first."""
    if not scores:
        return []
    clause, params = scope(kbs, where)
    rows = conn.execute(
        f"SELECT {_PASSAGE} FROM chunks c JOIN documents d ON d.id = c.document_id "
        f"WHERE c.id = ANY(%(ids)s::bigint[]) AND {clause}",
        {**params, "ids": list(scores)},
    ).fetchall()
    found = [{**row, "score": scores[row["id"]]} for row in rows]
    return sorted(found, key=lambda r: (-r["score"], r["document_id"], r["position"]))


def substring_search(
    conn: Connection,
    query_terms: Sequence[str],
    operator: str,
    kbs: Sequence[str],
    where: DocumentFilter,
    limit: int,
    scan_limit: int,
    collation: str | None = None,
) -> list[dict[str, Any]]:
    """Chunks holding the terms as substrings, by occurrences per 1,000 characters (as on SQLite:
    the text lower-cased as ``lower_sql`` does for the terms; at most ``scan_limit`` chunks are scanned)."""
    if operator not in ("AND", "OR"):
        raise ValueError(operator)
    if not query_terms:
        return []
    clause, params = scope(kbs, where)
    lowered = {f"t{i}": term.lower() for i, term in enumerate(query_terms)}
    haystack = lower_sql("c.headings || ' ' || c.text", "".join(query_terms), collation)
    tests = f" {operator} ".join(f"strpos(h.text, %({name})s) > 0" for name in lowered)
    counts = " + ".join(
        f"(length(h.text) - length(replace(h.text, %({name})s, ''))) / nullif(length(%({name})s), 0)"
        for name in lowered
    )
    sql = f"""
        SELECT * FROM (
            SELECT {_PASSAGE}, 1000.0::float8 * ({counts}) / (length(c.text) + 1) AS score
            FROM chunks c JOIN documents d ON d.id = c.document_id
            CROSS JOIN LATERAL (SELECT {haystack} AS text) h
            WHERE {clause} AND ({tests})
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
