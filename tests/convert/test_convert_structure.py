"""Documents keep their structure: reading order, headings, right-to-left text, table shapes.

Each test converts one of the project's own fixtures (fixtures/make_fixtures.py) the way an
ingest does, in the sandboxed worker, and checks what a reader of the Markdown would notice.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from coffer_mcp.convert import Conversion, convert, engine_for
from coffer_mcp.convert._sheets import cell_text

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def convert_fixture(name: str, **options: bool) -> Conversion:
    return convert(name, (FIXTURES / name).read_bytes(), timeout=120, memory_bytes=0, **options)


def table_rows(markdown: str) -> list[str]:
    return [line for line in markdown.splitlines() if line.startswith("|")]


def test_two_column_pdf_reads_each_column_as_whole_paragraphs_without_line_break_hyphens() -> None:
    markdown = convert_fixture("two_columns.pdf").markdown

    left = markdown.index(
        "The western channel holds the otter colony. Otters fish at dawn along the reed beds and rest"
    )
    right = markdown.index("The eastern channel is where the herons nest. Heron chicks hatch in the alder trees")
    assert left < right
    assert "marked every den with a numbered stake for the autumn recount." in markdown
    assert "a surge that overtopped the southern bank" in markdown


def test_pdf_headings_come_from_font_sizes_and_the_largest_first_one_is_the_title() -> None:
    conversion = convert_fixture("headings.pdf")

    assert conversion.title == "Glacier Melt Field Report"
    headings = re.findall(r"^(#+) (.+)$", conversion.markdown, re.MULTILINE)
    assert headings == [
        ("#", "Glacier Melt Field Report"),
        ("##", "1 Introduction"),
        ("##", "2 Methods"),
        ("##", "3 Findings"),
    ]


def test_a_pdfs_running_header_and_numbered_footer_are_left_out_not_repeated_between_its_sections() -> None:
    conversion = convert_fixture("running_headers.pdf")

    assert "Kittiwake Harbour" not in conversion.markdown
    headings = re.findall(r"^#+ (.+)$", conversion.markdown, re.MULTILINE)
    assert headings == ["Tide Gauges", "Silt Surveys", "Mooring Repairs"]
    assert not re.search(r"^\d+$", conversion.markdown, re.MULTILINE)  # no page number left as a paragraph


def test_a_total_ending_each_page_is_content_not_a_running_footer() -> None:
    """Like a footer's page number, only the amount changes from page to page; but the line sits
    where the text is, not in the page's margin, and a one-page total is no running title."""
    invoice = convert_fixture("invoice_totals.pdf").markdown
    receipt = convert_fixture("receipt.pdf").markdown

    assert "Subtotal 120" in invoice
    assert "Subtotal 340" in invoice
    assert "Total 1250" in receipt


def test_a_line_of_code_or_a_caption_between_paragraphs_is_text_not_a_heading() -> None:
    markdown = convert_fixture("code_lines.pdf").markdown

    headings = re.findall(r"^#+ (.+)$", markdown, re.MULTILINE)
    assert headings == ["Tide Table Queries"]
    assert "CALL refresh_tides(2024)" in markdown
    assert "WHERE depth > 10 AND harbour = 'North'" in markdown
    assert "\n\nTable 2 Berth depths by quay\n\n" in markdown


def test_arabic_pdf_text_comes_out_in_reading_order_so_its_words_can_be_found() -> None:
    markdown = convert_fixture("right_to_left.pdf").markdown

    assert "تحليل البيانات يساعد الباحثين على فهم النتائج" in markdown


def test_docx_table_has_its_real_header_and_a_merged_cell_repeated_in_its_own_column() -> None:
    markdown = convert_fixture("merged_cells.docx").markdown

    assert table_rows(markdown) == [
        "| Region | Quarter | Sales |",
        "| --- | --- | --- |",
        "| North | Q1 | 120 |",
        "| North | Q2 | 95 |",
        "| South | Q1 | 80 |",
    ]


def test_docx_rows_that_start_late_or_end_early_keep_each_value_in_its_own_column() -> None:
    markdown = convert_fixture("late_rows.docx").markdown

    assert table_rows(markdown) == [
        "| Depot | Week 1 | Week 2 |",
        "| --- | --- | --- |",
        "|  | Kestrel |  |",
        # merged down from the header over a row that starts late; no header value invented
        "| Crate | Weight | Heron Wharf |",
        "| --- | --- | --- |",
        "|  |  | Heron Wharf |",
        "| Bale | Wide value | Wide value |",
        # a row ending early ends the merge above it: Ada's row has no third cell
        "| Name | Role | Osprey Quay |",
        "| --- | --- | --- |",
        "| Ada | Clerk |  |",
        "| Bo | Pilot |  |",
    ]


def test_docx_comments_are_kept_as_notes_at_the_end_marked_where_they_were_made() -> None:
    markdown = convert_fixture("comments.docx").markdown

    assert markdown.startswith(
        "The lighthouse budget[^comment-1] doubles next year.\n\nKeepers rotate weekly[^comment-2]\n"
    )
    assert markdown.endswith(
        "\n## Comments\n\n"
        "[^comment-1]: Mira Stone: Check the figure against the tide ledger.\n\n"
        "[^comment-2]: Unknown Author: Monthly in winter. Ask the harbour office.\n"
    )


def test_a_sparse_sheet_becomes_one_table_per_block_with_whole_numbers_and_no_nan() -> None:
    markdown = convert_fixture("sparse.xlsx").markdown

    assert "NaN" not in markdown
    assert "Unnamed" not in markdown
    assert table_rows(markdown) == [
        "| fruit | crates | note |",
        "| --- | --- | --- |",
        "| quince | 3 |  |",
        "| medlar | 12 | late |",
        "| warehouse | shelves |",
        "| --- | --- |",
        "| Harbour Road | 7 |",
    ]


def typed_row() -> dict[str, str]:
    """The one data row of typed.xlsx, by column header."""
    header, _, values = table_rows(convert_fixture("typed.xlsx").markdown)
    return dict(zip(header.strip("| ").split(" | "), values[2:-2].split(" | "), strict=True))


def test_a_formula_shows_its_cached_value_and_without_one_its_formula_text() -> None:
    row = typed_row()

    assert row["double"] == "=B2*2"  # written by openpyxl: no value cached
    assert row["cached"] == "3703.5"
    assert row["blank if none"] == ""  # Excel cached the empty text of =IF(…,"",…)


def test_sheet_numbers_read_as_formatted_and_whole_numbers_keep_every_stored_digit() -> None:
    row = typed_row()

    assert (row["date"], row["amount"], row["zip"]) == ("2024-03-05", "1234.5", "02134")
    assert (row["share"], row["rate"]) == ("25%", "12.35%")
    assert row["big"] == "12345678901234570000"  # the double the file holds, not 1.23456789012346e+19


def test_a_workbook_leaves_out_an_empty_sheet_rather_than_writing_a_bare_heading() -> None:
    markdown = convert_fixture("typed.xlsx").markdown

    assert re.findall(r"^#+ .*$", markdown, re.MULTILINE) == ["## Rates"]


@pytest.mark.parametrize(
    ("value", "number_format", "text"),
    [
        (0.125, "0%", "13%"),  # half up, as Excel rounds (not 12%)
        (-0.125, "0%", "-13%"),
        (1, "0.0%", "100.0%"),
        (0.25, "#,##0.00%;[Red]-0.00%", "25.00%"),
        (0.5, '0.0"%"', "0.5"),  # a quoted % is text, not a percent
        (2.0**60, "General", "1152921504606847000"),
        (0.1 + 0.2, "General", "0.3"),
    ],
)
def test_cell_text_applies_the_number_format_a_reader_sees(value: float, number_format: str, text: str) -> None:
    assert cell_text(value, number_format) == text


def test_slides_each_get_a_heading_and_body_placeholder_lines_are_bullets() -> None:
    markdown = convert_fixture("sample.pptx").markdown

    assert markdown.startswith("# Velvet Compass Roadmap\n")
    assert "\n## Lantern Metrics\n\n- Lantern uptime stayed above ninety-nine percent." in markdown


def test_chart_values_print_as_a_sheet_prints_them_whole_numbers_without_a_point() -> None:
    markdown = convert_fixture("chart.pptx").markdown

    assert "### Chart: Waders by year\n" in markdown
    assert table_rows(markdown) == [
        "| Category | Herons | Share |",
        "| --- | --- | --- |",
        "| 2019 | 120 | 25% |",  # the series' own 0% format, as in a sheet
        "| 2020 | 130 | 13% |",
    ]


def test_a_web_page_keeps_its_article_and_drops_navigation_unless_the_whole_page_is_asked_for() -> None:
    main = convert_fixture("sample.html")
    whole = convert_fixture("sample.html", html_main_content=False)

    assert "Mapping a tidal orchard means charting trees" in main.markdown
    assert "About" not in main.markdown
    assert "Copyright footer" not in main.markdown
    assert "Copyright footer" in whole.markdown
    assert (main.engine, whole.engine) == ("html-main/2", "html-page/2")


@pytest.mark.parametrize(
    ("ext", "engine"),
    [
        ("pdf", "pypdfium2/4"),
        ("docx", "mammoth/2"),
        ("xlsx", "openpyxl/2"),
        ("xls", "xlrd/2"),
        ("pptx", "python-pptx/2"),
        ("html", "html-main/2"),
        ("epub", "markitdown"),
        ("md", "passthrough"),
        ("csv", "csv"),
    ],
)
def test_each_format_records_the_engine_version_that_converted_it(ext: str, engine: str) -> None:
    assert engine_for(ext) == engine


def test_sub_headers_set_closer_than_a_pdf_tables_columns_keep_one_column_each() -> None:
    """The sub-headers "simple complex mixed" under "Recall" are one run of text that crosses two of the table's
    column gutters: cut between their words, not read as one cell that merges three columns."""
    markdown = convert_fixture("grouped_table.pdf").markdown

    assert table_rows(markdown) == [
        "| Model |  | Recall |  | Time |",
        "| --- | --- | --- | --- | --- |",
        "|  | simple | complex | mixed |  |",
        "| Heron | 0.91 | 0.84 | 0.88 | 2.7 |",
        "| Egret | 0.87 | 0.79 | 0.83 | 1.9 |",
    ]
    assert markdown.startswith("Table 1 Recall of the wader models by plumage\n\n")  # its caption is text
    assert "\n\nThe simple plumages were scored on the spring survey and the complex ones" in markdown


def test_a_pdf_tables_column_headers_set_up_the_page_are_read_whole_as_its_header_row() -> None:
    """Each letter of a header turned a quarter turn sits on a line of its own: read as one line
    each, the headers were rows of single letters above a table with fewer columns."""
    markdown = convert_fixture("rotated_headers.pdf").markdown

    assert table_rows(markdown) == [
        "| Action | Harbour master | Pilot | Visitor |",
        "| --- | --- | --- | --- |",
        "| Open the lock gates | X | X |  |",
        "| Moor at the fuel berth | X |  | X |",
    ]
    assert markdown.startswith("Table 3 Who may do what in the harbour\n\n")


def test_a_docx_still_converts_when_its_pre_processing_loses_the_xml_namespaces(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under lxml 6.2.0, MarkItDown's DOCX pre-processing (BeautifulSoup's XML parser) wrote
    ``document.xml`` without its namespace prefixes, and mammoth refused every Word file as damaged.
    The converter then reads the package as it was (equations stay as their text)."""
    import io
    import zipfile

    import markitdown.converter_utils.docx.pre_process as markitdown_docx

    from coffer_mcp.convert._docx import DocxConverter

    def as_under_lxml_6_2(stream: io.BytesIO) -> io.BytesIO:
        out = io.BytesIO()
        with zipfile.ZipFile(stream) as source, zipfile.ZipFile(out, "w") as target:
            for info in source.infolist():
                content = source.read(info)
                if info.filename == "word/document.xml":
                    text = re.sub(r'\s+xmlns(:\w+)?="[^"]*"', "", content.decode("utf-8"))
                    content = re.sub(r"(</?|\s)\w+:(?=\w)", r"\1", text).encode("utf-8")
                target.writestr(info, content)
        out.seek(0)
        return out

    monkeypatch.setattr(markitdown_docx, "pre_process_docx", as_under_lxml_6_2)
    markdown = DocxConverter().convert((FIXTURES / "sample.docx").read_bytes(), "sample.docx")

    assert markdown.startswith("# Quarterly Bramble Report")
    assert "bramble yield forecast" in markdown
