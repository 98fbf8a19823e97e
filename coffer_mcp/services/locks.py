"""The write locks of a Coffer home: one per knowledge base, one over the list of knowledge bases.

Writes to one knowledge base are serialized across threads and processes by its file lock (and,
on a shared index, the index's lock of the same name). Files written under it count as unindexed
until it is released: the holder indexes them first, so this process's readers need not wait for
it (``Freshness.refresh``). Releasing a lock tells the change feed that the knowledge base (or the
list) is worth a look.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator

from coffer_mcp.errors import CofferError, KnowledgeBaseNotFoundError
from coffer_mcp.index import Index
from coffer_mcp.services.changes import ChangeFeed
from coffer_mcp.settings import Settings
from coffer_mcp.store import KbPaths, StorePaths, file_lock, unindexed_writes

__all__ = ["LEASE_SECONDS", "Locks", "unknown_kb"]

_REGISTRY_LOCK = ".registry"
LEASE_SECONDS = 0.2
"""How long a run of writes (``Locks.leased``) keeps a knowledge base's write lock at a time."""


class Locks:
    """The write locks of one Coffer home, and which of them this thread holds."""

    def __init__(self, settings: Settings, paths: StorePaths, index: Index, changes: ChangeFeed) -> None:
        self._settings = settings
        self._paths = paths
        self._index = index
        self._changes = changes
        self._locked = threading.local()  # .names: the knowledge bases whose write lock this thread holds

    @contextlib.contextmanager
    def kb_lock(self, name: str, *, timeout: float | None = None) -> Iterator[None]:
        """Hold the write lock of one knowledge base.

        Files written meanwhile count as unindexed until it is released: the holder indexes
        them first, so this process's readers need not wait for it (see ``Freshness.refresh``).
        """
        held = self._my_locks()
        if name in held:  # taken by this thread for a run of writes (``leased``)
            yield
            return
        wait = self._settings.lock_timeout if timeout is None else timeout
        self._index.check_home()  # before the lock file: a home refused as another store's is left as it was
        with (
            file_lock(self._paths.lock(name), timeout=wait, what=f"knowledge base '{name}'"),
            self._index.lock(f"kb:{name}", timeout=wait),
            unindexed_writes(),
        ):
            held.add(name)
            try:
                yield
            finally:
                held.discard(name)
                self._changes.touched(name)  # what was committed under the lock is worth a look now

    @contextlib.contextmanager
    def leased(
        self, kb: KbPaths, *, turn: float = LEASE_SECONDS, before_release: Callable[[], None] = lambda: None
    ) -> Iterator[Callable[[bool], None]]:
        """Keep a knowledge base's write lock from one write to the next of a run (a folder ingest).

        Yields ``renew(hold)``, to call before each write. With ``hold`` it takes the lock when it
        is free (without waiting), and gives it up once it has been held ``turn`` seconds, leaving
        that write to take it on its own, so that other writers waiting for it get their turn.
        Without ``hold`` (a write slow to prepare: a PDF to convert) it gives the lock up. Writes
        made while it is held skip their own lock and unlock (two round trips each on
        PostgreSQL); when it is busy, each write waits for it as it would alone.
        ``before_release()`` runs whenever the lease is about to give the lock up (a run's
        unfinished write finishes under it).
        """
        lease = contextlib.ExitStack()
        taken_at: float | None = None

        def renew(hold: bool) -> None:
            nonlocal taken_at
            if taken_at is not None:
                if hold and time.monotonic() - taken_at < turn:
                    return
                before_release()
                lease.close()
                taken_at = None
                return  # this write takes the lock on its own: a waiting writer may go first
            if not hold:
                return
            try:
                lease.enter_context(self.writing(kb, timeout=0))
            except CofferError:
                return  # busy, deleted, the database away: the write itself waits, or reports it
            taken_at = time.monotonic()

        with lease:
            try:
                yield renew
            finally:
                if taken_at is not None:
                    before_release()

    def holds(self, name: str) -> bool:
        """Whether this thread holds the write lock of knowledge base ``name``."""
        return name in self._my_locks()

    def _my_locks(self) -> set[str]:
        names: set[str] | None = getattr(self._locked, "names", None)
        if names is None:
            names = self._locked.names = set()
        return names

    @contextlib.contextmanager
    def writing(self, kb: KbPaths, *, timeout: float | None = None) -> Iterator[None]:
        """Hold a knowledge base's write lock, after checking it was not deleted meanwhile."""
        with self.kb_lock(kb.name, timeout=timeout):
            if not kb.root.is_dir():
                raise unknown_kb(self._paths, kb.name)
            yield

    @contextlib.contextmanager
    def registry_lock(self) -> Iterator[None]:
        """The lock over the list of knowledge bases (creating, deleting, importing one)."""
        wait = self._settings.lock_timeout
        self._index.check_home()  # before the lock file, as in kb_lock
        with (
            file_lock(self._paths.locks / f"{_REGISTRY_LOCK}.lock", timeout=wait, what="the list of knowledge bases"),
            self._index.lock("registry", timeout=wait),
        ):
            try:
                yield
            finally:
                self._changes.touched()


def unknown_kb(paths: StorePaths, name: str) -> KnowledgeBaseNotFoundError:
    """The error for knowledge base ``name``, which has no folder: the hint names those that exist."""
    existing = paths.kb_names()
    hint = (
        f"Existing knowledge bases: {', '.join(existing)}."
        if existing
        else "There are no knowledge bases yet; create one first ({tool:create_knowledge_base})."
    )
    return KnowledgeBaseNotFoundError(f"Knowledge base '{name}' does not exist.", hint=hint)
