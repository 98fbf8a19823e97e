"""``coffer kb export|import`` (pack files) and ``coffer kb snapshot|snapshots|restore|snapshot-delete``."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from coffer_mcp.cli._output import emit, human_size, progress, table
from coffer_mcp.cli._service import service
from coffer_mcp.errors import counted
from coffer_mcp.limits import MAX_NOTE

if TYPE_CHECKING:
    from coffer_mcp.settings import Settings

__all__ = [
    "add_export",
    "add_import",
    "add_snapshot",
    "add_snapshot_id",
    "kb_export",
    "kb_import",
    "kb_restore",
    "kb_snapshot",
    "kb_snapshot_delete",
    "kb_snapshots",
]


def add_export(p: argparse.ArgumentParser) -> None:
    p.add_argument("name")
    p.add_argument("out", help="the pack file to write (e.g. notes.cofferpack)")
    p.add_argument("--with-vectors", action="store_true", help="carry the vectors so the corpus is not re-embedded")
    p.add_argument("--overwrite", action="store_true", help="replace OUT if it exists")


def add_import(p: argparse.ArgumentParser) -> None:
    p.add_argument("pack")
    p.add_argument("--as", dest="as_name", metavar="NAME", help="import under another name")
    p.add_argument("--merge", action="store_true", help="merge into an existing knowledge base")


def add_snapshot(p: argparse.ArgumentParser) -> None:
    p.add_argument("name")
    p.add_argument("--note", default="", metavar="TEXT", help=f"say why (at most {MAX_NOTE} characters)")


def add_snapshot_id(p: argparse.ArgumentParser) -> None:
    p.add_argument("name")
    p.add_argument("snapshot_id")


def kb_export(args: argparse.Namespace, settings: Settings) -> None:
    with service(settings, args) as coffer:
        result = coffer.export_kb(
            args.name, args.out, with_vectors=args.with_vectors, overwrite=args.overwrite, progress=progress(args)
        )
    emit(
        args,
        result,
        lambda r: (
            f"exported '{r.kb}' ({counted(r.documents, 'document')}, {counted(r.vectors, 'vector')}) to {r.path}\n"
            f"sha256 {r.sha256}"
        ),
    )


def kb_import(args: argparse.Namespace, settings: Settings) -> None:
    with service(settings, args) as coffer:
        result = coffer.import_pack(args.pack, as_name=args.as_name, merge=args.merge, progress=progress(args))

    def render(r) -> str:
        lines = [
            (
                f"imported into '{r.kb}': {counted(r.documents_added, 'document')} added, {len(r.skipped)} skipped, "
                f"{counted(len(r.conflicts), 'conflict')}; vectors {'used' if r.vectors_used else 'not used'}"
            )
        ]
        lines += [f"  conflict {c.document_id}: {c.message}" for c in r.conflicts]
        if r.note:
            lines.append(f"  {r.note}")
        return "\n".join(lines)

    emit(args, result, render)


def kb_snapshot(args: argparse.Namespace, settings: Settings) -> None:
    with service(settings, args) as coffer:
        info = coffer.snapshot_kb(args.name, note=args.note)
    emit(args, info, lambda i: f"snapshot {i.id} of '{i.kb}' ({counted(i.documents, 'document')})")


def kb_snapshots(args: argparse.Namespace, settings: Settings) -> None:
    with service(settings, args) as coffer:
        infos = coffer.list_snapshots(args.name)
    emit(
        args,
        infos,
        lambda items: (
            table(
                ["ID", "CREATED", "DOCS", "SIZE", "NOTE"],
                [[i.id, i.created_at, i.documents, human_size(i.bytes), i.note] for i in items],
            )
            if items
            else f"no snapshots of '{args.name}'"
        ),
    )


def kb_restore(args: argparse.Namespace, settings: Settings) -> None:
    with service(settings, args) as coffer:
        result = coffer.restore_snapshot(args.name, args.snapshot_id, progress=progress(args))
    emit(
        args,
        result,
        lambda r: (
            f"restored '{r.kb}' to snapshot {r.snapshot_id} ({counted(r.documents, 'document')})"
            # A deleted knowledge base brought back had no state before, so no snapshot of it.
            + (f"; the state before is snapshot {r.pre_restore_snapshot_id}" if r.pre_restore_snapshot_id else "")
        ),
    )


def kb_snapshot_delete(args: argparse.Namespace, settings: Settings) -> None:
    with service(settings, args) as coffer:
        info = coffer.delete_snapshot(args.name, args.snapshot_id)
    emit(args, info, lambda i: f"deleted snapshot {i.id} of '{i.kb}'")
