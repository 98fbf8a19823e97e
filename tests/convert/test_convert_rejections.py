"""convert() rejects bad input with the right machine reason, in the documented order."""

from __future__ import annotations

from pathlib import Path

import pytest

from coffer_mcp.convert import convert
from coffer_mcp.errors import EngineUnavailableError, IngestRejectedError

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def rejection(filename: str, data: bytes, **kwargs: int) -> IngestRejectedError:
    with pytest.raises(IngestRejectedError) as caught:
        convert(filename, data, **kwargs)
    return caught.value


def test_empty_bytes_are_rejected_as_empty_even_for_unknown_types() -> None:
    assert rejection("notes.md", b"").reason == "empty"
    assert rejection("setup.exe", b"").reason == "empty"


@pytest.mark.parametrize("data", [b"   \n\n\t\n", b"\r\n\r\n", b"<!-- only a comment -->\n"])
def test_markdown_with_nothing_left_after_cleaning_is_empty(data: bytes) -> None:
    assert rejection("blank.md", data).reason == "empty"


def test_csv_with_only_blank_rows_is_empty() -> None:
    assert rejection("blank.csv", b",,\n , \n").reason == "empty"


def test_unknown_extension_is_unsupported_and_lists_supported_formats() -> None:
    error = rejection("setup.exe", b"MZ\x90\x00")

    assert error.reason == "unsupported_type"
    assert ".exe" in error.message
    assert "pdf" in error.hint
    assert "md" in error.hint


@pytest.mark.parametrize(
    ("name", "modern"), [("a.doc", "docx"), ("a.ppt", "pptx"), ("a.rtf", "docx"), ("a.odt", "docx")]
)
def test_legacy_office_formats_are_unsupported_with_a_save_as_hint(name: str, modern: str) -> None:
    error = rejection(name, b"\xd0\xcf\x11\xe0 legacy bytes")

    assert error.reason == "unsupported_type"
    assert f".{modern}" in error.hint
    assert ".pdf" in error.hint


@pytest.mark.parametrize("name", ["README", ".md", "archive.tar.gz", "../../etc/passwd"])
def test_names_without_a_usable_extension_are_unsupported(name: str) -> None:
    assert rejection(name, b"text").reason == "unsupported_type"


def test_text_formats_holding_binary_bytes_are_unsupported() -> None:
    error = rejection("photo.txt", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")

    assert error.reason == "unsupported_type"


def test_too_large_is_decided_before_any_conversion_runs() -> None:
    # Invalid PDF bytes: converting them would fail with conversion_failed.
    data = b"%PDF-1.4\n" + b"\x00garbage" * 512
    assert rejection("huge.pdf", data).reason == "conversion_failed"

    error = rejection("huge.pdf", data, max_bytes=1024)

    assert error.reason == "too_large"
    assert "max_document_bytes" in error.hint
    assert "1024" in error.hint


def test_a_file_exactly_at_the_limit_is_accepted() -> None:
    data = b"# Fits\n"

    assert convert("fits.md", data, max_bytes=len(data)).title == "Fits"


def test_unsupported_type_is_reported_before_too_large() -> None:
    assert rejection("big.exe", b"x" * 10, max_bytes=1).reason == "unsupported_type"


def truncated(name: str) -> bytes:
    data = (FIXTURES / name).read_bytes()
    return data[: len(data) // 2]


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("truncated.pdf", truncated("sample.pdf")),
        ("garbage.pdf", b"%PDF-1.7\n" + bytes(range(256)) * 8),
        ("text.pdf", b"this is plain text pretending to be a PDF"),
        ("truncated.docx", truncated("sample.docx")),
        ("garbage.docx", b"PK\x03\x04" + b"\xff" * 300),
        ("truncated.pptx", truncated("sample.pptx")),
        ("truncated.xlsx", truncated("sample.xlsx")),
        ("truncated.epub", truncated("sample.epub")),
        ("truncated.ipynb", truncated("sample.ipynb")),
        ("garbage.msg", b"not an OLE2 compound file"),
    ],
)
def test_malformed_files_fail_conversion_cleanly(name: str, data: bytes) -> None:
    error = rejection(name, data)

    assert type(error) is IngestRejectedError
    assert error.reason == "conversion_failed"
    assert len(error.message) < 400
    assert error.hint


@pytest.mark.filterwarnings("ignore:The xlrd engine is deprecated:DeprecationWarning")
def test_malformed_legacy_excel_fails_conversion_cleanly() -> None:
    error = rejection("garbage.xls", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 600)

    assert not isinstance(error, EngineUnavailableError)
    assert error.reason == "conversion_failed"


def test_a_pdf_whose_text_layer_is_only_page_numbers_counts_as_scanned() -> None:
    error = rejection("scan.pdf", (FIXTURES / "scanned_numbered.pdf").read_bytes())

    assert error.reason == "scanned_pdf"
