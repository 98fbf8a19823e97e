"""Every fixture format converts to sensible Markdown with the right engine and title."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from coffer_mcp.convert import Conversion, convert, supported_formats
from coffer_mcp.errors import IngestRejectedError

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"

# (fixture, engine, title, phrases that must survive conversion)
CASES = [
    ("sample.md", "passthrough", "The Heron Protocol Field Guide", ["heron protocol handshake"]),
    ("sample_zh.md", "passthrough", "向量检索入门", ["向量检索", "近邻搜索"]),
    ("sample.txt", "passthrough", "sample", ["Marmalade lighthouse inventory"]),
    ("sample.py", "passthrough", "sample.py", ["def gather_moonstones"]),
    ("sample.json", "passthrough", "sample.json", ['"walrus cipher"']),
    ("sample.xml", "passthrough", "sample.xml", ["<title>Juniper Atlas</title>"]),
    ("sample.csv", "csv", "sample", ["Obsidian Kettle"]),
    ("sample.html", "html-main/2", "Tidal Orchard Cartography", ["means charting trees"]),
    ("sample.docx", "mammoth/2", "Quarterly Bramble Report", ["bramble yield forecast"]),
    ("sample.xlsx", "openpyxl/2", "sample", ["saffron ledger", "Marigold Traders"]),
    ("sample.pptx", "python-pptx/2", "Velvet Compass Roadmap", ["Lantern Metrics"]),
    ("sample.pdf", "pypdfium2/4", "Copper Meadow Telemetry", ["Copper meadow telemetry", "granite weather station"]),
    ("sample.ipynb", "markitdown", "Notebook of Pelican Sums", ["print(sum(pelicans))"]),
    ("sample.epub", "markitdown", "Chapter One: The Amber Tundra", ["amber tundra chronicle"]),
]


def convert_fixture(name: str) -> Conversion:
    return convert(name, (FIXTURES / name).read_bytes())


@pytest.mark.parametrize(("name", "engine", "title", "phrases"), CASES)
def test_each_fixture_converts_with_its_engine_title_and_distinctive_phrase(
    name: str, engine: str, title: str, phrases: list[str]
) -> None:
    conversion = convert_fixture(name)

    assert conversion.engine == engine
    assert conversion.title == title
    assert conversion.original_format == name.rpartition(".")[2]
    for phrase in phrases:
        assert phrase in conversion.markdown
    assert conversion.markdown.endswith("\n")
    assert not conversion.markdown.startswith("\n")


def test_every_fixture_format_is_a_supported_format() -> None:
    formats = set(supported_formats())

    assert {name.rpartition(".")[2] for name, *_ in CASES} <= formats
    assert supported_formats() == sorted(formats)


@pytest.mark.parametrize("name", ["sample.docx", "sample.xlsx", "sample.csv", "sample.html"])
def test_tables_come_out_as_markdown_tables(name: str) -> None:
    lines = convert_fixture(name).markdown.splitlines()

    assert any(line.startswith(("| ---", "|---")) for line in lines)
    assert sum(line.startswith("|") for line in lines) >= 3


def test_xlsx_keeps_both_sheets_as_sections() -> None:
    markdown = convert_fixture("sample.xlsx").markdown

    assert "## Inventory" in markdown
    assert "## Suppliers" in markdown


def test_pdf_text_from_both_pages_comes_through_in_order() -> None:
    markdown = convert_fixture("sample.pdf").markdown

    assert markdown.index("Copper meadow") < markdown.index("granite weather station")


def test_html_boilerplate_is_gone_and_the_article_stays() -> None:
    markdown = convert_fixture("sample.html").markdown

    assert "# Tidal Orchard Cartography" in markdown
    for leftover in ["do-not-index-this-script", "late script", "font-family", "<!--", "[](#)"]:
        assert leftover not in markdown


def test_pptx_slide_number_comments_are_cleaned_away() -> None:
    markdown = convert_fixture("sample.pptx").markdown

    assert "<!--" not in markdown
    assert "# Velvet Compass Roadmap" in markdown
    assert "# Lantern Metrics" in markdown


def test_source_code_is_fenced_so_comments_are_not_headings() -> None:
    markdown = convert_fixture("sample.py").markdown
    lines = markdown.splitlines()

    assert lines[0] == "# `sample.py`"
    assert lines[2] == "````python"  # longer than the ``` inside the docstring
    assert lines[-1] == "````"
    assert "# A comment that must not become a Markdown heading." in lines


def test_xml_comments_survive_inside_the_code_block() -> None:
    markdown = convert_fixture("sample.xml").markdown

    assert "```xml" in markdown
    assert "<!-- an XML comment stays inside the code block -->" in markdown


def test_markdown_code_fences_keep_their_hash_comments_out_of_the_title() -> None:
    conversion = convert("notes.md", b"```sh\n# not the title\n```\n\nplain text\n")

    assert conversion.title == "notes"


def test_scanned_pdf_is_rejected_with_an_ocr_hint() -> None:
    with pytest.raises(IngestRejectedError) as caught:
        convert_fixture("scanned.pdf")

    assert caught.value.reason == "scanned_pdf"
    assert "scanned" in caught.value.message
    assert "ocrmypdf in.pdf out.pdf" in caught.value.hint


def test_concurrent_conversions_all_succeed_and_leave_stdout_restored() -> None:
    stdout = sys.stdout
    results: list[str] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            results.append(convert_fixture("sample.docx").title)
        except BaseException as exc:  # noqa: BLE001 - collected and re-raised in the test thread
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert not errors
    assert results == ["Quarterly Bramble Report"] * 4
    assert sys.stdout is stdout
