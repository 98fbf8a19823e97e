"""Word table rows made whole before mammoth reads them: skipped grid columns become empty cells.

A row may leave grid columns out at its start or end (``w:gridBefore`` / ``w:gridAfter``: a
row that "starts late"). mammoth ignores both, so the cells of such a row shift left under the
wrong header, and a vertical merge (``w:vMerge``) continued in it joins the cell at the wrong
position: docs-multiformat's ``word_tables.docx`` showed ``Cell 1.1`` under ``Header 0.0`` and a
header value repeated into a data row while the real merged value was dropped. mammoth counts a
cell's column from the ``w:gridSpan`` of the cells before it, so one empty cell spanning the
skipped columns puts every later cell, and every merge, in its own column.
"""

from __future__ import annotations

import io
import zipfile
from typing import Any, BinaryIO

__all__ = ["fill_skipped_columns"]

_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_PARTS = ("word/document.xml", "word/footnotes.xml", "word/endnotes.xml", "word/comments.xml")
_MAX_SKIPPED = 64  # Word's own limit on grid columns is 63; a hostile value must not build a huge cell


def fill_skipped_columns(stream: BinaryIO) -> BinaryIO:
    """The package with an empty cell in place of each row's ``gridBefore`` / ``gridAfter``.

    Returns ``stream`` itself (rewound) when no row skips a column, the common case.
    """
    stream.seek(0)
    with zipfile.ZipFile(stream) as source:
        names = [name for name in _PARTS if name in source.namelist()]
        changed = {name: _filled(source.read(name)) for name in names}
        changed = {name: content for name, content in changed.items() if content is not None}
        if not changed:
            stream.seek(0)
            return stream
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
            for info in source.infolist():
                target.writestr(info, changed.get(info.filename) or source.read(info))
    out.seek(0)
    return out


def _filled(xml: bytes) -> bytes | None:
    """``xml`` with the skipped columns of its rows as cells; None when no row skips any."""
    if b"gridBefore" not in xml and b"gridAfter" not in xml:
        return None
    from lxml import etree

    parser = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=True)
    root = etree.fromstring(xml, parser)
    for row in root.iter(f"{_W}tr"):
        properties = row.find(f"{_W}trPr")
        if properties is None:
            continue
        for name, at_start in (("gridBefore", True), ("gridAfter", False)):
            element = properties.find(f"{_W}{name}")
            if element is None:
                continue
            properties.remove(element)
            skipped = _count(element.get(f"{_W}val"))
            if not skipped:
                continue
            cell = _empty_cell(etree, skipped)
            if at_start:
                row.insert(_first_cell_index(row), cell)
            else:
                row.append(cell)
    return bytes(etree.tostring(root, xml_declaration=True, encoding="UTF-8", standalone=True))


def _count(value: str | None) -> int:
    try:
        return max(0, min(int(value or "0"), _MAX_SKIPPED))
    except ValueError:
        return 0


def _first_cell_index(row: Any) -> int:
    """Where a row's content starts: after its own and its table's property overrides."""
    heads = (f"{_W}trPr", f"{_W}tblPrEx")
    return next((i for i, child in enumerate(row) if child.tag not in heads), len(row))


def _empty_cell(etree: Any, span: int) -> Any:
    cell = etree.Element(f"{_W}tc")
    properties = etree.SubElement(cell, f"{_W}tcPr")
    if span > 1:
        etree.SubElement(properties, f"{_W}gridSpan", {f"{_W}val": str(span)})
    etree.SubElement(cell, f"{_W}p")
    return cell
