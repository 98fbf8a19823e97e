"""Documents copied by hand from one knowledge base's folder into another's get ids of their own.

Document ids are unique across the store (one row per id), so ``cp -r knowledge/a knowledge/b``
— or one ``docs/<id>.md`` copied from ``a`` into ``b`` — leaves two files that claim one id. The
knowledge base whose rows already hold the id keeps it (the original); the newcomer's file is
given a new id, as an imported pack's documents are when their ids are taken. A file whose id is
held by another knowledge base that no longer has that file was *moved* by hand: it keeps its id
and the rows follow it.

The new id is derived from the old one and the knowledge base's name (the old id's time, then
80 bits of a hash): a renumbering cut short by a crash is finished by the next read with the
same id, never leaving the copy under two ids.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import count
from pathlib import Path

from coffer_mcp.index import Index
from coffer_mcp.store import (
    KbPaths,
    atomic_write,
    fsync_dir,
    note_unindexed,
    parse_document,
    read_store_file,
    render_document,
)

__all__ = ["Copy", "copy_id", "renumber_copies"]

log = logging.getLogger(__name__)

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


@dataclass(frozen=True, slots=True)
class Copy:
    """A document copied in by hand, and the new id it was given."""

    old_id: str
    new_id: str
    source_kb: str
    """The knowledge base that kept ``old_id``."""


def renumber_copies(index: Index, kb: KbPaths, doc_ids: Sequence[str]) -> list[Copy]:
    """Give a new id to each of ``doc_ids`` (files of ``kb``'s ``docs/`` without a row in ``kb``)
    whose id another knowledge base's rows hold while its file is still there.

    Call holding ``kb``'s lock.
    """
    holders = index.ids_outside(kb.name, doc_ids) if doc_ids else {}
    copies = []
    for old_id, holder in sorted(holders.items()):
        if not _is_file(kb.root.parent / holder / "docs" / f"{old_id}.md"):
            continue  # moved here by hand: the id comes along
        new_id = _renumber(index, kb, old_id)
        if new_id is not None:
            copies.append(Copy(old_id, new_id, holder))
            log.info("document %s of %s is a copy of %s's: it is now %s", old_id, kb.name, holder, new_id)
    return copies


def _renumber(index: Index, kb: KbPaths, old_id: str) -> str | None:
    """Move ``docs/<old_id>.md`` and its originals to a new id; that id, or None if the file went.

    Every step is one atomic rename, so the document is always one file: its originals move
    first, then its frontmatter is given the new id in place, then the Markdown file is renamed
    (the commit point). A crash between two steps leaves the file under its old name, and the
    next read finishes the job with the same new id.
    """
    path = kb.doc(old_id)
    try:
        data, _ = read_store_file(path)
    except FileNotFoundError:
        return None
    new_id = next(c for c in (copy_id(kb.name, old_id, n) for n in count()) if not _taken(index, kb, c))
    renamed = kb.doc(new_id)
    for raw in kb.raw_files(old_id):
        _rename(raw, raw.with_name(f"{new_id}{raw.suffix}"))
    if kb.source_map(old_id).exists():
        _rename(kb.source_map(old_id), kb.source_map(new_id))
    meta, body = parse_document(data.decode("utf-8", errors="replace"))
    if meta is not None and meta.get("id") != new_id:
        atomic_write(path, render_document({**meta, "id": new_id}, body).encode("utf-8"))
    _rename(path, renamed)
    return new_id


def copy_id(kb_name: str, old_id: str, attempt: int = 0) -> str:
    """The id a copy of document ``old_id`` gets in knowledge base ``kb_name`` (the same every time):
    the old id's time (its first 10 characters), then 80 bits of a hash."""
    digest = hashlib.sha256(f"{kb_name}\0{old_id}\0{attempt}".encode()).digest()
    bits = int.from_bytes(digest[:10], "big")
    return old_id[:10] + "".join(_CROCKFORD[(bits >> shift) & 31] for shift in range(75, -1, -5))


def _taken(index: Index, kb: KbPaths, doc_id: str) -> bool:
    """Whether ``doc_id`` names a file of ``kb`` or rows of any knowledge base (none is named '')."""
    return os.path.lexists(kb.doc(doc_id)) or bool(index.ids_outside("", [doc_id]))


def _rename(source: Path, target: Path) -> None:
    note_unindexed([source, target])
    os.replace(source, target)
    fsync_dir(target.parent)


def _is_file(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False
