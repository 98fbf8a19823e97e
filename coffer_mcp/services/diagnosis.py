"""Diagnosis and history: what this installation can do (``coffer doctor``), and the log of tool calls."""

from __future__ import annotations

import time
from typing import Any

from coffer_mcp import __version__
from coffer_mcp.errors import CofferError, ConfigError, KnowledgeBaseNotFoundError
from coffer_mcp.index import Index, IndexDiagnosis, InvocationRow
from coffer_mcp.models import DoctorReport, EmbedderStatus, RerankerStatus
from coffer_mcp.services.catalogue import Catalogue
from coffer_mcp.services.invocations import InvocationLog
from coffer_mcp.services.knowledge_bases import KnowledgeBaseService
from coffer_mcp.services.providers import Providers
from coffer_mcp.settings import Settings
from coffer_mcp.store import StorePaths

__all__ = ["Diagnosis"]


class Diagnosis:
    """``coffer doctor``'s checks, and the record of MCP tool calls."""

    def __init__(
        self,
        *,
        settings: Settings,
        index: Index,
        paths: StorePaths,
        catalogue: Catalogue,
        providers: Providers,
        knowledge_bases: KnowledgeBaseService,
    ) -> None:
        self.settings = settings
        self.index = index
        self.paths = paths
        self.catalogue = catalogue
        self.providers = providers
        self.knowledge_bases = knowledge_bases
        self.calls = InvocationLog(self.index)

    def close(self) -> None:
        """Write the tool calls still queued for the log."""
        self.calls.close()

    def doctor(self, *, check_embedder: bool = True) -> DoctorReport:
        """What this installation can do: ``problems`` need fixing, ``notes`` could be better.

        With ``check_embedder`` False no model is loaded and no provider (embedder or reranker)
        called by the doctor itself; describing each knowledge base is a read, which may embed
        due documents for up to ``embed_on_read_seconds`` (``coffer doctor`` sets that to 0).
        """
        reachable = True
        try:
            index = self.index.diagnose()
        except CofferError as exc:  # a database server that is down or refuses us: the report says so
            reachable = False
            index = IndexDiagnosis(
                backend=self.settings.index_backend,
                binding="",
                version="",
                keyword_index=False,
                vector_version=None,
                problems=[f"{exc.message} {exc.hint_for('cli')}".strip()],
            )
        from coffer_mcp.retrieval.grep import rg_status  # here: its regex engine is ~30 ms only doctor needs

        problems: list[str] = list(index.problems)
        rg = rg_status(self.settings.rg_path)
        problems += [rg.problem] if rg.problem else []
        embedder = self.embedder_status(check=check_embedder)
        if embedder.error:
            problems.append(f"The embedder is not working: {embedder.error}")
        if embedder.use == "refused" and embedder.note:
            problems.append(embedder.note)
        reranker = self._reranker_status(check_embedder)
        if reranker.error:
            problems.append(f"The reranker is not working (searches keep their unreranked order): {reranker.error}")
        kbs = []
        try:
            names = self.catalogue.sync() if reachable else []
        except CofferError as exc:  # e.g. a shared index of another store: reported, nothing changed
            names = []
            problems.append(f"The knowledge bases cannot be read: {exc.message} {exc.hint_for('cli')}".strip())
        for name in names:
            try:
                kbs.append(self.knowledge_bases.describe_kb(name))
            except KnowledgeBaseNotFoundError:
                continue  # deleted by another process since the scan
            except CofferError as exc:
                problems.append(f"'{name}' cannot be read: {exc.message} {exc.hint_for('cli')}".strip())
        problems += [
            f"'{kb.name}': "
            + ("1 document has" if kb.documents_degraded == 1 else f"{kb.documents_degraded} documents have")
            + " no current vectors (keyword-only)."
            for kb in kbs
            if kb.documents_degraded
        ]
        return DoctorReport(
            coffer_version=__version__,
            home=str(self.paths.home),
            index_backend=self.settings.index_backend,
            **_engine_fields(index),
            grep_engine=rg.engine,
            ripgrep=rg.path,
            ripgrep_source=rg.source,
            ripgrep_version=rg.version,
            embedder=embedder,
            reranker=reranker,
            knowledge_bases=kbs,
            problems=problems,
            notes=index.notes
            + [note for note in (rg.note, embedder.note if embedder.use == "store" else None) if note],
        )

    def embedder_status(self, *, check: bool = False) -> EmbedderStatus:
        """Which embedding model this process uses (the store's, see ``services.store_model``) and why; with
        ``check``, whether a test embedding works."""
        provider = self.settings.embedding_provider
        models = self.providers.models
        try:
            embedder, use = models.embedder, models.use
        except CofferError as exc:  # e.g. model_path without model: say so, do not crash the doctor
            return EmbedderStatus(
                provider=provider, identity=None, reachable=False, error=f"{exc.message} {exc.hint_for('cli')}".strip()
            )
        status = EmbedderStatus(
            provider=use.store.provider if use.status == "store" and use.store is not None else provider,
            identity=embedder.identity if embedder is not None else None,
            reachable=None,
            store_model=use.store.identity if use.store is not None else None,
            configured=use.configured,
            use=use.status,
            note=" ".join(part for part in (use.message, use.hint) if part) or None,
        )
        if embedder is None or not check:
            return status
        started = time.perf_counter()
        try:
            vector = embedder.embed_query("Coffer doctor: is the embedder reachable?")
        except CofferError as exc:
            return status.model_copy(update={"reachable": False, "error": f"{exc.message} {exc.hint}".strip()})
        seconds = round(time.perf_counter() - started, 3)
        return status.model_copy(update={"reachable": True, "dimensions": len(vector), "seconds": seconds})

    def _reranker_status(self, check: bool) -> RerankerStatus:
        """The reranker's configuration and, with ``check``, whether a probe reranking works (no budget)."""
        provider = self.settings.rerank_provider
        try:
            reranker = self.providers.reranker
        except ConfigError as exc:
            return RerankerStatus(
                provider=provider, identity=None, reachable=False, error=f"{exc.message} {exc.hint_for('cli')}".strip()
            )
        if reranker is None:
            return RerankerStatus(provider=provider, identity=None, reachable=None)
        status = RerankerStatus(
            provider=provider,
            identity=reranker.identity,
            reachable=None,
            candidates=reranker.candidates,
            timeout_ms=reranker.timeout_ms,
        )
        if not check:
            return status
        try:
            seconds = reranker.check()
        except CofferError as exc:
            error = f"{exc.message} {exc.hint_for('cli')}".strip()
            return status.model_copy(update={"reachable": False, "error": error})
        return status.model_copy(update={"reachable": True, "seconds": seconds})

    def record_invocation(
        self, tool: str, client: str, duration_ms: float, outcome: str, error_code: str | None = None
    ) -> None:
        """Log one MCP tool call (no arguments, no content): queued, written by a background thread
        (``services.invocations``), so a call never waits for the index to log itself."""
        self.calls.record(tool, client, duration_ms, outcome, error_code)

    def invocations(self, *, limit: int = 1000) -> list[InvocationRow]:
        """The last ``limit`` tool calls logged, oldest first, including those still queued."""
        self.calls.flush()
        return self.index.invocations(limit=limit)


def _engine_fields(index: IndexDiagnosis) -> dict[str, Any]:
    """The report's fields of the index's engine: each backend has its own, named after it (the others stay None)."""
    if index.backend == "sqlite":
        return {
            "sqlite_binding": index.binding,
            "sqlite_version": index.version,
            "fts5": index.keyword_index,
            "sqlite_vec_version": index.vector_version,
        }
    return {
        "postgres_version": index.version or None,  # "" when the server could not be reached
        "postgres_driver": index.binding or None,
        "pgvector_version": index.vector_version,
    }
