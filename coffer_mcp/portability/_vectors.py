"""Carrying chunk vectors in a pack, so a big corpus is not embedded again after an import.

Chunk ids differ between databases, so vectors travel keyed by document and chunk position: the
manifest lists, per document, how many chunk vectors follow in ``vectors.f32`` (float32,
little-endian, in chunk-position order) and a digest of the title and chunk texts that were
embedded. On import a document's vectors are used only when the importing index chunked it into
exactly the same texts (same digest) and the configured model has the same identity; any other
document simply stays due for embedding.
"""

from __future__ import annotations

import hashlib
import sys
from array import array
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import BinaryIO

from coffer_mcp.embed import Embedder
from coffer_mcp.errors import EmbeddingError
from coffer_mcp.index import Index
from coffer_mcp.portability._format import VectorDocument, VectorSet

__all__ = ["chunk_digest", "export_identity", "load_vectors", "write_vectors"]

_BATCH = 200


def chunk_digest(title: str, texts: Iterable[str]) -> str:
    """What a document's vectors were made from: its title and its chunk texts, in order."""
    digest = hashlib.sha256(title.encode("utf-8", "surrogatepass"))
    for text in texts:
        digest.update(b"\0")
        digest.update(text.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def _little_endian(blob: bytes) -> bytes:
    """float32 blobs in the pack are little-endian; the index hands them over in native order."""
    if sys.byteorder == "little":
        return blob
    values = array("f")
    values.frombytes(blob)
    values.byteswap()
    return values.tobytes()


def export_identity(index: Index, kb: str, embedder: Embedder | None) -> str | None:
    """The model whose vectors to export: the configured one, else the one most documents have."""
    if embedder is not None:
        return embedder.identity
    counts = Counter(index.embedded_models(kb))
    return counts.most_common(1)[0][0] if counts else None


def write_vectors(index: Index, kb: str, identity: str, doc_ids: set[str], out: BinaryIO) -> VectorSet | None:
    """Write the vectors of ``identity`` for the documents in ``doc_ids``; None if there are none.

    A document is included only when every one of its chunks has a vector of that model.
    """
    dims = index.vector_dimensions(identity)
    if dims is None:
        return None
    listed: list[VectorDocument] = []
    embedded = [row for row in index.documents(kb) if not row.embed_pending and row.embedding_model == identity]
    for doc in sorted(embedded, key=lambda row: row.id):
        if doc.id not in doc_ids:
            continue
        chunks = index.chunk_texts(doc.id)
        blobs = index.stored_vectors(identity, [chunk_id for chunk_id, _ in chunks])
        if not chunks or any(len(blobs.get(chunk_id, b"")) != dims * 4 for chunk_id, _ in chunks):
            continue
        out.writelines(_little_endian(blobs[chunk_id]) for chunk_id, _ in chunks)
        digest = chunk_digest(doc.title, (text for _, text in chunks))
        listed.append(VectorDocument(id=doc.id, chunks=len(chunks), text_sha256=digest))
    return VectorSet(model=identity, dimensions=dims, documents=listed) if listed else None


def load_vectors(
    index: Index, kb: str, vector_set: VectorSet, source: Path, targets: Mapping[str, str], embedder: Embedder
) -> tuple[int, str]:
    """Insert the pack's vectors of the documents in ``targets`` (pack id -> id in this store).

    Never calls the embedder. Returns (documents whose vectors were used, a note when none could be).
    """
    if embedder.identity != vector_set.model:
        return 0, (
            f"The pack's vectors come from {vector_set.model}, but this Coffer embeds with "
            f"{embedder.identity}: the documents are embedded again on the next reindex or search."
        )
    dims = vector_set.dimensions
    stored = index.vector_dimensions(embedder.identity)
    if stored is not None and stored != dims:
        return 0, (f"The pack's vectors cannot be used: {embedder.identity} has {stored} dimensions here, not {dims}.")
    try:
        return _load(index, kb, vector_set, source, targets, embedder.identity), ""
    except EmbeddingError as exc:  # e.g. no sqlite-vec here: the documents stay due for embedding
        return 0, f"The pack's vectors cannot be stored here: {exc.message}"


def _load(index: Index, kb: str, vector_set: VectorSet, source: Path, targets: Mapping[str, str], identity: str) -> int:
    dims = vector_set.dimensions
    loaded = 0
    batch: list[tuple[str, list[tuple[int, list[float]]]]] = []
    with source.open("rb") as handle:
        for doc in vector_set.documents:
            blob = handle.read(doc.chunks * dims * 4)
            target = targets.get(doc.id)
            rows = _matching_rows(index, kb, target, doc, blob, dims) if target else None
            if target and rows is not None:
                batch.append((target, rows))
            if len(batch) >= _BATCH:
                loaded += _store(index, kb, dims, identity, batch)
                batch = []
    return loaded + _store(index, kb, dims, identity, batch)


def _matching_rows(
    index: Index, kb: str, doc_id: str, doc: VectorDocument, blob: bytes, dims: int
) -> list[tuple[int, list[float]]] | None:
    """``(chunk id, vector)`` rows when the document here was chunked exactly as in the pack."""
    row = index.get_document(kb, doc_id)
    chunks = index.chunk_texts(doc_id)
    if row is None or len(chunks) != doc.chunks:
        return None
    if chunk_digest(row.title, (text for _, text in chunks)) != doc.text_sha256:
        return None
    values = array("f")
    values.frombytes(_little_endian(blob))
    return [(chunk_id, values[i * dims : (i + 1) * dims].tolist()) for i, (chunk_id, _) in enumerate(chunks)]


def _store(
    index: Index, kb: str, dims: int, identity: str, batch: list[tuple[str, list[tuple[int, list[float]]]]]
) -> int:
    if not batch:
        return 0
    with index.transaction():
        for doc_id, rows in batch:
            index.store_vectors(identity, dims, kb, rows)
            index.set_embedding(doc_id, pending=False, model=identity)
    return len(batch)
