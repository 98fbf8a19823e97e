"""``coffer kb search`` and ``coffer kb grep``: passages and lines, over one knowledge base or several."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any

from coffer_mcp.cli._arguments import add_filters
from coffer_mcp.cli._output import emit, escape_hidden
from coffer_mcp.cli._service import service
from coffer_mcp.errors import reword
from coffer_mcp.limits import MAX_MATCHES_LIMIT, MAX_TOP_K, STRATEGY_CHOICES

if TYPE_CHECKING:
    from coffer_mcp.models import GrepResult, RerankInfo, SearchResult
    from coffer_mcp.settings import Settings

__all__ = ["add_grep", "add_search", "kb_grep", "kb_search", "search_filters"]


def add_search(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", help="a knowledge base, several separated by commas, or '*' for all")
    p.add_argument("query", nargs="+")
    p.add_argument("--top-k", type=int, default=5, metavar="N", help=f"how many passages (1-{MAX_TOP_K:,}; default 5)")
    p.add_argument(
        "--strategy",
        choices=STRATEGY_CHOICES,
        default="auto",
        help="force a retrieval strategy (default: the knowledge base's own)",
    )
    add_filters(p)
    p.add_argument("--no-rerank", action="store_true", help="skip the configured reranker (compare the orders)")
    p.add_argument(
        "--all-passages",
        action="store_true",
        help="the best passages as they rank, several of one document if so (default: one per document first)",
    )


def add_grep(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", help="a knowledge base, several separated by commas, or '*' for all")
    p.add_argument("pattern")
    p.add_argument(
        "--max-matches",
        type=int,
        default=50,
        metavar="N",
        help=f"stop after this many matching lines (1-{MAX_MATCHES_LIMIT:,}; default 50)",
    )
    p.add_argument("-i", "--ignore-case", action="store_true")
    p.add_argument("-F", "--fixed-strings", action="store_true")
    add_filters(p)


def kb_search(args: argparse.Namespace, settings: Settings) -> None:
    with service(settings, args) as coffer:
        query, rerank = " ".join(args.query), not args.no_rerank
        result = coffer.search(
            _selector(args.name),
            query,
            args.top_k,
            strategy=args.strategy,
            filters=search_filters(args),
            rerank=rerank,
            per_document=not args.all_passages,
        )
    emit(args, result, _render_search)


def search_filters(args: argparse.Namespace) -> dict[str, Any] | None:
    """The filters the options ask for (``add_filters``), or None; the core checks them."""
    given = {
        "tags": args.tags,
        "path_prefix": _path_prefix(args.path_prefix),
        "formats": args.formats,
        **{
            f"{field}_{side}": getattr(args, f"{field}_{side}")
            for field in ("created", "updated")
            for side in ("after", "before")
        },
    }
    return {key: value for key, value in given.items() if value is not None} or None


def _path_prefix(text: str | None) -> str | None:
    """A path prefix as documents record their source: absolute, ``~`` expanded (a final ``/`` kept)."""
    if not text:
        return text
    path = os.path.expanduser(text)
    if os.path.isabs(path):
        return path
    return os.path.abspath(path) + (os.sep if path.endswith(("/", os.sep)) else "")


def _selector(name: str) -> str | list[str]:
    return name if name == "*" else [part.strip() for part in name.split(",") if part.strip()]


def kb_grep(args: argparse.Namespace, settings: Settings) -> None:
    with service(settings, args) as coffer:
        result = coffer.grep(
            _selector(args.name),
            args.pattern,
            args.max_matches,
            ignore_case=args.ignore_case,
            fixed_strings=args.fixed_strings,
            filters=search_filters(args),
        )

    def render(r: GrepResult) -> str:
        lines = [f"{h.path}:{h.file_line}:{escape_hidden(h.line)}" for h in r.hits]  # file lines, for editors
        if r.timed_out:
            lines.append(f"(stopped at the time limit)\nhint: {reword(r.hint or '', 'cli')}")
        elif r.truncated:
            lines.append(f"(truncated after {len(r.hits)} matches; raise --max-matches to see more)")
        return "\n".join(lines) if lines else "no matches"

    emit(args, result, render)


def _render_search(result: SearchResult) -> str:
    from coffer_mcp.store.locations import describe as describe_location

    hint = f"\nhint: {reword(result.hint, 'cli')}" if result.hint else ""  # the query itself shaped the answer
    if not result.passages:
        return f"no passages found (strategy: {result.strategy}){hint}"
    blocks = []
    for rank, p in enumerate(result.passages, 1):
        text = " ".join(p.text.split())
        text = text if len(text) <= 300 else text[:297] + "..."
        where = " > ".join(p.heading_path)
        if p.source_location:  # where in the original: "report.pdf, pp. 36-37"
            source = describe_location(p.source_location)
            cited = f"{p.original_filename}, {source}" if p.original_filename else source
            where = f"{where}  ({escape_hidden(cited)})" if where else f"({escape_hidden(cited)})"
        more = f"\n   also matches at #{', #'.join(map(str, p.more_positions))}" if p.more_positions else ""
        tier = f" ({p.matched_terms} terms)" if p.matched_terms else ""  # all-terms passages rank first
        title = escape_hidden(p.title or "")
        blocks.append(
            f"{rank}. {title}  [{p.kb}/{p.document_id}#{p.position}]  score {p.score:.3f}{tier}\n"
            + (f"   {where}\n" if where else "")
            + f"   {text}{more}"
        )
    return "\n".join(blocks) + f"\n(strategy: {result.strategy}{_rerank_note(result.rerank)}){hint}"


def _rerank_note(info: RerankInfo | None) -> str:
    if info is None:
        return ""
    return f"; reranked by {info.model}" if info.applied else f"; not reranked: {info.reason}"
