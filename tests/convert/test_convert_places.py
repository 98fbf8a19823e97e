"""Conversions know where each line of their Markdown is in the original: page, slide, sheet and
row, record, line, heading, e-mail part."""

from __future__ import annotations

from pathlib import Path

import pytest

from coffer_mcp.convert import Conversion, convert
from tests.conftest import FIXTURES, shared_path


def place_of(conversion: Conversion, phrase: str) -> object:
    """The place of the (first) Markdown line holding ``phrase``."""
    lines = conversion.markdown.split("\n")
    index = next(i for i, line in enumerate(lines) if phrase in line)
    return conversion.places[index]


def fixture(name: str) -> Conversion:
    return convert(name, (FIXTURES / name).read_bytes(), timeout=120)


def test_each_line_of_a_pdf_is_on_its_page() -> None:
    pdf = fixture("sample.pdf")
    assert place_of(pdf, "Copper meadow telemetry report") == {"page": 1}
    assert place_of(pdf, "granite weather station") == {"page": 2}
    assert len(pdf.places) == len(pdf.markdown.split("\n"))


def test_each_line_of_a_deck_is_on_its_slide() -> None:
    deck = fixture("sample.pptx")
    assert place_of(deck, "velvet compass points") == {"slide": 1}
    assert place_of(deck, "Lantern uptime") == {"slide": 2}


def test_each_row_of_a_workbook_table_is_at_its_sheet_and_row() -> None:
    book = fixture("sample.xlsx")
    assert place_of(book, "## Inventory") == {"sheet": "Inventory"}
    assert place_of(book, "| spice |") == {"sheet": "Inventory", "row": 1}
    assert place_of(book, "saffron ledger") == {"sheet": "Inventory", "row": 2}
    assert place_of(book, "Marigold Traders") == {"sheet": "Suppliers", "row": 2}
    assert place_of(book, "| --- |") is None  # the separator row is no row of the sheet


def test_a_second_table_lower_on_a_sheet_is_at_its_own_rows() -> None:
    sparse = fixture("sparse.xlsx")  # a table at A1:C3, another at F8:G9
    assert place_of(sparse, "medlar") == {"sheet": "Ledger", "row": 3}
    assert place_of(sparse, "| warehouse |") == {"sheet": "Ledger", "row": 8}
    assert place_of(sparse, "Harbour Road") == {"sheet": "Ledger", "row": 9}


def test_each_row_of_a_csv_is_at_its_record() -> None:
    table = fixture("sample.csv")
    assert place_of(table, "| item |") == {"row": 1}
    assert place_of(table, "Copper Ladle") == {"row": 3}
    assert place_of(table, "line one<br>line two") == {"row": 4}  # a quoted line break stays one record


def test_a_csv_with_blank_records_numbers_the_records_after_them_as_a_spreadsheet_does() -> None:
    table = convert("people.csv", b"name,age\n\nAda,36\n,\nBrook,41\n")
    assert place_of(table, "Ada") == {"row": 3}
    assert place_of(table, "Brook") == {"row": 5}


def test_each_line_of_markdown_is_at_its_line_of_the_file_though_cleaning_drops_blank_lines_and_comments() -> None:
    text = (
        "\n\n# Title\r\n\r\n\r\n\r\nFirst paragraph.\r\n<!-- a comment\r\nover two lines -->\r\n"
        "Kept <!-- inline --> words.\r\n\r\n\r\nLast line.   \r\n"
    )
    note = convert("note.md", text.encode())
    assert note.markdown == "# Title\n\nFirst paragraph.\n\nKept words.\n\nLast line.\n"
    assert place_of(note, "# Title") == {"line": 3}
    assert place_of(note, "First paragraph.") == {"line": 7}
    # Changed by cleaning: at the lines it came from, the comment removed before it among them.
    assert place_of(note, "Kept words.") == {"lines": [8, 10]}
    assert place_of(note, "Last line.") == {"line": 13}


def test_code_is_at_its_lines_below_the_fence_coffer_adds() -> None:
    code = fixture("sample.py")
    source = (FIXTURES / "sample.py").read_text(encoding="utf-8").split("\n")
    for index, line in enumerate(code.markdown.split("\n")):
        place = code.places[index]
        if place is not None:
            assert source[place["line"] - 1] == line
    definition = next(number for number, line in enumerate(source, 1) if line.startswith("def gather_moonstones"))
    assert place_of(code, "def gather_moonstones") == {"line": definition}
    assert code.places[:3] == (None, None, None)  # the file name heading and the fence are Coffer's


def test_a_word_document_line_is_under_its_heading_path() -> None:
    doc = fixture("sample.docx")
    assert place_of(doc, "North") == {"heading": ["Quarterly Bramble Report", "Harvest by field"]}


def test_an_e_mail_line_is_in_its_headers_or_its_body() -> None:
    path = shared_path("eval", "docs-multiformat", "test_outlook_msg.msg")
    mail = convert(path.name, path.read_bytes(), timeout=120)
    assert place_of(mail, "**Subject:**") == {"part": "headers"}
    assert place_of(mail, "body of the test email") == {"part": "body"}


def test_a_web_page_has_no_places() -> None:
    assert fixture("sample.html").places == ()


@pytest.mark.parametrize("name", ["multi_page.pdf", "normal_4pages.pdf", "redp5110_sampled.pdf"])
def test_pages_of_a_longer_pdf_come_in_order_and_each_line_has_one(name: str) -> None:
    path: Path = shared_path("eval", "docs-multiformat", name)
    pdf = convert(name, path.read_bytes(), timeout=120)
    pages = [place["page"] for place in pdf.places if place]
    assert pages == sorted(pages)
    assert pages[-1] > 1
    lines = pdf.markdown.split("\n")
    assert all(place is not None for line, place in zip(lines[1:], pdf.places[1:], strict=False) if line.strip())
