"""Pages of a document's body: by characters or by whole lines, bounded, and where the next one starts.

Lines are counted as grep counts them (only ``\\n`` ends one), so grep's line N is what a read of
``unit="lines", offset=N-1, limit=1`` returns.
"""

from __future__ import annotations

from typing import Any, Literal

from coffer_mcp.errors import InvalidArgumentError
from coffer_mcp.limits import MAX_OFFSET

__all__ = [
    "MAX_OFFSET",
    "MAX_PAGE_CHARS",
    "MAX_PAGE_LINES",
    "body_lines",
    "char_page",
    "check_page",
    "is_int",
    "line_page",
]

MAX_PAGE_CHARS = 200_000
MAX_PAGE_LINES = 20_000


def body_lines(body: str) -> list[str]:
    """The body's lines, each with its ``\\n``.

    Only ``\\n`` ends a line, as in grep: ``str.splitlines`` would also split at a lone ``\\r``, a form
    feed or a Unicode line separator, and number every later line differently.
    """
    lines = body.split("\n")
    return [line + "\n" for line in lines[:-1]] + lines[-1:]


def char_page(body: str, offset: int, limit: int | None) -> dict[str, Any]:
    """The body from ``offset``, ``limit`` characters of it (all with no limit)."""
    end = len(body) if limit is None else min(len(body), offset + limit)
    return _page(body[offset:end], end, "chars", more=end < len(body))


def line_page(body: str, offset: int, limit: int | None) -> dict[str, Any]:
    """Whole lines from ``offset``, as many as ``limit`` and ``MAX_PAGE_CHARS`` allow (all with no limit).

    A line longer than a page on its own is cut at the cap, and the page says to read on by chars from
    there: a page of lines stays as bounded as a page of chars, and ``offset=N-1, limit=1`` still starts
    at grep's line N.
    """
    lines = body_lines(body)
    if limit is None:
        return _page("".join(lines[offset:]), len(lines), "lines", more=False)
    end, size = offset, 0
    while end < min(len(lines), offset + limit) and size + len(lines[end]) <= MAX_PAGE_CHARS:
        size += len(lines[end])
        end += 1
    if end > offset or offset >= len(lines):
        return _page("".join(lines[offset:end]), end, "lines", more=end < len(lines))
    start = sum(map(len, lines[:offset]))
    note = (
        f"Line {offset + 1} has {len(lines[offset].removesuffix(chr(10))):,} characters, more than a page holds: "
        f"this is its first {MAX_PAGE_CHARS:,}. Read the rest with unit='chars', offset={start + MAX_PAGE_CHARS}."
    )
    return _page(lines[offset][:MAX_PAGE_CHARS], start + MAX_PAGE_CHARS, "chars", more=True) | {"note": note}


def _page(text: str, end: int, unit: Literal["chars", "lines"], *, more: bool) -> dict[str, Any]:
    if not more:
        return {"markdown": text, "has_more": False}
    return {"markdown": text, "has_more": True, "next_offset": end, "next_unit": unit}


def is_int(value: object) -> bool:
    """Whether ``value`` is an integer, and not a bool (JSON's ``true`` is no offset)."""
    return isinstance(value, int) and not isinstance(value, bool)


def check_page(offset: int, limit: int | None, unit: str, around: int | None, window: int) -> None:
    """Check a read's page arguments, or raise the invalid-argument error saying which is wrong."""
    if unit not in ("chars", "lines"):
        raise InvalidArgumentError(
            f"unit must be 'chars' or 'lines', not {str(unit)[:40]!r}.", hint="Use unit='lines'."
        )
    bound = MAX_PAGE_CHARS if unit == "chars" else MAX_PAGE_LINES
    if not is_int(offset) or not 0 <= offset <= MAX_OFFSET:
        raise InvalidArgumentError(
            f"offset must be from 0 to {MAX_OFFSET:,} {unit}, not {offset!r:.40}.",
            hint="Start at offset=0, or at the offset a page before ended.",
        )
    if limit is not None and (not is_int(limit) or not 1 <= limit <= bound):
        raise InvalidArgumentError(
            f"limit must be from 1 to {bound:,} when reading by {unit}, not {limit!r:.40}.",
            hint=f"Read {bound:,} {unit} or fewer at a time, paging on with offset.",
        )
    if around is not None and (
        not is_int(around) or not is_int(window) or not 0 <= around <= MAX_OFFSET or not 0 <= window <= 20
    ):
        raise InvalidArgumentError(
            f"around_position must be 0-{MAX_OFFSET:,} and window 0-20.",
            hint="Pass the position of a search passage, with window=1.",
        )
    if around is not None and (offset != 0 or limit is not None or unit != "chars"):
        given = ", ".join(
            f"{name}={value!r}"
            for name, value, default in (("offset", offset, 0), ("limit", limit, None), ("unit", unit, "chars"))
            if value != default
        )
        raise InvalidArgumentError(
            f"around_position reads chunks, so it takes no page arguments ({given}).",
            hint="Pass around_position (and window) alone for a passage and its neighbours, or offset, limit "
            "and unit without it for a page.",
        )
