"""A long folder ingest's next files read, converted and chunked in other processes, on every core.

Deciding, writing and indexing a document happen on the ingest's thread, holding the lock; what a
small text or Markdown file costs besides (reading it, hashing it, converting it, chunking its
Markdown) needs neither, and runs ahead in worker processes, one per core (threads would share
one core: this is Python work). A worker is a Python process running ``serve``, fed file paths on
its stdin and answering on its stdout, in order. The ingest never waits for a worker:
a file whose result is not there yet (a worker still starting), or whose preparation failed, is
prepared on the ingest's thread as it would be without them, so every refusal is reported as it
always is. Short runs start no worker.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import os
import pickle
import select
import struct
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from coffer_mcp.access import read_stamped_source
from coffer_mcp.errors import CofferError
from coffer_mcp.indexing.chunking import chunk_markdown
from coffer_mcp.models import Chunk
from coffer_mcp.services.uploads import document_filename, without_note_block

if TYPE_CHECKING:
    from coffer_mcp.convert import Conversion, ConversionOptions

__all__ = ["MIN_FILES", "Prefetch", "Prepared"]

MIN_FILES = 200
"""The fewest files a run prefetches for: below, starting the workers would cost more than it saves."""
AHEAD = 24
"""How many files each worker is given ahead of the ingest."""
START_SECONDS = 0.0
"""How long the first ``take`` waits for the workers to start (0: not at all, the ingest's thread
prepares files itself until they have; tests wait, to compare what the workers prepare)."""
_FRAME = struct.Struct(">I")
_READY = "ready"
_PIPE_BYTES = 1 << 20  # a worker's answers wait in its pipe, not in a blocked write


@dataclass(frozen=True, slots=True)
class Prepared:
    """A file read, hashed, converted and chunked ahead of its ingest."""

    data: bytes
    stamp: str
    sha: str
    conversion: Conversion
    note: dict[str, object] | None
    chunks: list[Chunk]
    chunking: tuple[int, int]  # (chunk size, overlap) the chunks were made with


@dataclass(frozen=True, slots=True)
class Job:
    """What every file of a run is prepared with."""

    within: tuple[Path, ...] | None
    max_bytes: int
    options: ConversionOptions
    chunking: tuple[int, int]


class Prefetch:
    """Prepares ``files`` (those quick to convert) in worker processes, ahead of ``take``."""

    def __init__(self, files: Sequence[Path], job: Job, workers: int) -> None:
        from coffer_mcp.convert import quick_to_convert  # here: it loads every converter

        self._upcoming = collections.deque(file for file in files if quick_to_convert(file.name, _size(file)))
        self._workers = [_Worker(job) for _ in range(workers)]
        self._owner: dict[Path, _Worker] = {}  # given to a worker, not taken yet
        self._done: dict[Path, Prepared | None] = {}
        for worker in self._workers if START_SECONDS else ():
            worker.started(timeout=START_SECONDS)
        self._fill()

    @classmethod
    def of(cls, files: Sequence[Path], job: Job) -> Prefetch | None:
        """A prefetch for a run of ``files``, or None for a run too short to gain from one."""
        if len(files) < MIN_FILES or os.name != "posix":  # ``select`` on pipes is POSIX's
            return None
        return cls(files, job, os.cpu_count() or 1)

    def take(self, file: Path) -> Prepared | None:
        """What was prepared for ``file`` (waiting for it when a worker has it), or None: not given to
        a worker (they were starting), or refused."""
        self._skip_to(file)
        worker = self._owner.pop(file, None)
        while worker is not None and file not in self._done and worker.alive and worker.pending:
            self._keep(worker.answer(), worker)
        prepared = self._done.pop(file, None)
        self._fill()
        return prepared

    def _skip_to(self, file: Path) -> None:
        """Files up to ``file`` not given to a worker yet are the caller's to prepare."""
        if file not in self._owner and file not in self._done:
            while self._upcoming and self._upcoming.popleft() != file:
                pass

    def _keep(self, answer: tuple[Path, object] | None, worker: _Worker) -> None:
        if answer is not None:
            file, prepared = answer
            self._done[file] = prepared if isinstance(prepared, Prepared) else None

    def _fill(self) -> None:
        """Top each started worker up to ``AHEAD`` files in flight once it is down to half of them, in
        the files' order: one message for many files (each message wakes the worker up, and on a busy
        machine the sender may wait for its turn again)."""
        for worker in self._workers:
            if not self._upcoming or len(worker.pending) > AHEAD // 2 or not worker.started():
                continue
            files = [self._upcoming.popleft() for _ in range(min(AHEAD - len(worker.pending), len(self._upcoming)))]
            worker.send(files)
            self._owner.update((file, worker) for file in files)

    def close(self) -> None:
        """Stop the workers; work not taken is dropped."""
        for worker in self._workers:
            worker.close()


class _Worker:
    """One worker process, and the files it was given, in order."""

    def __init__(self, job: Job) -> None:
        self.pending: collections.deque[Path] = collections.deque()
        self.alive = True
        self._started = False
        self._proc = subprocess.Popen(
            [sys.executable, "-c", "from coffer_mcp.services.prefetch import serve; serve()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=0,  # unbuffered: ``select`` on the pipe sees every answer not read yet
        )
        assert self._proc.stdin is not None  # both are PIPEs
        assert self._proc.stdout is not None
        self._in, self._out = self._proc.stdin, self._proc.stdout
        with contextlib.suppress(OSError, AttributeError, ImportError):  # Linux only; elsewhere the default size
            import fcntl

            fcntl.fcntl(self._out.fileno(), fcntl.F_SETPIPE_SZ, _PIPE_BYTES)
        self._send(job)

    def started(self, timeout: float = 0) -> bool:
        """Whether the worker said it is ready (its imports done), waiting up to ``timeout`` for it."""
        if not self._started and self.alive and select.select([self._out], [], [], timeout)[0]:
            self._started = self._receive() == _READY
        return self._started and self.alive

    def send(self, files: list[Path]) -> None:
        self.pending.extend(files)
        self._send([str(file) for file in files])

    def answer(self) -> tuple[Path, object] | None:
        """The next answer, with its file (waiting for it); None when the worker is gone."""
        if not self.pending:
            return None
        answer = self._receive()
        file = self.pending.popleft()
        return (file, answer) if self.alive else None

    def _send(self, payload: object) -> None:
        try:
            _write_frame(self._in, payload)
        except OSError:
            self.alive = False

    def _receive(self) -> object:
        try:
            return _read_frame(self._out)
        except (OSError, EOFError, pickle.UnpicklingError):
            self.alive = False
            return None

    def close(self) -> None:
        self.alive = False
        with contextlib.suppress(OSError):
            self._in.close()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._out.close()


def prepare(file: Path, job: Job) -> Prepared | None:
    """Read, hash, convert and chunk ``file``; None when any step refuses it."""
    try:
        data, stamp = read_stamped_source(file, job.within, max_bytes=job.max_bytes)
        name = document_filename(file.name)
        conversion, note = without_note_block(name, job.options.convert(name, data))
    except (CofferError, OSError):
        return None
    chunks = chunk_markdown(conversion.markdown, *job.chunking)
    return Prepared(data, stamp, hashlib.sha256(data).hexdigest(), conversion, note, chunks, job.chunking)


def _write_frame(stream: IO[bytes], payload: object) -> None:
    body = pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(_FRAME.pack(len(body)) + body)
    while view:
        view = view[stream.write(view) or 0 :]
    stream.flush()


def _read_frame(stream: IO[bytes]) -> Any:
    (size,) = _FRAME.unpack(_read_exactly(stream, _FRAME.size))
    return pickle.loads(_read_exactly(stream, size))  # noqa: S301 - our own worker's answer


def _read_exactly(stream: IO[bytes], size: int) -> bytes:
    parts, left = [], size
    while left:
        part = stream.read(left)
        if not part:
            raise EOFError("the worker is gone")
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


def _size(file: Path) -> int:
    try:
        return file.stat(follow_symlinks=False).st_size
    except OSError:
        return 0


def serve() -> None:
    """A worker: a ``Job``, then lists of file paths on stdin; each file's ``Prepared`` (or None) on stdout."""
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # a stray print must not corrupt the answers
    requests = sys.stdin.buffer
    try:
        job: Job = _read_frame(requests)
        _write_frame(answers, _READY)
        while True:
            for file in _read_frame(requests):
                _write_frame(answers, prepare(Path(file), job))
    except (EOFError, BrokenPipeError):
        return
