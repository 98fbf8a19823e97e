"""Embedding a document's chunks into the vector index, and catching up on documents that are due.

A document of a vector knowledge base is *due* when its embedding failed (``embed_pending``) or
its vectors are missing or come from another model than the configured one. Embedding only
writes vectors: chunks and full-text rows are never touched, so a retry after a provider outage
or a change of model costs embedding time and nothing else. Chunks are embedded as
``"{title}\\n\\n{chunk}"`` (the title helps short chunks), queries as they are. When a
document's chunks are rebuilt (a forced reindex), chunks whose text and title did not change keep
their vectors (``saved_vectors`` / ``restore_vectors``): a vector is a function of the model and
its input, so computing it again would only cost time, or money with a paid provider.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeGuard

from coffer_mcp.errors import EmbeddingError
from coffer_mcp.index import DocumentRow, Index

if TYPE_CHECKING:
    from coffer_mcp.embed import Embedder

__all__ = ["SavedVectors", "embed_document", "embed_due", "embedder_usable", "restore_vectors", "saved_vectors"]

log = logging.getLogger(__name__)


def embedder_usable(embedder: Embedder | None) -> TypeGuard[Embedder]:
    """An embedder is configured and not cooling down after a failure."""
    return embedder is not None and not getattr(embedder, "cooling_down", False)


def embed_document(index: Index, kb: str, doc_id: str, embedder: Embedder) -> int | None:
    """Embed one document's chunks: how many vectors were computed, or None when the provider
    failed (the document stays due)."""
    row = index.get_document(kb, doc_id)
    chunks = index.chunk_texts(doc_id)
    if row is None or not chunks:
        return 0
    try:
        embedded = embedder.embed_documents([f"{row.title}\n\n{text}" for _, text in chunks])
        if len(embedded) != len(chunks):
            raise EmbeddingError(f"the provider returned {len(embedded)} vectors for {len(chunks)} texts")
        with index.transaction():
            rows = [(chunk_id, vector) for (chunk_id, _), vector in zip(chunks, embedded, strict=True)]
            index.store_vectors(embedder.identity, len(embedded[0]), kb, rows)
            index.set_embedding(doc_id, pending=False, model=embedder.identity)
    except (EmbeddingError, ValueError) as exc:
        cooling = getattr(exc, "code", "") == "embedding_cooling_down"
        log.log(
            logging.INFO if cooling else logging.WARNING,
            "embedding document %s of %s failed; it stays keyword-only for now: %s",
            doc_id,
            kb,
            exc,
        )
        if row.embedding_model in (None, embedder.identity):
            with index.transaction():
                index.set_embedding(doc_id, pending=True, model=None)
        # Else the document keeps the vectors it has: they are another model's, and whichever
        # process uses that model (the same store, configured otherwise) still searches with them.
        return None
    return len(embedded)


def embed_due(
    index: Index,
    kb: str,
    embedder: Embedder,
    *,
    seconds: float | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> int:
    """Embed the documents of ``kb`` that are due, within ``seconds`` (None: all; 0: none).

    Stops at the first provider failure (the cooldown then keeps later reads fast). Returns how
    many documents got vectors computed. Call while holding the KB lock.
    """
    if seconds is not None and seconds <= 0:
        return 0
    due = index.pending_documents(kb, embedder.identity)
    deadline = None if seconds is None else time.monotonic() + seconds
    done = 0
    for position, doc_id in enumerate(due, 1):
        if deadline is not None and time.monotonic() > deadline:
            break
        made = embed_document(index, kb, doc_id, embedder)
        if made is None:
            break
        done += made > 0
        if progress:
            progress(position, len(due))
    return done


@dataclass(frozen=True, slots=True)
class SavedVectors:
    """A document's vectors of one model, by the chunk text they were computed from."""

    model: str
    dimensions: int
    by_text: dict[str, bytes]


def saved_vectors(index: Index, current: DocumentRow | None, title: str) -> SavedVectors | None:
    """The vectors of the document row ``current``, if they can outlive a rebuild of its chunks.

    None when the document is due for embedding anyway, or its title (part of every embedded
    text) changes to ``title``. Read before the chunks are replaced, which drops their vectors.
    """
    if current is None or current.embed_pending or not current.embedding_model or current.title != title:
        return None
    dimensions = index.vector_dimensions(current.embedding_model)
    if dimensions is None:
        return None
    chunks = index.chunk_texts(current.id)
    blobs = index.stored_vectors(current.embedding_model, [chunk_id for chunk_id, _ in chunks])
    by_text = {text: blobs[chunk_id] for chunk_id, text in chunks if chunk_id in blobs}
    return SavedVectors(current.embedding_model, dimensions, by_text)


def restore_vectors(index: Index, kb: str, doc_id: str, saved: SavedVectors) -> bool:
    """Give the document's new chunks the saved vectors of identical texts, and mark it embedded.

    All or nothing: False (nothing written) unless every chunk has a saved vector. Call inside
    the write transaction that replaced the chunks.
    """
    chunks = index.chunk_texts(doc_id)
    if not chunks or any(text not in saved.by_text for _, text in chunks):
        return False
    index.store_vectors(saved.model, saved.dimensions, kb, [(cid, saved.by_text[text]) for cid, text in chunks])
    index.set_embedding(doc_id, pending=False, model=saved.model)
    return True
