"""A per-knowledge-base write lock shared by every process using one ``COFFER_HOME``.

An advisory ``flock`` on ``locks/<kb>.lock``: the lock belongs to the open file, so threads of
one process exclude each other as well as other processes, and the OS releases it when a
process dies (no stale lock after ``kill -9``). ``held_here`` tells whether a thread of this
process holds a lock right now (readers use it to tell our own writers from other processes').
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from coffer_mcp.errors import StoreError

__all__ = ["file_lock", "held_here"]

_POLL_SECONDS = 0.005
_held: set[str] = set()  # the lock files a thread of this process holds (flock: at most one each)
_held_guard = threading.Lock()

if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
    import msvcrt

    def _try_lock(fd: int) -> bool:
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True

    def _unlock(fd: int) -> None:
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)

else:
    import fcntl

    def _try_lock(fd: int) -> bool:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def _unlock(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_UN)


@contextmanager
def file_lock(path: Path, *, timeout: float = 60.0, what: str = "the knowledge base") -> Iterator[None]:
    """Hold an exclusive lock on ``path`` for the duration of the block.

    Raises:
        StoreError: another writer held the lock for longer than ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        fd = _acquire(path, deadline, what)
        # The file may have been unlinked (a KB delete removes its lock) between our open and
        # our lock: then we hold a lock nobody else can see, so start over on the new file.
        if _same_file(fd, path):
            break
        _unlock(fd)
        os.close(fd)
    key = os.fspath(path)
    with _held_guard:
        _held.add(key)
    try:
        yield
    finally:
        with _held_guard:
            _held.discard(key)
        _unlock(fd)
        os.close(fd)


def held_here(path: Path) -> bool:
    """Whether a thread of this process holds the lock on ``path`` right now."""
    return os.fspath(path) in _held


def _acquire(path: Path, deadline: float, what: str) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    while not _try_lock(fd):
        if time.monotonic() > deadline:
            os.close(fd)
            raise StoreError(
                f"Timed out waiting for another writer on {what}.",
                code="busy",
                hint="Another Coffer process is writing; retry when it has finished.",
            )
        time.sleep(_POLL_SECONDS)
    return fd


def _same_file(fd: int, path: Path) -> bool:
    try:
        on_disk = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (held.st_dev, held.st_ino) == (on_disk.st_dev, on_disk.st_ino)
