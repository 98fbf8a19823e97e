"""The embedded index: one SQLite file with FTS5 for keywords and sqlite-vec for vectors.

``SqliteIndex`` implements ``index.port.Index`` over ``coffer.db``. Each thread gets its own
connection (SQLite connections are not shared across threads here); the schema is migrated once,
by the first connection. The SQL itself lives in ``queries`` (documents, chunks, keyword search,
history), ``keyword`` (one FTS5 table per knowledge base: BM25 from its own statistics, several searched as one),
``vectors`` (one sqlite-vec table per embedding model) and ``schema`` (migrations).
Big knowledge bases search their vectors through HNSW graphs kept beside the file (``ann``).
"""

from __future__ import annotations

import contextlib
import json
import math
import threading
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from coffer_mcp.errors import EmbeddingError, StoreError
from coffer_mcp.index.fts import match_expression
from coffer_mcp.index.oauth import OAuthClientRow, OAuthTokenRow
from coffer_mcp.index.port import (
    AuditRow,
    ChunkRow,
    DocumentFilter,
    DocumentRow,
    IndexDiagnosis,
    InvocationRow,
    KbCounts,
    Operator,
    PassageRow,
    Where,
    as_filter,
)
from coffer_mcp.index.rows import audit_row, document_row, maybe_document_row, passage_row, stored_location
from coffer_mcp.index.sqlite import model_record, oauth, vectors
from coffer_mcp.index.sqlite import queries as q
from coffer_mcp.index.sqlite.ann import DEFAULT_THRESHOLD, GRAPHS_OFF, AnnCache, Partition
from coffer_mcp.index.sqlite.db import Connection, binding, connect, database_errors, vec_missing, vec_version
from coffer_mcp.index.sqlite.hnsw import available as hnsw_available
from coffer_mcp.index.sqlite.schema import migrate
from coffer_mcp.index.sqlite.viewer import ViewerError
from coffer_mcp.models import Chunk
from coffer_mcp.store import StoreModel

__all__ = ["SqliteIndex", "database_errors"]

MAX_FILTERED_CANDIDATES = 10_000
"""The most ANN candidates a filtered search asks a graph for before it scans the filtered chunks."""


class SqliteIndex:
    """The index in one SQLite file (see ``index.port.Index`` for what each method promises)."""

    def __init__(
        self,
        path: Path,
        *,
        ann_threshold: int = DEFAULT_THRESHOLD,
        ann_background: bool = True,
        ann_builds: bool = True,
    ) -> None:
        """``ann_threshold``: knowledge bases with at least this many chunks search vectors through
        an ANN graph (0: never); ``ann_background``: build graphs in a background thread (else at
        the search that needs one); ``ann_builds`` off: searches never build one (``AnnCache``)."""
        self.path = path
        self.ann = AnnCache(path, threshold=ann_threshold, background=ann_background, builds=ann_builds)
        self._local = threading.local()
        self._connections: list[Connection] = []
        self._guard = threading.Lock()
        self._migrated = False

    # -- lifecycle ---------------------------------------------------------------------------------

    @property
    def conn(self) -> Connection:
        """This thread's connection (opened, and the schema migrated, on first use)."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = connect(self.path)
            with self._guard:
                if not self._migrated:
                    self._migrate(conn)
                    self._migrated = True
                self._connections.append(conn)
            self._local.conn = conn
        return conn

    def _migrate(self, conn: Connection) -> None:
        try:
            migrate(conn)
        except database_errors() as exc:
            raise StoreError(
                f"The index database {self.path} is unusable: {exc}.",
                hint="The index is rebuildable: move coffer.db away and run 'coffer kb reindex --all'.",
            ) from exc

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        with q.write(self.conn):
            yield

    def batch(self) -> contextlib.AbstractContextManager[None]:
        return self.transaction()  # SQLite's statements cost no round trip: one transaction is all a batch needs

    def close(self) -> None:
        self.ann.close()
        with self._guard:
            for conn in self._connections:
                with contextlib.suppress(*database_errors()):
                    conn.close()
            self._connections.clear()
            self._local = threading.local()
            self._migrated = False

    def lock(self, name: str, *, timeout: float) -> contextlib.AbstractContextManager[None]:
        # One file, one machine: the file lock Coffer already holds excludes every other process.
        return contextlib.nullcontext()

    def check_home(self, *, connect: bool = True) -> bool:
        return True  # the index is a file of the home: whoever opens it owns the home

    def settle(self) -> None:
        """Nothing to do: FTS5 and sqlite-vec read a table the same after a bulk write (and a new
        ANALYZE could change the plans the benchmarks measured)."""

    def diagnose(self) -> IndexDiagnosis:
        chosen = binding()
        conn = self.conn
        vec = vec_version(conn)
        problems = [] if vec is not None else [f"Vector search cannot work: {vec_missing()}."]
        return IndexDiagnosis(
            backend="sqlite",
            binding=chosen.name,
            version=chosen.sqlite_version,
            keyword_index=q.has_fts5(conn),
            vector_version=vec,
            problems=problems,
            notes=[] if hnsw_available() else [GRAPHS_OFF],
        )

    def _need_vectors(self) -> None:
        """Refuse a vector read or write without sqlite-vec: searches then degrade to keyword."""
        if vec_version(self.conn) is None:
            raise EmbeddingError(
                f"Vector search is unavailable: {vec_missing()}.",
                hint="Install it where coffer runs; keyword search and grep keep working without it.",
            )

    # -- knowledge bases ---------------------------------------------------------------------------

    def kb_stamps(self) -> dict[str, str]:
        return q.kb_stamps(self.conn)

    def upsert_kb(self, name: str, config: Any, stamp: str) -> None:
        q.upsert_kb(self.conn, name, config, stamp)

    def delete_kb(self, name: str) -> None:
        q.delete_kb(self.conn, name)

    def vector_kbs(self) -> set[str]:
        return q.vector_kbs(self.conn)

    def kb_counts(self, name: str, vector_model: str | None) -> KbCounts:
        return KbCounts(*q.kb_counts(self.conn, name, vector_model))

    def document_counts(self) -> dict[str, int]:
        return q.document_counts(self.conn)

    # -- documents ---------------------------------------------------------------------------------

    def doc_stamps(self, kb: str) -> dict[str, tuple[str, str]]:
        return q.doc_stamps(self.conn, kb)

    def get_document(self, kb: str, doc_id: str) -> DocumentRow | None:
        return maybe_document_row(q.get_document(self.conn, kb, doc_id))

    def find_document(
        self, kb: str, *, filename: str | None = None, source_path: str | None = None, source_url: str | None = None
    ) -> DocumentRow | None:
        given = {"filename": filename, "source_path": source_path, "source_url": source_url}
        by = [key for key, value in given.items() if value]
        if len(by) != 1:
            raise ValueError(f"find_document takes exactly one criterion, got {by}")
        return maybe_document_row(q.find_document(self.conn, kb, by[0], given[by[0]] or ""))

    def find_by_source_paths(self, kb: str, source_paths: Sequence[str]) -> dict[str, DocumentRow]:
        rows = [document_row(row) for row in q.find_by_source_paths(self.conn, kb, source_paths)]
        return {row.source_path: row for row in rows if row.source_path is not None}

    def documents_named(self, kb: str, filename: str, limit: int) -> list[DocumentRow]:
        return [document_row(row) for row in q.documents_named(self.conn, kb, filename, limit)]

    def documents(self, kb: str, *, with_source_path: bool = False) -> list[DocumentRow]:
        return [document_row(row) for row in q.documents(self.conn, kb, with_source_path=with_source_path)]

    def list_documents(
        self, kb: str, title_filter: str, limit: int, offset: int, where: Where = None
    ) -> tuple[list[DocumentRow], int]:
        rows, total = q.list_documents(self.conn, kb, title_filter, limit, offset, as_filter(where))
        return [document_row(row) for row in rows], total

    def document_ids(self, kb: str, where: Where) -> list[str]:
        return q.document_ids(self.conn, kb, as_filter(where))

    def recent_documents(self, limit: int) -> list[DocumentRow]:
        return [document_row(row) for row in q.recent_documents(self.conn, limit)]

    def ids_outside(self, kb: str, among: Sequence[str]) -> dict[str, str]:
        return q.ids_outside(self.conn, kb, among)

    def upsert_document(self, row: DocumentRow, *, embedding: bool = False) -> None:
        columns = (*q.DOC_COLUMNS, *q.EMBEDDING_COLUMNS) if embedding else q.DOC_COLUMNS
        q.upsert_document(self.conn, {column: getattr(row, column) for column in columns})

    def delete_document(self, doc_id: str) -> None:
        q.delete_document(self.conn, doc_id)

    def remember_source_stamps(self, stamps: Sequence[tuple[str, str, str]]) -> None:
        q.remember_source_stamps(self.conn, stamps)

    # -- chunks ------------------------------------------------------------------------------------

    def replace_chunks(self, kb: str, doc_id: str, chunks: Iterable[Chunk], *, fresh: bool = False) -> int:
        return q.replace_chunks(self.conn, kb, doc_id, chunks, fresh=fresh)

    def chunk_texts(self, doc_id: str) -> list[tuple[int, str]]:
        return q.chunk_texts(self.conn, doc_id)

    def chunk_window(self, doc_id: str, first: int, last: int) -> tuple[list[ChunkRow], int | None]:
        rows, end = q.chunk_window(self.conn, doc_id, first, last)
        return [
            ChunkRow(r["position"], json.loads(r["heading_path"]), r["text"], stored_location(r["source_location"]))
            for r in rows
        ], end

    def chunk_count(self, *, kb: str | None = None, doc_id: str | None = None) -> int:
        if doc_id is not None:
            return q.document_chunk_count(self.conn, doc_id)
        if kb is None:
            raise ValueError("chunk_count needs kb or doc_id")
        return q.chunk_count(self.conn, kb)

    # -- keyword search ----------------------------------------------------------------------------

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
        rows = q.fts_search(self.conn, terms, operator, kbs, as_filter(where), limit)
        return [passage_row(row) for row in rows]

    def matches_more_than(self, term: str, count: int, kbs: Sequence[str] | None = None) -> bool:
        return q.fts_matches_more_than(self.conn, match_expression([term], "AND"), count, kbs)

    def substring_search(
        self,
        terms: Sequence[str],
        operator: Operator,
        kbs: Sequence[str],
        where: Where,
        limit: int,
        scan_limit: int,
    ) -> list[PassageRow]:
        rows = q.substring_search(self.conn, terms, operator, kbs, as_filter(where), limit, scan_limit)
        return [passage_row(row) for row in rows]

    # -- vectors -----------------------------------------------------------------------------------

    def set_embedding(self, doc_id: str, *, pending: bool, model: str | None) -> None:
        q.set_embedding(self.conn, doc_id, pending=pending, model=model)

    def clear_kb_embeddings(self, kb: str) -> None:
        q.clear_kb_embeddings(self.conn, kb)

    def pending_documents(self, kb: str, identity: str, *, limit: int = -1) -> list[str]:
        return vectors.pending_documents(self.conn, kb, identity, limit=limit)

    def embedded_models(self, kb: str) -> list[str]:
        return q.embedded_models(self.conn, kb)

    def vector_dimensions(self, identity: str) -> int | None:
        return vectors.dimensions_of(self.conn, identity)

    def store_vectors(
        self, identity: str, dimensions: int, kb: str, rows: Sequence[tuple[int, Sequence[float] | bytes]]
    ) -> None:
        self._need_vectors()
        table = vectors.model_table(self.conn, identity, dimensions)
        assert table is not None  # created when missing
        vectors.delete_vectors(self.conn, [chunk_id for chunk_id, _ in rows], kb, keep=table)  # other models'
        vectors.store_vectors(self.conn, table, kb, rows)

    def stored_vectors(self, identity: str, chunk_ids: Sequence[int]) -> dict[int, bytes]:
        table = vectors.table_of(self.conn, identity)
        if table is None or vec_version(self.conn) is None:  # vectors stored before sqlite-vec went away
            return {}
        return vectors.stored_vectors(self.conn, table, chunk_ids)

    def knn(
        self, identity: str, query: Sequence[float], kbs: Sequence[str], where: Where, limit: int
    ) -> list[PassageRow]:
        self._need_vectors()
        conn, scope = self.conn, as_filter(where)
        table = vectors.model_table(conn, identity, len(query), create=False)
        if table is None:
            return []
        parts, scan = self.ann.ready(conn, table, kbs)
        if not parts:  # every knowledge base scanned: one query, exactly as without graphs
            return [passage_row(row) for row in vectors.knn(conn, table, query, kbs, scope, limit)]
        graphed = [part.kb for part in parts]
        rows = list(vectors.knn(conn, table, query, scan, scope, limit)) if scan else []
        if scope:
            rows += self._filtered_ann(table, query, parts, scope, limit)
        else:
            unusable: tuple[type[Exception], ...] = (OverflowError, ValueError, *database_errors())
            try:
                near = vectors.rescore(conn, table, query, self.ann.candidates(parts, query, limit), graphed, limit)
            except unusable:  # keys that are no chunk's from a graph file that changed; its viewer ended
                near = []
            if len(near) < min(limit, sum(part.size() for part in parts)):
                # Fewer than the graphs hold: a file changed under its memory map (a backup tool writing
                # over it, or cutting it short). Its checksum is checked again at the next search; the
                # scan answers.
                self.ann.distrust(parts)
                near = list(vectors.knn(conn, table, query, graphed, scope, limit))
            rows += near
        rows.sort(key=lambda row: (row["distance"], row["document_id"], row["position"]))
        return [passage_row(row) for row in rows[:limit]]

    def _filtered_ann(
        self, table: str, query: Sequence[float], parts: list[Partition], where: DocumentFilter, limit: int
    ) -> list[Any]:
        """The nearest chunks ``where`` lets through in graphed partitions: always ``limit`` when there are.

        A filter that leaves no more chunks than a graph's threshold is answered by the scan of
        those chunks (exact, and as fast as a knowledge base that small). A wider one asks the
        graph for more candidates, as many more as the filter leaves out, keeps those it lets
        through; when they are too few, the scan of the filtered chunks answers instead.
        """
        conn, graphed = self.conn, [part.kb for part in parts]
        matching = q.count_chunks(conn, graphed, where)
        if matching <= max(self.ann.threshold, limit):
            return list(vectors.knn(conn, table, query, graphed, where, limit))
        total = sum(part.size() for part in parts)
        wanted = min(MAX_FILTERED_CANDIDATES, math.ceil(2 * limit * total / matching))
        try:
            candidates = self.ann.candidates(parts, query, limit, count=wanted)
        except ViewerError:  # its file was cut short under it, say: checked again at the next search
            self.ann.distrust(parts)
            candidates = {}
        rows = vectors.rescore(conn, table, query, candidates, graphed, limit, where)
        if len(rows) < limit:
            return list(vectors.knn(conn, table, query, graphed, where, limit))
        return rows

    def vector_status(self, kb: str) -> dict[str, dict[str, Any]]:
        return {
            model: {
                "vectors": info["vectors"],
                "search": "ann" if info["ann"] else "exact",
                "built_at": info["built_at"],
            }
            for model, info in self.ann_status(kb).items()
        }

    def ann_status(self, kb: str) -> dict[str, dict[str, Any]]:
        """``{model identity: {"vectors": n, "ann": bool, "built_at": str | None}}`` of a knowledge
        base: how many vectors it has of each model, and whether its searches use an ANN graph."""
        return self.ann.status(self.conn, kb)

    def build_ann(self, identity: str, kb: str) -> bool:
        """Build the ANN graph of one model's vectors of ``kb`` afresh, now (False: the model has no
        vectors, or another process is building it)."""
        table = vectors.table_of(self.conn, identity)
        return table is not None and self.ann.build(table, kb, self.conn, fresh=True)

    # -- the store's embedding model ---------------------------------------------------------------

    def store_model(self) -> StoreModel | None:
        return model_record.recorded(self.conn)

    def record_store_model(self, model: StoreModel, *, replace: bool = False) -> StoreModel:
        return model_record.record(self.conn, model, replace=replace)

    def vector_models(self) -> dict[str, int]:
        return model_record.vector_models(self.conn)

    def drop_model(self, identity: str) -> None:
        model_record.drop_model(self.conn, identity)

    # -- verification and repair -------------------------------------------------------------------

    def count_vectors(self, identity: str, chunk_ids: Sequence[int]) -> int | None:
        return vectors.count_vectors(self.conn, identity, chunk_ids)

    def check_shared(self) -> list[str]:
        return q.verify_fts(self.conn) + vectors.orphans(self.conn) + self.ann.check(self.conn)

    def repair_shared(self) -> None:
        q.rebuild_fts(self.conn)
        vectors.drop_orphans(self.conn)
        self.ann.repair(self.conn)

    # -- history -----------------------------------------------------------------------------------

    def audit(
        self, event: str, kb: str, actor: str, document_id: str | None = None, details: dict[str, Any] | None = None
    ) -> None:
        q.audit(self.conn, event, kb, actor, document_id, details)

    def record_invocation(
        self, tool: str, client: str, duration_ms: float, outcome: str, error_code: str | None, *, at: str | None = None
    ) -> None:
        q.record_invocation(self.conn, tool, client, duration_ms, outcome, error_code, at)

    def audit_events(self, kb: str | None = None, *, limit: int = 1000) -> list[AuditRow]:
        return [audit_row(r) for r in q.audit_events(self.conn, kb, limit)]

    def document_events(self, kb: str, document_id: str, event: str) -> list[AuditRow]:
        return [audit_row(r) for r in q.document_events(self.conn, kb, document_id, event)]

    def invocations(self, *, limit: int = 1000) -> list[InvocationRow]:
        return [
            InvocationRow(r["at"], r["tool"], r["client"], r["duration_ms"], r["outcome"], r["error_code"])
            for r in q.invocations(self.conn, limit)
        ]

    # -- the authorization server (index/oauth.py) --------------------------------------------------

    def save_oauth_client(self, client: OAuthClientRow) -> None:
        oauth.save_client(self.conn, client)

    def oauth_client(self, client_id: str) -> OAuthClientRow | None:
        return oauth.client(self.conn, client_id)

    def oauth_clients(self) -> list[OAuthClientRow]:
        return oauth.clients(self.conn)

    def approve_oauth_client(self, client_id: str, at: str) -> None:
        oauth.approve_client(self.conn, client_id, at)

    def delete_oauth_client(self, client_id: str) -> bool:
        return oauth.delete_client(self.conn, client_id)

    def add_oauth_token(self, token: OAuthTokenRow) -> None:
        oauth.add_token(self.conn, token)

    def oauth_token(self, token_sha256: str) -> OAuthTokenRow | None:
        return oauth.token(self.conn, token_sha256)

    def use_oauth_token(self, token_sha256: str, at: str) -> OAuthTokenRow | None:
        return oauth.use_token(self.conn, token_sha256, at)

    def oauth_tokens(self) -> list[OAuthTokenRow]:
        return oauth.tokens(self.conn)

    def revoke_oauth_grant(self, grant_id: str) -> int:
        return oauth.revoke_grant(self.conn, grant_id)

    def purge_oauth(self, now: float, unapproved_before: str) -> int:
        return oauth.purge(self.conn, now, unapproved_before)

    def owner_secret(self) -> str | None:
        return oauth.owner_secret(self.conn)

    def set_owner_secret(self, secret: str | None, at: str) -> None:
        oauth.set_owner_secret(self.conn, secret, at)
