"""CSV / TSV to a Markdown table."""

from __future__ import annotations

import csv
import io

from coffer_mcp.errors import IngestRejectedError

from ._decode import decode_text
from ._places import Mapped

__all__ = ["CsvConverter"]

_SNIFF_CHARS = 64 * 1024
_DELIMITERS = ",;\t|"


class CsvConverter:
    """The first non-empty row is the header; ragged rows are padded to the widest row."""

    name = "csv"
    extensions = frozenset({"csv", "tsv"})

    def can_handle(self, ext: str) -> bool:
        return ext in self.extensions

    def convert(self, data: bytes, filename: str) -> Mapped:
        """The table, each line at its record of the file (the header is row 1, as a spreadsheet numbers them)."""
        text = decode_text(data, filename)
        tab_separated = filename.lower().endswith(".tsv")
        dialect = csv.excel_tab if tab_separated else _sniff(text)
        try:
            reader = csv.reader(io.StringIO(text, newline=""), dialect)
            numbered = [(number, row) for number, row in enumerate(reader, 1) if any(cell.strip() for cell in row)]
        except csv.Error as exc:
            raise IngestRejectedError(
                "conversion_failed",
                f"{filename!r} is not a readable CSV file: {exc}.",
                hint="Check the quoting and delimiters, or save the sheet again as CSV (UTF-8).",
            ) from exc
        rows = [row for _, row in numbered]
        places = [{"row": number} for number, _ in numbered]
        return Mapped(markdown_table(rows), (*places[:1], None, *places[1:]) if places else ())


def markdown_table(rows: list[list[str]]) -> str:
    """Render rows as a Markdown table (first row = header); ``""`` when there are none."""
    if not rows:
        return ""
    width = max(len(row) for row in rows)
    lines = [_table_row(rows[0], width), "| " + " | ".join(["---"] * width) + " |"]
    lines.extend(_table_row(row, width) for row in rows[1:])
    return "\n".join(lines) + "\n"


def _table_row(row: list[str], width: int) -> str:
    cells = [_cell(value) for value in row] + [""] * (width - len(row))
    return "| " + " | ".join(cells) + " |"


def _cell(value: str) -> str:
    value = value.strip().replace("\r\n", "\n").replace("\r", "\n")
    return value.replace("|", "\\|").replace("\n", "<br>")


def _sniff(text: str) -> type[csv.Dialect] | csv.Dialect:
    try:
        return csv.Sniffer().sniff(text[:_SNIFF_CHARS], delimiters=_DELIMITERS)
    except csv.Error:
        return csv.excel
