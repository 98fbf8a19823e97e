"""The index: derived, rebuildable rows behind one port (``port.Index``).

``open_index`` chooses the implementation: the embedded SQLite one (``index.sqlite``), or PostgreSQL
(``index.postgres``, whose driver is the optional ``postgres`` extra).
``fts`` is the query analyzer every implementation shares.
"""

from __future__ import annotations

from coffer_mcp.errors import ConfigError
from coffer_mcp.index.oauth import OAuthClientRow, OAuthTokenRow, TokenKind
from coffer_mcp.index.port import (
    AuditRow,
    ChunkRow,
    DocumentFilter,
    DocumentRow,
    Index,
    IndexDiagnosis,
    InvocationRow,
    KbCounts,
    PassageRow,
    Where,
    as_filter,
    pack_vector,
)
from coffer_mcp.settings import Settings

__all__ = [
    "AuditRow",
    "ChunkRow",
    "DocumentFilter",
    "DocumentRow",
    "Index",
    "IndexDiagnosis",
    "InvocationRow",
    "KbCounts",
    "OAuthClientRow",
    "OAuthTokenRow",
    "PassageRow",
    "TokenKind",
    "Where",
    "as_filter",
    "open_index",
    "pack_vector",
]


def open_index(settings: Settings, *, short_lived: bool = False) -> Index:
    """The index the settings choose (connections open lazily, per thread, on first use).

    ``short_lived``: for one command of the command line, whose searches must not start work that
    outlives it (an ANN graph's build, cut off at its exit, would be left half-recorded).
    """
    if settings.index_backend == "postgres":
        try:
            from coffer_mcp.index.postgres import PostgresIndex
        except ImportError as exc:  # psycopg, the only library the backend needs, is an extra
            raise ConfigError(
                f"The postgres index backend needs the psycopg driver, which cannot be imported here ({exc}).",
                hint="Install Coffer's postgres extra: pip install -e '.[postgres]' in its clone, or pip install "
                "'psycopg[binary]>=3.2' in Coffer's environment; or go back to the embedded index (unset "
                "COFFER_INDEX_BACKEND).",
            ) from exc
        from coffer_mcp.store import StorePaths

        assert settings.database_url is not None  # load_settings requires it
        return PostgresIndex(settings.database_url.get_secret_value(), store=StorePaths(settings.home))
    from coffer_mcp.index.sqlite import SqliteIndex

    return SqliteIndex(settings.home / "coffer.db", ann_threshold=settings.ann_min_chunks, ann_builds=not short_lived)
