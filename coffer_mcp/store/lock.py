"""A per-knowledge-base write lock shared by every process using one ``COFFER_HOME``.

An advisory ``flock`` on ``locks/<kb>.lock`` excludes other processes, and the OS releases it
when a process dies (no stale lock after ``kill -9``). Threads of one process first queue for
their turn in arrival order, then the thread whose turn it is takes the ``flock`` (which, held on
its own open file, would exclude the process's other threads too). ``held_here`` tells whether a
thread of this process holds a lock now (readers use it to tell our writers from others').
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from coffer_mcp.errors import StoreError

__all__ = ["file_lock", "held_here"]

_POLL_SECONDS = 0.005
_held: set[str] = set()  # the lock files a thread of this process holds (at most one thread each)
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


class _Turns:
    """Threads of this process waiting for one lock file, served first come, first served.

    Only the thread at the head polls ``flock`` (for other processes); the others sleep until
    the holder lets go and are woken at once, in arrival order. So writers queued in one
    process hand the lock over without a polling delay, none is overtaken forever, and waiting
    threads cost no CPU (many threads polling every 5 ms crowd a 2-core machine's GIL).
    """

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._queue: deque[object] = deque()
        self._busy = False

    def take(self, deadline: float) -> bool:
        """Wait for this thread's turn until ``deadline``; False if it did not come."""
        me = object()
        with self._cond:
            self._queue.append(me)
            try:
                while self._busy or self._queue[0] is not me:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        self._leave(me)
                        return False
                    self._cond.wait(left)
            except BaseException:
                if me in self._queue:
                    self._leave(me)
                raise
            self._queue.popleft()
            self._busy = True
            return True

    def _leave(self, me: object) -> None:
        """Give up a place in the queue (a timeout, an interrupt): those behind move up."""
        self._queue.remove(me)
        self._cond.notify_all()

    def give_back(self) -> None:
        with self._cond:
            self._busy = False
            self._cond.notify_all()


_turns: dict[str, _Turns] = {}


def _turns_of(key: str) -> _Turns:
    with _held_guard:
        turns = _turns.get(key)
        if turns is None:
            turns = _turns[key] = _Turns()
        return turns


@contextmanager
def file_lock(path: Path, *, timeout: float = 60.0, what: str = "the knowledge base") -> Iterator[None]:
    """Hold an exclusive lock on ``path`` for the duration of the block.

    Threads of this process queue in order for their turn; the thread whose turn it is then
    takes the ``flock`` that excludes other processes.

    Raises:
        StoreError: another writer held the lock for longer than ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    key = os.fspath(path)
    turns = _turns_of(key)
    if not turns.take(deadline):
        raise _busy(what)
    try:
        fd = _lock_file(path, deadline, what)
    except BaseException:
        turns.give_back()
        raise
    with _held_guard:
        _held.add(key)
    try:
        yield
    finally:
        with _held_guard:
            _held.discard(key)
        _unlock(fd)
        os.close(fd)
        turns.give_back()


def held_here(path: Path) -> bool:
    """Whether a thread of this process holds the lock on ``path`` right now."""
    return os.fspath(path) in _held


def _lock_file(path: Path, deadline: float, what: str) -> int:
    while True:
        fd = _acquire(path, deadline, what)
        # The file may have been unlinked (a KB delete removes its lock) between our open and
        # our lock: then we hold a lock nobody else can see, so start over on the new file.
        if _same_file(fd, path):
            return fd
        _unlock(fd)
        os.close(fd)


def _acquire(path: Path, deadline: float, what: str) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    while not _try_lock(fd):
        if time.monotonic() > deadline:
            os.close(fd)
            raise _busy(what)
        time.sleep(_POLL_SECONDS)
    return fd


def _busy(what: str) -> StoreError:
    return StoreError(
        f"Timed out waiting for another writer on {what}.",
        code="busy",
        hint="Another Coffer process is writing; retry when it has finished.",
    )


def _same_file(fd: int, path: Path) -> bool:
    try:
        on_disk = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (held.st_dev, held.st_ino) == (on_disk.st_dev, on_disk.st_ino)
