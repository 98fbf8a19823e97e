"""Telling a file that is not a pack at all from a damaged pack, by its first bytes.

A ``.docx`` passed to ``import`` is no tampered pack: saying it is "damaged or was modified"
sends the user to re-export something that never was a pack. So before the tar is read, the
file's head is checked for what a pack starts with (gzip, then a tar header), and a file that is
something else is named for what it looks like.
"""

from __future__ import annotations

import codecs

from coffer_mcp.portability._format import PackError

__all__ = ["GZIP_MAGIC", "HEAD_BYTES", "NOT_A_PACK_HINT", "check_looks_like_pack"]

HEAD_BYTES = 512  # one tar header block
GZIP_MAGIC = b"\x1f\x8b"
NOT_A_PACK_HINT = (
    "Pass a .cofferpack file written by 'coffer kb export'. To add a document to a knowledge base, "
    "use 'coffer kb ingest KB PATH' instead."
)
_SHAPE = "A pack is a gzip-compressed tar archive (.cofferpack) whose first member is manifest.json."
_MAGIC = (
    (b"PK\x03\x04", "a ZIP archive (as .docx, .xlsx, .pptx, .epub and .zip files are)"),
    (b"%PDF", "a PDF document"),
    (b"\xd0\xcf\x11\xe0", "an old Office document (.doc, .xls or .ppt)"),
    (b"\x89PNG", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"BZh", "bzip2-compressed"),
    (b"\xfd7zXZ\x00", "xz-compressed"),
    (b"7z\xbc\xaf", "a 7-Zip archive"),
    (b"Rar!", "a RAR archive"),
)


def check_looks_like_pack(pack: object, head: bytes, inner: bytes | None) -> None:
    """Refuse a file whose ``head`` (and, when gzip, the ``inner`` decompressed head) is no tar.

    Raises:
        PackError: ``pack`` is not a Coffer pack; the message says what it looks like instead.
    """
    tar = inner if head.startswith(GZIP_MAGIC) else head
    if tar is not None and _is_tar(tar):
        return
    found = "gzip-compressed, but not a tar archive" if head.startswith(GZIP_MAGIC) else _describe(head)
    raise PackError(f"{pack} is not a Coffer pack: it is {found}. {_SHAPE}", hint=NOT_A_PACK_HINT)


def _is_tar(head: bytes) -> bool:
    return head[257:262] == b"ustar"  # POSIX, pax and GNU headers all carry it


def _describe(head: bytes) -> str:
    if not head:
        return "an empty file"
    for magic, what in _MAGIC:
        if head.startswith(magic):
            return what
    try:  # the head may end inside a character, hence an incremental decoder
        text = codecs.getincrementaldecoder("utf-8")().decode(head)
    except UnicodeDecodeError:
        return "binary data of another kind"
    return "binary data of another kind" if "\x00" in text else "a text file"
