"""The PostgreSQL index's tokenizer against SQLite's FTS5 itself: the same terms for any text.

FTS5 (``porter unicode61 remove_diacritics 2``) is the reference; ``tokens.terms`` must cut, fold
and stem exactly as it does, or the two backends would rank differently.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coffer_mcp.index import unicode61
from coffer_mcp.index.fts import search_text
from coffer_mcp.index.porter import stem
from coffer_mcp.index.sqlite.db import connect
from coffer_mcp.index.tokens import term_counts, terms
from scripts.gen_unicode61 import code_points, measure
from tests.conftest import shared_path


def fts5_terms(texts: list[str]) -> list[list[str]]:
    """What FTS5 stores for each text, in order."""
    conn = connect(":memory:", load_vec=False)
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(x, content='', tokenize='porter unicode61 remove_diacritics 2')")
    conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance')")
    conn.executemany("INSERT INTO t (rowid, x) VALUES (?, ?)", list(enumerate(texts)))
    found: list[list[str]] = [[] for _ in texts]
    for term, doc in conn.execute("SELECT term, doc FROM v ORDER BY doc, offset"):
        found[doc].append(term)
    conn.close()
    return found


def table_points() -> Iterator[int]:
    for span in unicode61.TOKEN_RANGES.split():
        first, last = (int(part, 16) for part in span.split("-"))
        yield from range(first, last + 1)


def test_the_character_tables_match_fts5_over_the_basic_multilingual_plane() -> None:
    starts, inner, fold = measure(code_points(1, 0xFFFF))
    assert starts == {cp for cp in table_points() if cp <= 0xFFFF}
    assert inner == {ord(c) for c in unicode61.DIACRITICS}
    expected = dict(zip(unicode61.FOLD_FROM, unicode61.FOLD_TO, strict=True))
    assert {cp: out for cp, out in fold.items() if out} == {ord(k): v for k, v in expected.items() if ord(k) <= 0xFFFF}


def test_the_character_tables_match_fts5_at_every_boundary_beyond_it() -> None:
    edges = set()
    for span in unicode61.TOKEN_RANGES.split():
        first, last = (int(part, 16) for part in span.split("-"))
        edges.update(cp for cp in (first - 1, first, last, last + 1) if 0xFFFF < cp <= 0x10FFFF)
    edges.update(ord(c) for c in unicode61.FOLD_FROM if ord(c) > 0xFFFF)
    starts, _, fold = measure(sorted(edges))
    tabled = set(table_points())
    assert starts == {cp for cp in edges if cp in tabled}
    assert fold == {ord(k): v for k, v in zip(unicode61.FOLD_FROM, unicode61.FOLD_TO, strict=True) if ord(k) in edges}


PORTER_CASES = """caresses ponies ties caress cats feed agreed plastered bled motoring sing conflated troubled sized
hopping tanned falling hissing fizzed failing filing happy sky relational conditional rational valenci hesitanci
digitizer conformabli radicalli differentli vileli analogousli vietnamization predication operator feudalism
decisiveness hopefulness callousness formaliti sensitiviti sensibiliti triplicate formative formalize electriciti
electrical hopeful goodness revival allowance inference airliner gyroscopic adjustable defensible irritant
replacement adjustment dependent adoption homologou communism activate angulariti homologous effective bowdlerize
probate rate cease controll roll epidemiology incredibly eed aed ied yes sses abs the as is a ii straße naïve
généralement""".split()


def test_stemming_follows_fts5_porter_rule_for_rule() -> None:
    assert [terms(word) for word in PORTER_CASES] == fts5_terms(PORTER_CASES)
    assert stem("x" * 65 + "ing") == "x" * 65 + "ing"  # longer than 64 bytes: as is


MIXED = [
    "The QUICK brown fox's jumping-over 3.14 ½ ² lazy_dogs!",
    "Ærøskøbing, naïve façades, İstanbul, ǅemal, ﬁne, x\u0301y \u0301abc, ΣΊΣΥΦΟΣ, ς",
    "हिन्दी भाषा في اللغة العربية עִבְרִית ภาษาไทย 한국어 日本語のテキスト",
    search_text("近邻搜索 and HNSW, 向量检索的方法"),
    "emoji 🙂 😀 🦀 and private \ue000\ue001 use, 𐐀𐐨 Deseret, 𝐀𝐁 math",
]


def test_mixed_scripts_give_the_same_terms_as_fts5() -> None:
    assert [terms(text) for text in MIXED] == fts5_terms(MIXED)
    counts, length = term_counts("run running runs ran")
    assert counts == {"run": 3, "ran": 1}
    assert length == 4


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00")), min_size=1, max_size=20))
def test_any_text_gives_the_same_terms_as_fts5(texts: list[str]) -> None:
    assert [terms(text) for text in texts] == fts5_terms(texts)


def test_scifact_and_cmrc_give_the_same_terms_as_fts5() -> None:
    texts = []
    for name in ("scifact", "cmrc2018-zh"):
        with shared_path("eval", name, "corpus.jsonl").open(encoding="utf-8") as corpus:
            for number, line in enumerate(corpus):
                if number == 600:
                    break
                record = json.loads(line)
                texts.append(search_text(f"{record['title']}\n{record['text']}"))
    assert [terms(text) for text in texts] == fts5_terms(texts)


@pytest.mark.parametrize("token", ["a" * 600, "é" * 300])
def test_a_very_long_token_is_still_one_term(token: str) -> None:
    assert terms(f"x {token} y") == fts5_terms([f"x {token} y"])[0]
