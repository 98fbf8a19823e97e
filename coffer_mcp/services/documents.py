"""The document service: ingest, read, list, edit, delete.

Every write holds the knowledge base's lock, writes truth files atomically (the original first,
then the Markdown, which is the commit point), then runs the one reindex routine and records an
audit event. A rejected ingest persists nothing.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ulid import ULID

from coffer_mcp.access import read_stamped_source
from coffer_mcp.audit import AuditEvent
from coffer_mcp.convert import (
    Conversion,
    clean_markdown,
    derive_title,
    first_heading,
)
from coffer_mcp.errors import (
    CofferError,
    DocumentNotFoundError,
    EditConflictError,
    IngestRejectedError,
    InvalidArgumentError,
    SourceConflictError,
)
from coffer_mcp.index import DocumentFilter, DocumentRow
from coffer_mcp.indexing.locations import text_location
from coffer_mcp.indexing.reconvert import conversion_options
from coffer_mcp.indexing.reindex import index_document
from coffer_mcp.indexing.truth import (
    Truth,
    check_rewritable,
    edited_by_hand,
    hand_title,
    holds_edits,
    read_truth,
    truth_of,
)
from coffer_mcp.limits import MAX_LIST_LIMIT
from coffer_mcp.models import (
    ChunkView,
    DeleteResult,
    DirectoryIngestItem,
    DirectoryIngestResult,
    Document,
    DocumentInfo,
    DocumentPage,
    IngestResult,
    OriginalFile,
    Progress,
    SearchFilters,
    check_tags,
)
from coffer_mcp.services.folders import failed_item, ingested_item, undecodable_item, visible_files
from coffer_mcp.services.pages import MAX_OFFSET, char_page, check_page, is_int, line_page
from coffer_mcp.services.registry import Registry
from coffer_mcp.services.uploads import (
    NAMED,
    document_filename,
    note_tags,
    text_upload,
    upload_match,
    without_note_block,
    without_nul,
)
from coffer_mcp.store import (
    DocumentMeta,
    KbPaths,
    atomic_write,
    atomic_write_all,
    body_sha256,
    check_path_text,
    fsync_dir,
    hidden_characters,
    is_document_id,
    note_unindexed,
    parse_frontmatter,
    read_store_file,
    remove_file,
    render_document,
    source_map_bytes,
    stored_document_id,
)
from coffer_mcp.timeutil import utc_now

__all__ = ["DocumentService", "FolderIngest"]

# JSON can carry unpaired surrogates that UTF-8 cannot encode; they become U+FFFD.
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_SHA256 = re.compile(r"[0-9a-fA-F]{64}")
_KEYWORD_ONLY = (
    "Its vectors could not be computed (the embedding provider failed, or is cooling down after a failure): "
    "searches find it by keyword only until a later read, or a reindex, embeds it."
)
_NOT_HERE = "Searches find it by keyword only until a process that can build the store's embedding model embeds it."


class DocumentService:
    """The documents of every knowledge base: each write is one atomic, audited, indexed change."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self.index = registry.index

    # -- reads -----------------------------------------------------------------------------------

    def list_documents(
        self,
        kb: str,
        q_filter: str = "",
        limit: int = 50,
        offset: int = 0,
        *,
        filters: SearchFilters | Mapping[str, Any] | None = None,
    ) -> DocumentPage:
        """A page of a knowledge base's documents, oldest first, optionally filtered by title and ``filters``
        (``SearchFilters``, or a mapping of its keys)."""
        where = DocumentFilter.of(SearchFilters.parse(filters))
        if not is_int(limit) or not is_int(offset) or not 1 <= limit <= MAX_LIST_LIMIT or not 0 <= offset <= MAX_OFFSET:
            raise InvalidArgumentError(
                f"limit must be 1-{MAX_LIST_LIMIT} and offset 0-{MAX_OFFSET:,}.",
                hint="Use e.g. {arg:limit=50}, {arg:offset=0}.",
            )
        paths, _ = self.registry.open_kb(kb)
        self.registry.refresh(kb)
        rows, total = self.index.list_documents(kb, q_filter.strip(), limit, offset, where)
        return DocumentPage(documents=[_info(paths, row) for row in rows], total=total, limit=limit, offset=offset)

    def read_document(
        self,
        kb: str,
        doc_id: str,
        *,
        offset: int = 0,
        limit: int | None = None,
        unit: Literal["chars", "lines"] = "chars",
        around_position: int | None = None,
        window: int = 1,
    ) -> Document:
        """A document's Markdown body, frontmatter and file path — whole, one page, or around a hit.

        ``offset``/``limit`` page the body in characters or lines (``has_more`` says if it goes on).
        ``around_position`` returns instead the chunks ``position - window … position + window``
        (a search hit and its neighbours), so a passage can be expanded without the whole file.
        """
        paths, _ = self.registry.open_kb(kb)
        doc_id = _check_id(kb, doc_id)
        check_page(offset, limit, unit, around_position, window)
        self.registry.refresh(kb)
        try:
            text = read_store_file(paths.doc(doc_id))[0].decode("utf-8", errors="replace")
        except FileNotFoundError:
            raise _missing(kb, doc_id) from None
        meta, body, problem, salvaged = parse_frontmatter(text)
        row = self.index.get_document(kb, doc_id)
        if problem is not None:  # what the index kept of it while its YAML is broken
            meta = row.metadata if row is not None else salvaged
        # The hash of the body served, not the frontmatter's (a hand edit leaves that one behind): an edit
        # passes it back as expected_content_sha256.
        metadata = {**(meta or {}), "content_sha256": body_sha256(body)}
        if row is not None:  # a body edited by hand: what the index derives, as list_documents says it
            metadata.update(source_mode=row.source_mode, updated_at=row.updated_at)
        common: dict[str, Any] = {
            "document_id": doc_id,
            "kb": kb,
            "metadata": metadata,
            "content_sha256": metadata["content_sha256"],
            "path": str(paths.doc(doc_id)),
            "title": str(row.title if row is not None else (meta or {}).get("title", doc_id)),
            "total_chars": len(body),
            "total_lines": body.count("\n") + 1,
            "warning": None if problem is None else _frontmatter_warning(paths, doc_id, problem),
        }
        if around_position is not None:
            return self._chunk_window(doc_id, around_position, window, common)
        page = line_page(body, offset, limit) if unit == "lines" else char_page(body, offset, limit)
        first_line = offset + 1 if unit == "lines" else body.count("\n", 0, offset) + 1
        location = text_location(paths, doc_id, body, first_line, page["markdown"])
        return Document(**common, **page, offset=offset, unit=unit, source_location=location)

    def read_original(self, kb: str, doc_id: str) -> OriginalFile:
        """A document's original as it was ingested (``raw/``), for the viewer to open at a passage's place.

        Raises:
            DocumentNotFoundError: no such document, or (``no_original``) none of its original is kept.
        """
        paths, _ = self.registry.open_kb(kb)
        doc_id = _check_id(kb, doc_id)
        self.registry.refresh(kb)
        row = self.index.get_document(kb, doc_id)
        if row is None:
            raise _missing(kb, doc_id)
        try:
            data, _ = read_store_file(paths.raw / f"{doc_id}.{row.original_format or 'bin'}")
        except FileNotFoundError:
            raise DocumentNotFoundError(
                f"Document {doc_id} has no original kept: only its Markdown is in the knowledge base.",
                code="no_original",
                hint="Read the document itself; its original was written in Coffer or removed from raw/.",
            ) from None
        return OriginalFile(data=data, filename=row.original_filename, original_format=row.original_format)

    def _chunk_window(self, doc_id: str, position: int, window: int, common: dict[str, Any]) -> Document:
        rows, last = self.index.chunk_window(doc_id, position - window, position + window)
        if not rows:
            raise InvalidArgumentError(
                f"Document {doc_id} has no chunk at position {position} (positions run 0-{last}).",
                hint="Pass the position of a search passage.",
            )
        chunks = [
            ChunkView(position=r.position, heading_path=r.heading_path, text=r.text, source_location=r.source_location)
            for r in rows
        ]
        return Document(
            **common,
            markdown="\n\n".join(c.text for c in chunks),
            offset=chunks[0].position,
            unit="chunks",
            has_more=chunks[-1].position < (last or 0),
            chunks=chunks,
        )

    # -- writes ----------------------------------------------------------------------------------

    def add_document(
        self,
        kb: str,
        filename: str,
        content: str | bytes,
        *,
        replace: bool = False,
        actor: str = "cli",
        source_path: str | None = None,
        tags: Sequence[str] | None = None,
    ) -> IngestResult:
        """Ingest one file's bytes (or text) as a document.

        Re-upload semantics: a document is matched by ``source_path`` for path ingests, else by
        ``original_filename`` among earlier uploads. Identical bytes ⇒ no-op (``unchanged``), unless
        ``replace`` asks for them over a document edited since; changed bytes ⇒ updated in place only
        with ``replace``, otherwise rejected as ``duplicate``; no match
        ⇒ a new document. An upload never replaces a document ingested from a path or URL: a name
        taken only by such documents, or by several uploads, is refused as ``duplicate`` (the
        message lists their ids).
        ``tags`` are kept in the frontmatter (None keeps a re-uploaded document's own; given with
        identical bytes, they replace its tags).
        """
        chosen = None if tags is None else check_tags(tags)
        paths, _ = self.registry.open_kb(kb)
        name, notes = document_filename(filename), []
        if isinstance(content, str):
            content, removed = without_nul(content)
            name, named = text_upload(name, content)
            notes += [removed, named]
        if hidden := hidden_characters(filename or ""):  # a name that would display as another one
            count = (
                "1 control or text-direction character was"
                if hidden == 1
                else f"{hidden} control or text-direction characters were"
            )
            notes.insert(0, f"The filename is {name!r}: {count} removed from it.")
        if "/" in (filename or "") or "\\" in (filename or ""):  # an upload is a name, never a place
            notes.insert(
                0, f"The filename is {name!r}: an upload's name holds no folders ({filename!r:.120} was given)."
            )
        note = " ".join(part for part in notes if part) or None
        # A file written by a process that crashed before indexing it must be matched, not duplicated.
        self.registry.refresh(kb)
        data = _LONE_SURROGATE.sub("\ufffd", content).encode("utf-8") if isinstance(content, str) else content
        result = self.ingest_bytes(
            paths, name, data, replace=replace, actor=actor, source_path=source_path, tags=chosen
        )
        return result.model_copy(update={"note": " ".join(filter(None, [note, result.note]))}) if note else result

    def ingest_bytes(
        self,
        paths: KbPaths,
        name: str,
        data: bytes,
        *,
        replace: bool,
        actor: str,
        source_path: str | None,
        source_url: str | None = None,
        batch: bool = False,
        keep_edits: bool = False,
        tags: list[str] | None = None,
        source_stamp: str = "",
    ) -> IngestResult:
        """Ingest without a full reconcile: only the matching document's file is checked.

        A document is matched by ``source_path``, else ``source_url``, else ``original_filename``.
        In a ``batch`` the folders are synced once by the caller, before it answers. With
        ``keep_edits``, a matching document edited in Coffer is never replaced (checked under the
        lock, so an edit made meanwhile wins too). ``tags`` (checked) replace the document's own;
        None keeps them. ``source_stamp``: the stamp of the source file the bytes were read from,
        when it vouches for them (``access.read_stamped_source``).

        Raises:
            SourceConflictError: ``keep_edits``, and the matching document was edited in Coffer.
        """
        result = self._ingest(
            paths,
            name,
            data,
            replace=replace,
            actor=actor,
            source=(source_path, source_url),
            batch=batch,
            keep_edits=keep_edits,
            tags=tags,
            source_stamp=source_stamp,
        )
        return self._retag(paths, result, tags, actor)  # after the lock: retagging takes it

    def _ingest(
        self,
        paths: KbPaths,
        name: str,
        data: bytes,
        *,
        replace: bool,
        actor: str,
        source: tuple[str | None, str | None],
        batch: bool,
        keep_edits: bool,
        tags: list[str] | None,
        source_stamp: str = "",
    ) -> IngestResult:
        converted = self._convert(
            paths, name, data, replace=replace, source=source, keep_edits=keep_edits, source_stamp=source_stamp
        )
        if isinstance(converted, IngestResult):
            return converted
        with self.registry.writing(paths):
            planned = self._plan(converted, replace=replace, keep_edits=keep_edits, tags=tags)
            if isinstance(planned, IngestResult):
                return planned
            planned.write(sync_dir=not batch)
            return self._index_written(planned, actor)

    def _convert(
        self,
        paths: KbPaths,
        name: str,
        data: bytes,
        *,
        replace: bool,
        source: tuple[str | None, str | None],
        keep_edits: bool,
        source_stamp: str = "",
    ) -> _Converted | IngestResult:
        """An ingest's first step, before the lock: its match, and its conversion unless the match
        answers it (an identical or refused re-upload costs no conversion)."""
        source_sha = hashlib.sha256(data).hexdigest()
        locked = self.registry.holds(paths.name)  # a folder ingest's lease
        match = self._match(paths.name, name, *source)
        edited = match is not None and match.source_mode == "edited"  # checked against the file under the lock
        early = self._reupload(paths, name, match, source_sha, replace=replace, keep_edits=keep_edits, edited=edited)
        if early is not None:
            return early
        if keep_edits and match is not None and edited:
            raise _conflict(match)
        conversion, note = without_note_block(name, conversion_options(self.registry.settings).convert(name, data))
        return _Converted(paths, name, data, source, source_sha, match, locked, conversion, source_stamp, note)

    def _plan(
        self, converted: _Converted, *, replace: bool, keep_edits: bool, tags: list[str] | None
    ) -> _Planned | IngestResult:
        """What a converted ingest writes, decided under the lock (whose match is the one that holds)."""
        paths, name, source_path, source_url = converted.paths, converted.name, *converted.source
        # Matched under a folder ingest's lease: that match holds, unless its file has gone.
        match = converted.match
        live = converted.locked and (match is None or paths.doc(match.id).exists())
        existing = match if live else self._live_match(paths, name, source_path, source_url)
        # The file says what the document is now: an edit saved by hand that no read has indexed yet is
        # an edit all the same (a followed source must not overwrite it), and its tags are the document's.
        truth = read_truth(paths, existing.id) if existing is not None else None
        edited = existing is not None and (existing.source_mode == "edited" or holds_edits(truth))
        early = self._reupload(
            paths, name, existing, converted.source_sha, replace=replace, keep_edits=keep_edits, edited=edited
        )
        if early is not None:
            return early
        if keep_edits and existing is not None and edited:
            raise _conflict(existing)
        if truth is not None:
            check_rewritable(paths, truth)
        on_disk = truth.row if truth is not None else existing
        conversion = converted.conversion
        doc_id = existing.id if existing is not None else str(ULID())
        now = utc_now()
        metadata = DocumentMeta(
            id=doc_id,
            title=conversion.title,
            original_filename=name,
            original_format=conversion.original_format,
            source_sha256=converted.source_sha,
            content_sha256=body_sha256(conversion.markdown),
            source_mode="converted",
            conversion_engine=conversion.engine,
            converted_at=now,
            created_at=on_disk.created_at if on_disk is not None else now,
            updated_at=now,
            source_path=source_path,
            source_url=source_url,
            tags=note_tags(converted.note, list(on_disk.tags) if tags is None and on_disk is not None else tags),
            source_frontmatter=converted.note or None,
        ).to_dict()
        return _Planned(
            paths,
            doc_id,
            existing,
            metadata,
            conversion.markdown,
            converted.data,
            conversion.original_format,
            {"filename": name, "source_sha256": converted.source_sha},
            converted.source_stamp,
            source_map_bytes(conversion.markdown, conversion.places),
        )

    def _index_written(self, planned: _Planned, actor: str) -> IngestResult:
        """Index a planned ingest whose files are written, with its audit record. Call under the lock."""
        paths, doc_id, existing = planned.paths, planned.doc_id, planned.existing
        self.registry.wrote(paths)
        truth = truth_of(paths, doc_id, planned.metadata, planned.body, source_stamp=planned.source_stamp)
        event = AuditEvent.KB_DOCUMENT_UPDATED if existing is not None else AuditEvent.KB_DOCUMENT_INGESTED
        config = self.registry.config(paths.name)
        written = index_document(
            self.index,
            paths,
            config,
            doc_id,
            truth=truth,
            embedder=self.registry.embedder,
            record=lambda: self.index.audit(event, paths.name, actor, doc_id, planned.details),
            new=existing is None,
        )
        result = self._result(paths, truth.row, "updated" if existing is not None else "created", written)
        use = self.registry.models.use
        if config.vector and (self.registry.embedder is not None or use.status == "refused"):
            row = self.index.get_document(paths.name, doc_id)
            if row is not None and row.embed_pending:  # said here too: a client may not show log messages
                note = _KEYWORD_ONLY if use.status != "refused" else f"{_NOT_HERE} {use.message}"
                return result.model_copy(update={"note": note})
        return result

    def _match(self, kb: str, filename: str, source_path: str | None, source_url: str | None) -> DocumentRow | None:
        """A re-ingest's document: matched by ``source_path``, else ``source_url``; an upload's (neither) by
        ``original_filename``, among uploads only (``upload_match``).

        Raises:
            IngestRejectedError: ``duplicate``, an upload whose name is ambiguous or taken by a document
                ingested from a path or URL.
        """
        if source_path:
            return self.index.find_document(kb, source_path=source_path)
        if source_url:
            return self.index.find_document(kb, source_url=source_url)
        return upload_match(kb, filename, self.index.documents_named(kb, filename, NAMED))

    def _live_match(
        self, paths: KbPaths, name: str, source_path: str | None, source_url: str | None
    ) -> DocumentRow | None:
        """The matching document whose file still exists; rows of files deleted by hand are dropped.

        Call while holding the KB lock.
        """
        if not (source_path or source_url):  # a file deleted by hand leaves no ambiguity behind
            for named in self.index.documents_named(paths.name, name, NAMED):
                if not paths.doc(named.id).exists():
                    index_document(self.index, paths, self.registry.config(paths.name), named.id)
        while (row := self._match(paths.name, name, source_path, source_url)) is not None:
            if paths.doc(row.id).exists():
                return row
            index_document(self.index, paths, self.registry.config(paths.name), row.id)  # removes the stale rows
        return None

    def _reupload(
        self,
        paths: KbPaths,
        name: str,
        existing: DocumentRow | None,
        source_sha: str,
        *,
        replace: bool,
        keep_edits: bool,
        edited: bool,
    ) -> IngestResult | None:
        """The answer to a re-upload of ``existing`` that needs no write, or None to go on.

        The same bytes again are ``unchanged``, except when ``replace`` asks for the source's version of
        a document edited since (in Coffer or by hand): then its conversion replaces the edits, as the
        refusals of an edited document's update say it will.
        """
        if existing is None:
            return None
        if existing.source_sha256 == source_sha:
            if replace and not keep_edits and edited:
                return None
            return self._ingest_result(paths, existing.id, "unchanged")
        if not replace:
            raise IngestRejectedError(
                "duplicate",
                f"'{name}' is already in knowledge base '{paths.name}' as document {existing.id}, "
                "with different content.",
                hint="Pass {arg:replace=true} to update that document in place, or use another filename.",
            )
        return None

    def _ingest_result(
        self, paths: KbPaths, doc_id: str, status: Literal["created", "updated", "unchanged"]
    ) -> IngestResult:
        """The answer about one document, read back from the index.

        Called under the KB lock after a write; outside it (an unchanged re-upload) the document or
        the whole knowledge base may have been deleted by another process since it was matched.
        """
        row = self.index.get_document(paths.name, doc_id)
        if row is None:
            raise self.registry.unknown_kb(paths.name) if not paths.root.is_dir() else _missing(paths.name, doc_id)
        return self._result(paths, row, status, None)

    def _result(
        self,
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
            chunk_count=self.index.chunk_count(doc_id=row.id) if chunks is None else chunks,
            tags=list(row.tags),
        )

    def _retag(self, paths: KbPaths, result: IngestResult, tags: list[str] | None, actor: str) -> IngestResult:
        """An unchanged re-upload's answer, after giving its document ``tags`` when they differ (with the
        tags of its own frontmatter, which an ingest always keeps)."""
        if tags is None or result.status != "unchanged":
            return result
        row = self.index.get_document(paths.name, result.document_id)
        tags = note_tags(row.metadata.get("source_frontmatter") if row is not None else None, tags) or []
        if _same_tags(result.tags, tags):
            return result
        return self.edit_document(paths.name, result.document_id, None, tags=tags, actor=actor)

    def edit_document(
        self,
        kb: str,
        doc_id: str,
        content: str | None = None,
        *,
        tags: Sequence[str] | None = None,
        expected_content_sha256: str | None = None,
        actor: str = "cli",
    ) -> IngestResult:
        """Replace a document's Markdown body (it becomes ``source_mode: edited``), its tags, or both.

        The title follows the new body's first H1 when it has one, unless it was set by hand in the
        frontmatter (``hand_title``: not the one the old body gave), which is kept. ``tags`` replace the document's
        tags in its frontmatter (``[]`` removes them); without ``tags`` they are kept, and without
        ``content`` the body is. Nothing new is a no-op (``unchanged``).

        ``expected_content_sha256`` (``read_document``'s ``content_sha256``) makes the edit conditional:
        it is refused if the body on disk is another one now. Without it, a new body is refused when
        the one on disk was edited by hand since Coffer last wrote or indexed it: built from a read,
        it would discard that edit unseen. New tags alone apply to the file as it is.

        Raises:
            EditConflictError: either refusal; nothing was written.
        """
        paths, _ = self.registry.open_kb(kb)
        doc_id = _check_id(kb, doc_id)
        chosen = None if tags is None else check_tags(tags)
        expected = _check_version(expected_content_sha256)
        if content is None and chosen is None:
            raise InvalidArgumentError("Nothing to change.", hint="Pass the new content, the new tags, or both.")
        body = None if content is None else self._new_body(content)
        with self.registry.writing(paths):
            config = self.registry.config(kb)
            truth = read_truth(paths, doc_id)
            if truth is None:
                raise _missing(kb, doc_id)
            check_rewritable(paths, truth)
            same_body = body is None or truth.row.content_sha256 == body_sha256(body)
            self._check_unseen(truth, expected, replacing=not same_body)
            if same_body and (chosen is None or _same_tags(truth.row.tags, chosen)):
                return self._ingest_result(paths, doc_id, "unchanged")
            body = truth.body if body is None else body
            changes: dict[str, Any] = {"id": doc_id, "updated_at": utc_now()}
            if not same_body:
                changes.update(
                    title=hand_title(truth) or first_heading(body) or truth.row.title,
                    content_sha256=body_sha256(body),
                    source_mode="edited",
                )
            metadata = _with_tags(DocumentMeta.updated(truth.row.metadata, **changes), chosen)
            atomic_write(paths.doc(doc_id), render_document(metadata, body).encode("utf-8"))
            self.registry.wrote(paths)
            details: dict[str, Any] = {} if same_body else {"source_mode": "edited"}
            if chosen is not None:
                details["tags"] = chosen
            edited = truth_of(paths, doc_id, metadata, body)
            written = index_document(
                self.index,
                paths,
                config,
                doc_id,
                truth=edited,
                embedder=self.registry.embedder,
                record=lambda: self.index.audit(AuditEvent.KB_DOCUMENT_UPDATED, kb, actor, doc_id, details),
            )
            return self._result(paths, edited.row, "updated", written)

    def _check_unseen(self, truth: Truth, expected: str | None, *, replacing: bool) -> None:
        """Refuse an edit that could discard a change to the body its caller has not seen.

        Raises:
            EditConflictError: the body is not ``expected``; or, with no ``expected``, a new body would
                replace one edited by hand since Coffer last wrote it (or that the index has not seen).
        """
        doc_id = truth.row.id
        if expected is not None:
            if expected != truth.row.content_sha256:
                raise _edit_conflict(f"Document {doc_id} changed since it was read; nothing was written.")
            return
        if not replacing:
            return
        indexed = self.index.get_document(truth.row.kb, doc_id)
        unindexed = indexed is not None and indexed.content_sha256 != truth.row.content_sha256
        if unindexed or edited_by_hand(truth):
            raise _edit_conflict(
                f"Document {doc_id}'s file was edited by hand since Coffer last wrote it; a new body from an "
                "earlier read would discard that edit, so nothing was written."
            )

    def _new_body(self, content: str) -> str:
        """An edit's new body, cleaned and checked.

        Raises:
            IngestRejectedError: it is empty, or larger than ``max_document_bytes``.
        """
        body = clean_markdown(content)
        if not body:
            raise IngestRejectedError("empty", "The new content is empty.", hint="Pass the full Markdown body.")
        size = len(body.encode("utf-8"))
        if size > self.registry.settings.max_document_bytes:
            raise IngestRejectedError(
                "too_large",
                f"The new content is {size:,} bytes; the limit is {self.registry.settings.max_document_bytes:,}.",
                hint="Split the document, or raise max_document_bytes in config.yaml.",
            )
        return body

    def delete_document(self, kb: str, doc_id: str, *, actor: str = "cli") -> DeleteResult:
        """Remove a document's Markdown, its original and its rows."""
        paths, _ = self.registry.open_kb(kb)
        doc_id = _check_id(kb, doc_id)
        with self.registry.writing(paths):
            return self.delete_locked(paths, doc_id, actor=actor)

    def delete_locked(
        self, paths: KbPaths, doc_id: str, *, actor: str, details: dict[str, Any] | None = None
    ) -> DeleteResult:
        """``delete_document`` for a caller that holds the knowledge base's lock."""
        known = self.index.get_document(paths.name, doc_id) is not None
        removed = int(remove_file(paths.doc(doc_id)))
        if not (known or removed):
            raise _missing(paths.name, doc_id)
        self.registry.wrote(paths)
        removed += sum(remove_file(raw) for raw in paths.companions(doc_id))
        with self.index.transaction():
            self.index.delete_document(doc_id)
            self.index.audit(AuditEvent.KB_DOCUMENT_DELETED, paths.name, actor, doc_id, details)
        return DeleteResult(kb=paths.name, deleted=True, document_id=doc_id, files_removed=removed)

    def move_source(
        self, paths: KbPaths, doc_id: str, source_path: str, *, renamed_from: str, source_stamp: str, actor: str
    ) -> IngestResult:
        """Give a document the new path of its source file, renamed or moved with its bytes unchanged.

        Its id, tags, dates and body stay; ``source_path`` and ``original_filename`` follow the
        file, and so does a title its old file name gave (a title set by hand, by the body's H1 or
        by its converter stays). One atomic write of the Markdown is the commit point: a crash
        before it leaves the document at its old path, and the next sync moves it again. Call
        holding the knowledge base's lock.

        Raises:
            DocumentNotFoundError: its file is gone.
            FrontmatterError: its frontmatter does not parse (the file is left as it is).
        """
        truth = read_truth(paths, doc_id)
        if truth is None:
            raise _missing(paths.name, doc_id)
        check_rewritable(paths, truth)
        name = document_filename(Path(source_path).name)
        title = hand_title(truth) or derive_title(truth.body, name)
        changes = {"source_path": source_path, "original_filename": name, "title": title, "updated_at": utc_now()}
        metadata = DocumentMeta.updated(truth.row.metadata, **changes)
        atomic_write(paths.doc(doc_id), render_document(metadata, truth.body).encode("utf-8"))
        self.registry.wrote(paths)
        moved = truth_of(paths, doc_id, metadata, truth.body, source_stamp=source_stamp)
        details = {"renamed_from": renamed_from, "source_path": source_path}
        written = index_document(
            self.index,
            paths,
            self.registry.config(paths.name),
            doc_id,
            force=title != truth.row.title,  # a vector KB's chunks are embedded with their title
            truth=moved,
            embedder=self.registry.embedder,
            record=lambda: self.index.audit(AuditEvent.KB_DOCUMENT_RENAMED, paths.name, actor, doc_id, details),
        )
        return self._result(paths, moved.row, "updated", written)

    def ingest_path(
        self,
        kb: str,
        path: str | Path,
        *,
        replace: bool = False,
        actor: str = "cli",
        progress: Progress | None = None,
        within: Sequence[Path] | None = None,
        tags: Sequence[str] | None = None,
    ) -> DirectoryIngestResult:
        """Ingest a file, or every visible file under a folder (recursively), recording ``source_path``.

        Each file is its own transaction: one bad file is reported and the rest go on, and a
        cancelled call stops between files with every finished file committed. Under the
        knowledge base's lease, one file's writes overlap the indexing of the file before it
        (``FolderIngest``). Symbolic links are not followed; with ``within``, a file whose real
        path leaves those folders is refused.
        ``tags`` are given to every document ingested (None keeps a re-ingested document's own).
        """
        chosen = None if tags is None else check_tags(tags)
        root = Path(check_path_text(path)).expanduser()
        if not root.exists():
            raise InvalidArgumentError(f"{root} does not exist.", hint="Pass an existing file or folder.")
        paths, _ = self.registry.open_kb(kb)
        self.registry.refresh(kb)
        undecodable: list[Path] = []  # names that are not UTF-8: reported, never read
        try:
            walk = () if root.is_file() else visible_files(root.resolve(), undecodable=undecodable)
            files = [root.resolve()] if root.is_file() else sorted(walk)
        except OSError as exc:  # e.g. a link swapped for a file while it was being resolved
            raise InvalidArgumentError(
                f"{root} could not be read: {exc.strerror}.", hint="Try again once the folder stops changing."
            ) from None
        items: list[DirectoryIngestItem] = []

        def finished(item: DirectoryIngestItem) -> None:
            items.append(item)
            if progress:
                progress(len(items), len(files) + len(undecodable), Path(item.path).name)

        try:
            with self.folder_ingest(paths, finished, replace=replace, actor=actor, within=within, tags=chosen) as run:
                for file in files:
                    run.ingest(file)
                for name in undecodable:
                    run.report(undecodable_item(name))
        finally:
            # One folder sync for the whole batch, before anything is acknowledged (or cancelled).
            fsync_dir(paths.docs)
            fsync_dir(paths.raw)
        self.index.settle()
        counts = {s: sum(i.status == s for i in items) for s in ("created", "updated", "unchanged", "rejected")}
        return DirectoryIngestResult.model_validate({"kb": kb, "items": items, **counts})

    @contextlib.contextmanager
    def folder_ingest(
        self,
        paths: KbPaths,
        finished: Callable[[DirectoryIngestItem], None],
        *,
        replace: bool,
        actor: str,
        within: Sequence[Path] | None,
        tags: list[str] | None = None,
        keep_edits: bool = False,
    ) -> Iterator[FolderIngest]:
        """A run of files ingested one after the other under the knowledge base's lease.

        The caller's folder is synced by the caller once the run ends (``fsync_dir``), before it
        answers. ``finished(item)`` gets each file's item, in the order the files were given.
        """
        run = FolderIngest(
            self, paths, finished, replace=replace, actor=actor, within=within, tags=tags, keep_edits=keep_edits
        )
        try:
            with self.registry.leased(paths, before_release=run.finish) as renew:
                run.renew = renew
                yield run
        finally:
            run.close()

    def ingest_file(
        self,
        paths: KbPaths,
        file: Path,
        *,
        replace: bool,
        actor: str,
        within: Sequence[Path] | None,
        keep_edits: bool = False,
        tags: list[str] | None = None,
    ) -> DirectoryIngestItem:
        """Ingest one file of a folder (its folder synced by the caller); a failure is reported, not raised."""
        try:
            data, stamp = read_stamped_source(file, within, max_bytes=self.registry.settings.max_document_bytes)
            result = self.ingest_bytes(
                paths,
                document_filename(file.name),
                data,
                replace=replace,
                actor=actor,
                source_path=str(file),
                batch=True,
                keep_edits=keep_edits,
                tags=tags,
                source_stamp=stamp,
            )
        except (CofferError, OSError) as exc:
            return failed_item(file, exc)
        return ingested_item(file, result)


_InFlight = tuple[Path, "_Planned", concurrent.futures.Future[None]]
"""A file whose document's files are being written: the file, what is written, the write."""


class FolderIngest:
    """A run of files ingested under the lease, one document's files written while the one before is indexed.

    Made by ``DocumentService.folder_ingest``. ``ingest(file)`` renews the lease; holding it, it
    matches and converts ``file`` and starts writing its two files in a thread, then indexes the
    document before it, whose files are written by then: the wait for one document's ``fsync``
    overlaps the other's index write (on PostgreSQL, the round trips). Each document still lands
    as it would alone: its files durable, then its rows in their own transaction. Without the
    lease (busy, or a slow conversion coming) the file is ingested on its own, as ``ingest_file``.
    ``finish()`` indexes the document in flight; the lease calls it before it gives the lock up,
    so no file is ever written outside the lock. Files are matched by ``source_path``, so a
    document in flight never changes the next one's match. ``report(item)`` reports a file the
    caller settled itself (a followed file found unchanged), in its place in the order.
    """

    def __init__(
        self,
        documents: DocumentService,
        paths: KbPaths,
        finished: Callable[[DirectoryIngestItem], None],
        *,
        replace: bool,
        actor: str,
        within: Sequence[Path] | None,
        tags: list[str] | None,
        keep_edits: bool,
    ) -> None:
        self._documents = documents
        self._paths = paths
        self._finished = finished
        self._replace, self._actor, self._within, self._tags = replace, actor, within, tags
        self._keep_edits = keep_edits
        self._writer = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="coffer-ingest")
        self._pending: _InFlight | None = None
        self.renew: Callable[[bool], None] = lambda hold: None

    def ingest(self, file: Path) -> None:
        """Ingest ``file`` (or start to, under the lease); reports the file before it, if still in flight."""
        from coffer_mcp.convert import quick_to_convert  # here: it loads every converter, which a read never needs

        self.renew(quick_to_convert(file.name, _size(file)))
        if not self._documents.registry.holds(self._paths.name):
            self.report(
                self._documents.ingest_file(
                    self._paths,
                    file,
                    replace=self._replace,
                    actor=self._actor,
                    within=self._within,
                    keep_edits=self._keep_edits,
                    tags=self._tags,
                )
            )
            return
        decided = self._decide(file)
        previous, self._pending = self._pending, None
        if isinstance(decided, _Planned):
            note_unindexed(decided.files())
            self._pending = (file, decided, self._writer.submit(decided.write, sync_dir=False))
        self._finish(previous)  # its report may raise (a cancelled call): this file is in flight already
        if not isinstance(decided, _Planned):
            self._finished(decided)

    def report(self, item: DirectoryIngestItem) -> None:
        """Report a file's item after the file in flight before it."""
        self.finish()
        self._finished(item)

    def _decide(self, file: Path) -> _Planned | DirectoryIngestItem:
        """What to write for ``file``, or its item when nothing is to be written (unchanged, rejected)."""
        documents, paths, keep_edits = self._documents, self._paths, self._keep_edits
        try:
            max_bytes = documents.registry.settings.max_document_bytes
            data, stamp = read_stamped_source(file, self._within, max_bytes=max_bytes)
            name = document_filename(file.name)
            converted = documents._convert(
                paths,
                name,
                data,
                replace=self._replace,
                source=(str(file), None),
                keep_edits=keep_edits,
                source_stamp=stamp,
            )
            planned = (
                converted
                if isinstance(converted, IngestResult)
                else documents._plan(converted, replace=self._replace, keep_edits=keep_edits, tags=self._tags)
            )
            if isinstance(planned, _Planned):
                return planned
            return ingested_item(file, documents._retag(paths, planned, self._tags, self._actor))
        except (CofferError, OSError) as exc:
            return failed_item(file, exc)

    def finish(self) -> None:
        """Index the document whose files are being written, and report it."""
        pending, self._pending = self._pending, None
        self._finish(pending)

    def close(self) -> None:
        """Index the document still in flight, if any, and stop the writing thread.

        The lease finishes it before giving the lock up; one is left only when the lock was held
        before the run began (a caller's own), and it is still held here.
        """
        try:
            self.finish()
        finally:
            self._writer.shutdown()

    def _finish(self, pending: _InFlight | None) -> None:
        if pending is None:
            return
        file, planned, written = pending
        try:
            written.result()
            item = ingested_item(file, self._documents._index_written(planned, self._actor))
        except (CofferError, OSError) as exc:
            item = failed_item(file, exc)
        self._finished(item)


def _size(file: Path) -> int:
    """The file's size, or 0 when it cannot be read (its ingest reports why)."""
    try:
        return file.stat(follow_symlinks=False).st_size
    except OSError:
        return 0


@dataclass(frozen=True, slots=True)
class _Converted:
    """An ingest converted before taking the lock, with the match it was decided on."""

    paths: KbPaths
    name: str
    data: bytes
    source: tuple[str | None, str | None]  # (source_path, source_url)
    source_sha: str
    match: DocumentRow | None
    locked: bool  # matched under a folder ingest's lease, so the match still holds
    conversion: Conversion
    source_stamp: str  # the source file's, when it vouches for ``data`` (else "")
    note: dict[str, Any] | None  # a Markdown file's own frontmatter (``without_note_block``)


@dataclass(frozen=True, slots=True)
class _Planned:
    """An ingest decided under the lock: a document's two files to write, then its rows."""

    paths: KbPaths
    doc_id: str
    existing: DocumentRow | None
    metadata: dict[str, Any]
    body: str
    original: bytes
    ext: str
    details: dict[str, Any]  # the audit record's
    source_stamp: str  # the source file's, when it vouches for ``original`` (else "")
    source_map: bytes | None = None  # where the body's lines are in the original (None: unknown)

    def files(self) -> list[Path]:
        """Every file ``write`` creates, replaces or removes."""
        stale = self._stale_original()
        source_map = self.paths.source_map(self.doc_id)
        return [self._original(self.ext), source_map, self.paths.doc(self.doc_id), *([stale] if stale else [])]

    def write(self, *, sync_dir: bool) -> None:
        """Write the document's original, its source map and its Markdown, the Markdown landing last."""
        self.paths.raw.mkdir(exist_ok=True)  # never parents: a deleted knowledge base must stay deleted
        markdown = render_document(self.metadata, self.body).encode("utf-8")
        source_map = self.paths.source_map(self.doc_id)
        maps = [(source_map, self.source_map)] if self.source_map else []
        atomic_write_all(
            [(self._original(self.ext), self.original), *maps, (self.paths.doc(self.doc_id), markdown)],
            sync_dir=sync_dir,
        )
        if stale := self._stale_original():
            remove_file(stale)
        if not maps and self.existing is not None:
            remove_file(source_map)  # an earlier original's: it says nothing of this one

    def _original(self, ext: str) -> Path:
        return self.paths.raw / f"{self.doc_id}.{ext or 'bin'}"

    def _stale_original(self) -> Path | None:
        """The original of an earlier upload in another format: only the latest original is kept."""
        old = self.existing
        return self._original(old.original_format) if old is not None and old.original_format != self.ext else None


def _same_tags(have: Sequence[str], want: Sequence[str]) -> bool:
    """Whether two tag lists are the same, spelling and order included (a change of either is written)."""
    return list(have) == list(want)


def _with_tags(metadata: dict[str, Any], tags: list[str] | None) -> dict[str, Any]:
    """``metadata`` with ``tags`` (None: as it was; empty: without the key)."""
    if tags is None:
        return metadata
    if tags:
        return {**metadata, "tags": tags}
    return {key: value for key, value in metadata.items() if key != "tags"}


def _check_id(kb: str, doc_id: str) -> str:
    """The document id as stored (``stored_document_id``), or the unknown-document error."""
    canonical = stored_document_id(doc_id) if isinstance(doc_id, str) else doc_id
    if not isinstance(canonical, str) or not is_document_id(canonical):
        raise _missing(kb, doc_id)
    return canonical


def _check_version(value: object) -> str | None:
    """An edit's ``expected_content_sha256`` in lower case, or the invalid-argument error."""
    if value is None:
        return None
    if not isinstance(value, str) or not _SHA256.fullmatch(value):
        raise InvalidArgumentError(
            "expected_content_sha256 is not a SHA-256 (64 hexadecimal digits).",
            hint="Pass the content_sha256 of the document as read_document returned it.",
        )
    return value.lower()


def _edit_conflict(message: str) -> EditConflictError:
    return EditConflictError(
        message,
        hint="Read the document again with {tool:read_document}, redo your edit on what it returns, and pass "
        "that read's content_sha256 as {arg:expected_content_sha256}.",
    )


def _conflict(row: DocumentRow) -> SourceConflictError:
    return SourceConflictError(
        f"Document {row.id} was edited in Coffer since it was ingested from {row.source_path or 'its file'}; the "
        "file changed too, and is not ingested over the edits.",
        hint="Keep editing in Coffer, or re-ingest the file with {arg:replace=true} to take its version (the "
        "edits are lost).",
    )


def _frontmatter_warning(paths: KbPaths, doc_id: str, problem: str) -> str:
    return (
        f"The frontmatter of {paths.doc(doc_id)} does not parse ({problem}). Until its YAML is fixed by hand, "
        "the document keeps the metadata Coffer last read from it, and Coffer will not edit or retag it."
    )


def _missing(kb: str, doc_id: object) -> DocumentNotFoundError:
    return DocumentNotFoundError(
        f"Document {str(doc_id)[:80]!r} does not exist in knowledge base '{kb}'.",
        hint="Document ids are 26-character ULIDs; find them with {tool:search_knowledge} or {tool:list_documents}.",
    )


def _info(paths: KbPaths, row: DocumentRow) -> DocumentInfo:
    return DocumentInfo(
        document_id=row.id,
        kb=row.kb,
        title=row.title,
        original_filename=row.original_filename,
        original_format=row.original_format,
        tags=list(row.tags),
        source_mode=row.source_mode,
        content_sha256=row.content_sha256,
        source_sha256=row.source_sha256,
        source_path=row.source_path,
        created_at=row.created_at,
        updated_at=row.updated_at,
        path=str(paths.doc(row.id)),
    )
