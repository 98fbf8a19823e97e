"""derive_title: the first H1 outside code, else a safe filename stem."""

from __future__ import annotations

import pytest

from coffer_mcp.convert import derive_title, first_heading


@pytest.mark.parametrize(
    ("markdown", "title"),
    [
        ("# Plain\n", "Plain"),
        ("intro\n\n# First\n\n# Second\n", "First"),
        ("   # Indented three\n", "Indented three"),
        ("# Closed #####\n", "Closed"),
        ("# C# in depth\n", "C# in depth"),
        ("# **Bold** _it_ *em* ~~old~~ [ln](http://x) ![alt](i.png)\n", "Bold it em old ln alt"),
        ("# `__init__.py` and snake_case\n", "__init__.py and snake_case"),
        ("# Escaped \\*stars\\*\n", "Escaped *stars*"),
        ("#\n# \n# Real\n", "Real"),
        ("## Only H2\n", "doc"),
        ("#NoSpace\n", "doc"),
        ("    # indented code\n", "doc"),
        ("```\n# in code\n```\n", "doc"),
        ("~~~~\n# in tildes\n~~~\n~~~~\n# After\n", "After"),
    ],
)
def test_title_is_the_first_h1_outside_code(markdown: str, title: str) -> None:
    assert derive_title(markdown, "doc.md") == title


def test_title_is_capped_at_200_characters() -> None:
    assert derive_title("# " + "word " * 100 + "\n", "doc.md") == ("word " * 40).strip()


@pytest.mark.parametrize(
    ("filename", "title"),
    [
        ("report.final.pdf", "report.final"),
        ("../../etc/passwd.md", "passwd"),
        ("C:\\Users\\me\\notes.txt", "notes"),
        ("evil\x00\x1b[31m.md", "evil[31m"),
        (".bashrc", ".bashrc"),
        ("", "Untitled"),
        ("/", "Untitled"),
        ("...", "Untitled"),
        ("x" * 300 + ".md", "x" * 200),
    ],
)
def test_fallback_title_is_a_safe_filename_stem(filename: str, title: str) -> None:
    assert derive_title("no heading here\n", filename) == title


def test_first_heading_is_none_without_an_h1() -> None:
    assert first_heading("## two\n\ntext\n") is None
    assert first_heading("# one\n") == "one"
