"""Converter registry: uploaded bytes in, cleaned Markdown plus a title out.

Passthrough for Markdown / text / source code, a CSV-to-table converter, and MarkItDown for
PDF, Office, HTML, EPUB, notebooks and Outlook mail. Heavy libraries load on first use, so
importing this package is cheap.
"""

from __future__ import annotations

from ._base import Conversion, Converter
from ._clean import clean_markdown
from ._registry import (
    ConversionOptions,
    convert,
    engine_for,
    quick_to_convert,
    supported_formats,
)
from ._title import derive_title, first_heading
from ._upload import looks_like_base64_of, text_upload_name

__all__ = [
    "Conversion",
    "ConversionOptions",
    "Converter",
    "clean_markdown",
    "convert",
    "derive_title",
    "engine_for",
    "first_heading",
    "looks_like_base64_of",
    "quick_to_convert",
    "supported_formats",
    "text_upload_name",
]
