"""The lean views of the results an agent reads most: search, grep, list and read.

The core returns every field (the CLI and the viewer show them). Over MCP, what repeats something
the agent already has is left out: a chunk id that is ``<document_id>:<position>``, a title on
every passage of one document, hashes and file paths on every row, the frontmatter on every page
of a long document, the text twice when a passage is expanded (``markdown`` and ``chunks``), a
Word document's ``source_location`` that only repeats the passage's ``heading_path``.
``list_documents`` and ``read_document`` bring theirs back with ``details=true``. A field set to
None here is then left out by ``_wire``. Measured in docs/benchmarks.md, "Lean results".
"""

from __future__ import annotations

from typing import Any

from coffer_mcp.models import Document, DocumentInfo, DocumentPage, GrepResult, SearchResult

__all__ = ["document", "document_page", "grep_result", "search_result"]

# What a listing row carries only with details: the KB (the caller named it) and where the file is.
_ROW_DETAILS = dict.fromkeys(("kb", "content_sha256", "source_sha256", "path"))


def search_result(result: SearchResult) -> SearchResult:
    """Passages that say each thing once.

    No ``chunk_id`` (it is ``<document_id>:<position>``); the title only on a document's first
    passage, and not again at the head of ``heading_path``; ``kb`` only when several knowledge
    bases were searched; scores to four significant digits; ``matched_terms`` only when a passage
    holds some of the query's terms, not all; ``source_location`` when it says more than the
    headings; no ``original_filename``.
    """
    several = len(result.knowledge_bases) > 1
    seen: set[tuple[str | None, str]] = set()
    passages = []
    for p in result.passages:
        key = (p.kb, p.document_id)
        passages.append(
            p.model_copy(
                update={
                    "title": None if key in seen else p.title,
                    "heading_path": _below_title(p.heading_path, p.title),
                    "score": float(f"{p.score:.4g}"),
                    "chunk_id": None,
                    "kb": p.kb if several else None,
                    # Holding every term is what a passage is expected to do: only the exception is said.
                    "matched_terms": "some" if p.matched_terms == "some" else None,
                    "source_location": _beyond_headings(p.source_location, p.heading_path),
                    "original_filename": None,
                }
            )
        )
        seen.add(key)
    return result.model_copy(update={"passages": passages})


def _below_title(headings: list[str], title: str | None) -> list[str]:
    return headings[1:] if headings[:1] == [title] else headings


def _beyond_headings(location: dict[str, Any] | None, headings: list[str]) -> dict[str, Any] | None:
    """A location, unless it is a Word heading the passage's ``heading_path`` already names."""
    return None if location == {"heading": headings} else location


def grep_result(result: GrepResult) -> GrepResult:
    """Hits without the file's path and line: ``line_number`` counts in the body, as read_document does."""
    hits = [hit.model_copy(update={"path": None, "file_line": None}) for hit in result.hits]
    return result.model_copy(update={"hits": hits})


def document_page(page: DocumentPage) -> DocumentPage:
    """Rows without the KB, the hashes and the file path."""
    rows: list[DocumentInfo] = [row.model_copy(update=_ROW_DETAILS) for row in page.documents]
    return page.model_copy(update={"documents": rows})


def document(found: Document) -> Document:
    """No file path; the frontmatter on the first page only; around a passage, the text once (in chunks)."""
    if found.unit == "chunks":
        chunks = [
            c.model_copy(
                update={
                    "heading_path": _below_title(c.heading_path, found.title),
                    "source_location": _beyond_headings(c.source_location, c.heading_path),
                }
            )
            for c in found.chunks
        ]
        return found.model_copy(update={"path": None, "metadata": None, "markdown": None, "chunks": chunks})
    return found.model_copy(update={"path": None, "metadata": found.metadata if found.offset == 0 else None})
