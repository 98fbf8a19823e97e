"""A ``DocumentFilter`` as a PostgreSQL condition on the ``documents`` row of a query.

The PostgreSQL twin of ``index.sqlite.filters``: every search and listing adds this condition to
its own statement (named parameters, prefixed ``f_``), so filtering happens inside the query.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from coffer_mcp.index.port import DocumentFilter

__all__ = ["document_condition", "filtered_chunks", "scope"]


def document_condition(where: DocumentFilter, alias: str = "d") -> tuple[str, dict[str, Any]]:
    """``(sql, params)``: the condition ``where`` puts on the documents row ``alias`` ("true" for none)."""
    parts: list[str] = []
    params: dict[str, Any] = {}
    if where.document_ids:
        parts.append(f"{alias}.id = ANY(%(f_ids)s::text[])")
        params["f_ids"] = list(where.document_ids)
    for i, tag in enumerate(where.tags):
        parts.append(f"{alias}.id IN (SELECT document_id FROM document_tags WHERE tag = %(f_tag{i})s)")
        params[f"f_tag{i}"] = tag
    if (paths := where.path_scope()) is not None:
        parts.append(f"({alias}.source_path = %(f_path)s OR starts_with({alias}.source_path, %(f_folder)s))")
        params["f_path"], params["f_folder"] = paths
    if where.formats:
        parts.append(f"ascii_lower({alias}.original_format) = ANY(%(f_formats)s::text[])")
        params["f_formats"] = list(where.formats)
    for name, column, operator in (
        ("created_after", "created_key", ">="),
        ("created_before", "created_key", "<"),
        ("updated_after", "updated_key", ">="),
        ("updated_before", "updated_key", "<"),
    ):
        value = getattr(where, name)
        if value is not None:
            parts.append(f"{alias}.{column} {operator} %(f_{name})s")
            params[f"f_{name}"] = value
    return (" AND ".join(parts) or "true"), params


def scope(kbs: Sequence[str], where: DocumentFilter) -> tuple[str, dict[str, Any]]:
    """The condition on chunks ``c`` (of documents ``d``) to be in ``kbs`` and let through by ``where``."""
    clause, params = "c.kb = ANY(%(kbs)s::text[])", {"kbs": list(kbs)}
    if not where:
        return clause, params
    condition, extra = document_condition(where)
    return f"{clause} AND {condition}", {**params, **extra}


def filtered_chunks(kbs: Sequence[str], where: DocumentFilter) -> tuple[str, dict[str, Any]]:
    """A subquery of the ids of the chunks of ``kbs`` that ``where`` lets through."""
    clause, params = scope(kbs, where)
    return f"SELECT c.id FROM chunks c JOIN documents d ON d.id = c.document_id WHERE {clause}", params
