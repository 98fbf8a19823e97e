"""A document file read from disk, with every index field derived from it (never from "now").

The frontmatter is the truth; what it lacks falls back to the file (its name, its mtime, the hash
of its body). A body whose hash differs from the recorded one was edited outside Coffer.

A frontmatter that does not parse (a YAML typo made by hand) is not a file without metadata: the
``Truth`` says what is wrong with it, its body is still indexed, ``keeping_metadata`` gives it the
metadata its row last had (without a row, after a rebuild of the index, it has what the block's
entries that parse on their own say), and ``check_rewritable`` refuses any write over it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from coffer_mcp.convert import derive_title
from coffer_mcp.errors import FrontmatterError
from coffer_mcp.index import DocumentRow
from coffer_mcp.store import (
    KbPaths,
    body_sha256,
    file_stamp,
    frontmatter_tags,
    parse_frontmatter,
    read_store_file,
)
from coffer_mcp.timeutil import from_epoch_ns

__all__ = [
    "Truth",
    "check_rewritable",
    "edited_by_hand",
    "hand_title",
    "holds_edits",
    "keeping_metadata",
    "read_truth",
    "text_field",
    "truth_of",
]


@dataclass(frozen=True, slots=True)
class Truth:
    """A document file read from disk, with every index field derived from it."""

    row: DocumentRow
    body: str
    problem: str | None = None
    """Why the file's frontmatter does not parse (the row then has none of its metadata), or None."""


def read_truth(kb: KbPaths, doc_id: str) -> Truth | None:
    """Read ``docs/<doc_id>.md`` and derive its row; None if the file is gone."""
    try:
        data, stat = read_store_file(kb.doc(doc_id))
    except FileNotFoundError:
        return None
    meta, body, problem, salvaged = parse_frontmatter(data.decode("utf-8", errors="replace"))
    meta = meta or salvaged  # a block that does not parse: what its entries that do say
    mtime = from_epoch_ns(stat.st_mtime_ns)
    return Truth(_derive_row(kb, doc_id, meta or {}, not meta, body, file_stamp(stat), mtime), body, problem)


def keeping_metadata(kb: KbPaths, truth: Truth, last: DocumentRow) -> Truth:
    """``truth`` of a file whose frontmatter does not parse, with the metadata its row ``last`` had.

    A typo in the YAML is not the user removing the document's tags, dates and source: until it is
    fixed the document keeps them (tag filters and ``check_sources`` go on working), while its body
    is indexed as the file has it now. ``truth`` as it is when its frontmatter parses, or when the
    row has no metadata to keep.
    """
    if truth.problem is None or not last.metadata:
        return truth
    row = truth.row  # derived without a frontmatter: its updated_at is the file's modification time
    kept = _derive_row(kb, row.id, last.metadata, False, truth.body, row.file_stamp, row.updated_at, row.source_stamp)
    return Truth(kept, truth.body, truth.problem)


def check_rewritable(kb: KbPaths, truth: Truth) -> None:
    """Refuse to write over a document file whose frontmatter does not parse.

    Coffer would write the frontmatter from what it could read, and drop every field of the block
    (its source, dates, conversion record, keys written by hand) for good.

    Raises:
        FrontmatterError: the file's frontmatter does not parse.
    """
    if truth.problem is None:
        return
    raise FrontmatterError(
        f"The frontmatter of document {truth.row.id} does not parse ({truth.problem}), in {kb.doc(truth.row.id)}; "
        "Coffer will not rewrite it and lose what it holds.",
        hint="Fix the YAML between its '---' lines by hand (a typo such as an unclosed bracket or quote), then "
        "try again. The file was left untouched; its body is still searchable.",
    )


def truth_of(
    kb: KbPaths,
    doc_id: str,
    metadata: dict[str, Any],
    body: str,
    *,
    source_stamp: str = "",
    sha: str | None = None,
) -> Truth:
    """The ``Truth`` of a file just written from ``metadata`` and ``body`` (saves reading it back);
    ``source_stamp``: that of the source file just read, if one vouches for its bytes; ``sha``: the
    body's hash when the caller took it already."""
    stat = kb.doc(doc_id).stat()
    mtime = from_epoch_ns(stat.st_mtime_ns)
    row = _derive_row(kb, doc_id, metadata, False, body, file_stamp(stat), mtime, source_stamp, sha)
    return Truth(row, body)


def edited_by_hand(truth: Truth) -> bool:
    """Whether the body on disk may not be the one Coffer last wrote: its frontmatter records another
    ``content_sha256``, or none (Coffer records one with every body it writes)."""
    return truth.row.metadata.get("content_sha256") != truth.row.content_sha256


def holds_edits(truth: Truth | None) -> bool:
    """Whether a document's file holds edits that its source must never overwrite or delete: a body
    edited in Coffer or by hand (indexed yet or not), or a frontmatter typed by hand that does not parse."""
    return truth is not None and (truth.row.source_mode == "edited" or truth.problem is not None)


def hand_title(truth: Truth) -> str | None:
    """The frontmatter's title if it was set by hand (it is not the one the body gives), else None.

    A title the body gives (its first H1, else the file name) follows the body; one the user wrote
    in the frontmatter is kept by every rewrite of the body: an edit, a conversion again.
    """
    own = text_field(truth.row.metadata.get("title"))
    return own if own and own != derive_title(truth.body, truth.row.original_filename) else None


def _derive_row(
    kb: KbPaths,
    doc_id: str,
    meta: dict[str, Any],
    bare: bool,
    body: str,
    stamp: str,
    mtime: str,
    source_stamp: str = "",
    sha: str | None = None,
) -> DocumentRow:
    """The index row of a document, from its frontmatter with fallbacks to its file's ``stamp`` and
    modification time ``mtime`` (never "now"); ``sha``: the body's hash, when known."""
    content_sha = sha or body_sha256(body)
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
        file_stamp=stamp,
        source_stamp=source_stamp,
    )


def text_field(value: Any) -> str:
    return "" if value is None else str(value).strip()
