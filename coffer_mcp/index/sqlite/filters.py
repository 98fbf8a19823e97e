"""A ``DocumentFilter`` as a SQLite condition on the ``documents`` row of a query.

Every search and listing adds this condition to its own statement, so filtering happens inside the
query: tags through ``document_tags`` (one row per tag key, looked up by its primary key), times
through the comparable ``created_key`` / ``updated_key`` columns (``timeutil.parse_time`` text).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from coffer_mcp.index.port import DocumentFilter

__all__ = ["document_condition", "filtered_chunks", "scope"]


def document_condition(where: DocumentFilter, alias: str = "d") -> tuple[str, list[Any]]:
    """``(sql, params)``: the condition ``where`` puts on the documents row ``alias`` ("1" for none)."""
    parts: list[str] = []
    params: list[Any] = []
    if where.document_ids:
        parts.append(f"{alias}.id IN ({_marks(where.document_ids)})")
        params.extend(where.document_ids)
    for tag in where.tags:
        parts.append(f"{alias}.id IN (SELECT document_id FROM document_tags WHERE tag = ?)")
        params.append(tag)
    if (paths := where.path_scope()) is not None:
        path, folder = paths
        parts.append(f"({alias}.source_path = ? OR substr({alias}.source_path, 1, length(?)) = ?)")
        params.extend((path, folder, folder))
    if where.formats:
        parts.append(f"lower({alias}.original_format) IN ({_marks(where.formats)})")
        params.extend(where.formats)
    for column, operator, value in (
        ("created_key", ">=", where.created_after),
        ("created_key", "<", where.created_before),
        ("updated_key", ">=", where.updated_after),
        ("updated_key", "<", where.updated_before),
    ):
        if value is not None:
            parts.append(f"{alias}.{column} {operator} ?")
            params.append(value)
    return (" AND ".join(parts) or "1"), params


def scope(kbs: Sequence[str], where: DocumentFilter) -> tuple[str, list[Any]]:
    """The condition on chunks ``c`` (of documents ``d``) to be in ``kbs`` and let through by ``where``."""
    clause = f"c.kb IN ({_marks(kbs)})"
    if not where:
        return clause, list(kbs)
    condition, params = document_condition(where)
    return f"{clause} AND {condition}", [*kbs, *params]


def filtered_chunks(kbs: Sequence[str], where: DocumentFilter) -> tuple[str, list[Any]]:
    """A subquery of the ids of the chunks of ``kbs`` that ``where`` lets through."""
    clause, params = scope(kbs, where)
    return f"SELECT c.id FROM chunks c JOIN documents d ON d.id = c.document_id WHERE {clause}", params


def _marks(values: Sequence[str]) -> str:
    return ", ".join("?" * len(values))
