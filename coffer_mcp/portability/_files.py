"""File helpers shared by packs and snapshots: hashed copies, durable folders, fresh staging names."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from ulid import ULID

from coffer_mcp.store.files import TEMP_MARKER, fsync_dir

__all__ = ["CHUNK", "copy_hashed", "fsync_tree", "hash_file", "remove_tree", "staging_dir", "visible_files"]

CHUNK = 64 * 1024
_STALE_MS = 24 * 3600 * 1000


def copy_hashed(source: BinaryIO, dest: Path, *, size: int | None = None) -> tuple[str, int]:
    """Copy ``source`` into a new file ``dest`` (never overwriting, never following a link).

    Reads at most ``size`` bytes when given. The file is fsynced before it is closed, so a folder
    renamed into place afterwards holds complete files. Returns (sha256, bytes copied).
    """
    digest, copied = hashlib.sha256(), 0
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
    fd = os.open(dest, flags, 0o644)
    with os.fdopen(fd, "wb") as out:
        while size is None or copied < size:
            block = source.read(CHUNK if size is None else min(CHUNK, size - copied))
            if not block:
                break
            digest.update(block)
            out.write(block)
            copied += len(block)
        out.flush()
        os.fsync(out.fileno())
    return digest.hexdigest(), copied


def hash_file(path: Path) -> tuple[str, int]:
    """(sha256, size) of a file, streamed."""
    digest, size = hashlib.sha256(), 0
    with path.open("rb") as handle:
        while block := handle.read(CHUNK):
            digest.update(block)
            size += len(block)
    return digest.hexdigest(), size


def visible_files(folder: Path) -> Iterator[Path]:
    """Regular files directly in ``folder``, by name; hidden, temp files and links skipped."""
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except FileNotFoundError:
        return
    for entry in entries:
        if entry.name.startswith(".") or TEMP_MARKER in entry.name:
            continue
        if entry.is_file(follow_symlinks=False):
            yield Path(entry.path)


def fsync_tree(root: Path) -> None:
    """Make the folders under ``root`` (and ``root`` itself) durable."""
    for folder, dirs, _ in os.walk(root):
        for name in dirs:
            fsync_dir(Path(folder) / name)
    fsync_dir(root)


def remove_tree(path: Path) -> None:
    """Remove a folder: renamed aside first, so a crash never leaves it half there under its name."""
    if not path.exists():
        return
    aside = path.with_name(f".deleting-{path.name}-{ULID()}")
    with contextlib.suppress(FileNotFoundError):
        os.rename(path, aside)
        shutil.rmtree(aside, ignore_errors=True)


def staging_dir(parent: Path, prefix: str) -> Path:
    """A new, empty folder ``parent/<prefix><ULID>``; stale ones (a day old) left by crashes go."""
    parent.mkdir(parents=True, exist_ok=True)
    now_ms = int(ULID().milliseconds)
    for old in parent.glob(f"{prefix}*"):
        with contextlib.suppress(ValueError):
            if now_ms - ULID.from_str(old.name[len(prefix):]).milliseconds > _STALE_MS:
                shutil.rmtree(old, ignore_errors=True)
    path = parent / f"{prefix}{ULID()}"
    path.mkdir()
    return path
