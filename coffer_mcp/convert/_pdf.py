"""PDF to Markdown with structure: PDFium's text, then our own layout analysis (``_pdflayout``)."""

from __future__ import annotations

from typing import ClassVar

from coffer_mcp.errors import IngestRejectedError

from ._base import ExtensionConverter, engine_missing
from ._places import Mapped

__all__ = ["PdfConverter"]

_PASSWORD_WORDS = ("password", "encrypt")


class PdfConverter(ExtensionConverter):
    """Headings, paragraphs in reading order, lists; a title from the metadata or first heading."""

    # 3: table columns a cell ran across, titles over tables, headers set up the page;
    # 4: columns read one by one (forms too), tables among prose, check boxes, the title once.
    name = "pypdfium2/4"
    extensions: ClassVar[frozenset[str]] = frozenset({"pdf"})

    def convert(self, data: bytes, filename: str) -> Mapped:
        try:
            import pypdfium2  # noqa: F401 - checked here so a missing engine says so
        except ImportError as exc:
            raise engine_missing("PDF engine (pypdfium2)", "pdf", "pypdfium2") from exc
        from pypdfium2 import PdfiumError

        from ._pdfium import read_pdf
        from ._pdflayout import pdf_markdown

        try:
            pages = read_pdf(data)
        except PdfiumError as exc:
            raise _unreadable(filename, exc) from exc
        mapped, _ = pdf_markdown(pages)
        return mapped


def _unreadable(filename: str, exc: Exception) -> IngestRejectedError:
    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if any(word in detail.lower() for word in _PASSWORD_WORDS):
        hint = "The PDF is password-protected; save an unprotected copy and ingest that."
    else:
        hint = "The file may be damaged, truncated or not really a PDF; re-export it and ingest it again."
    return IngestRejectedError("conversion_failed", f"Could not read {filename!r} as a PDF: {detail[:200]}", hint=hint)
