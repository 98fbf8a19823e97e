"""Positioned PDF text fragments to Markdown: reading order, paragraphs, headings, lists.

Reading order is a recursive XY-cut: a region splits into columns at a vertical gutter when the
pieces on both sides read as prose (full lines), else into bands at wide horizontal gaps, else
its lines are read top to bottom (each line left to right, or right to left for Arabic/Hebrew).
Headings come from font statistics: the body size is the size most characters have, and short
blocks clearly larger than it, or bold and standing alone, are headings; PDF bookmarks win
where they exist.
"""

from __future__ import annotations

import re
from collections import Counter
from itertools import pairwise

from ._pdfcolumns import CHECKBOXES, NUMBERED, TICKED, columns, item, sections
from ._pdffurniture import strip_furniture
from ._pdfheadings import (
    Block,
    body_size,
    close_gaps,
    mark_headings,
    title_of,
)
from ._pdfium import Fragment, PdfPages
from ._pdfregions import Region, flat, row_groups
from ._pdftables import spaced_rows, table_under_heading, tables_among_lines
from ._places import Mapped, places_of

__all__ = ["pdf_markdown"]

_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef]")
_LATIN_THEN_RTL = re.compile(r"([A-Za-z0-9])([\u0600-\u06ff])|([\u0600-\u06ff])([A-Za-z])")
_WORD = re.compile(r"[^\W\d_]+")
# Lines a region's columns may have above or below them with no gap (a heading, a footnote).
_PEEL = 5


def pdf_markdown(doc: PdfPages) -> tuple[Mapped, str]:
    """The Markdown of a PDF, each line with its page, and the title it names (metadata or first
    heading; "" if none)."""
    body = body_size(doc)
    blocks = [block for page in strip_furniture(doc.pages, doc.heights, body) for block in _page_blocks(page)]
    if not blocks:  # a scan: no text layer, whatever the metadata says
        return Mapped("", ()), ""
    vocabulary = Counter(w.lower() for page in doc.pages for f in page for w in _WORD.findall(f.text))
    for block in blocks:
        block.joined = _join_lines(block.lines, vocabulary)
    mark_headings(blocks, body, doc)
    title = title_of(doc.title, doc.outline, blocks)
    close_gaps(blocks)
    return _render(blocks, title), title


# -- reading order -------------------------------------------------------------------------------


def _page_blocks(fragments: list[Fragment]) -> list[Block]:
    if not fragments:
        return []
    rtl = sum(f.rtl for f in fragments) > len(fragments) / 2
    blocks: list[Block] = []
    for piece in _xy_cut(fragments, rtl):
        if isinstance(piece, Block):
            blocks.append(piece)
        else:
            blocks.extend(_paragraphs(piece))
    return blocks


def _xy_cut(region: Region, rtl: bool) -> list[Region | Block]:
    """The region in reading order: columns (top-to-bottom lists of lines) and tables."""
    if len(region) <= 1:
        return [region]
    parts = columns(region)
    if len(parts) > 1:
        ordered = reversed(parts) if rtl else parts
        return [piece for column in ordered for piece in _xy_cut(column, rtl)]
    bands = _horizontal_split(region)
    if len(bands) > 1:
        return _sections(bands, rtl)
    return _peeled(region, rtl) or _lines_and_tables(region, rtl)


def _sections(bands: list[Region], rtl: bool) -> list[Region | Block]:
    """Bands in reading order: each run of them in columns read column by column."""
    pieces: list[Region | Block] = []
    plain: list[Region] = []
    for section in sections(bands):
        if len(section) > 1:
            pieces += _bands(plain, rtl) + _xy_cut(flat(section), rtl)
            plain = []
        else:
            plain += section
    return pieces + _bands(plain, rtl)


def _peeled(region: Region, rtl: bool) -> list[Region | Block]:
    """Lines across the top or bottom of columns set too close to them for a band of their own
    (a heading just above two columns), read before or after the columns; [] if none."""
    rows = row_groups(region)
    for count in range(1, min(_PEEL, len(rows) - 3) + 1):
        if len(columns(flat(rows[count:]))) > 1:
            return _xy_cut(flat(rows[:count]), rtl) + _xy_cut(flat(rows[count:]), rtl)
        if len(columns(flat(rows[:-count]))) > 1:
            return _xy_cut(flat(rows[:-count]), rtl) + _xy_cut(flat(rows[-count:]), rtl)
    return []


def _bands(bands: list[Region], rtl: bool) -> list[Region | Block]:
    """Bands one by one, those of single rows of cells (a table with airy rows) together."""
    pieces: list[Region | Block] = []
    for group in spaced_rows(bands):
        table = table_under_heading(flat(group), rtl) if len(group) > 1 else []
        pieces.extend(table or [piece for band in group for piece in _xy_cut(band, rtl)])
    return pieces


def _lines_and_tables(region: Region, rtl: bool) -> list[Region | Block]:
    return table_under_heading(region, rtl) or tables_among_lines(region, rtl)


def _horizontal_split(region: list[Fragment]) -> list[list[Fragment]]:
    """Bands separated by a gap of at least one line height (paragraph gaps rarely align)."""
    ordered = sorted(region, key=lambda f: f.top)
    size = sorted(f.size for f in region)[len(region) // 2]
    bands: list[list[Fragment]] = [[ordered[0]]]
    bottom = ordered[0].bottom
    for fragment in ordered[1:]:
        if fragment.top > bottom + max(size, 4.0):
            bands.append([])
        bands[-1].append(fragment)
        bottom = max(bottom, fragment.bottom)
    return bands


# -- paragraphs ----------------------------------------------------------------------------------


def _paragraphs(lines: list[Fragment]) -> list[Block]:
    spacing = _line_spacing(lines)
    blocks: list[Block] = []
    for line in lines:
        previous = blocks[-1].lines[-1] if blocks else None
        if previous is None or _breaks(previous, line, spacing):
            blocks.append(Block([line], kind="item" if item(line.text) else "text"))
        else:
            blocks[-1].lines.append(line)
    return blocks


def _line_spacing(lines: list[Fragment]) -> float:
    """The usual gap between two lines of a paragraph in this column (documents set 1-2x)."""
    gaps = sorted(b.top - a.bottom for a, b in pairwise(lines) if -0.5 * b.height < b.top - a.bottom < 1.5 * b.height)
    return gaps[len(gaps) // 3] if gaps else 0.0


def _breaks(previous: Fragment, line: Fragment, spacing: float) -> bool:
    if previous.hyphen_join:
        return False
    gap = line.top - previous.bottom
    size = max(line.size, previous.size)
    return (
        gap > max(spacing, 0.0) + max(0.35 * size, 2.0)
        or gap < -0.5 * line.height  # went back up: another column or a side note
        or abs(line.size - previous.size) > 0.05 * previous.size
        or (line.bold != previous.bold and not item(previous.text))
        or (line.font != previous.font and previous.width < 0.7 * line.width)  # a run-in heading
        or item(line.text)
    )


def _join_lines(lines: list[Fragment], vocabulary: Counter[str]) -> str:
    text = lines[0].text
    for previous, line in pairwise(lines):
        if previous.hyphen_join:
            text += _dehyphenate(text, line.text, vocabulary)
        elif _CJK.match(text[-1:]) and _CJK.match(line.text[:1]):
            text += line.text
        else:
            text += " " + line.text
    return _LATIN_THEN_RTL.sub(_space_between, text)


def _dehyphenate(before: str, after: str, vocabulary: Counter[str]) -> str:
    """``after`` to append to ``before`` across a line-end hyphen PDFium removed.

    A syllable break joins (``con-`` + ``firming``); a compound whose halves are both words of the
    document elsewhere too (the halves themselves count once), and whose joined form is not,
    keeps its hyphen (``chat-`` + ``optimized``).
    """
    left = _WORD.findall(before[-40:])
    right = _WORD.findall(after[:40])
    if left and right and before[-1:].isalpha() and after[:1].isalpha():
        head, tail = left[-1].lower(), right[0].lower()
        if vocabulary[head] > 1 and vocabulary[tail] > 1 and not vocabulary[head + tail] and len(head) > 1:
            return "-" + after
    if before[-1:].isalpha() and after[:1].isalpha():
        return after
    return "-" + after if before[-1:].isalnum() else after


def _space_between(match: re.Match[str]) -> str:
    """Word processors often drop the space between a Latin word and the Arabic next to it."""
    return " ".join(g for g in match.groups() if g)


# -- Markdown ------------------------------------------------------------------------------------


def _render(blocks: list[Block], title: str) -> Mapped:
    """The Markdown of the blocks, each line with the page (1-based) its block is on."""
    out: list[tuple[str, dict[str, int] | None]] = []
    if title and not any(b.kind == "heading" and b.level == 1 for b in blocks):
        out.append((f"# {title}", None))  # from the metadata: on no page in particular
    out.extend((_block_markdown(block), {"page": block.lines[0].page + 1}) for block in blocks)
    mapped = places_of(out)
    return Mapped(mapped.markdown + "\n", mapped.places)


def _block_markdown(block: Block) -> str:
    text = block.text()
    if block.kind == "table" and block.cells:
        return _table_markdown(block.cells)
    if block.kind == "heading":
        return "#" * block.level + " " + text
    if block.kind == "item":
        return _list_line(text)
    return _escape(text)


def _table_markdown(rows: list[list[str]]) -> str:
    def line(cells: list[str]) -> str:
        return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"

    return "\n".join([line(rows[0]), line(["---"] * len(rows[0]))] + [line(row) for row in rows[1:]])


def _list_line(text: str) -> str:
    """A bulleted line as a Markdown list item, a check box as a task item ticked or not."""
    if NUMBERED.match(text):
        return text
    box = "[x] " if text[0] in TICKED else "[ ] " if text[0] in CHECKBOXES else ""
    return "- " + box + text[1:].strip()


def _escape(text: str) -> str:
    """Keep a paragraph a paragraph: a leading ``#``, ``>`` or ``1.`` would change its meaning."""
    if text[:1] in "#>" or re.match(r"^\d+[.)]\s", text):
        return "\\" + text
    return text
