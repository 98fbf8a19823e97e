"""The portability service: packs (export, import) and snapshots (snapshot, restore) of knowledge bases.

The work is done by ``coffer_mcp.portability``; this service hands it the catalogue and the locks
(and, for packs, the providers), and is where an agent's export path is checked against
``allowed_dirs`` (as ingest's is, in the source service).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from coffer_mcp import portability
from coffer_mcp.access import check_inside
from coffer_mcp.index import Index
from coffer_mcp.models import Progress
from coffer_mcp.services.activity import FollowActivity
from coffer_mcp.services.catalogue import Catalogue
from coffer_mcp.services.freshness import Freshness
from coffer_mcp.services.knowledge_bases import KnowledgeBaseService
from coffer_mcp.services.locks import Locks
from coffer_mcp.services.providers import Providers
from coffer_mcp.settings import Settings

if TYPE_CHECKING:
    from coffer_mcp.portability import ExportResult, ImportResult, RestoreResult, SnapshotInfo

__all__ = ["PortabilityService"]


class PortabilityService:
    """Moving knowledge bases between stores, and taking them back in time."""

    def __init__(
        self,
        *,
        settings: Settings,
        index: Index,
        activity: FollowActivity,
        catalogue: Catalogue,
        locks: Locks,
        freshness: Freshness,
        providers: Providers,
        knowledge_bases: KnowledgeBaseService,
    ) -> None:
        self.settings = settings
        self.index = index
        self.activity = activity
        self.catalogue = catalogue
        self.locks = locks
        self.freshness = freshness
        self.providers = providers
        self.knowledge_bases = knowledge_bases

    def export_kb(
        self,
        name: str,
        out: str | Path,
        *,
        with_vectors: bool = False,
        overwrite: bool = False,
        progress: Progress | None = None,
    ) -> ExportResult:
        """Write knowledge base ``name`` to the pack file ``out`` (see ``portability.export_kb``)."""
        return portability.export_kb(
            self.catalogue,
            self.locks,
            self.freshness,
            self.providers,
            name,
            out,
            with_vectors=with_vectors,
            overwrite=overwrite,
            progress=progress,
        )

    def export_allowed(
        self, name: str, out: str, *, with_vectors: bool = False, progress: Progress | None = None
    ) -> ExportResult:
        """``export_kb`` to a path inside ``allowed_dirs`` only (the MCP tool's entry point)."""
        real = check_inside(out, self.settings.allowed_dirs, writing=True)
        return self.export_kb(name, real, with_vectors=with_vectors, progress=progress)

    def import_pack(
        self,
        pack: str | Path,
        *,
        as_name: str | None = None,
        merge: bool = False,
        max_bytes: int | None = None,
        actor: str = "cli",
        progress: Progress | None = None,
    ) -> ImportResult:
        """Import a pack file (untrusted input, verified first; see ``portability.import_pack``)."""
        result = portability.import_pack(
            self.catalogue,
            self.locks,
            self.providers,
            pack,
            as_name=as_name,
            merge=merge,
            max_bytes=max_bytes,
            actor=actor,
            progress=progress,
        )
        self.index.settle()
        return result

    def snapshot_kb(self, name: str, *, note: str = "") -> SnapshotInfo:
        """Save a knowledge base's current files as a snapshot."""
        return portability.snapshot_kb(self.catalogue, self.locks, name, note=note)

    def list_snapshots(self, name: str) -> list[SnapshotInfo]:
        """A knowledge base's snapshots, newest first."""
        return portability.list_snapshots(self.catalogue, name)

    def find_snapshot(self, name: str, snapshot_id: str) -> SnapshotInfo:
        """One snapshot of a knowledge base (also of a deleted one); refuses an unknown one as restore does."""
        return portability.find_snapshot(self.catalogue, name, snapshot_id)

    def delete_snapshot(self, name: str, snapshot_id: str) -> SnapshotInfo:
        """Delete one snapshot; returns what it was."""
        return portability.delete_snapshot(self.catalogue, self.locks, name, snapshot_id)

    def restore_snapshot(
        self, name: str, snapshot_id: str, *, actor: str = "cli", progress: Progress | None = None
    ) -> RestoreResult:
        """Put a knowledge base back to a snapshot (the current state is snapshotted first), then reindex it.

        The folders it follows are then due for a full sync: documents of files added since the
        snapshot are gone, and documents of files deleted since are back. This process's watcher
        runs it (another process's sees the knowledge base's folder replaced); until it has,
        metrics say the folders are behind.
        """
        result = portability.restore_snapshot(
            self.catalogue, self.locks, self.knowledge_bases, name, snapshot_id, actor=actor, progress=progress
        )
        why = f"Knowledge base '{name}' was restored from snapshot {snapshot_id}"
        self.activity.resync(name, self.catalogue.config(name).follow, why)
        return result
