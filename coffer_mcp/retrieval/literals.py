"""What a grep pattern requires of a file: byte strings that every file with a matching line contains.

grep narrows a scan to the files that contain them (``retrieval/prefilter.py``), so a needle must
be a *proof*: whenever ripgrep or the Python engine finds a line, each needle of the pattern occurs
in ``fold_text`` of that file's bytes. Both sides go through the same byte map (ASCII lowercased,
and the four non-ASCII letters either engine matches case-insensitively to an ASCII one spelled as
that letter), so that a case-sensitive literal and a case-insensitive ASCII one are both found by
plain substring search. A case-insensitive literal keeps only characters that have no case in any
Unicode version (ASCII, and non-ASCII letters, digits and marks whose case mappings are
themselves, e.g. CJK); the others split it.

Patterns are read in the subset of the Rust regex dialect that both engines read alike: literal
characters and escaped punctuation, ``.``, classes, anchors and the ``\\d \\w \\s \\b``-style
escapes, groups (capturing, named, non-capturing, with ``i m s U R`` flags), alternation, and
``* + ? {n} {n,} {n,m}`` (lazy too). A literal run is what a concatenation of plain characters
must match; a repeated part contributes its own needles only when it must occur at least once,
an alternation none. Anything else — other escapes, lookaround, ``(?x)``, nested classes,
possessive or fuzzy repetition — gives no needle at all, and the caller scans every file.
"""

from __future__ import annotations

import codecs
import unicodedata
from dataclasses import dataclass

__all__ = ["MIN_NEEDLE_BYTES", "fold_text", "needles"]

MIN_NEEDLE_BYTES = 2
"""A needle of one byte is found in nearly every file: not worth a look."""

# ripgrep matches U+212A (Kelvin sign) and U+017F (long s) to k and s case-insensitively; the Python
# engine also matches U+0130 (capital I with dot) to i and U+0131 (dotless i) to I. Spelled as those
# ASCII letters, a file keeps every line either engine can match.
_FOLDS = ((b"\xe2\x84\xaa", b"k"), (b"\xc5\xbf", b"s"), (b"\xc4\xb0", b"i"), (b"\xc4\xb1", b"i"))
_UTF16_BOMS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)
_UNCASED_CATEGORIES = frozenset({"Lo", "Nd", "Mn", "Mc"})
_META_ESCAPES = frozenset(r"\.+*?()|[]{}^$#&-~")
# Escapes of one letter that both engines read as one assertion or one character (class): each
# only ends a literal run. \< and \> are word boundaries in Rust, hence not literal punctuation.
_OPAQUE_ESCAPES = frozenset("aftnrvAzbBdDsSwW<>")
_FLAGS = frozenset("imsUR")
_REPEAT_CHARS = frozenset("*+?{")


def fold_text(data: bytes) -> bytes:
    """A file's bytes as needles are looked for in them (UTF-16 transcoded to UTF-8, as ripgrep does)."""
    if data.startswith(_UTF16_BOMS):
        data = data.decode("utf-16", errors="replace").encode("utf-8")
    return _fold(data)


def _fold(data: bytes) -> bytes:
    data = data.lower()  # bytes.lower changes ASCII letters only: UTF-8 sequences stay whole
    for old, new in _FOLDS:
        if old in data:
            data = data.replace(old, new)
    return data


def needles(pattern: str, *, ignore_case: bool = False, fixed_strings: bool = False) -> list[bytes]:
    """Byte strings each file with a line matching ``pattern`` contains once folded; [] when none is known.

    Longest first, each at least ``MIN_NEEDLE_BYTES`` long. An invalid pattern may give needles:
    the engines refuse it anyway.
    """
    if fixed_strings:
        pieces = [[(char, ignore_case) for char in pattern]]
    else:
        try:
            pieces = _Parser(pattern, ignore_case).parse()
        except _UnknownSyntaxError:
            return []
    found = {needle for piece in pieces for needle in _piece_needles(piece)}
    return sorted(found, key=lambda needle: (-len(needle), needle))


Piece = list[tuple[str, bool]]
"""Characters that must occur one after another, each with whether it matches case-insensitively."""


def _piece_needles(piece: Piece) -> list[bytes]:
    """The runs of characters a needle can hold, encoded and folded."""
    runs: list[str] = []
    run: list[str] = []
    for char, ignore_case in piece:
        if char == "\ufffd" or (ignore_case and not _caseless(char)):
            runs.append("".join(run))
            run = []
        else:
            run.append(char)
    runs.append("".join(run))
    encoded = (_fold(run.encode("utf-8", errors="surrogatepass")) for run in runs)
    return [needle for needle in encoded if len(needle) >= MIN_NEEDLE_BYTES]


def _caseless(char: str) -> bool:
    """Whether a case-insensitive ``char`` can only match itself (or, for ASCII, what ``_fold`` folds)."""
    if char.isascii():
        return True
    return (
        unicodedata.category(char) in _UNCASED_CATEGORIES
        and char.lower() == char
        and char.upper() == char
        and char.casefold() == char
    )


class _UnknownSyntaxError(Exception):
    """The pattern uses something this reader does not model: no needle."""


@dataclass(slots=True)
class _Atom:
    pieces: list[Piece]  # required by the atom; for a literal character, [[that character]]
    char: tuple[str, bool] | None = None  # the atom is this one literal character
    flags: bool | None = None  # the atom was a bare (?flags): case-insensitivity from here on


class _Parser:
    """Recursive descent over the pattern, collecting required pieces (``_UnknownSyntaxError`` to give up)."""

    def __init__(self, pattern: str, ignore_case: bool) -> None:
        self.text = pattern
        self.pos = 0
        self.ignore_case = ignore_case

    def parse(self) -> list[Piece]:
        pieces = self._alternation(self.ignore_case)
        if self.pos != len(self.text):  # an unbalanced ")"
            raise _UnknownSyntaxError
        return pieces

    def _peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def _take(self) -> str:
        if self.pos >= len(self.text):
            raise _UnknownSyntaxError
        char = self.text[self.pos]
        self.pos += 1
        return char

    def _alternation(self, ignore_case: bool) -> list[Piece]:
        branches = [self._concatenation(ignore_case)]
        while self._peek() == "|":
            self.pos += 1
            branches.append(self._concatenation(ignore_case))
        return branches[0] if len(branches) == 1 else []

    def _concatenation(self, ignore_case: bool) -> list[Piece]:
        pieces: list[Piece] = []
        run: Piece = []
        while self._peek() not in ("", "|", ")"):
            atom = self._atom(ignore_case)
            if atom.flags is not None:
                ignore_case = atom.flags
                continue
            least = self._repetition()
            if atom.char is not None and least is None:
                run.append(atom.char)
                continue
            pieces.append(run)
            run = []
            if least is None or least >= 1:
                pieces.extend(atom.pieces)
        pieces.append(run)
        return [piece for piece in pieces if piece]

    def _atom(self, ignore_case: bool) -> _Atom:
        char = self._take()
        if char == "\\":
            return self._escape(ignore_case)
        if char == "[":
            self._class()
            return _Atom([])
        if char == "(":
            return self._group(ignore_case)
        if char in ".^$":
            return _Atom([])
        if char in _REPEAT_CHARS:  # a repetition of nothing
            raise _UnknownSyntaxError
        return self._literal(char, ignore_case)

    @staticmethod
    def _literal(char: str, ignore_case: bool) -> _Atom:
        return _Atom([[(char, ignore_case)]], char=(char, ignore_case))

    def _escape(self, ignore_case: bool) -> _Atom:
        char = self._take()
        if char in _META_ESCAPES or (char.isascii() and char.isprintable() and not char.isalnum() and char not in "<>"):
            return self._literal(char, ignore_case)
        if char in _OPAQUE_ESCAPES and not (char in "bB" and self._peek() == "{"):
            return _Atom([])
        raise _UnknownSyntaxError  # \x41, \p{L}, \b{start}, backreferences...

    def _class(self) -> None:
        """Skip a bracketed class (its first ``]`` and a leading ``^]`` are members); nested ones: unknown."""
        if self._peek() == "^":
            self.pos += 1
        if self._peek() == "]":
            self.pos += 1
        while True:
            char = self._take()
            if char == "]":
                return
            if char == "[":
                raise _UnknownSyntaxError
            if char == "\\":
                self._take()

    def _group(self, ignore_case: bool) -> _Atom:
        inner = ignore_case
        if self._peek() == "?":
            self.pos += 1
            bare, inner = self._group_head(ignore_case)
            if bare:
                return _Atom([], flags=inner)
        pieces = self._alternation(inner)
        if self._take() != ")":
            raise _UnknownSyntaxError
        return _Atom(pieces)

    def _group_head(self, ignore_case: bool) -> tuple[bool, bool]:
        """After ``(?``: a name, ``:`` or flags. Returns (a bare flag group, case-insensitivity inside)."""
        char = self._take()
        if char == ":":
            return False, ignore_case
        if char == "P" and self._peek() == "<":
            self.pos += 1
            char = "<"
        if char == "<":
            return self._group_name(), ignore_case
        return self._flags(char, ignore_case)

    def _group_name(self) -> bool:
        end = self.text.find(">", self.pos)
        name = self.text[self.pos : end]
        if end < 0 or not name or not all(c.isascii() and (c.isalnum() or c in "_.[]") for c in name):
            raise _UnknownSyntaxError  # lookbehind (?<= (?<!, or no name
        self.pos = end + 1
        return False

    def _flags(self, char: str, ignore_case: bool) -> tuple[bool, bool]:
        negate = False
        while char not in (":", ")"):
            if char == "-" and not negate:
                negate = True
            elif char in _FLAGS:
                if char == "i":
                    ignore_case = not negate
            else:
                raise _UnknownSyntaxError  # (?x), lookahead, atomic groups, comments...
            char = self._take()
        return char == ")", ignore_case

    def _repetition(self) -> int | None:
        """The least count of a repetition operator after an atom (None: none follows)."""
        char = self._peek()
        if char not in _REPEAT_CHARS:
            return None
        self.pos += 1
        least = 1 if char == "+" else 0 if char in "*?" else self._counted()
        if self._peek() == "?":  # lazy
            self.pos += 1
        if self._peek() in _REPEAT_CHARS:  # possessive, fuzzy, or a repetition repeated
            raise _UnknownSyntaxError
        return least

    def _counted(self) -> int:
        """``{n}``, ``{n,}`` or ``{n,m}`` (digits only); anything else is not modelled."""
        end = self.text.find("}", self.pos)
        body = self.text[self.pos : end] if end >= 0 else ""
        low, comma, high = body.partition(",")
        if not low.isdigit() or not low.isascii() or (high and not (high.isdigit() and high.isascii())):
            raise _UnknownSyntaxError
        if comma and high and int(high) < int(low):
            raise _UnknownSyntaxError
        self.pos = end + 1
        return int(low)
