"""The registry of knowledge bases that every service shares: configs, locks, the index, refresh.

One ``Registry`` per Coffer home. It knows which knowledge bases exist (their folders, mirrored in
the index), reads their ``kb.yaml`` settings, hands out their write locks, and reconciles a
knowledge base with its files before each read (``refresh``). The services (documents,
retrieval, sources, knowledge bases, portability) get it through their constructor; none of them
keeps state of its own about knowledge bases.

Writes to one knowledge base are serialized across threads and processes by its file lock;
reads never take it for long (reconcile-on-read never waits for a write of this process still
being indexed, and at most ``reconcile_lock_wait`` for another writer, then serves the index as
it is).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import stat
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from coffer_mcp.embed import Embedder
from coffer_mcp.errors import CofferError, KnowledgeBaseNotFoundError, StoreError
from coffer_mcp.index import Index
from coffer_mcp.indexing.reconvert import Reconversion
from coffer_mcp.indexing.reindex import Drift, chunk_params, detect_drift, index_document, index_progress, reconcile
from coffer_mcp.models import Progress
from coffer_mcp.rerank import BudgetedReranker, RerankConfig, make_reranker
from coffer_mcp.services.activity import FollowActivity
from coffer_mcp.services.changes import ChangeFeed
from coffer_mcp.services.store_model import StoreEmbedding, embedding_config, model_cache
from coffer_mcp.settings import Settings
from coffer_mcp.store import (
    CREATING,
    DELETING,
    KbConfig,
    KbPaths,
    StorePaths,
    file_lock,
    file_stamp,
    held_here,
    is_document_id,
    path_stamp,
    read_kb_config,
    remove_file,
    unindexed_mark,
    unindexed_since,
    unindexed_writes,
    validate_kb_name,
    write_kb_config,
)
from coffer_mcp.timeutil import utc_now

__all__ = ["BASE_MODES", "VECTOR_MODES", "Registry", "embedding_config", "rerank_config"]

log = logging.getLogger(__name__)

BASE_MODES = ("grep", "keyword")
VECTOR_MODES = ("vector", "hybrid")
_REGISTRY_LOCK = ".registry"
LEASE_SECONDS = 0.2
"""How long a run of writes (``Registry.leased``) keeps a knowledge base's write lock at a time."""


class Registry:
    """The knowledge bases of one Coffer home, and what every service needs to work on them."""

    def __init__(self, settings: Settings, index: Index, *, embedder: Embedder | None = None) -> None:
        """A registry over ``settings.home`` and its ``index``.

        Args:
            settings: The global settings.
            index: The index of this home.
            embedder: An embedder to use instead of the one the settings describe (tests, custom
                providers); it must follow the ``coffer_mcp.embed.Embedder`` protocol.
        """
        self.settings = settings
        self.paths = StorePaths(settings.home)
        self.index = index
        self._guard = threading.Lock()
        self._locked = threading.local()  # .names: the knowledge bases whose write lock this thread holds
        self._configs: dict[str, tuple[str, KbConfig]] = {}
        self._scans = _ScanLog()
        self._checks = _BackgroundChecks(self.check_files)
        self.activity = FollowActivity()
        self.changes = ChangeFeed(index, self.paths)
        self.models = StoreEmbedding(settings, index, self.paths, given=embedder)
        self._reranker: BudgetedReranker | None = None
        self._reranker_made = False

    def prepare_home(self, *, connect: bool = True) -> None:
        """Create the home's folders once the index has accepted the home (``Index.check_home``).

        A home that a shared index refuses as another store's is left as it was. Without
        ``connect``, a shared index not connected yet makes them at its first connection.

        Raises:
            StoreError: ``other_store``, or the home or the database cannot be reached.
        """
        if self.index.check_home(connect=connect):
            self.paths.make_folders()

    # -- the embedder ------------------------------------------------------------------------------

    @property
    def embedder(self) -> Embedder | None:
        """The embedder of the store's model, None when this process does no vector work (``StoreEmbedding``;
        made on first use, the model itself loads on first embed)."""
        return self.models.embedder

    @property
    def reranker(self) -> BudgetedReranker | None:
        """The configured reranker, None when off (made on first use; a model loads on first rerank).

        Raises:
            ConfigError: The rerank settings cannot work.
        """
        if not self._reranker_made:
            with self._guard:
                if not self._reranker_made:
                    self._reranker = make_reranker(rerank_config(self.settings))
                    self._reranker_made = True
        return self._reranker

    def close_reranker(self) -> None:
        """Close the reranker's connections, if one was made (it reconnects when used again)."""
        if self._reranker is not None:
            self._reranker.close()

    def modes(self, config: KbConfig) -> list[str]:
        """The retrieval modes a knowledge base answers with right now."""
        return [*BASE_MODES, *VECTOR_MODES] if config.vector and self.embedder is not None else list(BASE_MODES)

    def wanted_model(self, config: KbConfig) -> str | None:
        """The model whose vectors a KB's documents should have: the store's ('' when there is none)."""
        if not config.vector:
            return None
        return self.models.wanted_identity()

    # -- locks -------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def kb_lock(self, name: str, *, timeout: float | None = None) -> Iterator[None]:
        """Hold the write lock of one knowledge base.

        Files written meanwhile count as unindexed until it is released: the holder indexes
        them first, so this process's readers need not wait for it (see ``refresh``).
        """
        held = self._my_locks()
        if name in held:  # taken by this thread for a run of writes (``leased``)
            yield
            return
        wait = self.settings.lock_timeout if timeout is None else timeout
        self.index.check_home()  # before the lock file: a home refused as another store's is left as it was
        with (
            file_lock(self.paths.lock(name), timeout=wait, what=f"knowledge base '{name}'"),
            self.index.lock(f"kb:{name}", timeout=wait),
            unindexed_writes(),
        ):
            held.add(name)
            try:
                yield
            finally:
                held.discard(name)
                self.changes.touched(name)  # what was committed under the lock is worth a look now

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
                raise self.unknown_kb(kb.name)
            yield

    @contextlib.contextmanager
    def registry_lock(self) -> Iterator[None]:
        """The lock over the list of knowledge bases (creating, deleting, importing one)."""
        wait = self.settings.lock_timeout
        self.index.check_home()  # before the lock file, as in kb_lock
        with (
            file_lock(self.paths.locks / f"{_REGISTRY_LOCK}.lock", timeout=wait, what="the list of knowledge bases"),
            self.index.lock("registry", timeout=wait),
        ):
            try:
                yield
            finally:
                self.changes.touched()

    # -- which knowledge bases exist ---------------------------------------------------------------

    def open_kb(self, name: str) -> tuple[KbPaths, KbConfig]:
        """The paths and settings of an existing knowledge base.

        Raises:
            InvalidNameError: the name breaks the naming rule.
            KnowledgeBaseNotFoundError: no such knowledge base; the hint names those that exist.
        """
        kb = self.paths.kb(validate_kb_name(name))
        try:
            mode = kb.root.lstat().st_mode  # one call on every read: is it there, and a folder or a link
        except OSError:
            mode = 0
        if stat.S_ISLNK(mode):  # never listed (``kb_folders``) nor indexed: a store holds its folders
            raise KnowledgeBaseNotFoundError(
                f"Knowledge base '{name}' does not exist: knowledge/{name} is a symbolic link.",
                hint="A knowledge base is a real folder inside COFFER_HOME/knowledge: move the folder there "
                "instead of linking it, or follow the other folder ({tool:ingest_path} with {arg:follow=true}).",
            )
        if not stat.S_ISDIR(mode):
            raise self.unknown_kb(name)
        if name not in self.index.kb_stamps():
            self.sync()
        return kb, self.config(name)

    def unknown_kb(self, name: str) -> KnowledgeBaseNotFoundError:
        existing = self.kb_folders()
        hint = (
            f"Existing knowledge bases: {', '.join(existing)}."
            if existing
            else "There are no knowledge bases yet; create one first ({tool:create_knowledge_base})."
        )
        return KnowledgeBaseNotFoundError(f"Knowledge base '{name}' does not exist.", hint=hint)

    def config(self, name: str) -> KbConfig:
        """The KB's settings from ``kb.yaml``, parsed again only when the file changed."""
        kb = self.paths.kb(name)
        stamp = path_stamp(kb.config)
        cached = self._configs.get(name)
        if cached and cached[0] == stamp:
            return cached[1]
        config = read_kb_config(kb.config, fallback_time=utc_now())
        self._configs[name] = (stamp, config)
        return config

    def kb_folders(self) -> list[str]:
        """The names of the knowledge-base folders (staging folders and stray names left out)."""
        return self.paths.kb_names()

    def sync(self) -> list[str]:
        """Make the ``knowledge_bases`` rows match the KB folders; returns the KB names."""
        folders = self.kb_folders()
        index = self.index
        wanted = {name: path_stamp(self.paths.kb(name).config) for name in folders}
        known = index.kb_stamps()
        leftovers = [
            p for prefix in (DELETING, CREATING) for p in self.paths.knowledge.glob(f"{prefix}*") if p.is_dir()
        ]
        if wanted == known and not leftovers:
            return folders
        with self.registry_lock():
            for path in leftovers:
                shutil.rmtree(path, ignore_errors=True)
            folders = self.kb_folders()  # again: another process may have changed them meanwhile
            self._apply_registry(folders, index.kb_stamps())
        return folders

    def _apply_registry(self, folders: list[str], known: dict[str, str]) -> None:
        index = self.index
        for name in folders:
            kb = self.paths.kb(name)
            if not kb.config.exists():
                # A folder made by hand: adopt it with default settings.
                with self.kb_lock(name):
                    if not kb.config.exists():
                        write_kb_config(kb.config, self.config(name))
            if known.get(name) != path_stamp(kb.config):
                with index.transaction():
                    index.upsert_kb(name, self.config(name), path_stamp(kb.config))
        gone = [name for name in known if name not in folders]
        if gone:
            with index.transaction():
                for name in gone:
                    index.delete_kb(name)

    # -- reconcile-on-read -------------------------------------------------------------------------

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
        kb, config = self.open_kb(name)
        folder = path_stamp(kb.docs)
        watched = self.activity.docs_watched
        if self._scans.fresh(name, folder, self.settings, watched=watched):
            return config
        if self._scans.big_and_unchanged(name, folder, self.settings, watched=watched):
            self._checks.request(name)
            return config
        self._check_files(kb, config, folder)
        return config

    def check_files(self, name: str) -> None:
        """Compare every file of a knowledge base with the index and reconcile what differs.

        Raises:
            KnowledgeBaseNotFoundError: no such knowledge base (or deleted meanwhile).
        """
        kb, config = self.open_kb(name)
        self._check_files(kb, config, path_stamp(kb.docs))

    def _check_files(self, kb: KbPaths, config: KbConfig, folder: str) -> None:
        name = kb.name
        mark = unindexed_mark()
        started, cpu = time.monotonic(), time.thread_time()
        drift = detect_drift(self.index, kb, config, self.embedder if config.vector else None)
        # The check's cost is the CPU it used, not the time it took: on a busy machine a 1 ms check
        # of a small knowledge base can take 20 ms, and would then wrongly count as a big one's
        # and let the next reads skip it (an edit made by hand unseen for a second).
        self._scans.record(name, folder, started, time.thread_time() - cpu)
        if not drift or self._ours(kb, drift, mark):
            return
        try:
            with self.writing(kb, timeout=self.settings.reconcile_lock_wait):
                self.reconcile_locked(kb, self.config(name))
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
        if drift.foreign or (drift.embeddings_due and not held_here(self.paths.lock(kb.name))):
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
        budget = self.settings.embed_on_read_seconds if embed_seconds == -1.0 else embed_seconds
        embedder = self.embedder if config.vector else None
        return reconcile(
            self.index,
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
        kb, config = self.open_kb(name)
        due = [path for path in dict.fromkeys(files) if self._due(name, config, path)]
        if not due:
            return 0
        with self.writing(kb):
            config = self.config(name)
            due = [path for path in due if self._due(name, config, path)]  # another writer may have indexed them
            ids = [path.stem for path in due if is_document_id(path.stem)]
            if len(ids) < len(due) or self.index.ids_outside(name, ids):
                # A file without an id is adopted, and one whose id another knowledge base holds
                # (copied or moved in by hand) is given a new id or taken over, by a reconcile.
                self.reconcile_locked(kb, config)
            for path in due:
                if not is_document_id(path.stem):
                    continue
                before = self.index.get_document(name, path.stem)
                if not path.exists() and before is None:
                    continue  # no rows of ours to remove (a copy renumbered above: the id is another KB's)
                embedder = self.embedder if config.vector else None
                index_document(self.index, kb, config, path.stem, embedder=embedder)
                if sources is not None and before is not None and before.source_path:
                    after = self.index.get_document(name, path.stem)
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
        row = self.index.get_document(name, path.stem)
        if row is None or info is None or not present:
            return (row is None) == present
        return (row.file_stamp, row.chunk_params) != (file_stamp(info), chunk_params(config))

    def wrote(self, kb: KbPaths) -> None:
        """A write of ours changed ``docs/``: the last full check of it stays as fresh as it was."""
        self._scans.wrote(kb.name, path_stamp(kb.docs))

    def forget(self, name: str) -> None:
        """Drop what is cached about a deleted knowledge base."""
        self._configs.pop(name, None)


def rerank_config(settings: Settings) -> RerankConfig:
    """The reranker's settings, taken from the global ones."""
    key = settings.rerank_api_key
    return RerankConfig(
        provider=settings.rerank_provider,
        model=settings.rerank_model,
        model_path=settings.rerank_model_path,
        cache_dir=model_cache(settings),
        url=settings.rerank_url,
        api_key=key.get_secret_value() if key is not None else None,
        candidates=settings.rerank_candidates,
        timeout_ms=settings.rerank_timeout_ms,
        cooldown_seconds=settings.rerank_cooldown_seconds,
    )


MAX_SCAN_SHARE = 0.05
"""At most this share of a busy reader's time goes to full file checks (a 240 ms check: every 4.8 s)."""
WATCHED_RECHECK_SECONDS = 60.0
"""While a watcher sees ``docs/``, a big knowledge base is still checked in full this often (a safety net)."""


class _ScanLog:
    """When each knowledge base's files were last checked against the index, and what it cost."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[str, float, float]] = {}

    def fresh(self, name: str, folder: str, settings: Settings, *, watched: bool = False) -> bool:
        """Whether the last full check still stands: it was expensive, recent, and the folder is as it was.

        "Recent" is ``reconcile_interval``, stretched for a check so slow that a reader busy
        back to back would otherwise spend more than ``MAX_SCAN_SHARE`` of its time re-checking.
        When a watcher sees the folder (``watched``), a changed folder is the watcher's to apply
        and "recent" is ``WATCHED_RECHECK_SECONDS``.
        """
        last = self._last.get(name)
        if last is None or settings.reconcile_interval <= 0:
            return False
        seen, at, cost = last
        if cost * 1000 <= settings.reconcile_budget_ms:
            return False
        wait = max(settings.reconcile_interval, cost / MAX_SCAN_SHARE)
        if watched:
            return time.monotonic() - at < max(wait, WATCHED_RECHECK_SECONDS)
        return seen == folder and time.monotonic() - at < wait

    def big_and_unchanged(self, name: str, folder: str, settings: Settings, *, watched: bool = False) -> bool:
        """Whether a check now may run in the background: the last one was expensive, and the folder
        is as it was then (or a watcher applies what changes in it)."""
        last = self._last.get(name)
        if last is None or settings.reconcile_interval <= 0:
            return False
        seen, _, cost = last
        return cost * 1000 > settings.reconcile_budget_ms and (watched or seen == folder)

    def record(self, name: str, folder: str, at: float, cost: float) -> None:
        self._last[name] = (folder, at, cost)

    def wrote(self, name: str, folder: str) -> None:
        """Our own write changed the folder: the check stays as fresh as it was."""
        if name in self._last:
            _, at, cost = self._last[name]
            self._last[name] = (folder, at, cost)


class _BackgroundChecks:
    """Full file checks of big knowledge bases, run one at a time by one thread (started on first use).

    One long-lived thread rather than one per check: each thread holds its own index connection.
    """

    def __init__(self, check: Callable[[str], None]) -> None:
        self._check = check
        self._due: dict[str, None] = {}  # an ordered set: knowledge bases waiting for their check
        self._running: str | None = None
        self._closed = False
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def request(self, name: str) -> None:
        """Have ``name`` checked soon, unless a check of it is already waiting or running."""
        with self._changed:
            if self._closed or name in self._due or name == self._running:
                return
            self._due[name] = None
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="coffer-file-checks", daemon=True)
                self._thread.start()
            self._changed.notify_all()

    def idle(self, timeout: float) -> bool:
        """Wait until no check is waiting or running; whether that happened within ``timeout`` seconds."""
        with self._changed:
            return self._changed.wait_for(lambda: not self._due and self._running is None, timeout)

    def close(self, timeout: float) -> None:
        with self._changed:
            self._closed = True
            self._due.clear()
            self._changed.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._due or self._closed)
                if self._closed:
                    return
                name = next(iter(self._due))
                del self._due[name]
                self._running = name
            try:
                self._check(name)
            except KnowledgeBaseNotFoundError:
                pass  # deleted meanwhile
            except Exception:  # the next read asks again; a thread that died would never check again
                log.warning("the background check of knowledge base %s failed", name, exc_info=True)
            finally:
                with self._changed:
                    self._running = None
                    self._changed.notify_all()
