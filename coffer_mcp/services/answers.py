"""The answers the document services give about one document, built from its index row."""

from __future__ import annotations

from typing import Literal

from coffer_mcp.errors import DocumentNotFoundError
from coffer_mcp.index import DocumentRow, Index
from coffer_mcp.models import IngestResult
from coffer_mcp.store import KbPaths

__all__ = ["document_result", "missing_document"]


def document_result(
    index: Index,
    paths: KbPaths,
    row: DocumentRow,
    status: Literal["created", "updated", "unchanged"],
    chunks: int | None,
) -> IngestResult:
    """The answer about a document from its row: read back, or just written under the KB lock
    (the index is asked for the chunk count only when it is not given)."""
    return IngestResult(
        document_id=row.id,
        kb=paths.name,
        title=row.title,
        status=status,
        path=str(paths.doc(row.id)),
        source_mode=row.source_mode,
        original_filename=row.original_filename,
        chunk_count=index.chunk_count(doc_id=row.id) if chunks is None else chunks,
        tags=list(row.tags),
    )


def missing_document(kb: str, doc_id: object) -> DocumentNotFoundError:
    return DocumentNotFoundError(
        f"Document {str(doc_id)[:80]!r} does not exist in knowledge base '{kb}'.",
        hint="Document ids are 26-character ULIDs; find them with {tool:search_knowledge} or {tool:list_documents}.",
    )
