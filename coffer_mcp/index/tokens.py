"""Text to index terms exactly as SQLite's ``porter unicode61 remove_diacritics 2`` tokenizer does.

The PostgreSQL index keeps its own postings, so it must cut the same tokens as FTS5 or the two
backends would rank differently; the SQLite index scores the candidates of a search of several
knowledge bases from them (``sqlite.queries``). FTS5's ``unicode61``: a token starts at a character of
``TOKEN_RANGES`` (letters, numbers and private use as of Unicode 6.1, plus everything unassigned
then) and runs while those continue, or one of 25 combining diacritics (``DIACRITICS``) that it
lets through inside a word; every other character separates tokens (punctuation, spaces, and
marks such as Devanagari vowel signs, so ``हिन्दी`` is three tokens). Each character is folded:
lower-cased and, with ``remove_diacritics 2``, a Latin letter with diacritics becomes its base
letter while a combining diacritic disappears. Then ``porter.stem``.

The tables come from FTS5 itself (``scripts/gen_unicode61.py``): a newer ``unicodedata``
disagrees with them on about 800,000 code points. ``tests/index/test_tokens.py`` checks the
whole pipeline against FTS5.
"""

from __future__ import annotations

import functools
import re
from collections import Counter

from coffer_mcp.index.porter import stem
from coffer_mcp.index.unicode61 import DIACRITICS, FOLD_FROM, FOLD_TO, TOKEN_RANGES

__all__ = ["term_counts", "terms"]


def _token_class() -> str:
    spans = TOKEN_RANGES.split()
    return "".join(f"\\U{int(a, 16):08x}-\\U{int(b, 16):08x}" for a, b in (s.split("-") for s in spans))


@functools.cache
def _token() -> re.Pattern[str]:
    """The token pattern, compiled on first use: its class of ~700 ranges takes ~10 ms to compile,
    which a process that never tokenizes (``coffer --help``, a search of one SQLite knowledge
    base) should not pay."""
    token_class = _token_class()
    return re.compile(f"[{token_class}][{token_class}{DIACRITICS}]*")


@functools.cache
def _fold() -> dict[int, str | None]:
    return str.maketrans({**dict(zip(FOLD_FROM, FOLD_TO, strict=True)), **dict.fromkeys(DIACRITICS)})


def terms(text: str) -> list[str]:
    """The index terms of ``text``, in order, one per token: what FTS5 stores for it."""
    return [_term(token) for token in _token().findall(text)]


def term_counts(text: str) -> tuple[Counter[str], int]:
    """``({term: occurrences}, number of tokens)`` of ``text``: one chunk's postings and length."""
    found = terms(text)
    return Counter(found), len(found)


@functools.lru_cache(maxsize=262144)
def _term(token: str) -> str:
    return stem(token.lower() if token.isascii() else token.translate(_fold()))
