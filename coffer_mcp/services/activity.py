"""What this process's watcher is doing, one object the services that report it share (the facade makes it).

The watcher (``services/watcher.py``) records which followed folders it watches, how many changes
it has seen and not applied yet, and when it last brought each folder up to date; every sync
records the files it could not ingest. A folder the watcher is behind on says why (``warning``):
a sync that failed (retried until it succeeds, and only then ``pending: 0`` and a new
``last_sync``), the knowledge base's files replaced under it (a snapshot restored: a full sync
is due), or names watchfiles cannot report (the folder is synced in full periodically).
Metrics and ``check_sources`` read it back as ``FollowedFolder``s. Nothing here is persisted:
another process (the CLI, a second server) has its own, and reports ``watched: false`` for
folders it does not watch. Failures need no record on disk
either: a file that failed has no document, so no stamp vouches for it, and the first full sync of
a process (a server's start, ``check_sources``) tries it again and finds its failure again.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from coffer_mcp.index import DocumentRow, Index
from coffer_mcp.models import DirectoryIngestItem, FollowedFolder
from coffer_mcp.store import KbConfig
from coffer_mcp.timeutil import utc_now

__all__ = ["FolderActivity", "FollowActivity", "followed_folders", "inside", "sourced_documents"]

PAGE = 1000
UNDECODABLE = "undecodable_name"
"""The code of a file or folder whose name is not valid UTF-8 (``store.undecodable_name``)."""


@dataclass(frozen=True, slots=True)
class FolderActivity:
    """One followed folder as this process's watcher knows it."""

    watched: bool = False
    pending: int = 0
    last_sync: str | None = None
    documents: int | None = None
    """Documents from the folder as this process last counted them (None: not known)."""
    version: int = 0
    """Bumped by every sync: a count made while another sync ran is not trusted."""
    failed: Mapping[str, DirectoryIngestItem] | None = None
    """The folder's files that could not be ingested, by path (None: no full sync ran in this process)."""
    undecodable: bool = False
    """Among them, a name that is not valid UTF-8: watchfiles cannot report its changes."""
    polled: bool = False
    """The watcher syncs the folder in full periodically instead of watching it (``undecodable``)."""
    error: str | None = None
    """Why the watcher's last sync of the folder failed (None once one succeeds)."""
    resync: str | None = None
    """Why the folder needs a full sync although none failed: the knowledge base's files were replaced
    (a snapshot restored), so its documents may no longer match the folder. Cleared by a full sync
    that began after it was set."""


class FollowActivity:
    """The watcher's state, per ``(knowledge base, followed folder)``; safe to use from any thread."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._folders: dict[tuple[str, str], FolderActivity] = {}
        self.docs_watched = False
        """Whether a live watcher sees every change to the knowledge bases' ``docs/`` folders."""

    def get(self, kb: str, folder: str) -> FolderActivity:
        with self._guard:
            return self._folders.get((kb, folder), FolderActivity())

    def watching(
        self, folders: Iterable[tuple[str, str]], *, docs: bool, polled: Iterable[tuple[str, str]] = ()
    ) -> None:
        """The watcher now watches exactly ``folders`` (and ``docs/`` if ``docs``), and syncs ``polled`` in full."""
        keys, polls = set(folders), set(polled)
        with self._guard:
            for key in keys | polls | set(self._folders):
                current = self._folders.get(key, FolderActivity())
                self._folders[key] = replace(current, watched=key in keys, polled=key in polls)
            self.docs_watched = docs

    def behind(self, kb: str, folder: str, error: str, missed: int) -> None:
        """The watcher's sync of the folder failed (``error``): ``missed`` changes (at least one) wait for it."""
        with self._guard:
            current = self._folders.get((kb, folder), FolderActivity())
            self._folders[kb, folder] = replace(current, error=error, pending=max(missed, current.pending, 1))

    def pending(self, kb: str, folder: str, count: int) -> None:
        """``count`` changes of the folder are waiting to be applied (never fewer than one while it is behind)."""
        with self._guard:
            current = self._folders.get((kb, folder), FolderActivity())
            behind = current.error is not None or current.resync is not None
            self._folders[kb, folder] = replace(current, pending=max(count, behind))

    def resync(self, kb: str, folders: Iterable[str], why: str) -> None:
        """These followed folders need a full sync (``why``): the knowledge base's files changed under them.

        Until one that begins after this has ended, they count a change ``pending`` and keep their
        ``last_sync``; their document counts are read again (the old ones are no longer true).
        """
        with self._guard:
            for folder in folders:
                current = self._folders.get((kb, folder), FolderActivity())
                self._folders[kb, folder] = replace(
                    current,
                    resync=why,
                    pending=max(current.pending, 1),
                    documents=None,
                    version=current.version + 1,  # a sync under way began before: it does not clear this
                )

    def resyncs(self) -> list[tuple[str, str]]:
        """The ``(knowledge base, folder)``s that wait for a full sync (``resync``)."""
        with self._guard:
            return [key for key, state in self._folders.items() if state.resync is not None]

    def synced(
        self,
        kb: str,
        folder: str,
        *,
        counted: tuple[int, int] | None = None,
        added: int = 0,
        failed: Sequence[DirectoryIngestItem] = (),
        changed: Collection[str] | None = None,
    ) -> list[DirectoryIngestItem]:
        """The folder was just brought up to date: nothing is pending. Returns the failures new since.

        ``counted`` is ``(documents, version)``: what a full sync that began at ``version`` found,
        trusted only if no other sync ended meanwhile; a partial sync ``added`` (or removed) some.
        ``failed`` are the files the sync could not ingest: all of the folder's, or (a sync of the
        ``changed`` paths) those among and under them, whose earlier failures they replace.
        """
        with self._guard:
            current = self._folders.get((kb, folder), FolderActivity())
            if counted is not None:
                documents = counted[0] if counted[1] == current.version else None
            else:
                documents = None if current.documents is None else max(0, current.documents + added)
            before = current.failed or {}
            now: dict[str, DirectoryIngestItem] | None = None
            if changed is None:
                now = {}
            elif current.failed is not None:
                now = {path: item for path, item in before.items() if not _under_any(path, changed)}
            if now is not None:
                now.update((item.path, item) for item in failed)
            seen = now.values() if now is not None else failed
            undecodable = any(item.code == UNDECODABLE for item in seen)
            # A sync of some paths does not make up for a failed one: only a full sync is "in step";
            # and for files replaced under the folder, only a full sync that began after that.
            failing = current.error is not None and changed is not None
            resync = None if counted is not None and counted[1] == current.version else current.resync
            behind = failing or resync is not None
            self._folders[kb, folder] = replace(
                current,
                pending=max(current.pending, 1) if behind else 0,
                last_sync=current.last_sync if behind else utc_now(),
                documents=documents,
                version=current.version + 1,
                failed=now,
                undecodable=undecodable or (now is None and current.undecodable),
                error=current.error if failing else None,
                resync=resync,
            )
            return [item for item in failed if before.get(item.path) != item]

    def failed(self, kb: str, folders: Iterable[str]) -> list[DirectoryIngestItem]:
        """The files of these followed folders that could not be ingested, as far as this process knows."""
        with self._guard:
            known = [self._folders.get((kb, folder), FolderActivity()).failed or {} for folder in folders]
        return sorted({path: item for failed in known for path, item in failed.items()}.values(), key=_path)

    def counted(self, kb: str, folder: str, documents: int, version: int) -> None:
        """A count of the folder's documents read at ``version`` (kept if no sync ended since)."""
        with self._guard:
            current = self._folders.get((kb, folder), FolderActivity())
            if current.version == version:
                self._folders[kb, folder] = replace(current, documents=documents)


def _under_any(path: str, changed: Collection[str]) -> bool:
    """Whether ``path`` is one of the ``changed`` paths or lies under one of them."""
    return path in changed or any(str(parent) in changed for parent in Path(path).parents)


def _path(item: DirectoryIngestItem) -> str:
    return item.path


def inside(path: str, folder: str) -> bool:
    """Whether ``path`` is ``folder`` or lies under it (compared as text: both are real paths)."""
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def sourced_documents(index: Index, kb: str) -> Iterator[DocumentRow]:
    """Every document of a knowledge base that has a ``source_path``, read a page at a time.

    Reading 100,000 rows at once takes ~8 kB each (their frontmatter, parsed); a page keeps a
    server's memory flat however big the knowledge base is.
    """
    offset = 0
    while True:
        rows, _ = index.list_documents(kb, "", PAGE, offset)
        if not rows:
            return
        yield from (row for row in rows if row.source_path)
        offset += len(rows)


def followed_folders(
    index: Index, activity: FollowActivity, kb: str, config: KbConfig, sources: Iterable[str] | None = None
) -> list[FollowedFolder]:
    """The folders a knowledge base follows, with their document counts and this process's watcher state.

    The counts come from ``sources`` (every document's source path) when the caller has them,
    else from this process's last sync of the folder (a server's watcher keeps them current),
    else from reading every document row: ~7 s at 100,000 documents, which a server's metrics
    must not pay on every call.
    """
    if not config.follow:
        return []
    states = {folder: activity.get(kb, folder) for folder in config.follow}
    counts = {folder: state.documents for folder, state in states.items()}
    read = sources is None and any(count is None for count in counts.values())
    if read:
        sources = (row.source_path or "" for row in sourced_documents(index, kb))
    if sources is not None:
        counts = dict.fromkeys(config.follow, 0)
        for source in sources:
            for folder in config.follow:
                counts[folder] = (counts[folder] or 0) + inside(source, folder)
    if read:
        for folder, state in states.items():
            activity.counted(kb, folder, counts[folder] or 0, state.version)
    folders = []
    for folder in config.follow:
        state = states[folder]
        folders.append(
            FollowedFolder(
                path=folder,
                present=Path(folder).is_dir(),
                documents=counts[folder] or 0,
                watched=state.watched,
                pending=state.pending,
                last_sync=state.last_sync,
                failed=None if state.failed is None else len(state.failed),
                warning=_warning(state),
            )
        )
    return folders


def _warning(state: FolderActivity) -> str | None:
    """Why the watcher is behind on a folder, or cannot watch it; None when it is not."""
    if state.error is not None:
        return (
            f"The watcher's last sync of this folder failed ({state.error}); its changes are not all applied. It "
            "syncs the folder in full again, less often after each failure (at most every minute), until that succeeds."
        )
    if state.resync is not None:
        return (
            f"{state.resync} since this folder was last synced: its documents may not match its files until a "
            "full sync (the watcher's, which is due, or check_sources)."
        )
    if state.polled:
        return (
            "Names in this folder are not valid UTF-8 (check_sources lists them, code undecodable_name), and the "
            "watcher cannot be told of changes under such names: it syncs the folder in full every few seconds "
            "instead of watching it. Rename them to watch it again."
        )
    return None
