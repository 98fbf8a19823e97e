"""The ``coffer`` argument parser, built from the command table (``_commands.COMMANDS``).

Each command's parser carries, as defaults, its ``handler``, its ``command`` (the table's entry)
and its own parser as ``command_parser``, so that an error is said with that command's usage.

Built for one command line, the parser holds only what that line can reach: a group's commands
(``coffer kb ...``) when the group is named on it, a command's arguments when all its words are,
and that command alone of its group once one is named.
``coffer --version`` and ``coffer --help`` need neither (the top-level help lists each command by
its ``help`` alone), and argparse spends ~0.1 ms of a terminal-size check and locale look-ups on
every argument added, which the ~40 commands' ~190 arguments made the better part of a start-up.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from coffer_mcp import __version__
from coffer_mcp.cli._commands import COMMANDS, GROUPS, Command
from coffer_mcp.cli._output import EXIT_USAGE
from coffer_mcp.limits import DEFAULT_HOME, DEFAULT_INDEX_BACKEND, INDEX_BACKENDS

if TYPE_CHECKING:
    from coffer_mcp.settings import Settings

__all__ = ["build_parser"]


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser for ``argv`` (None: every command, in full)."""
    named = None if argv is None else set(argv)
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
    wanted = {command for command in COMMANDS if named is None or named.issuperset(command.words)}
    groups: dict[str, Any] = {}  # a group's name -> the subparsers of its commands (None: not on the line)
    for command in COMMANDS:
        *group, word = command.words
        if not group:
            _add_command(commands, word, command, full=command in wanted)
            continue
        if group[0] not in groups:
            groups[group[0]] = _add_group(commands, group[0], reached=named is None or group[0] in named)
        siblings = [c for c in wanted if c.words[:-1] == command.words[:-1]]
        # The group's other commands are only needed to list them: in its help, or to refuse a word
        # that is none of them ("invalid choice ... choose from").
        if groups[group[0]] is not None and (command in wanted or not siblings):
            _add_command(groups[group[0]], word, command, full=command in wanted)
    return parser


def _add_group(commands: Any, name: str, *, reached: bool) -> Any:
    """``coffer NAME``: a command that only groups others; given none of them, it prints its help."""
    group = commands.add_parser(name, help=GROUPS[name])
    group.set_defaults(handler=_usage(group), command_parser=group)
    return group.add_subparsers(title=f"{name} commands", metavar=f"{name.upper()}_COMMAND") if reached else None


def _add_command(commands: Any, word: str, command: Command, *, full: bool) -> None:
    sub = commands.add_parser(word, help=command.help, description=command.description or command.help)
    if full:
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
