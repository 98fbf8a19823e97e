"""Fenced code blocks: the one definition the cleaner, the title finder and the chunker share.

A fence opens on a line of 3+ backticks (no backtick in its info string) or 3+ tildes, indented
at most three spaces. It closes on a line that, whitespace stripped, is a run of the same
character at least as long, with at most three spaces of indentation before anything else; an
unclosed fence runs to the end of the document. That is CommonMark, except that a closing line
may also carry a tab or other Unicode whitespace around its run (as the chunker always allowed).

Two ways in: ``fence_opening`` / ``closes_fence`` for a parser that already walks lines (the
chunker), ``split_fences`` for a whole text (cleaning and titles, where a 1 MB document should
take milliseconds: the regexes jump from fence to fence instead of visiting every line).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator

__all__ = ["closes_fence", "fence_opening", "split_fences"]

_OPEN = re.compile(r"^ {0,3}(`{3,}(?=[^`\n]*$)|~{3,})", re.MULTILINE)
_LINE_SPACE = r"[^\S\n]"  # whitespace that does not end the line


def fence_opening(line: str) -> str | None:
    """The run of backticks or tildes that opens a fence on ``line`` (one line, no newline), or None."""
    match = _OPEN.match(line)
    return match[1] if match else None


def closes_fence(line: str, opening: str) -> bool:
    """Whether ``line`` (one line, no newline) closes the fence ``opening`` opened."""
    return _closing(opening[0], len(opening)).fullmatch(line) is not None


def split_fences(text: str) -> Iterator[tuple[bool, str]]:
    """Yield ``(is_code, segment)`` pieces of ``text`` that join back to exactly ``text``.

    Segments start at line starts; a code segment spans its fence lines (and their newline).
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
    # Up to three spaces, then (only after a tab or other non-space whitespace) any whitespace.
    indent = rf" {{0,3}}(?:[^\S \n]{_LINE_SPACE}*)?"
    return re.compile(rf"^{indent}{re.escape(char)}{{{length},}}{_LINE_SPACE}*$", re.MULTILINE)


def _fence_end(text: str, after_opening: int, fence: str) -> int:
    line_end = text.find("\n", after_opening)
    if line_end == -1:
        return len(text)
    found = _closing(fence[0], len(fence)).search(text, line_end + 1)
    if found is None:
        return len(text)
    return found.end() + 1 if text.startswith("\n", found.end()) else found.end()
