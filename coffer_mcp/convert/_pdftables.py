"""Tables in positioned PDF text: cells aligned in columns over rows (see ``_pdflayout``)."""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise

from ._pdfheadings import MONOSPACE, Block
from ._pdfium import Fragment
from ._pdfregions import Region, crosses, flat, lines, row_groups, vertical_split

__all__ = ["spaced_rows", "table_under_heading", "tables_among_lines"]

# Rows of cells among lines of text make a table from this many on (two may be a justified line,
# three of two cells a listing's keywords and operands), or from three of three columns.
_ROWS_AMONG_LINES = 5
_SHORT_TABLE = (3, 3)
# The most characters a table's cells have on average; two rows of longer pieces are two lines of
# justified prose with a wide space in each.
_LONGEST_CELLS = {False: 40, True: 20}


def table_under_heading(region: Region, rtl: bool) -> list[Region | Block]:
    """The region's table, after a line or two that are no row of it (its caption, a title); [] if none."""
    table = _table(region, rtl)
    if table is not None:
        return [table]
    rows = row_groups(region)
    for skip in range(1, min(3, len(rows) - 1)):
        table = _table(flat(rows[skip:]), rtl)
        if table is not None:
            return [lines(flat(rows[:skip]), rtl), table]
    return []


def tables_among_lines(region: Region, rtl: bool) -> list[Region | Block]:
    """The region's lines, with each run of rows of 2+ cells that reads as a table made one."""
    rows = row_groups(region)
    pieces: list[Region | Block] = []
    start = index = 0
    while index < len(rows):
        end = index
        while end < len(rows) and len(rows[end]) >= 2 and not any(MONOSPACE.search(f.font) for f in rows[end]):
            end += 1  # code lines up in columns too
        found = _table(flat(rows[index:end]), rtl) if end - index >= _SHORT_TABLE[0] else None
        if found is not None and found.cells and _among_lines(found.cells):
            pieces += [lines(flat(rows[start:index]), rtl)] if start < index else []
            pieces.append(found)
            start = end
        index = max(end, index + 1)
    return pieces + ([lines(flat(rows[start:]), rtl)] if start < len(rows) else [])


def _among_lines(cells: list[list[str]]) -> bool:
    return len(cells) >= _ROWS_AMONG_LINES or (len(cells) >= _SHORT_TABLE[0] and len(cells[0]) >= _SHORT_TABLE[1])


def spaced_rows(bands: list[Region]) -> list[list[Region]]:
    """Bands grouped where consecutive ones are each one row of 2+ cells: a table with airy rows."""
    groups: list[list[Region]] = []
    previous_row = False
    for band in bands:
        row = len(band) >= 2 and _one_row(band)
        if row and previous_row:
            groups[-1].append(band)
        else:
            groups.append([band])
        previous_row = row
    return groups


def _one_row(band: Region) -> bool:
    if any(f.vertical for f in band):
        return len(row_groups(band)) == 1
    top = min(f.top for f in band)
    return all(f.top < top + 0.5 * f.height for f in band)


def _table(region: Region, rtl: bool) -> Block | None:
    """Cells aligned in 2+ columns over 2+ rows, short as table cells are; else None (text)."""
    rows = row_groups(region)
    gutters = _hidden_gutters(rows)
    if len(rows[0]) == 1 and crosses(rows[0][0], gutters):
        return None  # a caption over the table: _table_under_heading reads it as text
    if gutters:
        rows = [[piece for fragment in row for piece in _cut(fragment, gutters)] for row in rows]
    region = flat(rows)
    columns = vertical_split(region)
    if len(columns) < 2 or len(region) < 4:
        return None
    filled = sum(len(row) >= 2 for row in rows)
    average = sum(len(f.text) for f in region) / len(region)
    if len(rows) < 2 or filled < max(2, 0.5 * len(rows)) or average > _LONGEST_CELLS[len(rows) == 2]:
        return None
    order = list(reversed(columns)) if rtl else columns
    where = {id(f): index for index, column in enumerate(order) for f in column}
    cells = []
    for row in rows:
        line = [""] * len(order)
        for fragment in sorted(row, key=lambda f: -f.x1 if rtl else f.x0):  # words of a cell in reading order
            index = where[id(fragment)]
            line[index] = f"{line[index]} {fragment.text}".strip()
        cells.append(line)
    if sum(bool(cell) for cell in cells[0]) < 2 and len(cells) > 2:
        return None  # a title over the table, in one of its columns: _table_under_heading reads it as text
    return Block(region, kind="table", cells=_merge_continuations(cells))


def _hidden_gutters(rows: list[Region]) -> list[tuple[float, float]]:
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
    crossed = [g for g in gaps if any(crosses(f, [g]) for row in rows for f in row)]
    return [g for g in crossed if _open_rows(cells, g) >= 2]


def _meets(gap: tuple[float, float], gutters: list[tuple[float, float]]) -> bool:
    return any(gap[0] < right and gap[1] > left for left, right in gutters)


def _open_rows(rows: list[Region], gutter: tuple[float, float]) -> int:
    """Rows with a cell on each side of ``gutter`` and none across it."""
    left, right = gutter
    return sum(
        not any(crosses(f, [gutter]) for f in row)
        and any(f.x1 <= left for f in row)
        and any(f.x0 >= right for f in row)
        for row in rows
    )


def _cut(fragment: Fragment, gutters: list[tuple[float, float]]) -> Region:
    """``fragment`` in pieces at the gaps between its words that fall in a gutter it crosses.

    Only a gap clearly wider than a space is cut: 0.4 of the text's size or more (a space is about
    0.25: cells set 3 pt apart on each side, as reportlab's tight tables are, leave 0.45), and 1.5
    times the fragment's widest gap elsewhere (a fixed-width font's spaces are half its size: a
    line of code indented under a listing's keywords is not a row of cells).
    """
    words = fragment.text.split()
    if len(words) != len(fragment.words) or not crosses(fragment, gutters):
        return [fragment]
    gaps = [(a[1], b[0]) for a, b in pairwise(sorted(fragment.words))]
    wide = [g for g in gaps if g[1] - g[0] >= 0.4 * fragment.size and _meets(g, gutters)]
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
