"""The heavy formats (PDF, Office, HTML, EPUB, notebooks, mail): our own converters where measured
better (docs/benchmarks.md, "Conversion"), MarkItDown for the rest.

Everything here runs inside the sandboxed worker when the registry is given a timeout.
"""

from __future__ import annotations

from coffer_mcp.errors import IngestRejectedError

from ._base import Converter
from ._docx import DocxConverter
from ._html import HtmlConverter
from ._markitdown import MARKITDOWN_EXTENSIONS, MarkItDownConverter
from ._pdf import PdfConverter
from ._places import Mapped
from ._sheets import SheetConverter
from ._slides import SlideConverter

__all__ = ["DOCUMENT_EXTENSIONS", "DocumentConverter", "document_engine"]

DOCUMENT_EXTENSIONS = MARKITDOWN_EXTENSIONS
_SHEETS = SheetConverter()
_OWN: dict[str, Converter] = {
    "pdf": PdfConverter(),
    "docx": DocxConverter(),
    "pptx": SlideConverter(),
    "xlsx": _SHEETS,
    "xls": _SHEETS,
}
_HTML = {True: HtmlConverter(main_content=True), False: HtmlConverter(main_content=False)}


def document_engine(ext: str, *, html_main_content: bool) -> str:
    """The ``conversion_engine`` recorded for a document of this format converted today.

    A new value whenever a converter's output changes, so documents converted by an older one
    can be found (and re-converted from their original by ``reindex --force``).
    """
    if ext in ("html", "htm"):
        return _HTML[html_main_content].name
    if ext in ("xlsx", "xls"):
        return _SHEETS.names[ext]
    own = _OWN.get(ext)
    return own.name if own is not None else MarkItDownConverter.name


class DocumentConverter:
    """Routes each heavy format to its converter."""

    name = "documents"
    extensions = DOCUMENT_EXTENSIONS

    def __init__(self) -> None:
        self._markitdown = MarkItDownConverter()

    def can_handle(self, ext: str) -> bool:
        return ext in self.extensions

    def convert(self, data: bytes, filename: str, *, html_main_content: bool = True) -> str | Mapped:
        ext = filename.rpartition(".")[2].lower()
        if ext in ("html", "htm"):
            converter: Converter = _HTML[html_main_content]
        else:
            converter = _OWN.get(ext, self._markitdown)
        try:
            return converter.convert(data, filename)
        except (IngestRejectedError, MemoryError):  # EngineUnavailableError is one too
            raise
        except Exception as exc:  # a parser fed untrusted bytes can raise anything
            raise _unreadable(filename, ext, exc) from exc


def _unreadable(filename: str, ext: str, exc: Exception) -> IngestRejectedError:
    lines = str(exc).strip().splitlines()
    detail = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    return IngestRejectedError(
        "conversion_failed",
        f"Could not read {filename!r} as a .{ext} file: {detail[:200]}",
        hint=f"The file may be damaged, truncated, password-protected or not really .{ext}; "
        "open and re-save it (or export it to PDF) and ingest it again.",
    )
