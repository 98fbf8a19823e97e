"""The one idempotent reindex routine, and reconcile-on-read built on it.

``index_document`` serves ingest, re-upload, edit, delete and the reindex scan alike: it reads a
document file, and rewrites that document's rows only when its ``content_sha256`` (or the KB's
chunking parameters) changed. ``reconcile_kb`` compares the files under ``docs/`` with the rows
— by ``stat`` first, hashing only files whose stamp moved — so edits made in the user's editor,
files dropped in by hand and files deleted by hand are all seen by the next read.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ulid import ULID

from coffer_mcp.audit import AuditEvent
from coffer_mcp.convert import derive_title
from coffer_mcp.errors import CofferError
from coffer_mcp.index import DocumentRow, Index
from coffer_mcp.indexing.chunking import CHUNKING_VERSION, chunk_markdown
from coffer_mcp.indexing.copies import Copy, renumber_copies
from coffer_mcp.indexing.locations import located_chunks
from coffer_mcp.indexing.truth import Truth, keeping_metadata, read_truth, text_field
from coffer_mcp.indexing.vectorize import (
    SavedVectors,
    embed_document,
    embed_due,
    embedder_usable,
    restore_vectors,
    saved_vectors,
)
from coffer_mcp.models import Chunk, Progress
from coffer_mcp.store import (
    DocumentMeta,
    KbConfig,
    KbPaths,
    atomic_write_all,
    body_sha256,
    file_stamp,
    frontmatter_tags,
    is_document_id,
    markdown_entries,
    parse_frontmatter,
    raw_owner,
    remove_file,
    remove_stale_temp_files,
    render_document,
)
from coffer_mcp.timeutil import from_epoch_ns

if TYPE_CHECKING:
    from coffer_mcp.embed import Embedder
    from coffer_mcp.indexing.reconvert import Reconversion

__all__ = [
    "DocumentWrite",
    "Drift",
    "IndexProgress",
    "Indexed",
    "chunk_params",
    "detect_drift",
    "index_document",
    "index_documents",
    "index_progress",
    "reconcile",
]

log = logging.getLogger(__name__)

COPY_ACTOR = "reconcile"
"""The audit log's actor of a read (or reindex) that gave a document copied in by hand a new id."""

IndexProgress = Callable[[int, int], None]
"""``progress(done, total)``, called by ``reconcile`` after each batch of documents it commits."""

BATCH_DOCUMENTS = 64
"""The most documents a rebuild (``reconcile``) commits in one transaction (SPEC.md §10's group commit)."""
BATCH_SECONDS = 0.2
"""How long a rebuild's batch may gather documents before it is committed."""


def index_progress(progress: Progress | None, message: str = "indexing") -> IndexProgress | None:
    """A service's ``progress(done, total, message)`` as ``reconcile``'s, saying ``message`` on each step."""
    return None if progress is None else (lambda done, total: progress(done, total, message))


def chunk_params(config: KbConfig) -> str:
    """What a document's chunks were made with: the KB's chunk size and overlap, and the chunker.

    Recorded on each document: when it differs from today's, the next reconcile chunks the
    document again (``chunk_size`` changed, or a Coffer whose chunker gives other chunks).
    """
    return f"{config.chunk_params}:v{CHUNKING_VERSION}"


@dataclass(frozen=True, slots=True)
class Indexed:
    """What ``index_document`` wrote: the document's row as it stands now (its embedding state
    included), and how many chunks were written (None: its chunks were kept)."""

    row: DocumentRow
    chunks: int | None


@dataclass(frozen=True, slots=True)
class DocumentWrite:
    """One document of ``index_documents``: its id, and what ``index_document`` takes with it;
    ``chunks``: its body's chunks, when the caller made them already (with the KB's parameters)."""

    doc_id: str
    truth: Truth
    record: Callable[[], None] = lambda: None
    new: bool = False
    chunks: list[Chunk] | None = None


def index_document(
    index: Index,
    kb: KbPaths,
    config: KbConfig,
    doc_id: str,
    *,
    force: bool = False,
    truth: Truth | None = None,
    embedder: Embedder | None = None,
    record: Callable[[], None] = lambda: None,
    new: bool = False,
) -> Indexed | None:
    """Bring one document's rows in line with its file, in one transaction. Returns what was written,
    or None when its file is gone (its rows are removed then).

    Unchanged content and chunking parameters ⇒ only the row's metadata and stamp are refreshed.
    ``truth`` may pass the file's content when the caller has just written it, and ``record``
    writes what goes with the rows in their transaction (the caller's audit record); ``new`` says
    its id was just minted (no rows to read or replace). Rebuilt chunks of a vector KB keep their
    vectors when every chunk's text and the title are unchanged; otherwise they are embedded with
    ``embedder`` when one is usable, or the document stays due (``embed_pending``). Call while
    holding the KB lock. A file whose frontmatter does not parse keeps the metadata its row had
    (``keeping_metadata``).
    """
    truth = truth or read_truth(kb, doc_id)
    if truth is None:
        with index.transaction():
            index.delete_document(doc_id)
            record()
        return None
    prepared = _prepare(index, kb, config, DocumentWrite(doc_id, truth, record, new), force=force)
    with index.transaction():
        stored = _store(index, kb, config, prepared)
    return _embedded(index, kb, config, stored, embedder)


def index_documents(
    index: Index,
    kb: KbPaths,
    config: KbConfig,
    writes: Sequence[DocumentWrite],
    *,
    embedder: Embedder | None = None,
    force: bool = False,
) -> list[Indexed]:
    """``index_document`` for documents whose files are written, all in one transaction (a group
    commit: ``Index.batch``). Either every document's rows are written, or none (the error is
    raised). Embedding, when due, follows the commit. Call while holding the KB lock."""
    prepared = [_prepare(index, kb, config, write, force=force) for write in writes]
    with index.batch():
        stored = [_store(index, kb, config, each) for each in prepared]
    return [_embedded(index, kb, config, each, embedder) for each in stored]


@dataclass(frozen=True, slots=True)
class _Prepared:
    """A document's rows, worked out before its transaction (chunking is CPU work: never under it)."""

    write: DocumentWrite
    row: DocumentRow
    chunks: list[Chunk] | None  # None: unchanged, only the row is written
    saved: SavedVectors | None


def _prepare(index: Index, kb: KbPaths, config: KbConfig, write: DocumentWrite, *, force: bool = False) -> _Prepared:
    truth = write.truth
    current = None if write.new else index.get_document(kb.name, write.doc_id)
    if truth.problem is not None:
        truth = _broken_frontmatter(kb, truth, current)
    row = dataclasses.replace(truth.row, chunk_params=chunk_params(config))
    if current is not None:
        row = dataclasses.replace(row, embed_pending=current.embed_pending, embedding_model=current.embedding_model)
        if not row.source_stamp and current.source_sha256 == row.source_sha256:  # the same bytes: still vouched for
            row = dataclasses.replace(row, source_stamp=current.source_stamp)
    unchanged = (
        current is not None
        and current.content_sha256 == row.content_sha256
        and current.chunk_params == row.chunk_params
        and current.source_sha256 == row.source_sha256  # another original: another source map
    )
    if unchanged and not force:
        return _Prepared(write, row, None, None)
    chunks = (
        write.chunks
        if write.chunks is not None
        else chunk_markdown(truth.body, config.chunk_size, config.chunk_overlap)
    )
    chunks = located_chunks(kb, write.doc_id, truth.body, chunks)
    saved = saved_vectors(index, current, row.title) if config.vector else None
    return _Prepared(write, row, chunks, saved)


def _store(index: Index, kb: KbPaths, config: KbConfig, prepared: _Prepared) -> Indexed:
    """Write a prepared document's rows (call inside a transaction); the row as it stands then."""
    write, row = prepared.write, prepared.row
    if prepared.chunks is None:
        index.upsert_document(row)
        write.record()
        return Indexed(row, None)
    due = prepared.saved is None  # no vectors to keep: the embedding state is known now, written with the row
    if due:
        row = dataclasses.replace(row, embed_pending=config.vector, embedding_model=None)
    index.upsert_document(row, embedding=due)
    written = index.replace_chunks(kb.name, write.doc_id, prepared.chunks, fresh=write.new)
    saved = prepared.saved
    if saved is not None and restore_vectors(index, kb.name, write.doc_id, saved):
        row = dataclasses.replace(row, embed_pending=False, embedding_model=saved.model)
    elif not due:
        index.set_embedding(write.doc_id, pending=config.vector, model=None)
        row = dataclasses.replace(row, embed_pending=config.vector, embedding_model=None)
    write.record()
    return Indexed(row, written)


def _embedded(index: Index, kb: KbPaths, config: KbConfig, stored: Indexed, embedder: Embedder | None) -> Indexed:
    """``stored`` after embedding its new chunks, when they are due and ``embedder`` is usable."""
    row = stored.row
    if stored.chunks is None or not (config.vector and row.embed_pending and embedder_usable(embedder)):
        return stored
    if embed_document(index, kb.name, row.id, embedder) is None:
        return stored
    return Indexed(dataclasses.replace(row, embed_pending=False, embedding_model=embedder.identity), stored.chunks)


def _broken_frontmatter(kb: KbPaths, truth: Truth, current: DocumentRow | None) -> Truth:
    """A file whose frontmatter does not parse, said once (indexing runs when its file changes), with the
    metadata its row had."""
    kept = current is not None and bool(current.metadata)
    log.warning(
        "the frontmatter of %s does not parse (%s): %s until its YAML is fixed by hand, and Coffer will not rewrite it",
        kb.doc(truth.row.id),
        truth.problem,
        "its document keeps the metadata it had" if kept else "its document is indexed without metadata",
    )
    return keeping_metadata(kb, truth, current) if current is not None else truth


@dataclass(slots=True)
class Drift:
    """What differs between ``docs/`` and the rows of one knowledge base."""

    changed: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    """Those of ``changed`` without a row in this knowledge base (dropped in, copied or moved in by hand)."""
    removed: list[str] = field(default_factory=list)
    foreign: list[Path] = field(default_factory=list)
    embeddings_due: bool = False

    def __bool__(self) -> bool:
        return bool(self.changed or self.removed or self.foreign or self.embeddings_due)


def detect_drift(index: Index, kb: KbPaths, config: KbConfig, embedder: Embedder | None = None) -> Drift:
    """Compare file stamps with row stamps (reads no file content); note embeddings that are due.

    This runs before every read, over every document, so the loop is kept lean.
    """
    drift = Drift()
    known = index.doc_stamps(kb.name)
    params = chunk_params(config)
    # The stamps of the rows chunked as today: a row chunked otherwise is changed whatever its file.
    current = {doc_id: stamp for doc_id, (stamp, row_params) in known.items() if row_params == params}
    seen: set[str] = set()
    for entry in markdown_entries(kb.docs):
        doc_id = entry.name[:-3]
        stamp = current.get(doc_id)
        if stamp is None and doc_id not in known and not is_document_id(doc_id):
            drift.foreign.append(Path(entry.path))
            continue
        try:
            stat = entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue  # deleted while we looked: the next read sees it gone
        seen.add(doc_id)
        if stamp != file_stamp(stat):
            drift.changed.append(doc_id)
            if doc_id not in known:
                drift.unknown.append(doc_id)
    drift.removed = [doc_id for doc_id in known if doc_id not in seen]
    if config.vector and embedder_usable(embedder):
        drift.embeddings_due = bool(index.pending_documents(kb.name, embedder.identity, limit=1))
    drift.changed.sort()
    drift.foreign.sort()
    return drift


def reconcile(
    index: Index,
    kb: KbPaths,
    config: KbConfig,
    *,
    force: bool = False,
    progress: IndexProgress | None = None,
    embedder: Embedder | None = None,
    embed_seconds: float | None = None,
    tidy: bool = False,
    reconversion: Reconversion | None = None,
) -> dict[str, int]:
    """Apply the drift of one knowledge base, then catch up on embeddings. Call holding the KB lock.

    With ``force`` every document is re-read and re-chunked (the full rebuild), and with a
    ``reconversion`` too, each one whose converter changed is first converted again from its
    original (what it did is kept in the ``reconversion``). Documents of a vector KB that are
    due for embedding are embedded for at most ``embed_seconds`` (None: all). With ``tidy``,
    originals left without a document by a crashed ingest are removed.
    Returns counts: ``indexed``, ``removed``, ``adopted``, ``embedded``, ``documents``.
    """
    remove_stale_temp_files(kb.docs, kb.raw, kb.root)
    drift = detect_drift(index, kb, config, embedder)
    adopted = [adopt_foreign_file(kb, path) for path in drift.foreign]
    copies = {copy.new_id: copy for copy in renumber_copies(index, kb, drift.unknown)}
    gone = {copy.old_id for copy in copies.values()}
    targets = sorted({*(d for d in drift.changed if d not in gone), *copies, *(a for a in adopted if a)})
    if force:
        targets = sorted({*targets, *index.doc_stamps(kb.name)})
    total = len(targets) + len(drift.removed)
    # Embedding waits until every file is indexed: a slow provider never delays the text index.
    writes = (_target_write(index, kb, doc_id, copies, force, reconversion) for doc_id in targets)
    indexed = _index_in_batches(index, kb, config, writes, force=force, progress=progress, total=total)
    if drift.removed:
        with index.transaction():
            for doc_id in drift.removed:
                index.delete_document(doc_id)
        _remove_orphan_raw(kb, drift.removed)
        if progress:
            progress(total, total)
    if tidy:
        _remove_orphan_raw(kb, [raw_owner(p.name) for p in _raw_entries(kb) if not kb.doc(raw_owner(p.name)).exists()])
    embedded = 0
    if config.vector and embedder_usable(embedder):
        embedded = embed_due(index, kb.name, embedder, seconds=embed_seconds, progress=progress)
    documents = len(index.doc_stamps(kb.name))
    return {
        "indexed": indexed,
        "removed": len(drift.removed),
        "adopted": sum(map(bool, adopted)) + len(copies),
        "embedded": embedded,
        "documents": documents,
    }


def _nothing() -> None:
    pass


def _target_write(
    index: Index, kb: KbPaths, doc_id: str, copies: dict[str, Copy], force: bool, reconversion: Reconversion | None
) -> DocumentWrite | str:
    """What reconcile writes for ``doc_id``: its file's truth, or the id alone when its file is gone."""
    truth = reconversion.refresh(index, kb, doc_id) if force and reconversion is not None else None
    truth = truth or read_truth(kb, doc_id)
    record = _copy_record(index, kb, copies[doc_id]) if doc_id in copies else _nothing
    return doc_id if truth is None else DocumentWrite(doc_id, truth, record)


def _index_in_batches(
    index: Index,
    kb: KbPaths,
    config: KbConfig,
    writes: Iterator[DocumentWrite | str],
    *,
    force: bool,
    progress: IndexProgress | None,
    total: int,
) -> int:
    """Index ``writes`` committed in batches (``BATCH_DOCUMENTS`` or ``BATCH_SECONDS``): the files are
    there already, so a crash loses at most a batch's rows, which the next reconcile writes again.
    A batch whose transaction fails is indexed again one document at a time, so that the
    documents before the one at fault are kept and its error is raised as it would be alone.
    Progress is reported once per committed batch. Returns how many documents got new chunks."""
    indexed = done = 0
    batch: list[DocumentWrite] = []
    started = time.monotonic()

    def commit() -> None:
        nonlocal indexed, done, batch
        writing, batch = batch, []
        if not writing:
            return
        outcomes: Sequence[Indexed | None]
        try:
            outcomes = index_documents(index, kb, config, writing, force=force)
        except (CofferError, OSError):
            outcomes = [_alone(index, kb, config, write, force) for write in writing]
        indexed += sum(outcome is not None and outcome.chunks is not None for outcome in outcomes)
        done += len(writing)
        if progress:
            progress(done, total)

    for write in writes:
        if isinstance(write, str):  # its file is gone: its rows go, in a transaction of their own
            index_document(index, kb, config, write)
            done += 1
            continue
        if not batch:
            started = time.monotonic()
        batch.append(write)
        if len(batch) >= BATCH_DOCUMENTS or time.monotonic() - started >= BATCH_SECONDS:
            commit()
    commit()
    return indexed


def _alone(index: Index, kb: KbPaths, config: KbConfig, write: DocumentWrite, force: bool) -> Indexed | None:
    return index_document(
        index, kb, config, write.doc_id, force=force, truth=write.truth, record=write.record, new=write.new
    )


def _copy_record(index: Index, kb: KbPaths, copy: Copy) -> Callable[[], None]:
    """The audit record of a document copied in by hand and given an id of its own."""
    details = {"copied_from": {"kb": copy.source_kb, "document_id": copy.old_id}}
    return lambda: index.audit(AuditEvent.KB_DOCUMENT_INGESTED, kb.name, COPY_ACTOR, copy.new_id, details)


def _raw_entries(kb: KbPaths) -> list[Path]:
    try:
        return [p for p in kb.raw.iterdir() if not p.name.startswith(".") and p.is_file()]
    except FileNotFoundError:
        return []


def _remove_orphan_raw(kb: KbPaths, doc_ids: list[str]) -> None:
    """A document deleted by hand takes its original along: raw/ only serves live documents."""
    for doc_id in doc_ids:
        for raw in kb.companions(doc_id):
            remove_file(raw)


def adopt_foreign_file(kb: KbPaths, path: Path) -> str | None:
    """Give a Markdown file dropped into ``docs/`` by hand an id, frontmatter and an original.

    ``notes.md`` becomes ``docs/<ULID>.md`` (the original bytes are kept as ``raw/<ULID>.md``);
    the hand-made file is removed only after both are written. A title and tags in its own
    frontmatter are kept, and the whole block as ``source_frontmatter`` (as an ingested note's).
    """
    try:
        data = path.read_bytes()
        stat = path.stat()
    except OSError as exc:
        log.warning("cannot adopt %s: %s", path, exc)
        return None
    doc_id = str(ULID())
    meta, body, problem, salvaged = parse_frontmatter(data.decode("utf-8", errors="replace"))
    meta = meta or salvaged  # a block that does not parse: the title and tags of entries that do
    if not body.strip():
        return None
    if problem is not None:
        log.warning("adopting %s: its frontmatter does not parse (%s); its bytes are kept in raw/", path, problem)
    created = from_epoch_ns(stat.st_mtime_ns)
    metadata = DocumentMeta(
        id=doc_id,
        title=text_field((meta or {}).get("title")) or derive_title(body, path.name),
        original_filename=path.name,
        original_format="md",
        source_sha256=hashlib.sha256(data).hexdigest(),
        content_sha256=body_sha256(body),
        source_mode="converted",
        conversion_engine="passthrough",
        converted_at=created,
        created_at=created,
        updated_at=created,
        tags=list(frontmatter_tags(meta or {})) or None,
        source_frontmatter=meta or None,
    ).to_dict()
    kb.raw.mkdir(parents=True, exist_ok=True)
    atomic_write_all(
        [(kb.raw / f"{doc_id}.md", data), (kb.doc(doc_id), render_document(metadata, body).encode("utf-8"))]
    )
    remove_file(path)
    log.info("adopted %s as document %s in %s", path.name, doc_id, kb.name)
    return doc_id
