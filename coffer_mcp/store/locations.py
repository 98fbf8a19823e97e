"""Where a piece of a document is in its original: the ``source_location`` of passages, hits and pages.

A location is a small mapping, one of:

- ``{"page": 37}`` or ``{"pages": [36, 37]}``: PDF pages (1-based);
- ``{"slide": 4}`` or ``{"slides": [4, 5]}``: PowerPoint slides;
- ``{"sheet": "Q4", "row": 12}``, ``{"sheet": "Q4", "rows": [12, 40]}`` or ``{"sheet": "Q4"}``: a
  spreadsheet's sheet and rows as the spreadsheet numbers them; ``{"sheets": [...]}`` across sheets;
- ``{"row": 12}`` or ``{"rows": [12, 40]}``: the records of a CSV file (the header is row 1);
- ``{"line": 7}`` or ``{"lines": [120, 148]}``: lines of a text, Markdown or source file;
- ``{"heading": ["Terms", "Payment"]}``: the Word heading the text sits under;
- ``{"part": "headers"}`` or ``{"part": "body"}``: the part of an e-mail.

One item has the singular key, a range the plural key with ``[first, last]``. Each line of a
document's Markdown has a location or none (``store.sourcemap``); a passage's is the ``merge`` of
its lines': a passage over two pages says ``{"pages": [36, 37]}``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["COUNTED", "Location", "describe", "merge", "valid_location"]

Location = dict[str, Any]

COUNTED = {"page": "pages", "slide": "slides", "line": "lines", "row": "rows"}
"""The numbered units: singular key -> the plural key of a range."""
_PLURAL = {plural: singular for singular, plural in COUNTED.items()}
_PARTS = ("headers", "body")
_MAX_NAME = 1000


def merge(locations: Iterable[Location | None]) -> Location | None:
    """The location of text made of pieces at ``locations`` (None ones left out).

    Numbered units join into one range; sheets into one sheet's rows, or the list of sheets;
    headings into the heading path they share; parts into the part they share. Pieces of
    different kinds (which no converter writes) have no common location: None.
    """
    merged: Location | None = None
    for location in locations:
        if location is None:
            continue
        merged = location if merged is None else _merge_two(merged, location)
        if merged is None:
            return None
    return merged


def _merge_two(a: Location, b: Location) -> Location | None:
    if "heading" in a or "heading" in b:
        return _common_heading(a.get("heading"), b.get("heading"))
    if "part" in a or "part" in b:
        return a if a.get("part") == b.get("part") else None
    if _sheets(a) or _sheets(b):
        return _merge_sheets(a, b)
    return _merge_counts(a, b)


def _common_heading(a: Any, b: Any) -> Location | None:
    if not isinstance(a, list) or not isinstance(b, list):
        return None
    shared = []
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        shared.append(x)
    return {"heading": shared} if shared else None


def _sheets(location: Mapping[str, Any]) -> list[str]:
    if "sheets" in location:
        return list(location["sheets"])
    return [location["sheet"]] if "sheet" in location else []


def _merge_sheets(a: Location, b: Location) -> Location | None:
    names = list(dict.fromkeys(_sheets(a) + _sheets(b)))
    if not _sheets(a) or not _sheets(b):
        return None  # a sheet's rows with a CSV's: not one file's
    if len(names) > 1:
        return {"sheets": names}
    rows = _merge_counts(_without_sheet(a), _without_sheet(b))
    if rows == {}:
        return {"sheet": names[0]}
    return {"sheet": names[0], **rows} if rows is not None else None


def _without_sheet(location: Location) -> Location:
    return {key: value for key, value in location.items() if key != "sheet"}


def _merge_counts(a: Location, b: Location) -> Location | None:
    """Two locations of one numbered unit as one range; ``{}`` for two without numbers (a sheet's title)."""
    unit_a, span_a = _span(a)
    unit_b, span_b = _span(b)
    if unit_a is None or unit_b is None:
        return a if unit_b is None and not b else b if unit_a is None and not a else None
    if unit_a != unit_b:
        return None
    first, last = min(span_a[0], span_b[0]), max(span_a[1], span_b[1])
    return {unit_a: first} if first == last else {COUNTED[unit_a]: [first, last]}


def _span(location: Location) -> tuple[str | None, tuple[int, int]]:
    for key, value in location.items():
        if key in COUNTED:
            return key, (value, value)
        if key in _PLURAL:
            return _PLURAL[key], (value[0], value[1])
    return None, (0, 0)


_WORDS = {"page": ("p.", "pp."), "slide": ("slide", "slides"), "line": ("line", "lines"), "row": ("row", "rows")}
_PART_WORDS = {"headers": "e-mail headers", "body": "e-mail body"}


def describe(location: Mapping[str, Any]) -> str:
    """A location as a reader cites it: ``p. 37``, ``pp. 36-37``, ``sheet Q4, rows 12-40``, ``§ Terms > Payment``."""
    if "heading" in location:
        return "§ " + " > ".join(location["heading"])
    if "part" in location:
        return _PART_WORDS.get(location["part"], str(location["part"]))
    if "sheets" in location:
        return "sheets " + ", ".join(location["sheets"])
    sheet = f"sheet {location['sheet']}" if "sheet" in location else ""
    unit, (first, last) = _span(dict(location))
    if unit is None:
        return sheet
    one, many = _WORDS[unit]
    counted = f"{one} {first}" if first == last else f"{many} {first}\u2013{last}"
    return f"{sheet}, {counted}" if sheet else counted


def valid_location(value: Any) -> bool:
    """Whether ``value`` is a location as this module writes them (a source map read from disk is checked)."""
    if not isinstance(value, dict) or not value or not all(isinstance(key, str) for key in value):
        return False
    keys = set(value)
    if keys == {"heading"}:
        return _names(value["heading"])
    if keys == {"part"}:
        return value["part"] in _PARTS
    if keys == {"sheets"}:
        return _names(value["sheets"])
    sheet = value.get("sheet")
    if sheet is not None and not (isinstance(sheet, str) and 0 < len(sheet) <= _MAX_NAME):
        return False
    counted = keys - {"sheet"}
    if not counted:
        return sheet is not None
    if len(counted) != 1:
        return False
    (key,) = counted
    number = value[key]
    if key in COUNTED:
        return _count(number) and (sheet is None or key == "row")
    if key in _PLURAL:
        return (
            isinstance(number, list)
            and len(number) == 2
            and all(map(_count, number))
            and number[0] <= number[1]
            and (sheet is None or key == "rows")
        )
    return False


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 2**31


def _names(value: Any) -> bool:
    return (
        isinstance(value, list)
        and 0 < len(value) <= 100
        and all(isinstance(name, str) and len(name) <= _MAX_NAME for name in value)
    )
