"""Crash-safe file writes: a truth file is always either its old or its new content."""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from pathlib import Path

__all__ = [
    "TEMP_MARKER",
    "atomic_write",
    "fsync_dir",
    "path_stamp",
    "read_store_file",
    "remove_file",
    "remove_stale_temp_files",
]

TEMP_MARKER = ".tmp-"
_READ_NO_FOLLOW = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


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


def atomic_write(path: Path, data: bytes, *, sync_dir: bool = True) -> None:
    """Write ``data`` to ``path`` atomically: temp file in the same folder, fsync, rename.

    The temp file is hidden (leading dot) so scans and grep never see it; a crash leaves at
    most a stray temp file, removed by ``remove_stale_temp_files`` under the KB lock. With
    ``sync_dir=False`` the rename is made durable later by the caller's ``fsync_dir`` (a batch
    of files, one folder sync before the batch is acknowledged).
    """
    tmp = path.with_name(f".{path.name}{TEMP_MARKER}{secrets.token_hex(6)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        remove_file(tmp)
        raise
    if sync_dir:
        fsync_dir(path.parent)


def path_stamp(path: Path) -> str:
    """``mtime_ns:size`` of a file or folder ("missing" if absent): what cheap change checks compare."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return "missing"
    return f"{stat.st_mtime_ns}:{stat.st_size}"


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
