"""The index: derived, rebuildable rows behind one port (``port.Index``).

``open_index`` chooses the implementation; today the embedded SQLite one (``index.sqlite``).
``fts`` is the query analyzer every implementation shares.
"""

from __future__ import annotations

from pathlib import Path

from coffer_mcp.index.port import ChunkRow, DocumentRow, Index, IndexDiagnosis, KbCounts, PassageRow, pack_vector

__all__ = [
    "ChunkRow",
    "DocumentRow",
    "Index",
    "IndexDiagnosis",
    "KbCounts",
    "PassageRow",
    "open_index",
    "pack_vector",
]


def open_index(db_path: Path) -> Index:
    """The index of a Coffer home (connections open lazily, per thread)."""
    from coffer_mcp.index.sqlite import SqliteIndex

    return SqliteIndex(db_path)
