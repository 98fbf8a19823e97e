"""The index in PostgreSQL: BM25 over a postings table for keywords, pgvector for vectors.

``PostgresIndex`` implements ``index.port.Index`` with the same semantics as ``SqliteIndex``, so
several Coffer servers can share one index. Each thread gets its own connection (autocommit;
``transaction()`` is one atomic unit); the schema is migrated once per index object, under an
advisory lock (``schema``). The drift check's stamps are cached until another write, by any
server, changes them (``stamps``). Keyword search ranks exactly as FTS5 does (``keyword``, ``tokens``),
vectors live in one pgvector table per model (``vectors``).

Every psycopg error leaves as a ``StoreError`` with a hint and without the password. A call that
finds its connection broken (the server restarted) is retried once on a new connection when it
ran outside a transaction; inside one, the error is raised and the next call reconnects.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, ParamSpec, TypeVar

import psycopg

from coffer_mcp.errors import StoreError
from coffer_mcp.index.oauth import OAuthClientRow, OAuthTokenRow
from coffer_mcp.index.port import (
    AuditRow,
    ChunkRow,
    DocumentRow,
    IndexDiagnosis,
    InvocationRow,
    KbCounts,
    Operator,
    PassageRow,
    Where,
    as_filter,
)
from coffer_mcp.index.postgres import keyword, locks, model_record, oauth, postings, vectors
from coffer_mcp.index.postgres import queries as q
from coffer_mcp.index.postgres.connection import (
    Connection,
    connect,
    display_connection,
    lost,
    refused,
    unicode_collation,
)
from coffer_mcp.index.postgres.pending import PendingWrites
from coffer_mcp.index.postgres.schema import migrate
from coffer_mcp.index.postgres.stamps import StampCache
from coffer_mcp.index.rows import audit_row, document_row, maybe_document_row, passage_row, stored_location
from coffer_mcp.models import Chunk
from coffer_mcp.store import StoreModel, StorePaths

__all__ = ["SETTLE_MIN_CHUNKS", "PostgresIndex"]

log = logging.getLogger(__name__)

SETTLE_MIN_CHUNKS = 1000

P = ParamSpec("P")
R = TypeVar("R")


def _mapped(method: Callable[P, R]) -> Callable[P, R]:
    """Run ``method`` with psycopg's errors mapped, retrying once on a connection found broken."""

    deferring = getattr(method, "_defers", False)

    @functools.wraps(method)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        index: PostgresIndex = args[0]  # type: ignore[assignment]
        for attempt in (1, 2):
            idle = not index._in_transaction()
            try:
                if not deferring:
                    index._flush()  # a batch's held writes go first: this statement sees them
                return method(*args, **kwargs)
            except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                if not index._drop_if_broken():
                    raise refused(index.url, exc) from exc  # the connection is fine: the statement failed
                if attempt == 2 or not idle:
                    raise lost(index.url, exc) from exc
            except psycopg.Error as exc:
                raise refused(index.url, exc) from exc
        raise AssertionError("unreachable")

    return call


def _deferred(method: Callable[P, R]) -> Callable[P, R]:
    """Mark a write a batch holds back (``pending``): ``_mapped`` sends no held write before it."""
    method._defers = True  # type: ignore[attr-defined]
    return method


class PostgresIndex:
    """The index in a PostgreSQL database with pgvector (see ``index.port.Index`` for each method)."""

    def __init__(self, url: str, *, store: StorePaths | None = None) -> None:
        """An index on the database at ``url``; with ``store``, the store it must belong to (``_claim``,
        at the first connection)."""
        self.url = url
        self.store = store
        self._local = threading.local()
        self._connections: list[Connection] = []
        self._guard = threading.Lock()
        self._migrated = False
        self._vector_version: str | None = None
        self._written = 0  # chunks and vectors written since the last settle(), by any thread
        self._vector_tables: set[str] = set()  # the tables those vectors went to
        self.stamps = StampCache()
        self._term_counts = keyword.TermCounts()
        self._unicode_collation: tuple[str | None] | None = None  # (found,) once looked up

    # -- lifecycle ---------------------------------------------------------------------------------

    @property
    def conn(self) -> Connection:
        """This thread's connection (opened on first use)."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._open()
            self._local.conn = conn
        return conn

    def _open(self) -> Connection:
        """A new connection, closed by ``close()``; the first one migrates the schema."""
        conn = connect(self.url)
        try:
            with self._guard:
                if not self._migrated:
                    migrate(conn)
                    if self.store is not None:
                        _claim(conn, self.store)
                    self._migrated = True
                self._connections.append(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def _collation(self) -> str | None:
        """The server's collation for lower-casing beyond ASCII (``connection.unicode_collation``)."""
        if self._unicode_collation is None:
            self._unicode_collation = (unicode_collation(self.conn),)
        return self._unicode_collation[0]

    def _in_transaction(self) -> bool:
        conn = getattr(self._local, "conn", None)
        return conn is not None and conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE

    def _drop_if_broken(self) -> bool:
        """Forget this thread's connection if it is no longer usable; whether it was."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            return True  # it never opened: connect() failed
        if not (conn.broken or conn.closed):
            return False
        self._local.conn = None
        self.stamps.forget()  # the server went away: its database may come back restored from a backup
        with self._guard:
            if conn in self._connections:
                self._connections.remove(conn)
        with contextlib.suppress(psycopg.Error):
            conn.close()
        return True

    def transaction(self) -> contextlib.AbstractContextManager[None]:
        return self._transaction(pipelined=False)

    def batch(self) -> contextlib.AbstractContextManager[None]:
        """One transaction whose statements are pipelined, and whose document, chunk and audit writes
        are held and sent together at its end (``pending``): a batch's documents wait for one round
        trip at the commit, not for several each, and cost the server a few statements in all."""
        return self._transaction(pipelined=True)

    @contextlib.contextmanager
    def _transaction(self, *, pipelined: bool) -> Iterator[None]:
        conn = self._connect_mapped()  # and sends what a batch around this transaction holds, first
        held, self._local.pending = getattr(self._local, "pending", None), None
        if pipelined and held is None and not self._in_transaction():
            self._local.pending = PendingWrites()
        try:
            with conn.pipeline() if pipelined else contextlib.nullcontext(), conn.transaction():
                yield
                self._flush()
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            if self._drop_if_broken():
                raise lost(self.url, exc) from exc
            raise refused(self.url, exc) from exc
        except psycopg.Error as exc:
            raise refused(self.url, exc) from exc
        finally:
            self._local.pending = held

    def _flush(self) -> None:
        """Send the writes this thread's batch holds, if any (inside its transaction)."""
        pending = self._pending()
        if pending:
            pending.flush(self.conn)

    def _pending(self) -> PendingWrites | None:
        """The writes this thread's batch holds; None outside a batch."""
        pending: PendingWrites | None = getattr(self._local, "pending", None)
        return pending

    @_mapped
    def _connect_mapped(self) -> Connection:
        return self.conn

    def check_home(self, *, connect: bool = True) -> bool:
        if self.store is None:
            return True
        if connect:
            self._connect_mapped()  # the first connection checks the store (``_claim``)
        return self._migrated

    def close(self) -> None:
        with self._guard:
            for conn in self._connections:
                with contextlib.suppress(psycopg.Error):
                    conn.close()
            self._connections.clear()
            self._local = threading.local()
            self._migrated = False
        self.stamps.forget()

    @contextlib.contextmanager
    def lock(self, name: str, *, timeout: float) -> Iterator[None]:
        """A session advisory lock on ``name``, on a connection kept for locks (see ``locks``)."""
        conn = self._take_lock(name, timeout)
        try:
            yield
        finally:
            try:
                locks.release(conn, name)
            except psycopg.Error:
                self._drop_lock_connection()  # the session is gone, and its locks with it

    def _take_lock(self, name: str, timeout: float) -> Connection:
        for attempt in (1, 2):
            reused = getattr(self._local, "lock_conn", None)
            try:
                conn = reused if reused is not None and not (reused.closed or reused.broken) else self._open()
                self._local.lock_conn = conn
                locks.acquire(conn, name, timeout)
            except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                self._drop_lock_connection()  # a dead session holds no lock: a new one may try again
                if attempt == 2 or reused is None:
                    raise lost(self.url, exc) from exc
            except psycopg.Error as exc:
                raise refused(self.url, exc) from exc
            else:
                return conn
        raise AssertionError("unreachable")

    def _drop_lock_connection(self) -> None:
        conn = getattr(self._local, "lock_conn", None)
        self._local.lock_conn = None
        if conn is not None:
            with self._guard:
                if conn in self._connections:
                    self._connections.remove(conn)
            with contextlib.suppress(psycopg.Error):
                conn.close()

    @_mapped
    def settle(self) -> None:
        """``VACUUM (ANALYZE)`` the posting, chunk and document tables, and the vector tables written to,
        once this index has written chunks and vectors amounting to a tenth of the chunks (at least
        ``SETTLE_MIN_CHUNKS``).

        Keyword search reads postings by index-only scans, which read the table too for every row on
        a page not yet marked all-visible, as every page written since the last vacuum is. Autovacuum
        gets there in its own time; right after a bulk write, at 100,000 chunks, an OR over a common
        word took 27-69 ms instead of 12-36 (docs/benchmarks.md). Pages written in the last few
        tenths of a second stay unmarked (their commits, which do not wait for the WAL flush, are
        not yet known to be durable) until autovacuum's next pass. ``SKIP_LOCKED``: a table another
        session is vacuuming is left to it. Left to autovacuum, the vacuum of the documents an
        embedding pass marked and the analysis of its vectors ran during the first searches after
        it: 0.3-1.6 s calls at 100,000 chunks (docs/benchmarks.md).

        Then, if the postings index takes far more pages than a fresh build would (``postings.loose``;
        a bulk ingest or rebuild leaves it half-full), it is rebuilt concurrently (``postings.pack``):
        at 100,000 chunks 457 MB became 262 MB, 10 s, and cold-cache searches read half the pages.
        """
        written = self._written
        if written < SETTLE_MIN_CHUNKS:
            return
        row = self.conn.execute("SELECT coalesce(sum(chunks), 0) AS n FROM keyword_stats").fetchone()
        if row is not None and written * 10 < row["n"]:
            return
        tables = ["postings", "chunks", "documents", *sorted(self._vector_tables)]
        self._written, self._vector_tables = 0, set()
        self.conn.execute(f"VACUUM (ANALYZE, SKIP_LOCKED) {', '.join(tables)}")
        if postings.loose(self.conn):
            self._pack_postings()

    def _pack_postings(self) -> None:
        """Rebuild the postings index if no other process is at it; a failure only costs the gain."""
        started = time.monotonic()
        try:
            with self.lock("index:pack-postings", timeout=0):
                log.info("packing the keyword index (postings_pkey), which bulk writes left loose")
                postings.pack(self.conn)
                log.info("keyword index packed in %.1f s", time.monotonic() - started)
        except StoreError as exc:
            if exc.code != "busy":
                log.warning("the keyword index was left as it was (%s)", exc)
        except psycopg.Error as exc:
            log.warning("the keyword index was left as it was: %s", exc)

    @_mapped
    def diagnose(self) -> IndexDiagnosis:
        conn = self.conn
        row = conn.execute(
            "SELECT current_setting('server_version') AS server, "
            "(SELECT extversion FROM pg_extension WHERE extname = 'vector') AS vector"
        ).fetchone()
        assert row is not None
        problems = [] if row["vector"] else ["pgvector is not installed in the database: vector search cannot work."]
        if row["vector"] and not _iterative(row["vector"]):
            problems.append(
                f"pgvector {row['vector']} has no iterative scans (0.8+): a KNN filtered to a knowledge "
                "base may return fewer results than asked."
            )
        return IndexDiagnosis(
            backend="postgres",
            binding=f"psycopg {psycopg.__version__}",
            version=row["server"],
            keyword_index=True,
            vector_version=row["vector"],
            problems=problems,
        )

    # -- knowledge bases ---------------------------------------------------------------------------

    @_mapped
    def kb_stamps(self) -> dict[str, str]:
        return q.kb_stamps(self.conn)

    @_mapped
    def upsert_kb(self, name: str, config: Any, stamp: str) -> None:
        q.upsert_kb(self.conn, name, config, stamp)

    @_mapped
    def delete_kb(self, name: str) -> None:
        q.delete_kb(self.conn, name)

    @_mapped
    def vector_kbs(self) -> set[str]:
        return q.vector_kbs(self.conn)

    @_mapped
    def kb_counts(self, name: str, vector_model: str | None) -> KbCounts:
        return KbCounts(*q.kb_counts(self.conn, name, vector_model))

    @_mapped
    def document_counts(self) -> dict[str, int]:
        return q.document_counts(self.conn)

    # -- documents ---------------------------------------------------------------------------------

    @_mapped
    def doc_stamps(self, kb: str) -> dict[str, tuple[str, str]]:
        return self.stamps.read(self.conn, kb)

    @_mapped
    def get_document(self, kb: str, doc_id: str) -> DocumentRow | None:
        return maybe_document_row(q.get_document(self.conn, kb, doc_id))

    @_mapped
    def find_document(
        self, kb: str, *, filename: str | None = None, source_path: str | None = None, source_url: str | None = None
    ) -> DocumentRow | None:
        given = {"filename": filename, "source_path": source_path, "source_url": source_url}
        by = [key for key, value in given.items() if value]
        if len(by) != 1:
            raise ValueError(f"find_document takes exactly one criterion, got {by}")
        return maybe_document_row(q.find_document(self.conn, kb, by[0], given[by[0]] or ""))

    @_mapped
    def find_by_source_paths(self, kb: str, source_paths: Sequence[str]) -> dict[str, DocumentRow]:
        rows = q.find_by_source_paths(self.conn, kb, source_paths)
        return {row["asked"]: document_row({k: v for k, v in row.items() if k != "asked"}) for row in rows}

    @_mapped
    def documents_named(self, kb: str, filename: str, limit: int) -> list[DocumentRow]:
        return [document_row(row) for row in q.documents_named(self.conn, kb, filename, limit)]

    @_mapped
    def documents(self, kb: str, *, with_source_path: bool = False) -> list[DocumentRow]:
        return [document_row(row) for row in q.documents(self.conn, kb, with_source_path=with_source_path)]

    @_mapped
    def list_documents(
        self, kb: str, title_filter: str, limit: int, offset: int, where: Where = None
    ) -> tuple[list[DocumentRow], int]:
        rows, total = q.list_documents(self.conn, kb, title_filter, limit, offset, as_filter(where), self._collation())
        return [document_row(row) for row in rows], total

    @_mapped
    def document_ids(self, kb: str, where: Where) -> list[str]:
        return q.document_ids(self.conn, kb, as_filter(where))

    @_mapped
    def recent_documents(self, limit: int) -> list[DocumentRow]:
        return [document_row(row) for row in q.recent_documents(self.conn, limit)]

    @_mapped
    def ids_outside(self, kb: str, among: Sequence[str]) -> dict[str, str]:
        return q.ids_outside(self.conn, kb, among)

    @_mapped
    @_deferred
    def upsert_document(self, row: DocumentRow, *, embedding: bool = False) -> None:
        columns = (*q.DOC_COLUMNS, *q.EMBEDDING_COLUMNS) if embedding else q.DOC_COLUMNS
        values = q.document_values({column: getattr(row, column) for column in columns})
        pending = self._pending()
        if pending is None:
            q.upsert_documents(self.conn, [values])
        else:
            pending.document(self.conn, values)

    @_mapped
    def delete_document(self, doc_id: str) -> None:
        q.delete_document(self.conn, doc_id)

    @_mapped
    def remember_source_stamps(self, stamps: Sequence[tuple[str, str, str]]) -> None:
        q.remember_source_stamps(self.conn, stamps)

    # -- chunks ------------------------------------------------------------------------------------

    @_mapped
    @_deferred
    def replace_chunks(self, kb: str, doc_id: str, chunks: Iterable[Chunk], *, fresh: bool = False) -> int:
        pending = self._pending()
        if pending is None:
            written = q.replace_chunks(self.conn, kb, doc_id, chunks, fresh=fresh)
        else:
            chunks = list(chunks)
            pending.chunks(self.conn, kb, doc_id, chunks, fresh=fresh)
            written = len(chunks)
        self._written += written
        return written

    @_mapped
    def chunk_texts(self, doc_id: str) -> list[tuple[int, str]]:
        return q.chunk_texts(self.conn, doc_id)

    @_mapped
    def chunk_window(self, doc_id: str, first: int, last: int) -> tuple[list[ChunkRow], int | None]:
        rows, end = q.chunk_window(self.conn, doc_id, first, last)
        return [
            ChunkRow(r["position"], json.loads(r["heading_path"]), r["text"], stored_location(r["source_location"]))
            for r in rows
        ], end

    @_mapped
    def chunk_count(self, *, kb: str | None = None, doc_id: str | None = None) -> int:
        if doc_id is not None:
            return q.document_chunk_count(self.conn, doc_id)
        if kb is None:
            raise ValueError("chunk_count needs kb or doc_id")
        return q.chunk_count(self.conn, kb)

    # -- keyword search ----------------------------------------------------------------------------

    @_mapped
    def keyword_search(
        self,
        terms: Sequence[str],
        operator: Operator,
        kbs: Sequence[str],
        where: Where,
        limit: int,
    ) -> list[PassageRow]:
        if not terms:
            return []
        rows = keyword.search(self.conn, terms, operator, kbs, as_filter(where), limit, self._term_counts)
        return [passage_row(row) for row in rows]

    @_mapped
    def matches_more_than(self, term: str, count: int, kbs: Sequence[str] | None = None) -> bool:
        return keyword.matches_more_than(self.conn, term, count, kbs)

    @_mapped
    def substring_search(
        self,
        terms: Sequence[str],
        operator: Operator,
        kbs: Sequence[str],
        where: Where,
        limit: int,
        scan_limit: int,
    ) -> list[PassageRow]:
        rows = keyword.substring_search(
            self.conn, terms, operator, kbs, as_filter(where), limit, scan_limit, self._collation()
        )
        return [passage_row(row) for row in rows]

    # -- vectors -----------------------------------------------------------------------------------

    @_mapped
    def set_embedding(self, doc_id: str, *, pending: bool, model: str | None) -> None:
        q.set_embedding(self.conn, doc_id, pending=pending, model=model)

    @_mapped
    def clear_kb_embeddings(self, kb: str) -> None:
        q.clear_kb_embeddings(self.conn, kb)

    @_mapped
    def pending_documents(self, kb: str, identity: str, *, limit: int = -1) -> list[str]:
        return q.pending_documents(self.conn, kb, identity, limit=limit)

    @_mapped
    def embedded_models(self, kb: str) -> list[str]:
        return q.embedded_models(self.conn, kb)

    @_mapped
    def vector_dimensions(self, identity: str) -> int | None:
        return vectors.dimensions_of(self.conn, identity)

    @_mapped
    def vector_status(self, kb: str) -> dict[str, dict[str, Any]]:
        return {
            model: {
                "vectors": count,
                "search": "hnsw" if dimensions <= vectors.HNSW_MAX_DIMENSIONS else "exact",
                "built_at": None,
            }
            for model, (count, dimensions) in vectors.kb_vector_counts(self.conn, kb).items()
        }

    @_mapped
    def store_vectors(
        self, identity: str, dimensions: int, kb: str, rows: Sequence[tuple[int, Sequence[float] | bytes]]
    ) -> None:
        conn = self.conn
        table = vectors.model_table(conn, identity, dimensions)
        assert table is not None  # created when missing
        vectors.delete_chunk_vectors(conn, [chunk_id for chunk_id, _ in rows])
        vectors.store_vectors(conn, table, dimensions, kb, rows)
        self._written += len(rows)
        self._vector_tables.add(table)

    @_mapped
    def stored_vectors(self, identity: str, chunk_ids: Sequence[int]) -> dict[int, bytes]:
        table = vectors.table_of(self.conn, identity)
        return {} if table is None else vectors.stored_vectors(self.conn, table, chunk_ids)

    @_mapped
    def knn(
        self, identity: str, query: Sequence[float], kbs: Sequence[str], where: Where, limit: int
    ) -> list[PassageRow]:
        table = vectors.model_table(self.conn, identity, len(query), create=False)
        if table is None:
            return []
        scope = as_filter(where)
        rows = vectors.knn(self.conn, table, query, kbs, scope, limit, iterative=self._iterative_scans())
        return [passage_row(row) for row in rows]

    def _iterative_scans(self) -> bool:
        if self._vector_version is None:
            row = self.conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
            self._vector_version = row["extversion"] if row else ""
        return _iterative(self._vector_version)

    # -- the store's embedding model ---------------------------------------------------------------

    @_mapped
    def store_model(self) -> StoreModel | None:
        return model_record.recorded(self.conn)

    @_mapped
    def record_store_model(self, model: StoreModel, *, replace: bool = False) -> StoreModel:
        return model_record.record(self.conn, model, replace=replace)

    @_mapped
    def vector_models(self) -> dict[str, int]:
        return model_record.vector_models(self.conn)

    @_mapped
    def drop_model(self, identity: str) -> None:
        self._vector_tables.discard(model_record.drop_model(self.conn, identity) or "")

    # -- verification and repair -------------------------------------------------------------------

    @_mapped
    def count_vectors(self, identity: str, chunk_ids: Sequence[int]) -> int | None:
        return vectors.count_vectors(self.conn, identity, chunk_ids)

    @_mapped
    def check_shared(self) -> list[str]:
        return postings.check(self.conn) + vectors.orphans(self.conn)

    @_mapped
    def repair_shared(self) -> None:
        with self.conn.transaction():
            postings.rebuild(self.conn)
            vectors.drop_orphans(self.conn)

    # -- history -----------------------------------------------------------------------------------

    @_mapped
    @_deferred
    def audit(
        self, event: str, kb: str, actor: str, document_id: str | None = None, details: dict[str, Any] | None = None
    ) -> None:
        entry = q.audit_entry(event, kb, actor, document_id, details)
        pending = self._pending()
        if pending is None:
            q.insert_audit(self.conn, [entry])
        else:
            pending.hold_audit(entry)

    @_mapped
    def record_invocation(
        self, tool: str, client: str, duration_ms: float, outcome: str, error_code: str | None, *, at: str | None = None
    ) -> None:
        q.record_invocation(self.conn, tool, client, duration_ms, outcome, error_code, at)

    @_mapped
    def audit_events(self, kb: str | None = None, *, limit: int = 1000) -> list[AuditRow]:
        return [audit_row(r) for r in q.audit_events(self.conn, kb, limit)]

    @_mapped
    def document_events(self, kb: str, document_id: str, event: str) -> list[AuditRow]:
        return [audit_row(r) for r in q.document_events(self.conn, kb, document_id, event)]

    @_mapped
    def invocations(self, *, limit: int = 1000) -> list[InvocationRow]:
        return [
            InvocationRow(r["at"], r["tool"], r["client"], r["duration_ms"], r["outcome"], r["error_code"])
            for r in q.invocations(self.conn, limit)
        ]

    # -- the authorization server (index/oauth.py) --------------------------------------------------

    @_mapped
    def save_oauth_client(self, client: OAuthClientRow) -> None:
        oauth.save_client(self.conn, client)

    @_mapped
    def oauth_client(self, client_id: str) -> OAuthClientRow | None:
        return oauth.client(self.conn, client_id)

    @_mapped
    def oauth_clients(self) -> list[OAuthClientRow]:
        return oauth.clients(self.conn)

    @_mapped
    def approve_oauth_client(self, client_id: str, at: str) -> None:
        oauth.approve_client(self.conn, client_id, at)

    @_mapped
    def delete_oauth_client(self, client_id: str) -> bool:
        return oauth.delete_client(self.conn, client_id)

    @_mapped
    def add_oauth_token(self, token: OAuthTokenRow) -> None:
        oauth.add_token(self.conn, token)

    @_mapped
    def oauth_token(self, token_sha256: str) -> OAuthTokenRow | None:
        return oauth.token(self.conn, token_sha256)

    @_mapped
    def use_oauth_token(self, token_sha256: str, at: str) -> OAuthTokenRow | None:
        return oauth.use_token(self.conn, token_sha256, at)

    @_mapped
    def oauth_tokens(self) -> list[OAuthTokenRow]:
        return oauth.tokens(self.conn)

    @_mapped
    def revoke_oauth_grant(self, grant_id: str) -> int:
        return oauth.revoke_grant(self.conn, grant_id)

    @_mapped
    def purge_oauth(self, now: float, unapproved_before: str) -> int:
        return oauth.purge(self.conn, now, unapproved_before)

    @_mapped
    def owner_secret(self) -> str | None:
        return oauth.owner_secret(self.conn)

    @_mapped
    def set_owner_secret(self, secret: str | None, at: str) -> None:
        oauth.set_owner_secret(self.conn, secret, at)


def _claim(conn: Connection, store: StorePaths) -> None:
    """Make sure the database is the index of ``store`` (claimed by it when no store has, as long as
    the knowledge bases it indexes are among the store's), then make the store's folders.

    The database is shared by every server of a store. One whose ``COFFER_HOME`` is another store
    (an empty one, a volume not mounted, a typo) would otherwise take the knowledge bases it lacks
    for deleted ones, and documents without files for removed ones: their rows and vectors gone
    for every server. Such a home is left as it was: its store id is written only once its claim
    is made, before that claim commits (a server of the same home that sees the claim finds it).

    Raises:
        StoreError: ``other_store``; nothing was changed.
    """
    for _ in range(2):
        with conn.transaction():
            claimed = q.claimed_store(conn)
            if claimed is None:
                claimed = _claim_for(conn, store)
        if claimed is not None:
            break
    if claimed is None or claimed != store.recorded_store_id():
        raise _other_store(conn, f"is the index of another store ({claimed})")
    store.make_folders()


def _claim_for(conn: Connection, store: StorePaths) -> str | None:
    """Claim the unclaimed database for ``store`` (in the caller's transaction); the store it is the
    index of now, or None when a store id appeared in the home meanwhile (a server of this home that
    died before its claim committed: then its claim is rolled back, to be made again with that id)."""
    indexed = set(q.kb_stamps(conn))
    if indexed and not indexed & set(store.kb_names()):
        raise _other_store(conn, f"indexes knowledge bases ({', '.join(sorted(indexed))}) that it has none of")
    recorded = store.recorded_store_id()
    mine = recorded or store.new_store_id()
    claimed = q.claim_store(conn, mine)
    if recorded is None and claimed == mine and not store.record_store_id(mine):
        raise psycopg.Rollback
    return claimed


def _other_store(conn: Connection, what: str) -> StoreError:
    return StoreError(
        f"The PostgreSQL index at {display_connection(conn)} {what}: this COFFER_HOME is another store.",
        code="other_store",
        hint="Point COFFER_HOME at the store the other servers share (the folder whose store-id file "
        "names this database's store), or COFFER_DATABASE_URL at an empty database for this store; "
        "nothing was changed.",
    )


def _iterative(version: str) -> bool:
    """Whether pgvector ``version`` has iterative index scans (0.8.0 and later)."""
    try:
        major, minor = (int(part) for part in version.split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (0, 8)
