"""Text uploads that are not what their filename says: base64 of a binary file, or no extension.

An agent sends a file's content as a string. Two mistakes are common and cheap to recognise:
the base64 of a PDF or Office file sent as plain text (it would fail conversion as "damaged"),
and a name without an extension ("Meeting notes") for what is plainly a note.
"""

from __future__ import annotations

import base64
import binascii
import re

from ._title import extension_of

__all__ = ["BINARY_FORMATS", "looks_like_base64_of", "text_upload_name"]

# Formats whose files are bytes, with the signatures their files start with.
BINARY_FORMATS: dict[str, tuple[bytes, ...]] = {
    "pdf": (b"%PDF",),
    "docx": (b"PK\x03\x04",),
    "pptx": (b"PK\x03\x04",),
    "xlsx": (b"PK\x03\x04",),
    "epub": (b"PK\x03\x04",),
    "xls": (b"\xd0\xcf\x11\xe0",),
    "msg": (b"\xd0\xcf\x11\xe0",),
}
_BASE64 = re.compile(r"[A-Za-z0-9+/_\-]+={0,2}")
_SNIFF_CHARS = 64


def looks_like_base64_of(filename: str, text: str) -> bool:
    """Whether ``text`` is the base64 of a file of the binary format ``filename`` names."""
    signatures = BINARY_FORMATS.get(extension_of(filename))
    if not signatures:
        return False
    head = "".join(text[: _SNIFF_CHARS * 2].split())[:_SNIFF_CHARS]
    head = head[: len(head) // 4 * 4]
    if len(head) < 8 or not _BASE64.fullmatch(head):
        return False
    try:
        data = base64.b64decode(head.replace("-", "+").replace("_", "/"), validate=True)
    except (binascii.Error, ValueError):
        return False
    return data.startswith(signatures)


def text_upload_name(filename: str) -> tuple[str, bool]:
    """The name a text upload is converted under: Markdown when it has no extension.

    Returns the name and whether ``.md`` was added.
    """
    if extension_of(filename):
        return filename, False
    return f"{filename}.md", True
