"""The ``coffer`` argument parser, built from the command table (``_commands.COMMANDS``).

Each command's parser carries, as defaults, its ``handler``, its ``command`` (the table's entry)
and its own parser as ``command_parser``, so that an error is said with that command's usage.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from coffer_mcp import __version__
from coffer_mcp.cli._commands import COMMANDS, GROUPS, Command
from coffer_mcp.cli._output import EXIT_USAGE
from coffer_mcp.limits import DEFAULT_HOME, DEFAULT_INDEX_BACKEND, INDEX_BACKENDS

if TYPE_CHECKING:
    from coffer_mcp.settings import Settings

__all__ = ["build_parser"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="coffer", description="Coffer: a local-first knowledge base over MCP.")
    parser.add_argument("--version", action="version", version=f"coffer-mcp {__version__}")
    parser.add_argument("--home", help=f"the Coffer home folder (default: $COFFER_HOME or {DEFAULT_HOME})")
    parser.add_argument(
        "--index-backend",
        choices=INDEX_BACKENDS,
        help=f"where the index lives (default: $COFFER_INDEX_BACKEND or {DEFAULT_INDEX_BACKEND}); postgres "
        "needs COFFER_DATABASE_URL",
    )
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")
    groups: dict[str, Any] = {}  # a group's name -> the subparsers of its commands
    for command in COMMANDS:
        *group, word = command.words
        if group and group[0] not in groups:
            groups[group[0]] = _add_group(commands, group[0])
        _add_command(groups[group[0]] if group else commands, word, command)
    return parser


def _add_group(commands: Any, name: str) -> Any:
    """``coffer NAME``: a command that only groups others; given none of them, it prints its help."""
    group = commands.add_parser(name, help=GROUPS[name])
    group.set_defaults(handler=_usage(group), command_parser=group)
    return group.add_subparsers(title=f"{name} commands", metavar=f"{name.upper()}_COMMAND")


def _add_command(commands: Any, word: str, command: Command) -> None:
    sub = commands.add_parser(word, help=command.help, description=command.description or command.help)
    if command.json:
        sub.add_argument("--json", action="store_true", help="print machine-readable JSON")
    command.arguments(sub)
    sub.set_defaults(handler=command.handler, command=command, command_parser=sub)


def _usage(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace, Settings], int]:
    """A handler for a command group given no subcommand: its help on stderr, usage status."""

    def handler(args: argparse.Namespace, settings: Settings) -> int:
        parser.print_help(sys.stderr)
        return EXIT_USAGE

    return handler
