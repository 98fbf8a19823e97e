"""Many files written at once, each as crash-safe as ``atomic_write``: a batch of a folder ingest.

``FileBatch.write`` writes a file's content to a hidden temp file beside it at once, without
waiting for the disk; ``land`` then syncs every temp file of the batch together, in threads (a
disk syncs many files in about the time of one, and the caller's thread is free of the waits:
with the GIL, a thread coming back from each of many syscalls would wait on a busy caller), then
renames each into place in the order written, removes the files to remove, and syncs each folder
once. A crash before ``land`` leaves only temp files (``remove_stale_temp_files``); during it, a
prefix of the renames.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import secrets
from pathlib import Path

from coffer_mcp.store.files import TEMP_MARKER, fsync_dir, note_unindexed, remove_file

__all__ = ["FileBatch"]


class FileBatch:
    """Files to land together (see the module docstring); ``syncers`` runs the syncs."""

    def __init__(self, syncers: concurrent.futures.Executor) -> None:
        self._syncers = syncers
        self._staged: list[tuple[int, Path, Path]] = []  # (fd, temp file, path), in the order written
        self._removed: list[Path] = []

    def __len__(self) -> int:
        return len(self._staged)

    def write(self, path: Path, data: bytes) -> None:
        """Write ``data`` for ``path`` to a temp file beside it (not synced, not in place yet).

        Raises:
            OSError: the temp file could not be written (nothing of it is left).
        """
        note_unindexed([path])  # before the rename: a reader may see the new file the moment it lands
        tmp = path.with_name(f".{path.name}{TEMP_MARKER}{secrets.token_hex(6)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        except BaseException:
            os.close(fd)
            remove_file(tmp)
            raise
        self._staged.append((fd, tmp, path))

    def remove(self, path: Path) -> None:
        """Remove ``path`` once the files written before it landed."""
        note_unindexed([path])
        self._removed.append(path)

    def land(self) -> None:
        """Sync every temp file, rename each into place in order, remove what is to go, sync the folders.

        Raises:
            OSError: a temp file could not be synced: none lands, and every temp file is removed.
        """
        staged, removed, self._staged, self._removed = self._staged, self._removed, [], []
        syncs = [self._syncers.submit(os.fsync, fd) for fd, _, _ in staged]
        concurrent.futures.wait(syncs)  # every one finished before any descriptor is closed
        try:
            for synced in syncs:
                synced.result()
        except BaseException:
            _discard(staged)
            raise
        for fd, _, _ in staged:
            os.close(fd)
        folders: dict[Path, None] = {}
        for position, (_, tmp, path) in enumerate(staged):
            try:
                os.replace(tmp, path)
            except BaseException:
                for _, left, _ in staged[position:]:
                    remove_file(left)
                raise
            folders[path.parent] = None
        for path in removed:
            remove_file(path)
            folders[path.parent] = None
        for folder in folders:
            fsync_dir(folder)

    def discard(self) -> None:
        """Remove every temp file not landed yet."""
        staged, self._staged, self._removed = self._staged, [], []
        _discard(staged)


def _discard(staged: list[tuple[int, Path, Path]]) -> None:
    for fd, tmp, _ in staged:
        with contextlib.suppress(OSError):
            os.close(fd)
        remove_file(tmp)
