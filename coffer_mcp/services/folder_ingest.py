"""Ingesting many files: a folder, or a followed folder's sync, committed in bounded batches.

Under the knowledge base's lease (``Locks.leased``) each file is decided (matched, converted,
planned) and its two files written to temp files (``store.FileBatch``). Every
``BATCH_DOCUMENTS`` documents, or ``BATCH_SECONDS`` after a batch began, or when the lease is
about to give the lock up, the batch is committed: its files are synced all at once (a disk syncs
many files in about the time of one) and renamed into place, its folders synced, then its
documents' rows are written in one index transaction (a group commit, SPEC.md §10), and only
then is each file reported. A crash loses at most the rows of the batch
being written, which the next read restores from the files; the progress reported never runs
ahead of what is committed.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from coffer_mcp.access import read_stamped_source
from coffer_mcp.errors import CofferError, InvalidArgumentError
from coffer_mcp.index import DocumentRow
from coffer_mcp.indexing.reconvert import conversion_options
from coffer_mcp.models import DirectoryIngestItem, DirectoryIngestResult, IngestResult, Progress
from coffer_mcp.services.folders import failed_item, ingested_item, undecodable_item, visible_files
from coffer_mcp.services.ingest import Ingest
from coffer_mcp.services.planned import Planned, Upload
from coffer_mcp.services.prefetch import Job, Prefetch, Prepared
from coffer_mcp.services.uploads import document_filename
from coffer_mcp.store import FileBatch, KbPaths, fsync_dir

__all__ = ["BATCH_DOCUMENTS", "BATCH_SECONDS", "FolderIngest", "folder_ingest", "ingest_file", "ingest_folder"]

BATCH_DOCUMENTS = 64
"""The most documents one batch commits in its transaction."""
BATCH_SECONDS = 0.2
"""How long a batch may gather documents before it is committed (the lease's turn is as long)."""
SYNC_THREADS = 16
"""Threads syncing a batch's files at once: a sync waits on the disk, not on a core."""


def ingest_file(
    ingest: Ingest,
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
    try:
        upload = _read(ingest, paths, file, within)
        result = ingest.ingest(upload, replace=replace, actor=actor, keep_edits=keep_edits, tags=tags)
    except (CofferError, OSError) as exc:
        return failed_item(file, exc)
    return ingested_item(file, result)


def _read(ingest: Ingest, paths: KbPaths, file: Path, within: Sequence[Path] | None) -> Upload:
    data, stamp = read_stamped_source(file, within, max_bytes=ingest.settings.max_document_bytes)
    return Upload.of(paths, document_filename(file.name), data, source_path=str(file), source_stamp=stamp)


def ingest_folder(
    ingest: Ingest,
    paths: KbPaths,
    root: Path,
    *,
    replace: bool,
    actor: str,
    progress: Progress | None,
    within: Sequence[Path] | None,
    tags: list[str] | None,
) -> DirectoryIngestResult:
    """Ingest the file ``root``, or every visible file under the folder ``root`` (``ingest_path``)."""
    undecodable: list[Path] = []  # names that are not UTF-8: reported, never read
    try:
        walk = () if root.is_file() else visible_files(root.resolve(), undecodable=undecodable)
        files = [root.resolve()] if root.is_file() else sorted(walk, key=_parts)
    except OSError as exc:  # e.g. a link swapped for a file while it was being resolved
        raise InvalidArgumentError(
            f"{root} could not be read: {exc.strerror}.", hint="Try again once the folder stops changing."
        ) from None
    items: list[DirectoryIngestItem] = []

    def reported() -> None:  # once per batch reported, not per file: a report may cost a round trip to a client
        if progress and items:
            progress(len(items), len(files) + len(undecodable), Path(items[-1].path).name)

    try:
        with folder_ingest(
            ingest, paths, items.append, replace=replace, actor=actor, within=within, tags=tags, reported=reported
        ) as run:
            run.expect(files)
            for file in files:
                run.ingest(file)
            for name in undecodable:
                run.report(undecodable_item(name))
    finally:
        # One folder sync for the whole run, before anything is acknowledged (or cancelled).
        fsync_dir(paths.docs)
        fsync_dir(paths.raw)
    ingest.index.settle()
    counts = {s: sum(i.status == s for i in items) for s in ("created", "updated", "unchanged", "rejected")}
    return DirectoryIngestResult.model_validate({"kb": paths.name, "items": items, **counts})


@contextlib.contextmanager
def folder_ingest(
    ingest: Ingest,
    paths: KbPaths,
    finished: Callable[[DirectoryIngestItem], None],
    *,
    replace: bool,
    actor: str,
    within: Sequence[Path] | None,
    tags: list[str] | None = None,
    keep_edits: bool = False,
    reported: Callable[[], None] = lambda: None,
) -> Iterator[FolderIngest]:
    """A run of files ingested under the knowledge base's lease, committed in batches.

    ``finished(item)`` gets each file's item once it is committed, in the order the files were
    given, and ``reported()`` is called after each run of them (a batch, or one file reported on
    its own). The caller syncs its folders once the run ends (``fsync_dir``), before it answers.
    """
    run = FolderIngest(
        ingest, paths, finished, replace=replace, actor=actor, within=within, tags=tags, keep_edits=keep_edits
    )
    run.reported = reported
    try:
        with ingest.locks.leased(paths, before_release=run.commit) as renew:
            run.renew = renew
            yield run
    finally:
        run.close()


@dataclass(frozen=True, slots=True)
class _Writing:
    """A file of the batch whose document's files are written, to land with the batch."""

    file: Path
    planned: Planned


class FolderIngest:
    """Files ingested one after the other, their rows committed by batch (made by ``folder_ingest``).

    ``ingest(file)`` renews the lease; holding it, it decides ``file`` and starts writing its
    files, committing the batch once it is full or old enough. The first batch holds one
    document and each next one twice as many, up to ``BATCH_DOCUMENTS``: a run reports progress
    (and can be cancelled) from its first file, and a long one commits few transactions. After a
    commit the lock is given up while the batch is reported, so a writer or a reader waiting for
    it gets its turn. Without the lease (busy, or a slow conversion coming) the file is ingested
    on its own, as ``ingest_file``, after the batch. ``report(item)`` reports a file the caller
    settled itself (a followed file found unchanged), in its place in the order. ``commit()``
    commits the batch; the lease calls it before it gives the lock up, so no file is ever written
    or indexed outside the lock. Files are matched by ``source_path``, so a document of the batch
    never changes another file's match.
    """

    def __init__(
        self,
        ingest: Ingest,
        paths: KbPaths,
        finished: Callable[[DirectoryIngestItem], None],
        *,
        replace: bool,
        actor: str,
        within: Sequence[Path] | None,
        tags: list[str] | None,
        keep_edits: bool,
    ) -> None:
        self._ingest = ingest
        self._paths = paths
        self._finished = finished
        self._replace, self._actor, self._within, self._tags = replace, actor, within, tags
        self._keep_edits = keep_edits
        self._syncers = concurrent.futures.ThreadPoolExecutor(SYNC_THREADS, thread_name_prefix="coffer-sync")
        self._files = FileBatch(self._syncers)
        self._queue: list[_Writing | DirectoryIngestItem] = []  # the batch, in the files' order
        self._ready: list[DirectoryIngestItem] = []  # committed, not reported yet
        self._writing = 0
        self._limit = 1
        self._started = 0.0
        self._prefetch: Prefetch | None = None
        self._expected: list[Path] = []  # the files ``expect`` announced, in order
        self._positions: dict[Path, int] = {}
        self._matches: dict[str, DocumentRow | None] = {}  # looked up under the lock held since the last commit
        self.renew: Callable[[bool], None] = lambda hold: None
        self.reported: Callable[[], None] = lambda: None

    def ingest(self, file: Path) -> None:
        """Ingest ``file``, or start to: it is reported once its batch is committed."""
        from coffer_mcp.convert import quick_to_convert  # here: it loads every converter

        self.renew(quick_to_convert(file.name, _size(file)))
        self._deliver()  # a batch the lease committed as it gave the lock up
        if not self._ingest.locks.holds(self._paths.name):
            self.report(self._alone(file))
            return
        decided = self._decide(file)
        if not isinstance(decided, Planned):
            self.report(decided)
            return
        try:
            decided.stage(self._files)
        except OSError as exc:
            self.report(failed_item(file, exc))
            return
        if not self._writing:
            self._started = time.monotonic()
        self._queue.append(_Writing(file, decided))
        self._writing += 1
        if self._writing >= self._limit or time.monotonic() - self._started >= BATCH_SECONDS:
            self.commit()
            self.renew(False)  # the lock given up while the batch is reported
            self._deliver()

    def expect(self, files: Sequence[Path]) -> None:
        """Say which files ``ingest`` is about to be given, in order: a long run prepares them ahead."""
        settings, config = self._ingest.settings, self._ingest.catalogue.config(self._paths.name)
        within = None if self._within is None else tuple(self._within)
        chunking = (config.chunk_size, config.chunk_overlap)
        job = Job(within, settings.max_document_bytes, conversion_options(settings), chunking)
        self._prefetch = Prefetch.of(files, job)
        self._expected = list(files)
        self._positions = {file: at for at, file in enumerate(self._expected)}

    def report(self, item: DirectoryIngestItem) -> None:
        """Report a file's item in its place: after the files of the batch before it."""
        if self._writing:
            self._queue.append(item)
            return
        self._deliver()
        self._finished(item)
        self.reported()

    def _alone(self, file: Path) -> DirectoryIngestItem:
        return ingest_file(
            self._ingest,
            self._paths,
            file,
            replace=self._replace,
            actor=self._actor,
            within=self._within,
            keep_edits=self._keep_edits,
            tags=self._tags,
        )

    def _decide(self, file: Path) -> Planned | DirectoryIngestItem:
        """What to write for ``file``, or its item when nothing is to be written (unchanged, rejected)."""
        ingest = self._ingest
        ahead = self._prefetch.take(file) if self._prefetch is not None else None
        try:
            matches = self._matched(file)
            if ahead is None:
                upload = _read(ingest, self._paths, file, self._within)
                decided = ingest.decide(
                    upload, replace=self._replace, keep_edits=self._keep_edits, tags=self._tags, matches=matches
                )
            else:
                decided = self._decide_prepared(file, ahead, matches)
            if isinstance(decided, Planned):
                return decided
            return ingested_item(file, ingest.retag(self._paths, decided, self._tags, self._actor))
        except (CofferError, OSError) as exc:
            return failed_item(file, exc)

    def _decide_prepared(
        self, file: Path, ahead: Prepared, matches: Mapping[str, DocumentRow | None]
    ) -> Planned | IngestResult:
        name = document_filename(file.name)
        upload = Upload(self._paths, name, ahead.data, str(file), None, ahead.stamp, ahead.sha)
        return self._ingest.decide(
            upload,
            replace=self._replace,
            keep_edits=self._keep_edits,
            tags=self._tags,
            conversion=(ahead.conversion, ahead.note),
            chunks=(ahead.chunking, ahead.chunks),
            matches=matches,
        )

    def _matched(self, file: Path) -> Mapping[str, DocumentRow | None]:
        """The documents of ``file`` and of the batch's next expected files, by source path, looked up
        in one query (one round trip a batch, not one a file). Call holding the lock: they are
        forgotten at each commit, which comes before the lock is ever given up, and the run's own
        writes never change another file's match (each file is its own source path)."""
        at = self._positions.get(file)
        if str(file) not in self._matches and at is not None:
            ahead = [str(path) for path in self._expected[at : at + self._limit]]
            found = self._ingest.index.find_by_source_paths(self._paths.name, ahead)
            self._matches = {path: found.get(path) for path in ahead}
        return self._matches

    def commit(self) -> None:
        """Commit the batch: its files written and synced, then its rows in one transaction. Its items
        are reported by the next call that reports (``finish`` reports them now)."""
        queue, self._queue, self._writing = self._queue, [], 0
        self._matches = {}  # the lock may be given up next: matches looked up under it go with it
        writing = [entry for entry in queue if isinstance(entry, _Writing)]
        if not writing:
            self._ready += [entry for entry in queue if not isinstance(entry, _Writing)]
            return
        self._limit = min(2 * self._limit, BATCH_DOCUMENTS)
        try:
            self._files.land()  # every file written and synced before the rows that point at them
        except OSError as exc:
            self._ready += [failed_item(q.file, exc) if isinstance(q, _Writing) else q for q in queue]
            return
        results = self._ingest.index_batch([entry.planned for entry in writing], self._actor)
        items = {id(entry): _item(entry.file, result) for entry, result in zip(writing, results, strict=True)}
        self._ready += [items[id(queued)] if isinstance(queued, _Writing) else queued for queued in queue]

    def _deliver(self) -> None:
        """Report what is committed, in order (a report that raises leaves the rest unreported)."""
        if not self._ready:
            return
        while self._ready:
            self._finished(self._ready.pop(0))
        self.reported()

    def finish(self) -> None:
        """Commit the batch, and report every file committed."""
        self.commit()
        self._deliver()

    def close(self) -> None:
        """Commit the batch still open, if any, report it, and stop the writer threads.

        The lease commits it before giving the lock up; one is left only when the lock was held
        before the run began (a caller's own), and it is still held here.
        """
        try:
            self.finish()
        finally:
            self._files.discard()  # only when committing failed: nothing is left staged otherwise
            self._syncers.shutdown()
            if self._prefetch is not None:
                self._prefetch.close()


def _item(file: Path, result: IngestResult | CofferError | OSError) -> DirectoryIngestItem:
    return ingested_item(file, result) if isinstance(result, IngestResult) else failed_item(file, result)


def _parts(path: Path) -> tuple[str, ...]:
    return path.parts  # the order of paths, compared without a Python call per comparison


def _size(file: Path) -> int:
    """The file's size, or 0 when it cannot be read (its ingest reports why)."""
    try:
        return file.stat(follow_symlinks=False).st_size
    except OSError:
        return 0
