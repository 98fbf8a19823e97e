"""Running the heavy converters in a separate, killable, memory-capped process.

The heavy converters (PDFium, MarkItDown) parse untrusted PDFs, Office zips and HTML with C code
underneath; a hostile file can hang them, blow up their memory (a zip bomb) or crash them. So those conversions run in a
worker process (``python -m coffer_mcp.convert._worker``) that is reused between files, killed
when a conversion outlives its time limit, and started again on the next file. The worker caps
its own address space, so a bomb ends in a ``MemoryError`` there, not in the server.

Protocol (trusted: the parent spawns the child): length-prefixed pickles over the child's stdin
and a private duplicate of its stdout; the child points its own fd 1 at stderr so nothing a
library prints can corrupt the channel.
"""

from __future__ import annotations

import atexit
import contextlib
import pickle
import queue
import struct
import subprocess
import sys
import threading
from typing import IO, Any

from coffer_mcp.errors import EngineUnavailableError, IngestRejectedError

from ._places import Mapped

__all__ = ["convert_in_sandbox", "shutdown"]

_HEADER = struct.Struct("!Q")
_MAX_IDLE = 2
_TIMEOUT_HINT = (
    "The file may be malformed or hostile. If it is genuine and just large, raise conversion_timeout in config.yaml."
)


def write_message(stream: IO[bytes], message: object) -> None:
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(payload)) + payload)
    stream.flush()


def read_message(stream: IO[bytes]) -> Any:
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        raise EOFError
    (size,) = _HEADER.unpack(header)
    payload = stream.read(size)
    if len(payload) < size:
        raise EOFError
    return pickle.loads(payload)  # noqa: S301 - our own child process, over our own pipe


class _Worker:
    def __init__(self, memory_bytes: int) -> None:
        self.memory_bytes = memory_bytes
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "coffer_mcp.convert._worker", str(memory_bytes)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None,
        )
        assert self.proc.stdin is not None  # both are PIPEs: Popen set them
        assert self.proc.stdout is not None
        self.stdin, self.stdout = self.proc.stdin, self.proc.stdout
        self.replies: queue.Queue[tuple[Any, ...] | EOFError] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            while True:
                self.replies.put(read_message(self.stdout))
        except (EOFError, OSError, pickle.UnpicklingError):
            self.replies.put(EOFError())

    def convert(self, name: str, data: bytes, timeout: float, options: dict[str, object]) -> str | Mapped:
        try:
            write_message(self.stdin, (name, data, timeout, options))
            reply = self.replies.get(timeout=timeout)
        except queue.Empty:
            self.kill()
            raise IngestRejectedError(
                "conversion_failed",
                f"Converting {name!r} took longer than {timeout:g} s and was stopped.",
                hint=_TIMEOUT_HINT,
            ) from None
        except OSError:
            reply = EOFError()
        if isinstance(reply, EOFError):
            self.kill()
            raise IngestRejectedError(
                "conversion_failed",
                f"The converter crashed on {name!r}.",
                hint="The file is probably malformed; re-export it.",
            )
        return _unpack(reply)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.alive():
            self.proc.kill()
        self.proc.wait()
        for stream in (self.stdin, self.stdout):
            with contextlib.suppress(OSError):
                stream.close()


def _unpack(reply: tuple[Any, ...]) -> str | Mapped:
    kind, *rest = reply
    if kind == "ok":
        return rest[0]
    reason, message, hint = rest
    if reason == "engine_unavailable":
        raise EngineUnavailableError(message, hint=hint)
    raise IngestRejectedError(reason, message, hint=hint)


class _Pool:
    """Idle workers, reused by whichever thread converts next."""

    def __init__(self) -> None:
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()

    def convert(
        self, name: str, data: bytes, *, timeout: float, memory_bytes: int, options: dict[str, object]
    ) -> str | Mapped:
        worker = self._take(memory_bytes)
        try:
            markdown = worker.convert(name, data, timeout, options)
        except IngestRejectedError:
            self._give_back(worker)
            raise
        self._give_back(worker)
        return markdown

    def _take(self, memory_bytes: int) -> _Worker:
        with self._lock:
            for worker in list(self._idle):
                self._idle.remove(worker)
                if worker.alive() and worker.memory_bytes == memory_bytes:
                    return worker
                worker.kill()
        return _Worker(memory_bytes)

    def _give_back(self, worker: _Worker) -> None:
        with self._lock:
            if worker.alive() and len(self._idle) < _MAX_IDLE:
                self._idle.append(worker)
                return
        worker.kill()

    def shutdown(self) -> None:
        with self._lock:
            workers, self._idle = self._idle, []
        for worker in workers:
            worker.kill()


_POOL = _Pool()
atexit.register(_POOL.shutdown)


def convert_in_sandbox(
    name: str, data: bytes, *, timeout: float, memory_bytes: int, html_main_content: bool
) -> str | Mapped:
    """The heavy converters' Markdown for ``data`` (with its places, when the converter knows them),
    from a worker process bounded in time and memory.

    Raises:
        IngestRejectedError: the converter rejected the file, timed out, ran out of memory or crashed.
        EngineUnavailableError: the converter library for this format is missing.
    """
    options: dict[str, object] = {"html_main_content": html_main_content}
    return _POOL.convert(name, data, timeout=timeout, memory_bytes=memory_bytes, options=options)


def shutdown() -> None:
    """Stop the idle workers (they also exit on their own when this process ends)."""
    _POOL.shutdown()
