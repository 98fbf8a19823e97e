"""What a merge does with each pack document: add it, skip it, or report it as a conflict.

A pack document whose id is already here is the same document only when a reader would see no
difference: its body, title, tags and the frontmatter keys written by hand. Coffer's bookkeeping
(times, hashes, ``source_path``, the conversion engine) is left out: it differs between machines,
or after an edit that was undone, without the document being another one. Anything else that
differs makes a conflict, and the document here is kept as it is: a merge never overwrites.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from coffer_mcp.indexing.truth import Truth, read_truth
from coffer_mcp.store import DocumentMeta, KbPaths

if TYPE_CHECKING:
    from coffer_mcp.index import DocumentRow

__all__ = ["Difference", "ImportConflict", "MergePlan", "SkippedDocument", "plan_merge"]

Difference = Literal["content", "title", "tags", "metadata"]
_COFFER_KEYS = frozenset(DocumentMeta.__dataclass_fields__) - {"extra"}


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True)


class SkippedDocument(_Model):
    document_id: str
    reason: Literal["already_present", "duplicate_source"] = Field(
        description="already_present: the same id with the same content, title, tags and hand-written "
        "frontmatter; duplicate_source: another document of the knowledge base has the same original "
        "(source_sha256)."
    )
    existing_document_id: str


class ImportConflict(_Model):
    document_id: str
    differences: list[Difference] = Field(
        default_factory=list,
        description="What differs from the document here: content (the body), title, tags, metadata "
        "(frontmatter keys written by hand).",
    )
    message: str


class MergePlan(_Model):
    add: list[str]
    skipped: list[SkippedDocument]
    conflicts: list[ImportConflict]


def plan_merge(here: KbPaths, rows: Iterable[DocumentRow], staged: KbPaths, doc_ids: list[str]) -> MergePlan:
    """Sort the pack's ``doc_ids`` (staged in ``staged``) against the knowledge base ``here``.

    ``rows`` are the index rows of ``here``, reconciled with its files.
    """
    ids: set[str] = set()
    by_source: dict[str, str] = {}
    for row in rows:
        ids.add(row.id)
        by_source.setdefault(row.source_sha256, row.id)
    add, skipped, conflicts = [], [], []
    for doc_id in doc_ids:
        packed = read_truth(staged, doc_id)
        assert packed is not None  # verified present
        local = read_truth(here, doc_id) if doc_id in ids else None
        if local is not None:
            conflict = _conflict(doc_id, local, packed)
            if conflict is None:
                skipped.append(
                    SkippedDocument(document_id=doc_id, reason="already_present", existing_document_id=doc_id)
                )
            else:
                conflicts.append(conflict)
        elif packed.row.source_sha256 in by_source:
            existing = by_source[packed.row.source_sha256]
            skipped.append(
                SkippedDocument(document_id=doc_id, reason="duplicate_source", existing_document_id=existing)
            )
        else:
            add.append(doc_id)
    return MergePlan(add=add, skipped=skipped, conflicts=conflicts)


def _conflict(doc_id: str, local: Truth, packed: Truth) -> ImportConflict | None:
    """The conflict between the document here and the pack's, None when a reader would see none."""
    details: dict[Difference, str] = {}
    if local.row.content_sha256 != packed.row.content_sha256:
        details["content"] = "content"
    if local.row.title != packed.row.title:
        details["title"] = f"title (here {local.row.title!r:.80}, in the pack {packed.row.title!r:.80})"
    if local.row.tags != packed.row.tags:
        details["tags"] = f"tags (here {_tags(local.row.tags)}, in the pack {_tags(packed.row.tags)})"
    mine, theirs = _hand_written(local), _hand_written(packed)
    keys = sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k))
    if keys:
        details["metadata"] = "frontmatter " + ", ".join(f"{k!r:.40}" for k in keys[:5])
    if not details:
        return None
    return ImportConflict(
        document_id=doc_id,
        differences=list(details),
        message=f"A document with this id is already here with a different {'; '.join(details.values())}; "
        "the one here was kept (import the pack with --as NAME to have its version beside it).",
    )


def _hand_written(truth: Truth) -> dict[str, object]:
    return {str(key): value for key, value in truth.row.metadata.items() if str(key) not in _COFFER_KEYS}


def _tags(tags: tuple[str, ...]) -> str:
    return ", ".join(tags)[:200] if tags else "none"
