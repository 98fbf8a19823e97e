"""What changed in the store: documents added, edited or deleted, knowledge bases made or dropped.

Found by comparing what the index says now with what it said at the previous look: every
document's ``file_stamp`` (a new one with every write of its file) and the list of knowledge bases.
So every writer is seen alike: this process, another process on the same SQLite file, another
server on the same PostgreSQL database, an edit made by hand once a reconcile or the watcher has
taken it up. Only the knowledge bases someone tracks (``track``) are looked at.

Reading a knowledge base's stamps costs every one of its rows (115 ms at 30,000 documents on
SQLite; on PostgreSQL an unchanged knowledge base costs one primary-key lookup, its stamps being
cached per generation), so a look reads them only when it may find something: when this process
wrote to the knowledge base (``touched``, called by ``Locks`` when it releases a write lock),
when its ``docs/`` folder changed (every write of a Coffer process renames a file into it, and
its index rows follow within moments: the knowledge base stays *hot*, read at every look, for
``HOT_SECONDS``), when reading it is cheap (``CHEAP_SECONDS``: small knowledge bases, and any on
PostgreSQL), and else every ``RECHECK_SECONDS`` or 20 times what its last read cost (an edit made
in place and taken up by another process changes no folder).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import Literal

from coffer_mcp.index import Index
from coffer_mcp.store import StorePaths, path_stamp

__all__ = ["CHEAP_SECONDS", "HOT_SECONDS", "RECHECK_SECONDS", "Change", "ChangeFeed", "ChangeKind"]

CHEAP_SECONDS = 0.005
"""A knowledge base whose stamps were read in less CPU time than this is read at every look."""
HOT_SECONDS = 5.0
"""How long a knowledge base whose folder or rows changed is read at every look (its writer's
index transaction may come after its files: a folder ingest commits in batches)."""
RECHECK_SECONDS = 10.0
"""At least this often, every tracked knowledge base is read (else 20 times what its read cost)."""

ChangeKind = Literal["added", "edited", "deleted"]


@dataclass(frozen=True, slots=True)
class Change:
    """One thing that changed: a document, or a knowledge base itself (``document_id`` None)."""

    kb: str
    document_id: str | None
    kind: ChangeKind


@dataclass(slots=True)
class _Seen:
    """A knowledge base at its last read."""

    stamps: dict[str, str]
    folder: str
    cost: float
    read_at: float
    hot_until: float


class ChangeFeed:
    """Changes to the tracked knowledge bases, found by comparing each look with the previous one.

    Thread-safe: a server's notifier looks from its own thread while its requests change what is tracked.
    """

    def __init__(self, index: Index, paths: StorePaths) -> None:
        self.index = index
        self.paths = paths
        self._guard = threading.Lock()
        self._wake = threading.Condition()
        self._touched: set[str | None] = set()
        self._every = False
        self._kbs: frozenset[str] = frozenset()
        self._names: set[str] | None = None  # the knowledge bases at the previous look (None: none yet)
        self._seen: dict[str, _Seen] = {}

    def touched(self, kb: str | None = None) -> None:
        """This process wrote to ``kb`` (None: the list of knowledge bases): the next look reads it."""
        with self._wake:
            self._touched.add(kb)
            self._wake.notify_all()

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a write of this process; whether one came."""
        with self._wake:
            return self._wake.wait_for(lambda: bool(self._touched), timeout)

    def track(self, kbs: Collection[str] | None) -> None:
        """Look at ``kbs`` from now on (None: every knowledge base, those made later too).

        A knowledge base tracked anew is read now, so the next look reports what changed after this call.
        """
        with self._guard:
            names = set(self.index.kb_stamps())
            if self._names is None:
                self._names = names
            was_every, was_kbs = self._every, self._kbs
            self._every, self._kbs = kbs is None, frozenset(kbs or ())
            for kb in [kb for kb in self._seen if not self._tracks(kb)]:
                del self._seen[kb]
            # Those tracked already are the next look's to report, even if unread (made since the last one).
            newly = set() if was_every else (names if self._every else set(self._kbs)) - was_kbs
            now = time.monotonic()
            for kb in sorted(newly & names - set(self._seen)):
                self._seen[kb] = self._read(kb, now)

    def look(self) -> list[Change]:
        """What changed in the tracked knowledge bases since the previous look (or ``track``)."""
        with self._wake:
            touched, self._touched = self._touched, set()
        with self._guard:
            names = set(self.index.kb_stamps())
            before = self._names if self._names is not None else names
            self._names = names
            now = time.monotonic()
            tracked = {kb for kb in names if self._tracks(kb)} | set(self._kbs) | set(self._seen)
            changes: list[Change] = []
            for kb in sorted(tracked):
                changes.extend(self._look_at(kb, names, before, kb in touched, now))
            return changes

    def _tracks(self, kb: str) -> bool:
        return self._every or kb in self._kbs

    def _look_at(self, kb: str, names: set[str], before: set[str], touched: bool, now: float) -> Iterator[Change]:
        seen = self._seen.get(kb)
        if kb not in names:  # deleted (or never made): its documents go with it
            if seen is not None:
                del self._seen[kb]
                yield from (Change(kb, doc_id, "deleted") for doc_id in sorted(seen.stamps))
                yield Change(kb, None, "deleted")
            return
        if seen is None:  # made since the previous look (or tracked while it was missing)
            self._seen[kb] = fresh = self._read(kb, now)
            if kb not in before:
                yield Change(kb, None, "added")
            yield from (Change(kb, doc_id, "added") for doc_id in sorted(fresh.stamps))
            return
        folder = path_stamp(self.paths.kb(kb).docs)
        if not (touched or self._due(seen, folder, now)):
            return
        fresh = self._read(kb, now)
        diff = list(_diff(kb, seen.stamps, fresh.stamps))
        if diff or folder != seen.folder:
            fresh.hot_until = now + HOT_SECONDS
        else:
            fresh.hot_until = seen.hot_until
        self._seen[kb] = fresh
        yield from diff

    @staticmethod
    def _due(seen: _Seen, folder: str, now: float) -> bool:
        """Whether a look should read a knowledge base it has not been told was written (see the module docstring)."""
        return (
            folder != seen.folder
            or seen.cost <= CHEAP_SECONDS
            or now < seen.hot_until
            or now - seen.read_at >= max(RECHECK_SECONDS, 20 * seen.cost)
        )

    def _read(self, kb: str, now: float) -> _Seen:
        folder = path_stamp(self.paths.kb(kb).docs)  # before the rows: a write in between is read again
        started = time.thread_time()
        stamps = {doc_id: stamp for doc_id, (stamp, _params) in self.index.doc_stamps(kb).items()}
        return _Seen(stamps, folder, time.thread_time() - started, now, hot_until=0.0)


def _diff(kb: str, before: dict[str, str], after: dict[str, str]) -> Iterator[Change]:
    for doc_id in sorted(before.keys() | after.keys()):
        old, new = before.get(doc_id), after.get(doc_id)
        if old is None:
            yield Change(kb, doc_id, "added")
        elif new is None:
            yield Change(kb, doc_id, "deleted")
        elif old != new:
            yield Change(kb, doc_id, "edited")
