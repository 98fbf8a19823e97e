"""Titles and safe names derived from a document and its (untrusted) filename."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator

from coffer_mcp.store.markdown import split_fences

__all__ = ["derive_title", "extension_of", "first_heading", "safe_filename"]

MAX_TITLE_CHARS = 200
FALLBACK_TITLE = "Untitled"

_H1 = re.compile(r"^ {0,3}#(?:[ \t]+(?P<text>.*?))?(?:[ \t]+#+)?[ \t]*$", re.MULTILINE)
_INLINE = [
    (re.compile(r"!\[([^\]]*)\]\([^)]*\)"), r"\1"),  # image -> alt text
    (re.compile(r"\[([^\]]*)\]\([^)]*\)"), r"\1"),  # inline link -> text
    (re.compile(r"\[([^\]]*)\]\[[^\]]*\]"), r"\1"),  # reference link -> text
    (re.compile(r"<((?:https?|mailto):[^>\s]+)>"), r"\1"),  # autolink -> address
    (re.compile(r"</?[A-Za-z][^>]*>"), ""),  # inline HTML tags
    (re.compile(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1"), r"\2"),  # strong
    (re.compile(r"(?<![\w*])\*(?=\S)(.+?)(?<=\S)\*(?![\w*])"), r"\1"),  # *emphasis*
    (re.compile(r"(?<![\w_])_(?=\S)(.+?)(?<=\S)_(?![\w_])"), r"\1"),  # _emphasis_
    (re.compile(r"~~(?=\S)(.+?)(?<=\S)~~"), r"\1"),  # strikethrough
]
# Escaped punctuation is parked in the Private Use Area while the rules above run.
_ESCAPED = re.compile(r"\\([!-/:-@\[-`{-~])")
_PARKED = re.compile("[\ue000-\ue07f]")
_CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)")
_SPACES = re.compile(r"\s+")


def derive_title(markdown: str, filename: str) -> str:
    """Pick a document title: the first ATX H1 outside code fences, else the filename stem.

    Markdown emphasis, links and code-span syntax are stripped from the heading, and the result
    is capped at 200 characters.

    Args:
        markdown: The (cleaned) Markdown body.
        filename: The original filename; only its final path component is used.

    Returns:
        A non-empty, single-line title.
    """
    return first_heading(markdown) or _plain_stem(filename)


def first_heading(markdown: str) -> str | None:
    """The first non-empty ATX H1 outside code fences as plain text (max 200 chars), or None."""
    for is_code, segment in split_fences(markdown):
        if is_code:
            continue
        for text in _h1_texts(segment):
            if title := _plain(text):
                return title
    return None


def _h1_texts(segment: str) -> Iterator[str]:
    # str.find is far faster than a MULTILINE regex scan over a large document without H1s.
    pos = segment.find("#")
    while pos != -1:
        line_start = segment.rfind("\n", 0, pos) + 1
        if pos - line_start <= 3 and not segment[line_start:pos].strip(" "):
            heading = _H1.match(segment, line_start)
            if heading is not None:
                yield heading.group("text") or ""
        pos = segment.find("#", pos + 1)


def safe_filename(filename: str) -> str:
    """The final path component of ``filename`` without control characters (may be empty)."""
    final = re.split(r"[/\\]", filename)[-1]
    return "".join(ch for ch in final if unicodedata.category(ch)[0] != "C").strip()


def extension_of(filename: str) -> str:
    """The lowercase extension of the final path component, without the dot ("" if none)."""
    name = safe_filename(filename)
    stem, dot, ext = name.rpartition(".")
    return ext.lower() if dot and stem.strip(".") else ""


def _plain(text: str) -> str:
    # Code spans are literal: split them out so emphasis rules never touch their content.
    pieces = _CODE_SPAN.split(text)
    plain = []
    for index in range(0, len(pieces), 3):
        prose = _ESCAPED.sub(lambda m: chr(0xE000 + ord(m.group(1))), pieces[index])
        for pattern, replacement in _INLINE:
            prose = pattern.sub(replacement, prose)
        plain.append(_PARKED.sub(lambda m: chr(ord(m.group()) - 0xE000), prose))
        if index + 2 < len(pieces):
            plain.append(pieces[index + 2].strip())
    return _SPACES.sub(" ", "".join(plain)).strip()[:MAX_TITLE_CHARS].rstrip()


def _plain_stem(filename: str) -> str:
    name = safe_filename(filename)
    stem, dot, _ = name.rpartition(".")
    if dot and stem.strip("."):
        name = stem
    name = _SPACES.sub(" ", name).strip()[:MAX_TITLE_CHARS].rstrip()
    return name if name.strip(".") else FALLBACK_TITLE
