"""``coffer kb ingest|ingest-url|check-sources|unfollow|update-from-source``: documents from files and URLs."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from coffer_mcp.cli._output import EXIT_ERROR, emit, escape_hidden, print_json, progress
from coffer_mcp.cli._service import service
from coffer_mcp.errors import InvalidArgumentError, counted, reword

if TYPE_CHECKING:
    from coffer_mcp.models import DirectoryIngestItem, FollowedFolder, SourceReport
    from coffer_mcp.settings import Settings

__all__ = [
    "add_check_sources",
    "add_ingest",
    "add_ingest_url",
    "add_unfollow",
    "followed_line",
    "ingest_line",
    "kb_check_sources",
    "kb_ingest",
    "kb_ingest_url",
    "kb_unfollow",
    "kb_update_from_source",
]


def add_ingest(p: argparse.ArgumentParser) -> None:
    p.add_argument("name")
    p.add_argument("paths", nargs="+", metavar="PATH", help="files or folders (folders are walked recursively)")
    p.add_argument("--replace", action="store_true", help="update documents whose source changed")
    p.add_argument(
        "--follow",
        action="store_true",
        help="keep following the folders: 'coffer serve' applies their changes as they happen",
    )
    p.add_argument(
        "--tag", dest="tags", action="append", metavar="TAG", help="tag every document ingested (repeatable)"
    )


def add_unfollow(p: argparse.ArgumentParser) -> None:
    p.add_argument("name")
    p.add_argument("path", help="a folder the knowledge base follows (its documents stay)")


def add_ingest_url(p: argparse.ArgumentParser) -> None:
    p.add_argument("name")
    p.add_argument("url")
    p.add_argument("--replace", action="store_true", help="update the document if the page changed")


def add_check_sources(p: argparse.ArgumentParser) -> None:
    p.add_argument("name")
    p.add_argument("--no-update", action="store_true", help="only report, even with auto_update_sources")


def kb_ingest(args: argparse.Namespace, settings: Settings) -> int:
    if args.follow and args.tags:
        raise InvalidArgumentError(
            "--tag tags the files of one ingest, not a followed folder's later ones.",
            hint="Ingest without --follow to tag the files, or tag documents later with 'coffer kb tag'.",
        )
    with service(settings, args) as coffer:
        if args.follow:
            results = [coffer.follow_folder(args.name, path, progress=progress(args)) for path in args.paths]
        else:
            results = [
                coffer.ingest_path(args.name, path, replace=args.replace, progress=progress(args), tags=args.tags)
                for path in args.paths
            ]
    items = [item for result in results for item in result.items]
    if args.json:
        print_json([r.model_dump() for r in results] if len(results) > 1 else results[0])
    else:
        for item in items:
            print(ingest_line(item))
        statuses = ("created", "updated", "unchanged", "rejected", "conflict", "removed", "renamed")
        counts = {s: sum(i.status == s for i in items) for s in statuses}
        print(", ".join(f"{n} {s}" for s, n in counts.items() if n or s in statuses[:4]), file=sys.stderr)
        for result in results:
            if result.followed:
                print(f"following {result.followed} ('coffer serve' applies its changes)", file=sys.stderr)
    return EXIT_ERROR if items and all(i.status == "rejected" for i in items) else 0


def kb_unfollow(args: argparse.Namespace, settings: Settings) -> None:
    with service(settings, args) as coffer:
        before = [folder.path for folder in coffer.followed_folders(args.name)]
        folders = coffer.unfollow_folder(args.name, args.path)
    still = {folder.path for folder in folders}
    stopped = [path for path in before if path not in still]

    def render(followed: list[FollowedFolder]) -> str:
        done = "".join(f"stopped following {path} (its documents stay)\n" for path in stopped)
        return done + ("\n".join(map(followed_line, followed)) or f"no folder is followed in '{args.name}' now")

    emit(args, folders, render)


def followed_line(folder: FollowedFolder) -> str:
    """``following  /path  (12 documents, 3 pending, synced 2026-…)``, as far as this process knows."""
    state = [counted(folder.documents, "document")]
    if not folder.present:
        state.append("missing: its documents are kept")
    if folder.failed:
        state.append(f"{folder.failed} failed")
    if folder.pending:
        state.append(f"{folder.pending} pending")
    if folder.last_sync:
        state.append(f"synced {folder.last_sync}")
    return f"following  {escape_hidden(folder.path)}  ({', '.join(state)})"


def ingest_line(item: DirectoryIngestItem) -> str:
    """``created   ID  Title  path``, or ``rejected  code: message  path`` and its hint below."""
    if item.status != "rejected":
        return f"{item.status:<9} " + "  ".join(
            escape_hidden(p) for p in (item.document_id, item.title, item.path) if p
        )
    line = f"{item.status:<9} {item.code}: {escape_hidden(item.message or '')}  {escape_hidden(item.path)}"
    return line + (f"\n{'':<9} hint: {reword(item.hint, 'cli')}" if item.hint else "")


def kb_ingest_url(args: argparse.Namespace, settings: Settings) -> None:
    with service(settings, args) as coffer:
        result = coffer.ingest_url(args.name, args.url, replace=args.replace)
    emit(args, result, lambda r: f"{r.status:<9} {r.document_id}  {escape_hidden(r.title)}")


def kb_check_sources(args: argparse.Namespace, settings: Settings) -> None:
    with service(settings, args) as coffer:
        report = coffer.check_sources(args.name, auto_update=not args.no_update, progress=progress(args))

    def render(r: SourceReport) -> str:
        lines = [f"{c.status:<9} {c.document_id}  {escape_hidden(c.source_path)}" for c in r.documents]
        counted = ("unchanged", "changed", "missing", "edited", "updated", "added", "removed", "renamed")
        summary = ", ".join(f"{getattr(r, s)} {s}" for s in counted) + (
            f", {len(r.failed)} failed" if r.followed else ""
        )
        followed = [followed_line(f) for f in r.followed]
        lines += map(ingest_line, r.failed)
        return (
            "\n".join([*lines, summary, *followed])
            if lines
            else "\n".join(["no document was ingested from a path", *followed])
        )

    emit(args, report, render)


def kb_update_from_source(args: argparse.Namespace, settings: Settings) -> None:
    with service(settings, args) as coffer:
        result = coffer.update_from_source(args.name, args.doc_id)
    emit(args, result, lambda r: f"{r.status:<9} {r.document_id}  {escape_hidden(r.title)}")
