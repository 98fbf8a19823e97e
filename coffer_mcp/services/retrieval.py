"""The retrieval service: resolve knowledge bases, search, grep.

A search resolves its strategy from the knowledge bases asked for: hybrid when any of them has
``vector`` on and an embedder is configured, else keyword. If the query cannot be embedded (the
provider is down or cooling down), the search degrades to keyword — never an error — and the
result says which strategy actually ran.

With a reranker configured (``rerank_provider``), the search ranks ``rerank_candidates`` passages
(or ``top_k``, if more), lets the reranker reorder them within ``rerank_timeout_ms``, and keeps
the best ``top_k``. A reranker that is slow, busy or failing leaves the order as it was; the
result's ``rerank`` says which happened.

A search answers one passage per document first (``retrieval.search.by_document``), from
``FUSION_DEPTH`` times ``top_k`` passages (a hybrid search fuses at least ``MIN_FUSION_DEPTH``);
``per_document=False`` gives the best passages as they rank.
"""

from __future__ import annotations

import logging
import os
import threading
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, get_args

from coffer_mcp.errors import ConfigError, EmbeddingError, InvalidArgumentError, render_hint
from coffer_mcp.index import DocumentFilter, Index
from coffer_mcp.index.fts import QueryTerms, analyze
from coffer_mcp.indexing.locations import BodyPlaces, body_places
from coffer_mcp.limits import MAX_TOP_K
from coffer_mcp.models import (
    GrepHit,
    GrepResult,
    Passage,
    RerankInfo,
    SearchFilters,
    SearchResult,
    Strategy,
    StrategyChoice,
)
from coffer_mcp.rerank import BudgetedReranker
from coffer_mcp.retrieval.search import (
    by_document,
    fuse_convex,
    keyword_search,
    lone_stopword,
    query_hint,
    vector_search,
)
from coffer_mcp.services.catalogue import Catalogue
from coffer_mcp.services.freshness import Freshness
from coffer_mcp.services.providers import Providers
from coffer_mcp.settings import Settings
from coffer_mcp.store import KbConfig, KbPaths, StorePaths, body_line_offset, parse_document, read_store_file

if TYPE_CHECKING:
    from coffer_mcp.embed import Embedder
    from coffer_mcp.retrieval.grep import LineMatch
    from coffer_mcp.retrieval.prefilter import GrepPrefilter

__all__ = ["ALL", "STRATEGIES", "KbSelector", "RetrievalService", "StrategyChoice"]

log = logging.getLogger(__name__)

KbSelector = str | Sequence[str]
"""One knowledge base name, several, or ``"*"`` for all of them."""
STRATEGIES: tuple[str, ...] = get_args(StrategyChoice)

ALL = "*"
MAX_QUERY_CHARS = 2000
# Each list fused into a hybrid result is this many times deeper than the answer (at least 100:
# measured better than 50 on SciFact for every fusion tried).
FUSION_DEPTH = 4
MIN_FUSION_DEPTH = 100
# How deep a search looks for top_k distinct documents when a few documents' passages fill the
# first 4 x top_k (as deep as the full-text index looks through a filter).
MAX_DOCUMENT_DEPTH = 4096


OVERLAP_WORKERS = 4  # hybrid searches whose keyword half may run in a worker thread at once

T = TypeVar("T")


class Alongside:
    """Runs a call in a worker thread while the caller does something else.

    ``start(fn, ...)`` returns a function that gives ``fn``'s result (or raises its error). When
    every worker is busy (many searches at once, which keep the cores busy anyway), ``fn`` runs in
    the caller's thread when its result is asked for: never queued behind another search. Each
    worker keeps its own connection to the index, as any thread does.
    """

    def __init__(self, workers: int) -> None:
        self._workers = workers
        self._free = threading.BoundedSemaphore(max(1, workers))
        self._pool: ThreadPoolExecutor | None = None
        self._guard = threading.Lock()

    def start(self, fn: Callable[..., T], *args: Any) -> Callable[[], T]:
        if self._workers <= 0 or not self._free.acquire(blocking=False):
            return lambda: fn(*args)
        try:
            with self._guard:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="coffer-search")
                future = self._pool.submit(fn, *args)
        except RuntimeError:  # shut down: the service is closing
            self._free.release()
            return lambda: fn(*args)
        future.add_done_callback(lambda _: self._free.release())
        return future.result

    def close(self) -> None:
        with self._guard:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


class _Query:
    """A search's query, analysed once and embedded at most once, however deep the search looks."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.terms: QueryTerms = analyze(text)
        self._vectors: dict[str, list[float]] = {}

    def vector(self, embedder: Embedder) -> list[float]:
        """The query embedded by ``embedder`` (embedded on first use)."""
        if embedder.identity not in self._vectors:
            self._vectors[embedder.identity] = embedder.embed_query(self.text)
        return self._vectors[embedder.identity]


class RetrievalService:
    """Search and grep over one, several or all knowledge bases.

    A hybrid search runs its keyword half in a worker thread (``Alongside``) while the query is
    embedded and the vectors searched: with cores to spare it takes about the longer of the two,
    not their sum (on two cores 1-3 ms less on PostgreSQL, even on SQLite; docs/benchmarks.md).
    """

    def __init__(
        self,
        *,
        settings: Settings,
        index: Index,
        paths: StorePaths,
        catalogue: Catalogue,
        freshness: Freshness,
        providers: Providers,
        overlap_workers: int = OVERLAP_WORKERS,
    ) -> None:
        self.settings = settings
        self.index = index
        self.paths = paths
        self.catalogue = catalogue
        self.freshness = freshness
        self.providers = providers
        self.alongside = Alongside(overlap_workers)
        self._prefilter: GrepPrefilter | None = None
        self._prefilter_lock = threading.Lock()

    @property
    def prefilter(self) -> GrepPrefilter:
        """grep's file map, made by the first grep (a process that only searches never loads grep)."""
        with self._prefilter_lock:
            if self._prefilter is None:
                from coffer_mcp.retrieval.prefilter import GrepPrefilter

                self._prefilter = GrepPrefilter()
            return self._prefilter

    def close(self) -> None:
        """Stop the workers (after the searches they run) and grep's file map."""
        self.alongside.close()
        with self._prefilter_lock:
            prefilter, self._prefilter = self._prefilter, None
        if prefilter is not None:
            prefilter.close()

    def resolve_kbs(self, selector: KbSelector) -> list[str]:
        """Names of the knowledge bases a selector designates (each checked to exist)."""
        names = self._named(selector)
        if not _is_all(selector):
            for name in names:
                self.catalogue.open_kb(name)
        return names

    def _named(self, selector: KbSelector) -> list[str]:
        """The names a selector gives: every knowledge base for ``"*"`` (at least one), else those
        listed, not yet checked to exist."""
        if isinstance(selector, str):
            if _is_all(selector):
                names = self.catalogue.sync()
                if not names:
                    raise self.catalogue.unknown_kb(ALL)
                return names
            selector = [selector]
        names = list(dict.fromkeys(selector))
        if not names:
            raise InvalidArgumentError("No knowledge base given.", hint="Pass a name, a list of names, or '*'.")
        return names

    def _opened(self, selector: KbSelector) -> dict[str, KbConfig]:
        """The knowledge bases a selector designates, each opened and refreshed once: their settings.

        Raises:
            KnowledgeBaseNotFoundError: one named does not exist (with ``"*"``: one deleted meanwhile is left out).
        """
        return self.freshness.refresh_many(self._named(selector), vanished_ok=_is_all(selector))

    def search(
        self,
        kb: KbSelector,
        query: str,
        top_k: int = 5,
        *,
        document_ids: Sequence[str] | None = None,
        strategy: StrategyChoice = "auto",
        filters: SearchFilters | Mapping[str, Any] | None = None,
        rerank: bool = True,
        per_document: bool = True,
    ) -> SearchResult:
        """Ranked passages for ``query`` from one, several or all (``"*"``) knowledge bases.

        ``filters`` (``SearchFilters``, or a mapping of its keys) restricts the documents, inside
        the index's queries: ``top_k`` passages come back whenever that many match. ``strategy``
        other than ``auto`` forces one (benchmarks, debugging); a vector strategy that cannot run
        still degrades to keyword. ``rerank=False`` skips the configured reranker (benchmarks
        compare the two). ``per_document=False`` answers the best passages as they rank, several
        of a document if they rank so, instead of one per document first.
        """
        asked = _Query(_check_query(query, top_k))
        where = DocumentFilter.of(SearchFilters.parse(filters), document_ids)
        if strategy not in STRATEGIES:
            raise InvalidArgumentError(
                f"strategy must be one of {', '.join(STRATEGIES)}, not {str(strategy)[:40]!r}.",
                hint="Leave it out (auto) unless you compare strategies.",
            )
        configs = self._opened(kb)
        names = list(configs)
        if lone_stopword(asked.terms):  # "the": nothing to rank by, by keyword or by vector
            return SearchResult(
                strategy="keyword", passages=[], knowledge_bases=names, hint=query_hint(asked.terms, found=False)
            )
        reranker, info = self._reranker() if rerank else (None, None)
        depth = max(top_k, reranker.candidates) if reranker is not None else top_k
        if per_document:  # room for top_k documents: 4 x top_k passages left 3 of 809 SciFact queries short
            depth = max(depth, min(MAX_TOP_K, top_k * FUSION_DEPTH))
        ran, passages, hint = self._ranked(configs, asked, strategy, top_k, depth, where)
        while per_document and depth < MAX_DOCUMENT_DEPTH and self._short_of_documents(passages, depth, top_k, names):
            depth = min(depth * FUSION_DEPTH, MAX_DOCUMENT_DEPTH)
            ran, passages, hint = self._ranked(configs, asked, strategy, top_k, depth, where)
        if reranker is not None and len(passages) > 1:
            passages, info = reranker.rerank(asked.text, passages)
        if per_document:
            passages = by_document(passages, top_k)
        return SearchResult(strategy=ran, passages=passages[:top_k], knowledge_bases=names, hint=hint, rerank=info)

    def _short_of_documents(self, passages: list[Passage], depth: int, top_k: int, names: list[str]) -> bool:
        """Whether a search should look deeper for ``top_k`` documents.

        One document matching in many passages can fill every one looked at. So: the list was
        full (more may match below it), it holds fewer than ``top_k`` documents, and the knowledge
        bases hold more documents than it does.
        """
        found = _documents(passages)
        if len(passages) < depth or found >= top_k:
            return False
        counts = self.index.document_counts()
        return found < sum(counts.get(name, 0) for name in names)

    def _ranked(
        self,
        configs: dict[str, KbConfig],
        query: _Query,
        strategy: StrategyChoice,
        top_k: int,
        depth: int,
        where: DocumentFilter,
    ) -> tuple[Strategy, list[Passage], str | None]:
        """The strategy that ran, its best ``depth`` passages (``depth >= top_k``: room for a reranker), a hint."""
        names = list(configs)
        vector_on = [n for n, config in configs.items() if config.vector]
        vector_kbs = vector_on if self.providers.embedder is not None else []
        refused = self._refused(vector_on, strategy)
        wanted = strategy if strategy != "auto" else ("hybrid" if vector_kbs else "keyword")
        if wanted == "keyword":
            return self._keyword(names, query, depth, where, why=refused)
        if not vector_kbs:  # a strategy asked for by name that cannot run: say why
            why = refused or _no_vectors(wanted, names, self.providers.embedder is None)
            return self._keyword(names, query, depth, where, why=why)
        # The lists fused are as deep as without a reranker (when that is deep enough), so a
        # reranker that falls back leaves the order a search without one gives.
        fusion_depth = max(_depth(top_k, wanted), depth)
        if wanted == "hybrid":  # the keyword half runs while the query is embedded and the vectors searched
            keyword_half = self.alongside.start(keyword_search, self.index, names, query.terms, fusion_depth, where)
        try:
            near = self._vector_passages(vector_kbs, query, fusion_depth, where)
        except EmbeddingError as exc:
            log.info("search degrades to keyword: %s", exc)
            why = f"The query could not be embedded, so keyword search ran instead of {wanted}: {exc.message}"
            return self._keyword(names, query, depth, where, why=why)
        if wanted == "vector":
            return "vector", near[:depth], None
        keyword = keyword_half()
        return "hybrid", fuse_convex(keyword, near, depth), query_hint(query.terms, found=bool(keyword))

    def _keyword(
        self, names: list[str], query: _Query, depth: int, where: DocumentFilter, *, why: str | None = None
    ) -> tuple[Strategy, list[Passage], str | None]:
        """A keyword search; ``why``: why it runs instead of the strategy asked for, said in the hint."""
        passages = keyword_search(self.index, names, query.terms, depth, where)
        hints = [why, query_hint(query.terms, found=bool(passages))]
        return "keyword", passages, " ".join(hint for hint in hints if hint) or None

    def _refused(self, vector_kbs: list[str], strategy: StrategyChoice) -> str | None:
        """Why knowledge bases with vectors are searched by keyword: this process cannot build the store's
        model (``services.store_model``); None otherwise."""
        use = self.providers.models.use
        if not vector_kbs or strategy == "keyword" or use.status != "refused" or not use.message:
            return None
        return f"{use.message} {use.hint or ''}".strip()

    def _reranker(self) -> tuple[BudgetedReranker | None, RerankInfo | None]:
        """The configured reranker, or None with why it cannot run (None, None when there is none)."""
        try:
            return self.providers.reranker, None
        except ConfigError as exc:  # settings built without load_settings's checks: say so, still search
            return None, RerankInfo(applied=False, reason=f"error: {exc.message}")

    def _vector_passages(self, kbs: list[str], query: _Query, depth: int, where: DocumentFilter) -> list[Passage]:
        """Nearest chunks among the current model's vectors (none yet if nothing was embedded)."""
        embedder = self.providers.embedder
        assert embedder is not None  # the caller checked
        query_vector = query.vector(embedder)
        try:
            return vector_search(self.index, embedder.identity, query_vector, kbs, depth, where)
        except ValueError as exc:
            raise EmbeddingError(str(exc), hint="Run 'coffer kb reindex --all' after changing the model.") from exc

    def grep(
        self,
        kb: KbSelector,
        pattern: str,
        max_matches: int = 50,
        *,
        ignore_case: bool = False,
        fixed_strings: bool = False,
        filters: SearchFilters | Mapping[str, Any] | None = None,
    ) -> GrepResult:
        """Regex matches, line by line, over the Markdown files.

        ``filters`` (as in ``search``) narrows the files to the documents the index lets through;
        without them no index is involved.
        """
        from coffer_mcp.retrieval.grep import grep_dirs  # here: its regex engine is ~30 ms a search never needs

        where = DocumentFilter.of(SearchFilters.parse(filters))
        # Documents are written composed (NFC): "é" typed decomposed (e + U+0301) would match nothing.
        pattern = unicodedata.normalize("NFC", pattern)
        names = list(self._opened(kb))
        dirs = {self.paths.kb(name).docs: name for name in names}
        settings = self.settings
        outcome = grep_dirs(
            list(dirs),
            pattern,
            max_matches=max_matches,
            timeout=settings.grep_timeout,
            ignore_case=ignore_case,
            fixed_strings=fixed_strings,
            rg_path=settings.rg_path,
            **self._grep_files(names, list(dirs), pattern, where, ignore_case, fixed_strings),
        )
        bodies: dict[Path, _Body] = {}
        hits = [_hit(m, self.paths.kb(dirs[m.path.parent]), bodies) for m in outcome.matches]
        if not outcome.timed_out:
            return GrepResult(hits=hits, truncated=outcome.truncated, engine=outcome.engine)
        hint = _timeout_hint(settings.grep_timeout, len(hits))
        return GrepResult(hits=hits, truncated=True, engine=outcome.engine, timed_out=True, hint=hint)

    def _grep_files(
        self,
        names: list[str],
        dirs: list[Path],
        pattern: str,
        where: DocumentFilter,
        ignore_case: bool,
        fixed_strings: bool,
    ) -> dict[str, Any]:
        """What ``grep_dirs`` is to read: the files the filters keep (``only``), or of those the ones
        that can match (``files``, from ``retrieval.prefilter``); neither for every file."""
        can_match = self.prefilter.narrow(dirs, pattern, ignore_case=ignore_case, fixed_strings=fixed_strings)
        if not where:
            return {"files": can_match}
        kept = self._files_of(names, where)
        if can_match is None:
            return {"only": kept}
        keep = {os.path.abspath(path) for path in kept}
        return {"files": [path for path in can_match if path in keep]}

    def _files_of(self, names: list[str], where: DocumentFilter) -> list[Path]:
        """The Markdown files of the documents of ``names`` that ``where`` lets through."""
        return [self.paths.kb(name).doc(i) for name in names for i in self.index.document_ids(name, where)]


def _timeout_hint(timeout: float, found: int) -> str:
    """What to do about a grep that ran out of time (``found`` matches by then)."""
    so_far = f"{found} match{'es' if found != 1 else ''}" if found else "no match"
    return render_hint(
        f"The scan stopped at its time limit of {timeout:g} s with {so_far} in what it had read; the rest "
        "was not searched, so allowing more matches will not help. Make the pattern cheaper (a distinctive "
        "literal with {arg:fixed_strings=true}, or no nested repetition such as (a|aa)+), grep fewer knowledge "
        "bases or narrow them with filters, or ask the user to raise grep_timeout (config.yaml or "
        "COFFER_GREP_TIMEOUT, up to 120 s)."
    )


_Body = tuple[int, BodyPlaces | None]
"""A matched file's first body line (``body_line_offset``) and where its body's lines are in the original."""


def _hit(match: LineMatch, kb: KbPaths, bodies: dict[Path, _Body]) -> GrepHit:
    """A matching line, numbered within the document's body so that ``read_document`` pages agree,
    with its place in the original when known."""
    if match.path not in bodies:
        bodies[match.path] = _body(kb, match.path)
    offset, places = bodies[match.path]
    line_number = max(match.line_number - offset, 0)  # 0: above the body (frontmatter)
    return GrepHit(
        document_id=match.path.stem,
        line_number=line_number,
        line=match.line,
        kb=kb.name,
        path=str(match.path),
        file_line=match.line_number,
        source_location=places.of_lines(line_number, line_number) if places and line_number else None,
    )


def _body(kb: KbPaths, path: Path) -> _Body:
    try:
        data = read_store_file(path)[0]
    except FileNotFoundError:  # removed since the scan
        return 0, None
    text = data.decode("utf-8", errors="replace")
    return body_line_offset(text), body_places(kb, path.stem, parse_document(text)[1])


def _is_all(selector: KbSelector) -> bool:
    return isinstance(selector, str) and selector.strip() == ALL


def _check_query(query: str, top_k: int) -> str:
    query = (query or "").strip()
    if not query:
        raise InvalidArgumentError("The query is empty.", hint="Pass the words or phrase to look for.")
    if len(query) > MAX_QUERY_CHARS:
        raise InvalidArgumentError(
            f"The query is {len(query)} characters long; the limit is {MAX_QUERY_CHARS}.",
            hint="Search with the key phrase rather than a whole passage.",
        )
    if not 1 <= top_k <= MAX_TOP_K:
        raise InvalidArgumentError(f"top_k must be between 1 and {MAX_TOP_K}, got {top_k}.", hint="Use e.g. 5.")
    return query


def _documents(passages: Sequence[Passage]) -> int:
    return len({(p.kb, p.document_id) for p in passages})


def _no_vectors(strategy: str, names: list[str], no_embedder: bool) -> str:
    """Why a search asked to run ``strategy`` (vector or hybrid) ran keyword search instead."""
    if no_embedder:
        return (
            f"No embedding model is configured (COFFER_EMBEDDING_PROVIDER is none), so keyword search ran instead of "
            f"{strategy}."
        )
    which = f"Knowledge base '{names[0]}' has" if len(names) == 1 else "None of these knowledge bases has"
    return (
        f"{which} no vectors, so keyword search ran instead of {strategy}. Vectors are on for a knowledge base "
        "created with vector on, or turned on with 'coffer kb update NAME --vector'."
    )


def _depth(top_k: int, strategy: str) -> int:
    if strategy != "hybrid":
        return top_k
    return min(MAX_TOP_K, max(top_k * FUSION_DEPTH, MIN_FUSION_DEPTH))
