"""What a command prints: ``--json`` or text, tables, ``key  value`` lines, errors and notes on stderr.

Nothing here imports the core: a value is rendered after the command has loaded it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from coffer_mcp.errors import CofferError, reword

if TYPE_CHECKING:
    from pydantic import BaseModel

__all__ = [
    "EXIT_ERROR",
    "EXIT_PIPE_CLOSED",
    "EXIT_USAGE",
    "NOTES",
    "emit",
    "escape_hidden",
    "human_size",
    "key_values",
    "print_error",
    "print_json",
    "progress",
    "table",
]

EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_PIPE_CLOSED = 141  # 128 + SIGPIPE: what a shell reports for a command whose reader went away

NOTES: list[str] = []  # said once, on stderr, after the command's output


def print_error(exc: CofferError) -> None:
    hint = exc.hint_for("cli")
    print(f"coffer: {exc.message}" + (f"\n  hint: {hint}" if hint else ""), file=sys.stderr)


def escape_hidden(text: str) -> str:
    """``store.escape_hidden``, imported when first printed: by then the command has loaded the store."""
    from coffer_mcp.store import escape_hidden as escape

    return escape(text)


def emit(args: argparse.Namespace, value: Any, render: Callable[[Any], str]) -> None:
    if args.json:
        print_json(value)
    else:
        print(render(value))


def print_json(value: Any) -> None:
    import json

    from pydantic import BaseModel

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


def key_values(model: BaseModel, exclude: set[str] | None = None) -> str:
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


def table(headers: list[str], rows: list[list[Any]]) -> str:
    cells = [headers, *[[escape_hidden(str(c)) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells)


def human_size(n: int) -> str:
    """``812 B``, ``1.4 KiB``, ``23.0 MiB``: a size as a person reads it (``--json`` keeps the bytes)."""
    if n < 1024:
        return f"{n} B"
    size, units = n / 1024, ["KiB", "MiB", "GiB", "TiB"]
    while size >= 1024 and len(units) > 1:
        size, units = size / 1024, units[1:]
    return f"{size:.1f} {units[0]}"


def progress(args: argparse.Namespace) -> Callable[[int, int, str], None] | None:
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
