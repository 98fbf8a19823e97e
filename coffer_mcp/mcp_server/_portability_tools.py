"""Portability tools: export a knowledge base to a pack, snapshots and restore."""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import Context, MCPServer
from pydantic import BaseModel, Field

from coffer_mcp.curation import check_inside
from coffer_mcp.errors import ConfirmationRequiredError
from coffer_mcp.mcp_server._common import ADD, CHANGE, CREATE, READ, FsPath, KbName
from coffer_mcp.mcp_server._runner import Job, Runner
from coffer_mcp.portability import (
    ExportResult,
    RestoreResult,
    SnapshotInfo,
    export_kb,
    list_snapshots,
    restore_snapshot,
    snapshot_kb,
)

__all__ = ["PORTABILITY_READ_TOOLS", "PORTABILITY_WRITE_TOOLS", "register_portability"]

PORTABILITY_READ_TOOLS = ("coffer__list_snapshots",)
PORTABILITY_WRITE_TOOLS = (
    "coffer__export_knowledge_base",
    "coffer__snapshot_knowledge_base",
    "coffer__restore_snapshot",
)


class SnapshotList(BaseModel):
    snapshots: list[SnapshotInfo] = Field(description="Newest first.")


def register_portability(server: MCPServer, run: Runner, *, writes: bool) -> None:
    """Register the snapshot list, and the export, snapshot and restore tools unless read-only."""
    svc = run.service

    @server.tool(name="coffer__list_snapshots", annotations=READ)
    async def list_kb_snapshots(kb: KbName, ctx: Context) -> SnapshotList:
        """List a knowledge base's snapshots, newest first: id, time, note, document count, size."""
        return await run(ctx, "coffer__list_snapshots", lambda _: SnapshotList(snapshots=list_snapshots(svc, kb)))

    if not writes:
        return

    @server.tool(name="coffer__export_knowledge_base", annotations=ADD)
    async def export_knowledge_base(
        kb: KbName,
        path: Annotated[FsPath, Field(description="Absolute path of the .cofferpack file to write, inside the "
                                      "allowed folders.")],  # fmt: skip
        ctx: Context,
        with_vectors: Annotated[bool, Field(description="Carry the vectors so the importer need not re-embed.")] = False,
    ) -> ExportResult:
        """Write a knowledge base (its files, a manifest of hashes, optionally its vectors) to one
        pack file that `coffer kb import` verifies and loads elsewhere. Only inside allowed_dirs.
        """
        def call(job: Job) -> ExportResult:
            out = check_inside(path, svc.settings.allowed_dirs)
            return export_kb(svc, kb, out, with_vectors=with_vectors, progress=job.progress)

        return await run(ctx, "coffer__export_knowledge_base", call)

    @server.tool(name="coffer__snapshot_knowledge_base", annotations=CREATE)
    async def snapshot_knowledge_base(
        kb: KbName, ctx: Context, note: Annotated[str, Field(max_length=500)] = ""
    ) -> SnapshotInfo:
        """Save the knowledge base's current files as a snapshot, e.g. before a batch of edits."""
        return await run(ctx, "coffer__snapshot_knowledge_base", lambda _: snapshot_kb(svc, kb, note=note))

    @server.tool(name="coffer__restore_snapshot", annotations=CHANGE)
    async def restore_kb_snapshot(
        kb: KbName,
        snapshot_id: Annotated[str, Field(description="From coffer__list_snapshots.", max_length=64)],
        confirm: Annotated[bool, Field(description="Must be true: the documents go back to the snapshot.")],
        ctx: Context,
    ) -> RestoreResult:
        """Put a knowledge base back to a snapshot. The current state is snapshotted first, so the
        restore itself can be undone; the swap is all-or-nothing.
        """
        def call(job: Job) -> RestoreResult:
            if confirm is not True:
                raise ConfirmationRequiredError(
                    f"Restoring '{kb}' needs confirm=true.",
                    hint="Ask the user first; documents added or edited since the snapshot go back.",
                )
            return restore_snapshot(svc, kb, snapshot_id, actor=job.actor, progress=job.progress)

        return await run(ctx, "coffer__restore_snapshot", call)
