"""Fenced code blocks: the cleaner, the title finder and the chunker read them with one parser."""

from __future__ import annotations

import pytest

from coffer_mcp.convert import clean_markdown, first_heading
from coffer_mcp.indexing.chunking import chunk_markdown
from coffer_mcp.store.markdown import closes_fence, fence_opening, split_fences


@pytest.mark.parametrize(
    ("line", "opening"),
    [
        ("```", "```"),
        ("   ````python {linenos=true}", "````"),
        ("~~~ a`b", "~~~"),
        ("``` a`b", None),  # a backtick fence's info string holds no backtick
        ("    ```", None),  # four spaces: indented code, not a fence
        ("\t```", None),
        ("``", None),
    ],
)
def test_a_fence_opens_on_three_backticks_or_tildes_indented_at_most_three_spaces(
    line: str, opening: str | None
) -> None:
    assert fence_opening(line) == opening


@pytest.mark.parametrize(
    ("line", "closes"),
    [
        ("```", True),
        ("   `````  ", True),
        ("\t```", True),
        ("``` \u00a0", True),
        ("``", False),
        ("~~~", False),
        ("    ```", False),
        ("``` x", False),
    ],
)
def test_a_fence_closes_on_a_run_of_its_character_at_least_as_long(line: str, closes: bool) -> None:
    assert closes_fence(line, "```") is closes


def test_split_fences_cuts_text_into_prose_and_code_that_join_back() -> None:
    text = "intro\n```py\n# code\n```\nmiddle\n~~~~\n~~~\n~~~~\nend"
    pieces = list(split_fences(text))
    assert pieces == [
        (False, "intro\n"),
        (True, "```py\n# code\n```\n"),
        (False, "middle\n"),
        (True, "~~~~\n~~~\n~~~~\n"),
        (False, "end"),
    ]
    assert "".join(piece for _, piece in pieces) == text


def test_cleaner_title_and_chunker_agree_where_a_tab_indented_closing_fence_ends_the_code() -> None:
    markdown = "```\n# comment\n\t```\n# Title\n\n\n\nText after.\n"
    assert first_heading(markdown) == "Title"
    assert clean_markdown(markdown) == "```\n# comment\n\t```\n# Title\n\nText after.\n"
    assert [chunk.heading_path for chunk in chunk_markdown(markdown)] == [(), ("Title",)]
