"""DOCX to Markdown: MarkItDown's route (equations to LaTeX, mammoth to HTML), with regular tables.

Three steps differ from MarkItDown's own converter: table rows that skip grid columns get empty
cells in their place first (``fill_skipped_columns``), review comments become footnotes
(``comments_as_footnotes``: MarkItDown drops them), and the HTML goes through
``html_to_markdown``, so merged cells stay in their columns and the first row is the header.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Callable
from typing import BinaryIO, ClassVar

from ._base import ExtensionConverter, engine_missing
from ._docxcomments import COMMENT_STYLE, comment_authors, comments_as_footnotes
from ._docxrows import fill_skipped_columns

__all__ = ["DocxConverter", "pre_processed"]

# Underlines kept (as MarkItDown does); Word's Title style is the document's heading (mammoth
# would make it a plain paragraph); comments kept (_docxcomments).
_STYLE_MAP = f"u => u\np[style-name='Title'] => h1:fresh\n{COMMENT_STYLE}"


class DocxConverter(ExtensionConverter):
    """Headings, lists, links and tables of a Word document."""

    name = "mammoth/2"  # 2: rows that start late (w:gridBefore) keep their cells in place; comments kept
    extensions: ClassVar[frozenset[str]] = frozenset({"docx"})

    def convert(self, data: bytes, filename: str) -> str:
        try:
            import mammoth
            from markitdown.converter_utils.docx.pre_process import pre_process_docx
        except ImportError as exc:
            raise engine_missing("DOCX converter (mammoth, markitdown)", "docx", "'markitdown[docx]'") from exc
        from ._htmltables import html_to_markdown

        stream = fill_skipped_columns(pre_processed(data, pre_process_docx))
        embedded = mammoth.read_embedded_style_map(stream)
        stream.seek(0)
        style_map = "\n".join(part for part in (embedded, _STYLE_MAP) if part)
        html = mammoth.convert_to_html(stream, style_map=style_map, include_embedded_style_map=False).value
        html, comments = comments_as_footnotes(html, comment_authors(stream))
        return html_to_markdown(html) + (f"\n\n{comments}\n" if comments else "")


_MAIN = b"schemas.openxmlformats.org/wordprocessingml/2006/main"


def pre_processed(data: bytes, pre_process: Callable[[BinaryIO], BinaryIO]) -> BinaryIO:
    """The package after MarkItDown's pre-processing (equations to LaTeX, strike-through), or as it
    was when that lost the document's namespace: with lxml 6.2, BeautifulSoup's XML parser drops
    namespace prefixes, and mammoth then finds no ``w:body`` and refuses every file as damaged
    (``pyproject.toml`` holds lxml below 6.2; this keeps a newer one from breaking every .docx,
    at the cost of equations kept as their text)."""
    processed = pre_process(io.BytesIO(data))
    try:
        processed.seek(0)
        with zipfile.ZipFile(processed) as package:
            intact = _MAIN in package.read("word/document.xml")
    except (KeyError, OSError, zipfile.BadZipFile):
        intact = True  # a file mammoth will refuse anyway, with its own reason
    if intact:
        processed.seek(0)
        return processed
    return io.BytesIO(data)
