"""The Porter stemmer exactly as SQLite's FTS5 ``porter`` tokenizer applies it.

Keyword search must rank the same words on both backends, so the PostgreSQL index stems with
the same function as FTS5, rule for rule: Martin Porter's algorithm with the two revisions of
his reference implementation that FTS5 keeps (``logi`` → ``log``, ``bli`` → ``ble``), applied to
the token's UTF-8 bytes (non-ASCII bytes count as consonants), and tokens shorter than 3 or
longer than 64 bytes passed through unchanged. Snowball's ``porter`` (the 1980 paper) differs
on 103 of the 165,535 distinct tokens of SciFact + CMRC (``epidemiology``, ``incredibly``,
``straße``), which is why it is not used; ``tests/index/test_tokens.py`` compares this module
with FTS5 itself.

Each word is handled as a ``str`` of its bytes (``latin-1``), so every rule is a plain string
operation and a suffix (always ASCII) can never cut a multi-byte character.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

__all__ = ["stem"]

_MIN_BYTES = 3
_MAX_BYTES = 64

Condition = Callable[[str], bool]


def _vowel_at(c: str, y_is_vowel: bool) -> bool:
    return c in "aeiou" or (y_is_vowel and c == "y")


def _after_vc(stem: str, consonant_before: bool) -> int:
    """The index just past the first vowel-then-consonant run of ``stem`` (0: there is none)."""
    consonant = consonant_before
    i, n = 0, len(stem)
    while i < n:
        consonant = not _vowel_at(stem[i], consonant)
        if not consonant:
            break
        i += 1
    i += 1
    while i < n:
        consonant = not _vowel_at(stem[i], consonant)
        if consonant:
            return i + 1
        i += 1
    return 0


def _m_gt0(stem: str) -> bool:
    return _after_vc(stem, False) > 0


def _m_gt1(stem: str) -> bool:
    n = _after_vc(stem, False)
    return n > 0 and _after_vc(stem[n:], True) > 0


def _m_eq1(stem: str) -> bool:
    n = _after_vc(stem, False)
    return n > 0 and _after_vc(stem[n:], True) == 0


def _o_star(stem: str) -> bool:
    """Ends consonant-vowel-consonant, the last not w, x or y."""
    if stem[-1] in "wxy":
        return False
    mask, consonant = 0, False
    for c in stem:
        consonant = not _vowel_at(c, consonant)
        mask = (mask << 1) + consonant
    return mask & 0b111 == 0b101


def _m_gt1_s_or_t(stem: str) -> bool:
    return stem[-1] in "st" and _m_gt1(stem)


def _has_vowel(stem: str) -> bool:
    return any(_vowel_at(c, i > 0) for i, c in enumerate(stem))


Rule = tuple[str, "Condition | None", str, bool]  # suffix, condition on the stem, replacement, "applied"


def _rules(*rules: Rule) -> dict[str, list[Rule]]:
    """Rules grouped by their suffix's last-but-one letter: FTS5 tries only that group, in order,
    and stops at the first suffix that matches, whether or not its condition holds."""
    grouped: dict[str, list[Rule]] = {}
    for rule in rules:
        grouped.setdefault(rule[0][-2], []).append(rule)
    return grouped


_STEP_1B = _rules(("eed", _m_gt0, "ee", False), ("ed", _has_vowel, "", True), ("ing", _has_vowel, "", True))
_STEP_1B2 = _rules(("at", None, "ate", True), ("bl", None, "ble", True), ("iz", None, "ize", True))
_STEP_2 = _rules(
    *(
        (suffix, _m_gt0, out, False)
        for suffix, out in (
            ("ational", "ate"),
            ("tional", "tion"),
            ("enci", "ence"),
            ("anci", "ance"),
            ("izer", "ize"),
            ("logi", "log"),
            ("bli", "ble"),
            ("alli", "al"),
            ("entli", "ent"),
            ("eli", "e"),
            ("ousli", "ous"),
            ("ization", "ize"),
            ("ation", "ate"),
            ("ator", "ate"),
            ("alism", "al"),
            ("iveness", "ive"),
            ("fulness", "ful"),
            ("ousness", "ous"),
            ("aliti", "al"),
            ("iviti", "ive"),
            ("biliti", "ble"),
        )
    )
)
_STEP_3 = _rules(
    *(
        (suffix, _m_gt0, out, False)
        for suffix, out in (
            ("icate", "ic"),
            ("ative", ""),
            ("alize", "al"),
            ("iciti", "ic"),
            ("ical", "ic"),
            ("ful", ""),
            ("ness", ""),
        )
    )
)
_STEP_4 = _rules(
    *(
        (suffix, _m_gt1_s_or_t if suffix == "ion" else _m_gt1, "", False)
        for suffix in (
            "al",
            "ance",
            "ence",
            "er",
            "ic",
            "able",
            "ible",
            "ant",
            "ement",
            "ment",
            "ent",
            "ion",
            "ou",
            "ism",
            "ate",
            "iti",
            "ous",
            "ive",
            "ize",
        )
    )
)


def _step(word: str, rules: dict[str, list[Rule]]) -> tuple[str, bool]:
    if len(word) < 2:
        return word, False
    for suffix, condition, out, applied in rules.get(word[-2], ()):
        if len(word) > len(suffix) and word.endswith(suffix):
            stem = word[: -len(suffix)]
            if condition is None or condition(stem):
                return stem + out, applied
            return word, False
    return word, False


def _step_1a(word: str) -> str:
    n = len(word)
    if word[-1] != "s":
        return word
    if word[-2] == "e":
        if (n > 4 and word[-4] == "s" and word[-3] == "s") or (n > 3 and word[-3] == "i"):
            return word[:-2]
        return word[:-1]
    return word if word[-2] == "s" else word[:-1]


def _step_1b(word: str) -> str:
    word, applied = _step(word, _STEP_1B)
    if not applied:
        return word
    word, applied = _step(word, _STEP_1B2)
    if applied:
        return word
    last = word[-1]
    if not _vowel_at(last, False) and last not in "lsz" and last == word[-2]:
        return word[:-1]
    if _m_eq1(word) and _o_star(word):
        return word + "e"
    return word


def _step_5(word: str) -> str:
    if word[-1] == "e":
        stem = word[:-1]
        if _m_gt1(stem) or (_m_eq1(stem) and not _o_star(stem)):
            word = stem
    if len(word) > 1 and word[-1] == "l" and word[-2] == "l" and _m_gt1(word[:-1]):
        word = word[:-1]
    return word


def _stem_bytes(word: str) -> str:
    word = _step_1b(_step_1a(word))
    if word[-1] == "y" and _has_vowel(word[:-1]):
        word = word[:-1] + "i"
    for rules in (_STEP_2, _STEP_3, _STEP_4):
        word, _ = _step(word, rules)
    return _step_5(word)


@functools.lru_cache(maxsize=65536)
def stem(token: str) -> str:
    """``token`` (already case-folded by the tokenizer) as FTS5's ``porter`` tokenizer stems it."""
    raw = token.encode("utf-8")
    if not _MIN_BYTES <= len(raw) <= _MAX_BYTES:
        return token
    return _stem_bytes(raw.decode("latin-1")).encode("latin-1").decode("utf-8")
