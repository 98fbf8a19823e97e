"""Keyword retrieval as a user sees it: ranking, CJK, hostile queries, scope."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from coffer_mcp import Coffer
from coffer_mcp.errors import InvalidArgumentError
from coffer_mcp.index.sqlite import SqliteIndex
from coffer_mcp.retrieval import search
from coffer_mcp.settings import load_settings

CORPUS = {
    "hnsw.md": "# HNSW\n\nHierarchical navigable small world graphs index vectors for nearest neighbour search.",
    "bread.md": "# Bread\n\nSourdough needs a lively starter, flour, water and salt.",
    "running.md": "# Running\n\nThe runner was running every morning; runs build endurance.",
    "zh.md": "# 向量数据库\n\n向量检索依赖近邻搜索算法，图索引在召回率和延迟之间取得平衡。",
    "ja.md": "# 検索\n\nベクトル検索は近傍探索を使います。",
    "code.md": "# Backend\n\nThe get_user_name function lives in the backend service.",
}


@pytest.fixture
def corpus(coffer: Coffer, notes: str) -> dict[str, str]:
    return {name: coffer.add_document(notes, name, text).document_id for name, text in CORPUS.items()}


def top(coffer: Coffer, query: str, k: int = 5) -> list[str]:
    return [p.document_id for p in coffer.search("notes", query, k).passages]


def test_the_relevant_english_document_ranks_first(coffer: Coffer, corpus: dict[str, str]) -> None:
    assert top(coffer, "nearest neighbour graphs")[0] == corpus["hnsw.md"]
    assert top(coffer, "sourdough starter")[0] == corpus["bread.md"]


def test_english_words_match_across_inflections(coffer: Coffer, corpus: dict[str, str]) -> None:
    assert top(coffer, "runs")[0] == corpus["running.md"]
    assert top(coffer, "graph")[0] == corpus["hnsw.md"]


def test_and_matches_rank_before_partial_matches(coffer: Coffer, corpus: dict[str, str]) -> None:
    ranked = top(coffer, "flour salt vectors")
    assert set(ranked) == {corpus["bread.md"], corpus["hnsw.md"]}
    both = top(coffer, "flour salt")
    assert both == [corpus["bread.md"]]


def test_each_passage_says_whether_it_holds_every_term_so_its_score_order_is_explained(
    coffer: Coffer, notes: str
) -> None:
    # A passage with every term once, in a long text, scores below one that repeats a single term:
    # it still ranks first (AND before OR), and the tier, not a bug, explains the scores' order.
    filler = " ".join(["Plain words about nothing in particular."] * 12)
    both = coffer.add_document(notes, "both.md", f"# Notes\n\n{filler} Sourdough needs salt. {filler}").document_id
    salty = coffer.add_document(notes, "salt.md", "# Salt\n\nSalt, salt, salt: salt brines.").document_id
    passages = coffer.search("notes", "sourdough salt", 5).passages
    assert [(p.document_id, p.matched_terms) for p in passages] == [(both, "all"), (salty, "some")]
    assert passages[1].score > passages[0].score  # what a user saw as scores out of order
    for tier in ("all", "some"):  # within a tier, the order is the score's
        scores = [p.score for p in passages if p.matched_terms == tier]
        assert scores == sorted(scores, reverse=True)
    assert coffer.search("notes", "salt", 5).passages[0].matched_terms is None  # one term: no tiers


def test_widening_past_a_common_term_still_fills_the_list(
    coffer: Coffer, notes: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # "cells" is in more chunks than COMMON_MATCHES: the rare terms fill a short list alone, and a
    # longer one still gets the chunks that match only the common term.
    monkeypatch.setattr(search, "COMMON_MATCHES", 3)
    common = [coffer.add_document(notes, f"cells{i}.md", f"# Cells {i}\n\nCells divide.").document_id for i in range(5)]
    mito = coffer.add_document(notes, "mito.md", "# Mitochondria\n\nMitochondria power cells.").document_id
    ribo = coffer.add_document(notes, "ribo.md", "# Ribosomes\n\nRibosomes build proteins.").document_id
    query = "cells mitochondria ribosomes"
    assert set(top(coffer, query, 2)) == {mito, ribo}
    ranked = top(coffer, query, 7)
    assert set(ranked[:2]) == {mito, ribo}
    assert set(ranked[2:]) == set(common)


@pytest.mark.parametrize("query", ["近邻搜索", "向量检索", "向量", "召回", "検索", "近傍探索"])
def test_cjk_queries_find_cjk_documents(coffer: Coffer, corpus: dict[str, str], query: str) -> None:
    expected = corpus["ja.md"] if query in ("検索", "近傍探索") else corpus["zh.md"]
    assert top(coffer, query)[0] == expected


def test_a_mixed_language_query_finds_the_chinese_document(coffer: Coffer, corpus: dict[str, str]) -> None:
    assert top(coffer, "HNSW 近邻搜索算法")[0] == corpus["zh.md"]


@pytest.mark.parametrize("query", ["Hauptstraße", "hauptstraße", "Fußgänger", "ﬁnal", "µm"])
def test_a_word_is_found_as_it_is_written_in_any_letters(coffer: Coffer, notes: str, query: str) -> None:
    # "ß" and "ﬁ" were case-folded to "ss" and "fi" in queries, while the index keeps them as written.
    text = "# Umleitung\n\nDie Hauptstraße ist gesperrt. Fußgänger: 5 µm. The ﬁnal report."
    doc = coffer.add_document(notes, "de.md", text)
    coffer.add_document(notes, "other.md", "# Other\n\nNothing to see here.")
    assert top(coffer, query) == [doc.document_id]


def test_a_partial_identifier_is_found_by_substring(coffer: Coffer, corpus: dict[str, str]) -> None:
    assert top(coffer, "user_name")[0] == corpus["code.md"]
    assert top(coffer, "ackend")[0] == corpus["code.md"]


@pytest.mark.parametrize(
    "query",
    [
        '"unbalanced AND (NEAR x* OR',
        "NOT",
        "a AND",
        "col:value",
        "^start",
        "x*",
        '"',
        "''",
        "(",
        ")",
        "-",
        "DROP TABLE documents; --",
        "' OR 1=1 --",
        "NEAR(a b, 2)",
        "\\",
        "{*}",
        "\u0000",
        "🙂",
    ],
)
def test_fts_syntax_in_a_query_is_plain_text(coffer: Coffer, corpus: dict[str, str], query: str) -> None:
    result = coffer.search("notes", query)
    assert result.strategy == "keyword"
    assert coffer.index.document_counts() == {"notes": len(CORPUS)}


def test_a_stray_short_word_does_not_match_inside_other_words(coffer: Coffer, corpus: dict[str, str]) -> None:
    assert top(coffer, "zz or qq") == []


def test_search_can_be_restricted_to_documents(coffer: Coffer, corpus: dict[str, str]) -> None:
    result = coffer.search("notes", "backend runner", 10, document_ids=[corpus["running.md"]])
    assert {p.document_id for p in result.passages} == {corpus["running.md"]}


def test_one_common_word_alone_returns_nothing_and_says_why(coffer: Coffer, corpus: dict[str, str]) -> None:
    result = coffer.search("notes", "The", 10)
    assert result.passages == []
    assert result.hint is not None
    assert "'the'" in result.hint
    assert "Add a word" in result.hint


def test_common_words_alone_are_matched_as_a_phrase(coffer: Coffer, notes: str) -> None:
    hamlet = coffer.add_document(notes, "hamlet.md", "# Hamlet\n\nTo be, or not to be, that is the question.")
    other = coffer.add_document(notes, "other.md", "# Other\n\nNot all who are to go will be there or here.")
    result = coffer.search(notes, "to be or not to be", 10)
    assert [p.document_id for p in result.passages] == [hamlet.document_id]
    assert result.passages[0].score > 0
    assert result.hint is not None
    assert "phrase" in result.hint
    # Words in another order are not the phrase: nothing comes back, and the hint says so.
    assert coffer.search(notes, "be to not or", 10).passages == []
    assert other.document_id not in top(coffer, "in is")
    # A content word with them: the common words are dropped and nothing needs explaining.
    assert coffer.search(notes, "the question", 10).hint is None


def test_a_query_of_symbols_alone_finds_the_passages_holding_them_and_says_how(coffer: Coffer, notes: str) -> None:
    arrow = coffer.add_document(notes, "arrow.md", "# Arrows\n\nThe → arrow points right; ★ marks a star.").document_id
    party_text = "# Party\n\nWe celebrated 🎉 twice 🎉 and rated it ≥ 4 ★."
    party = coffer.add_document(notes, "party.md", party_text).document_id
    coffer.add_document(notes, "plain.md", "# Plain\n\nNo symbols here, only words and -> once.")
    assert top(coffer, "→") == [arrow]
    assert top(coffer, "🎉") == [party]
    assert set(top(coffer, "★")) == {arrow, party}
    assert top(coffer, "★ ≥") == [party, arrow]  # all pieces first, then any, as for words
    found = coffer.search(notes, "🎉", 5)
    assert found.hint is not None
    assert "'🎉'" in found.hint
    assert "coffer__grep_knowledge" in found.hint
    # Nothing holds it: still an answer that says why, and what to use instead.
    missing = coffer.search(notes, "♫", 5)
    assert missing.passages == []
    assert missing.hint is not None
    assert "no passage holds '♫'" in missing.hint
    assert "coffer__grep_knowledge" in missing.hint
    assert coffer.search(notes, "\x00\x07", 5).hint is not None  # nothing to look for at all
    # A word beside the symbol is searched as before, with nothing to explain.
    assert coffer.search(notes, "→ arrow", 5).hint is None


def test_scores_are_positive_and_passages_carry_their_place(coffer: Coffer, corpus: dict[str, str]) -> None:
    [passage, *_] = coffer.search("notes", "navigable small world").passages
    assert passage.score > 0
    assert passage.position == 0
    assert passage.heading_path == ["HNSW"]
    assert passage.chunk_id == f"{passage.document_id}:0"
    assert passage.kb == "notes"


@pytest.mark.parametrize(("query", "top_k"), [("", 5), ("   ", 5), ("x" * 2001, 5), ("ok", 0), ("ok", 1001)])
def test_bad_search_arguments_are_refused(coffer: Coffer, notes: str, query: str, top_k: int) -> None:
    with pytest.raises(InvalidArgumentError):
        coffer.search(notes, query, top_k)


def test_grep_finds_lines_with_their_document_and_kb(coffer: Coffer, corpus: dict[str, str]) -> None:
    result = coffer.grep("notes", r"get_\w+_name")
    [hit] = result.hits
    assert (hit.document_id, hit.kb, hit.line) == (
        corpus["code.md"],
        "notes",
        "The get_user_name function lives in the backend service.",
    )


def test_grep_finds_accented_text_however_the_pattern_composes_it(coffer: Coffer, notes: str) -> None:
    # Documents are written composed (NFC); a pattern typed decomposed (e + U+0301) found nothing.
    doc = coffer.add_document(notes, "cv.md", "# CV\n\nMy r\u00e9sum\u00e9 is attached.").document_id
    for pattern in ("r\u00e9sum\u00e9", "re\u0301sume\u0301"):
        assert [h.document_id for h in coffer.grep(notes, pattern).hits] == [doc], ascii(pattern)


def test_grep_gives_the_same_hits_with_and_without_ripgrep(coffer: Coffer, corpus: dict[str, str], home) -> None:
    from coffer_mcp import load_settings

    with Coffer(load_settings(home=home, rg_path="")) as python_only:
        slow = python_only.grep("notes", "(?i)the|向量", 100)
    fast = coffer.grep("notes", "(?i)the|向量", 100)
    assert slow.engine == "python"
    assert [(h.path, h.line_number, h.line) for h in slow.hits] == [(h.path, h.line_number, h.line) for h in fast.hits]


def test_a_knowledge_bases_scores_depend_on_its_own_documents_only(
    coffer: Coffer, notes: str, home: Path, backend_settings: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 17: BM25 statistics per knowledge base. Another knowledge base's documents and a rebuild
    # of the index from the files leave a knowledge base's scores as they were. A multi-KB search
    # ranks as one collection of them (tests/index/test_port.py).
    monkeypatch.setattr(search, "COMMON_MATCHES", 3)  # "database" is common in "other", not in notes
    texts = {
        "backups.md": "# Backups\n\nBackups of the database are taken nightly and restored weekly.",
        "server.md": "# Server\n\nThe database server answers queries.",
        "sqlite.md": "# SQLite\n\nAn embedded database lives in one file.",
        "cats.md": "# Cats\n\nCats sleep most of the day.",
    }
    for name, text in texts.items():
        coffer.add_document(notes, name, text)

    def scored(searcher: Coffer, kbs: str | list[str] = notes) -> list[tuple[str, str, float]]:
        passages = searcher.search(kbs, "database backups weekly", 20).passages
        return [(p.kb, p.chunk_id, p.score) for p in passages]

    before = scored(coffer)
    assert len(before) == 3
    coffer.create_kb("other")
    for i in range(8):
        coffer.add_document("other", f"o{i}.md", f"# Other {i}\n\nThe database database holds backups, item {i}.")
    assert scored(coffer) == before
    merged = scored(coffer, [notes, "other"])
    assert {row[1] for row in merged if row[0] == notes} == {row[1] for row in before}
    assert merged == sorted(merged, key=lambda row: -row[2])

    _delete_index(coffer, home)
    with Coffer(load_settings(home=home, **backend_settings)) as rebuilt:
        rebuilt.reindex_all()
        assert scored(rebuilt) == before


def _delete_index(coffer: Coffer, home: Path) -> None:
    """Throw the whole index away (coffer.db, or the PostgreSQL tables): the files stay."""
    index: Any = coffer.index
    if isinstance(index, SqliteIndex):
        coffer.close()
        for path in index.path.parent.glob(index.path.name + "*"):
            path.unlink()
        return
    index.conn.execute("DROP SCHEMA public CASCADE")
    index.conn.execute("CREATE SCHEMA public")
    coffer.close()
