"""``SharedEmbedder``: fastembed through one model service per user and model, not one model per process.

Every stdio client starts its own ``coffer serve``; each loading its own copy of the model made
four servers hold four models (434 MB of model memory against 107 MB for one). This client sends
its texts to the service instead (``_service``), starting it on first need:

- **Start race.** Starting happens under the start lock in the run folder; whoever gets it second
  finds the service listening and uses it. The service itself holds a lifetime lock, so even a
  start that slips past the start lock (a start that timed out, then another) runs one service.
- **Stale socket.** A service killed by SIGKILL leaves its socket file: connecting is refused, a
  new service is started, and it removes the file once the lifetime lock proves nobody serves it.
- **Fallback.** When the service cannot be used (it cannot start, its folder or socket is not
  private, it does not answer within ``timeout_seconds``, it dies twice in one call), this process
  loads the model itself and embeds in-process for ``retry_seconds``; the next call after that
  tries the service again, and once it answers the in-process model is dropped.
- **Failures stay explicit.** An error of the model itself (missing folder, unknown name) comes
  back from the service as the ``EmbeddingError`` in-process embedding would raise, not as a
  reason to fall back: the same model would fail the same way here.

A request carries at most the configured batch size of texts, so it is answered well within the
timeout; the service embeds each text alone, as in-process embedding does, so the vectors are
identical. Nothing starts before the first embed.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import selectors
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from coffer_mcp.embed._fastembed import FastEmbedEmbedder
from coffer_mcp.embed._rundir import (
    ANOTHER_SERVICE,
    RunFiles,
    ServiceUnavailableError,
    check_peer,
    default_folder,
    file_lock,
    service_key,
)
from coffer_mcp.embed._wire import (
    MAX_HEADER_BYTES,
    MAX_REQUEST_BYTES,
    FrameError,
    decode_vectors,
    encode_json,
    recv_frame,
    recv_json,
    send_frame,
)
from coffer_mcp.errors import EmbeddingError
from coffer_mcp.settings import default_of

__all__ = ["SharedEmbedder", "service_supported"]

log = logging.getLogger(__name__)

START_SECONDS = 10.0  # a Python start and a socket bind; the model loads later, on the first request
CONNECT_SECONDS = 2.0
MAX_DIMENSIONS = 65536
_T = TypeVar("_T")


def service_supported() -> bool:
    """Unix sockets with file permissions, file locks and user ids: Linux, macOS, the BSDs; not Windows."""
    return os.name == "posix" and hasattr(socket, "AF_UNIX")


class _NotServingError(ServiceUnavailableError):
    """No service listens on the socket (none started yet, or a stale socket): start one."""


class _DroppedError(ServiceUnavailableError):
    """The service closed the connection before answering (killed, or exiting idle): start one."""


class SharedEmbedder:
    """Embeds with the user's shared model service; in-process while the service cannot be used.

    Args:
        local: The in-process provider. Its settings describe the model the service loads, and it
            embeds (loading the model in this process) whenever the service cannot be used.
        folder: The private run folder; None: ``$XDG_RUNTIME_DIR/coffer``, else ``<tmp>/coffer-<uid>``.
        idle_seconds: How long a service started here stays up without a request.
        retry_seconds: After falling back, embed in-process this long before trying the service again.
        timeout_seconds: How long to wait for the service's answer to one request.
        hint: What to check when the model fails with an error it did not explain itself.
        clock: Monotonic seconds; tests may pass their own.
    """

    def __init__(
        self,
        local: FastEmbedEmbedder,
        *,
        folder: Path | None = None,
        idle_seconds: float = default_of("embedding_service_idle_seconds"),
        retry_seconds: float = default_of("embedding_cooldown_seconds"),
        timeout_seconds: float = 60.0,
        hint: str = "",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.local = local
        self.retry_seconds = retry_seconds
        self._client = _ServiceClient(local, folder, idle_seconds=idle_seconds, timeout_seconds=timeout_seconds)
        self._hint = hint
        self._clock = clock
        self._lock = threading.Lock()
        self._local_until: float | None = None

    def __repr__(self) -> str:
        return f"SharedEmbedder({self.local!r})"

    @property
    def identity(self) -> str:
        return self.local.identity

    @property
    def in_process(self) -> bool:
        """True while falling back: this process embeds with its own copy of the model."""
        with self._lock:
            return self._local_until is not None and self._clock() < self._local_until

    def dimensions(self) -> int:
        return self._call({"op": "dimensions"}, 0, self.local.dimensions, lambda header, _: int(header["dimensions"]))

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        for batch in _batches(texts, self.local.batch_size):
            request = {"op": "embed_documents", "texts": batch}
            local = functools.partial(self.local.embed_documents, batch)
            vectors.extend(self._call(request, len(batch), local, lambda _, found: found))
        return vectors

    def embed_query(self, text: str) -> list[float]:
        return self._call(
            {"op": "embed_query", "text": text}, 1, lambda: self.local.embed_query(text), lambda _, found: found[0]
        )

    def status(self) -> dict[str, Any]:
        """The service's pid, identity and request count (starting it if needed).

        Raises:
            ServiceUnavailableError: The service cannot be used.
        """
        header, _ = self._client.request({"op": "status"}, 0)
        return header

    def _call(
        self,
        request: dict[str, Any],
        count: int,
        local: Callable[[], _T],
        read: Callable[[dict[str, Any], list[list[float]]], _T],
    ) -> _T:
        if self.in_process:
            return local()
        try:
            header, vectors = self._client.request(request, count)
        except ServiceUnavailableError as exc:
            self._fall_back(exc)
            return local()
        self._back_to_service()
        if not header.get("ok"):
            raise self._error(header)
        return read(header, vectors)

    def _fall_back(self, reason: ServiceUnavailableError) -> None:
        with self._lock:
            self._local_until = self._clock() + self.retry_seconds
        log.warning(
            "The shared embedding service cannot be used (%s): embedding with %s in this process, retrying the "
            "service in %g s.",
            reason,
            self.identity,
            self.retry_seconds,
        )

    def _back_to_service(self) -> None:
        with self._lock:
            if self._local_until is None:
                return
            self._local_until = None
        self.local.unload()  # the service answers again: give this process's copy of the model back

    def _error(self, header: dict[str, Any]) -> EmbeddingError:
        message = str(header.get("message") or "the service gave no reason")
        if header.get("foreign"):  # worded as CooldownEmbedder words a foreign exception in-process
            return EmbeddingError(f"Embedding with {self.identity} failed: {message}", hint=self._hint)
        return EmbeddingError(
            message, code=str(header.get("code") or EmbeddingError.code), hint=str(header.get("hint", ""))
        )


class _ServiceClient:
    """Requests to the service of one model config, starting the service when none listens."""

    def __init__(
        self, local: FastEmbedEmbedder, folder: Path | None, *, idle_seconds: float, timeout_seconds: float
    ) -> None:
        self.spec: dict[str, Any] = {
            "model": local.model_name,
            "batch_size": local.batch_size,
            "threads": local.threads,
            "dimensions": local.expected_dimensions,
            "model_path": None if local.model_path is None else str(local.model_path.resolve()),
            # The cache only matters without a model folder: homes pointing at one folder share a service.
            "cache_dir": None if local.cache_dir is None or local.model_path else str(local.cache_dir.resolve()),
        }
        self.folder = folder
        self.idle_seconds = idle_seconds
        self.timeout_seconds = timeout_seconds
        self._files: RunFiles | None = None

    def files(self) -> RunFiles:
        """The service's files, its folder created and checked on first use."""
        if self._files is None:
            files = RunFiles(self.folder or default_folder(), service_key(self.spec))
            files.prepare()
            self._files = files
        return self._files

    def request(self, message: dict[str, Any], count: int) -> tuple[dict[str, Any], list[list[float]]]:
        """The service's answer header and ``count`` vectors; starts the service if none listens.

        Raises:
            ServiceUnavailableError: The service cannot be used (the caller embeds in-process).
        """
        payload = encode_json(message)
        if len(payload) > MAX_REQUEST_BYTES:
            raise ServiceUnavailableError(f"a request of {len(payload)} bytes is over the service's limit")
        files = self.files()
        try:
            return self._exchange(files, payload, count)
        except (_NotServingError, _DroppedError) as exc:
            log.info("starting the shared embedding service: %s", exc)
        self._start(files)
        return self._exchange(files, payload, count)

    def _exchange(self, files: RunFiles, payload: bytes, count: int) -> tuple[dict[str, Any], list[list[float]]]:
        with self._connect(files) as sock:
            sock.settimeout(self.timeout_seconds)
            try:
                send_frame(sock, payload)
                header = recv_json(sock, MAX_HEADER_BYTES)
                return header, self._vectors(sock, header, count)
            except TimeoutError as exc:
                raise ServiceUnavailableError(f"no answer within {self.timeout_seconds:g} s") from exc
            except (OSError, FrameError) as exc:
                raise _DroppedError(f"the service closed the connection: {exc}") from exc

    def _connect(self, files: RunFiles) -> socket.socket:
        files.check_folder()
        if not files.check_socket():
            raise _NotServingError("no service is running")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(CONNECT_SECONDS)
            sock.connect(str(files.socket))
            check_peer(sock)
        except (ConnectionRefusedError, FileNotFoundError) as exc:
            sock.close()
            raise _NotServingError("the socket is left from a service that is gone") from exc
        except OSError as exc:
            sock.close()
            raise ServiceUnavailableError(f"cannot connect to {files.socket}: {exc}") from exc
        except ServiceUnavailableError:
            sock.close()
            raise
        return sock

    def _vectors(self, sock: socket.socket, header: dict[str, Any], count: int) -> list[list[float]]:
        if not header.get("ok") or count == 0:
            return []
        found, dimensions = header.get("count"), header.get("dimensions")
        if found != count or not isinstance(dimensions, int) or not 0 < dimensions <= MAX_DIMENSIONS:
            raise FrameError(f"the service announced {found} vectors of {dimensions} dimensions for {count} texts")
        return decode_vectors(recv_frame(sock, count * dimensions * 8), count, dimensions)

    def _start(self, files: RunFiles) -> None:
        with file_lock(files.start_lock, START_SECONDS + 2) as held:
            if not held:
                raise ServiceUnavailableError("another process is starting the service and has not finished")
            if self._serving(files):
                return  # started by whoever held the lock before us
            # Something else at the socket path is refused; a stale socket of ours, the service removes.
            files.check_socket()
            _spawn(
                files, {**self.spec, "folder": str(files.folder), "key": files.key, "idle_seconds": self.idle_seconds}
            )

    def _serving(self, files: RunFiles) -> bool:
        try:
            self._exchange(files, encode_json({"op": "status"}), 0)
        except (_NotServingError, _DroppedError):
            return False
        return True


def _spawn(files: RunFiles, spec: dict[str, Any]) -> None:
    """Start the service detached and wait until it listens.

    Raises:
        ServiceUnavailableError: It could not start, exited, or was not ready in ``START_SECONDS``.
    """
    if not sys.executable:
        raise ServiceUnavailableError("the Python interpreter's path is unknown")
    ready, ready_w = os.pipe()
    log_fd = os.open(files.log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "coffer_mcp.embed._service", json.dumps({**spec, "ready_fd": ready_w})],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log_fd,
            pass_fds=(ready_w,),
            start_new_session=True,
            cwd=files.folder,
            env=_child_env(),
        )
    except OSError as exc:
        os.close(ready)
        raise ServiceUnavailableError(f"cannot start the service: {exc}") from exc
    finally:
        os.close(ready_w)
        os.close(log_fd)
    # Reap it when it exits, whichever of the two outlives the other.
    threading.Thread(target=proc.wait, name="embedding-service-reaper", daemon=True).start()
    # A selector, not select(): a busy server's descriptors may be numbered past select's 1024.
    with os.fdopen(ready, "rb") as pipe, selectors.DefaultSelector() as selector:
        selector.register(pipe, selectors.EVENT_READ)
        line = pipe.readline() if selector.select(START_SECONDS) else None
    if line is None:
        raise ServiceUnavailableError(f"the service did not start within {START_SECONDS:g} s (see {files.log})")
    if line != b"ready\n" and _exit_status(proc) != ANOTHER_SERVICE:
        raise ServiceUnavailableError(f"the service exited with status {proc.returncode} (see {files.log})")


def _exit_status(proc: subprocess.Popen[bytes]) -> int | None:
    try:
        return proc.wait(timeout=START_SECONDS)
    except subprocess.TimeoutExpired:
        return None


def _child_env() -> dict[str, str]:
    """This environment, with the folder holding this very ``coffer_mcp`` first on the import path."""
    root = str(Path(__file__).resolve().parents[2])
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": root + (os.pathsep + path if path else "")}


def _batches(texts: Sequence[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(texts), size):
        yield list(texts[start : start + size])
