"""Page furniture: what a PDF prints on its pages around the text, not in it (see ``_pdflayout``).

Running headers and footers ("Chapter 3. Access Control 15", "© Copyright … iii"), page numbers,
and text drawn twice at the same place (a fake-bold overprint). Left in, a running header
becomes a heading between two halves of a sentence, or repeats as body text on every page.
"""

from __future__ import annotations

import re

from ._pdfium import Fragment

__all__ = ["PAGE_NUMBER", "strip_furniture"]

PAGE_NUMBER = re.compile(r"^(page\s*)?\d{1,4}(\s*(/|of)\s*\d{1,4})?$", re.IGNORECASE)
_ROMAN = re.compile(r"^(?=[ivxlc])c{0,3}(xc|xl|l?x{0,3})(ix|iv|v?i{0,3})$")
# A running header sits at the same height on every page; a body line rarely does.
_SAME_HEIGHT = 2.0
_MAX_FURNITURE_CHARS = 120
# Running headers and footers sit in the page's margins: in the files measured, within 13 % of
# the page's height from its top or bottom edge. A line further in is content, whatever it repeats
# ("Subtotal 120" ending each page of an invoice, a total a line below the rest).
_MARGIN = 0.15


def strip_furniture(pages: list[list[Fragment]], heights: list[float], body: float) -> list[list[Fragment]]:
    """Every page's fragments without overprints, running headers and footers, or page numbers.

    A running header or footer is a line at the top or bottom edge of its page, in the page's
    margin (``_MARGIN``), set no larger than the body, whose text (its page number aside) is the
    edge line of another page too; or one at the height and size where such repeated lines are (a
    chapter's own header, printed once in a sample); or, alone on its page, a line at the edge
    that carries a page number at the text's margin ("Optimized Table Tokenization 9").
    """
    pages = [_without_overprints(page) for page in pages]
    edges = [_edge_rows(page, height) for page, height in zip(pages, heights, strict=True)]
    seen: dict[str, set[int]] = {}
    for index, rows in enumerate(edges):
        for row in rows:
            if (key := _running_key(row, body)) is not None:
                seen.setdefault(key, set()).add(index)
    repeated = {key for key, where in seen.items() if len(where) > 1}
    places = {_place(row) for rows in edges for row in rows if _running_key(row, body) in repeated - {""}}
    out = []
    for page, rows in zip(pages, edges, strict=True):
        drop = {id(f) for row in rows if _furniture(row, page, body, repeated, places) for f in row}
        out.append([f for f in page if id(f) not in drop and not _page_number_alone(f, page)])
    return out


def _furniture(
    row: list[Fragment], page: list[Fragment], body: float, repeated: set[str], places: set[tuple[int, float]]
) -> bool:
    key = _running_key(row, body)
    return key is not None and (
        key in repeated or _place(row) in places or _folio_line(row, page) or _spread_folios(row, page)
    )


def _without_overprints(page: list[Fragment]) -> list[Fragment]:
    """One copy of text drawn twice at the same place (how some PDFs fake bold or shadow)."""
    kept: list[Fragment] = []
    seen: set[tuple[str, int, int]] = set()
    for fragment in page:
        key = (fragment.text, round(fragment.x0), round(fragment.top))
        if key not in seen:
            seen.add(key)
            kept.append(fragment)
    return kept


def _edge_rows(page: list[Fragment], height: float) -> list[list[Fragment]]:
    """The fragments of the page's top line and of its bottom line, those of them in the page's
    margins (none if they are one line: what the page says, not a header)."""
    if not page:
        return []
    first = min(page, key=lambda f: f.top)
    last = max(page, key=lambda f: f.bottom)
    top = [f for f in page if f.top < first.bottom - 0.5 * f.height]
    bottom = [f for f in page if f.bottom > last.top + 0.5 * f.height]
    if {id(f) for f in top} & {id(f) for f in bottom}:
        return []
    rows = []
    if max(f.bottom for f in top) <= _MARGIN * height:
        rows.append(top)
    if min(f.top for f in bottom) >= (1 - _MARGIN) * height:
        rows.append(bottom)
    return rows


def _running_key(row: list[Fragment], body: float) -> str | None:
    """The line's text without its page number, lower-cased; None if it cannot be a running line."""
    text = " ".join(f.text for f in sorted(row, key=lambda f: f.x0))
    if len(text) > _MAX_FURNITURE_CHARS or any(f.size > 1.05 * body for f in row):
        return None
    words = [w for w in text.lower().split() if not (PAGE_NUMBER.match(w) or _ROMAN.match(w))]
    return " ".join(words)


def _place(row: list[Fragment]) -> tuple[int, float]:
    return round(min(f.top for f in row) / _SAME_HEIGHT), max(f.size for f in row)


def _folio_line(row: list[Fragment], page: list[Fragment]) -> bool:
    """Text and a page number at the text's left or right margin, a line's height from the rest."""
    if len(row) != 2 or len(page) < 6:
        return False
    number, text = sorted(row, key=lambda f: not _is_number(f.text))
    if not _is_number(number.text) or _is_number(text.text) or not any(ch.isalpha() for ch in text.text):
        return False
    # A section number sits an em or so before its bold title ("1  Introduction"); a folio is
    # set apart from the running title, which is not bold.
    if text.bold or max(number.x0 - text.x1, text.x0 - number.x1) < 2 * text.size:
        return False
    rest = [f for f in page if f is not number and f is not text]
    left, right = min(f.x0 for f in rest), max(f.x1 for f in rest)
    at_margin = abs(number.x1 - right) <= _SAME_HEIGHT or abs(number.x0 - left) <= _SAME_HEIGHT
    apart = min(max(f.top - text.bottom, text.top - f.bottom) for f in rest) > 0.5 * text.height
    return at_margin and apart and not text.text.rstrip().endswith(":")


def _spread_folios(row: list[Fragment], page: list[Fragment]) -> bool:
    """A footer across two pages printed side by side: a page number at each end of the line,
    at the text's left and right margins ("208  Global Report      Annex  209")."""
    if len(row) < 3 or len(page) < 6:
        return False
    ordered = sorted(row, key=lambda f: f.x0)
    first, last = ordered[0], ordered[-1]
    if not (_is_number(first.text) and _is_number(last.text)):
        return False
    rest = [f for f in page if all(f is not r for r in row)]
    return first.x0 <= min(f.x0 for f in rest) + _SAME_HEIGHT and last.x1 >= max(f.x1 for f in rest) - _SAME_HEIGHT


def _is_number(text: str) -> bool:
    return bool(PAGE_NUMBER.match(text.strip()) or _ROMAN.match(text.strip()))


def _page_number_alone(fragment: Fragment, page: list[Fragment]) -> bool:
    """A bare page number above or below everything else on the page."""
    if not PAGE_NUMBER.match(fragment.text.strip()):
        return False
    others = [f for f in page if f is not fragment]
    return not others or fragment.top >= max(f.bottom for f in others) or fragment.bottom <= min(f.top for f in others)
