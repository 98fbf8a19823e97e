"""PDF pages laid out the way documents are: columns, a form, tables with and without rules.

The fixtures are real PDFs made with reportlab (fixtures/make_layout_pdfs.py); each test converts
one the way an ingest does, in the sandboxed worker, and checks what a reader of the Markdown
would notice: the order of the text, the title, the cells of a table.
"""

from __future__ import annotations

import re
from pathlib import Path

from coffer_mcp.convert import Conversion, convert

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def convert_fixture(name: str) -> Conversion:
    return convert(name, (FIXTURES / name).read_bytes(), timeout=120, memory_bytes=0)


def in_order(markdown: str, *phrases: str) -> bool:
    places = [markdown.index(phrase) for phrase in phrases]
    return places == sorted(places)


def headings(markdown: str) -> list[str]:
    return re.findall(r"^#+ .+$", markdown, re.MULTILINE)


def table_rows(markdown: str) -> list[str]:
    return [line for line in markdown.splitlines() if line.startswith("|")]


def test_a_two_column_page_is_read_column_by_column_each_paragraph_whole() -> None:
    markdown = convert_fixture("two_column_article.pdf").markdown

    assert in_order(
        markdown,
        "The abstract runs across the whole page above the two columns",
        "## 1 Introduction",
        "has been recorded by gauges since the nineteenth century.",
        "## 2 Gauges and Method",
        "as the channel widened and the flood spread over the sandbanks.",
        "## 3 Findings",
        "The right column begins with the findings.",
        "## 4 Conclusion",
    )
    # Lines side by side in the two columns are not run together.
    assert (
        "Each gauge logged the water level every ten seconds. The bore rose forty centimetres at Minsterworth "
        "in under a minute, and the gauges upstream saw the same front arrive later and lower"
    ) in markdown


def test_columns_above_and_below_a_full_width_heading_are_read_before_and_after_it() -> None:
    markdown = convert_fixture("two_column_article.pdf").markdown

    assert in_order(
        markdown,
        "The upper left column describes how each gauge was levelled against the ordnance datum",
        "The upper right column lists the stations from the sea upstream",
        "## Appendix: Station Readings",
        "This paragraph runs across the full width of the page",
        "The lower left column gives the mean arrival times, which fell behind the predicted times",
        "The lower right column closes the appendix with the heights, which fell by half",
    )
    assert not table_rows(markdown)


def test_the_title_is_the_largest_heading_of_the_first_page_not_the_author_line_under_it() -> None:
    conversion = convert_fixture("two_column_article.pdf")

    assert conversion.title == "Tidal Bores"
    assert conversion.markdown.startswith("# Tidal Bores\n")
    assert "# Mira Stone" not in headings(conversion.markdown)[0]


def test_a_title_from_the_pdfs_metadata_that_is_also_its_first_heading_is_written_once() -> None:
    conversion = convert_fixture("form_checkboxes.pdf")

    assert conversion.title == "Harbour Berth Application"
    assert [h for h in headings(conversion.markdown) if "Harbour Berth Application" in h] == [
        "# Harbour Berth Application"
    ]


def test_a_form_in_two_columns_is_read_column_by_column_with_its_check_boxes_as_task_items() -> None:
    markdown = convert_fixture("form_checkboxes.pdf").markdown

    assert in_order(
        markdown,
        "Tick one box for each question",
        "1. What kind of vessel will use the berth?",
        "- [ ] Sailing yacht",
        "- [x] Motor launch",
        "2. How long is the vessel overall?",
        "3. Which months do you need the berth for this season?",
        "- [ ] July to September",
        "4. Will anyone live aboard?",
        "- [x] No",
        "6. How should the harbour office contact you?",
        "- [x] By telephone",
    )
    assert not table_rows(markdown)  # its rows line up across the columns, but it is no table


def test_a_ruled_table_keeps_its_cells_between_paragraphs_of_prose() -> None:
    markdown = convert_fixture("ruled_table.pdf").markdown

    assert table_rows(markdown) == [
        "| Berth | Length (m) | Season fee | Deposit |",
        "| --- | --- | --- | --- |",
        "| Quay A | 8 | 1,200 | 150 |",
        "| Quay B | 10 | 1,450 | 150 |",
        "| Pontoon C | 12 | 1,900 | 250 |",
        "| Outer mooring | 15 | 2,300 | 400 |",
    ]
    assert "\n\nThe harbour board sets its fees once a year." in markdown
    assert "\n\nBerths are allocated in the order applications arrive." in markdown


def test_an_unruled_table_set_close_keeps_its_cells_and_its_header_row_is_no_heading() -> None:
    conversion = convert_fixture("unruled_table.pdf")

    assert table_rows(conversion.markdown) == [
        "| Station | Bank | Height (m) | Speed (km/h) |",
        "| --- | --- | --- | --- |",
        "| Sharpness | east | 0.4 | 12 |",
        "| Epney | west | 0.9 | 16 |",
        "| Minsterworth | west | 1.6 | 19 |",
        "| Maisemore | east | 1.1 | 15 |",
    ]
    assert conversion.title == "Bore Gauge Readings"
    assert headings(conversion.markdown) == ["# Bore Gauge Readings"]


def test_the_words_of_a_right_to_left_tables_cell_stay_in_reading_order() -> None:
    markdown = convert_fixture("right_to_left_table.pdf").markdown

    assert table_rows(markdown) == [
        "| נמל הבית | נמל חיפה הגדול שבצפון |",
        "| --- | --- |",
        "| עומק המים | ארבעה מטרים |",
        "| סוג הרציף | רציף צף |",
        "| בעלים | רשות הנמלים |",
    ]
