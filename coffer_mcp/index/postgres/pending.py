"""A group commit's writes, held back to go as a few statements at its end (``PostgresIndex.batch``).

Inside a batch, ``upsert_document``, ``replace_chunks`` and ``audit`` add their rows here instead
of sending a statement each; ``flush`` writes them all: the documents in one statement (one per
set of columns), the replaced documents' old chunks deleted in one, every new chunk with its
postings and statistics in one, the audit records in one. A batch of 64 documents so costs the
server 4 statements, where it cost 192 (and as many updates of its knowledge base's statistics
row), and psycopg 4 calls.

The order of the writes is kept where it matters: the index flushes before any other statement
runs on the connection (a read, a vector write, a delete), and before a second write of a
document's row, or of its chunks, already held, so no statement ever sees the batch half-held and
a document is written once per flush. Within a flush the documents go first, the chunks (whose rows point at
them) next.
"""

from __future__ import annotations

from typing import Any

from coffer_mcp.index.postgres import queries as q
from coffer_mcp.index.postgres.connection import Connection
from coffer_mcp.models import Chunk

__all__ = ["PendingWrites"]


class PendingWrites:
    """The rows a batch has written so far and not sent (see the module docstring)."""

    def __init__(self) -> None:
        self._clear()

    def _clear(self) -> None:
        self._documents: dict[str, dict[str, Any]] = {}  # id -> document_values, in the order written
        self._chunks: dict[str, tuple[str, str, list[Chunk]]] = {}  # id -> (kb, id, chunks)
        self._stale: list[str] = []  # documents whose old chunks go before their new ones
        self._audit: list[dict[str, Any]] = []

    def __bool__(self) -> bool:
        return bool(self._documents or self._chunks or self._audit)

    def document(self, conn: Connection, values: dict[str, Any]) -> None:
        """Hold a document row (``queries.document_values``); one of the same document held already is
        sent first, with everything held."""
        if values["id"] in self._documents:
            self.flush(conn)
        self._documents[values["id"]] = values

    def chunks(self, conn: Connection, kb: str, doc_id: str, chunks: list[Chunk], *, fresh: bool) -> None:
        """Hold a document's new chunks (its old ones deleted first unless ``fresh``); chunks of the same
        document held already are sent first, with everything held."""
        if doc_id in self._chunks:
            self.flush(conn)
        self._chunks[doc_id] = (kb, doc_id, chunks)
        if not fresh:
            self._stale.append(doc_id)

    def hold_audit(self, entry: dict[str, Any]) -> None:
        """Hold an audit record (``queries.audit_entry``)."""
        self._audit.append(entry)

    def flush(self, conn: Connection) -> None:
        """Write everything held, in as few statements as the module docstring says, and forget it."""
        documents, chunks, stale, audit = self._documents, self._chunks, self._stale, self._audit
        self._clear()  # first: a flush that fails leaves nothing to send twice
        by_columns: dict[tuple[str, ...], list[dict[str, Any]]] = {}
        for values in documents.values():
            by_columns.setdefault(tuple(values), []).append(values)
        for rows in by_columns.values():
            q.upsert_documents(conn, rows)
        if chunks:
            q.replace_many_chunks(conn, list(chunks.values()), stale)
        q.insert_audit(conn, audit)
