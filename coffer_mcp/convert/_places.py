"""Where each line of a converter's Markdown comes from in the original (``store.locations``).

A converter that knows it returns ``Mapped``: its Markdown with one location (or None) per line.
Cleaning then drops and changes lines, so the locations are carried over to the cleaned Markdown
by matching its lines with the converter's (``after_cleaning``). For Word documents and e-mails
the location follows from the Markdown itself (``heading_places``, ``part_places``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from coffer_mcp.store.locations import Location, merge
from coffer_mcp.store.markdown import closes_fence, fence_opening
from coffer_mcp.store.sourcemap import align

from ._clean import cleaned_line, normalize_newlines

__all__ = ["Mapped", "Places", "after_cleaning", "heading_places", "line_places", "part_places", "places_of"]

Places = tuple[Location | None, ...]
"""One location (or None) per line of a Markdown text, lines split at ``\\n``."""

_HEADING = re.compile(r" {0,3}(#{1,6})(?:[ \t]+(.*))?")
_CONTENT = "## Content"  # MarkItDown's line between an e-mail's headers and its body


@dataclass(frozen=True, slots=True)
class Mapped:
    """A converter's Markdown (before cleaning) and the location of each of its lines."""

    markdown: str
    places: Places


def places_of(blocks: Sequence[tuple[str, Location | None]], separator: str = "\n\n") -> Mapped:
    """Blocks of Markdown joined by ``separator`` (a blank line), each with the location of all its lines."""
    lines: list[Location | None] = []
    gap = separator.count("\n") - 1  # the blank lines a separator makes
    for index, (text, location) in enumerate(blocks):
        if index:
            lines.extend([None] * gap)
        lines.extend([location] * (text.count("\n") + 1))
    return Mapped(separator.join(text for text, _ in blocks), tuple(lines))


def line_places(count: int, first: int = 1) -> Places:
    """``count`` lines that are the original's lines ``first``, ``first + 1``, ..."""
    return tuple({"line": first + k} for k in range(count))


def after_cleaning(before: str, places: Places, after: str) -> Places:
    """The places of ``after`` (``before`` cleaned), from those of ``before``'s lines.

    Cleaning only drops lines (blank runs, comments) and shortens some (a comment inside one): a
    line found unchanged keeps its place, a changed one gets the places of the lines it came from
    (the lines with text between its unchanged neighbours, a comment removed among them).
    """
    old = [cleaned_line(line) or None for line in normalize_newlines(before).split("\n")]
    new = [line or None for line in after.split("\n")]
    matched = align(old, new)
    previous, following = _neighbours(matched)
    result: list[Location | None] = []
    for j, found in enumerate(matched):
        if found is not None:
            result.append(places[found] if found < len(places) else None)
        elif new[j] is None:
            result.append(None)
        else:
            gap = range(previous[j] + 1, min(following[j], len(places)))
            result.append(merge(places[i] for i in gap if old[i] is not None))
    return tuple(result)


def _neighbours(matched: list[int | None]) -> tuple[list[int], list[int]]:
    """For each item, the matched index before it (-1: none) and after it (a large number: none)."""
    before, after = [-1] * len(matched), [1 << 62] * len(matched)
    last = -1
    for j, found in enumerate(matched):
        before[j] = last
        last = found if found is not None else last
    last = 1 << 62
    for j in range(len(matched) - 1, -1, -1):
        after[j] = last
        found = matched[j]
        last = found if found is not None else last
    return before, after


def heading_places(markdown: str) -> Places:
    """Each line under its heading path (a Word document's headings, which are its sections)."""
    stack: list[tuple[int, str]] = []
    fence: str | None = None
    places: list[Location | None] = []
    for line in markdown.split("\n"):
        if fence is not None:
            fence = None if closes_fence(line, fence) else fence
        elif (opening := fence_opening(line)) is not None:
            fence = opening
        elif (match := _HEADING.fullmatch(line)) is not None:
            level, title = len(match[1]), (match[2] or "").strip().rstrip("#").strip()
            while stack and stack[-1][0] >= level:
                stack.pop()
            if title:
                stack.append((level, title))
        places.append({"heading": [title for _, title in stack]} if stack else None)
    return tuple(places)


def part_places(markdown: str) -> Places:
    """An e-mail converted by MarkItDown: its header lines, then its body (after ``## Content``)."""
    places: list[Location | None] = []
    part: str | None = None
    for line in markdown.split("\n"):
        if line.startswith("# ") and part is None:
            places.append(None)  # the converter's own title
            part = "headers"
        elif line.strip() == _CONTENT and part != "body":
            places.append(None)
            part = "body"
        else:
            places.append({"part": part} if part and line else None)
    return tuple(places)
