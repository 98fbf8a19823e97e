"""Live folders: a knowledge base that follows folders of the user's own files.

``follow`` records a folder in the knowledge base's ``kb.yaml`` (its ``follow`` list) and brings
the knowledge base up to date with it; ``sync`` does that again, for the whole folder or only for
the paths a watcher saw change (``services/watcher.py``). Files are ingested as an agent's
``ingest_path`` ingests a folder (``DocumentService.folder_ingest``), matched by ``source_path``
and re-checked under the knowledge base's lock:

- a new file is ingested; a changed one is re-ingested in place (same id); an identical one is
  ``unchanged`` and writes nothing — which also makes a second server, or a second look at the
  same change, a no-op;
- a changed file whose document was edited in Coffer is a ``conflict``: the edits are kept, the
  file is not ingested, and the audit log says so once per version of the file (``KB_SOURCE_CONFLICT``);
- a deleted file's document is removed (``follow_deleted: remove``, the default: the knowledge
  base mirrors the folder) or kept (``keep``: ``check_sources`` reports it ``missing``); a
  document edited in Coffer is always kept, so a deletion never loses edits made in Coffer;
- a file renamed or moved inside the folder (gone from one path, its bytes at another, in one
  sync) is ``renamed``: its document follows it, with its id, tags and dates (``services/renames.py``);
  renamed and changed at once, it is a deleted file and a new one;
- a followed folder that is gone (an unmounted disk, a renamed folder) removes nothing.

Files are read as an agent's ``ingest_path`` reads them: never through a symbolic link (neither a
linked file nor a linked folder), and only when their real path lies inside the followed folder;
an agent may follow only a folder inside ``allowed_dirs``. A folder that holds the Coffer home (or
lies inside it) cannot be followed: its own documents would be ingested again and again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from coffer_mcp.access import check_inside, check_size, source_stamp, stamped_sha256_source
from coffer_mcp.audit import AuditEvent
from coffer_mcp.errors import (
    CofferError,
    IngestRejectedError,
    InvalidArgumentError,
    PathNotAllowedError,
    StoreError,
    render_hint,
)
from coffer_mcp.index import DocumentRow, Index
from coffer_mcp.indexing.truth import holds_edits, read_truth
from coffer_mcp.models import DirectoryIngestItem, DirectoryIngestResult, FollowedFolder, IngestResult, Progress
from coffer_mcp.services.activity import FollowActivity, followed_folders, inside, sourced_documents
from coffer_mcp.services.catalogue import Catalogue
from coffer_mcp.services.documents import DocumentService
from coffer_mcp.services.folders import editors_file, failed_item, skipped_name, undecodable_item, visible_files
from coffer_mcp.services.freshness import Freshness
from coffer_mcp.services.locks import Locks
from coffer_mcp.services.renames import extension, hash_files, pair_moves, same_size_files, stamp_size
from coffer_mcp.settings import Settings
from coffer_mcp.store import (
    MAX_FOLLOWED,
    KbPaths,
    StorePaths,
    check_path_text,
    fsync_dir,
    make_kb_config,
    path_stamp,
    write_kb_config,
)
from coffer_mcp.timeutil import utc_now

__all__ = ["WATCHER", "FollowService"]

log = logging.getLogger(__name__)

WATCHER = "watcher"
"""The actor of what the watcher writes, in the audit log."""
_COUNTED = ("created", "updated", "unchanged", "rejected", "conflict", "removed", "renamed")
_VOUCHED_BATCH = 4096
"""Source stamps learned by a sync are written this many at a time (a first sync may learn 100,000)."""


class FollowService:
    """Folders a knowledge base follows: following, unfollowing, and bringing them up to date."""

    def __init__(
        self,
        *,
        settings: Settings,
        index: Index,
        paths: StorePaths,
        activity: FollowActivity,
        catalogue: Catalogue,
        locks: Locks,
        freshness: Freshness,
        documents: DocumentService,
    ) -> None:
        self.settings = settings
        self.index = index
        self.paths = paths
        self.activity = activity
        self.catalogue = catalogue
        self.locks = locks
        self.freshness = freshness
        self.documents = documents
        # (kb, path) -> (hash of its file stamp and its document's source sha256, the outcome, or
        # None for "unchanged"): a second full sync reads only files that changed since. Kept small:
        # a server following 100,000 files holds one entry for each.
        self._known: dict[tuple[str, str], tuple[int, DirectoryIngestItem | None]] = {}
        # (kb, followed folder) -> its subfolders, so a deleted folder's documents are found
        # without reading every document row.
        self._folders: dict[tuple[str, str], set[str]] = {}
        self._conflicts: set[tuple[str, str]] = set()  # (document id, source sha) known to be audited

    # -- the follow list ---------------------------------------------------------------------------

    def follow(
        self,
        kb: str,
        path: str | Path,
        *,
        actor: str = "cli",
        progress: Progress | None = None,
        within: Sequence[Path] | None = None,
    ) -> DirectoryIngestResult:
        """Ingest a folder and keep following it (a watcher applies its changes while a server runs).

        With ``within`` (what agents get: ``allowed_dirs``) the folder must lie inside those folders.

        Raises:
            PathNotAllowedError: ``within`` is given and the folder is outside it.
            InvalidArgumentError: not a folder, or it holds (or lies inside) the Coffer home.
        """
        folder = self._folder(path, within)
        paths, _ = self.catalogue.open_kb(kb)
        self._set_followed(paths, folder, follow=True, actor=actor)
        result = self.sync(kb, folder, actor=actor, progress=progress)
        return result.model_copy(update={"followed": folder})

    def unfollow(self, kb: str, path: str | Path, *, actor: str = "cli") -> list[FollowedFolder]:
        """Stop following a folder; its documents stay (``check_sources`` still tracks them).

        Returns the folders still followed.
        """
        paths, config = self.catalogue.open_kb(kb)
        text = str(Path(check_path_text(path)).expanduser())
        folder = text if text in config.follow else os.path.realpath(text)
        if folder not in config.follow:
            raise InvalidArgumentError(
                f"Knowledge base '{kb}' does not follow {text[:200]}.",
                hint=f"It follows {', '.join(config.follow)}."
                if config.follow
                else f"No folder is followed in '{kb}'.",
            )
        self._set_followed(paths, folder, follow=False, actor=actor)
        return self.followed(kb)

    def followed(self, kb: str, sources: Iterable[str] | None = None) -> list[FollowedFolder]:
        """The folders a knowledge base follows, with what this process's watcher knows of them.

        ``sources``: every document's source path, when the caller has read them anyway.
        """
        _, config = self.catalogue.open_kb(kb)
        return followed_folders(self.index, self.activity, kb, config, sources)

    def _folder(self, path: str | Path, within: Sequence[Path] | None) -> str:
        check_path_text(path)
        given = Path(path).expanduser()
        real = check_inside(given, within) if within is not None else Path(os.path.realpath(given))
        if not real.is_dir():
            raise InvalidArgumentError(
                f"{given} is not a folder; only folders are followed.",
                hint="Pass the folder that holds the file, or ingest the file alone without following it.",
            )
        home = self.paths.home
        if real == home or real.is_relative_to(home) or home.is_relative_to(real):
            raise InvalidArgumentError(
                f"{given} holds the Coffer home {home} (or lies inside it): its own documents would be ingested "
                "again and again.",
                hint="Follow a folder outside the Coffer home.",
            )
        return str(real)

    def _set_followed(self, paths: KbPaths, folder: str, *, follow: bool, actor: str) -> None:
        with self.locks.writing(paths):
            old = self.catalogue.config(paths.name)
            kept = [f for f in old.follow if f != folder]
            folders = [*kept, folder] if follow else kept
            if tuple(folders) == old.follow:
                return
            if len(folders) > MAX_FOLLOWED:
                raise InvalidArgumentError(
                    f"Knowledge base '{paths.name}' follows {MAX_FOLLOWED} folders already.",
                    hint="Follow a folder that holds several of them instead.",
                )
            config = make_kb_config(**{**old.model_dump(), "follow": folders, "updated_at": utc_now()})
            write_kb_config(paths.config, config)
            with self.index.transaction():
                self.index.upsert_kb(paths.name, config, path_stamp(paths.config))
                self.index.audit(AuditEvent.KB_UPDATED, paths.name, actor, details={"follow": folders})

    # -- bringing a folder up to date --------------------------------------------------------------

    def sync_all(
        self, kb: str, *, actor: str = "cli", progress: Progress | None = None, unchanged_items: bool = True
    ) -> list[DirectoryIngestResult]:
        """``sync`` every folder the knowledge base follows."""
        _, config = self.catalogue.open_kb(kb)
        return [
            self.sync(kb, folder, actor=actor, progress=progress, unchanged_items=unchanged_items)
            for folder in config.follow
        ]

    def sync(
        self,
        kb: str,
        folder: str,
        *,
        actor: str = "cli",
        progress: Progress | None = None,
        changed: Iterable[Path] | None = None,
        unchanged_items: bool = True,
    ) -> DirectoryIngestResult:
        """Bring a knowledge base up to date with one folder it follows: all of it, or the ``changed`` paths.

        ``changed`` are paths a watcher saw change (files or folders, present or gone): only they
        are looked at. A folder that is gone changes nothing. Each file is its own transaction.
        Without ``unchanged_items`` the result lists only files something happened to (the
        watcher's full syncs of big folders), with every count still complete.
        """
        paths, _ = self.catalogue.open_kb(kb)
        items: list[DirectoryIngestItem] = []
        failed: list[DirectoryIngestItem] = []
        counts = dict.fromkeys(_COUNTED, 0)
        changed = None if changed is None else list(changed)
        if Path(folder).is_dir():
            rows: dict[str, _Doc] | None = None
            state = self.activity.get(kb, folder)
            version = state.version
            if changed is None and state.resync is not None:
                self._replaced(kb, folder)
            undecodable: list[Path] = []  # names that are not UTF-8: reported, never read
            if changed is None:
                rows = self._rows(kb, folder)
                files, gone = self._full(kb, folder, rows, undecodable)
            else:
                files, gone = self._hinted(kb, folder, changed, undecodable)
            moves = self._moves(paths, folder, files, gone, rows)
            if moves:
                moved_to = {move.path for move in moves}
                moved = {move.row.id for move in moves}
                files = [name for name in files if name not in moved_to]
                gone = [row for row in gone if row.id not in moved]
            total = len(files) + len(gone) + len(moves) + len(undecodable)
            looked_at: dict[str, int] = {}  # path -> version of the files read, until their items are reported
            vouched: list[tuple[str, str, str]] = []  # (document id, source sha256, stamp) of files found unchanged

            def finished(item: DirectoryIngestItem) -> None:
                if item.code == "busy":  # the caller retries the whole change later
                    raise StoreError(item.message or "busy", code="busy", hint=item.hint or "")
                if item.path in looked_at:
                    self._remember((paths.name, item.path), looked_at.pop(item.path), item)
                counts[item.status] = counts.get(item.status, 0) + 1
                if item.status == "rejected":
                    failed.append(item)
                if unchanged_items or item.status != "unchanged":
                    items.append(item)
                if progress:
                    progress(sum(counts.values()), total, Path(item.path).name)

            try:
                with self.documents.folder_ingest(
                    paths, finished, replace=True, actor=actor, within=[Path(folder)], keep_edits=True
                ) as run:
                    for name in files:
                        item = self._settled(paths, folder, Path(name), actor, rows, looked_at, vouched)
                        if item is None:
                            run.ingest(Path(name))
                        else:
                            run.report(item)
                        if len(vouched) >= _VOUCHED_BATCH:
                            self._keep_stamps(vouched)
                    for unusable in undecodable:
                        run.report(undecodable_item(unusable))
                self._keep_stamps(vouched)
                for move in moves:
                    for item in self._renamed(paths, folder, move, actor):
                        finished(item)
                for row in gone:
                    finished(self._gone(paths, folder, row, actor))
            finally:
                if counts["created"] or counts["updated"]:
                    fsync_dir(paths.docs)
                    fsync_dir(paths.raw)
            added = counts["created"] - counts["removed"]
            counted = (len(rows) + added, version) if rows is not None else None
            looked = None if changed is None else {str(path) for path in changed}
            new = self.activity.synced(kb, folder, counted=counted, added=added, failed=failed, changed=looked)
            _log_failures(kb, folder, new)
        else:
            log.warning("followed folder %s of %s is missing; its documents are kept", folder, kb)
        return DirectoryIngestResult.model_validate(
            {"kb": kb, "items": items, **{status: counts[status] for status in _COUNTED}}
        )

    def _replaced(self, kb: str, folder: str) -> None:
        """Before a full sync of a folder whose knowledge base's files were replaced (a snapshot restored):
        the index is brought in step with the files first (another process may not have reindexed
        yet), and what is remembered of the folder's files is forgotten — it was learned against
        documents that are gone or back as they were (a conflict with an edit the restore undid)."""
        self.freshness.refresh(kb)
        for key in [key for key in self._known if key[0] == kb and inside(key[1], folder)]:
            del self._known[key]

    def _rows(self, kb: str, folder: str) -> dict[str, _Doc]:
        """The documents whose source is in the folder, by source path (read once for a full sync)."""
        return {
            row.source_path: _Doc.of(row)
            for row in sourced_documents(self.index, kb)
            if row.source_path and inside(row.source_path, folder)
        }

    def _full(
        self, kb: str, folder: str, rows: dict[str, _Doc], undecodable: list[Path]
    ) -> tuple[list[str], list[_Doc]]:
        """Every visible file of the folder, and the documents whose file is gone (names that are
        not UTF-8 go to ``undecodable``).

        Paths are kept as text: a ``Path`` takes three times the memory, times 100,000 files.
        """
        subfolders: set[str] = set()
        walk = visible_files(Path(folder), folders=subfolders, undecodable=undecodable)
        files = sorted(str(file) for file in walk)
        self._folders[kb, folder] = subfolders
        present = set(files)
        gone = [row for source, row in rows.items() if source not in present and _gone_for_sure(source, folder)]
        return files, gone

    def _hinted(
        self, kb: str, folder: str, changed: Iterable[Path], undecodable: list[Path]
    ) -> tuple[list[str], list[_Doc]]:
        """The files among (and under) ``changed``, and the documents of those that are gone (names
        that are not UTF-8 under them go to ``undecodable``: watchfiles reports no such name itself)."""
        files: dict[Path, None] = {}
        gone: dict[str, _Doc] = {}
        known = self._folders.setdefault((kb, folder), set())
        for path in dict.fromkeys(changed):
            if str(path) == folder or not inside(str(path), folder):
                continue  # the followed folder itself coming or going: the watcher syncs it in full then
            if any(skipped_name(part) for part in path.relative_to(folder).parts):
                continue
            try:
                is_dir = os.path.isdir(path) and not os.path.islink(path)
                present = os.path.lexists(path)
            except (OSError, ValueError):
                continue
            if is_dir:  # a folder moved in: its files raise no events of their own
                subfolders: set[str] = set()
                files.update(dict.fromkeys(visible_files(path, folders=subfolders, undecodable=undecodable)))
                if (row := self._find(kb, path)) is not None:  # a file replaced by a folder of its name
                    gone[row.id] = row
                known.update(subfolders)
            elif present:
                if not editors_file(path.name):
                    files[path] = None
                if str(path) in known:  # a folder replaced by a file of its name
                    gone.update((row.id, row) for row in self._gone_rows(kb, path, known))
            else:
                gone.update((row.id, row) for row in self._gone_rows(kb, path, known))
        return list(map(str, files)), [row for row in gone.values() if _gone_for_sure(row.source_path, folder)]

    def _gone_rows(self, kb: str, path: Path, known: set[str]) -> list[_Doc]:
        """The documents of a path that is gone: its own, or every one under it if it was a folder."""
        row = self._find(kb, path)
        if str(path) not in known:
            return [row] if row is not None else []
        known.difference_update({f for f in known if inside(f, str(path))})
        return [_Doc.of(r) for r in sourced_documents(self.index, kb) if inside(r.source_path or "", str(path))]

    def _find(self, kb: str, path: Path) -> _Doc | None:
        row = self.index.find_document(kb, source_path=str(path))
        return None if row is None else _Doc.of(row)

    def _settled(
        self,
        paths: KbPaths,
        folder: str,
        file: Path,
        actor: str,
        rows: dict[str, _Doc] | None,
        looked_at: dict[str, int],
        vouched: list[tuple[str, str, str]],
    ) -> DirectoryIngestItem | None:
        """One present file's item when it needs no ingest (unchanged, refused, a conflict); None to ingest it.

        ``rows`` are the folder's documents when the folder was walked (a walk follows no link);
        without them, the file is a path a watcher reported, which may lead through a link.
        What a file came to is remembered with its stamp (and its document's source hash): a
        second full sync reads only files that changed since. ``looked_at`` gets the version (stamp
        and source hash) of a file read, for ``_remember`` once its item is reported. A file whose stamp is the one its
        document's row keeps (``source_stamp``) is not read at all, in any process: the bytes that
        stamp vouches for are the ones the row was made from; ``vouched`` gets the stamps of files
        read and found unchanged, to be kept in their rows.
        """
        try:
            if rows is None and os.path.realpath(file) != str(file):
                raise PathNotAllowedError(
                    f"{file} is reached through a symbolic link; links are not followed.",
                    hint="Move the file itself into the followed folder.",
                )
            info = os.lstat(file)
            stamp = source_stamp(info)
            row = self._find(paths.name, file) if rows is None else rows.get(str(file))
            version = hash((stamp, row.source_sha256 if row is not None else ""))
            known = self._known.get((paths.name, str(file)))
            if known is not None and known[0] == version:
                if known[1] is not None:
                    return known[1]
                if row is not None:
                    return _item(file, "unchanged", row)
            if row is not None and row.source_stamp == stamp:
                return _item(file, "unchanged", row)
            item = self._too_large(file, info.st_size) or self._compare(paths, folder, file, row, actor, vouched)
        except (CofferError, OSError) as exc:
            return _refused(file, exc)
        looked_at[str(file)] = version
        return item

    def _too_large(self, file: Path, size: int) -> DirectoryIngestItem | None:
        """A file beyond ``max_document_bytes``, refused by its size alone: never opened, let alone read or
        hashed (a 20 GB file would hold every other followed file up for minutes). None for the others."""
        try:
            check_size(file, size, self.settings.max_document_bytes)
        except IngestRejectedError as exc:
            return failed_item(file, exc)  # said once a sync by _log_failures, as an ingest's refusals are
        return None

    def _keep_stamps(self, vouched: list[tuple[str, str, str]]) -> None:
        """Keep the stamps of files read and found unchanged in their rows (then forget them here),
        so that no process reads them again. A cache fill: no lock is needed, since a row only takes
        a stamp while its source hash is still the one the stamp vouches for."""
        if vouched:
            with self.index.transaction():
                self.index.remember_source_stamps(vouched)
            vouched.clear()

    def _remember(self, key: tuple[str, str], version: int, item: DirectoryIngestItem) -> None:
        """Keep what a file read at ``version`` came to, when reading it again would come to the same."""
        if item.status == "unchanged":
            self._known[key] = (version, None)
        elif item.status == "conflict" or (item.status == "rejected" and item.code in _FILES_OWN_FAILURES):
            self._known[key] = (version, item)
        else:  # a failure of the moment (a database down, a lock busy, a file unreadable): tried again
            self._known.pop(key, None)

    def _compare(
        self, paths: KbPaths, folder: str, file: Path, row: _Doc | None, actor: str, vouched: list[tuple[str, str, str]]
    ) -> DirectoryIngestItem | None:
        """The outcome for a file whose document is as it was (unchanged, or a conflict); None to ingest it."""
        if row is None:
            return None
        sha, stamp = stamped_sha256_source(file, [Path(folder)], max_bytes=self.settings.max_document_bytes)
        if sha == row.source_sha256:
            if stamp:
                vouched.append((row.id, sha, stamp))
            return _item(file, "unchanged", row)
        # The document's file too: an edit saved by hand that no read has indexed yet is an edit (the
        # ingest checks it again under the lock; here it is met, audited and reported like any other).
        if row.source_mode == "edited" or holds_edits(read_truth(paths, row.id)):
            return self._conflict(paths, row, file, sha, actor)
        return None

    def _conflict(self, paths: KbPaths, row: _Doc, file: Path, sha: str, actor: str) -> DirectoryIngestItem:
        """A changed file whose document was edited in Coffer: audited once per version of it, never ingested."""
        if (row.id, sha) not in self._conflicts:
            self._audit_conflict(paths, row, file, sha, actor)
            self._conflicts.add((row.id, sha))
        return DirectoryIngestItem(
            path=str(file),
            status="conflict",
            document_id=row.id,
            title=row.title,
            code="source_conflict",
            message="The file changed, but its document was edited in Coffer: the edits are kept.",
            hint=render_hint("Re-ingest the file with {arg:replace=true} to take its version (the edits are lost)."),
        )

    def _audit_conflict(self, paths: KbPaths, row: _Doc, file: Path, sha: str, actor: str) -> None:
        """Record a conflict in the audit log, unless the log holds it for this version of the file already.

        The log is asked, not this process's memory: every server that starts (each stdio client
        starts its own) meets the conflict again, and the log is the record they all share (kept
        when the index is rebuilt, too). It is asked under the knowledge base's lock, which every
        server on the store takes (a file lock, and an advisory lock on PostgreSQL), so two servers
        meeting the conflict at once record it once. Reading a document's events scans its
        knowledge base's log (about 30 ms at 200,000 events on SQLite), once per conflict and
        process: ``_conflicts`` keeps those known to be recorded.
        """
        event = AuditEvent.KB_SOURCE_CONFLICT
        with self.locks.writing(paths):
            recorded = self.index.document_events(paths.name, row.id, event)
            if any(e.details.get("source_sha256") == sha for e in recorded):
                return
            log.warning("%s changed, but document %s was edited in Coffer: the edits are kept", file, row.id)
            with self.index.transaction():
                details = {"source_path": str(file), "source_sha256": sha}
                self.index.audit(event, paths.name, actor, row.id, details)

    def _moves(
        self, paths: KbPaths, folder: str, files: list[str], gone: list[_Doc], rows: dict[str, _Doc] | None
    ) -> list[_Move]:
        """The documents whose file is gone that a file without a document holds the bytes of: moved, not deleted.

        The new files of this sync are looked at first. With a watcher's hints (no ``rows``), gone
        ones left over are looked for in the whole folder too, since the watcher may report the new
        name in a later batch (or have applied it already, as a new document: that one is not taken,
        no two are merged). Either way one ``lstat`` a file decides, and only files of a gone
        document's size (and never beyond ``max_document_bytes``) are read.
        """
        kb, limit = paths.name, self.settings.max_document_bytes
        sizes = {
            row.id: (size, extension(row.source_path))
            for row in gone
            if (size := self._source_size(paths, row)) is not None
        }
        if not sizes:
            return []
        new = [f for f in files if (rows.get(f) if rows is not None else self._find(kb, Path(f))) is None]
        found = hash_files(new, folder, set(sizes.values()), max_bytes=limit)
        moves = pair_moves([(row.source_path, row.source_sha256) for row in gone], found)
        left = [row for row in gone if row.source_path not in moves and row.id in sizes]
        if rows is None and left:
            left_sizes = {sizes[row.id] for row in left}
            others = [f for f in same_size_files(folder, left_sizes, set(files)) if self._find(kb, Path(f)) is None]
            more = hash_files(others, folder, left_sizes, max_bytes=limit)
            moves.update(pair_moves([(row.source_path, row.source_sha256) for row in left], more))
            found.update(more)
        return [
            _Move(row, moves[row.source_path], found[moves[row.source_path]][1])
            for row in gone
            if row.source_path in moves
        ]

    def _source_size(self, paths: KbPaths, row: _Doc) -> int | None:
        """The size of a document's source file: from its stamp, else from the original kept in ``raw/``."""
        size = stamp_size(row.source_stamp)
        if size is None and (current := self.index.get_document(paths.name, row.id)) is not None:
            with contextlib.suppress(OSError):
                size = os.stat(paths.raw / f"{row.id}.{current.original_format or 'bin'}").st_size
        return size

    def _renamed(self, paths: KbPaths, folder: str, move: _Move, actor: str) -> list[DirectoryIngestItem]:
        """Move a document to its file's new path (``renamed``), checked again under the lock.

        Another server may have moved or removed it meanwhile, or the old file be back: then each
        path is what it is now (a new file to ingest, a gone one), with the checks of each.
        """
        row, new = move.row, Path(move.path)
        self._known.pop((paths.name, row.source_path), None)
        result: IngestResult | None = None
        try:
            with self.locks.writing(paths):
                current = self.index.get_document(paths.name, row.id)
                holds = (
                    current is not None
                    and (current.source_path, current.source_sha256) == (row.source_path, row.source_sha256)
                    and _gone_for_sure(row.source_path, folder)
                    and self._find(paths.name, new) is None
                )
                if holds:
                    result = self.documents.move_source(
                        paths, row.id, move.path, renamed_from=row.source_path, source_stamp=move.stamp, actor=actor
                    )
        except (CofferError, OSError) as exc:
            return [_refused(new, exc)]
        if result is None:
            within = [Path(folder)]
            ingested = self.documents.ingest_file(paths, new, replace=True, actor=actor, within=within, keep_edits=True)
            return [ingested, self._gone(paths, folder, row, actor)]
        log.info("%s was renamed %s: document %s follows it", row.source_path, move.path, row.id)
        return [
            DirectoryIngestItem(
                path=move.path,
                status="renamed",
                document_id=row.id,
                title=result.title,
                message=f"Renamed or moved from {row.source_path}: the document follows it.",
            )
        ]

    def _gone(self, paths: KbPaths, folder: str, row: _Doc, actor: str) -> DirectoryIngestItem:
        """A document whose followed file was deleted: removed, or kept (edited, or ``follow_deleted: keep``)."""
        source = row.source_path or ""
        self._known.pop((paths.name, source), None)
        if row.source_mode == "edited" or self.settings.follow_deleted == "keep":
            why = "it was edited in Coffer" if row.source_mode == "edited" else "follow_deleted is keep"
            return _item(Path(source), "kept", row, message=f"The file is gone; its document is kept ({why}).")
        with self.locks.writing(paths):
            current = self.index.get_document(paths.name, row.id)
            # Another server may have removed it, the file may be back, or the whole folder gone (an
            # unmount while this sync ran): then there is nothing to do.
            if current is None or current.source_path != source or not _gone_for_sure(source, folder):
                return _item(Path(source), "unchanged", row)
            # The document's file, not only its row: an edit saved by hand that no read has indexed yet is kept too.
            if current.source_mode == "edited" or holds_edits(read_truth(paths, row.id)):
                return _item(Path(source), "kept", row, message="The file is gone; its document was edited: kept.")
            self.documents.delete_locked(paths, row.id, actor=actor, details={"source_path": source})
        return _item(Path(source), "removed", row)


_FILES_OWN_FAILURES = frozenset(
    """unsupported_type too_large empty scanned_pdf conversion_failed engine_unavailable undecodable_name
    path_not_allowed invalid_frontmatter""".split()
)
"""Why a file is refused that only a change of the file (or a restart, for settings and installed
engines) can change: remembered with its version, so a full sync does not convert it again."""


@dataclass(frozen=True, slots=True)
class _Doc:
    """What a sync needs of a document: a full sync holds one for every file of the folder."""

    id: str
    title: str
    source_path: str
    source_sha256: str
    source_mode: str
    source_stamp: str  # "" when no stamp vouches for the source's bytes: never equal to a file's stamp

    @classmethod
    def of(cls, row: DocumentRow) -> _Doc:
        return cls(row.id, row.title, row.source_path or "", row.source_sha256, row.source_mode, row.source_stamp)


@dataclass(frozen=True, slots=True)
class _Move:
    """A document whose file is gone, and the file at ``path`` that holds its bytes now (``stamp``: its stamp)."""

    row: _Doc
    path: str
    stamp: str


def _gone_for_sure(source: str, folder: str) -> bool:
    """Whether a followed file is really gone: its followed folder is there (not unmounted), the file is not.

    A folder now at its path (or a file where one of its folders was) is no file to ingest: the
    file is gone. A file that cannot be looked at (in a folder this user may not read) is not.
    """
    if not os.path.isdir(folder):
        return False
    try:
        info = os.lstat(source)
    except (FileNotFoundError, NotADirectoryError):
        return True
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode)


def _log_failures(kb: str, folder: str, failed: Sequence[DirectoryIngestItem]) -> None:
    """Say once, at the default level, that files of a followed folder could not be ingested (each at info).

    One line per sync, not per file: a followed folder of 5,000 photos would fill the log at every start.
    """
    if not failed:
        return
    for item in failed:
        log.info("followed file %s not ingested: %s %s", item.path, item.message, item.hint or "")
    first = failed[0]
    more = f" (and {len(failed) - 1} more files)" if len(failed) > 1 else ""
    log.warning(
        "%s%s of followed folder %s not ingested into %s: %s check_sources lists them, with what to do.",
        Path(first.path).name,
        more,
        folder,
        kb,
        first.message,
    )


def _item(path: Path, status: str, row: _Doc, *, message: str | None = None) -> DirectoryIngestItem:
    # Built without validation: a full sync of 100,000 unchanged files makes one for each.
    return DirectoryIngestItem.model_construct(
        path=str(path), status=status, document_id=row.id, title=row.title, message=message, code=None, hint=None
    )


def _refused(file: Path, exc: CofferError | OSError) -> DirectoryIngestItem:
    if isinstance(exc, CofferError):
        log.warning("followed file %s refused: %s", file, exc.message)
    return failed_item(file, exc)
