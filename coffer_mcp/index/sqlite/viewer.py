"""Graph files searched in a process of their own: a file cut short under a search ends that process, not this one.

A saved graph is memory-mapped, so that every process on the machine shares one copy in the page
cache (hnsw.py). When something truncates a mapped file in place — a backup tool, ``: > file`` —
the next read of a page past its new end raises SIGBUS, which Python cannot catch: a server
searching a vector knowledge base died (exit -7, nothing on stderr). What was weighed, measured at
50,000 384-dimension vectors, an 80 MB graph file (docs/benchmarks.md, "A graph file cut short"):

- *Check the file before each search* (its inode, size and times: microseconds). The window
  between the check and the search's reads stays open, and it is not small: with a thread
  searching without pause, 14 of 30 truncations landed inside a search.
- *Read the file into memory instead of mapping it.* Closes the window; costs the file's size in
  every process (+87 MB here, 1.7 GB per million vectors and process), what the mapping avoids.
- *Map it in a separate process* (this module). Closes the window on every system, and keeps
  bytes written over a mapped file from crashing the server too. Costs one process per Coffer
  process (+23 MB, about a second to start, once), a pipe round trip per graph search (+0.1-0.6
  ms at a load of 3.5; several ms where the machine has more runnable work than cores), and
  searches of different graphs take turns in it.

Chosen: the separate process, with the check in front of it (``hnsw.Graph.current``): a file
changed between two searches is noticed before anything reads it (the other graphs stay open), and
the viewer process dies only when a file changes during a search. Then the search that was using
it raises ``ViewerError`` and is answered by the scan; the next search checks each file again
against its checksum (in a new viewer process), and a file that does not match is rebuilt.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import json
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
import weakref
from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from coffer_mcp.index.sqlite._viewer_process import FRAME, send

__all__ = ["VIEWER", "View", "Viewer", "ViewerError"]

log = logging.getLogger(__name__)

SCRIPT = Path(__file__).with_name("_viewer_process.py")
TIMEOUT = 60.0  # seconds for any answer: a search takes milliseconds, opening a graph reads it once
RETRY_SECONDS = 60.0  # after the process could not start

Reply = tuple[dict[str, Any], bytes]


class ViewerError(ValueError):
    """The viewer process failed: it ended (a graph file cut short under it?), hung, or cannot start."""


class View:
    """One graph file as the viewer process holds it open."""

    def __init__(self, viewer: Viewer, generation: int, graph: int, header: dict[str, Any]) -> None:
        self.viewer, self.generation, self.graph = viewer, generation, graph
        self.size, self.dimensions, self.exact = int(header["size"]), int(header["dimensions"]), bool(header["exact"])
        weakref.finalize(self, viewer.release, generation, graph)

    def current(self) -> bool:
        """Whether the process that opened the graph still runs."""
        return self.viewer.serves(self.generation)

    def nearest(self, query: bytes, count: int, *, expansion: int, exhaustive: bool) -> list[tuple[int, bytes | None]]:
        request = {"op": "nearest", "count": count, "expansion": expansion, "exhaustive": exhaustive}
        header, data = self.viewer.request(self, request, query)
        found, width = int(header["found"]), 4 * self.dimensions
        if len(data) != found * (8 + (1 + width if self.exact else 0)):
            raise ViewerError("the graph viewer process answered a malformed search")
        keys = array("Q", data[: 8 * found])
        if not self.exact:
            return [(key, None) for key in keys]
        flags, rows = data[8 * found : 9 * found], data[9 * found :]
        return [(key, rows[i * width : (i + 1) * width] if flags[i] else None) for i, key in enumerate(keys)]

    def contains(self, keys: Sequence[int]) -> list[bool]:
        _, data = self.viewer.request(self, {"op": "contains"}, array("Q", keys).tobytes())
        if len(data) != len(keys):
            raise ViewerError("the graph viewer process answered a malformed lookup")
        return [bool(flag) for flag in data]


class Viewer:
    """The viewer process of this process: started at the first graph opened, again after it ended.

    One request at a time (a lock); a graph is closed in the process when its ``View`` is freed.
    """

    def __init__(self, timeout: float = TIMEOUT) -> None:
        self.timeout = timeout
        self._lock = threading.Lock()
        self._process: _Process | None = None
        self._generation = 0
        self._closing: collections.deque[tuple[int, int]] = collections.deque()
        self._broken_until, self._broken = 0.0, ""

    def check(self) -> None:
        """Raises ViewerError while the process cannot start (tried again a minute after it failed)."""
        if time.monotonic() < self._broken_until:
            raise ViewerError(f"the graph viewer process cannot start ({self._broken}); tried again within a minute")

    def open(self, path: Path) -> View:
        """View a graph file.

        Raises:
            ViewerError: the process failed.
            ValueError: the file cannot be viewed (the process's reason).
        """
        with self._lock:
            process = self._running()
            header, _ = self._ask(process, {"op": "open", "path": os.fspath(path)})
            return View(self, process.generation, int(header["graph"]), header)

    def serves(self, generation: int) -> bool:
        process = self._process
        return process is not None and process.generation == generation and process.alive()

    def request(self, view: View, header: dict[str, Any], payload: bytes) -> Reply:
        with self._lock:
            process = self._process
            if process is None or process.generation != view.generation:
                raise ViewerError("the graph viewer process that opened this graph has ended")
            return self._ask(process, {**header, "graph": view.graph}, payload)

    def release(self, generation: int, graph: int) -> None:
        """Close a graph in the process at the next request (a finalizer: never waits for the lock)."""
        self._closing.append((generation, graph))

    def stop(self) -> None:
        """End the process (at exit; without the lock, which a search may hold)."""
        process, self._process = self._process, None
        if process is not None:
            process.stop()

    def _running(self) -> _Process:
        process = self._process
        if process is not None and process.alive():
            return process
        if process is not None:  # ended between two requests: killed
            log.warning("%s: graph searches scan until their files are checked again", process.ended())
        self.check()
        self._generation += 1
        try:
            self._process = _Process(self._generation, self.timeout)
        except ViewerError as exc:
            self._process, self._broken_until, self._broken = None, time.monotonic() + RETRY_SECONDS, str(exc)
            log.warning("%s: vector searches scan instead of using their graphs", exc)
            raise
        return self._process

    def _ask(self, process: _Process, header: dict[str, Any], payload: bytes = b"") -> Reply:
        closing = []
        while self._closing:
            generation, graph = self._closing.popleft()
            if generation == process.generation:
                closing.append(graph)
        try:
            reply = process.ask({**header, "close": closing} if closing else header, payload, self.timeout)
        except ViewerError as exc:
            self._process = None
            log.warning("%s: graph searches scan until their files are checked again", exc)
            raise
        if "error" in reply[0]:
            raise ValueError(str(reply[0]["error"]))
        return reply


class _Process:
    """One run of ``_viewer_process.py``; its answers are read by the thread that asked."""

    def __init__(self, generation: int, timeout: float) -> None:
        self.generation = generation
        try:
            self.proc = subprocess.Popen([sys.executable, str(SCRIPT)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        except OSError as exc:
            raise ViewerError(f"the graph viewer process could not start: {exc}") from exc
        assert self.proc.stdout is not None  # a PIPE: Popen set it
        self.fd, self.buffer = self.proc.stdout.fileno(), bytearray()
        _widen(self.fd)
        header, _ = self._reply(timeout)
        if not header.get("ready"):
            self.stop()
            raise ViewerError("the graph viewer process did not say it was ready")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def ask(self, header: dict[str, Any], payload: bytes, timeout: float) -> Reply:
        assert self.proc.stdin is not None  # a PIPE: Popen set it
        try:
            send(self.proc.stdin, header, payload)
        except OSError:
            raise ViewerError(self.ended()) from None
        return self._reply(timeout)

    def ended(self) -> str:
        """How the process ended (it has, or is about to: its pipe is closed)."""
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.stop()
            return "the graph viewer process stopped answering"
        self.stop()
        if code >= 0:
            return f"the graph viewer process ended (exit status {code})"
        name = _signal_name(-code)
        cause = ": a graph file was cut short while it was read" if name == "SIGBUS" else ""
        return f"the graph viewer process ended (killed by {name}{cause})"

    def stop(self) -> None:
        """Close its stdin (it exits), wait for it (or kill it), then close its stdout."""
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        with contextlib.suppress(OSError):
            if self.proc.stdout is not None:
                self.proc.stdout.close()

    def _reply(self, timeout: float) -> Reply:
        deadline = time.monotonic() + timeout
        size, length = FRAME.unpack(self._take(FRAME.size, deadline))
        try:
            header = json.loads(self._take(size, deadline))
        except ValueError:
            header = None
        if not isinstance(header, dict):
            self.stop()
            raise ViewerError("the graph viewer process answered something else than a frame")
        return header, self._take(length, deadline)

    def _take(self, count: int, deadline: float) -> bytes:
        while len(self.buffer) < count:
            # select() cannot wait on a pipe on Windows: there a read waits as long as the answer takes.
            if os.name != "nt" and not select.select([self.fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
                self.proc.kill()
                self.stop()
                raise ViewerError("the graph viewer process did not answer in time (stopped)")
            chunk = os.read(self.fd, max(count - len(self.buffer), 1 << 16))
            if not chunk:
                raise ViewerError(self.ended())
            self.buffer += chunk
        data = bytes(self.buffer[:count])
        del self.buffer[:count]
        return data


def _widen(fd: int) -> None:
    """Let the pipe hold a whole answer (Linux): 64 candidates' vectors take ~100 KB, over the 64 KB
    a pipe holds by default, and the viewer would wait for half of it to be read to write the rest."""
    with contextlib.suppress(ImportError, AttributeError, OSError):
        import fcntl

        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, 1 << 20)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


VIEWER = Viewer()
atexit.register(VIEWER.stop)
