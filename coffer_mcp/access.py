"""Reading the user's own files safely: ``allowed_dirs`` checks, and opening without following links.

Agents may name any path; only files inside ``allowed_dirs`` are read for them, and a file is
checked after it is opened (never before), so a path swapped for a symbolic link in between
cannot lead outside. The CLI acts as the user and passes no ``within``. ``check_inside`` also
guards the one path an agent writes to: an export's pack file.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO

from coffer_mcp.errors import IngestRejectedError, InvalidArgumentError, PathNotAllowedError
from coffer_mcp.store import check_path_text, file_stamp

__all__ = [
    "check_inside",
    "check_size",
    "open_source",
    "read_stamped_source",
    "sha256_source",
    "source_stamp",
    "stamped_sha256_source",
]

_BLOCK = 1 << 20
_SETTLED_NS = 60 * 1_000_000_000
"""How long ago a file must have changed for its stamp to vouch for what was read (see ``_settled_stamp``)."""
_NO_FOLLOW = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


def check_inside(path: str | Path, allowed: Sequence[Path], *, writing: bool = False) -> Path:
    """The real path of ``path`` if it lies inside one of ``allowed`` (symlinks resolved).

    Args:
        path: The path an agent named.
        allowed: The folders it may be in (``allowed_dirs``).
        writing: The path is to be written (an export), not read; the refusals say so.

    Raises:
        InvalidArgumentError: the path holds a NUL byte or is absurdly long.
        PathNotAllowedError: no folder is allowed, the path is relative, or it resolves outside.
    """
    check_path_text(path)
    if not allowed:
        raise PathNotAllowedError(
            f"{'Writing' if writing else 'Reading'} paths is switched off: no folder is allowed.",
            hint="Add folders to allowed_dirs in config.yaml (or COFFER_ALLOWED_DIRS=/one:/two) and restart "
            "the server.",
        )
    if not Path(path).is_absolute():
        raise PathNotAllowedError(f"{str(path)[:200]!r} is not an absolute path.", hint="Pass an absolute path.")
    try:
        real = Path(os.path.realpath(path))
    except OSError as exc:  # a link swapped for a file while it was being resolved
        raise PathNotAllowedError(
            f"{path} could not be resolved: {exc.strerror}.", hint="Try again once the file stops changing."
        ) from None
    if not any(real == root or real.is_relative_to(root) for root in allowed):
        raise PathNotAllowedError(
            f"{path} is outside the allowed folders.",
            hint=f"Allowed: {', '.join(map(str, allowed))}. Add a folder to allowed_dirs to "
            f"{'write to' if writing else 'read from'} it.",
        )
    return real


@contextlib.contextmanager
def open_source(path: Path, within: Sequence[Path] | None) -> Iterator[tuple[IO[bytes], os.stat_result]]:
    """Open a source file for reading, then check the file that was opened.

    Checking a path and then opening it is a race: the file can be swapped for a symbolic link to
    an outside file in between. So the file is opened first, without following a final symbolic
    link (and without blocking on a FIFO), and only then checked: a regular file, and — with
    ``within`` — the very file (same device and inode) that the path's real location inside
    ``within`` holds now.

    Raises:
        PathNotAllowedError: a symbolic link, or a file that is (or was swapped to) outside ``within``.
        InvalidArgumentError: not a regular file.
        OSError: the file cannot be opened (missing, unreadable).
    """
    check_path_text(path)
    try:
        fd = os.open(path, _NO_FOLLOW)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise PathNotAllowedError(
                f"{path} is a symbolic link; links are not followed.",
                hint="Pass the path of the file the link points to.",
            ) from None
        raise
    with os.fdopen(fd, "rb") as handle:
        opened = os.fstat(handle.fileno())
        if not stat.S_ISREG(opened.st_mode):
            raise InvalidArgumentError(f"{path} is not a regular file.", hint="Pass a file or a folder of files.")
        if within is not None:
            real = check_inside(path, within)
            try:
                now = os.stat(real)
            except OSError:
                now = None
            if now is None or (now.st_dev, now.st_ino) != (opened.st_dev, opened.st_ino):
                raise PathNotAllowedError(
                    f"{path} was replaced while it was being opened.", hint="Try again once the file stops changing."
                )
        yield handle, opened


def read_stamped_source(path: Path, within: Sequence[Path] | None, *, max_bytes: int) -> tuple[bytes, str]:
    """The bytes of a source file opened with ``open_source``, refused beyond ``max_bytes``, and the
    stamp that vouches for them ("" when none does: ``_settled_stamp``)."""
    with open_source(path, within) as (handle, opened):
        check_size(path, opened.st_size, max_bytes)
        data = handle.read(max_bytes + 1)
        check_size(path, len(data), max_bytes)  # it grew since it was opened
    return data, _settled_stamp(opened)


def sha256_source(path: Path, within: Sequence[Path] | None, *, max_bytes: int) -> str:
    """The file's sha256, read in 1 MiB blocks; refused like ``read_stamped_source`` beyond ``max_bytes``."""
    return stamped_sha256_source(path, within, max_bytes=max_bytes)[0]


def stamped_sha256_source(path: Path, within: Sequence[Path] | None, *, max_bytes: int) -> tuple[str, str]:
    """``sha256_source``, and the stamp that vouches for that hash ("" when none does).

    A file larger than ``max_bytes`` is refused by its size before a byte is read (and one that
    grows past it while it is read, once it has): a file that could not be ingested is never
    hashed, so a 20 GB file dropped into a followed folder costs a ``stat``, not minutes of reading.
    """
    digest = hashlib.sha256()
    read = 0
    with open_source(path, within) as (handle, opened):
        check_size(path, opened.st_size, max_bytes)
        while read <= max_bytes and (block := handle.read(_BLOCK)):
            digest.update(block)
            read += len(block)
        check_size(path, read, max_bytes)
    return digest.hexdigest(), _settled_stamp(opened)


def check_size(path: Path, size: int, max_bytes: int) -> None:
    """Refuse a source file of ``size`` bytes beyond ``max_bytes`` (``max_document_bytes``).

    Raises:
        IngestRejectedError: ``too_large``, with the setting to raise in the hint.
    """
    if size > max_bytes:
        raise IngestRejectedError(
            "too_large",
            f"{path.name} is {size:,} bytes; the limit is {max_bytes:,}.",
            hint="Raise max_document_bytes in config.yaml (COFFER_MAX_DOCUMENT_BYTES) or split the file.",
        )


def source_stamp(info: os.stat_result) -> str:
    """A source file's stamp: its modification time, size and inode. A file whose stamp is the same
    is taken to hold the same bytes (what ``make`` and ``rsync`` assume too)."""
    return f"{file_stamp(info)}:{info.st_ino}"


def _settled_stamp(opened: os.stat_result) -> str:
    """The stamp of a file as it was opened, if it can vouch for what was read from it; else "".

    A file written again within the file system's clock tick keeps its modification time, so a
    stamp taken while the file was just being written may name other bytes than those read (git
    calls such entries "racily clean"). A file that had not changed for ``_SETTLED_NS`` before it
    was read (measured after the read) does not have that problem: a minute covers FAT's 2 s
    ticks and a file server's clock some seconds off this one's.
    """
    return source_stamp(opened) if time.time_ns() - opened.st_mtime_ns > _SETTLED_NS else ""
