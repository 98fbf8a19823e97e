"""``main``: argv -> settings -> one handler -> an exit status; errors said once, on stderr."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from coffer_mcp.cli._output import EXIT_ERROR, EXIT_PIPE_CLOSED, EXIT_USAGE, NOTES, print_error
from coffer_mcp.cli._parser import build_parser
from coffer_mcp.cli._serve import check_serve, serve, serve_unconfigured
from coffer_mcp.errors import CofferError, ConfigError

if TYPE_CHECKING:
    from coffer_mcp.settings import Settings

__all__ = ["main", "serve_main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``coffer``."""
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv)
    args, extra = parser.parse_known_args(argv)
    if extra:  # said with the usage of the command they were given to, not of 'coffer' (exit 2)
        getattr(args, "command_parser", parser).error(f"unrecognized arguments: {' '.join(extra)}")
    if not getattr(args, "handler", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    if args.handler is serve:
        check_serve(args)
    NOTES.clear()
    try:
        status = _run(args)
    except CofferError as exc:
        print_error(exc)
        return EXIT_ERROR
    except BrokenPipeError:
        return _stdout_closed()
    except KeyboardInterrupt:
        print("coffer: interrupted", file=sys.stderr)
        return 130
    else:
        return status
    finally:
        for note in NOTES:
            print(f"coffer: {note}", file=sys.stderr)


def _run(args: argparse.Namespace) -> int:
    """Load the settings (flags > environment > config.yaml) and run the command's handler."""
    from coffer_mcp.settings import load_settings  # after parsing: --help and --version load no pydantic

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
        if args.handler is not serve or args.http:
            raise
        return serve_unconfigured(args, exc)
    _configure_logging(settings)
    status = args.handler(args, settings) or 0
    sys.stdout.flush()  # a closed pipe shows here, not as a second error at interpreter exit
    return status


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


def _configure_logging(settings: Settings) -> None:
    import logging  # here, not above: --help and --version need none of it

    logging.basicConfig(
        stream=sys.stderr, level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
