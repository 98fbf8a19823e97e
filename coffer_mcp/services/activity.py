"""What this process's watcher is doing, kept in the registry so every service can report it.

The watcher (``services/watcher.py``) records which followed folders it watches, how many changes
it has seen and not applied yet, and when it last brought each folder up to date; every sync
records the files it could not ingest. Metrics and ``check_sources`` read it back as
``FollowedFolder``s. Nothing here is persisted: another process (the CLI, a second server) has its
own, and reports ``watched: false`` for folders it does not watch. Failures need no record on disk
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

    def watching(self, folders: Iterable[tuple[str, str]], *, docs: bool) -> None:
        """The watcher now watches exactly ``folders`` (and ``docs/`` if ``docs``)."""
        keys = set(folders)
        with self._guard:
            for key in keys | set(self._folders):
                self._folders[key] = replace(self._folders.get(key, FolderActivity()), watched=key in keys)
            self.docs_watched = docs

    def pending(self, kb: str, folder: str, count: int) -> None:
        """``count`` changes of the folder are waiting to be applied."""
        with self._guard:
            self._folders[kb, folder] = replace(self._folders.get((kb, folder), FolderActivity()), pending=count)

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
            self._folders[kb, folder] = replace(
                current,
                pending=0,
                last_sync=utc_now(),
                documents=documents,
                version=current.version + 1,
                failed=now,
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
            )
        )
    return folders
