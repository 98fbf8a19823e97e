"""A chart's data as a Markdown table, read from the values cached in its own XML part.

MarkItDown's chart helper goes through python-pptx's plots, which print whole numbers as floats
(``120.0``, where a sheet shows ``120``) and raise for the plot types python-pptx does not model
(3-D bars, surfaces...), giving ``[unsupported chart]``. Every chart part caches its series
(``c:ser``: a name, categories, values and their number format) whatever its type, so the
table comes from there, each value printed as a sheet cell is (``cell_text``).
"""

from __future__ import annotations

from typing import Any

from ._csv import markdown_table
from ._sheets import cell_text

__all__ = ["chart_markdown"]

_C = "{http://schemas.openxmlformats.org/drawingml/2006/chart}"
_A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
_CACHES = (f"{_C}strCache", f"{_C}numCache", f"{_C}strLit", f"{_C}numLit", f"{_C}lvl")
_NUMERIC = (f"{_C}numCache", f"{_C}numLit")


def chart_markdown(xml: bytes) -> str:
    """``### Chart: title`` and a table: a row per category, a column per series."""
    from lxml import etree

    root = etree.fromstring(xml, etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=True))
    title = " ".join(text for node in root.iterfind(f"{_C}chart/{_C}title") for text in node.itertext(f"{_A}t"))
    heading = "### Chart" + (f": {' '.join(title.split())}" if title.strip() else "")
    series = list(root.iter(f"{_C}ser"))
    if not series:
        return heading
    names = [_name(s.find(f"{_C}tx")) or f"Series {n}" for n, s in enumerate(series, 1)]
    values = [_points(_first(s, "val", "yVal")) for s in series]
    categories = next((points for s in series if (points := _points(_first(s, "cat", "xVal")))), {})
    indices = sorted(set(categories).union(*values))
    rows = [[categories.get(i, ""), *(column.get(i, "") for column in values)] for i in indices]
    return heading + "\n\n" + markdown_table([["Category", *names], *rows]).rstrip("\n")


def _name(tx: Any) -> str:
    """A series' name: cached from a cell, or written in the chart (``c:tx/c:v``)."""
    if tx is None:
        return ""
    return " ".join(" ".join(_points(tx).values()).split()) or " ".join((tx.findtext(f"{_C}v") or "").split())


def _first(ser: Any, *names: str) -> Any:
    return next((found for name in names if (found := ser.find(f"{_C}{name}")) is not None), None)


def _points(reference: Any) -> dict[int, str]:
    """Index -> text of the points a series reference caches (the innermost level of several)."""
    if reference is None:
        return {}
    cache = next(reference.iter(*_CACHES), None)
    if cache is None:
        return {}
    number_format = cache.findtext(f"{_C}formatCode") or "General"
    points = {}
    for point in cache.iterfind(f"{_C}pt"):
        try:
            index = int(point.get("idx", ""))
        except ValueError:
            continue
        text = point.findtext(f"{_C}v") or ""
        points[index] = _number(text, point.get("formatCode") or number_format) if cache.tag in _NUMERIC else text
    return points


def _number(text: str, number_format: str) -> str:
    try:
        return cell_text(float(text), number_format)
    except ValueError:
        return text.strip()
