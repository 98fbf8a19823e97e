"""Geometry of positioned PDF text: rows, the gaps between fragments, lines joined (see ``_pdflayout``)."""

from __future__ import annotations

from ._pdfium import Fragment

__all__ = ["Region", "crosses", "flat", "lines", "merge", "row_groups", "vertical_split"]

Region = list[Fragment]
"""Fragments of one page that are read together: a page, a column, a band, a table."""


def flat(groups: list[Region]) -> Region:
    return [fragment for group in groups for fragment in group]


def row_groups(region: Region) -> list[Region]:
    """The region's fragments in rows, top to bottom: fragments that share a line."""
    rows: list[Region] = []
    for fragment in sorted(region, key=lambda f: (f.top, f.x0)):
        # A cell set up the page belongs to the row it reaches into (headers are bottom-aligned).
        overlap = 0.0 if fragment.vertical else 0.5 * fragment.height
        if rows and fragment.top < _row_bottom(rows[-1]) - overlap:
            rows[-1].append(fragment)
        else:
            rows.append([fragment])
    return rows


def _row_bottom(row: Region) -> float:
    """Where a row's first line ends; a cell set up the page (a column header) fills the row."""
    lines = [f.bottom for f in row if not f.vertical]
    turned = [f.bottom for f in row if f.vertical]
    return max(([min(lines)] if lines else []) + turned)


def vertical_split(region: Region, gap: float = 4.0) -> list[Region]:
    """The region cut at every vertical gap wider than ``gap`` that no fragment crosses, left to right."""
    spans = sorted(region, key=lambda f: f.x0)
    groups: list[Region] = [[spans[0]]]
    right = spans[0].x1
    for fragment in spans[1:]:
        if fragment.x0 > right + gap:
            groups.append([])
        groups[-1].append(fragment)
        right = max(right, fragment.x1)
    return groups


def lines(region: Region, rtl: bool) -> Region:
    """Lines top to bottom; fragments sharing a line become one, in the script's direction."""
    return [merge(sorted(row, key=lambda f: -f.x1 if rtl else f.x0)) for row in row_groups(region)]


def crosses(fragment: Fragment, gutters: list[tuple[float, float]]) -> bool:
    return any(fragment.x0 < left and fragment.x1 > right for left, right in gutters)


def merge(row: Region) -> Fragment:
    """Fragments of one line, in reading order, as one fragment."""
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
