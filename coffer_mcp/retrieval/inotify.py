"""Which files of a folder changed, as the kernel tells it (Linux inotify): a barrier, not a poll.

The kernel queues a watched folder's event before the write, rename or delete that caused it
returns to its caller, so once ``Inotify.drain`` has read the queue empty, every change
completed before that moment is known: what grep's file map (``retrieval/prefilter.py``) needs to
skip files safely. Only folders on local filesystems are watched: a network or FUSE mount does not
report changes made elsewhere, and there (and off Linux, or with no inotify left: the per-user
limit is 128 instances) ``open`` or ``watch`` answers None and grep reads every file as before.
Writes through a shared memory map raise no event; editors and Coffer write files, never maps.
"""

from __future__ import annotations

import logging
import os
import struct
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import ctypes

__all__ = ["Inotify", "Watch"]

logger = logging.getLogger(__name__)

_MODIFY, _ATTRIB, _CLOSE_WRITE = 0x2, 0x4, 0x8
_MOVED_FROM, _MOVED_TO, _CREATE, _DELETE = 0x40, 0x80, 0x100, 0x200
_DELETE_SELF, _MOVE_SELF, _UNMOUNT, _Q_OVERFLOW, _IGNORED = 0x400, 0x800, 0x2000, 0x4000, 0x8000
_ONLYDIR = 0x01000000
_MASK = _MODIFY | _ATTRIB | _CLOSE_WRITE | _MOVED_FROM | _MOVED_TO | _CREATE | _DELETE | _DELETE_SELF | _MOVE_SELF
_GONE = _DELETE_SELF | _MOVE_SELF | _UNMOUNT | _IGNORED
_HEADER = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len; then the name
_READ_SIZE = 64 * 1024
# Filesystems whose changes all pass through this kernel (so through inotify).
LOCAL_FILESYSTEMS = frozenset(
    {"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "ramfs", "f2fs", "bcachefs", "zfs", "jfs", "nilfs2", "overlay"}
)


@dataclass(frozen=True, slots=True)
class Watch:
    """A watched folder: its watch descriptor and which directory (device, inode) it is."""

    wd: int
    folder: Path
    device: int
    inode: int

    def still_there(self) -> bool:
        """Whether ``folder`` is still the directory watched (not removed, nor replaced by another)."""
        try:
            stat = os.stat(self.folder)
        except OSError:
            return False
        return (stat.st_dev, stat.st_ino) == (self.device, self.inode)


class Inotify:
    """One inotify instance watching folders (not their subfolders); ``drain`` says what changed."""

    def __init__(self, fd: int, libc: ctypes.CDLL) -> None:
        self._fd = fd
        self._libc = libc

    @classmethod
    def open(cls) -> Inotify | None:
        """A new feed, or None where the kernel offers none (not Linux, or no inotify instance left)."""
        if not sys.platform.startswith("linux"):
            return None
        import ctypes  # here: a server that never greps twice never loads it

        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        except (OSError, AttributeError):
            return None
        if fd < 0:
            logger.info("no inotify instance for grep's file map: %s", os.strerror(_errno()))
            return None
        return cls(fd, libc)

    def watch(self, folder: Path) -> Watch | None:
        """Start watching ``folder``'s entries; None if it is not a local directory or cannot be watched."""
        try:
            stat = os.stat(folder)
        except OSError:
            return None
        if filesystem_of(folder, stat.st_dev) not in LOCAL_FILESYSTEMS:
            return None
        wd = self._libc.inotify_add_watch(self._fd, os.fsencode(folder), _MASK | _ONLYDIR)
        if wd < 0:
            logger.info("cannot watch %s for grep: %s", folder, os.strerror(_errno()))
            return None
        return Watch(wd, folder, stat.st_dev, stat.st_ino)

    def unwatch(self, watch: Watch) -> None:
        self._libc.inotify_rm_watch(self._fd, watch.wd)  # fails harmlessly if the folder went first

    def drain(self) -> tuple[dict[int, set[str]], set[int], bool]:
        """Read every queued event: names changed per watch, watches whose folder went, and whether
        the queue overflowed (then changes were lost: nothing known about any folder)."""
        changed: dict[int, set[str]] = {}
        gone: set[int] = set()
        overflowed = False
        while data := self._read():
            offset = 0
            while offset < len(data):
                wd, mask, _cookie, length = _HEADER.unpack_from(data, offset)
                name = data[offset + _HEADER.size : offset + _HEADER.size + length].split(b"\0", 1)[0]
                offset += _HEADER.size + length
                if mask & _Q_OVERFLOW:
                    overflowed = True
                elif mask & _GONE:
                    gone.add(wd)
                elif name:
                    changed.setdefault(wd, set()).add(os.fsdecode(name))
        return changed, gone, overflowed

    def _read(self) -> bytes:
        try:
            return os.read(self._fd, _READ_SIZE)
        except BlockingIOError:
            return b""

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _errno() -> int:
    import ctypes

    return ctypes.get_errno()


def filesystem_of(folder: Path, device: int) -> str | None:
    """The type of the filesystem ``folder`` is on (``/proc/self/mountinfo``), None if not found."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as mounts:
            lines = mounts.read().splitlines()
    except OSError:
        return None
    wanted = f"{os.major(device)}:{os.minor(device)}"
    best: tuple[int, str] | None = None
    path = os.path.realpath(folder)
    for line in lines:
        fields, _, tail = line.partition(" - ")
        parts, kinds = fields.split(), tail.split()
        if len(parts) < 5 or not kinds:
            continue
        if parts[2] == wanted:
            return kinds[0]
        point = _unescape(parts[4])
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= best[0]):  # btrfs subvolumes: the deepest mount
            best = (len(point), kinds[0])
    return best[1] if best else None


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash in octal (``\\040``)."""
    for code in ("\\040", "\\011", "\\012", "\\134"):
        field = field.replace(code, chr(int(code[1:], 8)))
    return field
