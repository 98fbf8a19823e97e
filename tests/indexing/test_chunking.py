"""Behaviour of ``coffer_mcp.indexing.chunking.chunk_markdown`` on real Markdown."""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coffer_mcp.indexing.chunking import chunk_markdown
from coffer_mcp.models import Chunk


def _sentence(n: int, words: int = 12) -> str:
    return " ".join(f"s{n}w{i}" for i in range(words)) + "."


def _paragraph(n: int, sentences: int = 4) -> str:
    return " ".join(_sentence(n * 100 + i) for i in range(sentences))


def _fence(lines: int, info: str = "python", marker: str = "```") -> str:
    body = "\n".join(f"value_{i} = compute({i})  # step {i}" for i in range(lines))
    return f"{marker}{info}\n{body}\n{marker}"


def _table(rows: int) -> str:
    body = "\n".join(f"| row {i} | value {i} | note {i} |" for i in range(rows))
    return f"| name | value | note |\n|------|-------|------|\n{body}"


# --- sections and heading paths ------------------------------------------------------------


def test_heading_path_nests_and_pops_back_to_the_enclosing_level() -> None:
    doc = "# Guide\n\nintro\n\n## Install\n\nsteps\n\n### Linux\n\napt\n\n## Usage\n\nrun it\n"
    chunks = chunk_markdown(doc)
    assert [(c.heading_path, c.text) for c in chunks] == [
        (("Guide",), "intro"),
        (("Guide", "Install"), "steps"),
        (("Guide", "Install", "Linux"), "apt"),
        (("Guide", "Usage"), "run it"),
    ]


def test_a_new_top_level_heading_resets_the_whole_path() -> None:
    doc = "# A\n\n### Deep\n\nx\n\n# B\n\ny\n"
    assert [c.heading_path for c in chunk_markdown(doc)] == [("A", "Deep"), ("B",)]


def test_heading_titles_lose_their_markers_closing_hashes_and_whitespace() -> None:
    doc = "#   Spaced out   \n\na\n\n## Closed ##  \n\nb\n\n### C#\n\nc\n\n####\tTabbed\n\nd\n"
    paths = [c.heading_path[-1] for c in chunk_markdown(doc)]
    assert paths == ["Spaced out", "Closed", "C#", "Tabbed"]


def test_hash_without_a_space_is_paragraph_text_not_a_heading() -> None:
    chunks = chunk_markdown("#hashtag is text\n\n####### seven is text too\n")
    assert [c.heading_path for c in chunks] == [()]
    assert "#hashtag" in chunks[0].text
    assert "####### seven" in chunks[0].text


def test_heading_lines_are_not_part_of_any_chunk_text() -> None:
    chunks = chunk_markdown("# Title\n\nBody text.\n\n## Sub\n\nMore text.\n")
    assert all("#" not in c.text and "Title" not in c.text for c in chunks)


def test_text_before_the_first_heading_has_an_empty_heading_path() -> None:
    chunks = chunk_markdown("Preamble.\n\n# Later\n\nBody.\n")
    assert chunks[0] == Chunk(position=0, text="Preamble.", heading_path=())


def test_a_chunk_never_spans_two_sections() -> None:
    doc = "# One\n\nshort one\n\n# Two\n\nshort two\n"
    chunks = chunk_markdown(doc, chunk_size=512)
    assert [c.text for c in chunks] == ["short one", "short two"]


def test_a_section_without_body_blocks_yields_no_chunk() -> None:
    chunks = chunk_markdown("# Empty\n\n## Also empty\n\n## Full\n\ntext\n")
    assert [c.heading_path for c in chunks] == [("Empty", "Full")]


def test_a_document_of_only_headings_becomes_one_chunk_of_its_stripped_text() -> None:
    doc = "\n# Title\n## Subtitle\n\n"
    assert chunk_markdown(doc) == [Chunk(position=0, text="# Title\n## Subtitle")]


@pytest.mark.parametrize("doc", ["", "   ", "\n\n\t\n", "\r\n\r\n"])
def test_empty_or_whitespace_input_returns_no_chunks(doc: str) -> None:
    assert chunk_markdown(doc) == []


# --- packing and overlap -------------------------------------------------------------------


def test_small_blocks_are_packed_together_into_one_chunk() -> None:
    doc = "First paragraph.\n\n- item one\n- item two\n\nLast paragraph."
    chunks = chunk_markdown(doc)
    assert [c.text for c in chunks] == [doc]


def test_prose_chunks_never_exceed_chunk_size() -> None:
    doc = "\n\n".join(_paragraph(n, sentences=2) for n in range(30))
    chunks = chunk_markdown(doc, chunk_size=300, chunk_overlap=40)
    assert len(chunks) > 5
    assert all(len(c.text) <= 300 for c in chunks)


def test_a_paragraph_that_does_not_fit_moves_whole_to_the_next_chunk() -> None:
    first, second = "a" * 40 + " " + "b " * 100, "c " * 120
    chunks = chunk_markdown(f"{first.strip()}\n\n{second.strip()}", chunk_size=300, chunk_overlap=0)
    assert [c.text for c in chunks] == [first.strip(), second.strip()]


def test_a_list_group_is_packed_as_one_block_with_its_continuation_lines() -> None:
    paragraph = " ".join(["word"] * 50)
    items = "- first item\n  continued here\n\n  second paragraph of it\n- second item\n1) third"
    doc = f"{paragraph}\n\n{items}\n\n{paragraph}"
    chunks = chunk_markdown(doc, chunk_size=300, chunk_overlap=0)
    assert [c.text for c in chunks] == [paragraph, items, paragraph]


def test_overlap_repeats_the_previous_tail_from_a_word_boundary() -> None:
    first = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike."
    second = "november oscar papa quebec romeo sierra tango uniform victor whiskey xray."
    doc = f"{first} {first} {first}\n\n{second} {second}"
    chunks = chunk_markdown(doc, chunk_size=256, chunk_overlap=30)
    assert len(chunks) == 2
    tail = chunks[1].text[: chunks[1].text.index("november")].rstrip()
    assert 0 < len(tail) <= 30
    assert chunks[0].text.endswith(tail)
    assert chunks[0].text[-len(tail) - 1].isspace()  # a whole word, not a cut one
    assert chunks[1].text == f"{tail}\n{second} {second}"


def test_overlap_of_chinese_text_without_spaces_is_taken_as_is() -> None:
    first, second = "本地优先的知识库把文件当作事实。" * 12, "索引只是文件的副本。" * 10
    chunks = chunk_markdown(f"{first}\n\n{second}", chunk_size=256, chunk_overlap=20)
    assert [c.text for c in chunks] == [first, f"{first[-20:]}\n{second}"]


def test_zero_overlap_disables_overlap() -> None:
    doc = "\n\n".join(_paragraph(n, sentences=2) for n in range(6))
    chunks = chunk_markdown(doc, chunk_size=256, chunk_overlap=0)
    assert "\n\n".join(c.text for c in chunks) == doc


def test_overlap_is_never_carried_across_sections() -> None:
    doc = f"# A\n\n{_paragraph(1)}\n\n# B\n\n{_paragraph(2)}"
    chunks = chunk_markdown(doc, chunk_size=512, chunk_overlap=60)
    assert [c.text for c in chunks] == [_paragraph(1), _paragraph(2)]


@pytest.mark.parametrize("block", [_fence(20), _table(12)])
def test_overlap_never_flows_into_or_out_of_a_fence_or_table(block: str) -> None:
    before, after = _paragraph(1, sentences=3), _paragraph(2, sentences=3)
    chunks = chunk_markdown(f"{before}\n\n{block}\n\n{after}", chunk_size=512, chunk_overlap=60)
    assert [c.text for c in chunks] == [before, block, after]


# --- fences and tables ---------------------------------------------------------------------


@pytest.mark.parametrize("block", [_fence(25), _table(30)])
def test_a_fence_or_table_up_to_four_chunk_sizes_is_kept_whole(block: str) -> None:
    assert 512 < len(block) <= 4 * 512
    chunks = chunk_markdown(f"Intro.\n\n{block}\n\nOutro.", chunk_size=512)
    assert [c.text for c in chunks] == ["Intro.", block, "Outro."]


def test_a_small_fence_is_packed_with_the_prose_around_it() -> None:
    doc = "Run this:\n\n~~~sh\nmake test\n~~~\n\nThen read the output."
    assert [c.text for c in chunk_markdown(doc)] == [doc]


def test_headings_inside_a_fence_are_code_not_sections() -> None:
    doc = "# Real\n\n````md\n# not a heading\n```\nstill inside\n````\n\n## Next\n\nx\n"
    chunks = chunk_markdown(doc)
    assert chunks[0].heading_path == ("Real",)
    assert chunks[0].text == "````md\n# not a heading\n```\nstill inside\n````"
    assert chunks[1].heading_path == ("Real", "Next")


def test_a_giant_fence_is_split_into_pieces_that_each_reopen_and_close_it() -> None:
    block = _fence(200, info="python {linenos=true}")
    chunks = chunk_markdown(f"# Code\n\n{block}", chunk_size=256, chunk_overlap=0)
    assert len(chunks) > 1
    for chunk in chunks:
        lines = chunk.text.split("\n")
        assert lines[0] == "```python {linenos=true}"
        assert lines[-1] == "```"
        assert len("\n".join(lines[1:-1])) <= 2 * 256
        assert chunk.heading_path == ("Code",)
    bodies = [line for c in chunks for line in c.text.split("\n")[1:-1]]
    assert bodies == block.split("\n")[1:-1]


def test_a_giant_fence_prefers_its_blank_lines_as_cut_points() -> None:
    functions = [f"def f{i}():\n    x = {i}\n    return x * {i}\n" for i in range(60)]
    doc = "```python\n" + "\n".join(functions) + "```"
    chunks = chunk_markdown(doc, chunk_size=128, chunk_overlap=0)
    for chunk in chunks:
        body = chunk.text.removeprefix("```python\n").removesuffix("\n```")
        assert body.startswith("def f")
        assert body.split("\n")[-1].startswith("    return")


def test_a_giant_unclosed_fence_gets_closing_markers_on_every_piece() -> None:
    chunks = chunk_markdown("~~~~text\n" + "line of text\n" * 200, chunk_size=128, chunk_overlap=0)
    assert len(chunks) > 1
    assert all(c.text.startswith("~~~~text\n") and c.text.endswith("\n~~~~") for c in chunks)


def test_a_giant_single_line_in_a_fence_is_hard_split() -> None:
    line = "x" * 5000
    chunks = chunk_markdown(f"```\n{line}\n```", chunk_size=256, chunk_overlap=64)
    assert all(len(c.text) <= 2 * 256 + len("```\n\n```") for c in chunks)
    assert "".join(c.text.strip("`\n") for c in chunks) == line


def test_a_giant_table_is_split_into_pieces_that_repeat_the_header_rows() -> None:
    block = _table(120)
    chunks = chunk_markdown(block, chunk_size=256, chunk_overlap=64)
    header = "| name | value | note |\n|------|-------|------|\n"
    assert len(chunks) > 1
    assert all(c.text.startswith(header) for c in chunks)
    assert all(len(c.text) <= 2 * 256 + len(header) for c in chunks)
    rows = [row for c in chunks for row in c.text.split("\n")[2:]]
    assert rows == block.split("\n")[2:]


def test_a_table_without_leading_pipes_is_still_kept_whole() -> None:
    table = "name | value\n---- | -----\n" + "\n".join(f"r{i} | v{i}" for i in range(80))
    chunks = chunk_markdown(f"Before.\n\n{table}\n\nAfter.", chunk_size=256, chunk_overlap=64)
    assert table in [c.text for c in chunks]


# --- splitting oversized prose -------------------------------------------------------------


def test_an_oversized_paragraph_breaks_at_sentence_ends() -> None:
    doc = _paragraph(1, sentences=12)
    chunks = chunk_markdown(doc, chunk_size=256, chunk_overlap=0)
    assert len(chunks) > 1
    assert all(c.text.endswith(".") and len(c.text) <= 256 for c in chunks)
    assert " ".join(c.text for c in chunks) == doc


def test_an_oversized_chinese_paragraph_breaks_after_full_stops() -> None:
    sentences = [f"这是第{i}个句子，它讲述了本地优先的知识库如何切分长文本。" for i in range(30)]
    chunks = chunk_markdown("".join(sentences), chunk_size=128, chunk_overlap=0)
    assert len(chunks) > 1
    assert all(c.text.endswith("。") and len(c.text) <= 128 for c in chunks)
    assert "".join(c.text for c in chunks) == "".join(sentences)


def test_an_oversized_list_group_breaks_between_items() -> None:
    items = [f"- item {i} has a few words in it" for i in range(40)]
    chunks = chunk_markdown("\n".join(items), chunk_size=128, chunk_overlap=0)
    assert all(len(c.text) <= 128 for c in chunks)
    assert [line for c in chunks for line in c.text.split("\n")] == items


def test_a_sentence_longer_than_chunk_size_is_hard_split_at_whitespace() -> None:
    words = [f"token{i}" for i in range(300)]
    chunks = chunk_markdown(" ".join(words), chunk_size=128, chunk_overlap=0)
    assert all(64 <= len(c.text) <= 128 for c in chunks[:-1])
    assert [w for c in chunks for w in c.text.split()] == words


def test_a_giant_word_is_hard_split_without_losing_characters() -> None:
    word = "".join(chr(ord("a") + i % 26) for i in range(2000))
    chunks = chunk_markdown(word, chunk_size=128, chunk_overlap=16)
    assert all(len(c.text) <= 128 for c in chunks)
    assert "".join(c.text for c in chunks) == word  # no word boundary, so no overlap


def test_hard_split_pieces_leave_room_for_the_overlap() -> None:
    words = [f"w{i}" for i in range(400)]
    chunks = chunk_markdown(" ".join(words), chunk_size=128, chunk_overlap=32)
    assert all(len(c.text) <= 128 for c in chunks)
    # Each chunk opens with a word from the end of the one before it.
    for prev, nxt in itertools.pairwise(chunks):
        assert nxt.text.split()[0] in prev.text.split()[-8:]


# --- positions, input hygiene and parameters -----------------------------------------------


def test_positions_run_from_zero_without_gaps() -> None:
    doc = "\n\n".join(f"# H{n}\n\n{_paragraph(n, sentences=3)}" for n in range(10))
    chunks = chunk_markdown(doc, chunk_size=128, chunk_overlap=20)
    assert [c.position for c in chunks] == list(range(len(chunks)))


def test_crlf_input_is_chunked_like_lf_input() -> None:
    doc = "# Guide\n\nSome text.\n\n```\ncode\n```\n\n| a |\n|---|\n| 1 |\n"
    assert chunk_markdown(doc.replace("\n", "\r\n")) == chunk_markdown(doc)
    assert all("\r" not in c.text for c in chunk_markdown(doc.replace("\n", "\r\n")))


def test_an_unclosed_fence_runs_to_the_end_of_the_document() -> None:
    doc = "# Top\n\nIntro.\n\n```js\nlet a = 1;\n# not a heading\n\nlet b = 2;\n"
    chunks = chunk_markdown(doc)
    assert [c.heading_path for c in chunks] == [("Top",)]
    assert chunks[0].text == "Intro.\n\n```js\nlet a = 1;\n# not a heading\n\nlet b = 2;"


def test_tabs_emoji_and_long_lines_survive_chunking() -> None:
    line = "\t".join(["🚀 emoji", "tab\tseparated", "ümlaut"] * 400)
    chunks = chunk_markdown(f"# Ünïcode 🎉\n\n{line}", chunk_size=200, chunk_overlap=0)
    assert chunks[0].heading_path == ("Ünïcode 🎉",)
    assert all(len(c.text) <= 200 for c in chunks)
    assert [w for c in chunks for w in c.text.split()] == line.split()


def test_ten_thousand_headings_each_get_their_own_chunk() -> None:
    doc = "\n".join(f"## Section {i}\n\nbody {i}\n" for i in range(10_000))
    chunks = chunk_markdown("# Root\n\n" + doc)
    assert len(chunks) == 10_000
    assert chunks[-1] == Chunk(9_999, "body 9999", ("Root", "Section 9999"))


def test_a_megabyte_document_keeps_every_word() -> None:
    section = f"## Part\n\n{_paragraph(1, 20)}\n\n{_fence(30)}\n\n{_table(10)}\n\n- a\n- b\n"
    doc = section * (1_000_000 // len(section))
    chunks = chunk_markdown(doc)
    assert set(" ".join(c.text for c in chunks).split()) == set(doc.split()) - {"##", "Part"}


@pytest.mark.parametrize(("size", "overlap"), [(63, 0), (0, 0), (-1, 0), (512, -1), (512, 256), (100, 60)])
def test_out_of_range_parameters_raise_value_error(size: int, overlap: int) -> None:
    with pytest.raises(ValueError, match="chunk_"):
        chunk_markdown("text", chunk_size=size, chunk_overlap=overlap)


def test_the_smallest_valid_parameters_are_accepted() -> None:
    assert chunk_markdown("text", chunk_size=64, chunk_overlap=31)[0].text == "text"


# --- property: random Markdown-ish documents -----------------------------------------------

_KINDS = ("heading", "paragraph", "list", "fence", "table", "giant")
_block_specs = st.tuples(st.sampled_from(_KINDS), st.integers(1, 6), st.lists(st.integers(0, 14), max_size=12))
_FENCE_WORD = re.compile(r"^(?:`{3,}|~{3,})")


class _Words:
    """Hands out unique tokens so a lost or invented word is detectable."""

    def __init__(self) -> None:
        self.count = 0

    def take(self, n: int) -> str:
        self.count += n
        return " ".join(f"w{i}" for i in range(self.count - n, self.count))


def _render(kind: str, level: int, sizes: list[int], words: _Words) -> str:
    if kind == "heading":
        return "#" * level + " " + words.take(max(sizes, default=1) % 4 + 1)
    if kind == "paragraph":
        ends = [". ", "。", "! ", "\n", "? ", "；"]
        return "".join(words.take(n + 1) + ends[n % len(ends)] for n in sizes) or words.take(1)
    if kind == "list":
        items = [f"{'-' if n % 2 else '1.'} {words.take(n + 1)}" for n in sizes]
        # Every third item gets an indented continuation line.
        lines = [it + ("\n  " + words.take(2) if i % 3 == 2 else "") for i, it in enumerate(items)]
        return "\n".join(lines) or "- x"
    if kind == "fence":
        lines = ["" if n == 0 else ("# " if n == 7 else "") + words.take(n) for n in sizes * level]
        return "```python\n" + "\n".join(lines) + "\n```"
    if kind == "table":
        rows = [f"| {words.take(1)} | {words.take(n % 5 + 1)} |" for n in sizes * level]
        return "| h | v |\n|---|---|\n" + "\n".join(rows)
    return words.take(sum(sizes) * level * 3 + 1)  # one giant sentence, no punctuation


def _tokens(text: str) -> list[str]:
    return re.findall(r"w\d+", text)


@settings(max_examples=300, deadline=None)
@given(
    specs=st.lists(_block_specs, max_size=14),
    size=st.sampled_from([64, 100, 256, 512]),
    overlap_share=st.floats(0, 0.49),
    crlf=st.booleans(),
)
def test_random_documents_chunk_within_bounds_and_lose_no_word(
    specs: list[tuple[str, int, list[int]]], size: int, overlap_share: float, crlf: bool
) -> None:
    overlap = int(size * overlap_share)
    words = _Words()
    blocks = [(kind, _render(kind, level, sizes, words)) for kind, level, sizes in specs]
    doc = "\n\n".join(text for _, text in blocks)
    chunks = chunk_markdown(doc.replace("\n", "\r\n") if crlf else doc, size, overlap)

    if all(kind == "heading" for kind, _ in blocks):
        assert chunks == ([Chunk(0, doc.strip())] if doc.strip() else [])
        return
    assert [c.position for c in chunks] == list(range(len(chunks)))
    for chunk in chunks:
        assert chunk.text.strip()
        assert chunk.text == chunk.text.rstrip()
        assert not chunk.text.startswith("\n")
        if len(chunk.text) > size:  # only a lone fence or table (or a piece of one) may be
            assert _FENCE_WORD.match(chunk.text) or chunk.text.startswith("|")
            assert len(chunk.text) <= 4 * size
    expected = [t for kind, text in blocks if kind != "heading" for t in _tokens(text)]
    seen = dict.fromkeys(t for c in chunks for t in _tokens(c.text))
    assert list(seen) == expected  # every word, once, in order (overlap only repeats)


# --- where chunks come from ----------------------------------------------------------------


def test_each_chunk_says_which_body_lines_it_comes_from_its_overlap_included() -> None:
    prose = "First paragraph, alpha words here.\n\n\nSecond paragraph,\nover two lines."
    doc = f"# Guide\n\n{prose}\n\n## Code\n\n{_fence(3)}"
    chunks = chunk_markdown(doc, chunk_size=64, chunk_overlap=16)
    lines = doc.split("\n")
    assert [(c.text.split("\n")[0][:20], c.lines) for c in chunks] == [
        ("First paragraph, alp", (3, 3)),
        ("words here.", (3, 7)),  # opens with the first paragraph's last words
        ("```python", (11, 15)),
    ]
    assert lines[10:15][0] == "```python"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["para", "long", "fence", "table", "heading", "blank"]), min_size=1, max_size=25))
def test_every_line_of_a_chunk_is_found_within_the_lines_it_names(kinds: list[str]) -> None:
    pieces = {
        "para": _paragraph(1, 1),
        "long": _paragraph(2, 9),
        "fence": _fence(40),
        "table": _table(60),
        "heading": "## Part",
        "blank": "",
    }
    doc = "\n\n".join(pieces[kind] for kind in kinds)
    lines = doc.split("\n")
    for chunk in chunk_markdown(doc, chunk_size=128, chunk_overlap=32):
        assert chunk.lines is not None
        first, last = chunk.lines
        region = " ".join(" ".join(lines[first - 1 : last]).split())
        for line in chunk.text.split("\n"):
            text = " ".join(line.split())
            if text and not text.startswith(("| name", "|---", "```")):  # a piece's repeated header and fence
                assert text in region, (chunk.lines, text)
