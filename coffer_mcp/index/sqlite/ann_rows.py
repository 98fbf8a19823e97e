"""The ANN cache's bookkeeping in SQLite: which graph file holds which (model, KB), and a change log.

``ann_files`` has one row per (embedding model, knowledge base) that has a graph: its file's
name, size, SHA-256 and vector count, and ``seq``: the file holds exactly the vectors as they
were once every change up to ``seq`` was committed. A row whose ``name`` is empty is a graph
being built. ``ann_changes`` logs, in the transaction that writes them, the chunk ids whose
vectors were stored or deleted in a (model, KB) that has a row; a reader brings its graph up to
date by applying the changes after its ``seq`` (see ``ann``). The log of a partition is pruned
up to the ``seq`` of its newest file, so a reader whose file was replaced reloads instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from coffer_mcp.index.sqlite.db import Connection
from coffer_mcp.timeutil import utc_now

__all__ = [
    "FileRow",
    "changes_since",
    "delete_kb",
    "file_rows",
    "head",
    "log_changes",
    "logged_models",
    "mark_building",
    "record_file",
    "snapshot",
]


@dataclass(frozen=True, slots=True)
class FileRow:
    model_id: int
    kb: str
    name: str
    seq: int
    vectors: int
    size: int
    sha256: str
    built_at: str


def file_rows(conn: Connection, model_id: int | None = None, kbs: Sequence[str] | None = None) -> list[FileRow]:
    """The ``ann_files`` rows, of one model and some knowledge bases when given."""
    sql = "SELECT model_id, kb, name, seq, vectors, size, sha256, built_at FROM ann_files WHERE 1"
    params: list[Any] = []
    if model_id is not None:
        sql += " AND model_id = ?"
        params.append(model_id)
    if kbs is not None:
        sql += f" AND kb IN ({', '.join('?' * len(kbs))})"
        params.extend(kbs)
    return [FileRow(*row) for row in conn.execute(sql + " ORDER BY model_id, kb", params)]


def logged_models(conn: Connection, kb: str) -> set[int]:
    """The models whose vectors of ``kb`` have a graph (built or being built): their writes are logged."""
    return {row[0] for row in conn.execute("SELECT model_id FROM ann_files WHERE kb = ?", (kb,))}


def log_changes(conn: Connection, model_id: int, kb: str, chunk_ids: Iterable[int]) -> None:
    """Log that these chunks' vectors of ``model_id`` changed (call only for a logged model)."""
    conn.executemany(
        "INSERT INTO ann_changes (model_id, kb, chunk_id) VALUES (?, ?, ?)",
        [(model_id, kb, chunk_id) for chunk_id in chunk_ids],
    )


def changes_since(conn: Connection, model_id: int, kb: str, seq: int) -> tuple[list[int], int]:
    """The distinct chunk ids changed after ``seq`` in one partition, and the last change's seq."""
    rows = conn.execute(
        "SELECT seq, chunk_id FROM ann_changes WHERE model_id = ? AND kb = ? AND seq > ? ORDER BY seq",
        (model_id, kb, seq),
    ).fetchall()
    if not rows:
        return [], seq
    return list(dict.fromkeys(row[1] for row in rows)), rows[-1][0]


def head(conn: Connection) -> int:
    """The seq of the last change ever logged (never reused: the log is AUTOINCREMENT)."""
    row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'ann_changes'").fetchone()
    return 0 if row is None else int(row[0])


def mark_building(conn: Connection, model_id: int, kb: str) -> None:
    """Give a partition without a row an empty one, so its writes are logged from now on."""
    conn.execute(
        "INSERT OR IGNORE INTO ann_files (model_id, kb, name, seq, vectors, size, sha256, built_at) "
        "VALUES (?, ?, '', ?, 0, 0, '', '')",
        (model_id, kb, head(conn)),
    )


def record_file(conn: Connection, row: FileRow) -> str | None:
    """Point a partition at a new file (unless a newer one was recorded meanwhile); prune its log.

    Returns the name of the file it replaced ('' or None: none), or None when nothing changed.
    """
    old = conn.execute(
        "SELECT name, seq FROM ann_files WHERE model_id = ? AND kb = ?", (row.model_id, row.kb)
    ).fetchone()
    if old is not None and old[0] and old[1] > row.seq:
        return None
    conn.execute(
        "INSERT OR REPLACE INTO ann_files (model_id, kb, name, seq, vectors, size, sha256, built_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (row.model_id, row.kb, row.name, row.seq, row.vectors, row.size, row.sha256, row.built_at or utc_now()),
    )
    conn.execute("DELETE FROM ann_changes WHERE model_id = ? AND kb = ? AND seq <= ?", (row.model_id, row.kb, row.seq))
    return "" if old is None else old[0]


def delete_kb(conn: Connection, kb: str) -> None:
    """Forget a knowledge base's graphs and their logs (their files are collected later)."""
    conn.execute("DELETE FROM ann_files WHERE kb = ?", (kb,))
    conn.execute("DELETE FROM ann_changes WHERE kb = ?", (kb,))


@contextmanager
def snapshot(conn: Connection, *, write: bool = False) -> Iterator[None]:
    """One consistent view (a read or ``BEGIN IMMEDIATE`` write transaction), or the caller's own."""
    if conn.in_transaction:
        yield
        return
    conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
