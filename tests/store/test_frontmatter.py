"""The frontmatter Coffer writes: byte for byte what PyYAML writes, and read back as it was given."""

from __future__ import annotations

import random

import pytest
import yaml

from coffer_mcp.store import parse_document, render_document

# Values PyYAML writes plain, single-quoted, double-quoted or as another type when unquoted.
TRICKY = [
    "Hello",
    "",
    " leading",
    "trailing ",
    "2026-12-07T23:12:15.602Z",
    "2026-12-07",
    "12:30",
    "1:2",
    "a: b",
    "ends with:",
    "# not a comment",
    "a #b",
    "true",
    "no",
    "Yes",
    "null",
    "~",
    "123",
    "0x1F",
    "1e3",
    ".inf",
    "...",
    "---",
    "- item",
    "? key",
    "/tmp/fmh/a.md",
    "C:/Users/report.pdf",
    "it's",
    'say "hi"',
    "naïve café",
    "两个字",
    "tab\there",
    "line\nbreak",
    "x" * 300,
    "01M99CEZQJ09P5RVRVVZD1YQKD",
    "66fea3acb9c4dea824aa2f039843d9cd1bc3990ba6942613155971bcc5cd9871",
]


def pyyaml(metadata: dict) -> str:
    # libyaml's emitter, as Coffer's (the pure-Python one writes an empty key as "? ''").
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    return yaml.dump(metadata, Dumper=dumper, sort_keys=False, allow_unicode=True, width=10_000)


def header(metadata: dict) -> str:
    return render_document(metadata, "body").removeprefix("---\n").removesuffix("---\n\nbody\n")


@pytest.mark.parametrize("value", TRICKY)
def test_a_value_is_written_as_pyyaml_writes_it_and_read_back_unchanged(value: str) -> None:
    metadata = {"title": value, "tags": [value, "plain"], "count": 3, "draft": False, "none": None}
    assert header(metadata) == pyyaml(metadata)
    assert parse_document(render_document(metadata, "body"))[0] == metadata


def test_random_words_are_written_as_pyyaml_writes_them() -> None:
    # Characters that decide between plain, quoted and another type: a shortcut that guesses wrong
    # on any of them writes a file that reads back differently (a date instead of a title).
    alphabet = "Aa0_/.+ -:#'\"1e9xTtrueNnoyY~:2é"
    draw = random.Random(7)
    for _ in range(20_000):
        value = "".join(draw.choice(alphabet) for _ in range(draw.randint(0, 9)))
        metadata = {"title": value, "tags": [value]}
        assert header(metadata) == pyyaml(metadata), value


def test_nested_and_odd_keys_are_written_as_pyyaml_writes_them() -> None:
    metadata = {"source": {"url": "https://example.invalid/a", "pages": [1, 2]}, "true": "key", "a: b": "x", "": []}
    assert header(metadata) == pyyaml(metadata)
