"""Retrieval over the index: keyword (BM25), vector (sqlite-vec KNN) and their fusion.

Keyword search runs AND-first, widening to OR, then a substring fallback:

1. The full-text index (BM25), with English stemming for words and CJK runs as bigrams. All
   terms must match first; only when that finds fewer than ``top_k`` chunks does an OR query
   fill the rest (AND hits stay first), leaving out terms found in more than
   ``COMMON_MATCHES`` chunks whenever the rarer terms can fill the list alone.
2. When the index finds nothing — a partial word (``ackend``), a single CJK character (``向``) —
   a bounded substring scan. Latin terms must all be present there, so a stray short word never
   matches inside unrelated words. A query of symbols alone (``→``, ``★ ≥``, ``🎉``) has no
   term the index holds: it goes to the scan directly, its space-separated pieces as typed,
   and ``query_hint`` says so (grep finds every line that holds them).

Hybrid search fuses a keyword and a vector list, a passage being one ``(document_id, position)``:
each list's scores are min-max normalized and combined as ``0.6 * keyword + 0.4 * vector``
(``fuse_convex``). Chosen from data over reciprocal rank fusion (``fuse_rrf``, kept for
comparison): on SciFact both beat either list alone (0.728 vs 0.725 nDCG@10 at RRF K=60), but
when the embedding model does not know the documents' language (English MiniLM on Chinese, a
common misconfiguration), RRF K=60 fell from keyword's 0.977 to 0.596 while this stays at 0.975:
a keyword leader can only be displaced by passages the vector list also ranks well.

A search answers one passage per document first (``by_document``): a document ranks where its
best passage ranks, and that passage lists where its other matches are (``more_positions``).
Only when fewer documents than ``top_k`` match do further passages of those documents fill the
answer. Adding the other passages' scores to a document's (all of them, or the second best) was
measured no better on SciFact, and worse when all of them count (``bench.chunking``, see
docs/benchmarks.md, "Chunk size and per-document ranking").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from coffer_mcp.errors import render_hint
from coffer_mcp.index import Index, PassageRow, Where
from coffer_mcp.index.fts import QueryTerms, analyze
from coffer_mcp.models import Passage

__all__ = [
    "COMMON_MATCHES",
    "RRF_K",
    "VECTOR_WEIGHT",
    "by_document",
    "fuse_convex",
    "fuse_rrf",
    "keyword_search",
    "lone_stopword",
    "query_hint",
    "to_passage",
    "vector_search",
]

SUBSTRING_SCAN_LIMIT = 5000
COMMON_MATCHES = 4096
RRF_K = 60
VECTOR_WEIGHT = 0.4
MORE_POSITIONS = 10


def keyword_search(
    index: Index, kbs: Sequence[str], query: str | QueryTerms, top_k: int, where: Where = None
) -> list[Passage]:
    """The ``top_k`` best chunks for ``query`` (as typed, or already analysed) across ``kbs`` (of the
    documents ``where`` lets through), best first."""
    terms = query if isinstance(query, QueryTerms) else analyze(query)
    if terms.only_stopwords:  # a phrase, or nothing to rank by: never a substring scan for "the"
        plans = [("fts", terms.index_terms(), False)]
    else:
        plans = [("fts", terms.index_terms(), True), ("substring", terms.substring_terms(), not terms.words)]
    for source, plan_terms, widen in plans:
        if plan_terms:
            rows, holding_all = _and_then_or(index, source, plan_terms, kbs, where, top_k, widen=widen)
            if rows:
                return [to_passage(row, _matched(plan_terms, i < holding_all)) for i, row in enumerate(rows)]
    return []


def _matched(terms: Sequence[str], holds_all: bool) -> Literal["all", "some"] | None:
    """Which tier a passage came from, for a query of several terms (the order follows the tier first)."""
    if len(terms) < 2:
        return None
    return "all" if holds_all else "some"


def lone_stopword(terms: QueryTerms) -> bool:
    """Whether the query is one function word (``the``): it matches most passages, ranks none."""
    return terms.only_stopwords and len(terms.tokens) == 1


def query_hint(terms: QueryTerms, found: bool) -> str | None:
    """What to tell a caller whose query is nothing but function words, nothing but symbols, or
    nothing searchable at all (None for any other query)."""
    if terms.only_symbols:
        return _symbols_hint(terms.literals, found)
    if not (terms.words or terms.cjk_runs):
        return "The query holds only control characters, which no document's text holds: pass the words to look for."
    if not terms.only_stopwords:
        return None
    words = ", ".join(repr(w) for w in terms.words[:5])
    if len(terms.tokens) == 1:
        return (
            f"{words} is a common word found in most passages: alone it gives nothing to rank by, so no "
            "keyword passage is returned. Add a word that names what you look for, or use grep for an exact string."
        )
    outcome = "as one phrase" if found else "as one phrase, and no passage contains that phrase"
    return (
        f"The query has only common words ({words}), each found in most passages: it was matched {outcome}. "
        "Add a word that names what you look for for a ranked search."
    )


def _symbols_hint(literals: list[str], found: bool) -> str:
    shown = " ".join(literals[:5])
    if len(shown) > 60:
        shown = shown[:59] + "…"
    if found:
        outcome = (
            f"so passages holding {shown!r} as written are returned, ranked by how often it occurs "
            f"(the first {SUBSTRING_SCAN_LIMIT} such passages are looked at)"
        )
    else:
        outcome = f"and no passage holds {shown!r} as written"
    return render_hint(
        f"The query has no word, number or CJK character for the keyword index to look up, {outcome}. "
        "To find every line holding a symbol or emoji, use {tool:grep_knowledge}; to rank passages, add a word "
        "that names what you look for."
    )


def _and_then_or(
    index: Index,
    source: str,
    terms: list[str],
    kbs: Sequence[str],
    where: Where,
    top_k: int,
    *,
    widen: bool = True,
) -> tuple[list[PassageRow], int]:
    """AND first; widen to OR only when AND finds fewer than ``top_k`` (AND hits stay first).

    Returns the rows and how many of the first hold every term (the AND hits).
    """
    rows = _run(index, source, terms, "AND", kbs, where, top_k)
    holding_all = len(rows)
    if not widen or len(rows) >= top_k or len(terms) == 1:
        return rows, holding_all
    seen = {row.chunk_id for row in rows}
    depth = top_k + len(rows)
    rare = _rare_terms(index, terms, kbs) if source == "fts" else None
    wider = _run(index, source, rare, "OR", kbs, where, depth) if rare else []
    if len(wider) < depth:  # the rare terms alone cannot fill the list: every term is needed
        wider = _run(index, source, terms, "OR", kbs, where, depth)
    rows.extend(row for row in wider if row.chunk_id not in seen)
    return rows[:top_k], holding_all


def _rare_terms(index: Index, terms: list[str], kbs: Sequence[str]) -> list[str] | None:
    """The terms in at most ``COMMON_MATCHES`` chunks of ``kbs``, when some (not all) terms are in more.

    BM25 has to score every chunk an OR matches, so one common term ("cells" in a biology
    corpus) makes the widening cost the whole corpus. Such a term weighs little (its IDF is
    low): chunks matching only it rank below chunks matching a rare term, so OR over the rare
    terms finds the same list in a fraction of the time whenever it can fill it. Counted in the
    knowledge bases searched, so that other knowledge bases do not change which terms are rare.
    """
    rare = [t for t in terms if not index.matches_more_than(t, COMMON_MATCHES, kbs)]
    return rare if rare and len(rare) < len(terms) else None


def _run(
    index: Index,
    source: str,
    terms: list[str],
    operator: Literal["AND", "OR"],
    kbs: Sequence[str],
    where: Where,
    limit: int,
) -> list[PassageRow]:
    if source == "substring":
        return index.substring_search(terms, operator, kbs, where, limit, SUBSTRING_SCAN_LIMIT)
    return index.keyword_search(terms, operator, kbs, where, limit)


def vector_search(
    index: Index,
    model: str,
    query_vector: Sequence[float],
    kbs: Sequence[str],
    top_k: int,
    where: Where = None,
) -> list[Passage]:
    """The ``top_k`` chunks nearest to ``query_vector`` among ``model``'s vectors of the documents
    ``where`` lets through (none if it has none).

    Raises:
        ValueError: the model's stored vectors have another dimension than the query's.
    """
    return [to_passage(row) for row in index.knn(model, query_vector, kbs, where, top_k)]


def fuse_rrf(ranked_lists: Sequence[Sequence[Passage]], top_k: int, k: int = RRF_K) -> list[Passage]:
    """Reciprocal rank fusion: each passage scores the sum of ``1 / (k + rank)`` over the lists."""
    scores: dict[tuple[str, int], float] = {}
    first: dict[tuple[str, int], Passage] = {}
    for ranked in ranked_lists:
        for rank, passage in enumerate(ranked, 1):
            key = (passage.document_id, passage.position)
            scores[key] = scores.get(key, 0.0) + 1.0 / (k + rank)
            first.setdefault(key, passage)
    best = sorted(scores, key=lambda key: (-scores[key], key))[:top_k]
    return [first[key].model_copy(update={"score": round(scores[key], 6), "matched_terms": None}) for key in best]


def fuse_convex(
    keyword: Sequence[Passage], vector: Sequence[Passage], top_k: int, alpha: float = VECTOR_WEIGHT
) -> list[Passage]:
    """Convex combination of min-max-normalized scores: ``alpha * vector + (1 - alpha) * keyword``.

    A passage missing from one list scores 0 there. With ``alpha`` below one half, the keyword
    list's best passage outscores every passage found by the vector list alone.
    """
    combined: dict[tuple[str, int], float] = {}
    first: dict[tuple[str, int], Passage] = {}
    for weight, ranked in ((1 - alpha, keyword), (alpha, vector)):
        if not ranked:
            continue
        low, high = min(p.score for p in ranked), max(p.score for p in ranked)
        for passage in ranked:
            key = (passage.document_id, passage.position)
            norm = (passage.score - low) / (high - low) if high > low else 1.0
            combined[key] = combined.get(key, 0.0) + weight * norm
            first.setdefault(key, passage)
    best = sorted(combined, key=lambda key: (-combined[key], key))[:top_k]
    # A fused order follows the combined score, not the keyword tiers: ``matched_terms`` would mislead.
    return [first[key].model_copy(update={"score": round(combined[key], 6), "matched_terms": None}) for key in best]


def by_document(passages: Sequence[Passage], top_k: int) -> list[Passage]:
    """At most ``top_k`` of ``passages`` (best first), one per document first.

    Each document is represented by its best passage, in their order, carrying the positions of
    the document's other passages, best first, in ``more_positions``. When fewer than ``top_k``
    documents are found, the next passages of those documents follow, best first, and leave that
    list.
    """
    groups: dict[tuple[str | None, str], list[Passage]] = {}
    for passage in passages:
        groups.setdefault((passage.kb, passage.document_id), []).append(passage)
    chosen = list(groups)[:top_k]
    room = top_k - len(chosen)
    seconds = {id(p) for key in chosen for p in groups[key][1:]} if room else set()
    extra = [p for p in passages if id(p) in seconds][:room]  # best first, as they ranked
    shown = {id(p) for p in extra}
    firsts = []
    for key in chosen:
        best, *others = groups[key]
        more = [p.position for p in others if id(p) not in shown][:MORE_POSITIONS]
        firsts.append(best.model_copy(update={"more_positions": more}))
    return firsts + extra


def to_passage(row: PassageRow, matched_terms: Literal["all", "some"] | None = None) -> Passage:
    return Passage(
        text=row.text,
        document_id=row.document_id,
        title=row.title,
        score=round(row.score, 6),
        position=row.position,
        heading_path=row.heading_path,
        chunk_id=f"{row.document_id}:{row.position}",
        kb=row.kb,
        matched_terms=matched_terms,
        source_location=row.source_location,
        original_filename=row.original_filename or None,
    )
