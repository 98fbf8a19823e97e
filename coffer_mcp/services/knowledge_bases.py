"""The knowledge-base service: create, list, describe, change and delete knowledge bases; reindex and verify them."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from pathlib import Path

from ulid import ULID

from coffer_mcp.audit import AuditEvent
from coffer_mcp.errors import CofferError, InvalidArgumentError, KnowledgeBaseExistsError
from coffer_mcp.index import Index
from coffer_mcp.indexing.reconvert import Reconversion, conversion_options
from coffer_mcp.indexing.verify import verify_kb
from coffer_mcp.models import (
    DeleteResult,
    KnowledgeBaseDetails,
    KnowledgeBaseSummary,
    Progress,
    ReindexResult,
    VectorIndexInfo,
    VerifyReport,
)
from coffer_mcp.services.activity import FollowActivity, followed_folders
from coffer_mcp.services.catalogue import Catalogue
from coffer_mcp.services.freshness import Freshness
from coffer_mcp.services.locks import Locks
from coffer_mcp.services.providers import Providers
from coffer_mcp.settings import Settings
from coffer_mcp.store import (
    CREATING,
    DELETING,
    KbConfig,
    KbPaths,
    StorePaths,
    make_kb_config,
    path_stamp,
    remove_file,
    validate_kb_name,
    write_kb_config,
)
from coffer_mcp.timeutil import utc_now

__all__ = ["KnowledgeBaseService"]

log = logging.getLogger(__name__)


class KnowledgeBaseService:
    """Knowledge bases as a whole: their settings, their lifecycle, their index's health."""

    def __init__(
        self,
        *,
        settings: Settings,
        index: Index,
        paths: StorePaths,
        activity: FollowActivity,
        catalogue: Catalogue,
        locks: Locks,
        freshness: Freshness,
        providers: Providers,
    ) -> None:
        self.settings = settings
        self.index = index
        self.paths = paths
        self.activity = activity
        self.catalogue = catalogue
        self.locks = locks
        self.freshness = freshness
        self.providers = providers

    def create_kb(
        self,
        name: str,
        description: str = "",
        *,
        chunk_size: int | None = None,
        chunk_overlap: int | None = None,
        vector: bool = False,
        actor: str = "cli",
    ) -> KnowledgeBaseDetails:
        """Create an empty knowledge base.

        A ``chunk_size`` given without ``chunk_overlap`` gets the default overlap, shrunk in
        proportion when it would not be below half of that size.

        Raises:
            InvalidNameError: the name breaks the naming rule.
            KnowledgeBaseExistsError: a knowledge base of that name exists.
        """
        kb = self.paths.kb(validate_kb_name(name))
        now = utc_now()
        settings = self.settings
        size = chunk_size or settings.chunk_size
        config = make_kb_config(
            description=description,
            chunk_size=size,
            chunk_overlap=_fitting(settings.chunk_overlap, settings.chunk_size, size)
            if chunk_overlap is None
            else chunk_overlap,
            vector=vector,
            created_at=now,
            updated_at=now,
        )
        index = self.index
        with self.locks.registry_lock(), self.locks.kb_lock(name):
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
            with index.transaction():
                index.upsert_kb(name, config, path_stamp(kb.config))
                details = {"description": description, "vector": vector}
                index.audit(AuditEvent.KB_CREATED, name, actor, details=details)
            return self._details(kb, config)

    def list_kbs(self) -> list[KnowledgeBaseSummary]:
        """Every knowledge base, by name, after reconciling each with its files."""
        names = list(self.freshness.refresh_many(self.catalogue.sync(), vanished_ok=True))
        counts = self.index.document_counts()
        return [
            KnowledgeBaseSummary(
                name=name,
                description=self.catalogue.config(name).description,
                document_count=counts.get(name, 0),
                modes=self.providers.modes(self.catalogue.config(name)),
            )
            for name in names
        ]

    def describe_kb(self, name: str) -> KnowledgeBaseDetails:
        """Counts, settings and disk usage of one knowledge base."""
        kb, _ = self.catalogue.open_kb(name)
        self.freshness.refresh(name)
        return self._details(kb, self.catalogue.config(name))

    def _details(self, kb: KbPaths, config: KbConfig) -> KnowledgeBaseDetails:
        """A knowledge base's details as the index has them (no reconcile: callable under its lock)."""
        name = kb.name
        counts = self.index.kb_counts(name, self.providers.wanted_model(config))
        return KnowledgeBaseDetails(
            name=name,
            description=config.description,
            document_count=counts.documents,
            modes=self.providers.modes(config),
            chunk_count=counts.chunks,
            chunk_size=config.chunk_size,
            chunk_overlap=config.chunk_overlap,
            vector=config.vector,
            auto_update_sources=config.auto_update_sources,
            embedding_model=self.providers.wanted_model(config) or None,
            documents_degraded=counts.degraded,
            vector_index={model: VectorIndexInfo(**info) for model, info in self.index.vector_status(name).items()},
            followed=followed_folders(self.index, self.activity, name, config),
            disk_bytes=_disk_bytes(kb.root),
            path=str(kb.root),
            created_at=config.created_at,
            updated_at=config.updated_at,
        )

    def update_kb(
        self,
        name: str,
        *,
        description: str | None = None,
        chunk_size: int | None = None,
        chunk_overlap: int | None = None,
        vector: bool | None = None,
        auto_update_sources: bool | None = None,
        actor: str = "cli",
        progress: Progress | None = None,
    ) -> KnowledgeBaseDetails:
        """Change a knowledge base's settings.

        New chunking parameters re-chunk its documents; turning ``vector`` on embeds them (with
        progress), turning it off drops its vectors. A smaller ``chunk_size`` given alone keeps
        the overlap, unless it would no longer be below half the size: then the overlap shrinks
        in proportion (2,000/400 to 600 gives 600/120).
        """
        kb, _ = self.catalogue.open_kb(name)
        asked = (description, chunk_size, chunk_overlap, vector, auto_update_sources)
        if all(value is None for value in asked):
            raise InvalidArgumentError(
                "Nothing to change.",
                hint="Give a new description, chunk size or overlap, or switch vector search or the "
                "automatic update of sources on or off.",
            )
        with self.locks.writing(kb):
            old = self.catalogue.config(name)
            if chunk_size is not None and chunk_overlap is None:  # said only when it changes
                fitted = _fitting(old.chunk_overlap, old.chunk_size, chunk_size)
                chunk_overlap = fitted if fitted != old.chunk_overlap else None
            changes = {
                "description": description,
                "chunk_size": chunk_size,
                "chunk_overlap": chunk_overlap,
                "vector": vector,
                "auto_update_sources": auto_update_sources,
            }
            changes = {k: v for k, v in changes.items() if v is not None and v != getattr(old, k)}
            if not changes:  # already so: nothing written, audited or stamped as updated
                return self._details(kb, old)
            config = make_kb_config(**{**old.model_dump(), **changes, "updated_at": utc_now()})
            write_kb_config(kb.config, config)
            with self.index.transaction():
                self.index.upsert_kb(name, config, path_stamp(kb.config))
                self.index.audit(AuditEvent.KB_UPDATED, name, actor, details=changes)
                if old.vector and not config.vector:
                    self.index.clear_kb_embeddings(name)
            if config.chunk_params != old.chunk_params or config.vector != old.vector:
                self.freshness.reconcile_locked(kb, config, progress=progress, embed_seconds=None)
            return self._details(kb, config)

    def delete_kb(self, name: str, *, actor: str = "cli") -> DeleteResult:
        """Remove a knowledge base: every file under its folder and every index row.

        The folder is first renamed aside, so a crash mid-delete never leaves a half KB visible;
        leftovers are removed on the next start.
        """
        kb, _ = self.catalogue.open_kb(name)
        index = self.index
        with self.locks.registry_lock(), self.locks.kb_lock(name):
            files = sum(len(f) for _, _, f in os.walk(kb.root))
            aside = kb.root.with_name(f"{DELETING}{name}-{ULID()}")
            os.rename(kb.root, aside)
            with index.transaction():
                index.delete_kb(name)
                index.audit(AuditEvent.KB_DELETED, name, actor, details={"files": files})
            shutil.rmtree(aside, ignore_errors=True)
            self.catalogue.forget(name)
            remove_file(self.paths.lock(name))
        return DeleteResult(kb=name, deleted=True, files_removed=files)

    def reindex(
        self, name: str, *, force: bool = True, progress: Progress | None = None, actor: str = "cli"
    ) -> ReindexResult:
        """Rebuild a knowledge base's rows from its files.

        ``force`` re-chunks every document, and first converts again from its original each
        converted document whose converter changed since (a new ``conversion_engine``); documents
        edited since, or whose original is gone or fails to convert, keep their Markdown and are
        listed in ``not_reconverted``.
        """
        self.catalogue.sync()
        kb, _ = self.catalogue.open_kb(name)
        redo = Reconversion(conversion_options(self.settings), actor=actor) if force else None
        with self.locks.writing(kb):
            counts = self.freshness.reconcile_locked(
                kb,
                self.catalogue.config(name),
                force=force,
                progress=progress,
                embed_seconds=None,
                tidy=True,
                reconversion=redo,
            )
        self._repair_shared_indexes()
        self.index.settle()
        # Left without vectors (the provider failed or cools down): counted as metrics count them.
        degraded = self.index.kb_counts(name, self.providers.wanted_model(self.catalogue.config(name))).degraded
        done = {"kb": name, **counts, "documents_degraded": degraded}
        if redo is None:
            return ReindexResult.model_validate(done)
        return ReindexResult.model_validate(
            {**done, "reconverted": len(redo.reconverted), "not_reconverted": redo.skipped}
        )

    def _repair_shared_indexes(self) -> None:
        """Rebuild the full-text index and drop orphan vectors if verification finds them off."""
        if not self.index.check_shared():
            return
        with self.locks.registry_lock(), self.index.transaction():
            log.warning("repairing the full-text index and vector tables")
            self.index.repair_shared()

    def reindex_all(
        self, *, force: bool = True, progress: Progress | None = None, actor: str = "cli"
    ) -> list[ReindexResult]:
        return [self.reindex(name, force=force, progress=progress, actor=actor) for name in self.catalogue.sync()]

    def verify(self, name: str) -> VerifyReport:
        """Check that a knowledge base's files, rows, full-text entries and vectors agree.

        Files changed, added or removed by hand are taken up first, as by any read (every file is
        checked, big knowledge base or not): what is left is drift no read repairs, which
        ``reindex`` does. Database-wide checks (full-text integrity, vectors without chunks) are
        reported with it.
        """
        self.freshness.check_files(name)
        kb, config = self.catalogue.open_kb(name)
        report = verify_kb(self.index, kb, vector_model=self.providers.wanted_model(config) or None)
        extra = self.index.check_shared()
        if not extra:
            return report
        problems = [*report.problems, *extra]
        return report.model_copy(update={"problems": problems, "ok": False})

    # -- what the index knows, without a read of the files ---------------------------------------

    def registered_kbs(self) -> list[str]:
        """The names of the knowledge bases the index has, sorted (no folder is read)."""
        return sorted(self.index.kb_stamps())

    def vector_kbs(self) -> set[str]:
        """The knowledge bases the index has with ``vector`` on."""
        return self.index.vector_kbs()

    def document_counts(self) -> dict[str, int]:
        """How many documents each knowledge base has, as the index counts them (no file is read)."""
        return self.index.document_counts()

    def degraded_count(self, name: str) -> int | None:
        """How many documents of ``name`` lack current vectors: None when it has no vector search
        (vector off, or no embedder) or there is no such knowledge base."""
        try:
            _, config = self.catalogue.open_kb(name)
        except CofferError:
            return None
        model = self.providers.wanted_model(config)
        if not model:  # vector off, or no embedder: nothing is expected, so nothing is degraded
            return None
        return self.index.kb_counts(name, model).degraded


def _disk_bytes(root: Path) -> int:
    total = 0
    for folder, _, files in os.walk(root):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(folder, name)).st_size
    return total


def _fitting(overlap: int, size: int, new_size: int) -> int:
    """``overlap`` (set for chunks of ``size``) for chunks of ``new_size``: kept while below half of
    it, else shrunk in proportion (2,000/400 becomes 600/120)."""
    return overlap if 2 * overlap < new_size else overlap * new_size // size
