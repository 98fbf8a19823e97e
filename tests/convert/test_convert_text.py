"""Passthrough and CSV conversion: decoding, fencing and table building."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from coffer_mcp.convert import convert
from coffer_mcp.errors import IngestRejectedError

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
MSKANJI = SHARED / "eval" / "docs-multiformat" / "test_mskanji.csv"


def test_markdown_passes_through_unchanged_apart_from_cleaning() -> None:
    source = "# Title\n\nSome *text* with `code`.\n\n| a | b |\n| --- | --- |\n| 1 | 2 |\n"

    assert convert("a.md", source.encode()).markdown == source


def test_utf8_bom_is_stripped() -> None:
    conversion = convert("bom.md", "\ufeff# Café\n".encode())

    assert conversion.markdown == "# Café\n"
    assert conversion.title == "Café"


def test_utf16_text_with_a_bom_decodes() -> None:
    assert convert("wide.txt", "über alles\n".encode("utf-16")).markdown == "über alles\n"


def test_source_code_fence_is_longer_than_any_backtick_run_inside() -> None:
    code = 'doc = """\n`````\n"""\n'

    markdown = convert("tricky.py", code.encode()).markdown

    assert markdown.splitlines()[2] == "``````python"
    assert markdown.rstrip().endswith("\n``````")


def test_source_code_title_keeps_markdown_characters_of_the_filename_literal() -> None:
    conversion = convert("pkg/__init__.py", b"x = 1\n")

    assert conversion.title == "__init__.py"
    assert conversion.markdown.startswith("# `__init__.py`\n\n```python\nx = 1\n```")


def test_whitespace_only_source_code_is_empty() -> None:
    with pytest.raises(IngestRejectedError) as caught:
        convert("blank.py", b"\n   \n")

    assert caught.value.reason == "empty"


def test_csv_becomes_a_padded_escaped_markdown_table() -> None:
    data = b'name,note\r\nA,"x | y"\r\nB,"two\r\nlines"\r\nC\r\n'

    assert convert("t.csv", data).markdown == (
        "| name | note |\n| --- | --- |\n| A | x \\| y |\n| B | two<br>lines |\n| C |  |\n"
    )


def test_csv_delimiter_is_sniffed() -> None:
    markdown = convert("semi.csv", b"city;population\nLyon;522000\nNice;342000\n").markdown

    assert markdown.splitlines()[0] == "| city | population |"


def test_single_column_csv_falls_back_to_comma() -> None:
    assert convert("one.csv", b"word\nalpha\nbeta\n").markdown.splitlines()[2] == "| alpha |"


def test_tsv_uses_tabs() -> None:
    conversion = convert("data.tsv", b"a\tb, c\n1\t2, 3\n")

    assert conversion.engine == "csv"
    assert conversion.markdown.splitlines()[2] == "| 1 | 2, 3 |"


def test_csv_title_is_the_filename_stem() -> None:
    assert convert("reports/q3-sales.csv", b"# not a heading,x\n1,2\n").title == "q3-sales"


def test_shift_jis_csv_from_the_shared_corpus_decodes_correctly() -> None:
    if not MSKANJI.is_file():
        pytest.skip(f"shared corpus not present at {MSKANJI}")

    conversion = convert(MSKANJI.name, MSKANJI.read_bytes())

    assert conversion.markdown.splitlines() == [
        "| 名前 | 年齢 | 住所 |",
        "| --- | --- | --- |",
        "| 佐藤太郎 | 30 | 東京 |",
        "| 三木英子 | 25 | 大阪 |",
        "| 髙橋淳 | 35 | 名古屋 |",
    ]


def test_one_megabyte_of_markdown_converts_in_milliseconds() -> None:
    block = "## Section\n\nA paragraph with *emphasis* and `code`.\n\n```py\nx = 1\n```\n\n\n"
    data = ("# Big\n\n" + block * (1_000_000 // len(block))).encode()

    # CPU time of this process, not wall-clock: other work on a loaded machine must not fail it.
    # Linear cleaning takes tens of milliseconds; a quadratic pass would take minutes.
    started = time.process_time()
    conversion = convert("big.md", data)
    elapsed = time.process_time() - started

    assert conversion.title == "Big"
    assert elapsed < 5.0, f"took {elapsed:.3f}s of CPU"


@pytest.mark.parametrize(
    ("text", "encoding"),
    [
        ("Le café de la gare était fermé, la boulangerie à côté restait ouverte.\n", "cp1252"),
        ("Größere Übungen für Bären und Jäger, die Straße entlang.\n", "latin-1"),
        ("Привет, как дела? Это тест кодировки для русского текста.\n", "cp1251"),
        ("向量检索把文本编码成向量，再用近邻搜索找出语义上最相近的段落。\n", "gbk"),
    ],
)
def test_common_legacy_encodings_are_detected(text: str, encoding: str) -> None:
    assert convert("legacy.txt", (text * 3).encode(encoding)).markdown == text * 3
