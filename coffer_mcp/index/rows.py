"""Index rows from the database's rows: one mapping for both backends.

SQLite's ``sqlite3.Row`` and PostgreSQL's dict rows are both read by column name, and both backends
store the same columns the same way (JSON as text, tags as a JSON list, scopes as words), so a
``DocumentRow`` or a ``PassageRow`` is made here once, whichever backend read it.
"""

from __future__ import annotations

import json
from typing import Any

from coffer_mcp.index.oauth import OAuthClientRow, OAuthTokenRow
from coffer_mcp.index.port import AuditRow, DocumentRow, PassageRow

__all__ = [
    "audit_row",
    "client_row",
    "document_row",
    "maybe_document_row",
    "passage_row",
    "stored_location",
    "token_row",
]

Row = Any
"""A database row read by column name: a ``sqlite3.Row`` or a psycopg dict row (no common type)."""


def document_row(row: Row) -> DocumentRow:
    return DocumentRow(
        id=row["id"],
        kb=row["kb"],
        title=row["title"],
        original_filename=row["original_filename"],
        original_format=row["original_format"],
        source_sha256=row["source_sha256"],
        content_sha256=row["content_sha256"],
        source_mode=row["source_mode"],
        source_path=row["source_path"],
        conversion_engine=row["conversion_engine"],
        converted_at=row["converted_at"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        metadata=json.loads(row["metadata"] or "{}"),
        tags=tuple(json.loads(row["tags"] or "[]")),
        file_stamp=row["file_stamp"],
        chunk_params=row["chunk_params"],
        embed_pending=bool(row["embed_pending"]),
        embedding_model=row["embedding_model"],
        source_stamp=row["source_stamp"],
    )


def maybe_document_row(row: Row | None) -> DocumentRow | None:
    return None if row is None else document_row(row)


def passage_row(row: Row) -> PassageRow:
    return PassageRow(
        chunk_id=row["id"],
        document_id=row["document_id"],
        kb=row["kb"],
        position=row["position"],
        heading_path=json.loads(row["heading_path"]),
        text=row["text"],
        title=row["title"],
        score=float(row["score"]),
        source_location=stored_location(row["source_location"]),
        original_filename=row["original_filename"],
    )


def stored_location(stored: str | None) -> dict[str, Any] | None:
    """A chunk's stored ``source_location`` (JSON text, NULL when unknown)."""
    return json.loads(stored) if stored else None


def audit_row(row: Row) -> AuditRow:
    return AuditRow(
        row["at"], row["event"], row["kb"], row["document_id"], row["actor"], json.loads(row["details"] or "{}")
    )


def client_row(row: Row) -> OAuthClientRow:
    return OAuthClientRow(
        client_id=row["client_id"],
        name=row["name"],
        metadata=json.loads(row["metadata"] or "{}"),
        secret_sha256=row["secret_sha256"],
        created_at=row["created_at"],
        fetched_at=row["fetched_at"],
        approved_at=row["approved_at"],
    )


def token_row(row: Row) -> OAuthTokenRow:
    return OAuthTokenRow(
        token_sha256=row["token_sha256"],
        kind=row["kind"],
        grant_id=row["grant_id"],
        client_id=row["client_id"],
        subject=row["subject"],
        scopes=tuple(row["scopes"].split()),
        resource=row["resource"],
        expires_at=float(row["expires_at"]),
        created_at=row["created_at"],
        used_at=row["used_at"],
        details=json.loads(row["details"] or "{}"),
        client_name=row["client_name"],
    )
