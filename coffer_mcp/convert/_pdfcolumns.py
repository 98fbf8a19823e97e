"""Columns: where a region of a PDF page is two or more columns, read one after the other.

A gutter is a vertical gap, about an em wide or more, that no fragment of the region crosses. A
column is a piece between gutters that holds running text or a list: most of its characters are
in lines of several words, or in lines that start with a bullet, a number or a check box. A piece
that holds neither (a page number in the margin, a table's short cells, a column of figures) is
no column: it joins the piece nearest to it, so a table stays whole for the table reader.

Bands of a page (cut at horizontal gaps, or single rows of text) are grouped into sections where
consecutive bands keep a gutter between them: two columns whose paragraph gaps happen to line
up, or whose lines sit side by side, are still read each to its end before the next. A line
that runs across the gutter (a full-width heading, a wide note) ends a section.
"""

from __future__ import annotations

import functools
import re
import statistics
import unicodedata

from ._pdfregions import Region, flat, vertical_split

__all__ = ["CHECKBOXES", "NUMBERED", "TICKED", "columns", "item", "sections"]

CHECKBOXES = "☐☑☒❏❑"
TICKED = "☑☒"
MARKERS = "•◦▪▫●○■□‣⁃∙·–—-*" + CHECKBOXES
NUMBERED = re.compile(r"^(\(?\d{1,3}[.)]|\(?[a-z][.)])\s")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]")
# A glyph of a symbol font that PDFium gives as a private-use or control character: a box or a
# bullet; and arrows, geometric shapes, symbols and dingbats (not circled numbers: "① ...").
_SYMBOLS = {"Co", "Cc"}
_SYMBOL_BLOCKS = (("\u2190", "\u21ff"), ("\u25a0", "\u27bf"), ("\u2b00", "\u2bff"))
# Share of a column's characters in running lines or list items.
_TEXT_SHARE = 0.6


def columns(region: Region) -> list[Region]:
    """The region's columns, left to right; the region alone when it has none."""
    if len(region) < 4:
        return [region]
    pieces = vertical_split(region, _gutter(region))
    strong = [_column(piece) for piece in pieces]
    while len(pieces) > 1:
        weak = [index for index, ok in enumerate(strong) if not ok]
        if weak:
            index = min(weak, key=lambda i: sum(len(f.text) for f in pieces[i]))
            low, high = sorted((index, _nearest(pieces, index)))
        else:
            # Lines side by side, row for row, are a table's cells unless both sides are
            # paragraphs or lists (two columns set with one leading).
            pairs = [i for i in range(len(pieces) - 1) if _cells(pieces[i], pieces[i + 1])]
            if not pairs:
                break
            low, high = pairs[0], pairs[0] + 1
        pieces[low : high + 1] = [pieces[low] + pieces[high]]
        strong[low : high + 1] = [_column(pieces[low])]
    return pieces


def sections(bands: list[Region]) -> list[list[Region]]:
    """Consecutive bands grouped where they read as the same columns; every other band alone."""
    grouped: list[list[Region]] = []
    start = 0
    while start < len(bands):
        end = start + 1
        while end < len(bands) and len(vertical_split(flat(bands[start : end + 1]), _gutter(bands[end]))) > 1:
            end += 1
        # The longest run from ``start`` that reads as columns (a table under them may share a gap).
        while end > start + 1 and len(columns(flat(bands[start:end]))) < 2:
            end -= 1
        grouped.append(bands[start:end])
        start = end
    return grouped


def _gutter(region: Region) -> float:
    """The narrowest gap between columns: most of an em of the region's usual text."""
    return max(6.0, 0.8 * statistics.median(f.size for f in region))


def _column(piece: Region) -> bool:
    """Running text, paragraphs that fill the piece's width, or a list."""
    total = sum(len(f.text) for f in piece)
    running = [f for f in piece if _running(f.text) or item(f.text)]
    return (len(running) >= 2 and sum(len(f.text) for f in running) >= _TEXT_SHARE * total) or _flowing(piece)


def _cells(left: Region, right: Region) -> bool:
    """Two pieces whose lines pair off row by row, not both paragraphs or lists: table columns."""
    return _paired(left, right) and _paired(right, left) and not (_flowing(left) and _flowing(right))


def _flowing(piece: Region) -> bool:
    """Paragraphs wrapped to the piece's width, or a list: what a column of a page holds.

    Most of its characters are in full lines (spanning most of the piece, words rather than
    figures: a narrow side column of labels wraps too) or in list items. A table's column of
    similar cells is too narrow, or figures, or has few lines that wrap.
    """
    width = max(f.x1 for f in piece) - min(f.x0 for f in piece)
    total = sum(len(f.text) for f in piece)
    full = sum(len(f.text) for f in piece if f.width >= 0.75 * width and _words(f.text) and width > 80)
    items = sum(len(f.text) for f in piece if item(f.text))
    return full + items >= 0.5 * total


def _paired(piece: Region, other: Region) -> bool:
    """Most lines of ``piece`` have a line of ``other`` beside them, on the same row."""
    tops = [f.top for f in other]
    beside = sum(any(abs(f.top - top) <= 0.5 * f.height for top in tops) for f in piece)
    return beside >= 0.5 * len(piece)


@functools.lru_cache(maxsize=4096)
def _running(text: str) -> bool:
    """A line of running text: several words, mostly letters (not a row of figures)."""
    if len(_CJK.findall(text)) >= 10:
        return True
    return len(text) >= 20 and len(text.split()) >= 3 and _words(text)


@functools.lru_cache(maxsize=4096)
def _words(text: str) -> bool:
    letters = sum(ch.isalpha() for ch in text)
    return len(text.split()) >= 2 and letters >= 0.6 * len(text.replace(" ", ""))


@functools.lru_cache(maxsize=4096)
def item(text: str) -> bool:
    """A list item: a line that starts with a bullet, a check box or a number."""
    if len(text) > 2 and text[1] == " " and (text[0] in MARKERS or _symbol(text[0])):
        return True
    return bool(NUMBERED.match(text))


def _symbol(char: str) -> bool:
    return any(low <= char <= high for low, high in _SYMBOL_BLOCKS) or unicodedata.category(char) in _SYMBOLS


def _nearest(pieces: list[Region], index: int) -> int:
    """The neighbour of ``pieces[index]`` across the narrower gap."""
    if index == 0:
        return 1
    if index == len(pieces) - 1:
        return index - 1
    left = min(f.x0 for f in pieces[index]) - max(f.x1 for f in pieces[index - 1])
    right = min(f.x0 for f in pieces[index + 1]) - max(f.x1 for f in pieces[index])
    return index - 1 if left <= right else index + 1
