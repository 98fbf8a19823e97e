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
from dataclasses import replace
from itertools import pairwise

from ._pdffurniture import strip_furniture
from ._pdfheadings import (
    Block,
    body_size,
    close_gaps,
    mark_headings,
    title_of,
)
from ._pdfium import Fragment, PdfPages

__all__ = ["pdf_markdown"]

_BULLETS = "•◦▪▫●○■□‣⁃∙·–—-*"
_NUMBERED = re.compile(r"^(\(?\d{1,3}[.)]|\(?[a-z][.)])\s")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef]")
_LATIN_THEN_RTL = re.compile(r"([A-Za-z0-9])([\u0600-\u06ff])|([\u0600-\u06ff])([A-Za-z])")
_WORD = re.compile(r"[^\W\d_]+")


def pdf_markdown(doc: PdfPages) -> tuple[str, str]:
    """The Markdown of a PDF and the title it names (metadata or first heading; "" if none)."""
    body = body_size(doc)
    blocks = [block for page in strip_furniture(doc.pages, doc.heights, body) for block in _page_blocks(page)]
    if not blocks:  # a scan: no text layer, whatever the metadata says
        return "", ""
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


def _xy_cut(region: list[Fragment], rtl: bool) -> list[list[Fragment] | Block]:
    """The region in reading order: columns (top-to-bottom lists of lines) and tables."""
    if len(region) <= 1:
        return [region]
    columns = _vertical_split(region)
    if len(columns) > 1 and all(_prose(column) for column in columns):
        ordered = reversed(columns) if rtl else columns
        return [piece for column in ordered for piece in _xy_cut(column, rtl)]
    bands = _horizontal_split(region)
    if len(bands) > 1:
        pieces: list[list[Fragment] | Block] = []
        for group in _spaced_rows(bands):
            table = _table_under_heading(_flat(group), rtl) if len(group) > 1 else []
            pieces.extend(table or [piece for band in group for piece in _xy_cut(band, rtl)])
        return pieces
    return _table_under_heading(region, rtl) or [_rows(region, rtl)]


def _table_under_heading(region: list[Fragment], rtl: bool) -> list[list[Fragment] | Block]:
    """The region's table, after a line or two that are no row of it (its caption, a title); [] if none."""
    table = _table(region, rtl)
    if table is not None:
        return [table]
    rows = _row_groups(region)
    for skip in range(1, min(3, len(rows) - 1)):
        table = _table(_flat(rows[skip:]), rtl)
        if table is not None:
            return [_rows(_flat(rows[:skip]), rtl), table]
    return []


def _row_groups(region: list[Fragment]) -> list[list[Fragment]]:
    rows: list[list[Fragment]] = []
    for fragment in sorted(region, key=lambda f: (f.top, f.x0)):
        # A cell set up the page belongs to the row it reaches into (headers are bottom-aligned).
        overlap = 0.0 if fragment.vertical else 0.5 * fragment.height
        if rows and fragment.top < _row_bottom(rows[-1]) - overlap:
            rows[-1].append(fragment)
        else:
            rows.append([fragment])
    return rows


def _row_bottom(row: list[Fragment]) -> float:
    """Where a row's first line ends; a cell set up the page (a column header) fills the row."""
    lines = [f.bottom for f in row if not f.vertical]
    turned = [f.bottom for f in row if f.vertical]
    return max(([min(lines)] if lines else []) + turned)


def _spaced_rows(bands: list[list[Fragment]]) -> list[list[list[Fragment]]]:
    """Bands grouped where consecutive ones are each one row of 2+ cells: a table with airy rows."""
    groups: list[list[list[Fragment]]] = []
    previous_row = False
    for band in bands:
        row = len(band) >= 2 and _one_row(band)
        if row and previous_row:
            groups[-1].append(band)
        else:
            groups.append([band])
        previous_row = row
    return groups


def _flat(group: list[list[Fragment]]) -> list[Fragment]:
    return [fragment for band in group for fragment in band]


def _one_row(band: list[Fragment]) -> bool:
    if any(f.vertical for f in band):
        return len(_row_groups(band)) == 1
    top = min(f.top for f in band)
    return all(f.top < top + 0.5 * f.height for f in band)


def _vertical_split(region: list[Fragment]) -> list[list[Fragment]]:
    spans = sorted(region, key=lambda f: f.x0)
    groups: list[list[Fragment]] = [[spans[0]]]
    right = spans[0].x1
    for fragment in spans[1:]:
        if fragment.x0 > right + 4:  # a gutter no line crosses
            groups.append([])
        groups[-1].append(fragment)
        right = max(right, fragment.x1)
    return groups


def _prose(column: list[Fragment]) -> bool:
    """Mostly full lines of one width: running text, not the cells of a table or a form."""
    if len(column) < 3:
        return False
    width = max(f.x1 for f in column) - min(f.x0 for f in column)
    full = sum(f.width >= 0.75 * width for f in column)
    # A column may hold a table or a list too; several full lines still make it running text.
    return width > 80 and full >= 3 and full >= 0.3 * len(column)


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


def _rows(region: list[Fragment], rtl: bool) -> list[Fragment]:
    """Lines top to bottom; fragments sharing a line become one, in the script's direction."""
    return [_merge(sorted(row, key=lambda f: -f.x1 if rtl else f.x0)) for row in _row_groups(region)]


def _table(region: list[Fragment], rtl: bool) -> Block | None:
    """Cells aligned in 2+ columns over 2+ rows, short as table cells are; else None (text)."""
    rows = _row_groups(region)
    gutters = _hidden_gutters(rows)
    if len(rows[0]) == 1 and _crosses(rows[0][0], gutters):
        return None  # a caption over the table: _table_under_heading reads it as text
    if gutters:
        rows = [[piece for fragment in row for piece in _cut(fragment, gutters)] for row in rows]
    region = _flat(rows)
    columns = _vertical_split(region)
    if len(columns) < 2 or len(region) < 4:
        return None
    filled = sum(len(row) >= 2 for row in rows)
    average = sum(len(f.text) for f in region) / len(region)
    if len(rows) < 2 or filled < max(2, 0.5 * len(rows)) or average > 40:
        return None
    order = list(reversed(columns)) if rtl else columns
    where = {id(f): index for index, column in enumerate(order) for f in column}
    cells = []
    for row in rows:
        line = [""] * len(order)
        for fragment in sorted(row, key=lambda f: f.x0):
            index = where[id(fragment)]
            line[index] = f"{line[index]} {fragment.text}".strip()
        cells.append(line)
    if sum(bool(cell) for cell in cells[0]) < 2 and len(cells) > 2:
        return None  # a title over the table, in one of its columns: _table_under_heading reads it as text
    return Block(region, kind="table", cells=_merge_continuations(cells))


def _hidden_gutters(rows: list[list[Fragment]]) -> list[tuple[float, float]]:
    """Column gutters that a fragment runs across, hiding them from ``_vertical_split``.

    A header cell over two columns ("simple complex" under "TEDs") or two cells closer than the
    gap that separates fragments run together. A gutter here is a gap no word of a row of 2+
    cells crosses, with a cell on each side of it and nothing across it in two or more of those
    rows: a column boundary, not a space. Lines alone in their row (a caption, a group of
    sub-headers, a note) are left out of the count: they may span the table.
    """
    cells = [row for row in rows if len(row) > 1]
    if not cells:
        return []
    edges = sorted(edge for row in cells for f in row for edge in (f.words or ((f.x0, f.x1),)))
    gaps: list[tuple[float, float]] = []
    right = edges[0][1]
    for x0, x1 in edges[1:]:
        if x0 > right + 4:  # as wide as _vertical_split's gutters
            gaps.append((right, x0))
        right = max(right, x1)
    crossed = [g for g in gaps if any(_crosses(f, [g]) for row in rows for f in row)]
    return [g for g in crossed if _open_rows(cells, g) >= 2]


def _crosses(fragment: Fragment, gutters: list[tuple[float, float]]) -> bool:
    return any(fragment.x0 < left and fragment.x1 > right for left, right in gutters)


def _meets(gap: tuple[float, float], gutters: list[tuple[float, float]]) -> bool:
    return any(gap[0] < right and gap[1] > left for left, right in gutters)


def _open_rows(rows: list[list[Fragment]], gutter: tuple[float, float]) -> int:
    """Rows with a cell on each side of ``gutter`` and none across it."""
    left, right = gutter
    return sum(
        not any(_crosses(f, [gutter]) for f in row)
        and any(f.x1 <= left for f in row)
        and any(f.x0 >= right for f in row)
        for row in rows
    )


def _cut(fragment: Fragment, gutters: list[tuple[float, float]]) -> list[Fragment]:
    """``fragment`` in pieces at the gaps between its words that fall in a gutter it crosses.

    Only a gap clearly wider than a space is cut: half the text's size or more, and 1.5 times
    the fragment's widest gap elsewhere (a fixed-width font's spaces are half its size too: a
    line of code indented under a listing's keywords is not a row of cells).
    """
    words = fragment.text.split()
    if len(words) != len(fragment.words) or not _crosses(fragment, gutters):
        return [fragment]
    gaps = [(a[1], b[0]) for a, b in pairwise(sorted(fragment.words))]
    wide = [g for g in gaps if g[1] - g[0] >= 0.5 * fragment.size and _meets(g, gutters)]
    spaces = max((right - left for left, right in gaps if (left, right) not in wide), default=0.0)
    cuts = [right for left, right in wide if right - left > 1.5 * spaces]
    if not cuts:
        return [fragment]

    def slot(index: int) -> int:  # which side of the cuts a word is on
        return sum(fragment.words[index][0] >= cut for cut in cuts)

    runs: list[list[int]] = []  # consecutive words in text order (right to left in Arabic) on one side
    for index in range(len(words)):
        if runs and slot(runs[-1][-1]) == slot(index):
            runs[-1].append(index)
        else:
            runs.append([index])
    return [
        replace(
            fragment,
            text=" ".join(words[i] for i in run),
            x0=min(fragment.words[i][0] for i in run),
            x1=max(fragment.words[i][1] for i in run),
            words=tuple(fragment.words[i] for i in run),
            hyphen_join=fragment.hyphen_join and run is runs[-1],
        )
        for run in runs
    ]


def _merge_continuations(rows: list[list[str]]) -> list[list[str]]:
    """A row with an empty first cell, filling 2+ columns the row above fills, continues it.

    Cells of two lines ("OTSL" over "HTML") come out of a PDF as two rows.
    """
    merged: list[list[str]] = []
    for row in rows:
        above = merged[-1] if len(merged) > 1 else None  # never into the header row
        filled = {i for i, cell in enumerate(row) if cell}
        # Two or more cells continue: one lone cell is more likely a row of its own ("Color").
        if (
            above is not None
            and not row[0]
            and above[0]
            and len(filled) >= 2
            and filled <= {i for i, c in enumerate(above) if c}
        ):
            merged[-1] = [f"{a} {b}".strip() for a, b in zip(above, row, strict=True)]  # rows share one width
        else:
            merged.append(row)
    return merged


def _merge(row: list[Fragment]) -> Fragment:
    if len(row) == 1:
        return row[0]
    first = row[0]
    return Fragment(
        text=" ".join(f.text for f in row),
        x0=min(f.x0 for f in row),
        top=min(f.top for f in row),
        x1=max(f.x1 for f in row),
        bottom=max(f.bottom for f in row),
        # The size most of its characters have: a larger word does not make a callout a heading.
        size=max(row, key=lambda f: len(f.text)).size,
        bold=all(f.bold for f in row),
        page=first.page,
        hyphen_join=row[-1].hyphen_join,
        rtl=first.rtl,
        font=first.font,
        words=tuple(word for f in row for word in f.words),
    )


# -- paragraphs ----------------------------------------------------------------------------------


def _paragraphs(lines: list[Fragment]) -> list[Block]:
    spacing = _line_spacing(lines)
    blocks: list[Block] = []
    for line in lines:
        previous = blocks[-1].lines[-1] if blocks else None
        if previous is None or _breaks(previous, line, spacing):
            blocks.append(Block([line], kind="item" if _list_item(line.text) else "text"))
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
        or (line.bold != previous.bold and not _list_item(previous.text))
        or (line.font != previous.font and previous.width < 0.7 * line.width)  # a run-in heading
        or _list_item(line.text)
    )


def _list_item(text: str) -> bool:
    return (len(text) > 1 and text[0] in _BULLETS and text[1] == " ") or bool(_NUMBERED.match(text))


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


def _render(blocks: list[Block], title: str) -> str:
    out: list[str] = []
    if title and not any(b.kind == "heading" and b.level == 1 for b in blocks):
        out.append(f"# {title}")
    for block in blocks:
        text = block.text()
        if block.kind == "table" and block.cells:
            out.append(_table_markdown(block.cells))
        elif block.kind == "heading":
            out.append("#" * block.level + " " + text)
        elif block.kind == "item":
            out.append(_list_line(text))
        else:
            out.append(_escape(text))
    return "\n\n".join(out) + "\n"


def _table_markdown(rows: list[list[str]]) -> str:
    def line(cells: list[str]) -> str:
        return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"

    return "\n".join([line(rows[0]), line(["---"] * len(rows[0]))] + [line(row) for row in rows[1:]])


def _list_line(text: str) -> str:
    if text[0] in _BULLETS:
        return "- " + text[1:].strip()
    return text


def _escape(text: str) -> str:
    """Keep a paragraph a paragraph: a leading ``#``, ``>`` or ``1.`` would change its meaning."""
    if text[:1] in "#>" or re.match(r"^\d+[.)]\s", text):
        return "\\" + text
    return text
