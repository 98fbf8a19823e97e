"""PDF pages to positioned text fragments, through PDFium (``pypdfium2``, Apache-2.0 / BSD-3).

PDFium was chosen by measurement (docs/benchmarks.md, "Conversion"): against docling's reference
Markdown its raw text had the best word recall (0.98 over 12 PDFs, pdfminer 0.89), reading order
(0.92, pdfminer 0.79), almost no ``(cid:N)`` garbage, Arabic in logical order, and it runs ~30x
faster than pdfminer. This module only reads characters and their boxes, fonts and sizes; the
layout (columns, paragraphs, headings) is worked out in ``_pdflayout``.
"""

from __future__ import annotations

import ctypes
import math
import re
import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Fragment", "PdfPages", "read_pdf"]

# PDFium marks a hyphen that ends a line with U+0002 (U+FFFE in its page text) and drops the
# line break after it.
_LINE_END_HYPHEN = "\x02"
_BREAKS = "\r\n"
_ALEFS = "\u0627\u0623\u0625\u0622"
_LAM = "\u0644"
# Font names that say bold, TeX's among them (CMBX10, SFBX1000: "bold extended").
_BOLD_NAME = re.compile(r"bold|black|heavy|demi|-medi|bx\d|cmb\d|[-,]bd\b")


@dataclass(slots=True)
class Fragment:
    """A run of characters on one line of one page, with no wide gap inside.

    Coordinates are in points from the page's top-left corner (y grows downwards).
    """

    text: str
    x0: float
    top: float
    x1: float
    bottom: float
    size: float
    bold: bool
    page: int
    hyphen_join: bool = False
    """The line ended in a hyphen PDFium recognised as a line-break hyphen."""
    rtl: bool = False
    font: str = ""
    """The base font name most of its characters use ("" when the PDF does not say)."""
    words: tuple[tuple[float, float], ...] = ()
    """Each word's left and right edge, in the order of ``text.split()`` (a table splits a
    fragment that crosses its column gutters between two words)."""
    vertical: bool = False
    """Set rotated a quarter turn (a narrow table's column headers): the box is tall, and
    ``size`` is its width."""

    @property
    def height(self) -> float:
        return self.bottom - self.top

    @property
    def width(self) -> float:
        return self.x1 - self.x0


@dataclass(slots=True)
class PdfPages:
    """What a PDF holds for the layout step."""

    pages: list[list[Fragment]]
    widths: list[float]
    title: str
    outline: list[tuple[int, str]] = field(default_factory=list)
    """Bookmarks as (depth from 0, title)."""
    undecodable: int = 0
    """Characters dropped because the PDF gives no text for them (``(cid:N)`` elsewhere)."""
    heights: list[float] = field(default_factory=list)
    """Each page's height in points (``widths`` beside it)."""


def read_pdf(data: bytes) -> PdfPages:
    """Every page's text fragments, the metadata title and the outline of a PDF."""
    import pypdfium2

    pdf = pypdfium2.PdfDocument(data)
    try:
        title = (pdf.get_metadata_dict().get("Title") or "").strip()
        outline = [(item.level, (item.get_title() or "").strip()) for item in pdf.get_toc(max_depth=6)]
        pages, widths, heights, undecodable = [], [], [], 0
        for index in range(len(pdf)):
            page = pdf[index]
            try:
                width, height = page.get_size()
                fragments, dropped = _page_fragments(page, index, height)
            finally:
                page.close()
            pages.append(fragments)
            widths.append(width)
            heights.append(height)
            undecodable += dropped
        return PdfPages(pages, widths, title, [o for o in outline if o[1]], undecodable, heights)
    finally:
        pdf.close()


@dataclass(slots=True)
class _Char:
    text: str
    left: float
    bottom: float
    right: float
    top: float
    size: float
    weight: int
    generated: bool
    font: str = ""
    vertical: bool = False


def _page_fragments(page: Any, index: int, height: float) -> tuple[list[Fragment], int]:
    textpage = page.get_textpage()
    try:
        chars, dropped = _chars(textpage)
    finally:
        textpage.close()
    fragments: list[Fragment] = []
    for line in _lines(chars):
        fragments.extend(_split_wide_gaps(line, index, height))
    return fragments, dropped


def _chars(textpage: Any) -> tuple[list[_Char], int]:
    from pypdfium2 import raw

    handle = textpage.raw
    box = raw.FS_RECTF()
    fonts: dict[int | None, tuple[int, str]] = {}
    chars, dropped = [], 0
    for i in range(raw.FPDFText_CountChars(handle)):
        code = raw.FPDFText_GetUnicode(handle, i)
        text = chr(code) if 0 < code < 0x110000 else "\ufffd"
        if _undecodable(text) or raw.FPDFText_HasUnicodeMapError(handle, i) == 1:
            dropped += 1
            continue
        # The loose box spans the font's ascent to descent: one height per font and size, where
        # the tight box varies with each glyph and FPDFText_GetFontSize ignores the text matrix.
        raw.FPDFText_GetLooseCharBox(handle, i, box)
        generated = raw.FPDFText_IsGenerated(handle, i) == 1
        weight, font = (0, "") if generated else _font(raw, handle, i, fonts)
        # Text turned a quarter turn runs up or down the page: its size is the box's width.
        vertical = abs(math.sin(raw.FPDFText_GetCharAngle(handle, i))) > 0.9
        height = box.right - box.left if vertical else box.top - box.bottom
        chars.append(_Char(text, box.left, box.bottom, box.right, box.top, height, weight, generated, font, vertical))
    return _fix_lam_alef(chars), dropped


def _font(raw: Any, handle: Any, index: int, cache: dict[int | None, tuple[int, str]]) -> tuple[int, str]:
    """The weight (700 for a font named bold) and base name of a character's font, per text object."""
    obj = raw.FPDFText_GetTextObject(handle, index)
    key = ctypes.cast(obj, ctypes.c_void_p).value if obj else None
    if key not in cache:
        cache[key] = _font_of(raw, obj) if obj else (400, "")
    return cache[key]


def _font_of(raw: Any, obj: Any) -> tuple[int, str]:
    font = raw.FPDFTextObj_GetFont(obj)
    if not font:
        return 400, ""
    buffer = ctypes.create_string_buffer(128)
    raw.FPDFFont_GetBaseFontName(font, buffer, len(buffer))
    name = buffer.value.decode("latin-1")
    if _BOLD_NAME.search(name.lower()):
        return 700, name
    return max(raw.FPDFFont_GetWeight(font), 400), name


def _undecodable(text: str) -> bool:
    code = ord(text)
    return text == "\ufffd" or 0xE000 <= code <= 0xF8FF or (code < 0x20 and text not in "\t\r\n\x02")


def _fix_lam_alef(chars: list[_Char]) -> list[_Char]:
    """PDFium splits the Arabic lam-alef ligature glyph into alef then lam; the word has lam first."""
    for i in range(len(chars) - 1):
        a, b = chars[i], chars[i + 1]
        if a.text in _ALEFS and b.text == _LAM and (a.left, a.right) == (b.left, b.right):
            chars[i], chars[i + 1] = b, a
    return chars


def _lines(chars: list[_Char]) -> list[list[_Char]]:
    """Split at PDFium's line breaks, and where the text jumps to another baseline without one."""
    lines: list[list[_Char]] = []
    current: list[_Char] = []
    for char in chars:
        if char.text in _BREAKS:
            if current:
                lines.append(current)
            current = []
            continue
        if current and char.text.strip() and _jumps(current, char):
            lines.append(current)
            current = []
        current.append(char)
    if current:
        lines.append(current)
    return lines


def _jumps(line: list[_Char], char: _Char) -> bool:
    last = next((c for c in reversed(line) if c.text.strip()), None)
    if last is None or last.text == _LINE_END_HYPHEN:
        return last is not None
    if char.vertical != last.vertical:
        return True
    if char.vertical:  # the line runs up or down the page: it stays in one band across it
        middle = (char.left + char.right) / 2
        return not (last.left - 1 <= middle <= last.right + 1)
    middle = (char.top + char.bottom) / 2
    return not (last.bottom - 1 <= middle <= last.top + 1)


def _split_wide_gaps(line: list[_Char], page: int, height: float) -> list[Fragment]:
    """One fragment per run of characters without a gap wider than ~1 em (a gutter, a table cell)."""
    runs: list[list[_Char]] = [[]]
    previous: _Char | None = None
    for char in line:
        visible = char.text.strip() and char.text != _LINE_END_HYPHEN
        if visible and previous is not None:
            gap = _gap(previous, char)
            if gap > max(1.0 * max(char.size, previous.size), 8.0):
                runs.append([])
        runs[-1].append(char)
        if visible:
            previous = char
    return [f for run in runs if (f := _fragment(run, page, height)) is not None]


def _gap(previous: _Char, char: _Char) -> float:
    if char.vertical:
        return max(char.bottom - previous.top, previous.bottom - char.top)
    return max(char.left - previous.right, previous.left - char.right)


def _fragment(run: list[_Char], page: int, height: float) -> Fragment | None:
    hyphen = any(c.text == _LINE_END_HYPHEN for c in run[-3:])
    visible = [c for c in run if c.text.strip() and c.text != _LINE_END_HYPHEN]
    words = [w for w in _words(run) if w[0]]
    if not words:
        return None
    rtl = sum(_is_rtl(c.text) for c in visible) > len(visible) / 2
    size = statistics.median(c.size for c in visible)
    bold = sum(c.weight >= 600 for c in visible) > len(visible) / 2
    font = Counter(c.font for c in visible).most_common(1)[0][0]
    return Fragment(
        text=" ".join(text for text, _, _ in words),
        x0=min(c.left for c in visible),
        top=height - max(c.top for c in visible),
        x1=max(c.right for c in visible),
        bottom=height - min(c.bottom for c in visible),
        size=round(size, 1),
        bold=bold,
        page=page,
        hyphen_join=hyphen,
        rtl=rtl,
        font=font,
        words=tuple((left, right) for _, left, right in words),
        vertical=visible[0].vertical,
    )


def _words(run: list[_Char]) -> list[tuple[str, float, float]]:
    """The run's words (split at its spaces) with their left and right edges."""
    words: list[list[_Char]] = [[]]
    for char in run:
        if not char.text.strip():
            words.append([])
        elif char.text != _LINE_END_HYPHEN:
            words[-1].append(char)
    return [(_text(word), min(c.left for c in word), max(c.right for c in word)) for word in words if word]


def _text(chars: list[_Char]) -> str:
    # Characters outside the BMP come as UTF-16 surrogate halves: pair them, drop lone ones.
    text = "".join(c.text for c in chars)
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace").replace("\ufffd", "")


def _is_rtl(text: str) -> bool:
    return "\u0590" <= text <= "\u08ff" or "\ufb1d" <= text <= "\ufefc"
