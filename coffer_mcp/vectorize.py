"""Embedding a document's chunks into the vector index, and catching up on documents that are due.

A document of a vector knowledge base is *due* when its embedding failed (``embed_pending``) or
its vectors are missing or come from another model than the configured one. Embedding only
writes vectors: chunks and full-text rows are never touched, so a retry after a provider outage
or a change of model costs embedding time and nothing else. Chunks are embedded as
``"{title}\\n\\n{chunk}"`` (the title helps short chunks), queries as they are.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from coffer_mcp.errors import EmbeddingError
from coffer_mcp.index import queries as q
from coffer_mcp.index import vectors
from coffer_mcp.index.db import Connection

if TYPE_CHECKING:
    from coffer_mcp.embed import Embedder

__all__ = ["embed_document", "embed_due", "embedder_usable"]

log = logging.getLogger(__name__)


def embedder_usable(embedder: Embedder | None) -> bool:
    """An embedder is configured and not cooling down after a failure."""
    return embedder is not None and not getattr(embedder, "cooling_down", False)


def embed_document(conn: Connection, kb: str, doc_id: str, embedder: Embedder) -> bool:
    """Embed one document's chunks. False (and the document stays due) when the provider fails."""
    row = conn.execute("SELECT title FROM documents WHERE id = ?", (doc_id,)).fetchone()
    chunks = q.chunk_texts(conn, doc_id)
    if row is None or not chunks:
        return True
    try:
        embedded = embedder.embed_documents([f"{row['title']}\n\n{text}" for _, text in chunks])
        if len(embedded) != len(chunks):
            raise EmbeddingError(f"the provider returned {len(embedded)} vectors for {len(chunks)} texts")
        with q.write(conn):
            table = vectors.model_table(conn, embedder.identity, len(embedded[0]))
            vectors.delete_vectors(conn, [chunk_id for chunk_id, _ in chunks])
            vectors.store_vectors(conn, table, kb, [(cid, vec) for (cid, _), vec in zip(chunks, embedded)])
            q.set_embedding(conn, doc_id, pending=False, model=embedder.identity)
    except (EmbeddingError, ValueError) as exc:
        cooling = getattr(exc, "code", "") == "embedding_cooling_down"
        log.log(logging.INFO if cooling else logging.WARNING,
                "embedding document %s of %s failed; it stays keyword-only for now: %s", doc_id, kb, exc)  # fmt: skip
        with q.write(conn):
            q.set_embedding(conn, doc_id, pending=True, model=None)
        return False
    return True


def embed_due(
    conn: Connection, kb: str, embedder: Embedder, *, seconds: float | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> int:  # fmt: skip
    """Embed the documents of ``kb`` that are due, within ``seconds`` (None: all of them).

    Stops at the first provider failure (the cooldown then keeps later reads fast). Returns how
    many documents were embedded. Call while holding the KB lock.
    """
    due = vectors.pending_documents(conn, kb, embedder.identity)
    deadline = None if seconds is None else time.monotonic() + seconds
    done = 0
    for doc_id in due:
        if deadline is not None and time.monotonic() > deadline:
            break
        if not embed_document(conn, kb, doc_id, embedder):
            break
        done += 1
        if progress:
            progress(done, len(due))
    return done
