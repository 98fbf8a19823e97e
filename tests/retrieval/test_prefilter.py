"""grep's file map: a grep that reads only the files that can match finds what reading every file finds.

Every comparison here runs the same grep twice on the same files: once reading every file, once
reading only those ``GrepPrefilter.narrow`` names. The map is kept exact by the kernel's change
feed, so files edited by hand right after mapping (in place, saved by rename, with their old
mtime put back) are compared at once, with no wait.
"""

from __future__ import annotations

import codecs
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coffer_mcp import Coffer, load_settings
from coffer_mcp.errors import InvalidPatternError
from coffer_mcp.retrieval.grep import GrepOutcome, find_rg, grep_dirs
from coffer_mcp.retrieval.inotify import Inotify
from coffer_mcp.retrieval.prefilter import GrepPrefilter
from tests.reliability.hostile import PROPERTY
from tests.retrieval.test_literals import ALPHABET, PATTERNS, REPEATS, _escaped, _repeated, echoes


def _has_feed() -> bool:
    feed = Inotify.open()
    if feed is None:
        return False
    feed.close()
    return True


pytestmark = pytest.mark.skipif(not _has_feed(), reason="grep's file map needs Linux inotify")
ENGINES = ["python", pytest.param("ripgrep", marks=pytest.mark.skipif(find_rg() is None, reason="no ripgrep"))]
FILLER = "Plain prose about nothing in particular, line after line.\n"
MAP_WAIT = 60.0  # seconds: generous, the machine is shared


@pytest.fixture
def prefilter() -> Iterator[GrepPrefilter]:
    service = GrepPrefilter()
    yield service
    service.close()


def corpus(folder: Path, files: dict[str, str | bytes], fillers: int = 40) -> Path:
    """``files`` beside ``fillers`` files of plain prose (so that a rare literal narrows the folder)."""
    folder.mkdir(parents=True, exist_ok=True)
    for number in range(fillers):
        (folder / f"filler-{number:03d}.md").write_text(FILLER * 3, encoding="utf-8")
    for name, content in files.items():
        data = content if isinstance(content, bytes) else content.encode("utf-8")
        (folder / name).write_bytes(data)
    return folder


def mapped(prefilter: GrepPrefilter, *folders: Path) -> None:
    for _ in range(2):  # a folder is mapped on its second grep
        prefilter.narrow(list(folders), "anything")
    assert prefilter.wait_until_mapped(folders, MAP_WAIT)


def hits(outcome: GrepOutcome) -> tuple[list[tuple[str, int, str]], bool]:
    return [(m.path.name, m.line_number, m.line) for m in outcome.matches], outcome.truncated


def same_as_every_file(
    prefilter: GrepPrefilter,
    folders: list[Path],
    pattern: str,
    engine: str = "auto",
    max_matches: int = 50,
    **flags: bool,
) -> list[str] | None:
    """Grep both ways; the results must be equal. Returns the files the map narrowed to."""
    files = prefilter.narrow(folders, pattern, **flags)
    try:
        every = grep_dirs(folders, pattern, max_matches=max_matches, engine=engine, **flags)  # type: ignore[arg-type]
    except InvalidPatternError:
        with pytest.raises(InvalidPatternError):
            grep_dirs(folders, pattern, max_matches=max_matches, engine=engine, files=files, **flags)  # type: ignore[arg-type]
        return files
    narrowed = grep_dirs(folders, pattern, max_matches=max_matches, engine=engine, files=files, **flags)  # type: ignore[arg-type]
    assert hits(narrowed) == hits(every), f"{pattern!r} {flags} read {files}"
    return files


@pytest.mark.parametrize("engine", ENGINES)
def test_a_grep_reads_only_the_files_holding_the_patterns_literals_and_finds_the_same_lines(
    tmp_path: Path, prefilter: GrepPrefilter, engine: str
) -> None:
    docs = corpus(
        tmp_path / "docs",
        {"a.md": "The ZEBRA crossing.\n", "b.md": "zebra stripes\nno\n", "c.md": "---\ntags: [向量检索]\n---\nbody\n"},
    )
    mapped(prefilter, docs)
    zebras = [str(docs / "a.md"), str(docs / "b.md")]  # looked for folded: ZEBRA too, then grep tells
    assert same_as_every_file(prefilter, [docs], "zebra", engine, fixed_strings=True) == zebras
    assert same_as_every_file(prefilter, [docs], "zebra", engine, ignore_case=True, fixed_strings=True) == zebras
    assert same_as_every_file(prefilter, [docs], r"\bzeb\w*\s+str", engine) == [str(docs / "b.md")]
    assert same_as_every_file(prefilter, [docs], "向量", engine) == [str(docs / "c.md")]  # frontmatter is read too
    assert same_as_every_file(prefilter, [docs], "qzxjvkwpq", engine) == []
    every = sorted((str(path) for path in docs.glob("*.md")), key=os.fsencode)
    assert same_as_every_file(prefilter, [docs], "line", engine) == every  # in most files: all, in order
    assert same_as_every_file(prefilter, [docs], "l[i]ne", engine) == every  # "ne": in most files too
    assert same_as_every_file(prefilter, [docs], r"\w+\d", engine) is None  # no literal: one scan of the folder


@pytest.mark.parametrize("engine", ENGINES)
def test_a_regex_is_handed_only_the_files_with_one_line_holding_all_its_literals(
    tmp_path: Path, prefilter: GrepPrefilter, engine: str
) -> None:
    apart = {f"apart-{n}.md": "the cell\nthe mouse\n" for n in range(10)}  # both words, never on one line
    docs = corpus(tmp_path / "docs", {**apart, "one.md": "a\nthe cell mouse\n", "crlf.md": "cell\r\nmouse x\r\n"})
    mapped(prefilter, docs)
    assert same_as_every_file(prefilter, [docs], r"\bcell\w*\s+mouse\b", engine) == [str(docs / "one.md")]
    assert same_as_every_file(prefilter, [docs], r"(?i)mouse x|cell", engine) is None  # an alternation: no literal
    (docs / "apart-3.md").write_text("the cell  mouse\n", encoding="utf-8")  # an edit after mapping
    narrowed = same_as_every_file(prefilter, [docs], r"\bcell\w*\s+mouse\b", engine)
    assert narrowed == [str(docs / "apart-3.md"), str(docs / "one.md")]


def test_the_map_says_how_much_memory_it_holds(tmp_path: Path, prefilter: GrepPrefilter) -> None:
    docs = corpus(tmp_path / "docs", {}, fillers=200)
    size = sum(path.stat().st_size for path in docs.glob("*.md"))
    assert prefilter.held_bytes() == 0
    mapped(prefilter, docs)
    assert size < prefilter.held_bytes() < size + 500 * 200  # the texts, plus names and offsets


@pytest.mark.parametrize("engine", ENGINES)
def test_case_insensitive_literals_find_the_letters_the_engines_fold_to_ascii(
    tmp_path: Path, prefilter: GrepPrefilter, engine: str
) -> None:
    odd = {"k.md": "\u212aelvin\n", "s.md": "\u017ftar\n", "i.md": "\u0130stanbul \u0131ris\n"}
    docs = corpus(tmp_path / "docs", odd)
    mapped(prefilter, docs)
    for pattern in ("kelvin", "STAR", "istanbul", "IRIS", "(?i)iris"):
        same_as_every_file(prefilter, [docs], pattern, engine, ignore_case=True)
        same_as_every_file(prefilter, [docs], pattern, engine)


@pytest.mark.parametrize("engine", ENGINES)
def test_an_edit_made_by_hand_right_after_mapping_is_found_by_the_next_grep(
    tmp_path: Path, prefilter: GrepPrefilter, engine: str
) -> None:
    docs = corpus(tmp_path / "docs", {"a.md": "alpha\n", "b.md": "beta\n", "c.md": "gamma\n"})
    mapped(prefilter, docs)
    with open(docs / "a.md", "a", encoding="utf-8") as file:  # appended in place
        file.write("okapi\n")
    assert same_as_every_file(prefilter, [docs], "okapi", engine) == [str(docs / "a.md")]
    (docs / ".b.md.tmp").write_text("beta\nquagga\n", encoding="utf-8")  # saved by rename
    os.replace(docs / ".b.md.tmp", docs / "b.md")
    assert same_as_every_file(prefilter, [docs], "quagga", engine) == [str(docs / "b.md")]
    before = (docs / "c.md").stat()
    (docs / "c.md").write_text("gnu!!\n", encoding="utf-8")  # same size, and the old mtime put back
    os.utime(docs / "c.md", ns=(before.st_atime_ns, before.st_mtime_ns))
    assert same_as_every_file(prefilter, [docs], "gnu!!", engine) == [str(docs / "c.md")]
    assert same_as_every_file(prefilter, [docs], "gamma", engine) == []


def test_files_added_removed_renamed_or_replaced_by_a_link_after_mapping_are_seen(
    tmp_path: Path, prefilter: GrepPrefilter
) -> None:
    docs = corpus(tmp_path / "docs", {"a.md": "walrus\n", "b.md": "walrus\n", "c.md": "walrus\n", "d.md": "walrus\n"})
    mapped(prefilter, docs)
    (docs / "new.md").write_text("walrus\n", encoding="utf-8")
    (docs / "a.md").unlink()
    (docs / "b.md").rename(docs / "renamed.md")
    (docs / "c.md").unlink()
    (docs / "c.md").symlink_to(docs / "d.md")  # grep does not follow links in its folders
    (docs / "hidden.txt").write_text("walrus\n", encoding="utf-8")
    (docs / ".hidden.md").write_text("walrus\n", encoding="utf-8")
    expected = [str(docs / name) for name in ("d.md", "new.md", "renamed.md")]
    assert same_as_every_file(prefilter, [docs], "walrus") == expected


def test_a_folder_replaced_by_another_is_read_anew(tmp_path: Path, prefilter: GrepPrefilter) -> None:
    docs = corpus(tmp_path / "docs", {"a.md": "narwhal\n"})
    mapped(prefilter, docs)
    docs.rename(tmp_path / "old")
    corpus(docs, {"b.md": "beluga\n"})
    assert same_as_every_file(prefilter, [docs], "narwhal") is None  # mapped anew: every file read meanwhile
    same_as_every_file(prefilter, [docs], "beluga")
    assert prefilter.wait_until_mapped([docs], MAP_WAIT)
    assert same_as_every_file(prefilter, [docs], "beluga") == [str(docs / "b.md")]
    assert same_as_every_file(prefilter, [docs], "narwhal") == []


def test_changes_lost_to_a_full_event_queue_make_the_folder_read_anew(tmp_path: Path, prefilter: GrepPrefilter) -> None:
    docs = corpus(tmp_path / "docs", {"a.md": "ibex\n", "b.md": "oryx\n"})
    mapped(prefilter, docs)
    queue = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    if queue > 100_000:
        pytest.skip(f"the event queue holds {queue} events here")
    (docs / "b.md").write_text("oryx eland\n", encoding="utf-8")
    for _ in range(queue // 2 + 10):  # two files in turn: the kernel cannot merge their events
        os.utime(docs / "a.md")
        os.utime(docs / "b.md")
    assert same_as_every_file(prefilter, [docs], "eland") is None  # lost track: every file read
    assert prefilter.wait_until_mapped([docs], MAP_WAIT)
    assert same_as_every_file(prefilter, [docs], "eland") == [str(docs / "b.md")]


def test_a_folder_is_mapped_only_from_its_second_grep(tmp_path: Path, prefilter: GrepPrefilter) -> None:
    docs = corpus(tmp_path / "docs", {"a.md": "tapir\n"})
    assert prefilter.narrow([docs], "tapir") is None
    assert not prefilter.wait_until_mapped([docs], 0.2)  # a one-shot grep never pays for a map
    assert prefilter.narrow([docs], "tapir") is None
    assert prefilter.wait_until_mapped([docs], MAP_WAIT)
    assert prefilter.narrow([docs], "tapir") == [str(docs / "a.md")]


def test_waiting_for_a_folder_no_grep_is_mapping_answers_at_once(tmp_path: Path, prefilter: GrepPrefilter) -> None:
    docs = corpus(tmp_path / "docs", {"a.md": "tapir\n"})
    waiter = threading.Thread(target=prefilter.wait_until_mapped, args=([docs], 3600.0), daemon=True)
    waiter.start()
    waiter.join(MAP_WAIT)  # a benchmark waiting on a folder that will never be mapped must not hang
    assert not waiter.is_alive()
    assert not prefilter.wait_until_mapped([docs], 3600.0)


def test_a_folder_over_the_memory_budget_is_never_narrowed(tmp_path: Path) -> None:
    docs = corpus(tmp_path / "docs", {"a.md": "tapir\n"})
    small = GrepPrefilter(budget=1000)
    try:
        for _ in range(2):
            small.narrow([docs], "tapir")
        assert not small.wait_until_mapped([docs], MAP_WAIT)
        assert small.narrow([docs], "tapir") is None
    finally:
        small.close()


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root reads any file")
def test_a_file_that_cannot_be_read_is_always_handed_to_grep(tmp_path: Path, prefilter: GrepPrefilter) -> None:
    docs = corpus(tmp_path / "docs", {"a.md": "tapir\n", "locked.md": "tapir\n"})
    (docs / "locked.md").chmod(0)
    try:
        mapped(prefilter, docs)
        assert prefilter.narrow([docs], "qzxjvkwpq") == [str(docs / "locked.md")]
    finally:
        (docs / "locked.md").chmod(0o644)


def test_several_folders_are_narrowed_in_the_order_grep_reads_them(tmp_path: Path, prefilter: GrepPrefilter) -> None:
    first = corpus(tmp_path / "one", {"z.md": "dingo\n", "a.md": "dingo\n"})
    second = corpus(tmp_path / "two", {"m.md": "dingo\n"})
    mapped(prefilter, second, first)
    narrowed = same_as_every_file(prefilter, [second, first], "dingo")
    assert narrowed == [str(second / "m.md"), str(first / "a.md"), str(first / "z.md")]


# -- any corpus, any pattern, any edit ---------------------------------------------------------------

LINE = st.text(st.sampled_from(ALPHABET), max_size=12)
TEXT = st.lists(LINE, min_size=1, max_size=6).map("\n".join)


@st.composite
def file_bytes(draw: st.DrawFn) -> bytes:
    text = draw(TEXT)
    form = draw(st.sampled_from(["utf-8", "utf-8", "crlf", "bom", "utf-16", "frontmatter", "invalid"]))
    if form == "crlf":
        return text.replace("\n", "\r\n").encode("utf-8")
    if form == "bom":
        return codecs.BOM_UTF8 + text.encode("utf-8")
    if form == "utf-16":
        return codecs.BOM_UTF16_LE + text.encode("utf-16-le")
    if form == "frontmatter":
        title = text.split("\n", 1)[0]
        return f"---\ntitle: {title}\n---\nbody\n".encode()
    return text.encode("utf-8") + b"\xff\xfe" + text[:3].encode("utf-8")


RUN = st.text(st.sampled_from(ALPHABET), min_size=2, max_size=4).map(lambda run: "".join(map(_escaped, run)))
PIECE = st.one_of(RUN, RUN, st.builds(_repeated, st.sampled_from([r"\w", ".", "[ab]", r"\s", r"\b", "(?i)"]), REPEATS))
# Literal runs between other atoms: patterns with needles, so that the map narrows most greps.
PATTERNS_WITH_RUNS = st.one_of(PATTERNS, st.lists(PIECE, min_size=1, max_size=5).map("".join))
FILES = st.dictionaries(st.sampled_from([f"{c}.md" for c in "abcdefgh"]), file_bytes(), min_size=1, max_size=8)
EDITS = st.lists(
    st.tuples(st.sampled_from(["write", "append", "delete", "rename"]), st.sampled_from("abcdefghij"), file_bytes()),
    max_size=4,
)


@PROPERTY
@given(files=FILES, edits=EDITS, pattern=PATTERNS_WITH_RUNS, ignore_case=st.booleans(), fixed_strings=st.booleans())
def test_any_pattern_finds_the_same_lines_with_the_map_before_and_after_edits_by_hand(
    tmp_path_factory: pytest.TempPathFactory,
    files: dict[str, bytes],
    edits: list[tuple[str, str, bytes]],
    pattern: str,
    ignore_case: bool,
    fixed_strings: bool,
) -> None:
    echo = {"echo.md": echoes(pattern)}  # lines made of the pattern's own characters: often a match
    docs = corpus(tmp_path_factory.mktemp("corpus") / "docs", {**files, **echo}, fillers=3)
    flags = {"ignore_case": ignore_case, "fixed_strings": fixed_strings}
    prefilter = GrepPrefilter(max_share=1.0)  # narrowed by any needle, however common
    try:
        mapped(prefilter, docs)
        for engine in ("python", "ripgrep") if find_rg() else ("python",):
            same_as_every_file(prefilter, [docs], pattern, engine, max_matches=3, **flags)
        for action, letter, data in edits:
            path = docs / f"{letter}.md"
            if action == "write":
                path.write_bytes(data)
            elif action == "append":
                with open(path, "ab") as file:
                    file.write(data)
            elif action == "delete":
                path.unlink(missing_ok=True)
            elif path.exists():
                path.rename(docs / f"{letter}-moved.md")
        for engine in ("python", "ripgrep") if find_rg() else ("python",):
            same_as_every_file(prefilter, [docs], pattern, engine, max_matches=3, **flags)
    finally:
        prefilter.close()
        shutil.rmtree(docs.parent, ignore_errors=True)


# -- through the service, on both index backends (filters come from the index) -----------------------


def test_a_frontmatter_only_match_and_a_filtered_grep_agree_with_the_map(
    coffer: Coffer, home: Path, backend_settings: dict[str, str]
) -> None:
    coffer.create_kb("notes", "test notes")
    for number in range(20):
        coffer.add_document("notes", f"plain-{number}.md", f"# Plain {number}\n\nNothing to see.\n")
    coffer.add_document("notes", "tagged.md", "# Tagged\n\nBody without the tag.\n", tags=["quokka"])
    coffer.add_document("notes", "body.md", "# Body\n\nA quokka in the body.\n")
    docs = coffer.paths.kb("notes").docs
    with Coffer(load_settings(home=home, **backend_settings)) as scanning:
        scanning.retrieval.prefilter.close()  # reads every file: what grep did before the map
        for _ in range(2):
            coffer.grep("notes", "quokka")
        assert coffer.retrieval.prefilter.wait_until_mapped([docs], MAP_WAIT)
        for filters in (None, {"tags": ["quokka"]}):
            mapped_result = coffer.grep("notes", "quokka", filters=filters)
            assert mapped_result == scanning.grep("notes", "quokka", filters=filters)
        assert {hit.line_number for hit in coffer.grep("notes", "quokka").hits} == {0, 3}  # 0: frontmatter
        assert coffer.retrieval.prefilter.narrow([docs], "quokka") is not None
