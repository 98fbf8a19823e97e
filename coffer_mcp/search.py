"""Keyword retrieval over the index: AND-first widening to OR, then a substring fallback.

1. The full-text index (BM25), with English stemming for words and CJK runs as bigrams. All
   terms must match first; only when that finds fewer than ``top_k`` chunks does an OR query
   fill the rest (AND hits stay first).
2. When the index finds nothing — a partial word (``ackend``), a single CJK character (``向``) —
   a bounded substring scan. Latin terms must all be present there, so a stray short word never
   matches inside unrelated words.
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
    plans = [("fts", terms.index_terms(), True), ("substring", terms.substring_terms(), not terms.words)]
    for source, plan_terms, widen in plans:
        if plan_terms:
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
    return q.fts_search(conn, match_expression(terms, operator), kbs, doc_ids, limit)


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
