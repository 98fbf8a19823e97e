"""Changing the store's embedding model: an explicit, confirmed command, never an environment's side effect.

``use_embedding_model`` makes this process's own model (its settings', or the embedder it was
given) the store's: it records it (``embedding.yaml``, then the index's copy), so every process of
the store follows at once (``services.store_model``), then embeds every document of every vector
knowledge base that lacks its vectors, a knowledge base's write lock held a few seconds at a time
so that other writers get their turn. Each document is committed as it is embedded: a run that
stops (a crash, Ctrl-C, a provider failure) leaves the rest due, and the next run (or any read of a
process that can build the model) continues. Once no document lacks the new vectors, the other
models' vectors are removed.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

from coffer_mcp.errors import ConfirmationRequiredError, InvalidArgumentError, counted
from coffer_mcp.index import Index
from coffer_mcp.indexing.vectorize import embed_document
from coffer_mcp.models import EmbeddingChange, KnowledgeBaseEmbedding, Progress
from coffer_mcp.services.catalogue import Catalogue
from coffer_mcp.services.locks import Locks
from coffer_mcp.services.providers import Providers
from coffer_mcp.store import StorePaths

__all__ = ["TURN_SECONDS", "EmbeddingService"]

TURN_SECONDS = 2.0
"""How long a re-embedding holds a knowledge base's write lock before letting other writers in."""


class EmbeddingService:
    """The store's embedding model and its change (``coffer embeddings``)."""

    def __init__(
        self, *, index: Index, paths: StorePaths, catalogue: Catalogue, locks: Locks, providers: Providers
    ) -> None:
        self.index = index
        self.paths = paths
        self.catalogue = catalogue
        self.locks = locks
        self.providers = providers

    def use_embedding_model(self, *, confirm: bool = False, progress: Progress | None = None) -> EmbeddingChange:
        """Make this process's embedding model the store's, and embed every vector knowledge base with it.

        Replacing another model needs ``confirm``: every document is embedded again, and the old
        model's vectors are removed at the end. Run again after an interruption, it continues.

        Raises:
            InvalidArgumentError: this process's embedding provider is ``none``.
            ConfirmationRequiredError: the store has another model and ``confirm`` is not set; nothing changed.
            EmbeddingError: the model cannot embed (checked before anything is changed).
        """
        embedder, config = self.providers.models.configured()
        if embedder is None:
            raise InvalidArgumentError(
                "This process's embedding provider is none: there is no model to make the store's.",
                hint="Name the model: coffer embeddings use MODEL --provider fastembed (or openai, with --base-url).",
            )
        store = self.providers.models.use.store
        kbs = [name for name in self.catalogue.sync() if self.catalogue.config(name).vector]
        if store is not None and store.identity != embedder.identity and not confirm:
            due = sum(len(self.index.pending_documents(kb, embedder.identity)) for kb in kbs)
            raise ConfirmationRequiredError(
                f"Not changing the store's embedding model from {store.identity} to {embedder.identity}.",
                hint=f"This embeds {counted(due, 'document')} of {counted(len(kbs), 'vector knowledge base')} again "
                f"with {embedder.identity} and then removes the vectors of {store.identity}; every process of the "
                "store uses the new model from then on (or searches by keyword until it can build it). Add "
                "--confirm to go ahead.",
            )
        dimensions = embedder.dimensions()  # loads the model, or calls the server once: nothing changed if it fails
        if store is None or store.identity != embedder.identity or self.index.store_model() is None:
            self.providers.models.record(embedder, dimensions, config)
        results = self._embed_all(kbs, progress)
        left = sum(result.remaining for result in results)
        removed = [] if left else self._remove_other_models(embedder.identity)
        warning = None
        if left:
            error = getattr(self.providers.embedder, "last_error", None) or "the embedding provider failed"
            warning = (
                f"{counted(left, 'document')} still lack the vectors of {embedder.identity} ({error}); searches find "
                "them by keyword meanwhile. Run the command again to continue (the old model's vectors are removed "
                "once none is left)."
            )
        return EmbeddingChange(
            model=embedder.identity,
            previous=store.identity if store is not None else None,
            dimensions=dimensions,
            knowledge_bases=results,
            removed_models=removed,
            warning=warning,
        )

    def _embed_all(self, kbs: list[str], progress: Progress | None) -> list[KnowledgeBaseEmbedding]:
        index, identity = self.index, self.providers.models.wanted_identity()
        total = sum(len(index.pending_documents(kb, identity)) for kb in kbs)
        done = 0

        def tick(kb: str) -> None:
            nonlocal done
            done += 1
            if progress is not None:
                progress(min(done, total), total, f"embedding {kb}")

        results = []
        for kb in kbs:
            embedded, remaining = self._embed_kb(kb, functools.partial(tick, kb))
            results.append(KnowledgeBaseEmbedding(kb=kb, embedded=embedded, remaining=remaining))
            if remaining:  # the provider failed: the next knowledge bases would fail too
                for other in kbs[len(results) :]:
                    left = len(index.pending_documents(other, identity))
                    results.append(KnowledgeBaseEmbedding(kb=other, embedded=0, remaining=left))
                break
        return results

    def _embed_kb(self, kb: str, tick: Callable[[], None]) -> tuple[int, int]:
        """Embed ``kb``'s due documents with the store's model, ``TURN_SECONDS`` of lock at a time:
        (documents embedded, documents left due by a provider failure)."""
        paths = self.paths.kb(kb)
        embedded, empty = 0, set[str]()  # documents without chunks have nothing to embed
        while True:
            with self.locks.writing(paths):
                embedder = self.providers.embedder
                if embedder is None or not self.catalogue.config(kb).vector:
                    return embedded, 0
                due = [doc for doc in self.index.pending_documents(kb, embedder.identity) if doc not in empty]
                if not due:
                    return embedded, 0
                until = time.monotonic() + TURN_SECONDS
                for doc_id in due:
                    made = embed_document(self.index, kb, doc_id, embedder)
                    if made is None:
                        return embedded, len(self.index.pending_documents(kb, embedder.identity)) - len(empty)
                    embedded += made > 0
                    if not made:
                        empty.add(doc_id)
                    tick()
                    if time.monotonic() > until:
                        break

    def _remove_other_models(self, identity: str) -> list[str]:
        """Remove the vectors of every model but ``identity`` (no process uses them: the store has one model)."""
        index = self.index
        others = [model for model in index.vector_models() if model != identity]
        for model in others:
            with index.transaction():
                index.drop_model(model)
        return others
