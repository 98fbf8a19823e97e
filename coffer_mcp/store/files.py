"""Crash-safe file writes: a truth file is always either its old or its new content.

Writes made inside ``unindexed_writes()`` (every KB write lock opens one) are also noted as
*unindexed* until the block ends: readers of this process that find such a file newer than the
index know the writer holding the lock will index it before it lets go, and need not wait.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import errno
import os
import secrets
import stat
import threading
from collections import Counter, deque
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

__all__ = [
    "TEMP_MARKER",
    "atomic_write",
    "atomic_write_all",
    "file_stamp",
    "fsync_dir",
    "note_unindexed",
    "path_stamp",
    "read_store_file",
    "remove_file",
    "remove_stale_temp_files",
    "unindexed_mark",
    "unindexed_since",
    "unindexed_writes",
]

TEMP_MARKER = ".tmp-"
_READ_NO_FOLLOW = (
    os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
)


def read_store_file(path: Path) -> tuple[bytes, os.stat_result]:
    """The bytes and ``stat`` of a regular file of the store; anything else counts as absent.

    The one rule for every read of a store file: a symbolic link (which could point out of the
    store) or a FIFO or device is never read or served — scans skip them too, so a document
    that is a link is simply not there.

    Raises:
        FileNotFoundError: the file is missing, a symbolic link, or not a regular file.
    """
    try:
        fd = os.open(path, _READ_NO_FOLLOW)
    except OSError as exc:
        if isinstance(exc, FileNotFoundError) or exc.errno in (errno.ELOOP, errno.ENXIO):
            raise FileNotFoundError(2, "not a regular file of the store", str(path)) from None
        raise
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise FileNotFoundError(2, "not a regular file of the store", str(path))
        return handle.read(), info


class _Unindexed:
    """Files written or removed by this process inside a write block, and blocks ended lately."""

    def __init__(self) -> None:
        self._counts: Counter[str] = Counter()
        self._ended: deque[tuple[int, frozenset[str]]] = deque(maxlen=_ENDED_KEPT)
        self._seq = 0
        self._guard = threading.Lock()
        self._scopes = threading.local()

    @contextlib.contextmanager
    def scope(self) -> Iterator[None]:
        stack = self._stack()
        noted: set[str] = set()
        stack.append(noted)
        try:
            yield
        finally:
            stack.pop()
            with self._guard:
                self._counts.subtract(noted)
                for key in noted:
                    if self._counts[key] <= 0:
                        del self._counts[key]
                self._seq += 1
                if noted:
                    self._ended.append((self._seq, frozenset(noted)))

    def note(self, path: Path) -> None:
        stack = self._stack()
        if not stack:
            return
        key = os.fspath(path)
        if key not in stack[-1]:
            stack[-1].add(key)
            with self._guard:
                self._counts[key] += 1

    def mark(self) -> int:
        return self._seq

    def since(self, path: Path, mark: int) -> bool:
        key = os.fspath(path)
        with self._guard:
            if key in self._counts:
                return True
            if self._seq == mark:
                return False
            for seq, keys in reversed(self._ended):
                if seq <= mark:
                    return False
                if key in keys:
                    return True
            # Blocks ended after the mark were forgotten: unknown, so not ours.
            return False

    def _stack(self) -> list[set[str]]:
        stack = getattr(self._scopes, "stack", None)
        if stack is None:
            stack = self._scopes.stack = []
        return stack


_ENDED_KEPT = 1024
_UNINDEXED = _Unindexed()


def unindexed_writes() -> contextlib.AbstractContextManager[None]:
    """Note the files this thread writes or removes in the block as unindexed until it ends.

    Open it while holding a KB's write lock, around the writes *and* the indexing of them.
    """
    return _UNINDEXED.scope()


def note_unindexed(paths: Iterable[Path]) -> None:
    """Note files as written by this thread's write block (``unindexed_writes``) when another thread
    is to write them for it: notes are kept per thread, and a helper thread has no block of its own."""
    for path in paths:
        _UNINDEXED.note(path)


def unindexed_mark() -> int:
    """A point in time for ``unindexed_since``: take it before looking at the files."""
    return _UNINDEXED.mark()


def unindexed_since(path: Path, mark: int) -> bool:
    """Whether ``path`` was written or removed in a write block of this process open at or after ``mark``.

    So a file seen newer than the index is known to be one of our writes, whether its writer is
    still indexing it or finished just after we looked.
    """
    return _UNINDEXED.since(path, mark)


def atomic_write(path: Path, data: bytes, *, sync_dir: bool = True) -> None:
    """Write ``data`` to ``path`` atomically: temp file in the same folder, fsync, rename.

    The temp file is hidden (leading dot) so scans and grep never see it; a crash leaves at
    most a stray temp file, removed by ``remove_stale_temp_files`` under the KB lock. With
    ``sync_dir=False`` the rename is made durable later by the caller's ``fsync_dir`` (a batch
    of files, one folder sync before the batch is acknowledged).
    """
    atomic_write_all([(path, data)], sync_dir=sync_dir)


def atomic_write_all(files: Sequence[tuple[Path, bytes]], *, sync_dir: bool = True) -> None:
    """``atomic_write`` each ``(path, data)``, landing them in the order given.

    The temp files are written and synced at the same time, the first by the caller and each other
    by a thread of a small pool: creating a file and waiting for its flush is most of a small
    write, and two overlap well (docs/benchmarks.md, "Less work around each statement, and the two
    files at once"). Then each is renamed into place
    (and its folder synced, unless ``sync_dir=False``) in turn, so a crash leaves a prefix of the
    files new, as one ``atomic_write`` after another would. If a temp file cannot be written,
    none lands and every temp file is removed.
    """
    for path, _ in files:
        _UNINDEXED.note(path)  # before the rename: a reader may see the new file the moment it lands
    written: list[concurrent.futures.Future[Path]] = [_WRITERS.submit(_write_temp, *file) for file in files[1:]]
    first: Path | None = None
    try:
        first = _write_temp(*files[0])
        temps = [first, *(future.result() for future in written)]
    except BaseException:
        if first is not None:
            remove_file(first)
        for future in written:
            with contextlib.suppress(BaseException):
                remove_file(future.result())
        raise
    for index, ((path, _), tmp) in enumerate(zip(files, temps, strict=True)):
        try:
            os.replace(tmp, path)
        except BaseException:
            for left in temps[index:]:
                remove_file(left)
            raise
        if sync_dir:
            fsync_dir(path.parent)


def _write_temp(path: Path, data: bytes) -> Path:
    """``data`` in a new hidden temp file beside ``path``, synced; removed again if that fails."""
    tmp = path.with_name(f".{path.name}{TEMP_MARKER}{secrets.token_hex(6)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        remove_file(tmp)
        raise
    return tmp


# The threads that write ``atomic_write_all``'s files after the first: started on first use.
_WRITERS = concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="coffer-write")


def file_stamp(stat: os.stat_result) -> str:
    """``mtime_ns:size``: what cheap change checks compare (the one stamp of the store)."""
    return f"{stat.st_mtime_ns}:{stat.st_size}"


def path_stamp(path: Path) -> str:
    """The ``file_stamp`` of a file or folder, "missing" if absent."""
    try:
        return file_stamp(path.stat())
    except FileNotFoundError:
        return "missing"


def fsync_dir(folder: Path) -> None:
    """Make a rename or unlink in ``folder`` durable (a no-op where folders cannot be opened)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def remove_file(path: Path) -> bool:
    """Delete ``path`` if it exists; True if something was removed."""
    _UNINDEXED.note(path)
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True


def remove_stale_temp_files(*folders: Path) -> int:
    """Delete temp files left by interrupted writes. Call only while holding the KB lock."""
    removed = 0
    for folder in folders:
        with contextlib.suppress(FileNotFoundError):
            for entry in os.scandir(folder):
                if entry.name.startswith(".") and TEMP_MARKER in entry.name:
                    removed += remove_file(Path(entry.path))
    return removed
