"""Headings and the title of a PDF, from font statistics and bookmarks (see ``_pdflayout``)."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from ._pdffurniture import PAGE_NUMBER
from ._pdfium import Fragment, PdfPages

__all__ = ["MONOSPACE", "Block", "body_size", "close_gaps", "mark_headings", "title_of"]

_SECTION = re.compile(r"^(\d+(\.\d+)*\.?|[A-Z]\.|Chapter \d+|Appendix [A-Z])\s+\S")
_MAX_HEADING_CHARS = 160
_LEADER = re.compile(r"(\. ?){4,}|…{2,}")  # a table of contents line: "Chapter 1 . . . . 7"
# Code is set in a fixed-width font, or, in a figure of a statement's syntax, in any font; its
# operators and brackets almost never occur in a heading.
MONOSPACE = re.compile(r"courier|mono|consol|menlo|typewriter|lucidacons|inconsolata|cmtt|sftt|code", re.IGNORECASE)
_CODE_CHARS = re.compile(r"[<>{}=;|]|\w\(")  # "USER(HBEDOYA)": a call, where prose puts a space
# A caption names the table, figure or listing under or over it; it heads no section.
_CAPTION = re.compile(r"^(table|figure|fig\.|example|listing|chart|exhibit)\s+[\dA-Z]+([.-]\d+)*\b", re.IGNORECASE)


@dataclass(slots=True)
class Block:
    """Consecutive lines of one column read as one paragraph, heading, list item or table."""

    lines: list[Fragment]
    kind: str = "text"
    level: int = 0
    joined: str = ""
    cells: list[list[str]] | None = None
    """A table's rows of cell text (``kind == "table"``)."""

    @property
    def size(self) -> float:
        return max(line.size for line in self.lines)

    @property
    def bold(self) -> bool:
        return all(line.bold for line in self.lines)

    def text(self) -> str:
        return self.joined


def body_size(doc: PdfPages) -> float:
    sizes: Counter[float] = Counter()
    for page in doc.pages:
        for fragment in page:
            sizes[round(fragment.size)] += len(fragment.text)
    return sizes.most_common(1)[0][0] if sizes else 10.0


def _body_font(doc: PdfPages) -> str:
    fonts: Counter[str] = Counter()
    for page in doc.pages:
        for fragment in page:
            fonts[fragment.font] += len(fragment.text)
    return fonts.most_common(1)[0][0] if fonts else ""


def mark_headings(blocks: list[Block], body: float, doc: PdfPages) -> None:
    """Mark headings and their levels: bookmarks, then sizes over the body's, bold or font changes."""
    font = _body_font(doc)
    bookmarks = {_key(title): depth for depth, title in doc.outline}
    sizes = sorted({round(b.size) for b in blocks if _heading_like(b, body) and b.size >= body * 1.15}, reverse=True)
    for index, block in enumerate(blocks):
        if block.kind == "table":
            continue
        key = _key(block.text())
        if key in bookmarks and len(block.text()) <= _MAX_HEADING_CHARS:
            block.kind, block.level = "heading", min(bookmarks[key] + 2, 6)
        elif _heading_like(block, body):
            if block.size >= body * 1.15:
                block.kind, block.level = "heading", min(2 + sizes.index(round(block.size)), 6)
            elif (block.bold or block.size >= body * 1.06) and block.size >= body * 0.85 and _standalone(block):
                block.kind, block.level = "heading", min(2 + len(sizes), 6)
        elif _font_heading(block, body, font, blocks[index + 1 : index + 2]):
            block.kind, block.level = "heading", min(2 + len(sizes), 6)


def _heading_like(block: Block, body: float) -> bool:
    text = block.text()
    return (
        # A numbered line set larger than the body, "(1) Scope", is a heading, not a list item.
        (block.kind == "text" or (block.kind == "item" and block.size >= body * 1.06))
        and len(block.lines) <= 3
        and 2 <= len(text) <= _MAX_HEADING_CHARS
        and any(ch.isalpha() for ch in text)
        and not text.endswith((",", ";"))
        and not _LEADER.search(text)
        and not _code(block)
        and (block.size >= body * 1.06 or block.bold)
    )


def _font_heading(block: Block, body: float, font: str, following: list[Block]) -> bool:
    """One short line in another font than the body's, before a paragraph in another font again.

    A run-in style heading; a line followed by more lines in its own font is a code listing's or
    a figure's, not a heading.
    """
    text = block.text()
    line = block.lines[0]
    return (
        block.kind == "text"
        and len(block.lines) == 1
        and line.font != font
        and not _code(block)
        and 3 <= len(text) <= 80
        and abs(block.size - body) <= 0.1 * body
        and text[0].isupper()
        and not text.endswith((".", ",", ";", ":"))
        and bool(following)
        and following[0].kind == "text"
        and following[0].lines[0].font != line.font
        and len(following[0].text()) > len(text)
        and not PAGE_NUMBER.match(text)
        and sum(ch.isalpha() for ch in text) >= 0.6 * len(text)
    )


def _code(block: Block) -> bool:
    """Code, or a caption: text set apart that is no heading."""
    text = block.text()
    return any(MONOSPACE.search(line.font) for line in block.lines) or bool(
        _CODE_CHARS.search(text) or _CAPTION.match(text)
    )


def _standalone(block: Block) -> bool:
    """A bold line that is a heading, not a bold phrase inside a paragraph or a table cell."""
    text = block.text()
    return (len(block.lines) <= 2 and not text.endswith((".", ":"))) or bool(_SECTION.match(text))


def _key(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.lower()))


def title_of(metadata: str, outline: list[tuple[int, str]], blocks: list[Block]) -> str:
    """The metadata title when it looks like one, else a lone top bookmark, else the first page's
    main heading (``_largest_heading``). The block on the first page that is the title becomes its level-1 heading,
    so the title is written once."""
    first_page = [b for b in blocks if b.lines[0].page == blocks[0].lines[0].page] if blocks else []
    tops = [title for depth, title in outline if depth == 0]
    named = metadata if _plausible_title(metadata) else tops[0] if len(tops) == 1 and _plausible_title(tops[0]) else ""
    if named:
        same = next((b for b in first_page if b.kind != "table" and _key(b.text()) == _key(named)), None)
        if same is not None:
            same.kind, same.level = "heading", 1
        return named
    chosen = _largest_heading([b for b in first_page if b.kind == "heading"])
    if chosen is None:
        return ""
    chosen.level = 1
    return chosen.text()


def _largest_heading(headings: list[Block]) -> Block | None:
    """The first heading, unless a later one is set clearly larger (a cover page's title under a
    label). One of one or two words counts only before every longer one: a title such as "Tidal
    Bores" over its author line, not a logo such as "Redpaper" printed under the title."""
    worded = [index for index, b in enumerate(headings) if len(b.text().split()) >= 3]
    first = worded[0] if worded else len(headings)
    candidates = [b for index, b in enumerate(headings) if index <= first or index in worded]
    if not candidates:
        return None
    largest = max(b.size for b in candidates)
    return next(b for b in candidates if b.size >= 0.8 * largest)


def close_gaps(blocks: list[Block]) -> None:
    """Section headings start at level 2 under the title, and skip no level."""
    levels = sorted({b.level for b in blocks if b.kind == "heading" and b.level > 1})
    renumber = {level: min(2 + index, 6) for index, level in enumerate(levels)}
    for block in blocks:
        if block.kind == "heading" and block.level > 1:
            block.level = renumber[block.level]


def _plausible_title(text: str) -> bool:
    lowered = text.lower()
    return (
        len(text) >= 4
        and any(ch.isalpha() for ch in text)
        and not lowered.startswith(("microsoft word", "untitled", "(anonymous)", "powerpoint presentation"))
        and not lowered.endswith((".doc", ".docx", ".pdf", ".tex", ".dvi"))
    )
