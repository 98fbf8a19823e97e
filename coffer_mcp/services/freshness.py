"""Reconcile-on-read: a knowledge base's index brought in line with its files before a read.

Reads never take a knowledge base's write lock for long: reconcile-on-read never waits for a
write of this process still being indexed, and at most ``reconcile_lock_wait`` for another
writer, then serves the index as it is. A watcher's changes to ``docs/`` are applied file by
file (``reindex_changed``), through the one reindex routine.
"""

from __future__ import annotations

import logging
import os
import stat
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from coffer_mcp.errors import KnowledgeBaseNotFoundError, StoreError
from coffer_mcp.index import Index
from coffer_mcp.indexing.reconvert import Reconversion
from coffer_mcp.indexing.reindex import Drift, chunk_params, detect_drift, index_document, index_progress, reconcile
from coffer_mcp.models import Progress
from coffer_mcp.services.activity import FollowActivity
from coffer_mcp.services.catalogue import Catalogue
from coffer_mcp.services.locks import Locks
from coffer_mcp.services.providers import Providers
from coffer_mcp.services.scans import BackgroundChecks, ScanLog
from coffer_mcp.settings import Settings
from coffer_mcp.store import (
    KbConfig,
    KbPaths,
    StorePaths,
    file_stamp,
    held_here,
    is_document_id,
    path_stamp,
    remove_file,
    unindexed_mark,
    unindexed_since,
)

__all__ = ["Freshness"]

log = logging.getLogger(__name__)


class Freshness:
    """Keeps each knowledge base's index in line with its files: on reads, on a watcher's changes."""

    def __init__(
        self,
        settings: Settings,
        paths: StorePaths,
        index: Index,
        *,
        catalogue: Catalogue,
        locks: Locks,
        providers: Providers,
        activity: FollowActivity,
    ) -> None:
        self._settings = settings
        self._paths = paths
        self._index = index
        self._catalogue = catalogue
        self._locks = locks
        self._providers = providers
        self._activity = activity
        self._scans = ScanLog()
        self._checks = BackgroundChecks(self.check_files)

    def refresh(self, name: str) -> KbConfig:
        """Reconcile one knowledge base with its files before a read (cheap when nothing moved).

        Every file is ``stat``-ed — unless the last such check took longer than
        ``reconcile_budget_ms`` (a big knowledge base). A big knowledge base is checked again once
        ``reconcile_interval`` has passed since its last check (or 20 times the check's cost, when
        one check takes longer than ``MAX_SCAN_SHARE`` of that), and off the read path: the read
        that finds it due asks a background thread for the check and is served the index as it
        is, so no read waits for a stat of every file (120-260 ms at 28,891 files). Edits made in
        place are seen once that check has run. A change to the ``docs/`` folder itself (a file
        added, removed or replaced by a save-by-rename editor) is still checked on the read that
        sees it. While a watcher of this process sees every change to ``docs/``
        (``activity.docs_watched``), a big knowledge base's files are checked at most every
        ``WATCHED_RECHECK_SECONDS`` (what the watcher applies is seen as soon as it is applied).

        Returns the knowledge base's settings, as ``open_kb`` does: a read needs open it no second time.
        """
        kb, config = self._catalogue.open_kb(name)
        folder = path_stamp(kb.docs)
        watched = self._activity.docs_watched
        if self._scans.fresh(name, folder, self._settings, watched=watched):
            return config
        if self._scans.big_and_unchanged(name, folder, self._settings, watched=watched):
            self._checks.request(name)
            return config
        self._check_files(kb, config, folder)
        return config

    def check_files(self, name: str) -> None:
        """Compare every file of a knowledge base with the index and reconcile what differs.

        Raises:
            KnowledgeBaseNotFoundError: no such knowledge base (or deleted meanwhile).
        """
        kb, config = self._catalogue.open_kb(name)
        self._check_files(kb, config, path_stamp(kb.docs))

    def _check_files(self, kb: KbPaths, config: KbConfig, folder: str) -> None:
        name = kb.name
        mark = unindexed_mark()
        started, cpu = time.monotonic(), time.thread_time()
        drift = detect_drift(self._index, kb, config, self._providers.embedder if config.vector else None)
        # The check's cost is the CPU it used, not the time it took: on a busy machine a 1 ms check
        # of a small knowledge base can take 20 ms, and would then wrongly count as a big one's
        # and let the next reads skip it (an edit made by hand unseen for a second).
        self._scans.record(name, folder, started, time.thread_time() - cpu)
        if not drift or self._ours(kb, drift, mark):
            return
        try:
            with self._locks.writing(kb, timeout=self._settings.reconcile_lock_wait):
                self.reconcile_locked(kb, self._catalogue.config(name))
                self.wrote(kb)
        except StoreError as exc:
            if exc.code != "busy":
                raise
            log.info("knowledge base %s is busy; serving the index as it is", name)

    def checks_done(self, timeout: float) -> bool:
        """Wait for the background checks asked for so far; whether they were done within ``timeout`` seconds."""
        return self._checks.idle(timeout)

    def close_checks(self, timeout: float = 10.0) -> None:
        """Stop the background checks of big knowledge bases (one running is waited for)."""
        self._checks.close(timeout)

    def _ours(self, kb: KbPaths, drift: Drift, mark: int) -> bool:
        """Whether all of ``drift`` is writes of this process, indexed by their writer or being so.

        Those writes were still unacknowledged when the scan began, so waiting for the lock
        would only stall this read behind writes it need not see and then find nothing left to
        do. Due embeddings count as ours while a thread of this process holds the lock: a writer
        embeds its own document, and an older backlog is picked up by the next read that finds
        the lock free. Drift from anything else (an editor, another process) is reconciled.
        """
        if drift.foreign or (drift.embeddings_due and not held_here(self._paths.lock(kb.name))):
            return False
        return all(unindexed_since(kb.doc(doc_id), mark) for doc_id in (*drift.changed, *drift.removed))

    def refresh_many(self, names: Sequence[str], *, vanished_ok: bool = False) -> dict[str, KbConfig]:
        """Refresh each knowledge base: their settings, by name in the order given. With ``vanished_ok``,
        those another process deleted meanwhile are left out."""
        present = {}
        for name in names:
            try:
                present[name] = self.refresh(name)
            except KnowledgeBaseNotFoundError:
                if not vanished_ok:
                    raise
        return present

    def reconcile_locked(
        self,
        kb: KbPaths,
        config: KbConfig,
        *,
        force: bool = False,
        progress: Progress | None = None,
        embed_seconds: float | None = -1.0,
        tidy: bool = False,
        reconversion: Reconversion | None = None,
    ) -> dict[str, int]:
        """Reconcile under the KB lock; ``embed_seconds`` -1 means the read budget from settings."""
        report = index_progress(progress)
        budget = self._settings.embed_on_read_seconds if embed_seconds == -1.0 else embed_seconds
        embedder = self._providers.embedder if config.vector else None
        return reconcile(
            self._index,
            kb,
            config,
            force=force,
            progress=report,
            embedder=embedder,
            embed_seconds=budget,
            tidy=tidy,
            reconversion=reconversion,
        )

    def reindex_changed(self, name: str, files: Iterable[Path], *, sources: set[str] | None = None) -> int:
        """Index the files of a knowledge base's ``docs/`` that a watcher saw change: O(changes).

        A file already indexed as it is — a write of this or of another Coffer process — costs a
        ``stat`` and one row read; a file edited, added or removed by hand goes through the one
        reindex routine under the knowledge base's lock (a Markdown file without an id, or one copied
        in from another knowledge base, is adopted by a reconcile). Returns how many files were applied.
        ``sources`` gets the ``source_path`` of each document this removed or moved to another version
        of its source (a file deleted or replaced by hand, an older copy put back): a followed
        folder's file may have no document now.
        """
        kb, config = self._catalogue.open_kb(name)
        due = [path for path in dict.fromkeys(files) if self._due(name, config, path)]
        if not due:
            return 0
        with self._locks.writing(kb):
            config = self._catalogue.config(name)
            due = [path for path in due if self._due(name, config, path)]  # another writer may have indexed them
            ids = [path.stem for path in due if is_document_id(path.stem)]
            if len(ids) < len(due) or self._index.ids_outside(name, ids):
                # A file without an id is adopted, and one whose id another knowledge base holds
                # (copied or moved in by hand) is given a new id or taken over, by a reconcile.
                self.reconcile_locked(kb, config)
            for path in due:
                if not is_document_id(path.stem):
                    continue
                before = self._index.get_document(name, path.stem)
                if not path.exists() and before is None:
                    continue  # no rows of ours to remove (a copy renumbered above: the id is another KB's)
                embedder = self._providers.embedder if config.vector else None
                index_document(self._index, kb, config, path.stem, embedder=embedder)
                if sources is not None and before is not None and before.source_path:
                    after = self._index.get_document(name, path.stem)
                    if after is None or (after.source_path, after.source_sha256) != (
                        before.source_path,
                        before.source_sha256,
                    ):
                        sources.add(before.source_path)
                if not path.exists():
                    for raw in kb.companions(path.stem):  # a document deleted by hand takes its original along
                        remove_file(raw)
            self.wrote(kb)
        return len(due)

    def _due(self, name: str, config: KbConfig, path: Path) -> bool:
        """Whether a file of ``docs/`` differs from what the index says about it (as ``detect_drift`` decides)."""
        if path.suffix != ".md" or path.name.startswith("."):
            return False
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            info = None
        present = info is not None and stat.S_ISREG(info.st_mode)
        if not is_document_id(path.stem):
            return present  # a Markdown file dropped in by hand: adopted
        row = self._index.get_document(name, path.stem)
        if row is None or info is None or not present:
            return (row is None) == present
        return (row.file_stamp, row.chunk_params) != (file_stamp(info), chunk_params(config))

    def wrote(self, kb: KbPaths) -> None:
        """A write of ours changed ``docs/``: the last full check of it stays as fresh as it was."""
        self._scans.wrote(kb.name, path_stamp(kb.docs))
