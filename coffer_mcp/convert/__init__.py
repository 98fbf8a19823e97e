"""Converter registry: uploaded bytes in, cleaned Markdown plus a title out.

Passthrough for Markdown / text / source code, a CSV-to-table converter, and MarkItDown for
PDF, Office, HTML, EPUB, notebooks and Outlook mail. Heavy libraries load on first use, so
importing this package is cheap; its modules load as their names are first used, so that
reading a title (``derive_title``) does not load every converter.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from coffer_mcp.exports import lazy_exports

if TYPE_CHECKING:
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

__getattr__ = lazy_exports(
    __name__,
    {
        "._base": ("Conversion", "Converter"),
        "._clean": ("clean_markdown",),
        "._registry": ("ConversionOptions", "convert", "engine_for", "quick_to_convert", "supported_formats"),
        "._title": ("derive_title", "first_heading"),
        "._upload": ("looks_like_base64_of", "text_upload_name"),
    },
)
