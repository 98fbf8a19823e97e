"""Measures of one Markdown conversion against a reference conversion of the same file.

Everything here is pure text processing, so the measures can be applied alike to Coffer's output,
to a candidate engine's output and to the reference itself (the anchor).
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from dataclasses import dataclass
from difflib import SequenceMatcher

__all__ = [
    "Table",
    "body_tokens",
    "edit_similarity",
    "garbage_count",
    "glued_rate",
    "headings",
    "levenshtein",
    "nan_unnamed_count",
    "order_similarity",
    "table_agreement",
    "tables",
    "tokens",
    "word_precision_recall",
]

_LINK = re.compile(r"!?\[([^\]\n]*)\]\((?:[^()\s]|\([^()\s]*\))*(?:\s+\"[^\"\n]*\")?\)")
_AUTOLINK = re.compile(r"<(?:https?|mailto):[^>\s]+>")
_TAG = re.compile(r"(?<!\\)</?[A-Za-z][^>\n]*>")  # an escaped \<b> is text
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
_SEPARATOR_ROW = re.compile(r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")
_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t#]*$")
# CJK ideographs and kana are one token per character (no spaces between words);
# everything else is a run of word characters.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_TOKEN = re.compile(rf"[{_CJK}]|[^\W{_CJK}]+")
_LATIN_WORD = re.compile(r"[a-z]+")
_GARBAGE = re.compile(r"\(cid:\d+\)|\ufffd|[\ue000-\uf8ff]|glyph<[^>]*>")
_NAN = re.compile(r"(?<![\w.])NaN(?![\w.])|Unnamed: \d+")


def plain_text(markdown: str) -> str:
    """Markdown reduced to its words: link targets, tags, table rules and markers removed."""
    text = _COMMENT.sub(" ", markdown)
    text = _LINK.sub(r" \1 ", text)
    text = _AUTOLINK.sub(" ", text)
    text = _TAG.sub(" ", text)
    lines = [line for line in text.split("\n") if not _SEPARATOR_ROW.match(line) or "-" not in line]
    return "\n".join(lines)


def tokens(markdown: str) -> list[str]:
    """The words of ``markdown`` in order, NFC-normalized and lower-cased."""
    text = unicodedata.normalize("NFC", plain_text(markdown)).lower()
    return _TOKEN.findall(text.replace("_", " "))


def word_precision_recall(got: list[str], ref: list[str]) -> tuple[float, float]:
    """Bag-of-words precision and recall of ``got`` against ``ref`` (multiset overlap)."""
    if not got or not ref:
        return (0.0, 0.0) if ref else (1.0, 1.0)
    common = sum((Counter(got) & Counter(ref)).values())
    return common / len(got), common / len(ref)


def levenshtein(a: list[int], b: list[int]) -> int:
    """Edit distance of two sequences (Hyyrö's bit-vector algorithm over Python integers)."""
    if not a:
        return len(b)
    if not b:
        return len(a)
    peq: dict[int, int] = {}
    for i, symbol in enumerate(a):
        peq[symbol] = peq.get(symbol, 0) | (1 << i)
    mask = (1 << len(a)) - 1
    high = 1 << (len(a) - 1)
    pv, mv, score = mask, 0, len(a)
    for symbol in b:
        eq = peq.get(symbol, 0)
        xv = eq | mv
        xh = (((eq & pv) + pv) ^ pv) | eq
        ph = (mv | ~(xh | pv)) & mask
        mh = pv & xh
        if ph & high:
            score += 1
        elif mh & high:
            score -= 1
        ph = ((ph << 1) | 1) & mask
        mh = (mh << 1) & mask
        pv = (mh | ~(xv | ph)) & mask
        mv = ph & xv
    return score


def edit_similarity(a: list[str], b: list[str]) -> float:
    """1 - normalized edit distance of two word sequences (1.0: identical)."""
    if not a and not b:
        return 1.0
    ids: dict[str, int] = {}
    ia = [ids.setdefault(word, len(ids)) for word in a]
    ib = [ids.setdefault(word, len(ids)) for word in b]
    return 1.0 - levenshtein(ia, ib) / max(len(a), len(b))


def order_similarity(got: list[str], ref: list[str]) -> float:
    """Reading-order agreement: edit similarity of the two word sequences over their shared words.

    Words only one side has are dropped first, so missing or extra text (measured by recall and
    precision) does not count twice; what is left differs only by order.
    """
    shared = set(got) & set(ref)
    return edit_similarity([w for w in got if w in shared], [w for w in ref if w in shared])


def glued_rate(doc: list[str], vocabulary: set[str]) -> float:
    """Share of Latin words of ``doc`` that are two or more ``vocabulary`` words run together.

    ``highlydiversesetoftables`` is glued when ``highly``, ``diverse``, ``set``, ``of`` and
    ``tables`` are all words of the vocabulary (the union of both conversions' words, so the
    measure treats the output and its reference alike). Words under 10 letters are not tested.
    """
    latin = [word for word in doc if _LATIN_WORD.fullmatch(word)]
    if not latin:
        return 0.0
    glued = sum(1 for word in latin if len(word) >= 10 and _splits(word, vocabulary - {word}))
    return glued / len(latin)


def _splits(word: str, vocabulary: set[str]) -> bool:
    """Whether ``word`` is 2+ vocabulary words (each of 2+ letters, or "a") run together."""
    reachable = [0] * (len(word) + 1)  # parts needed to reach position i (0: unreachable)
    reachable[0] = 1
    for end in range(1, len(word) + 1):
        for start in range(max(0, end - 20), end):
            piece = word[start:end]
            if reachable[start] and (len(piece) >= 2 or piece == "a") and piece in vocabulary:
                reachable[end] = max(reachable[end], reachable[start] + 1)
    return reachable[-1] >= 3  # start counts as 1: two or more pieces


def garbage_count(markdown: str) -> int:
    """``(cid:N)`` codes, replacement characters, private-use glyphs and ``glyph<…>`` names."""
    return len(_GARBAGE.findall(markdown))


def nan_unnamed_count(markdown: str) -> int:
    """``NaN`` cells and pandas' ``Unnamed: N`` headers."""
    return len(_NAN.findall(markdown))


def headings(markdown: str) -> list[tuple[int, str]]:
    """ATX headings outside code fences: (level, plain lower-cased text)."""
    found, fenced = [], False
    for line in markdown.split("\n"):
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            continue
        match = None if fenced else _HEADING.match(line)
        if match and match.group(2).strip():
            found.append((len(match.group(1)), " ".join(tokens(match.group(2)))))
    return [(level, text) for level, text in found if text]


def heading_recall(got: list[tuple[int, str]], ref: list[tuple[int, str]]) -> float | None:
    """Share of reference headings that are headings in ``got`` too (text similarity >= 0.8)."""
    if not ref:
        return None
    texts = [text for _, text in got]
    hits = sum(1 for _, text in ref if any(_similar(text, other) for other in texts))
    return hits / len(ref)


def heading_precision(got: list[tuple[int, str]], ref: list[tuple[int, str]]) -> float | None:
    """Share of ``got``'s headings that are reference headings: a body line or a running header
    made a heading pollutes the outline without lowering recall."""
    if not got or not ref:
        return None
    texts = [text for _, text in ref]
    hits = sum(1 for _, text in got if any(_similar(text, other) for other in texts))
    return hits / len(got)


def _similar(a: str, b: str) -> bool:
    """Same text, the same words in another order (a number put after), or 80% alike."""
    return (
        a == b or sorted(a.split()) == sorted(b.split()) or SequenceMatcher(None, a, b, autojunk=False).ratio() >= 0.8
    )


@dataclass(frozen=True, slots=True)
class Table:
    rows: int
    """Rows including the header row."""
    columns: int
    header: tuple[str, ...]
    words: frozenset[str]


def tables(markdown: str) -> list[Table]:
    """The pipe tables of ``markdown`` (a header line followed by a ``|---|`` separator)."""
    lines = markdown.split("\n")
    found: list[Table] = []
    index = 0
    while index + 1 < len(lines):
        head, rule = lines[index], lines[index + 1]
        if "|" in head and "-" in rule and _SEPARATOR_ROW.match(rule):
            body = [head]
            index += 2
            while index < len(lines) and lines[index].strip().startswith("|"):
                body.append(lines[index])
                index += 1
            cells = [_cells(row) for row in body]
            header = tuple(" ".join(tokens(cell)) for cell in cells[0])
            words = frozenset(word for row in body for word in tokens(row))
            found.append(Table(len(body), max(len(row) for row in cells), header, words))
        else:
            index += 1
    return found


def _cells(row: str) -> list[str]:
    row = row.strip()
    row = row.removeprefix("|")
    row = row[:-1] if row.endswith("|") and not row.endswith("\\|") else row
    return re.split(r"(?<!\\)\|", row)


def table_agreement(got: list[Table], ref: list[Table]) -> dict[str, float | int | None]:
    """Reference tables paired one-to-one with ``got`` tables, then shapes and headers compared.

    Pairs sharing most words go first, a pair of equal shapes before one of unequal shapes
    (several tables of a workbook can hold the same numbers), each table in one pair at most.
    Returns the share of reference tables whose partner has the same rows x columns, and the
    share whose partner has the same header row.
    """
    if not ref:
        return {"ref_tables": 0, "tables": len(got), "shape": None, "header": None}
    candidates = []
    for i, table in enumerate(ref):
        for j, other in enumerate(got):
            overlap = len(table.words & other.words) / (len(table.words | other.words) or 1)
            if overlap >= 0.3:
                same = (table.rows, table.columns) == (other.rows, other.columns)
                candidates.append((same, overlap, i, j))
    used_ref: set[int] = set()
    used_got: set[int] = set()
    shapes = headers = 0
    for same, _, i, j in sorted(candidates, reverse=True):
        if i in used_ref or j in used_got:
            continue
        used_ref.add(i)
        used_got.add(j)
        shapes += same
        headers += ref[i].header == got[j].header
    return {"ref_tables": len(ref), "tables": len(got), "shape": shapes / len(ref), "header": headers / len(ref)}


def body_tokens(html: str) -> list[str] | None:
    """The words of a web page's article body: its paragraphs inside the main content element.

    The main element is Wikipedia's ``#mw-content-text``, else ``<article>``, else ``<main>``;
    citation markers (``[12]``) and edit links are left out. None when the page has none.
    """
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(html, "html.parser")
    main = soup.select_one("#mw-content-text") or soup.find("article") or soup.find("main")
    if main is None:
        return None
    for junk in main.select("sup.reference, .mw-editsection, style, script"):
        junk.decompose()
    words: list[str] = []
    for paragraph in main.find_all("p"):
        words.extend(tokens(paragraph.get_text(" ")))
    return words or None
