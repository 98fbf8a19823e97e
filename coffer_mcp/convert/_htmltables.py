"""HTML to Markdown through MarkItDown's HTML converter, with tables made regular first.

markdownify (under MarkItDown) writes an empty header row when a table has no ``<th>``, and
ignores ``rowspan`` / ``colspan``, so a merged cell shifts every value after it into the wrong
column. Here every table becomes a plain grid first: a merged cell's content is repeated in each
cell it covers (as docling does), and the first row is the header.
"""

from __future__ import annotations

import io
from typing import Any

from ._base import engine_missing

__all__ = ["html_to_markdown", "regular_tables"]

_MAX_SPAN = 64  # a hostile rowspan="100000" must not build a huge grid


def html_to_markdown(html: Any) -> str:
    """Markdown for an HTML document or fragment, as text or parsed (a BeautifulSoup element,
    whose tables are then rewritten in place): tables made regular, scripts dropped.

    A ``<pre>`` with a ``data-lang`` attribute (``_htmltidy.fence_code``) opens a fence in that
    language.
    """
    from bs4 import BeautifulSoup

    try:
        from markitdown import StreamInfo
        from markitdown.converters import HtmlConverter
    except ImportError as exc:  # no wheel of its onnxruntime on this platform (pyproject.toml)
        raise engine_missing("HTML converter (markitdown)", "html", "markitdown") from exc

    soup = BeautifulSoup(html, "html.parser") if isinstance(html, str) else html
    regular_tables(soup)
    stream = io.BytesIO(str(soup).encode("utf-8"))
    info = StreamInfo(mimetype="text/html", extension=".html", charset="utf-8")
    return HtmlConverter().convert(stream, info, code_language_callback=_language).markdown or ""


def _language(pre: Any) -> str:
    language = pre.get("data-lang")
    return language if isinstance(language, str) else ""


def regular_tables(soup: Any) -> None:
    """Rewrite every ``<table>`` of ``soup`` in place as a header row plus rows of equal width."""
    for table in reversed(soup.find_all("table")):  # innermost first
        grid = _grid(table)
        if not grid:
            table.decompose()
            continue
        table.replace_with(_rebuilt(soup, grid))


def _grid(table: Any) -> list[list[str]]:
    """The table's cells as rows of inner HTML, spans expanded; [] for a table with no text."""
    cells: dict[tuple[int, int], str] = {}
    rows = [tr for tr in table.find_all("tr") if tr.find_parent("table") is table]
    for r, tr in enumerate(rows):
        c = 0
        for cell in tr.find_all(["td", "th"], recursive=False):
            while (r, c) in cells:
                c += 1
            content = cell.decode_contents().strip()
            row_span = min(_span(cell.get("rowspan")), len(rows) - r)
            col_span = _span(cell.get("colspan"))
            for dr in range(row_span):
                for dc in range(col_span):
                    cells[(r + dr, c + dc)] = content
            c += col_span
    if not cells:
        return []
    width = max(c for _, c in cells) + 1
    grid = [[cells.get((r, c), "") for c in range(width)] for r in range(len(rows))]
    # Empty rows stay: they are part of the table's shape (a form's blank lines).
    return grid if any(_has_text(cell) for row in grid for cell in row) else []


def _span(value: Any) -> int:
    try:
        return max(1, min(int(str(value).strip()), _MAX_SPAN))
    except (TypeError, ValueError):
        return 1


def _has_text(html: str) -> bool:
    return bool(html) and any(ch.isalnum() for ch in html.replace("<br/>", ""))


def _rebuilt(soup: Any, grid: list[list[str]]) -> Any:
    from bs4 import BeautifulSoup

    rows = []
    for index, row in enumerate(grid):
        tag = "th" if index == 0 else "td"
        rows.append("<tr>" + "".join(f"<{tag}>{cell}</{tag}>" for cell in row) + "</tr>")
    fragment = BeautifulSoup("<table>" + "".join(rows) + "</table>", "html.parser")
    return fragment.table
