"""File helpers shared by packs and snapshots: hashed copies, durable folders, fresh staging names."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from ulid import ULID

from coffer_mcp.errors import StoreError
from coffer_mcp.store import DELETING, IMPORTING, StorePaths, file_lock, remove_file
from coffer_mcp.store.files import TEMP_MARKER, fsync_dir

__all__ = [
    "CHUNK",
    "copy_hashed",
    "fsync_tree",
    "hash_file",
    "owned_staging",
    "remove_abandoned_imports",
    "remove_abandoned_staging",
    "remove_tree",
    "visible_files",
]

CHUNK = 64 * 1024


def copy_hashed(source: IO[bytes], dest: Path, *, size: int | None = None) -> tuple[str, int]:
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
    aside = path.with_name(f"{DELETING}{path.name}-{ULID()}")
    with contextlib.suppress(FileNotFoundError):
        os.rename(path, aside)
        shutil.rmtree(aside, ignore_errors=True)


@contextlib.contextmanager
def owned_staging(parent: Path, prefix: str, locks: Path) -> Iterator[Path]:
    """A new, empty folder ``parent/<prefix><ULID>`` that this process owns until the block ends.

    Ownership is a lock on ``locks/<prefix><ULID>.lock``, taken before the folder exists and
    released by the OS when the process dies: so ``remove_abandoned_staging`` (run when a store
    opens) removes exactly the folders of killed processes, at once, and never a live one.
    The folder is removed when the block ends.
    """
    name = f"{prefix}{ULID()}"
    lock = locks / f"{name}.lock"
    with file_lock(lock, timeout=0, what="a new staging folder"):
        path = parent / name
        try:
            parent.mkdir(parents=True, exist_ok=True)
            path.mkdir()
            yield path
        finally:
            shutil.rmtree(path, ignore_errors=True)
            remove_file(lock)


def remove_abandoned_staging(parent: Path, prefix: str, locks: Path) -> int:
    """Remove the ``parent/<prefix>*`` folders no live process owns; returns how many went."""
    removed = 0
    for folder in parent.glob(f"{prefix}*"):
        lock = locks / f"{folder.name}.lock"
        try:
            with file_lock(lock, timeout=0, what="a staging folder"):
                shutil.rmtree(folder, ignore_errors=True)
                remove_file(lock)
        except StoreError:
            continue  # its owner is alive
        removed += 1
    return removed


def remove_abandoned_imports(paths: StorePaths) -> int:
    """Remove the staging folders of imports whose process died (run when the store opens)."""
    return remove_abandoned_staging(paths.knowledge, IMPORTING, paths.locks)
