"""The full-text index of the SQLite index: one contentless FTS5 table per knowledge base.

FTS5's ``bm25()`` takes its statistics (the number of rows, their mean length, how many rows hold
a phrase) from the table it ranks. One table shared by every knowledge base made a knowledge base's
scores move whenever another one got or lost documents, and made them differ after ``coffer.db``
was deleted until every knowledge base had been read again. With a table per knowledge base, a
knowledge base's scores depend on its own chunks only, and are the same after any rebuild.

A search of several knowledge bases ranks as one collection of them would: a phrase's IDF comes
from their chunks together (``idf``, from each table's ``statistics``), so that a phrase every
chunk of a two-document knowledge base holds (IDF 1e-6 there, FTS5's floor) weighs what it weighs
among all the chunks searched; a chunk's length still counts against its own knowledge base's
mean (``sqlite.queries``).

``keyword_tables`` maps a knowledge base to its table ``fts_<id>`` (a name may hold any
character; it is never put into SQL). A table is created at a knowledge base's first chunk and
dropped with the knowledge base. Each table has one column, the chunk's headings and text as
``fts.search_text`` renders them, and rowids that are chunk ids; the text lives once, in
``chunks``, so a delete hands FTS5 the same rendering again.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from coffer_mcp.errors import counted
from coffer_mcp.index.fts import match_expression, search_text
from coffer_mcp.index.sqlite.db import Connection, database_errors

__all__ = [
    "body",
    "drop",
    "fill",
    "idf",
    "index_rows",
    "matches_more_than",
    "ranked",
    "rebuild",
    "statistics",
    "tables",
    "unindex_rows",
    "verify",
]

_TOKENIZER = "porter unicode61 remove_diacritics 2"
_AVERAGES = 1  # the rowid of FTS5's record of a table's rows and tokens in ``<table>_data``


def body(headings: str, text: str) -> str:
    """What a chunk's full-text entry holds."""
    return search_text(f"{headings}\n{text}")


def tables(conn: Connection, kbs: Sequence[str] | None = None) -> dict[str, str]:
    """``{kb: table}`` of the knowledge bases that have a table (of ``kbs``, or all)."""
    if kbs is None:
        rows = conn.execute("SELECT kb, id FROM keyword_tables ORDER BY kb").fetchall()
    else:
        marks = ", ".join("?" * len(kbs))
        rows = conn.execute(f"SELECT kb, id FROM keyword_tables WHERE kb IN ({marks}) ORDER BY kb", list(kbs))
    return {row[0]: _name(row[1]) for row in rows}


def _name(table_id: int) -> str:
    return f"fts_{int(table_id)}"


def _table(conn: Connection, kb: str) -> str:
    """The table of ``kb``, created (mapped, and made if absent) on first use."""
    row = conn.execute("SELECT id FROM keyword_tables WHERE kb = ?", (kb,)).fetchone()
    if row is None:
        table_id = conn.execute("SELECT coalesce(max(id), 0) + 1 FROM keyword_tables").fetchone()[0]
        conn.execute("INSERT INTO keyword_tables (kb, id) VALUES (?, ?)", (kb, table_id))
    else:
        table_id = row[0]
    name = _name(table_id)
    conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS {name} USING fts5(body, content='', tokenize='{_TOKENIZER}')")
    return name


def index_rows(conn: Connection, kb: str, rows: Iterable[tuple[int, str, str]]) -> None:
    """Add ``(chunk id, headings, text)`` rows of ``kb`` to its table."""
    entries = [(chunk_id, body(headings, text)) for chunk_id, headings, text in rows]
    if entries:
        conn.executemany(f"INSERT INTO {_table(conn, kb)} (rowid, body) VALUES (?, ?)", entries)


def unindex_rows(conn: Connection, kb: str, rows: Iterable[tuple[int, str, str]]) -> None:
    """Remove ``(chunk id, headings, text)`` rows of ``kb`` (a contentless delete needs the text)."""
    table = tables(conn, [kb]).get(kb)
    entries = [(chunk_id, body(headings, text)) for chunk_id, headings, text in rows]
    if table is not None and entries and _exists(conn, table):
        conn.executemany(f"INSERT INTO {table} ({table}, rowid, body) VALUES ('delete', ?, ?)", entries)


def drop(conn: Connection, kb: str) -> None:
    """Drop the table of a knowledge base that is deleted."""
    table = tables(conn, [kb]).get(kb)
    if table is not None:
        conn.execute(f"DROP TABLE IF EXISTS {table}")
        conn.execute("DELETE FROM keyword_tables WHERE kb = ?", (kb,))


def ranked(conn: Connection, table: str, expression: str, depth: int) -> list[tuple[int, float]]:
    """The best ``depth`` ``(chunk id, -bm25)`` of one table, best first."""
    sql = f"SELECT rowid, -rank FROM {table} WHERE {table} MATCH ? ORDER BY rank LIMIT ?"
    return [(row[0], row[1]) for row in conn.execute(sql, (expression, depth))]


def statistics(conn: Connection, table: str, phrases: Sequence[str]) -> tuple[int, int, list[int]]:
    """What FTS5's ``bm25()`` takes from a table: its rows and their tokens (from FTS5's own record of
    them), and how many rows hold each phrase."""
    row = conn.execute(f"SELECT block FROM {table}_data WHERE id = ?", (_AVERAGES,)).fetchone()
    rows, tokens = [*_varints(row[0]), 0, 0][:2] if row is not None and row[0] else (0, 0)
    sql = f"SELECT count(*) FROM {table} WHERE {table} MATCH ?"
    return rows, tokens, [conn.execute(sql, (match_expression([phrase], "AND"),)).fetchone()[0] for phrase in phrases]


def idf(rows: int, matches: int) -> float:
    """FTS5's IDF of a phrase that ``matches`` of ``rows`` rows hold (1e-6 where it would be ≤ 0).

    The two counts come from separate statements (``statistics``), and a writer may commit between
    them: a phrase then seems to match more rows than there are (a search beside a writer failed
    with "math domain error"). It counts as matching all of them.
    """
    matches = min(matches, rows)
    ratio = (rows - matches + 0.5) / (matches + 0.5)
    return math.log(ratio) if ratio > 1 else 1e-6


def _varints(data: bytes) -> list[int]:
    """SQLite's variable-length integers (FTS5 writes its records with them)."""
    values, i = [], 0
    while i < len(data):
        value = 0
        for k in range(9):
            byte, i = data[i], i + 1
            if k == 8:
                value = (value << 8) | byte
                break
            value = (value << 7) | (byte & 0x7F)
            if not byte & 0x80:
                break
        values.append(value)
    return values


def matches_more_than(conn: Connection, expression: str, count: int, kbs: Sequence[str] | None = None) -> bool:
    """Whether more than ``count`` chunks (of ``kbs``, or any) match: a bounded, unranked walk."""
    seen = 0
    for table in tables(conn, kbs).values():
        sql = f"SELECT count(*) FROM (SELECT 1 FROM {table} WHERE {table} MATCH ? LIMIT ?)"
        seen += conn.execute(sql, (expression, count + 1 - seen)).fetchone()[0]
        if seen > count:
            return True
    return False


# -- building and checking -----------------------------------------------------------------------


def fill(conn: Connection, batch: int = 2000) -> int:
    """Create and fill the table of every knowledge base that has chunks, from ``chunks`` (in
    batches: a million chunks' text is never in memory at once)."""
    kbs = [row[0] for row in conn.execute("SELECT DISTINCT kb FROM chunks ORDER BY kb")]
    done = 0
    for kb in kbs:
        after = -1
        while True:
            sql = "SELECT id, headings, text FROM chunks WHERE kb = ? AND id > ? ORDER BY id LIMIT ?"
            rows = conn.execute(sql, (kb, after, batch)).fetchall()
            if not rows:
                break
            index_rows(conn, kb, ((row[0], row[1], row[2]) for row in rows))
            after, done = rows[-1][0], done + len(rows)
    return done


def rebuild(conn: Connection) -> int:
    """Drop every full-text table (mapped or stray) and build them again from ``chunks``."""
    for table in _stray(conn) | set(tables(conn).values()):
        conn.execute(f"DROP TABLE IF EXISTS {table}")
    conn.execute("DELETE FROM keyword_tables")
    return fill(conn)


def verify(conn: Connection) -> list[str]:
    """Problems of the full-text tables: their integrity, and rowids ⇔ chunk ids, per knowledge base."""
    mapped = tables(conn)
    with_chunks = {row[0] for row in conn.execute("SELECT DISTINCT kb FROM chunks")}
    problems = [f"full-text index of {kb!r}: missing" for kb in sorted(with_chunks - set(mapped))]
    for kb, table in mapped.items():
        problems += [f"full-text index of {kb!r}: {problem}" for problem in _verify_table(conn, kb, table)]
    stray = _stray(conn) - set(mapped.values())
    if stray:
        problems.append(f"full-text index: {len(stray)} tables of no knowledge base")
    return problems


def _verify_table(conn: Connection, kb: str, table: str) -> list[str]:
    if not _exists(conn, table):
        return ["missing"]
    problems: list[str] = []
    try:
        conn.execute(f"INSERT INTO {table} ({table}, rank) VALUES ('integrity-check', 0)")
    except database_errors() as exc:
        problems.append(str(exc))
    indexed = {row[0] for row in conn.execute(f"SELECT rowid FROM {table}")}
    chunk_ids = {row[0] for row in conn.execute("SELECT id FROM chunks WHERE kb = ?", (kb,))}
    if indexed - chunk_ids:
        problems.append(f"{counted(len(indexed - chunk_ids), 'entry', 'entries')} without a chunk")
    if chunk_ids - indexed:
        problems.append(f"{counted(len(chunk_ids - indexed), 'chunk')} not indexed")
    return problems


def _exists(conn: Connection, table: str) -> bool:
    row = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)).fetchone()
    return row is not None


def _stray(conn: Connection) -> set[str]:
    """Every full-text table in the file (``fts_<id>``, without FTS5's shadow tables)."""
    rows: Any = conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name GLOB 'fts_[0-9]*' AND name NOT GLOB 'fts_*_*'"
    )
    return {row[0] for row in rows}
