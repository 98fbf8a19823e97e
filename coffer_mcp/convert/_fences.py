"""Split Markdown into prose and fenced-code segments, so edits can leave code alone."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator

__all__ = ["split_fences"]

_OPEN = re.compile(r"^ {0,3}(`{3,}(?=[^`\n]*$)|~{3,})", re.MULTILINE)


def split_fences(text: str) -> Iterator[tuple[bool, str]]:
    """Yield ``(is_code, segment)`` pieces of ``text`` that join back to exactly ``text``.

    Segments start at line starts; a code segment spans its fence lines (and their newline).
    Close enough to CommonMark for cleaning and titles: a fence opens with 3+ backticks (no
    backtick in the info string) or tildes, closes with at least as many of the same character
    on a line of its own, and an unclosed fence runs to the end of the document.
    """
    pos = 0
    while (opening := _OPEN.search(text, pos)) is not None:
        end = _fence_end(text, opening.end(), opening.group(1))
        if opening.start() > pos:
            yield False, text[pos : opening.start()]
        yield True, text[opening.start() : end]
        pos = end
    if pos < len(text):
        yield False, text[pos:]


@functools.lru_cache(maxsize=64)
def _closing(char: str, length: int) -> re.Pattern[str]:
    return re.compile(rf"^ {{0,3}}{re.escape(char)}{{{length},}}[ \t]*$", re.MULTILINE)


def _fence_end(text: str, after_opening: int, fence: str) -> int:
    line_end = text.find("\n", after_opening)
    if line_end == -1:
        return len(text)
    found = _closing(fence[0], len(fence)).search(text, line_end + 1)
    if found is None:
        return len(text)
    return found.end() + 1 if text.startswith("\n", found.end()) else found.end()
