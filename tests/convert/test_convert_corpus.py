"""Smoke test over the shared multi-format corpus (../shared/eval/docs-multiformat).

Files there that are rejected, and why:
- legacy_sample.doc, legacy_sample.ppt: ``unsupported_type`` (legacy binary Office formats;
  the hint says to save as .docx / .pptx / .pdf);
- MEDRPT-2024-PAT-3847_medical_report_scan.pdf: ``scanned_pdf`` (image-only, needs OCR).
Everything else converts.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest

from coffer_mcp.convert import Conversion, convert
from coffer_mcp.errors import IngestRejectedError

CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "eval" / "docs-multiformat"
EXPECTED = CORPUS / "expected"
SKIP_ABSENT = pytest.mark.skip(reason=f"shared corpus not present at {CORPUS}")

REJECTED = {
    "legacy_sample.doc": "unsupported_type",
    "legacy_sample.ppt": "unsupported_type",
    "MEDRPT-2024-PAT-3847_medical_report_scan.pdf": "scanned_pdf",
}
SENSIBLE_REASONS = {"unsupported_type", "scanned_pdf", "empty", "conversion_failed", "too_large"}
# pandas warns that its xlrd engine (used for .xls) is deprecated; the suite turns warnings into
# errors, which markitdown would then report as a failed conversion.
XLRD_WARNING = "ignore:The xlrd engine is deprecated:DeprecationWarning"


def corpus_files() -> list[str]:
    if not CORPUS.is_dir():
        return []
    return sorted(path.name for path in CORPUS.iterdir() if path.is_file())


def reference_files() -> list[object]:
    if not EXPECTED.is_dir():
        return []
    params: list[object] = []
    for path in sorted(EXPECTED.glob("*.md")):
        source = path.name.split("__", 1)[1].removesuffix(".md")
        if source in REJECTED:
            continue
        params.append(pytest.param(path.name, source, id=source))
    return params


@functools.cache
def converted(name: str) -> Conversion | IngestRejectedError:
    """Each corpus file is converted once for both tests (PDFs take a while)."""
    try:
        return convert(name, (CORPUS / name).read_bytes())
    except IngestRejectedError as exc:
        return exc


@pytest.mark.filterwarnings(XLRD_WARNING)
@pytest.mark.parametrize("name", corpus_files() or [pytest.param("", marks=SKIP_ABSENT)])
def test_every_corpus_file_converts_or_is_rejected_with_a_sensible_reason(name: str) -> None:
    conversion = converted(name)
    if isinstance(conversion, IngestRejectedError):
        exc = conversion
        assert exc.reason == REJECTED.get(name, exc.reason)
        assert exc.reason in SENSIBLE_REASONS
        assert name in REJECTED, f"{name} rejected as {exc.reason}: {exc.message}"
        return
    assert name not in REJECTED, f"{name} should be rejected as {REJECTED.get(name)}"
    assert conversion.markdown.strip()
    assert conversion.title


def words(text: str) -> set[str]:
    return {word.lower() for word in re.findall(r"\w{6,}", text)}


def article_of(reference: str) -> str:
    """A web page's reference is the whole page (docling keeps menus, the 136 language links, the
    citations); what a main-content conversion is compared with is its article: from the first
    ``#`` heading to the notes, without the lines that are only a link (the menus)."""
    start = reference.find("\n# ")
    end = min((i for i in (reference.find("\n## Notes"), reference.find("\n## References")) if i > start), default=None)
    lines = reference[max(start, 0) : end].split("\n")
    return "\n".join(line for line in lines if not re.fullmatch(r"\s*[-*] \[[^\]]*\]\([^)]*\)\s*", line))


@pytest.mark.parametrize(("reference", "source"), reference_files() or [pytest.param("", "", marks=SKIP_ABSENT)])
def test_converted_text_shares_most_distinctive_words_with_the_reference(reference: str, source: str) -> None:
    text = (EXPECTED / reference).read_text(encoding="utf-8")
    expected = words(article_of(text) if source.endswith(".html") else text)
    conversion = converted(source)
    assert isinstance(conversion, Conversion)
    got = words(conversion.markdown)

    assert len(expected & got) >= 0.6 * len(expected)


@pytest.mark.skipif(not EXPECTED.is_dir(), reason=f"shared corpus not present at {CORPUS}")
def test_word_tables_have_every_value_in_the_column_docling_puts_it_in() -> None:
    # Rows that start late (w:gridBefore) and merges down over them: a value in the wrong column,
    # or a header value invented in a data row, is the worst kind of conversion error.
    def rows(markdown: str) -> list[str]:
        return [re.sub(r"\| -+ ", "| --- ", line) for line in markdown.splitlines() if line.startswith("|")]

    conversion = converted("word_tables.docx")
    assert isinstance(conversion, Conversion)
    assert rows(conversion.markdown) == rows((EXPECTED / "docling__word_tables.docx.md").read_text(encoding="utf-8"))


@pytest.mark.skipif(not CORPUS.is_dir(), reason=f"shared corpus not present at {CORPUS}")
def test_a_3d_chart_python_pptx_cannot_plot_still_gives_its_values() -> None:
    conversion = converted("pptx_chart.pptx")
    assert isinstance(conversion, Conversion)

    assert "| 2019 | 120 | 80 |" in conversion.markdown
    assert "[unsupported chart]" not in conversion.markdown
    assert "| Q1 | 10 |" in conversion.markdown  # a bar3DChart: docling's reference has no values either


def headings(markdown: str) -> list[str]:
    return re.findall(r"^#+ (.+)$", markdown, re.MULTILINE)


@pytest.mark.skipif(not CORPUS.is_dir(), reason=f"shared corpus not present at {CORPUS}")
def test_a_pdfs_running_footers_are_left_out_and_its_syntax_figures_are_not_headings() -> None:
    conversion = converted("redp5110_sampled.pdf")
    assert isinstance(conversion, Conversion)

    # Footers of every page: "© Copyright IBM Corp. 2014. All rights reserved. xi", "20 Row and
    # Column Access Control Support in IBM DB2 for i", "Chapter 3. Row and Column Access Control 19".
    assert "All rights reserved" not in conversion.markdown
    assert not re.search(r"^\d+ Row and Column Access Control Support", conversion.markdown, re.MULTILINE)
    assert not re.search(r"^Chapter \d\. [^.]* \d+$", conversion.markdown, re.MULTILINE)
    # A statement's syntax drawn in a figure, lines of SQL or CL, and captions are not headings.
    code = [h for h in headings(conversion.markdown) if re.search(r"[<>|=]|^CALL |\w\(|^(Figure|Table|Example) \d", h)]
    assert code == []


@pytest.mark.skipif(not CORPUS.is_dir(), reason=f"shared corpus not present at {CORPUS}")
def test_a_one_page_pdfs_running_title_with_its_page_number_is_not_a_heading() -> None:
    conversion = converted("2305.03393v1-pg9.pdf")
    assert isinstance(conversion, Conversion)

    assert headings(conversion.markdown)[1:] == ["5.1 Hyper Parameter Optimization", "5.2 Quantitative Results"]
    assert "Structure Recognition 9" not in conversion.markdown


@pytest.mark.skipif(not EXPECTED.is_dir(), reason=f"shared corpus not present at {CORPUS}")
def test_a_pdf_tables_sub_headers_under_a_spanning_header_keep_their_own_columns() -> None:
    # "simple complex all" under "TEDs" is one run of text across two column gutters, and "0.927
    # 0.853" two cells closer than a gutter: docling's reference has 8 columns, values in each.
    def cells(markdown: str) -> list[list[str]]:
        table = [line for line in markdown.splitlines() if line.startswith("| ") and "OTSL" in line]
        return [[cell.strip() for cell in line.strip("|").split("|")] for line in table]

    conversion = converted("2305.03393v1-pg9.pdf")
    assert isinstance(conversion, Conversion)

    expected = cells((EXPECTED / "docling__2305.03393v1-pg9.pdf.md").read_text(encoding="utf-8"))
    assert len(expected) == 4
    assert cells(conversion.markdown) == expected


@pytest.mark.skipif(not EXPECTED.is_dir(), reason=f"shared corpus not present at {CORPUS}")
def test_a_pdf_tables_headers_turned_up_the_page_head_the_columns_docling_puts_them_over() -> None:
    # Table 2-2: "*JOBCTL", "QIBM_DB_SECADM", ... read upwards; the X marks under them.
    def table(markdown: str) -> list[str]:
        start = markdown.index("| User action")
        return [
            re.sub(r"\| -+ ", "| --- ", line) for line in markdown[start:].split("\n\n", maxsplit=1)[0].splitlines()
        ]

    conversion = converted("redp5110_sampled.pdf")
    assert isinstance(conversion, Conversion)

    expected = table((EXPECTED / "docling__redp5110_sampled.pdf.md").read_text(encoding="utf-8"))
    assert len(expected) == 14
    assert table(conversion.markdown) == expected


@pytest.mark.skipif(not EXPECTED.is_dir(), reason=f"shared corpus not present at {CORPUS}")
def test_a_title_over_a_pdf_forms_table_is_text_and_its_columns_stay_apart() -> None:
    # "Estimate Totals" sits over the repair estimate's cost table in one of its columns: read as
    # the table's header row it hid that "Hours" and "Rate" are two columns, as MarkItDown has them.
    conversion = converted("REPAIR-2022-INV-001_multipage.pdf")
    assert isinstance(conversion, Conversion)

    assert "|  |  | Hours | Rate | Cost |" in conversion.markdown
    assert "| Body Labor |  | 2 | 150 | 300 |" in conversion.markdown
    assert not re.search(r"^\|.*Estimate Totals", conversion.markdown, re.MULTILINE)
