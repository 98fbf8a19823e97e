"""The index: one connection factory with sqlite-vec, migrations, query building."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from coffer_mcp.index.fts import analyze, match_expression, search_text
from coffer_mcp.index.sqlite.db import binding, connect, vec_version
from coffer_mcp.index.sqlite.schema import MIGRATIONS, migrate


def test_every_connection_loads_sqlite_vec(tmp_path: Path) -> None:
    conn = connect(tmp_path / "x.db")
    assert binding().can_load_extensions, "no SQLite binding that can load extensions: vector search would be dead"
    assert vec_version(conn) is not None
    conn.execute("CREATE VIRTUAL TABLE v USING vec0(embedding float[3])")


def test_connections_use_wal_and_foreign_keys(tmp_path: Path) -> None:
    conn = connect(tmp_path / "x.db")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] >= 10_000


def test_migrations_apply_once_even_when_racing(tmp_path: Path) -> None:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            migrate(connect(tmp_path / "x.db"))
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    conn = connect(tmp_path / "x.db")
    assert not errors
    assert conn.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
    assert [r[0] for r in conn.execute("SELECT name FROM migrations")] == [name for name, _ in MIGRATIONS]


def test_queries_are_split_into_words_and_cjk_runs() -> None:
    terms = analyze('Vector "search" AND 向量检索, NEAR(x)')
    assert terms.words == ["vector", "search", "and", "near", "x"]
    assert terms.cjk_runs == ["向量检索"]
    assert terms.index_terms() == ["vector", "search", "near", "x", "向量", "量检", "检索"]


def test_stopword_only_queries_become_a_phrase_and_single_characters_keep_their_terms() -> None:
    assert analyze("to be or not to be").index_terms() == ["to be or not to be"]  # one phrase
    assert analyze("The").index_terms() == []  # nothing to rank by
    assert analyze("the 向量").index_terms() == ["向量"]
    assert analyze("向").index_terms() == ["向"]
    assert analyze("的 向量").index_terms() == ["向量"]


def test_a_query_of_symbols_alone_is_kept_as_typed_for_the_substring_scan() -> None:
    assert analyze("→").index_terms() == []
    assert analyze(" ★  ≥ ★ ").substring_terms() == ["★", "≥"]
    assert analyze("🎉").only_symbols
    # Any word, number or CJK character makes it an ordinary query: the symbols are separators.
    assert analyze("→ arrow").literals == []
    assert analyze("≥ 4").literals == []
    assert analyze("→ 向").substring_terms() == ["向"]
    # Characters no indexed text holds (cleaning drops them; PostgreSQL refuses them) are not looked for.
    assert analyze("\x00 ★\x07\ud800").literals == ["★"]
    assert analyze("\x00").substring_terms() == []


def test_cjk_text_is_indexed_as_bigrams_and_other_text_as_is() -> None:
    assert search_text("近邻搜索 and HNSW") == " 近邻 邻搜 搜索  and HNSW"
    assert search_text("x的y") == "x 的 y"


def test_match_expressions_quote_every_term() -> None:
    assert match_expression(['a"b', "OR"], "AND") == '"a""b" AND "OR"'
    with pytest.raises(ValueError, match="NOT"):
        match_expression(["x"], "NOT")


def test_a_missing_or_stray_full_text_table_is_reported_and_repaired(tmp_path: Path) -> None:
    from coffer_mcp.index.sqlite import SqliteIndex, keyword
    from tests.index.test_port import add, doc, kb, search

    index = SqliteIndex(tmp_path / "coffer.db")
    kb(index, "notes")
    kb(index, "odd 'name\"; DROP TABLE chunks; --")  # never put into SQL
    add(index, doc("doc-01", "notes"), "alpha beta")
    add(index, doc("doc-02", "odd 'name\"; DROP TABLE chunks; --"), "alpha gamma")
    tables = keyword.tables(index.conn)
    assert sorted(tables) == ["notes", "odd 'name\"; DROP TABLE chunks; --"]
    before = search(index, "alpha")
    index.conn.execute(f"DROP TABLE {tables['notes']}")
    index.conn.execute("CREATE VIRTUAL TABLE fts_99 USING fts5(body, content='')")
    problems = index.check_shared()
    assert "full-text index of 'notes': missing" in problems, problems
    assert "full-text index: 1 tables of no knowledge base" in problems, problems
    index.repair_shared()
    assert index.check_shared() == []
    assert search(index, "alpha") == before
    index.close()
