"""The application service every surface calls: knowledge bases, retrieval, reindex.

A plain synchronous core. The MCP server and the web app call it from worker threads; each
thread gets its own SQLite connection. Writes to one knowledge base are serialized across
threads and processes by its file lock; reads never take it for long (reconcile-on-read never
waits for a write of this process still being indexed, and at most ``reconcile_lock_wait`` for
another writer, then serves the index as it is).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from ulid import ULID

from coffer_mcp.audit import AuditEvent
from coffer_mcp.curation import CurationOperations
from coffer_mcp.documents import DocumentOperations
from coffer_mcp.retrieval import KbSelector, RetrievalOperations
from coffer_mcp.embed import Embedder, EmbeddingConfig, make_embedder
from coffer_mcp import __version__
from coffer_mcp.errors import (
    CofferError,
    ConfigError,
    InvalidArgumentError,
    KnowledgeBaseExistsError,
    KnowledgeBaseNotFoundError,
    StoreError,
)
from coffer_mcp.index import queries as q
from coffer_mcp.index import vectors
from coffer_mcp.grep import rg_status
from coffer_mcp.index.db import Connection, binding, connect, database_errors, vec_version
from coffer_mcp.index.schema import migrate
from coffer_mcp.models import (
    DeleteResult,
    DoctorReport,
    EmbedderStatus,
    VerifyReport,
    KnowledgeBaseDetails,
    KnowledgeBaseSummary,
    ReindexResult,
)
from coffer_mcp.reconvert import Reconversion, conversion_options
from coffer_mcp.reindex import Drift, detect_drift, index_progress, reconcile
from coffer_mcp.settings import Settings
from coffer_mcp.store import (
    CREATING,
    DELETING,
    KbConfig,
    KbPaths,
    StorePaths,
    file_lock,
    held_here,
    make_kb_config,
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
from coffer_mcp.verify import vector_orphans, verify_fts, verify_kb

__all__ = ["Coffer", "KbSelector", "Progress"]

log = logging.getLogger(__name__)

Progress = Callable[[int, int, str], None]
"""``progress(done, total, message)``, called during long operations."""

BASE_MODES = ("grep", "keyword")
VECTOR_MODES = ("vector", "hybrid")
_REGISTRY_LOCK = ".registry"


class Coffer(DocumentOperations, RetrievalOperations, CurationOperations):
    """The Coffer core over one ``COFFER_HOME``."""

    def __init__(self, settings: Settings, *, embedder: Embedder | None = None) -> None:
        """A service over ``settings.home``.

        Args:
            settings: The global settings.
            embedder: An embedder to use instead of the one the settings describe (tests, custom
                providers); it must follow the ``coffer_mcp.embed.Embedder`` protocol.
        """
        self.settings = settings
        self.paths = StorePaths(settings.home)
        self._local = threading.local()
        self._connections: list[Connection] = []
        self._guard = threading.Lock()
        self._ready = False
        self._configs: dict[str, tuple[str, KbConfig]] = {}
        self._scans = _ScanLog()
        self._embedder: Embedder | None = embedder
        self._embedder_made = embedder is not None

    # -- plumbing --------------------------------------------------------------------------------

    @property
    def conn(self) -> Connection:
        """This thread's connection to the index (opened, and the schema migrated, on first use)."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            self._prepare_home()
            conn = connect(self.paths.db)
            with self._guard:
                if not self._ready:
                    self._migrate(conn)
                    # A restore a crash interrupted is finished (or rolled back) before anything reads,
                    # and the staging folders of killed imports (gigabytes, maybe) are removed.
                    from coffer_mcp.portability import recover_interrupted_restores, remove_abandoned_imports

                    recover_interrupted_restores(self.paths)
                    remove_abandoned_imports(self.paths)
                    self._ready = True
                self._connections.append(conn)
            self._local.conn = conn
        return conn

    def close(self) -> None:
        """Close every connection this service opened."""
        with self._guard:
            for conn in self._connections:
                with contextlib.suppress(*database_errors()):
                    conn.close()
            self._connections.clear()
            self._local = threading.local()
            self._ready = False

    def __enter__(self) -> Coffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _prepare_home(self) -> None:
        try:
            self.paths.knowledge.mkdir(parents=True, exist_ok=True)
            self.paths.locks.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(
                f"Cannot create the Coffer home {self.paths.home}: {exc.strerror}.",
                hint="Set COFFER_HOME to a writable folder.",
            ) from exc

    def _migrate(self, conn: Connection) -> None:
        try:
            migrate(conn)
        except database_errors() as exc:
            raise StoreError(
                f"The index database {self.paths.db} is unusable: {exc}.",
                hint="The index is rebuildable: move coffer.db away and run 'coffer kb reindex --all'.",
            ) from exc

    @property
    def embedder(self) -> Embedder | None:
        """The configured embedder (made on first use; the model itself loads on first embed)."""
        if not self._embedder_made:
            with self._guard:
                if not self._embedder_made:
                    self._embedder = make_embedder(embedding_config(self.settings))
                    self._embedder_made = True
        return self._embedder

    def modes(self, config: KbConfig) -> list[str]:
        """The retrieval modes a knowledge base answers with right now."""
        return [*BASE_MODES, *VECTOR_MODES] if config.vector and self.embedder is not None else list(BASE_MODES)

    def _wanted_model(self, config: KbConfig) -> str | None:
        """The model whose vectors a KB's documents should have ('' when vector has no embedder)."""
        if not config.vector:
            return None
        return self.embedder.identity if self.embedder is not None else ""

    @contextlib.contextmanager
    def kb_lock(self, name: str, *, timeout: float | None = None) -> Iterator[None]:
        """Hold the write lock of one knowledge base.

        Files written meanwhile count as unindexed until it is released: the holder indexes
        them first, so this process's readers need not wait for it (see ``refresh``).
        """
        with file_lock(
            self.paths.lock(name),
            timeout=self.settings.lock_timeout if timeout is None else timeout,
            what=f"knowledge base '{name}'",
        ), unindexed_writes():
            yield

    @contextlib.contextmanager
    def writing(self, kb: KbPaths, *, timeout: float | None = None) -> Iterator[None]:
        """Hold a knowledge base's write lock, after checking it was not deleted meanwhile."""
        with self.kb_lock(kb.name, timeout=timeout):
            if not kb.root.is_dir():
                raise self._unknown_kb(kb.name)
            yield

    def _registry_lock(self) -> contextlib.AbstractContextManager[None]:
        return file_lock(self.paths.locks / f"{_REGISTRY_LOCK}.lock", timeout=self.settings.lock_timeout,
                         what="the list of knowledge bases")  # fmt: skip

    # -- knowledge bases -------------------------------------------------------------------------

    def create_kb(
        self, name: str, description: str = "", *, chunk_size: int | None = None,
        chunk_overlap: int | None = None, vector: bool = False, actor: str = "cli",
    ) -> KnowledgeBaseDetails:  # fmt: skip
        """Create an empty knowledge base.

        Raises:
            InvalidNameError: the name breaks the naming rule.
            KnowledgeBaseExistsError: a knowledge base of that name exists.
        """
        kb = self.paths.kb(validate_kb_name(name))
        now = utc_now()
        config = make_kb_config(
            description=description,
            chunk_size=chunk_size or self.settings.chunk_size,
            chunk_overlap=self.settings.chunk_overlap if chunk_overlap is None else chunk_overlap,
            vector=vector,
            created_at=now,
            updated_at=now,
        )
        conn = self.conn
        with self._registry_lock(), self.kb_lock(name):
            if kb.root.exists():
                raise KnowledgeBaseExistsError(
                    f"Knowledge base '{name}' already exists.",
                    hint="Pick another name, or add documents to the existing one.",
                )
            # Built aside and renamed into place: a crash never leaves a half-made knowledge base.
            staging = kb.root.with_name(f"{CREATING}{name}-{ULID()}")
            (staging / "docs").mkdir(parents=True)
            (staging / "raw").mkdir()
            write_kb_config(staging / "kb.yaml", config)
            os.rename(staging, kb.root)
            with q.write(conn):
                q.upsert_kb(conn, name, config, path_stamp(kb.config))
                details = {"description": description, "vector": vector}
                q.audit(conn, AuditEvent.KB_CREATED, name, actor, details=details)
            return self._details(kb, config)

    def list_kbs(self) -> list[KnowledgeBaseSummary]:
        """Every knowledge base, by name, after reconciling each with its files."""
        names = self.refresh_many(self._sync_registry(), vanished_ok=True)
        counts = q.document_counts(self.conn)
        return [
            KnowledgeBaseSummary(name=name, description=self._config(name).description,
                                 document_count=counts.get(name, 0), modes=self.modes(self._config(name)))
            for name in names
        ]  # fmt: skip

    def describe_kb(self, name: str) -> KnowledgeBaseDetails:
        """Counts, settings and disk usage of one knowledge base."""
        kb, _ = self.open_kb(name)
        self.refresh(name)
        return self._details(kb, self._config(name))

    def _details(self, kb: KbPaths, config: KbConfig) -> KnowledgeBaseDetails:
        """A knowledge base's details as the index has them (no reconcile: callable under its lock)."""
        name = kb.name
        documents, chunks, degraded = q.kb_counts(self.conn, name, self._wanted_model(config))
        return KnowledgeBaseDetails(
            name=name, description=config.description, document_count=documents, modes=self.modes(config),
            chunk_count=chunks, chunk_size=config.chunk_size, chunk_overlap=config.chunk_overlap,
            vector=config.vector, auto_update_sources=config.auto_update_sources,
            embedding_model=self._wanted_model(config) or None,
            documents_degraded=degraded, disk_bytes=_disk_bytes(kb.root), path=str(kb.root),
            created_at=config.created_at, updated_at=config.updated_at,
        )  # fmt: skip

    def update_kb(
        self, name: str, *, description: str | None = None, chunk_size: int | None = None,
        chunk_overlap: int | None = None, vector: bool | None = None, auto_update_sources: bool | None = None,
        actor: str = "cli", progress: Progress | None = None,
    ) -> KnowledgeBaseDetails:  # fmt: skip
        """Change a knowledge base's settings.

        New chunking parameters re-chunk its documents; turning ``vector`` on embeds them (with
        progress), turning it off drops its vectors.
        """
        kb, _ = self.open_kb(name)
        with self.writing(kb):
            old = self._config(name)
            changes = {"description": description, "chunk_size": chunk_size, "chunk_overlap": chunk_overlap,
                       "vector": vector, "auto_update_sources": auto_update_sources}  # fmt: skip
            changes = {k: v for k, v in changes.items() if v is not None}
            config = make_kb_config(**{**old.model_dump(), **changes, "updated_at": utc_now()})
            write_kb_config(kb.config, config)
            with q.write(self.conn):
                q.upsert_kb(self.conn, name, config, path_stamp(kb.config))
                q.audit(self.conn, AuditEvent.KB_UPDATED, name, actor, details=changes)
                if old.vector and not config.vector:
                    q.clear_kb_embeddings(self.conn, name)
            if config.chunk_params != old.chunk_params or config.vector != old.vector:
                self._reconcile_locked(kb, config, progress=progress, embed_seconds=None)
            return self._details(kb, config)

    def delete_kb(self, name: str, *, actor: str = "cli") -> DeleteResult:
        """Remove a knowledge base: every file under its folder and every index row.

        The folder is first renamed aside, so a crash mid-delete never leaves a half KB visible;
        leftovers are removed on the next start.
        """
        kb, _ = self.open_kb(name)
        conn = self.conn
        with self._registry_lock(), self.kb_lock(name):
            files = sum(len(f) for _, _, f in os.walk(kb.root))
            aside = kb.root.with_name(f"{DELETING}{name}-{ULID()}")
            os.rename(kb.root, aside)
            with q.write(conn):
                q.delete_kb(conn, name)
                q.audit(conn, AuditEvent.KB_DELETED, name, actor, details={"files": files})
            shutil.rmtree(aside, ignore_errors=True)
            self._configs.pop(name, None)
            remove_file(self.paths.lock(name))
        return DeleteResult(kb=name, deleted=True, files_removed=files)

    def open_kb(self, name: str) -> tuple[KbPaths, KbConfig]:
        """The paths and settings of an existing knowledge base.

        Raises:
            InvalidNameError: the name breaks the naming rule.
            KnowledgeBaseNotFoundError: no such knowledge base; the hint names those that exist.
        """
        kb = self.paths.kb(validate_kb_name(name))
        if not kb.root.is_dir():
            raise self._unknown_kb(name)
        if name not in q.kb_stamps(self.conn):
            self._sync_registry()
        return kb, self._config(name)

    def _unknown_kb(self, name: str) -> KnowledgeBaseNotFoundError:
        existing = self._kb_folders()
        hint = (
            f"Existing knowledge bases: {', '.join(existing)}."
            if existing
            else "There are no knowledge bases yet; create one first ({tool:create_knowledge_base})."
        )
        return KnowledgeBaseNotFoundError(f"Knowledge base '{name}' does not exist.", hint=hint)

    def _config(self, name: str) -> KbConfig:
        """The KB's settings from ``kb.yaml``, parsed again only when the file changed."""
        kb = self.paths.kb(name)
        stamp = path_stamp(kb.config)
        cached = self._configs.get(name)
        if cached and cached[0] == stamp:
            return cached[1]
        config = read_kb_config(kb.config, fallback_time=utc_now())
        self._configs[name] = (stamp, config)
        return config

    def _kb_folders(self) -> list[str]:
        try:
            entries = sorted(os.scandir(self.paths.knowledge), key=lambda e: e.name)
        except FileNotFoundError:
            return []
        names = []
        for entry in entries:
            if entry.is_dir(follow_symlinks=False) and not entry.name.startswith("."):
                with contextlib.suppress(InvalidArgumentError):
                    names.append(validate_kb_name(entry.name))
        return names

    def _sync_registry(self) -> list[str]:
        """Make the ``knowledge_bases`` rows match the KB folders; returns the KB names."""
        folders = self._kb_folders()
        conn = self.conn
        wanted = {name: path_stamp(self.paths.kb(name).config) for name in folders}
        known = q.kb_stamps(conn)
        leftovers = [p for prefix in (DELETING, CREATING)
                     for p in self.paths.knowledge.glob(f"{prefix}*") if p.is_dir()]  # fmt: skip
        if wanted == known and not leftovers:
            return folders
        with self._registry_lock():
            for path in leftovers:
                shutil.rmtree(path, ignore_errors=True)
            folders = self._kb_folders()  # again: another process may have changed them meanwhile
            self._apply_registry(folders, q.kb_stamps(conn))
        return folders

    def _apply_registry(self, folders: list[str], known: dict[str, str]) -> None:
        conn = self.conn
        for name in folders:
            kb = self.paths.kb(name)
            if not kb.config.exists():
                # A folder made by hand: adopt it with default settings.
                with self.kb_lock(name):
                    if not kb.config.exists():
                        write_kb_config(kb.config, self._config(name))
            if known.get(name) != path_stamp(kb.config):
                with q.write(conn):
                    q.upsert_kb(conn, name, self._config(name), path_stamp(kb.config))
        gone = [name for name in known if name not in folders]
        if gone:
            with q.write(conn):
                for name in gone:
                    q.delete_kb(conn, name)

    # -- reconcile and reindex -------------------------------------------------------------------

    def refresh(self, name: str) -> None:
        """Reconcile one knowledge base with its files before a read (cheap when nothing moved).

        Every file is ``stat``-ed — unless the last such check took longer than
        ``reconcile_budget_ms`` (a big knowledge base) and was less than ``reconcile_interval``
        ago and the ``docs/`` folder itself has not changed since (no file added, removed or
        replaced by a save-by-rename editor). So small knowledge bases see every edit on the next
        read, and big ones see edits made in place within ``reconcile_interval`` — or, when one
        check takes longer than ``MAX_SCAN_SHARE`` of that, within 20 times the check's cost.
        """
        kb, config = self.open_kb(name)
        folder = path_stamp(kb.docs)
        if self._scans.fresh(name, folder, self.settings):
            return
        mark = unindexed_mark()
        started, cpu = time.monotonic(), time.thread_time()
        drift = detect_drift(self.conn, kb, config, self.embedder if config.vector else None)
        # The check's cost is the CPU it used, not the time it took: on a busy machine a 1 ms check
        # of a small knowledge base can take 20 ms, and would then wrongly count as a big one's
        # and let the next reads skip it (an edit made by hand unseen for a second).
        self._scans.record(name, folder, started, time.thread_time() - cpu)
        if not drift or self._ours(kb, drift, mark):
            return
        try:
            with self.writing(kb, timeout=self.settings.reconcile_lock_wait):
                self._reconcile_locked(kb, self._config(name))
                self._scans.wrote(name, path_stamp(kb.docs))
        except StoreError as exc:
            if exc.code != "busy":
                raise
            log.info("knowledge base %s is busy; serving the index as it is", name)

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

    def refresh_many(self, names: Sequence[str], *, vanished_ok: bool = False) -> list[str]:
        """Refresh each knowledge base; with ``vanished_ok``, drop those another process deleted meanwhile."""
        present = []
        for name in names:
            try:
                self.refresh(name)
            except KnowledgeBaseNotFoundError:
                if not vanished_ok:
                    raise
                continue
            present.append(name)
        return present

    def _reconcile_locked(
        self, kb: KbPaths, config: KbConfig, *, force: bool = False, progress: Progress | None = None,
        embed_seconds: float | None = -1.0, tidy: bool = False, reconversion: Reconversion | None = None,
    ) -> dict[str, int]:  # fmt: skip
        """Reconcile under the KB lock; ``embed_seconds`` -1 means the read budget from settings."""
        report = index_progress(progress)
        budget = self.settings.embed_on_read_seconds if embed_seconds == -1.0 else embed_seconds
        embedder = self.embedder if config.vector else None
        return reconcile(self.conn, kb, config, force=force, progress=report, embedder=embedder,
                         embed_seconds=budget, tidy=tidy, reconversion=reconversion)  # fmt: skip

    def reindex(
        self, name: str, *, force: bool = True, progress: Progress | None = None, actor: str = "cli"
    ) -> ReindexResult:
        """Rebuild a knowledge base's rows from its files.

        ``force`` re-chunks every document, and first converts again from its original each
        converted document whose converter changed since (a new ``conversion_engine``); documents
        edited since, or whose original is gone or fails to convert, keep their Markdown and are
        listed in ``not_reconverted``.
        """
        self._sync_registry()
        kb, _ = self.open_kb(name)
        redo = Reconversion(conversion_options(self.settings), actor=actor) if force else None
        with self.writing(kb):
            counts = self._reconcile_locked(kb, self._config(name), force=force, progress=progress,
                                            embed_seconds=None, tidy=True, reconversion=redo)  # fmt: skip
        self._repair_shared_indexes()
        if redo is None:
            return ReindexResult(kb=name, **counts)
        return ReindexResult(kb=name, **counts, reconverted=len(redo.reconverted), not_reconverted=redo.skipped)

    def _repair_shared_indexes(self) -> None:
        """Rebuild the full-text index and drop orphan vectors if verification finds them off."""
        if not verify_fts(self.conn) and not vector_orphans(self.conn):
            return
        with self._registry_lock(), q.write(self.conn):
            log.warning("repairing the full-text index and vector tables")
            q.rebuild_fts(self.conn)
            vectors.drop_orphans(self.conn)

    def reindex_all(
        self, *, force: bool = True, progress: Progress | None = None, actor: str = "cli"
    ) -> list[ReindexResult]:
        return [self.reindex(name, force=force, progress=progress, actor=actor) for name in self._sync_registry()]

    # -- diagnosis -------------------------------------------------------------------------------

    def verify(self, name: str) -> VerifyReport:
        """Check that a knowledge base's files, rows, full-text entries and vectors agree (read-only).

        Database-wide checks (full-text integrity, vectors without chunks) are reported with it.
        """
        kb, config = self.open_kb(name)
        report = verify_kb(self.conn, kb, vector_model=self._wanted_model(config) or None)
        extra = verify_fts(self.conn) + vector_orphans(self.conn)
        if not extra:
            return report
        problems = [*report.problems, *extra]
        return report.model_copy(update={"problems": problems, "ok": False})

    def doctor(self, *, check_embedder: bool = True) -> DoctorReport:
        """What this installation can do: ``problems`` need fixing, ``notes`` could be better.

        With ``check_embedder`` False no model is loaded and no provider called by the doctor
        itself; describing each knowledge base is a read, which may embed due documents for up
        to ``embed_on_read_seconds`` (``coffer doctor`` sets that to 0).
        """
        chosen = binding()
        conn = self.conn
        problems: list[str] = []
        vec = vec_version(conn)
        if vec is None:
            problems.append("sqlite-vec is not loaded: vector search cannot work (pip install sqlean.py sqlite-vec).")
        rg = rg_status(self.settings.rg_path)
        problems += [rg.problem] if rg.problem else []
        embedder = self._embedder_status(check_embedder)
        if embedder.error:
            problems.append(f"The embedder is not working: {embedder.error}")
        kbs = []
        for name in self._sync_registry():
            try:
                kbs.append(self.describe_kb(name))
            except KnowledgeBaseNotFoundError:
                continue  # deleted by another process since the scan
            except CofferError as exc:
                problems.append(f"'{name}' cannot be read: {exc.message} {exc.hint_for('cli')}".strip())
        problems += [f"'{kb.name}': {kb.documents_degraded} documents have no current vectors (keyword-only)."
                     for kb in kbs if kb.documents_degraded]  # fmt: skip
        return DoctorReport(
            coffer_version=__version__, home=str(self.paths.home), sqlite_binding=chosen.name,
            sqlite_version=chosen.sqlite_version, fts5=_has_fts5(conn), sqlite_vec_version=vec,
            grep_engine=rg.engine, ripgrep=rg.path, ripgrep_source=rg.source, ripgrep_version=rg.version,
            embedder=embedder, knowledge_bases=kbs, problems=problems,
            notes=[rg.note] if rg.note else [],
        )  # fmt: skip

    def _embedder_status(self, check: bool) -> EmbedderStatus:
        provider = self.settings.embedding_provider
        try:
            embedder = self.embedder
        except ConfigError as exc:  # e.g. model_path without model: say so, do not crash the doctor
            return EmbedderStatus(provider=provider, identity=None, reachable=False,
                                  error=f"{exc.message} {exc.hint_for('cli')}".strip())  # fmt: skip
        if embedder is None:
            return EmbedderStatus(provider=provider, identity=None, reachable=None)
        if not check:
            return EmbedderStatus(provider=provider, identity=embedder.identity, reachable=None)
        started = time.perf_counter()
        try:
            vector = embedder.embed_query("Coffer doctor: is the embedder reachable?")
        except CofferError as exc:
            return EmbedderStatus(provider=provider, identity=embedder.identity, reachable=False,
                                  error=f"{exc.message} {exc.hint}".strip())  # fmt: skip
        return EmbedderStatus(provider=provider, identity=embedder.identity, reachable=True,
                              dimensions=len(vector), seconds=round(time.perf_counter() - started, 3))  # fmt: skip

    # -- history ---------------------------------------------------------------------------------

    def record_invocation(self, tool: str, client: str, duration_ms: float, outcome: str,
                          error_code: str | None = None) -> None:  # fmt: skip
        """Log one MCP tool call (no arguments, no content)."""
        with q.write(self.conn):
            q.record_invocation(self.conn, tool, client, duration_ms, outcome, error_code)


def embedding_config(settings: Settings) -> EmbeddingConfig:
    """The embedder's settings, taken from the global ones."""
    key = settings.embedding_api_key
    return EmbeddingConfig(
        provider=settings.embedding_provider,
        model=settings.embedding_model,
        model_path=settings.embedding_model_path,
        # Downloaded models live in the home (the temp dir may be emptied by a reboot), unless the
        # user chose a cache folder for fastembed.
        cache_dir=None if os.environ.get("FASTEMBED_CACHE_PATH") else settings.home / "models",
        base_url=settings.embedding_base_url,
        api_key=key.get_secret_value() if key is not None else None,
        dimensions=settings.embedding_dimensions,
        batch_size=settings.embedding_batch_size,
        cooldown_seconds=settings.embedding_cooldown_seconds,
    )


MAX_SCAN_SHARE = 0.05
"""At most this share of a busy reader's time goes to full file checks (a 240 ms check: every 4.8 s)."""


class _ScanLog:
    """When each knowledge base's files were last checked against the index, and what it cost."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[str, float, float]] = {}

    def fresh(self, name: str, folder: str, settings: Settings) -> bool:
        """Whether the last full check still stands: it was expensive, recent, and the folder is as it was.

        "Recent" is ``reconcile_interval``, stretched for a check so slow that a reader busy
        back to back would otherwise spend more than ``MAX_SCAN_SHARE`` of its time re-checking.
        """
        last = self._last.get(name)
        if last is None or last[0] != folder or settings.reconcile_interval <= 0:
            return False
        _, at, cost = last
        if cost * 1000 <= settings.reconcile_budget_ms:
            return False
        return time.monotonic() - at < max(settings.reconcile_interval, cost / MAX_SCAN_SHARE)

    def record(self, name: str, folder: str, at: float, cost: float) -> None:
        self._last[name] = (folder, at, cost)

    def wrote(self, name: str, folder: str) -> None:
        """Our own write changed the folder: the check stays as fresh as it was."""
        if name in self._last:
            _, at, cost = self._last[name]
            self._last[name] = (folder, at, cost)


def _has_fts5(conn: Connection) -> bool:
    try:
        conn.execute("CREATE VIRTUAL TABLE temp.fts5_probe USING fts5(x)")
        conn.execute("DROP TABLE temp.fts5_probe")
    except database_errors():
        return False
    return True


def _disk_bytes(root: Path) -> int:
    total = 0
    for folder, _, files in os.walk(root):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(folder, name)).st_size
    return total
