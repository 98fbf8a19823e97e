"""The shared model service: one process holds one fastembed model for all of a user's Coffer processes.

``SharedEmbedder`` starts it on first need as ``python -m coffer_mcp.embed._service SPEC``
(detached in its own session; stdout to /dev/null, stderr to ``embed-<key>.log`` in the run
folder), and it then:

1. takes the lifetime lock ``embed-<key>.lock``, waiting a few seconds for a service that is
   exiting; still held means another service lives, and this one exits with status 75;
2. removes a socket left by a killed service (the lock proves nobody serves it), binds the socket
   under umask 077 and makes it 0600;
3. tells its starter it is ready (a line on the ``ready_fd`` pipe), then serves: one thread per
   connection (at most ``MAX_CONNECTIONS``), each calling the model itself. ``FastEmbedEmbedder``
   runs document texts one at a time and a query beside them, so a search never waits for
   someone's ingest, and at most two texts' activations are in memory at once;
4. exits after ``idle_seconds`` without a request, or at once when its socket file is removed or
   replaced (then nobody can reach it any more).

The model loads on the first request, with the same ``FastEmbedEmbedder`` as in-process
embedding; vectors go back as the float64 values it returns, so they are identical.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from coffer_mcp.embed._fastembed import FastEmbedEmbedder
from coffer_mcp.embed._rundir import ANOTHER_SERVICE, RunFiles, ServiceUnavailableError, check_peer, file_lock
from coffer_mcp.embed._wire import MAX_REQUEST_BYTES, FrameError, encode_vectors, recv_json, send_frame, send_json
from coffer_mcp.embed.base import shorten
from coffer_mcp.errors import EmbeddingError

__all__ = ["EmbeddingService", "main", "run"]

log = logging.getLogger("coffer_mcp.embed.service")

MAX_CONNECTIONS = 32
READ_SECONDS = 30.0  # a client that connects must send its request within this
LOCK_WAIT_SECONDS = 5.0
_T = TypeVar("_T")


class EmbeddingService:
    """Serves one model over the socket of ``files`` until idle for ``idle_seconds``."""

    def __init__(self, files: RunFiles, embedder: FastEmbedEmbedder, *, idle_seconds: float) -> None:
        self.files = files
        self.embedder = embedder
        self.idle_seconds = idle_seconds
        self.requests = 0
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._lock = threading.Lock()
        self._active = 0
        self._last_request = time.monotonic()
        self._unservable = False  # a request found the model cannot be loaded
        self._listener: socket.socket | None = None
        self._inode: tuple[int, int] | None = None

    def bind(self) -> None:
        """Listen on the socket path (a stale socket already removed), readable by this user only."""
        os.umask(0o077)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(self.files.socket))
        os.chmod(self.files.socket, 0o600)
        listener.listen(MAX_CONNECTIONS)
        listener.settimeout(min(1.0, max(0.05, self.idle_seconds / 4)))
        info = self.files.socket.lstat()
        self._listener, self._inode = listener, (info.st_dev, info.st_ino)

    def serve(self) -> None:
        """Accept connections until idle or unreachable; then remove the socket if it is still ours."""
        listener = self._listener
        assert listener is not None
        try:
            while not self._should_exit():
                if not self._slots.acquire(timeout=listener.gettimeout()):
                    continue
                try:
                    conn, _ = listener.accept()
                except TimeoutError:
                    self._slots.release()
                    continue
                with self._lock:
                    self._active += 1
                threading.Thread(target=self._handle, args=(conn,), daemon=True).start()
        finally:
            listener.close()
            if self._socket_is_ours():
                self.files.socket.unlink(missing_ok=True)

    def _should_exit(self) -> bool:
        if not self._socket_is_ours():
            log.warning("the socket %s was removed or replaced: exiting", self.files.socket)
            return True
        with self._lock:
            if self._active == 0 and self._unservable:
                log.info("the model cannot be loaded: exiting (the next process that needs it starts a service again)")
                return True
            idle = self._active == 0 and time.monotonic() - self._last_request >= self.idle_seconds
        if idle:
            log.info("idle for %s seconds: exiting", self.idle_seconds)
        return idle

    def _socket_is_ours(self) -> bool:
        try:
            info = self.files.socket.lstat()
        except OSError:
            return False
        return (info.st_dev, info.st_ino) == self._inode

    def _handle(self, conn: socket.socket) -> None:
        try:
            with conn:
                conn.settimeout(READ_SECONDS)
                check_peer(conn)
                request = recv_json(conn, MAX_REQUEST_BYTES)
                header, vectors = self._answer(request)
                send_json(conn, header)
                if vectors:
                    send_frame(conn, encode_vectors(vectors))
        except (OSError, FrameError, ServiceUnavailableError) as exc:  # the client went away or broke the format
            log.info("a connection ended early: %s", shorten(exc))
        finally:
            with self._lock:
                self._active -= 1
                self._last_request = time.monotonic()
            self._slots.release()

    def _answer(self, request: dict[str, Any]) -> tuple[dict[str, Any], list[list[float]]]:
        with self._lock:
            self.requests += 1
        try:
            return self._dispatch(request)
        except EmbeddingError as exc:
            return {"ok": False, "message": exc.message, "hint": exc.hint_template, "code": exc.code}, []
        # The model runs native code whose exception types are open-ended: the client maps this
        # answer as it would map the exception in-process (CooldownEmbedder's wording and hint).
        except Exception as exc:
            log.exception("embedding failed")
            return {"ok": False, "foreign": True, "message": shorten(exc)}, []

    def _model(self, call: Callable[[], _T]) -> _T:
        """Run ``call`` on the model. A model that could not be loaded leaves nothing to
        serve: the service then exits once its requests are answered, instead of idling (each client
        is cooling down; the next need starts a service that tries again). A bad request never
        reaches here, so it never ends the service."""
        try:
            return call()
        except Exception:
            if not self.embedder.loaded:
                with self._lock:
                    self._unservable = True
            raise

    def _dispatch(self, request: dict[str, Any]) -> tuple[dict[str, Any], list[list[float]]]:
        op, embedder = request.get("op"), self.embedder
        if op == "status":
            status = {"pid": os.getpid(), "identity": embedder.identity, "requests": self.requests}
            return {"ok": True, "count": 0, **status}, []
        if op == "dimensions":
            return {"ok": True, "count": 0, "dimensions": self._model(embedder.dimensions)}, []
        text, texts = request.get("text"), _text_list(request.get("texts"), embedder.batch_size)
        if op == "embed_query" and isinstance(text, str):
            vectors = [self._model(lambda: embedder.embed_query(text))]
        elif op == "embed_documents" and texts is not None:
            vectors = self._model(lambda: embedder.embed_documents(texts))
        else:
            raise EmbeddingError(
                f"The shared embedding service cannot answer the request {str(request)[:200]}.",
                hint="Restart the Coffer processes: they may run another version of Coffer than the service.",
            )
        return {"ok": True, "count": len(vectors), "dimensions": len(vectors[0]) if vectors else 0}, vectors


def _text_list(value: object, limit: int) -> list[str] | None:
    """``value`` when it is a list of at most ``limit`` strings (one batch), else None."""
    if isinstance(value, list) and len(value) <= limit and all(isinstance(t, str) for t in value):
        return value
    return None


def run(spec: dict[str, Any]) -> int:
    """Serve the model of ``spec`` (see ``SharedEmbedder``) until idle; the process's exit status."""
    files = RunFiles(Path(spec["folder"]), spec["key"])
    files.check_folder()
    with file_lock(files.lock, LOCK_WAIT_SECONDS) as held:
        if not held:
            log.info("another service holds %s", files.lock)
            return ANOTHER_SERVICE
        if files.check_socket():
            files.socket.unlink()  # left by a service that was killed: the lock says nobody serves it
        embedder = FastEmbedEmbedder(
            spec["model"],
            model_path=_path(spec.get("model_path")),
            batch_size=spec["batch_size"],
            threads=spec.get("threads"),
            dimensions=spec.get("dimensions"),
            cache_dir=_path(spec.get("cache_dir")),
        )
        service = EmbeddingService(files, embedder, idle_seconds=spec["idle_seconds"])
        service.bind()
        _tell_ready(spec.get("ready_fd"))
        log.info("serving %s on %s (pid %s)", embedder.identity, files.socket, os.getpid())
        service.serve()
    return 0


def _path(value: str | None) -> Path | None:
    return None if value is None else Path(value)


def _tell_ready(fd: int | None) -> None:
    if fd is not None:
        with os.fdopen(fd, "wb") as pipe:
            pipe.write(b"ready\n")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(process)d %(levelname)s %(message)s")
    # A terminating signal still removes the socket (SIGKILL cannot: the next service does).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        return run(json.loads(args[0]))
    except ServiceUnavailableError:
        log.exception("cannot serve")
        return 1


if __name__ == "__main__":
    sys.exit(main())
