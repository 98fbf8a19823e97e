"""The document service: read, list, edit, delete; ingest through the pipeline of ``services.ingest``.

Every write holds the knowledge base's lock, writes truth files atomically (the original first,
then the Markdown, which is the commit point), then runs the one reindex routine and records an
audit event. A rejected ingest persists nothing.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from coffer_mcp.audit import AuditEvent
from coffer_mcp.convert import clean_markdown, derive_title, first_heading
from coffer_mcp.errors import DocumentNotFoundError, EditConflictError, IngestRejectedError, InvalidArgumentError
from coffer_mcp.index import DocumentFilter, DocumentRow, Index
from coffer_mcp.indexing.locations import text_location
from coffer_mcp.indexing.reindex import Indexed, index_document
from coffer_mcp.indexing.truth import Truth, check_rewritable, edited_by_hand, hand_title, read_truth, truth_of
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
from coffer_mcp.services.answers import document_result, missing_document
from coffer_mcp.services.catalogue import Catalogue
from coffer_mcp.services.folder_ingest import FolderIngest, folder_ingest, ingest_file, ingest_folder
from coffer_mcp.services.freshness import Freshness
from coffer_mcp.services.ingest import Ingest
from coffer_mcp.services.locks import Locks
from coffer_mcp.services.pages import MAX_OFFSET, char_page, check_page, is_int, line_page
from coffer_mcp.services.planned import Upload
from coffer_mcp.services.providers import Providers
from coffer_mcp.services.uploads import document_filename, text_upload, without_nul
from coffer_mcp.settings import Settings
from coffer_mcp.store import (
    DocumentMeta,
    KbPaths,
    atomic_write,
    body_sha256,
    check_path_text,
    hidden_characters,
    is_document_id,
    parse_frontmatter,
    read_store_file,
    remove_file,
    render_document,
    stored_document_id,
)
from coffer_mcp.timeutil import utc_now

__all__ = ["DocumentService", "FolderIngest"]

# JSON can carry unpaired surrogates that UTF-8 cannot encode; they become U+FFFD.
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_SHA256 = re.compile(r"[0-9a-fA-F]{64}")


class DocumentService:
    """The documents of every knowledge base: each write is one atomic, audited, indexed change."""

    def __init__(
        self,
        *,
        settings: Settings,
        index: Index,
        catalogue: Catalogue,
        locks: Locks,
        freshness: Freshness,
        providers: Providers,
    ) -> None:
        self.settings = settings
        self.index = index
        self.catalogue = catalogue
        self.locks = locks
        self.freshness = freshness
        self.providers = providers
        self.ingest = Ingest(
            settings=settings,
            index=index,
            catalogue=catalogue,
            locks=locks,
            freshness=freshness,
            providers=providers,
            retag=self._retag,
        )

    # -- reads -----------------------------------------------------------------------------------

    def recent_documents(self, limit: int) -> list[DocumentRow]:
        """The ``limit`` most recently updated documents of every knowledge base, as the index has them."""
        return self.index.recent_documents(limit)

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
        paths, _ = self.catalogue.open_kb(kb)
        self.freshness.refresh(kb)
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
        paths, _ = self.catalogue.open_kb(kb)
        doc_id = _check_id(kb, doc_id)
        check_page(offset, limit, unit, around_position, window)
        self.freshness.refresh(kb)
        try:
            text = read_store_file(paths.doc(doc_id))[0].decode("utf-8", errors="replace")
        except FileNotFoundError:
            raise missing_document(kb, doc_id) from None
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
        paths, _ = self.catalogue.open_kb(kb)
        doc_id = _check_id(kb, doc_id)
        self.freshness.refresh(kb)
        row = self.index.get_document(kb, doc_id)
        if row is None:
            raise missing_document(kb, doc_id)
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
        paths, _ = self.catalogue.open_kb(kb)
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
        self.freshness.refresh(kb)
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
        keep_edits: bool = False,
        tags: list[str] | None = None,
        source_stamp: str = "",
    ) -> IngestResult:
        """Ingest without a full reconcile: only the matching document's file is checked.

        A document is matched by ``source_path``, else ``source_url``, else ``original_filename``.
        With ``keep_edits``, a matching document edited in Coffer is never replaced (checked under
        the lock, so an edit made meanwhile wins too). ``tags`` (checked) replace the document's own;
        None keeps them. ``source_stamp``: the stamp of the source file the bytes were read from,
        when it vouches for them (``access.read_stamped_source``).

        Raises:
            SourceConflictError: ``keep_edits``, and the matching document was edited in Coffer.
        """
        upload = Upload.of(paths, name, data, source_path=source_path, source_url=source_url, source_stamp=source_stamp)
        return self.ingest.ingest(upload, replace=replace, actor=actor, keep_edits=keep_edits, tags=tags)

    def _retag(self, kb: str, doc_id: str, tags: list[str], actor: str) -> IngestResult:
        return self.edit_document(kb, doc_id, None, tags=tags, actor=actor)

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
        paths, _ = self.catalogue.open_kb(kb)
        doc_id = _check_id(kb, doc_id)
        chosen = None if tags is None else check_tags(tags)
        expected = _check_version(expected_content_sha256)
        if content is None and chosen is None:
            raise InvalidArgumentError("Nothing to change.", hint="Pass the new content, the new tags, or both.")
        body = None if content is None else self._new_body(content)
        with self.locks.writing(paths):
            config = self.catalogue.config(kb)
            truth = read_truth(paths, doc_id)
            if truth is None:
                raise missing_document(kb, doc_id)
            check_rewritable(paths, truth)
            same_body = body is None or truth.row.content_sha256 == body_sha256(body)
            self._check_unseen(truth, expected, replacing=not same_body)
            if same_body and (chosen is None or _same_tags(truth.row.tags, chosen)):
                return document_result(self.index, paths, truth.row, "unchanged", None)
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
            self.freshness.wrote(paths)
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
                embedder=self.providers.embedder,
                record=lambda: self.index.audit(AuditEvent.KB_DOCUMENT_UPDATED, kb, actor, doc_id, details),
            )
            return document_result(self.index, paths, edited.row, "updated", _chunks(written))

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
        if size > self.settings.max_document_bytes:
            raise IngestRejectedError(
                "too_large",
                f"The new content is {size:,} bytes; the limit is {self.settings.max_document_bytes:,}.",
                hint="Split the document, or raise max_document_bytes in config.yaml.",
            )
        return body

    def delete_document(self, kb: str, doc_id: str, *, actor: str = "cli") -> DeleteResult:
        """Remove a document's Markdown, its original and its rows."""
        paths, _ = self.catalogue.open_kb(kb)
        doc_id = _check_id(kb, doc_id)
        with self.locks.writing(paths):
            return self.delete_locked(paths, doc_id, actor=actor)

    def delete_locked(
        self, paths: KbPaths, doc_id: str, *, actor: str, details: dict[str, Any] | None = None
    ) -> DeleteResult:
        """``delete_document`` for a caller that holds the knowledge base's lock."""
        known = self.index.get_document(paths.name, doc_id) is not None
        removed = int(remove_file(paths.doc(doc_id)))
        if not (known or removed):
            raise missing_document(paths.name, doc_id)
        self.freshness.wrote(paths)
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
            raise missing_document(paths.name, doc_id)
        check_rewritable(paths, truth)
        name = document_filename(Path(source_path).name)
        title = hand_title(truth) or derive_title(truth.body, name)
        changes = {"source_path": source_path, "original_filename": name, "title": title, "updated_at": utc_now()}
        metadata = DocumentMeta.updated(truth.row.metadata, **changes)
        atomic_write(paths.doc(doc_id), render_document(metadata, truth.body).encode("utf-8"))
        self.freshness.wrote(paths)
        moved = truth_of(paths, doc_id, metadata, truth.body, source_stamp=source_stamp)
        details = {"renamed_from": renamed_from, "source_path": source_path}
        written = index_document(
            self.index,
            paths,
            self.catalogue.config(paths.name),
            doc_id,
            force=title != truth.row.title,  # a vector KB's chunks are embedded with their title
            truth=moved,
            embedder=self.providers.embedder,
            record=lambda: self.index.audit(AuditEvent.KB_DOCUMENT_RENAMED, paths.name, actor, doc_id, details),
        )
        return document_result(self.index, paths, moved.row, "updated", _chunks(written))

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

        One bad file is reported and the rest go on. Files are committed in bounded batches (a
        group commit, ``folder_ingest``); progress reports a file once its batch is committed, so a
        cancelled call stops with every file it reported committed. Symbolic links are not
        followed; with ``within``, a file whose real path leaves those folders is refused.
        ``tags`` are given to every document ingested (None keeps a re-ingested document's own).
        """
        chosen = None if tags is None else check_tags(tags)
        root = Path(check_path_text(path)).expanduser()
        if not root.exists():
            raise InvalidArgumentError(f"{root} does not exist.", hint="Pass an existing file or folder.")
        paths, _ = self.catalogue.open_kb(kb)
        self.freshness.refresh(kb)
        return ingest_folder(
            self.ingest, paths, root, replace=replace, actor=actor, progress=progress, within=within, tags=chosen
        )

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
    ) -> contextlib.AbstractContextManager[FolderIngest]:
        """A run of files ingested under the knowledge base's lease, committed in batches (``folder_ingest``)."""
        return folder_ingest(
            self.ingest, paths, finished, replace=replace, actor=actor, within=within, tags=tags, keep_edits=keep_edits
        )

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
        """Ingest one file of a folder on its own; a failure is reported, not raised."""
        return ingest_file(
            self.ingest, paths, file, replace=replace, actor=actor, within=within, keep_edits=keep_edits, tags=tags
        )


def _chunks(indexed: Indexed | None) -> int | None:
    return None if indexed is None else indexed.chunks


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
        raise missing_document(kb, doc_id)
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


def _frontmatter_warning(paths: KbPaths, doc_id: str, problem: str) -> str:
    return (
        f"The frontmatter of {paths.doc(doc_id)} does not parse ({problem}). Until its YAML is fixed by hand, "
        "the document keeps the metadata Coffer last read from it, and Coffer will not edit or retag it."
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
