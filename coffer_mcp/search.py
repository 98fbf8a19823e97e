"""Keyword retrieval over the index: routing, AND-first widening to OR, short-term fallback.

The plan for one query:

1. No CJK in the query: the word index (porter stemming, BM25). Multi-term queries run as AND
   first; only when AND returns fewer than ``top_k`` hits does an OR query fill the rest (AND
   hits stay first).
2. CJK in the query (or the word index found nothing): the trigram index, with CJK runs cut into
   3-grams and Latin words of 3+ characters as substrings; AND first, then OR.
3. A CJK run of 1-2 characters (``向量``), invisible to trigrams: a bounded substring scan.

A query without CJK falls back to trigram substrings (``ackend`` finds ``backend``) only with
every term present, so a stray short word never matches inside unrelated words.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from coffer_mcp.index import queries as q
from coffer_mcp.index.db import Connection
from coffer_mcp.index.fts import analyze, match_expression
from coffer_mcp.models import Passage

__all__ = ["keyword_search", "to_passage"]

SUBSTRING_SCAN_LIMIT = 5000


def keyword_search(
    conn: Connection, kbs: Sequence[str], query: str, top_k: int, doc_ids: Sequence[str] | None = None
) -> list[Passage]:
    """The ``top_k`` best chunks for ``query`` across ``kbs``, best first."""
    terms = analyze(query)
    trigram, short = terms.trigram_terms(), terms.short_terms()
    if not terms.has_cjk:
        # The trigram pass only rescues partial words ("ackend"): all terms must match.
        plans = [("chunks_fts", terms.content_words(), True), ("chunks_tri", trigram, False)]
    elif all(len(run) >= 3 for run in terms.cjk_runs):
        plans = [("chunks_tri", trigram, True), ("substring", short, True)]
    else:
        # A CJK run of 1-2 characters (向量) is invisible to trigrams: scan substrings first.
        plans = [("substring", short, True), ("chunks_tri", trigram, True)]
    for source, plan_terms, widen in plans:
        if not plan_terms or (source == "substring" and all(len(t) >= 3 for t in plan_terms)):
            continue
        rows = _and_then_or(conn, source, plan_terms, kbs, doc_ids, top_k, widen=widen)
        if rows:
            return [to_passage(row) for row in rows]
    return []


def _and_then_or(
    conn: Connection, source: str, terms: list[str], kbs: Sequence[str], doc_ids: Sequence[str] | None,
    top_k: int, *, widen: bool = True,
) -> list[Any]:  # fmt: skip
    """AND first; widen to OR only when AND finds fewer than ``top_k`` (AND hits stay first)."""
    rows = _run(conn, source, terms, "AND", kbs, doc_ids, top_k)
    if not widen or len(rows) >= top_k or len(terms) == 1:
        return rows
    seen = {row["id"] for row in rows}
    wider = _run(conn, source, terms, "OR", kbs, doc_ids, top_k + len(rows))
    rows.extend(row for row in wider if row["id"] not in seen)
    return rows[:top_k]


def _run(
    conn: Connection, source: str, terms: list[str], operator: str, kbs: Sequence[str],
    doc_ids: Sequence[str] | None, limit: int,
) -> list[Any]:  # fmt: skip
    if source == "substring":
        return q.substring_search(conn, terms, operator, kbs, doc_ids, limit, SUBSTRING_SCAN_LIMIT)
    return q.fts_search(conn, source, match_expression(terms, operator), kbs, doc_ids, limit)


def to_passage(row: Any) -> Passage:
    return Passage(
        text=row["text"],
        document_id=row["document_id"],
        title=row["title"],
        score=round(float(row["score"]), 6),
        position=row["position"],
        heading_path=json.loads(row["heading_path"]),
        chunk_id=f"{row['document_id']}:{row['position']}",
        kb=row["kb"],
    )
