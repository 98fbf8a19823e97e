"""Converting documents again from their originals when their converter changed (``reindex --force``).

Every converted document records the ``conversion_engine`` that made its Markdown. When
converting its format today would record another value — a better converter, or another
``html_main_content`` setting — a forced reindex converts its original in ``raw/`` again and
writes the new Markdown over the old, keeping the document's id, dates of origin and source
fields. Never silently: a plain reindex or a read does not do it, and each document it cannot
do is reported. A document edited by hand or by an agent is never overwritten (its Markdown is
its truth now), nor is one whose frontmatter does not parse; a missing or replaced original, or a
conversion that fails, leaves the Markdown as it was.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from coffer_mcp.audit import AuditEvent
from coffer_mcp.errors import CofferError, FrontmatterError, ReconversionBlockedError
from coffer_mcp.index import Index
from coffer_mcp.indexing.truth import Truth, check_rewritable, hand_title, keeping_metadata, read_truth, truth_of
from coffer_mcp.models import ReconversionSkip
from coffer_mcp.settings import Settings
from coffer_mcp.store import (
    DocumentMeta,
    KbPaths,
    atomic_write,
    atomic_write_all,
    body_sha256,
    read_store_file,
    remove_file,
    render_document,
    source_map_bytes,
)
from coffer_mcp.timeutil import utc_now

if TYPE_CHECKING:
    from coffer_mcp.convert import ConversionOptions

__all__ = ["Reconversion", "conversion_options"]


def conversion_options(settings: Settings) -> ConversionOptions:
    """How the settings say files are converted (ingest and re-conversion alike)."""
    from coffer_mcp.convert import ConversionOptions  # here: it loads every converter, which a search never needs

    return ConversionOptions(
        max_bytes=settings.max_document_bytes,
        timeout=settings.conversion_timeout,
        memory_bytes=settings.conversion_memory_mb * 1024 * 1024,
        html_main_content=settings.html_main_content,
    )


@dataclass(slots=True)
class Reconversion:
    """One forced reindex's re-conversion pass: how to convert, and what it did."""

    options: ConversionOptions
    actor: str = "cli"
    reconverted: list[str] = field(default_factory=list)
    skipped: list[ReconversionSkip] = field(default_factory=list)

    def refresh(self, index: Index, kb: KbPaths, doc_id: str) -> Truth | None:
        """The document as read from disk — converted again first when its engine is outdated.

        Call while holding the KB lock; the caller indexes the returned truth.
        """
        truth = read_truth(kb, doc_id)
        if truth is None:
            return None
        if truth.problem is not None and (last := index.get_document(kb.name, doc_id)) is not None:
            truth = keeping_metadata(kb, truth, last)  # its converter is the one its row last knew
        row = truth.row
        engine = self.options.engine(row.original_format)
        if row.conversion_engine == engine:
            return truth
        try:
            check_rewritable(kb, truth)
        except FrontmatterError as exc:
            return self._skip(truth, exc)
        if row.source_mode != "converted":
            return self._skip(
                truth,
                ReconversionBlockedError(
                    "It was edited after conversion; its Markdown is kept.",
                    code="edited",
                    hint="Ingest the original again with {arg:replace=true} to convert it anew (the edits are lost).",
                ),
            )
        try:
            data = self._original(kb, truth)
            conversion = self.options.convert(row.original_filename, data)
        except CofferError as exc:
            return self._skip(truth, exc)
        metadata = _reconverted_metadata(truth, conversion.markdown, conversion.title, conversion.engine)
        _write(
            kb,
            doc_id,
            render_document(metadata, conversion.markdown),
            source_map_bytes(conversion.markdown, conversion.places),
        )
        with index.transaction():
            index.audit(
                AuditEvent.KB_DOCUMENT_UPDATED,
                kb.name,
                self.actor,
                doc_id,
                {"reconverted": {"from": row.conversion_engine, "to": conversion.engine}},
            )
        self.reconverted.append(doc_id)
        return truth_of(kb, doc_id, metadata, conversion.markdown)

    def _original(self, kb: KbPaths, truth: Truth) -> bytes:
        """The original the document was converted from, checked against its recorded hash.

        Raises:
            ReconversionBlockedError: ``original_missing`` or ``original_changed``.
        """
        row = truth.row
        path = kb.raw / f"{row.id}.{row.original_format or 'bin'}"
        hint = "Ingest the original file again with {arg:replace=true} to convert it anew."
        try:
            data, _ = read_store_file(path)
        except OSError:
            raise ReconversionBlockedError(
                f"Its original raw/{path.name} is missing.", code="original_missing", hint=hint
            ) from None
        if hashlib.sha256(data).hexdigest() != row.source_sha256:
            raise ReconversionBlockedError(
                f"Its original raw/{path.name} is not the file it was converted from.",
                code="original_changed",
                hint=hint,
            )
        return data

    def _skip(self, truth: Truth, why: CofferError) -> Truth:
        row = truth.row
        self.skipped.append(
            ReconversionSkip(
                document_id=row.id,
                title=row.title,
                engine=row.conversion_engine,
                reason=why.code,
                message=why.message,
                hint=why.hint or None,
            )
        )
        return truth


def _write(kb: KbPaths, doc_id: str, document: str, source_map: bytes | None) -> None:
    """The document converted again, after its source map (or without the old one, which no longer holds)."""
    if source_map is None:
        remove_file(kb.source_map(doc_id))
        atomic_write(kb.doc(doc_id), document.encode("utf-8"))
    else:
        atomic_write_all([(kb.source_map(doc_id), source_map), (kb.doc(doc_id), document.encode("utf-8"))])


def _reconverted_metadata(truth: Truth, markdown: str, title: str, engine: str) -> dict[str, object]:
    """The old frontmatter with what conversion decides replaced; the title only if conversion chose it."""
    now = utc_now()
    return DocumentMeta.updated(
        truth.row.metadata,
        title=hand_title(truth) or title,
        content_sha256=body_sha256(markdown),
        conversion_engine=engine,
        converted_at=now,
        updated_at=now,
    )
