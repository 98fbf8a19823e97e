"""The heavy formats (PDF, Office, HTML, EPUB, notebooks, mail): our own converters where measured
better (docs/benchmarks.md, "Conversion"), MarkItDown for the rest.

Everything here runs inside the sandboxed worker when the registry is given a timeout.
"""

from __future__ import annotations

from ._base import Converter
from ._markitdown import MARKITDOWN_EXTENSIONS, MarkItDownConverter
from ._pdf import PdfConverter

__all__ = ["DOCUMENT_EXTENSIONS", "DocumentConverter", "document_engine"]

DOCUMENT_EXTENSIONS = MARKITDOWN_EXTENSIONS
_PDF = PdfConverter()
_OWN: dict[str, Converter] = {"pdf": _PDF}


def document_engine(ext: str) -> str:
    """The ``conversion_engine`` recorded for a document of this format converted today.

    A new value whenever a converter's output changes, so documents converted by an older one
    can be found (and re-converted from their original by ``reindex --force``).
    """
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

    def convert(self, data: bytes, filename: str) -> str:
        ext = filename.rpartition(".")[2].lower()
        converter = _OWN.get(ext, self._markitdown)
        return converter.convert(data, filename)
