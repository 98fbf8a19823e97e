"""clean_markdown normalizes text without touching code."""

from __future__ import annotations

import unicodedata

import pytest

from coffer_mcp.convert import clean_markdown


def test_crlf_and_lone_cr_become_lf() -> None:
    assert clean_markdown("a\r\nb\rc\r\n") == "a\nb\nc\n"


@pytest.mark.parametrize("control", list("\x00\x01\x0b\x0c\x1b\x7f\x85\x9f"))
def test_control_characters_are_removed(control: str) -> None:
    assert clean_markdown(f"ab{control}cd\n") == "abcd\n"


def test_tabs_and_newlines_are_kept() -> None:
    assert clean_markdown("a\tb\nc\n") == "a\tb\nc\n"


def test_lone_surrogates_are_removed_and_the_result_encodes() -> None:
    cleaned = clean_markdown("bad \ud800 and \udfff pair\n")

    assert cleaned == "bad  and  pair\n"
    cleaned.encode("utf-8")


def test_text_is_nfc_normalized() -> None:
    cleaned = clean_markdown("Cafe\u0301\n")

    assert cleaned == "Café\n"
    assert unicodedata.is_normalized("NFC", cleaned)


def test_trailing_whitespace_and_outer_blank_lines_go() -> None:
    assert clean_markdown("\n \n  # Title   \n\ntext\t \n\n\n") == "  # Title\n\ntext\n"


def test_runs_of_blank_lines_collapse_to_one_outside_code() -> None:
    text = "a\n\n\n\nb\n\n```\nx\n\n\n\ny\n```\n\n\n\nc\n"

    assert clean_markdown(text) == "a\n\nb\n\n```\nx\n\n\n\ny\n```\n\nc\n"


def test_html_comments_are_removed_even_across_lines() -> None:
    text = "keep <!-- gone --> this\n<!--\nmulti\nline\n-->\nend\n"

    assert clean_markdown(text) == "keep this\n\nend\n"


def test_html_comments_inside_code_survive() -> None:
    text = "```html\n<!-- kept -->\n```\n\nUse `<!-- x -->` for comments.\n"

    assert clean_markdown(text) == text


def test_script_and_style_blocks_and_empty_links_are_dropped() -> None:
    text = "a <script type='x'>alert(1)</script>b\n<STYLE>p{}</STYLE>\n[](#top) ![](x.png) [real](y)\n"

    assert clean_markdown(text) == "a b\n\n[real](y)\n"


def test_nothing_but_noise_cleans_to_the_empty_string() -> None:
    assert clean_markdown(" \x00\r\n\t\n<!-- x -->\n") == ""


def test_clean_markdown_is_idempotent() -> None:
    once = clean_markdown("x\r\n\r\n\r\n<!-- c -->\ny  \n```\n a  \n```\n")

    assert clean_markdown(once) == once


def test_an_unclosed_fence_protects_the_rest_of_the_document() -> None:
    text = "intro\n\n```\n<!-- kept -->\n\n\n\n"

    assert clean_markdown(text) == "intro\n\n```\n<!-- kept -->\n"
