"""Reconcile-on-read's document stamps, cached per knowledge base until its generation moves.

The drift check compares every file's stamp with its row's before a read
(``indexing.reindex.detect_drift``). Reading the rows costs every document of the knowledge base
(at 28,891 documents 70-80 ms of a 340 ms check; the rest is stat-ing the files); here they are
read again only when the knowledge base's ``generation`` has moved since, so an unchanged
knowledge base costs one primary-key lookup (0.3 ms).

A trigger gives the knowledge base a new, never reused generation in every transaction that adds,
deletes or restamps one of its documents (``schema``, ``0004_kb_generations``), whoever writes it.
So stamps cached with the generation they were read at are the committed rows as long as the
generation is unchanged, provided the generation is read *before* the rows (a write committed
between the two leaves rows newer than their generation: read again next time, never stale) and
only what was read outside a transaction is kept (inside one it may yet be rolled back, or written
again without the generation moving twice).
"""

from __future__ import annotations

import threading

import psycopg

from coffer_mcp.index.postgres.connection import Connection
from coffer_mcp.index.postgres.queries import doc_stamps, kb_generation

__all__ = ["StampCache", "Stamps"]

Stamps = dict[str, tuple[str, str]]


class StampCache:
    """``doc_stamps`` per knowledge base, each kept with the generation it was read at."""

    def __init__(self) -> None:
        self._cached: dict[str, tuple[int, Stamps]] = {}
        self._guard = threading.Lock()
        self.full_reads = 0
        """How many times the rows were read from the database (for tests and benchmarks)."""

    def read(self, conn: Connection, kb: str) -> Stamps:
        """``{document_id: (file_stamp, chunk_params)}`` of ``kb``: a copy the caller may change."""
        generation = kb_generation(conn, kb)  # first: see the module's docstring
        if generation is None:
            self.forget(kb)
            return {}  # no knowledge base row, no documents (they reference it)
        with self._guard:
            cached = self._cached.get(kb)
        if cached is not None and cached[0] == generation:
            return dict(cached[1])
        stamps = doc_stamps(conn, kb)
        with self._guard:
            self.full_reads += 1
            if conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
                self._cached[kb] = (generation, stamps)
        return dict(stamps)

    def forget(self, kb: str | None = None) -> None:
        """Drop ``kb``'s stamps, or every knowledge base's (a new connection may be to a restored database)."""
        with self._guard:
            if kb is None:
                self._cached.clear()
            else:
                self._cached.pop(kb, None)
