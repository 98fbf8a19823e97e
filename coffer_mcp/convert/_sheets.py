"""XLSX / XLS to Markdown: one heading per visible sheet with values, one table per block of cells.

MarkItDown reads each sheet with pandas as one table, so a sheet holding several tables, or
gaps, comes out as a single grid full of ``NaN`` and ``Unnamed: 4`` headers, and whole numbers
print as ``1.0``. Here a sheet's non-empty cells are grouped into blocks (cells touching each
other, merged ranges filled with their value as docling does), each block is a table whose first
row is the header, and values print as a person would type them. A formula shows the value the
spreadsheet application cached for it, or its own text (``=B2*2``) when none was cached, as in
every file openpyxl or pandas writes.
"""

from __future__ import annotations

import datetime as dt
import io
import re
from collections.abc import Iterator
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, ClassVar

from coffer_mcp.errors import EngineUnavailableError

from ._base import engine_missing
from ._csv import markdown_table
from ._places import Mapped, places_of

__all__ = ["SheetConverter", "blocks", "boxes", "cell_text"]

Grid = dict[tuple[int, int], str]
"""(row, column) -> the text of a non-empty cell, zero-based."""

_QUOTED = re.compile(r'"[^"]*"|\\.')  # literal text in a number format: "%" there is not a percent


class SheetConverter:
    """Workbooks: ``openpyxl`` for .xlsx, ``xlrd`` for legacy .xls."""

    extensions = frozenset({"xlsx", "xls"})
    # 2: formulas without a cached value show their text; percent formats; whole numbers exact;
    # empty sheets left out
    names: ClassVar[dict[str, str]] = {"xlsx": "openpyxl/2", "xls": "xlrd/2"}
    name = "openpyxl/2"

    def can_handle(self, ext: str) -> bool:
        return ext in self.extensions

    def convert(self, data: bytes, filename: str) -> Mapped:
        """A section per sheet, its tables' lines each at its row of the sheet."""
        ext = filename.rpartition(".")[2].lower()
        sheets = _xls_sheets(data) if ext == "xls" else _xlsx_sheets(data)
        lines: list[tuple[str, dict[str, Any] | None]] = []
        for title, grid in sheets:
            if not grid:
                continue  # a sheet with no values: a bare heading would be a section with nothing in it
            if lines:
                lines.append(("", None))
            lines.append((f"## {title}", {"sheet": title}))
            for top, left, bottom, right in boxes(grid):
                block = [[grid.get((r, c), "") for c in range(left, right + 1)] for r in range(top, bottom + 1)]
                lines.append(("", None))
                lines.extend(_rows(title, top, block))
        mapped = places_of(lines, "\n")
        return Mapped(mapped.markdown + "\n", mapped.places)


def cell_text(value: Any, number_format: str = "General") -> str:
    """A cell value as text: ``3`` not ``3.0``, dates in ISO 8601, booleans as TRUE / FALSE.

    A percent format shows ``25%`` for 0.25, with the format's decimals; other number formats
    (separators, currencies) are left out, the plain number being what a search matches.
    """
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    positive = number_format.split(";", maxsplit=1)[0]  # the section for positive numbers
    if isinstance(value, (int, float)) and "%" in _QUOTED.sub("", positive):
        return _percent(value, positive)
    if isinstance(value, float):
        return _number(value)
    if isinstance(value, dt.datetime):
        return value.date().isoformat() if value.time() == dt.time() else value.isoformat(sep=" ")
    if isinstance(value, (dt.date, dt.time)):
        return value.isoformat()
    return str(value).strip()


def _number(value: float) -> str:
    """A whole number with every digit the file stores (a double: 1.234567890123457e+19 is
    12345678901234570000), else at most 15 significant digits, as Excel shows it."""
    if value.is_integer() and abs(value) < 1e21:
        return str(int(Decimal(repr(value))))
    return format(value, ".15g")


def _percent(value: float, section: str) -> str:
    digits = _QUOTED.sub("", section).split("%")[0]
    decimals = len(re.sub(r"[^0#?]", "", digits.partition(".")[2])) if "." in digits else 0
    scaled = Decimal(repr(value)) * 100
    if not scaled.is_finite():
        return format(value, ".15g")
    return f"{scaled.quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_HALF_UP)}%"


def blocks(grid: Grid) -> list[list[list[str]]]:
    """The tables of a sheet: groups of touching cells, top to bottom then left to right."""
    return [
        [[grid.get((r, c), "") for c in range(left, right + 1)] for r in range(top, bottom + 1)]
        for top, left, bottom, right in boxes(grid)
    ]


def boxes(grid: Grid) -> list[tuple[int, int, int, int]]:
    """Where the tables of a sheet are: ``(top, left, bottom, right)`` (zero-based, inclusive), in ``blocks`` order."""
    seen: set[tuple[int, int]] = set()
    found = []
    for cell in sorted(grid):
        if cell not in seen:
            members = list(_component(cell, grid, seen))
            rows, cols = [r for r, _ in members], [c for _, c in members]
            found.append((min(rows), min(cols), max(rows), max(cols)))
    return sorted(_merge_overlapping(found))


def _component(start: tuple[int, int], grid: Grid, seen: set[tuple[int, int]]) -> Iterator[tuple[int, int]]:
    stack = [start]
    seen.add(start)
    while stack:
        r, c = stack.pop()
        yield r, c
        for near in ((r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1)):
            if near in grid and near not in seen:
                seen.add(near)
                stack.append(near)


def _merge_overlapping(boxes: list[tuple[int, int, int, int]]) -> list[tuple[int, int, int, int]]:
    merged = True
    while merged:
        merged = False
        for i, a in enumerate(boxes):
            for j in range(i + 1, len(boxes)):
                b = boxes[j]
                if a[0] <= b[2] and b[0] <= a[2] and a[1] <= b[3] and b[1] <= a[3]:
                    boxes[i] = (min(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), max(a[3], b[3]))
                    del boxes[j]
                    merged = True
                    break
            if merged:
                break
    return boxes


def _rows(sheet: str, top: int, block: list[list[str]]) -> list[tuple[str, dict[str, Any] | None]]:
    """The lines of a block's Markdown with their rows (1-based, as the sheet numbers them): a lone
    cell's lines its row; a table's header its row, the separator none, then one row a line."""
    lines = _render(block).split("\n")
    if _lone(block):
        return [(line, {"sheet": sheet, "row": top + 1}) for line in lines]
    rows = [top + 1, None, *range(top + 2, top + len(lines))]
    return [(line, {"sheet": sheet, "row": row} if row else None) for line, row in zip(lines, rows, strict=True)]


def _render(block: list[list[str]]) -> str:
    if _lone(block):
        return next(value for value in block[0] if value)  # a lone cell (a caption, a note) is a paragraph
    return markdown_table(block).rstrip("\n")


def _lone(block: list[list[str]]) -> bool:
    return len(block) == 1 and sum(bool(value) for value in block[0]) == 1


# -- readers -------------------------------------------------------------------------------------


def _xlsx_sheets(data: bytes) -> list[tuple[str, Grid]]:
    try:
        import openpyxl
    except ImportError as exc:
        raise _missing("openpyxl", "xlsx") from exc
    # Not read-only: merged ranges are only known to a fully loaded sheet. Formulas as their text;
    # the values cached for them come from a second load, made only for a workbook that has any.
    workbook = openpyxl.load_workbook(io.BytesIO(data))
    cached: Any = None
    sheets = []
    for index, sheet in enumerate(workbook.worksheets):
        if sheet.sheet_state != "visible":
            continue
        grid: Grid = {}
        for row in sheet.iter_rows():
            for cell in row:
                if cell.row is None or cell.column is None:  # (typed optional for merged cells)
                    continue
                value = cell.value
                if cell.data_type == "f":
                    if cached is None:
                        cached = openpyxl.load_workbook(io.BytesIO(data), data_only=True)
                    value = _formula_value(value, cached.worksheets[index].cell(cell.row, cell.column))
                text = cell_text(value, cell.number_format)
                if text:
                    grid[(cell.row - 1, cell.column - 1)] = text
        for area in sheet.merged_cells.ranges:
            _fill(grid, area.min_row - 1, area.min_col - 1, area.max_row - 1, area.max_col - 1)
        sheets.append((sheet.title, grid))
    return sheets


def _formula_value(formula: Any, computed: Any) -> Any:
    """The value cached for a formula; an empty text result is empty; with no value, the formula."""
    if computed.value is not None:
        return computed.value
    if computed.data_type == "str":  # Excel cached "" (=IF(A2="","",…)): openpyxl reads None
        return None
    text = getattr(formula, "text", formula)  # an ArrayFormula keeps its formula in .text
    return text if isinstance(text, str) else None


def _xls_sheets(data: bytes) -> list[tuple[str, Grid]]:
    try:
        import xlrd
    except ImportError as exc:
        raise _missing("xlrd", "xls") from exc
    book = xlrd.open_workbook(file_contents=data, formatting_info=True)
    sheets = []
    for sheet in book.sheets():
        if sheet.visibility != 0:
            continue
        grid: Grid = {}
        for r in range(sheet.nrows):
            for c, cell in enumerate(sheet.row(r)):
                text = cell_text(_xls_value(cell, book.datemode, xlrd), _xls_format(book, cell))
                if text:
                    grid[(r, c)] = text
        for top, bottom, left, right in sheet.merged_cells:
            _fill(grid, top, left, bottom - 1, right - 1)
        sheets.append((sheet.name, grid))
    return sheets


def _xls_value(cell: Any, datemode: int, xlrd: Any) -> Any:
    if cell.ctype == xlrd.XL_CELL_DATE:
        try:
            return xlrd.xldate.xldate_as_datetime(cell.value, datemode)
        except (ValueError, OverflowError, xlrd.xldate.XLDateError):
            return cell.value
    if cell.ctype == xlrd.XL_CELL_BOOLEAN:
        return bool(cell.value)
    if cell.ctype == xlrd.XL_CELL_ERROR:
        return None
    return cell.value


def _xls_format(book: Any, cell: Any) -> str:
    try:
        return str(book.format_map[book.xf_list[cell.xf_index].format_key].format_str)
    except (IndexError, KeyError, AttributeError, TypeError):
        return "General"


def _fill(grid: Grid, top: int, left: int, bottom: int, right: int) -> None:
    """A merged range shows its top-left value in every cell it covers."""
    value = grid.get((top, left))
    if not value or (bottom - top + 1) * (right - left + 1) > 10_000:
        return
    for r in range(top, bottom + 1):
        for c in range(left, right + 1):
            grid[(r, c)] = value


def _missing(package: str, ext: str) -> EngineUnavailableError:
    return engine_missing(f".{ext} reader ({package})", ext, package)
