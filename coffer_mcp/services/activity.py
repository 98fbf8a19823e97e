"""What this process's watcher is doing, kept in the registry so every service can report it.

The watcher (``services/watcher.py``) records which followed folders it watches, how many changes
it has seen and not applied yet, and when it last brought each folder up to date; metrics and
``check_sources`` read it back as ``FollowedFolder``s. Nothing here is persisted: another process
(the CLI, a second server) has its own, and reports ``watched: false`` for folders it does not watch.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from coffer_mcp.index import DocumentRow, Index
from coffer_mcp.models import FollowedFolder
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

    def synced(self, kb: str, folder: str) -> None:
        """The folder was just brought up to date: nothing is pending."""
        with self._guard:
            current = self._folders.get((kb, folder), FolderActivity())
            self._folders[kb, folder] = replace(current, pending=0, last_sync=utc_now())


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


def followed_folders(index: Index, activity: FollowActivity, kb: str, config: KbConfig) -> list[FollowedFolder]:
    """The folders a knowledge base follows, with their document counts and this process's watcher state."""
    if not config.follow:
        return []
    counts = dict.fromkeys(config.follow, 0)
    for row in sourced_documents(index, kb):
        for folder in config.follow:
            counts[folder] += inside(row.source_path or "", folder)
    folders = []
    for folder in config.follow:
        state = activity.get(kb, folder)
        folders.append(
            FollowedFolder(
                path=folder,
                present=Path(folder).is_dir(),
                documents=counts[folder],
                watched=state.watched,
                pending=state.pending,
                last_sync=state.last_sync,
            )
        )
    return folders
