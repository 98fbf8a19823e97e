"""A document file read from disk, with every index field derived from it (never from "now").

The frontmatter is the truth; what it lacks falls back to the file (its name, its mtime, the hash
of its body). A body whose hash differs from the recorded one was edited outside Coffer.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from coffer_mcp.convert import derive_title
from coffer_mcp.index import DocumentRow
from coffer_mcp.store import KbPaths, body_sha256, file_stamp, frontmatter_tags, parse_document, read_store_file
from coffer_mcp.timeutil import from_epoch_ns

__all__ = ["Truth", "read_truth", "text_field", "truth_of"]


@dataclass(frozen=True, slots=True)
class Truth:
    """A document file read from disk, with every index field derived from it."""

    row: DocumentRow
    body: str


def read_truth(kb: KbPaths, doc_id: str) -> Truth | None:
    """Read ``docs/<doc_id>.md`` and derive its row; None if the file is gone."""
    try:
        data, stat = read_store_file(kb.doc(doc_id))
    except FileNotFoundError:
        return None
    meta, body = parse_document(data.decode("utf-8", errors="replace"))
    return Truth(_derive_row(kb, doc_id, meta or {}, meta is None, body, stat), body)


def truth_of(kb: KbPaths, doc_id: str, metadata: dict[str, Any], body: str, *, source_stamp: str = "") -> Truth:
    """The ``Truth`` of a file just written from ``metadata`` and ``body`` (saves reading it back);
    ``source_stamp``: that of the source file just read, if one vouches for its bytes."""
    return Truth(_derive_row(kb, doc_id, metadata, False, body, kb.doc(doc_id).stat(), source_stamp), body)


def _derive_row(
    kb: KbPaths, doc_id: str, meta: dict[str, Any], bare: bool, body: str, stat: os.stat_result, source_stamp: str = ""
) -> DocumentRow:
    """The index row of a document, from its frontmatter with file-based fallbacks (never "now")."""
    content_sha = body_sha256(body)
    mtime = from_epoch_ns(stat.st_mtime_ns)
    # A body whose hash differs from the one we recorded was edited outside Coffer.
    edited_outside = bare or meta.get("content_sha256") not in (None, content_sha)
    filename = text_field(meta.get("original_filename")) or f"{doc_id}.md"
    mode = "edited" if edited_outside else text_field(meta.get("source_mode"))
    return DocumentRow(
        id=doc_id,
        kb=kb.name,
        title=text_field(meta.get("title")) or derive_title(body, filename),
        original_filename=filename,
        original_format=text_field(meta.get("original_format")) or "md",
        source_sha256=text_field(meta.get("source_sha256")) or content_sha,
        content_sha256=content_sha,
        source_mode="edited" if mode == "edited" else "converted",
        source_path=text_field(meta.get("source_path")) or None,
        conversion_engine=text_field(meta.get("conversion_engine")),
        converted_at=text_field(meta.get("converted_at")) or None,
        created_at=text_field(meta.get("created_at")) or mtime,
        updated_at=mtime if edited_outside else (text_field(meta.get("updated_at")) or mtime),
        metadata=meta,
        tags=frontmatter_tags(meta),
        file_stamp=file_stamp(stat),
        source_stamp=source_stamp,
    )


def text_field(value: Any) -> str:
    return "" if value is None else str(value).strip()
