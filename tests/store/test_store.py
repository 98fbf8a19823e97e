"""The file store: names that cannot escape, atomic writes, frontmatter, the cross-process lock."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

import pytest

from coffer_mcp.errors import StoreError
from coffer_mcp.store import (
    StorePaths,
    atomic_write,
    atomic_write_all,
    body_line_offset,
    body_sha256,
    file_lock,
    parse_document,
    parse_frontmatter,
    render_document,
    sanitize_filename,
)


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("../../x.md", "x.md"),
        ("..\\..\\win.md", "win.md"),
        ("/etc/passwd", "passwd"),
        ("a\x00b\x1f.md", "ab.md"),
        ("invoice\u202efdp.exe", "invoicefdp.exe"),  # shown as "invoiceexe.pdf" with the mark
        ("\u2067note\u2069.md\u200f", "note.md"),
        ("  spaced .md ", "spaced .md"),
        ("...", ""),
        ("e\u0301.md", "\u00e9.md"),
        ("x" * 300 + ".pdf", "x" * 251 + ".pdf"),
    ],
)
def test_filenames_are_reduced_to_a_safe_final_component(raw: str, clean: str) -> None:
    assert sanitize_filename(raw) == clean


def test_an_atomic_write_replaces_the_whole_file_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "doc.md"
    atomic_write(target, b"old")
    atomic_write(target, b"new content")
    assert target.read_bytes() == b"new content"
    assert [p.name for p in tmp_path.iterdir()] == ["doc.md"]


def test_a_failed_atomic_write_keeps_the_old_content(tmp_path: Path) -> None:
    target = tmp_path / "doc.md"
    atomic_write(target, b"old")
    with pytest.raises(TypeError):
        atomic_write(target, "not bytes")  # type: ignore[arg-type]
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["doc.md"]


def test_files_written_together_all_land_and_leave_no_temp(tmp_path: Path) -> None:
    (tmp_path / "raw").mkdir()
    (tmp_path / "docs").mkdir()
    original, markdown = tmp_path / "raw" / "a.pdf", tmp_path / "docs" / "a.md"
    atomic_write(markdown, b"old")
    atomic_write_all([(original, b"%PDF new"), (markdown, b"new")])
    assert (original.read_bytes(), markdown.read_bytes()) == (b"%PDF new", b"new")
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a.md", "a.pdf", "docs", "raw"]


@pytest.mark.parametrize("failing", [0, 1])
def test_when_one_of_the_files_written_together_fails_none_lands(tmp_path: Path, failing: int) -> None:
    targets = [tmp_path / "a.pdf", tmp_path / "a.md"]
    for target in targets:
        atomic_write(target, b"old")
    files = [(target, b"new") for target in targets]
    files[failing] = (targets[failing], "not bytes")  # type: ignore[assignment]
    with pytest.raises(TypeError):
        atomic_write_all(files)
    assert [target.read_bytes() for target in targets] == [b"old", b"old"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.md", "a.pdf"]


def test_files_written_together_land_in_order(tmp_path: Path) -> None:
    first, second = tmp_path / "a.pdf", tmp_path / "a.md"
    atomic_write(first, b"old")
    (second / "in-the-way").mkdir(parents=True)  # a folder where the second file goes: its rename fails
    with pytest.raises(IsADirectoryError):
        atomic_write_all([(first, b"new"), (second, b"new")])
    assert first.read_bytes() == b"new"  # the files before the one that failed have landed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.md", "a.pdf"]  # no temp left


def test_frontmatter_round_trips_and_quotes_timestamps(tmp_path: Path) -> None:
    meta = {"id": "X", "title": "Ünïcode: a title", "created_at": "2026-01-02T03:04:05.000Z", "n": 3}
    text = render_document(meta, "\n\n# Body\n\ntext\n\n")
    parsed, body = parse_document(text)
    assert parsed == meta
    assert body == "# Body\n\ntext"


@pytest.mark.parametrize(
    ("text", "body"),
    [
        ("---\ntitle: Plan\n---", ""),  # the body deleted in an editor that adds no final newline
        ("---\ntitle: Plan\n---\r\n\nbody\r\n", "body"),
        ("---\r\ntitle: Plan\r\n---\r", ""),
        ("---\ntitle: Plan\n...\nbody\n\n---\n\nafter a rule", "body\n\n---\n\nafter a rule"),
        ("---\ntitle: Plan\n--- \nbody", "body"),
    ],
    ids=["closed-at-the-end", "crlf", "crlf-closed-at-the-end", "dots-then-a-rule", "trailing-space"],
)
def test_the_frontmatter_ends_at_its_first_closing_line_wherever_the_file_ends(text: str, body: str) -> None:
    assert parse_document(text) == ({"title": "Plan"}, body)
    assert body_line_offset(text) == (text.count("\n") if not body else text[: text.index(body)].count("\n"))


@pytest.mark.parametrize(
    "text",
    ["# No frontmatter\n\nbody", "---\n: : bad yaml [\n---\nbody", "---\n- a list\n---\nbody", "---\nunclosed"],
)
def test_damaged_frontmatter_yields_no_metadata_but_keeps_the_body(text: str) -> None:
    meta, body = parse_document(text)
    assert meta is None
    assert body


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            "---\nid: X\ntitle: [Plan: draft\ntags:\n- a\n---\n\nbody",
            "(while parsing a flow sequence at line 3, column 8)",
        ),
        ('\ufeff---\r\nid: X\r\ntitle: "Plan\r\n---\r\nbody', "while scanning a quoted scalar at line 3, column 8"),
        ("---\nid: X\n title: Plan\n---\nbody", "line 3, column 7: mapping values are not allowed"),
        ("---\n- a list\n---\nbody", "a YAML list, not 'key: value' lines"),
        ("---\nid: X\n\nbody", "no '---' line closes the frontmatter"),
        ("---\na: &x [1]\nb: *x\n---\nbody", "anchors or aliases"),
    ],
    ids=["unclosed-bracket", "unclosed-quote-crlf-bom", "bad-indent", "a-list", "never-closed", "alias"],
)
def test_a_frontmatter_that_does_not_parse_says_what_is_wrong_and_where_in_the_file(text: str, problem: str) -> None:
    parsed = parse_frontmatter(text)
    assert parsed.frontmatter is None
    assert parsed.body.endswith("body")
    assert parsed.problem is not None
    assert problem in parsed.problem


@pytest.mark.parametrize(
    ("text", "salvaged"),
    [
        (
            "---\nid: X\ntitle: [Plan: draft\ntags:\n- a\n- b\ncreated_at: '2026-01-02'\n---\nbody",
            {"id": "X", "tags": ["a", "b"], "created_at": "2026-01-02"},
        ),
        ("---\nid: X\ntags: [a, b\nsource:\n  path: /x.docx\n---\nbody", {"id": "X", "source": {"path": "/x.docx"}}),
        ("---\nid: X\n title: Plan\n---\nbody", {}),  # an indented line belongs to the entry above it
    ],
    ids=["typo-in-title", "typo-in-tags", "bad-indent"],
)
def test_a_frontmatter_that_does_not_parse_keeps_what_its_other_entries_say(text: str, salvaged: dict) -> None:
    parsed = parse_frontmatter(text)
    assert (parsed.frontmatter, parsed.body) == (None, "body")
    assert parsed.problem is not None
    assert parsed.salvaged == salvaged


@pytest.mark.parametrize("text", ["# No frontmatter\n\nbody", "---\n---\nbody", "---\n# a comment\n---\nbody"])
def test_a_file_without_frontmatter_or_with_an_empty_one_has_no_problem(text: str) -> None:
    assert parse_frontmatter(text) == (None, "body" if text.startswith("---") else text, None, None)


def test_the_content_hash_ignores_surrounding_whitespace() -> None:
    assert body_sha256("# A\n\nb") == body_sha256("\n# A\n\nb\n\n")
    assert body_sha256("# A\n\nb") != body_sha256("# A\n\nc")


def _hold_lock(path: str, ready, release) -> None:
    with file_lock(Path(path)):
        ready.set()
        release.wait(10)


def test_the_lock_excludes_another_process_and_times_out_with_busy(tmp_path: Path) -> None:
    lock = tmp_path / "locks" / "kb.lock"
    ctx = multiprocessing.get_context("spawn")
    ready, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold_lock, args=(str(lock), ready, release))
    holder.start()
    try:
        assert ready.wait(30)
        with pytest.raises(StoreError) as caught, file_lock(lock, timeout=0.2):
            pass
        assert caught.value.code == "busy"
    finally:
        release.set()
        holder.join(30)
    started = time.monotonic()
    with file_lock(lock, timeout=5):
        assert time.monotonic() - started < 5


def test_a_lock_file_deleted_while_waiting_is_not_trusted(tmp_path: Path) -> None:
    lock = tmp_path / "kb.lock"
    with file_lock(lock):
        lock.unlink()
    with file_lock(lock, timeout=1):
        assert lock.exists()


def test_a_store_id_is_recorded_once_and_a_damaged_one_is_refused(tmp_path: Path) -> None:
    paths = StorePaths(tmp_path / "home")
    assert paths.recorded_store_id() is None
    assert not paths.home.exists()  # reading makes nothing
    first, second = paths.new_store_id(), paths.new_store_id()
    assert paths.record_store_id(first)
    assert not StorePaths(paths.home).record_store_id(second)  # the first one stays
    assert StorePaths(paths.home).recorded_store_id() == first
    assert [p.name for p in paths.home.iterdir()] == ["store-id"]  # nothing left aside
    paths.store_id_file.write_text("not an id\n", encoding="ascii")
    with pytest.raises(StoreError) as caught:
        paths.recorded_store_id()
    assert "store_identity" in caught.value.hint
