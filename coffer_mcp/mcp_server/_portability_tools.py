"""Portability tools' bodies: export a knowledge base to a pack, snapshots and restore.

Each body takes the ``Job`` first and the tool's arguments after it; its docstring is the tool's
description and its parameters are the input schema. Names and annotations are in ``_registry``.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

from coffer_mcp.errors import ConfirmationRequiredError
from coffer_mcp.mcp_server._common import FsPath, KbName
from coffer_mcp.mcp_server._runner import Job
from coffer_mcp.portability import ExportResult, RestoreResult, SnapshotInfo

__all__ = [
    "SnapshotList",
    "export_knowledge_base",
    "list_kb_snapshots",
    "restore_kb_snapshot",
    "snapshot_knowledge_base",
]


class SnapshotList(BaseModel):
    snapshots: list[SnapshotInfo] = Field(description="Newest first.")


def list_kb_snapshots(job: Job, kb: KbName) -> SnapshotList:
    """List a knowledge base's snapshots (id, time, note, size), newest first."""
    return SnapshotList(snapshots=job.service.list_snapshots(kb))


def export_knowledge_base(
    job: Job,
    kb: KbName,
    path: Annotated[FsPath, Field(description="Absolute path of the .cofferpack file to write.")],
    with_vectors: Annotated[bool, Field(description="Carry the vectors so the importer need not re-embed.")] = False,
) -> ExportResult:
    """Write a knowledge base to a pack file in allowed_dirs, for `coffer kb import` elsewhere.

    The pack holds its files, a manifest of hashes (verified on import) and optionally its vectors.
    """
    return job.service.export_allowed(kb, path, with_vectors=with_vectors, progress=job.progress)


def snapshot_knowledge_base(job: Job, kb: KbName, note: Annotated[str, Field(max_length=500)] = "") -> SnapshotInfo:
    """Snapshot the knowledge base's current files, e.g. before a batch of edits."""
    return job.service.snapshot_kb(kb, note=note)


def restore_kb_snapshot(
    job: Job,
    kb: KbName,
    snapshot_id: Annotated[str, Field(description="From coffer__list_snapshots.", max_length=64)],
    confirm: Annotated[
        bool, Field(description="true once the user agreed (if the client can, Coffer asks them itself).")
    ] = False,
) -> RestoreResult:
    """Put a knowledge base back to a snapshot, all or nothing.

    The current state is snapshotted first, so this can be undone.
    """
    if confirm is not True:
        job.service.find_snapshot(kb, snapshot_id)  # an unknown one is refused as such: there is nothing to confirm
        raise ConfirmationRequiredError(
            f"Restoring '{kb}' needs confirm=true.",
            hint="Ask the user first; documents added or edited since the snapshot go back.",
        )
    return job.service.restore_snapshot(kb, snapshot_id, actor=job.actor, progress=job.progress)
