"""Renames and moves inside a followed folder: a document whose file is gone, and a new file of its bytes.

A sync that saw ``notes/a.md`` go and ``notes/b.md`` come, both holding the same bytes, moves the
document of ``a.md`` to ``b.md`` (same id, tags and dates) instead of deleting one and ingesting
the other. A file is taken for the gone one only when it has the same sha256 and the same
extension (another extension is another conversion). Several of one content are paired one to
one, deterministically: a file of the same name first, then in order of path; what is left over
stays a deletion and an addition, so no document is ever lost or merged into another.

Only a new file of the very size of a gone document's source is hashed (the size its source
stamp records, else its original's in ``raw/``): one ``lstat`` rules the others out, so a huge
file that arrives as another goes costs nothing. A gone document whose size is known from
neither (its original deleted by hand) is not looked for: it stays a deletion.

These functions only read files; ``FollowService`` decides, and ``DocumentService.move_source``
writes.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from pathlib import Path

from coffer_mcp.access import stamped_sha256_source
from coffer_mcp.errors import CofferError
from coffer_mcp.services.folders import visible_files

__all__ = ["extension", "hash_files", "pair_moves", "same_size_files", "stamp_size"]


def hash_files(
    files: Iterable[str], folder: str, sizes: Collection[tuple[int, str]], *, max_bytes: int
) -> dict[str, tuple[str, str]]:
    """``{path: (sha256, stamp)}`` of the files whose ``(size, extension)`` is one of ``sizes``.

    Only files of a gone document's size are read (one ``lstat`` decides), and none beyond
    ``max_bytes``: a huge file dropped in while another is deleted is never hashed. Only files
    reached without a symbolic link, inside ``folder``; one that cannot be read is left out (its
    ingest says why).
    """
    hashed = {}
    for path in files:
        try:
            size = os.lstat(path).st_size
            if (size, extension(path)) not in sizes or size > max_bytes or os.path.realpath(path) != path:
                continue
            hashed[path] = stamped_sha256_source(Path(path), [Path(folder)], max_bytes=max_bytes)
        except (CofferError, OSError):
            continue
    return hashed


def pair_moves(gone: Sequence[tuple[str, str]], found: Mapping[str, tuple[str, str]]) -> dict[str, str]:
    """``{gone source path: new path}`` for the gone ``(source path, sha256)`` that a found
    ``{path: (sha256, stamp)}`` holds the bytes of, one to one (see the module's docstring)."""
    free: dict[tuple[str, str], list[str]] = defaultdict(list)
    for path, (sha, _) in sorted(found.items()):
        free[sha, extension(path)].append(path)
    moves: dict[str, str] = {}
    for same_name in (True, False):
        for source, sha in sorted(gone):
            candidates = free.get((sha, extension(source)))
            if source in moves or not candidates:
                continue
            name = os.path.basename(source)
            pick = next((c for c in candidates if os.path.basename(c) == name or not same_name), None)
            if pick is not None:
                candidates.remove(pick)
                moves[source] = pick
    return moves


def same_size_files(folder: str, sizes: Collection[tuple[int, str]], skip: Collection[str]) -> list[str]:
    """The visible files of ``folder`` (but ``skip``) whose ``(size, extension)`` is one of ``sizes``.

    A walk with one ``lstat`` per file: what finds where a file went when the watcher reported only
    that it is gone (the new name comes in a later batch, or was applied already).
    """
    found = []
    for file in visible_files(Path(folder)):
        path = str(file)
        try:
            size = os.lstat(path).st_size
        except OSError:
            continue
        if (size, extension(path)) in sizes and path not in skip:
            found.append(path)
    return found


def stamp_size(stamp: str) -> int | None:
    """The size a source stamp (``mtime_ns:size:inode``) records, or None ("" vouches for nothing)."""
    parts = stamp.split(":")
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None


def extension(path: str) -> str:
    """A path's extension in lower case (what decides its conversion), "" without one."""
    return os.path.splitext(path)[1].lower()
