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

The postings (``postings.py`` writes them) hold a (kb, term, chunk, tf, dl) row per term and
chunk; ``keyword_stats`` per knowledge base its chunks and tokens. A phrase of several tokens (a
query of function words only, ``"for the"``, or ``हिन्दी``, three tokens as FTS5 splits at vowel
signs) matches where its tokens are adjacent: postings keep no positions, so each chunk's terms in
order (``chunks.terms``) are searched in SQL. A phrase of two function words is one term's
postings (their pair), a longer one checked only in the chunks holding all its pairs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from coffer_mcp.index.fts import search_text, settled
from coffer_mcp.index.port import DocumentFilter
from coffer_mcp.index.postgres.connection import Connection, lower_sql
from coffer_mcp.index.postgres.filters import scope
from coffer_mcp.index.postgres.postings import FUNCTION_TERMS, function_pairs, term_key
from coffer_mcp.index.tokens import terms

__all__ = ["TermCounts", "matches_more_than", "pruned_or", "search", "substring_search"]

_SLACK = 16
_MAX_DEPTH = 4096
WHOLE_POSTINGS = 1024  # a term in fewer chunks is never cut (pruned_or)
PRUNED_POSTINGS = 20_000  # nor are terms holding fewer postings in all

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
        {"kbs": list(kbs), "term": term_key(phrase[0]), "n": count + 1},
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
            single.append(term_key(phrase[0]))
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
    keys = [term_key(term) for term in phrase]
    width = len(keys)
    pairs = sorted(function_pairs(keys)) if set(keys) <= FUNCTION_TERMS and not _unpaired(conn, kbs) else []
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
                tokens = [term_key(term) for term in terms(search_text(f"{row['headings']}\n{row['text']}"))]
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


def _unpaired(conn: Connection, kbs: Sequence[str]) -> bool:
    """Whether ``kbs`` hold chunks written before 0006_chunk_terms: without terms, they have no pairs
    either (an index range of ``chunks_without_terms``, empty once every chunk was written again)."""
    row = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM chunks WHERE terms IS NULL AND kb = ANY(%s::text[])) AS found", (list(kbs),)
    ).fetchone()
    return bool(row and row["found"])
