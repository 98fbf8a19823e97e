"""The ingest pipeline: a file's bytes become a document, on one path.

An ``Upload`` is hashed once; under the knowledge base's lock it is matched once (by
``source_path``, else ``source_url``, else among earlier uploads by ``original_filename``),
answered early when the match says so (the same bytes: ``unchanged``; other bytes without
``replace``: ``duplicate``), converted once, planned, its two files written (the original, then
the Markdown: the commit point), and its rows indexed in one transaction with its audit record —
or, in a folder ingest, in its batch's (``index_batch``: a group commit). The row the index wrote
is the answer's: nothing is read back.

A file slow to convert (a PDF, an Office file: ``quick_to_convert``) is converted before the lock,
so that no writer waits on a converter; it is matched before, only to spare an identical or
refused re-upload the conversion, and again under the lock, where the match holds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Literal

from coffer_mcp.audit import AuditEvent
from coffer_mcp.convert import Conversion
from coffer_mcp.errors import CofferError, IngestRejectedError, SourceConflictError
from coffer_mcp.index import DocumentRow, Index
from coffer_mcp.indexing.reconvert import conversion_options
from coffer_mcp.indexing.reindex import DocumentWrite, Indexed, index_document, index_documents
from coffer_mcp.indexing.truth import check_rewritable, holds_edits, read_truth
from coffer_mcp.models import IngestResult
from coffer_mcp.services.answers import document_result, missing_document
from coffer_mcp.services.catalogue import Catalogue
from coffer_mcp.services.freshness import Freshness
from coffer_mcp.services.locks import Locks
from coffer_mcp.services.planned import Chunked, Planned, Upload, plan
from coffer_mcp.services.providers import Providers
from coffer_mcp.services.uploads import NAMED, note_tags, upload_match, without_note_block
from coffer_mcp.settings import Settings
from coffer_mcp.store import KbPaths

__all__ = ["Ingest", "Retag", "source_conflict"]

Retag = Callable[[str, str, list[str], str], IngestResult]
"""``retag(kb, document id, tags, actor)``: give an unchanged document other tags (an edit of its tags)."""

_KEYWORD_ONLY = (
    "Its vectors could not be computed (the embedding provider failed, or is cooling down after a failure): "
    "searches find it by keyword only until a later read, or a reindex, embeds it."
)
_NOT_HERE = "Searches find it by keyword only until a process that can build the store's embedding model embeds it."


class Ingest:
    """Turns uploads into documents: decided under the lock, written, indexed one by one or by batch."""

    def __init__(
        self,
        *,
        settings: Settings,
        index: Index,
        catalogue: Catalogue,
        locks: Locks,
        freshness: Freshness,
        providers: Providers,
        retag: Retag,
    ) -> None:
        self.settings = settings
        self.index = index
        self.catalogue = catalogue
        self.locks = locks
        self.freshness = freshness
        self.providers = providers
        self._retag_document = retag

    # -- one file --------------------------------------------------------------------------------

    def ingest(
        self, upload: Upload, *, replace: bool, actor: str, keep_edits: bool = False, tags: list[str] | None = None
    ) -> IngestResult:
        """Ingest ``upload`` on its own: its files written and synced, its rows in their own transaction.

        ``keep_edits``: a matching document edited in Coffer is never replaced. ``tags`` (checked)
        replace the document's own; None keeps them.

        Raises:
            SourceConflictError: ``keep_edits``, and the matching document was edited in Coffer.
            IngestRejectedError: ``duplicate`` (other bytes without ``replace``), or the file's own refusal.
        """
        from coffer_mcp.convert import quick_to_convert  # here: it loads every converter, which a read never needs

        conversion = None
        if not self.locks.holds(upload.paths.name) and not quick_to_convert(upload.name, len(upload.data)):
            made = self._convert_before_lock(upload, replace=replace, keep_edits=keep_edits)
            if isinstance(made, IngestResult):
                return self.retag(upload.paths, made, tags, actor)
            conversion = made
        with self.locks.writing(upload.paths):
            decided = self.decide(upload, replace=replace, keep_edits=keep_edits, tags=tags, conversion=conversion)
            if isinstance(decided, Planned):
                decided.write()
                decided = self.index_one(decided, actor)
        return self.retag(upload.paths, decided, tags, actor)  # after the lock: retagging takes it

    def _convert_before_lock(
        self, upload: Upload, *, replace: bool, keep_edits: bool
    ) -> tuple[Conversion, dict[str, object] | None] | IngestResult:
        """A slow file's conversion, made before the lock unless its match (looked up without the lock,
        and looked up again under it) answers it now."""
        match = self._match(upload)
        edited = match is not None and match.source_mode == "edited"
        early = self._early(upload, match, replace=replace, keep_edits=keep_edits, edited=edited)
        if early is not None:
            return early
        if keep_edits and match is not None and edited:
            raise source_conflict(match)
        return self._convert(upload)

    def decide(
        self,
        upload: Upload,
        *,
        replace: bool,
        keep_edits: bool,
        tags: list[str] | None,
        conversion: tuple[Conversion, dict[str, object] | None] | None = None,
        chunks: Chunked | None = None,
        matches: Mapping[str, DocumentRow | None] | None = None,
    ) -> Planned | IngestResult:
        """What ``upload`` comes to, decided holding the lock: the files to write, or the answer when
        nothing is to be written. Matched here, and converted unless ``conversion`` was made already.
        ``matches``: documents by source path, looked up for several files at once under the lock held
        since (a folder ingest's next files), used in place of a query of this file's own.

        Raises:
            SourceConflictError, IngestRejectedError: as ``ingest``.
        """
        paths = upload.paths
        existing = self._live_match(upload, matches)
        # The file says what the document is now: an edit saved by hand that no read has indexed yet is
        # an edit all the same (a followed source must not overwrite it), and its tags are the document's.
        truth = read_truth(paths, existing.id) if existing is not None else None
        edited = existing is not None and (existing.source_mode == "edited" or holds_edits(truth))
        early = self._early(upload, existing, replace=replace, keep_edits=keep_edits, edited=edited)
        if early is not None:
            return early
        if keep_edits and existing is not None and edited:
            raise source_conflict(existing)
        if truth is not None:
            check_rewritable(paths, truth)
        converted, note = conversion or self._convert(upload)
        on_disk = truth.row if truth is not None else existing
        return plan(upload, converted, note, existing, on_disk, tags, chunks)

    def _convert(self, upload: Upload) -> tuple[Conversion, dict[str, object] | None]:
        options = conversion_options(self.settings)
        return without_note_block(upload.name, options.convert(upload.name, upload.data))

    # -- indexing what was written ----------------------------------------------------------------

    def index_one(self, planned: Planned, actor: str) -> IngestResult:
        """Index a planned ingest whose files are written, with its audit record. Call under the lock."""
        paths = planned.paths
        self.freshness.wrote(paths)
        config = self.catalogue.config(paths.name)
        write = self._write(planned, actor)
        indexed = index_document(
            self.index,
            paths,
            config,
            planned.doc_id,
            truth=write.truth,
            embedder=self.providers.embedder,
            record=write.record,
            new=write.new,
        )
        assert indexed is not None  # its file was just written, under the lock
        return self._answer(planned, indexed, config.vector)

    def index_batch(self, batch: Sequence[Planned], actor: str) -> list[IngestResult | CofferError | OSError]:
        """Index planned ingests whose files are written and synced, in one transaction (a group commit).

        When the batch cannot be committed, each document is indexed again in a transaction of its
        own, so one bad document is reported alone (its error in its place). Call under the lock.
        """
        if not batch:
            return []
        paths = batch[0].paths
        self.freshness.wrote(paths)
        config = self.catalogue.config(paths.name)
        try:
            writes = [self._write(planned, actor, config.chunk_size, config.chunk_overlap) for planned in batch]
            indexed = index_documents(self.index, paths, config, writes, embedder=self.providers.embedder)
        except (CofferError, OSError):
            return [self._index_alone(planned, actor) for planned in batch]
        return [self._answer(planned, each, config.vector) for planned, each in zip(batch, indexed, strict=True)]

    def _index_alone(self, planned: Planned, actor: str) -> IngestResult | CofferError | OSError:
        try:
            return self.index_one(planned, actor)
        except (CofferError, OSError) as exc:
            return exc

    def _write(self, planned: Planned, actor: str, chunk_size: int = 0, chunk_overlap: int = 0) -> DocumentWrite:
        """What the index writes for ``planned``, its audit record with it (and the chunks made ahead, when
        they were made with ``chunk_size`` and ``chunk_overlap``)."""
        new = planned.existing is None
        event = AuditEvent.KB_DOCUMENT_INGESTED if new else AuditEvent.KB_DOCUMENT_UPDATED
        kb, doc_id = planned.paths.name, planned.doc_id

        def record() -> None:
            self.index.audit(event, kb, actor, doc_id, planned.details)

        return DocumentWrite(doc_id, planned.truth(), record, new, planned.chunks_for(chunk_size, chunk_overlap))

    def _answer(self, planned: Planned, indexed: Indexed, vector: bool) -> IngestResult:
        status: Literal["created", "updated"] = "created" if planned.existing is None else "updated"
        result = document_result(self.index, planned.paths, indexed.row, status, indexed.chunks)
        note = self.keyword_only_note(vector, indexed.row)
        return result if note is None else result.model_copy(update={"note": note})

    def keyword_only_note(self, vector: bool, row: DocumentRow) -> str | None:
        """Why a document just written to a vector knowledge base is found by keyword only for now, or None.

        Said in the answer too: a client may not show log messages.
        """
        use = self.providers.models.use
        if not (vector and row.embed_pending) or (self.providers.embedder is None and use.status != "refused"):
            return None
        return _KEYWORD_ONLY if use.status != "refused" else f"{_NOT_HERE} {use.message}"

    # -- matching ----------------------------------------------------------------------------------

    def _match(self, upload: Upload, matches: Mapping[str, DocumentRow | None] | None = None) -> DocumentRow | None:
        """A re-ingest's document: matched by ``source_path`` (in ``matches`` when they hold it), else
        ``source_url``; an upload's (neither) by ``original_filename``, among uploads only (``upload_match``).

        Raises:
            IngestRejectedError: ``duplicate``, an upload whose name is ambiguous or taken by a document
                ingested from a path or URL.
        """
        kb = upload.paths.name
        if upload.source_path and matches is not None and upload.source_path in matches:
            return matches[upload.source_path]
        if upload.source_path:
            return self.index.find_document(kb, source_path=upload.source_path)
        if upload.source_url:
            return self.index.find_document(kb, source_url=upload.source_url)
        return upload_match(kb, upload.name, self.index.documents_named(kb, upload.name, NAMED))

    def _live_match(self, upload: Upload, matches: Mapping[str, DocumentRow | None] | None) -> DocumentRow | None:
        """The matching document whose file still exists; rows of files deleted by hand are dropped (and
        the match looked up again: ``matches`` serve the first look only).

        Call while holding the KB lock.
        """
        paths = upload.paths
        if not (upload.source_path or upload.source_url):  # a file deleted by hand leaves no ambiguity behind
            named = self.index.documents_named(paths.name, upload.name, NAMED)
            gone = [named_row.id for named_row in named if not paths.doc(named_row.id).exists()]
            for doc_id in gone:
                index_document(self.index, paths, self.catalogue.config(paths.name), doc_id)
            if not gone:
                return upload_match(paths.name, upload.name, named)
        row = self._match(upload, matches)
        while row is not None:
            if paths.doc(row.id).exists():
                return row
            index_document(self.index, paths, self.catalogue.config(paths.name), row.id)  # removes the stale rows
            row = self._match(upload)
        return None

    def _early(
        self, upload: Upload, existing: DocumentRow | None, *, replace: bool, keep_edits: bool, edited: bool
    ) -> IngestResult | None:
        """The answer to a re-upload of ``existing`` that needs no write, or None to go on.

        The same bytes again are ``unchanged``, except when ``replace`` asks for the source's version of
        a document edited since (in Coffer or by hand): then its conversion replaces the edits, as the
        refusals of an edited document's update say it will.
        """
        if existing is None:
            return None
        if existing.source_sha256 == upload.source_sha:
            if replace and not keep_edits and edited:
                return None
            return self.unchanged(upload.paths, existing.id)
        if not replace:
            raise IngestRejectedError(
                "duplicate",
                f"'{upload.name}' is already in knowledge base '{upload.paths.name}' as document {existing.id}, "
                "with different content.",
                hint="Pass {arg:replace=true} to update that document in place, or use another filename.",
            )
        return None

    def unchanged(self, paths: KbPaths, doc_id: str) -> IngestResult:
        """The answer about a document left as it was, read from the index.

        Outside the lock (an unchanged re-upload of a slow file) the document or the whole knowledge
        base may have been deleted by another process since it was matched.
        """
        row = self.index.get_document(paths.name, doc_id)
        if row is None:
            gone = not paths.root.is_dir()
            raise self.catalogue.unknown_kb(paths.name) if gone else missing_document(paths.name, doc_id)
        return document_result(self.index, paths, row, "unchanged", None)

    def retag(self, paths: KbPaths, result: IngestResult, tags: list[str] | None, actor: str) -> IngestResult:
        """An unchanged re-upload's answer, after giving its document ``tags`` when they differ (with the
        tags of its own frontmatter, which an ingest always keeps)."""
        if tags is None or result.status != "unchanged":
            return result
        row = self.index.get_document(paths.name, result.document_id)
        tags = note_tags(row.metadata.get("source_frontmatter") if row is not None else None, tags) or []
        if list(result.tags) == list(tags):  # spelling and order included: a change of either is written
            return result
        return self._retag_document(paths.name, result.document_id, tags, actor)


def source_conflict(row: DocumentRow) -> SourceConflictError:
    return SourceConflictError(
        f"Document {row.id} was edited in Coffer since it was ingested from {row.source_path or 'its file'}; the "
        "file changed too, and is not ingested over the edits.",
        hint="Keep editing in Coffer, or re-ingest the file with {arg:replace=true} to take its version (the "
        "edits are lost).",
    )
