"""A corpus of hostile files, generated in the test (no binary fixtures, no extra libraries).

DOCX files are built from scratch with ``zipfile`` (the smallest package Word and MarkItDown
read); the broken PDFs, DOCX and XLSX files start from the repository's real fixtures.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

from tests.conftest import FIXTURES

__all__ = ["docx", "docx_bomb", "nasty_files"]

_CONTENT_TYPES = (
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
    '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
    '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
    '<Default Extension="xml" ContentType="application/xml"/>'
    '<Override PartName="/word/document.xml" '
    'ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/></Types>'
)
_RELS = (
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
    '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
    '<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/'
    'officeDocument" Target="word/document.xml"/></Relationships>'
)
_DOC_OPEN = (
    b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?><w:document '
    b'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body>'
)
_DOC_CLOSE = b"</w:body></w:document>"


def docx(paragraphs: list[str]) -> bytes:
    """A minimal, valid DOCX holding ``paragraphs``."""
    body = b"".join(f"<w:p><w:r><w:t>{p}</w:t></w:r></w:p>".encode() for p in paragraphs)
    return _package(_DOC_OPEN + body + _DOC_CLOSE)


def docx_bomb(expanded_mb: int) -> bytes:
    """A DOCX whose ``word/document.xml`` inflates to ``expanded_mb`` MB (about 1,000 to 1 compressed).

    One paragraph whose text is a single run of ``expanded_mb`` MB of the letter A: streamed into
    the zip so building it never holds the expanded text in memory.
    """
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", _CONTENT_TYPES)
        archive.writestr("_rels/.rels", _RELS)
        with archive.open("word/document.xml", "w", force_zip64=True) as part:
            part.write(_DOC_OPEN + b"<w:p><w:r><w:t>")
            block = b"A" * (1024 * 1024)
            for _ in range(expanded_mb):
                part.write(block)
            part.write(b"</w:t></w:r></w:p>" + _DOC_CLOSE)
    return buffer.getvalue()


def _package(document_xml: bytes, *, rels: str = _RELS) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", _CONTENT_TYPES)
        archive.writestr("_rels/.rels", rels)
        archive.writestr("word/document.xml", document_xml)
    return buffer.getvalue()


def _zip_without(source: Path, dropped: str) -> bytes:
    """A copy of an Office zip with the members under ``dropped`` removed."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(source) as original, zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for item in original.infolist():
            if not item.filename.startswith(dropped):
                archive.writestr(item, original.read(item.filename))
    return buffer.getvalue()


def nasty_files() -> dict[str, bytes]:
    """Malformed and truncated PDFs, DOCX and XLSX files, by a filename saying what is wrong."""
    pdf = (FIXTURES / "sample.pdf").read_bytes()
    docx_bytes = (FIXTURES / "sample.docx").read_bytes()
    xlsx = (FIXTURES / "sample.xlsx").read_bytes()
    return {
        "truncated-half.pdf": pdf[: len(pdf) // 2],
        "truncated-header.pdf": pdf[:16],
        "no-xref.pdf": pdf.replace(b"xref", b"xxxx").replace(b"startxref", b"startxxxx"),
        "garbage.pdf": b"%PDF-1.7\n" + bytes(range(256)) * 64,
        "not-a-pdf.pdf": b"<html><body>I am HTML wearing a .pdf name</body></html>",
        "truncated-half.docx": docx_bytes[: len(docx_bytes) // 2],
        "not-a-zip.docx": b"PK\x03\x04" + b"\x00" * 200,
        "empty-zip.docx": _empty_zip(),
        "no-document-part.docx": _zip_without(FIXTURES / "sample.docx", "word/document.xml"),
        "broken-xml.docx": _package(_DOC_OPEN + b"<w:p><w:r><w:t>unclosed"),
        "entity-expansion.docx": _package(_billion_laughs()),
        "truncated-half.xlsx": xlsx[: len(xlsx) // 2],
        "no-sheets.xlsx": _zip_without(FIXTURES / "sample.xlsx", "xl/worksheets/"),
        "not-a-zip.xlsx": b"\xd0\xcf\x11\xe0 an OLE header and nothing else",
    }


def _empty_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w"):
        pass
    return buffer.getvalue()


def _billion_laughs() -> bytes:
    """XML entity expansion ("billion laughs"): parsers must refuse it, not expand it."""
    entities = '<!ENTITY lol "lol">' + "".join(
        f'<!ENTITY lol{i} "{("&lol" + (str(i - 1) if i > 1 else "") + ";") * 10}">' for i in range(1, 10)
    )
    return (
        f'<?xml version="1.0"?><!DOCTYPE w:document [{entities}]>'
        '<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">'
        "<w:body><w:p><w:r><w:t>&lol9;</w:t></w:r></w:p></w:body></w:document>"
    ).encode()
