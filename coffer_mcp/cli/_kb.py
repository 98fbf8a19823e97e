"""``coffer kb create|list|describe|update|delete`` and the document commands ``read|rm|documents|tag``."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from coffer_mcp.cli._arguments import add_filters, add_switch
from coffer_mcp.cli._ingest import followed_line
from coffer_mcp.cli._output import NOTES, emit, key_values, progress, table
from coffer_mcp.cli._retrieval import search_filters
from coffer_mcp.cli._service import service
from coffer_mcp.errors import ConfirmationRequiredError, InvalidArgumentError, counted
from coffer_mcp.limits import (
    CHUNK_OVERLAP,
    CHUNK_SIZE,
    CHUNK_SIZE_MAX,
    CHUNK_SIZE_MIN,
    MAX_DESCRIPTION,
    MAX_LIST_LIMIT,
    MAX_OFFSET,
)

if TYPE_CHECKING:
    from coffer_mcp.models import DocumentPage, KnowledgeBaseDetails
    from coffer_mcp.settings import Settings

__all__ = [
    "add_create",
    "add_delete",
    "add_documents",
    "add_tag",
    "add_update",
    "kb_create",
    "kb_delete",
    "kb_describe",
    "kb_documents",
    "kb_list",
    "kb_read",
    "kb_rm",
    "kb_tag",
    "kb_update",
]


_DESCRIPTION_HELP = f"what the knowledge base holds, for agents choosing one (at most {MAX_DESCRIPTION:,} characters)"
_CHUNK_SIZE_HELP = f"characters per chunk, {CHUNK_SIZE_MIN}-{CHUNK_SIZE_MAX}"
_CHUNK_OVERLAP_HELP = "characters a chunk repeats from the one before it, below half the chunk size"


def add_create(p: argparse.ArgumentParser) -> None:
    p.add_argument("name")
    p.add_argument("--description", default="", metavar="TEXT", help=_DESCRIPTION_HELP)
    p.add_argument(
        "--chunk-size",
        type=int,
        metavar="N",
        help=f"{_CHUNK_SIZE_HELP} (default: the chunk_size setting, {CHUNK_SIZE} unless set)",
    )
    p.add_argument(
        "--chunk-overlap",
        type=int,
        metavar="N",
        help=f"{_CHUNK_OVERLAP_HELP} (default: the chunk_overlap setting, {CHUNK_OVERLAP} unless set, "
        "shrunk in proportion for a smaller --chunk-size)",
    )
    p.add_argument("--vector", action="store_true", help="also embed documents for hybrid search")


def add_update(p: argparse.ArgumentParser) -> None:
    p.add_argument("name")
    p.add_argument("--description", metavar="TEXT", help=_DESCRIPTION_HELP)
    p.add_argument("--chunk-size", type=int, metavar="N", help=f"{_CHUNK_SIZE_HELP}; re-chunks every document")
    p.add_argument("--chunk-overlap", type=int, metavar="N", help=f"{_CHUNK_OVERLAP_HELP}; re-chunks every document")
    add_switch(p, "vector", "embed documents for hybrid search", "drop the vectors")
    add_switch(
        p, "auto-update-sources", "let check-sources refresh changed documents", "check-sources only reports them"
    )


def add_delete(p: argparse.ArgumentParser) -> None:
    p.add_argument("name")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")


def add_tag(p: argparse.ArgumentParser) -> None:
    p.add_argument("name")
    p.add_argument("doc_id")
    p.add_argument("tags", nargs="*", metavar="TAG", help="the document's tags from now on (they replace its own)")
    p.add_argument("--clear", action="store_true", help="remove every tag of the document")


def add_documents(p: argparse.ArgumentParser) -> None:
    p.add_argument("name")
    p.add_argument("--q", default="", help="only titles containing this")
    p.add_argument(
        "--limit", type=int, default=50, metavar="N", help=f"documents per page (1-{MAX_LIST_LIMIT:,}; default 50)"
    )
    p.add_argument(
        "--offset", type=int, default=0, metavar="N", help=f"skip this many documents (0-{MAX_OFFSET:,}; default 0)"
    )
    add_filters(p)


def kb_create(args: argparse.Namespace, settings: Settings) -> None:
    with service(settings, args) as coffer:
        details = coffer.create_kb(
            args.name,
            args.description,
            chunk_size=args.chunk_size,
            chunk_overlap=args.chunk_overlap,
            vector=args.vector,
        )
    emit(args, details, lambda d: f"created knowledge base '{d.name}' at {d.path}")


def kb_list(args: argparse.Namespace, settings: Settings) -> None:
    with service(settings, args) as coffer:
        kbs = coffer.list_kbs()
    emit(
        args,
        kbs,
        lambda items: (
            table(["NAME", "DOCS", "DESCRIPTION"], [[k.name, k.document_count, k.description] for k in items])
            if items
            else "no knowledge bases yet (create one: coffer kb create NAME)"
        ),
    )


def kb_describe(args: argparse.Namespace, settings: Settings) -> None:
    with service(settings, args) as coffer:
        details = coffer.describe_kb(args.name)

    emit(args, details, _render_details)


def _render_details(d: KnowledgeBaseDetails) -> str:
    """A knowledge base as ``key  value`` lines, then a ``following`` line per followed folder."""
    return "\n".join([key_values(d, exclude={"followed"}), *map(followed_line, d.followed)])


def kb_update(args: argparse.Namespace, settings: Settings) -> None:
    with service(settings, args) as coffer:
        details = coffer.update_kb(
            args.name,
            description=args.description,
            chunk_size=args.chunk_size,
            chunk_overlap=args.chunk_overlap,
            vector=args.vector,
            auto_update_sources=args.auto_update_sources,
            progress=progress(args),
        )
    emit(args, details, _render_details)


def kb_delete(args: argparse.Namespace, settings: Settings) -> None:
    with service(settings, args) as coffer:
        coffer.open_kb(args.name)  # an unknown name is refused as such, before anyone is asked
        if not args.yes and not _confirmed(args.name):
            raise ConfirmationRequiredError(
                f"Not deleting '{args.name}'.", hint="Pass --yes to delete without a prompt."
            )
        result = coffer.delete_kb(args.name)
    emit(args, result, lambda r: f"deleted knowledge base '{r.kb}' ({counted(r.files_removed, 'file')})")


def _confirmed(name: str) -> bool:
    if not sys.stdin.isatty():
        return False
    answer = input(f"Delete knowledge base '{name}' and all its documents? Type its name to confirm: ")
    return answer.strip() == name


def kb_tag(args: argparse.Namespace, settings: Settings) -> None:
    if bool(args.tags) == args.clear:
        raise InvalidArgumentError(
            "Give the document's tags, or --clear to remove them.", hint="e.g. coffer kb tag notes DOC_ID draft"
        )
    with service(settings, args) as coffer:
        result = coffer.edit_document(args.name, args.doc_id, tags=args.tags)
    emit(args, result, lambda r: f"{r.status} {r.document_id}: tags {', '.join(r.tags) or '(none)'}")


def kb_read(args: argparse.Namespace, settings: Settings) -> None:
    with service(settings, args) as coffer:
        document = coffer.read_document(args.name, args.doc_id)
    if document.warning and not args.json:
        NOTES.append(f"warning: {document.warning}")
    emit(args, document, lambda d: d.markdown)


def kb_rm(args: argparse.Namespace, settings: Settings) -> None:
    with service(settings, args) as coffer:
        result = coffer.delete_document(args.name, args.doc_id)
    emit(args, result, lambda r: f"deleted document {r.document_id} from '{r.kb}'")


def kb_documents(args: argparse.Namespace, settings: Settings) -> None:
    with service(settings, args) as coffer:
        page = coffer.list_documents(args.name, args.q, args.limit, args.offset, filters=search_filters(args))

    def render(p: DocumentPage) -> str:
        tagged = any(d.tags for d in p.documents)  # a TAGS column only when some document has tags
        rows = [
            [d.document_id, d.original_format, d.source_mode, *([", ".join(d.tags)] if tagged else []), d.title]
            for d in p.documents
        ]
        shown = f"{p.offset + 1}-{p.offset + len(p.documents)} of {p.total}" if p.documents else f"0 of {p.total}"
        headers = ["ID", "FORMAT", "MODE", *(["TAGS"] if tagged else []), "TITLE"]
        return table(headers, rows) + f"\n({shown})"

    emit(args, page, render)
