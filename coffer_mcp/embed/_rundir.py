"""Where the shared model service listens, and the checks that keep it private to the user.

One service per model configuration: its files in the run folder are named by a key hashed from
everything that decides the vectors (model, model folder, cache, batch size, ...) and from the
code that runs it, so two checkouts or two versions never talk to each other's service.

The folder is ``$XDG_RUNTIME_DIR/coffer`` (a per-user tmpfs on systemd systems), else
``<temp dir>/coffer-<uid>`` (macOS gives every user a private temp dir; on Linux this is the
shared ``/tmp``, as tmux does). Either way it must be a real folder owned by the user with mode
0700 and the socket a real socket owned by the user: anything else is refused, never "fixed",
since another user could have planted it. No TCP port is ever opened.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import stat
import struct
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "ANOTHER_SERVICE",
    "MAX_SOCKET_PATH",
    "RunFiles",
    "ServiceUnavailableError",
    "check_peer",
    "default_folder",
    "file_lock",
    "service_key",
]

PROTOCOL = 1
ANOTHER_SERVICE = 75  # the service's exit status (EX_TEMPFAIL) when another one holds the lifetime lock
# sun_path holds 108 bytes on Linux and 104 on macOS, the terminating NUL included.
MAX_SOCKET_PATH = 100
# Environment variables that change how fastembed finds or fetches a model: a service started
# with other values would not behave as the in-process model of this process would.
_LOADING_ENV = ("FASTEMBED_CACHE_PATH", "HF_ENDPOINT", "HF_HUB_OFFLINE", "HF_HOME", "HF_HUB_CACHE")


class ServiceUnavailableError(Exception):
    """The shared service cannot be used right now; the caller embeds in-process instead.

    Never leaves ``coffer_mcp.embed``: it is a reason to fall back, not an embedding failure.
    """


def default_folder() -> Path:
    """The user's private run folder (not created here)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if runtime and os.path.isabs(runtime) and os.path.isdir(runtime):
        return Path(runtime) / "coffer"
    return Path(tempfile.gettempdir()) / f"coffer-{os.getuid()}"


def service_key(spec: dict[str, object]) -> str:
    """16 hex digits naming one service: the model spec, the code running it, the loading environment."""
    # sys.prefix, not sys.executable: `python` and `python3` of one environment share a service.
    code = (PROTOCOL, sys.prefix, str(Path(__file__).resolve().parents[1]))
    env = {name: os.environ.get(name) for name in _LOADING_ENV}
    text = json.dumps([code, sorted(spec.items()), sorted(env.items())], default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class RunFiles:
    """The files of one service in the run folder."""

    folder: Path
    key: str

    @property
    def socket(self) -> Path:
        return self.folder / f"embed-{self.key}.sock"

    @property
    def lock(self) -> Path:
        """Held by the running service for its whole life: free means no service is alive."""
        return self.folder / f"embed-{self.key}.lock"

    @property
    def start_lock(self) -> Path:
        """Held by the one client starting the service, so racing clients start one, not several."""
        return self.folder / f"embed-{self.key}.start"

    @property
    def log(self) -> Path:
        """The service's stderr (fastembed's own messages, and ours)."""
        return self.folder / f"embed-{self.key}.log"

    def prepare(self) -> None:
        """Create the folder (mode 0700) if needed and check it is private to this user.

        Raises:
            ServiceUnavailableError: The folder is not a private folder of this user, or the
                socket path would be too long for a Unix socket.
        """
        if len(os.fsencode(self.socket)) > MAX_SOCKET_PATH:
            raise ServiceUnavailableError(f"the socket path {self.socket} is longer than {MAX_SOCKET_PATH} bytes")
        try:
            self.folder.parent.mkdir(parents=True, exist_ok=True)
            self.folder.mkdir(mode=0o700, exist_ok=True)
        except OSError as exc:
            raise ServiceUnavailableError(f"cannot create {self.folder}: {exc.strerror}") from exc
        self.check_folder()

    def check_folder(self) -> None:
        """Raises ``ServiceUnavailableError`` unless the folder is a real, private folder of this user."""
        info = _lstat(self.folder)
        if info is None or not stat.S_ISDIR(info.st_mode):
            raise ServiceUnavailableError(f"{self.folder} is not a folder")
        if info.st_uid != os.getuid():
            raise ServiceUnavailableError(f"{self.folder} belongs to user id {info.st_uid}, not to this user")
        if info.st_mode & 0o077:
            raise ServiceUnavailableError(
                f"{self.folder} has mode {stat.S_IMODE(info.st_mode):o}: other users may reach it (remove it, or "
                "make it 0700)"
            )

    def check_socket(self) -> bool:
        """Whether a socket of this user is at the socket path (False: nothing there).

        Raises:
            ServiceUnavailableError: Something else is there (a file, a link, another user's socket).
        """
        info = _lstat(self.socket)
        if info is None:
            return False
        if not stat.S_ISSOCK(info.st_mode):
            raise ServiceUnavailableError(f"{self.socket} is not a socket (remove it)")
        if info.st_uid != os.getuid():
            raise ServiceUnavailableError(f"{self.socket} belongs to user id {info.st_uid}, not to this user")
        return True


def check_peer(sock: socket.socket) -> None:
    """Where the OS tells (Linux), refuse a peer running as another user: a second line behind 0700."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return
    _pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("3i")))
    if uid != os.getuid():
        raise ServiceUnavailableError(f"the peer on the socket runs as user id {uid}, not as this user")


@contextlib.contextmanager
def file_lock(path: Path, wait: float) -> Iterator[bool]:
    """Hold the exclusive lock of ``path`` (created 0600) while inside; False: still taken after ``wait`` s.

    A lock, not the file, is what counts: the kernel drops it when its holder dies, even by SIGKILL.
    """
    import fcntl  # POSIX only, like the service itself

    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    yield False
                    return
                time.sleep(0.02)
        yield True
    finally:
        os.close(fd)


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return path.lstat()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ServiceUnavailableError(f"cannot inspect {path}: {exc.strerror}") from exc
