"""The index port: everything the services ask of the index, with typed rows.

The index is derived data: every row can be rebuilt from the files under ``knowledge/`` (except
the audit and invocation logs, which are history). The services talk to it only through
``Index``; ``index.sqlite.SqliteIndex`` is the embedded implementation (SQLite + FTS5 +
sqlite-vec). A second backend implements this same protocol and nothing outside ``index/``
changes: no service knows which engine answers, nor any table name or query language.

Conventions every implementation keeps:

- Calls run on the calling thread; an implementation keeps one connection per thread.
- Writes happen inside ``transaction()`` or ``batch()`` (one atomic unit; not nested). Reads may run anywhere.
- Keyword search takes analyzed terms (``index.fts.analyze``): the analyzer is shared, so every
  backend ranks the same words. Scores are higher-is-better (BM25 for keyword, ``1 - cosine
  distance`` for vector).
- Vectors are addressed by the embedding model's identity; a stored vector travels as packed
  float32 in the machine's byte order (``pack_vector``), the form exports read and imports write.
- Searches and listings take a ``DocumentFilter`` and apply it inside their query: a search for
  ``limit`` rows returns ``limit`` rows whenever that many match, however many better matches the
  filter leaves out. Scores do not depend on it.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, fields
from typing import Any, Literal, Protocol

from coffer_mcp.index.oauth import OAuthStore
from coffer_mcp.models import Chunk, SearchFilters, SourceMode
from coffer_mcp.store import StoreModel, stored_document_id

__all__ = [
    "AuditRow",
    "ChunkRow",
    "DocumentFilter",
    "DocumentRow",
    "Index",
    "IndexDiagnosis",
    "InvocationRow",
    "KbCounts",
    "PassageRow",
    "Where",
    "as_filter",
    "pack_vector",
]

Operator = Literal["AND", "OR"]


def pack_vector(vector: Sequence[float]) -> bytes:
    """A vector as packed float32 (native byte order), the form stored vectors travel in."""
    return struct.pack(f"{len(vector)}f", *vector)


@dataclass(frozen=True, slots=True)
class DocumentRow:
    """One document as the index knows it: its frontmatter's fields, and index bookkeeping.

    ``tags`` are the frontmatter's (``store.frontmatter_tags``). ``file_stamp`` is the file's stamp
    when it was indexed and ``chunk_params`` what its chunks were made with (both decide whether it
    must be indexed again); ``embedding_model`` is the model its vectors came from,
    ``embed_pending`` whether an embedding is owed. ``source_stamp`` is the stamp of the source file
    (``access.source_stamp``) whose bytes hash to ``source_sha256``, when one vouches for them (""
    otherwise): a followed file with that stamp need not be read again.
    """

    id: str
    kb: str
    title: str
    original_filename: str
    original_format: str
    source_sha256: str
    content_sha256: str
    source_mode: SourceMode
    source_path: str | None
    conversion_engine: str
    converted_at: str | None
    created_at: str
    updated_at: str
    metadata: dict[str, Any] = field(default_factory=dict)
    tags: tuple[str, ...] = ()
    file_stamp: str = ""
    chunk_params: str = ""
    embed_pending: bool = False
    embedding_model: str | None = None
    source_stamp: str = ""

    @property
    def source_url(self) -> str | None:
        url = self.metadata.get("source_url")
        return str(url) if url else None


@dataclass(frozen=True, slots=True)
class DocumentFilter:
    """The documents a search or a listing may return: every condition set must hold.

    ``tags`` are tag keys (``models.tag_key``): a document must carry all of them. ``formats`` are
    lower-case original formats, any of which will do. Times are ``timeutil.parse_time`` text,
    compared with the documents' own times read the same way; ``*_after`` is inclusive and
    ``*_before`` exclusive. Empty fields set no condition.
    """

    document_ids: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    path_prefix: str | None = None
    formats: tuple[str, ...] = ()
    created_after: str | None = None
    created_before: str | None = None
    updated_after: str | None = None
    updated_before: str | None = None

    def __bool__(self) -> bool:
        return any(getattr(self, f.name) for f in fields(self))

    def path_scope(self) -> tuple[str, str] | None:
        """``(path, folder)``: ``path_prefix`` as the source paths it keeps, those equal to ``path`` or
        starting with ``folder`` (``path`` and a separator), so ``/a/papers`` keeps ``/a/papers/x.pdf``
        and not ``/a/papers-old/x.pdf``; a trailing separator changes nothing. None without a prefix.

        Compared as plain strings by both indexes (no ``LIKE``): ``%``, ``_``, ``*`` or ``[`` in a
        path are themselves.
        """
        if not self.path_prefix:
            return None
        path = self.path_prefix.rstrip(os.sep + (os.altsep or "")) or os.sep
        return path, path if path.endswith(os.sep) else path + os.sep

    @classmethod
    def of(cls, filters: SearchFilters | None, document_ids: Sequence[str] | None = None) -> DocumentFilter:
        """The filter of a caller's ``SearchFilters`` (already checked), within ``document_ids`` if given."""
        ids = tuple(map(stored_document_id, document_ids or ()))
        if filters is None:
            return cls(document_ids=ids)
        return cls(
            document_ids=ids,
            tags=tuple(filters.tags),
            path_prefix=filters.path_prefix,
            formats=tuple(filters.formats),
            created_after=filters.created_after,
            created_before=filters.created_before,
            updated_after=filters.updated_after,
            updated_before=filters.updated_before,
        )


Where = DocumentFilter | Sequence[str] | None
"""What a search is restricted to: a filter, some document ids (the older form), or nothing."""


def as_filter(where: Where) -> DocumentFilter:
    """``where`` as a ``DocumentFilter`` (a sequence of document ids restricts to those)."""
    if isinstance(where, DocumentFilter):
        return where
    return DocumentFilter(document_ids=tuple(where or ()))


@dataclass(frozen=True, slots=True)
class PassageRow:
    """One chunk found by a search, with its document's title and file name and the search's score.

    ``source_location`` is where the chunk is in the document's original, when known (``store.locations``).
    """

    chunk_id: int
    document_id: str
    kb: str
    position: int
    heading_path: list[str]
    text: str
    title: str
    score: float
    source_location: dict[str, Any] | None = None
    original_filename: str = ""


@dataclass(frozen=True, slots=True)
class ChunkRow:
    """One stored chunk of a document (reads that expand a passage)."""

    position: int
    heading_path: list[str]
    text: str
    source_location: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class KbCounts:
    documents: int
    chunks: int
    degraded: int
    """Documents of a vector knowledge base without current vectors (0 for keyword-only ones)."""


@dataclass(frozen=True, slots=True)
class AuditRow:
    """One event of the audit log (what changed a knowledge base, when, and who did it)."""

    at: str
    event: str
    kb: str
    document_id: str | None
    actor: str
    details: dict[str, Any]


@dataclass(frozen=True, slots=True)
class InvocationRow:
    """One logged MCP tool call (no arguments, no content)."""

    at: str
    tool: str
    client: str
    duration_ms: float
    outcome: str
    error_code: str | None


@dataclass(frozen=True, slots=True)
class IndexDiagnosis:
    """What the index engine is and can do, for ``coffer doctor``."""

    backend: str
    binding: str
    version: str
    keyword_index: bool
    vector_version: str | None
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what works, only slower (e.g. no HNSW graphs)


class Index(OAuthStore, Protocol):
    """The index every service uses (see the module docstring for the conventions; ``index.oauth``
    for the authorization server's part)."""

    # -- lifecycle ---------------------------------------------------------------------------------

    def transaction(self) -> AbstractContextManager[None]:
        """One atomic write unit: committed on exit, rolled back on an exception."""
        ...

    def batch(self) -> AbstractContextManager[None]:
        """A ``transaction()`` for the rows of many documents at once (a group commit, ``SPEC.md`` §10).

        Writes inside it may be sent without waiting for each one's answer (PostgreSQL pipelines
        them), so an error may surface at a later statement or at the commit: the whole batch is
        rolled back then, and the caller may write its documents again one transaction each.
        """
        ...

    def close(self) -> None: ...

    def check_home(self, *, connect: bool = True) -> bool:
        """Whether files may be written in the home this index serves (its folders exist then).

        An index kept in the home always says yes. A shared one (a database server) says yes once
        it has accepted the home as the store it indexes, which it checks at its first connection,
        made now unless not ``connect``; a home it refuses is left as it was.

        Raises:
            StoreError: ``other_store``, or the database cannot be reached (only when ``connect``).
        """
        ...

    def settle(self) -> None:
        """After a bulk write (a reindex, a folder ingest): bring what the engine keeps about its tables
        up to date, when this index wrote enough rows to need it, so the next searches are fast."""
        ...

    def diagnose(self) -> IndexDiagnosis: ...

    def lock(self, name: str, *, timeout: float) -> AbstractContextManager[None]:
        """Hold ``name`` exclusively among every process using this index, for up to ``timeout`` to get it.

        Coffer also holds its file lock of the same name (which serializes this process's threads);
        an index shared by several machines makes the exclusion hold across them too.

        Raises:
            StoreError: code ``busy`` when ``timeout`` passes first.
        """
        ...

    # -- knowledge bases ---------------------------------------------------------------------------

    def kb_stamps(self) -> dict[str, str]:
        """``{name: config_stamp}`` of every registered knowledge base."""
        ...

    def upsert_kb(self, name: str, config: Any, stamp: str) -> None: ...

    def delete_kb(self, name: str) -> None:
        """Drop every row of a knowledge base: documents, chunks, keyword entries, vectors."""
        ...

    def vector_kbs(self) -> set[str]:
        """The knowledge bases registered with ``vector`` on."""
        ...

    def kb_counts(self, name: str, vector_model: str | None) -> KbCounts: ...

    def document_counts(self) -> dict[str, int]: ...

    # -- documents ---------------------------------------------------------------------------------

    def doc_stamps(self, kb: str) -> dict[str, tuple[str, str]]:
        """``{document_id: (file_stamp, chunk_params)}``: the drift check's input, read on every read."""
        ...

    def get_document(self, kb: str, doc_id: str) -> DocumentRow | None: ...

    def find_document(
        self, kb: str, *, filename: str | None = None, source_path: str | None = None, source_url: str | None = None
    ) -> DocumentRow | None:
        """The oldest document matching the one criterion given (a re-upload's match)."""
        ...

    def find_by_source_paths(self, kb: str, source_paths: Sequence[str]) -> dict[str, DocumentRow]:
        """``find_document(kb, source_path=...)`` for many paths in one query (a folder ingest's next
        files, matched once under the lock): each path's oldest document, paths without one left out."""
        ...

    def documents_named(self, kb: str, filename: str, limit: int) -> list[DocumentRow]:
        """Up to ``limit`` documents whose ``original_filename`` is ``filename``: uploads (neither a
        ``source_path`` nor a ``source_url``) first, then those ingested from a path or URL; oldest first."""
        ...

    def documents(self, kb: str, *, with_source_path: bool = False) -> list[DocumentRow]:
        """Every document of a knowledge base, oldest first (optionally only those with a source path)."""
        ...

    def list_documents(
        self, kb: str, title_filter: str, limit: int, offset: int, where: Where = None
    ) -> tuple[list[DocumentRow], int]:
        """A page of documents, oldest first, filtered by a case-insensitive title substring and ``where``;
        and the total."""
        ...

    def document_ids(self, kb: str, where: Where) -> list[str]:
        """The ids of every document of ``kb`` that ``where`` lets through (a filtered grep's files)."""
        ...

    def recent_documents(self, limit: int) -> list[DocumentRow]:
        """The most recently updated documents of every knowledge base."""
        ...

    def ids_outside(self, kb: str, among: Sequence[str]) -> dict[str, str]:
        """Which of ``among`` are ids of documents of another knowledge base than ``kb``, and of which."""
        ...

    def upsert_document(self, row: DocumentRow, *, embedding: bool = False) -> None:
        """Insert or update a document's row and its tags. With ``embedding``, the row's
        ``embed_pending`` and ``embedding_model`` are written too (in the same statement, instead
        of a ``set_embedding`` after it); without, a document's are kept (a new one's: none due)."""
        ...

    def delete_document(self, doc_id: str) -> None:
        """Remove a document's row, chunks, keyword entries and vectors."""
        ...

    def remember_source_stamps(self, stamps: Sequence[tuple[str, str, str]]) -> None:
        """Set ``source_stamp`` of documents from ``(document id, source_sha256, stamp)``: each only
        while its row still has that ``source_sha256`` (the bytes the stamp vouches for)."""
        ...

    # -- chunks ------------------------------------------------------------------------------------

    def replace_chunks(self, kb: str, doc_id: str, chunks: Iterable[Chunk], *, fresh: bool = False) -> int:
        """Swap a document's chunks (and their keyword entries; their vectors are dropped); returns
        how many were written. ``fresh``: the document has none yet (its id was just minted), so
        there is nothing to delete first. A chunk's ``source_location`` is kept with it, and
        returned by searches (``PassageRow``) and ``chunk_window``."""
        ...

    def chunk_texts(self, doc_id: str) -> list[tuple[int, str]]:
        """``(chunk id, text)`` of a document, in order."""
        ...

    def chunk_window(self, doc_id: str, first: int, last: int) -> tuple[list[ChunkRow], int | None]:
        """The chunks at positions ``first..last`` of a document, and its last position (None: no chunks)."""
        ...

    def chunk_count(self, *, kb: str | None = None, doc_id: str | None = None) -> int: ...

    # -- keyword search ----------------------------------------------------------------------------

    def keyword_search(
        self,
        terms: Sequence[str],
        operator: Operator,
        kbs: Sequence[str],
        where: Where,
        limit: int,
    ) -> list[PassageRow]:
        """Chunks of documents ``where`` lets through matching the analyzed terms (all, or any), best BM25
        first; none for no terms.

        A term of several words is a phrase: its words adjacent, in order. One knowledge base is
        scored with its own statistics; several as one collection of them (a phrase's IDF from
        all their chunks, a chunk's length against its own knowledge base's mean).
        """
        ...

    def matches_more_than(self, term: str, count: int, kbs: Sequence[str] | None = None) -> bool:
        """Whether more than ``count`` chunks (of ``kbs``, or any knowledge base) hold the analyzed term."""
        ...

    def substring_search(
        self,
        terms: Sequence[str],
        operator: Operator,
        kbs: Sequence[str],
        where: Where,
        limit: int,
        scan_limit: int,
    ) -> list[PassageRow]:
        """Chunks holding the terms as substrings, by occurrences per 1,000 characters; scans ≤ ``scan_limit``."""
        ...

    # -- vectors -----------------------------------------------------------------------------------

    def set_embedding(self, doc_id: str, *, pending: bool, model: str | None) -> None: ...

    def clear_kb_embeddings(self, kb: str) -> None:
        """Forget a knowledge base's vectors (its vector switch was turned off)."""
        ...

    def pending_documents(self, kb: str, identity: str, *, limit: int = -1) -> list[str]:
        """Documents of ``kb`` whose vectors are missing, failed, or from another model."""
        ...

    def embedded_models(self, kb: str) -> list[str]:
        """The model of each embedded document of ``kb`` (one entry per document)."""
        ...

    def vector_status(self, kb: str) -> dict[str, dict[str, Any]]:
        """``{model identity: {"vectors": n, "search": how, "built_at": time or None}}`` for ``kb``.

        ``search`` says how its vector searches run: ``exact`` (a scan), ``ann`` (an approximate
        graph, candidates re-scored exactly) or ``hnsw`` (the database's own HNSW index).
        """
        ...

    def vector_dimensions(self, identity: str) -> int | None:
        """The dimension of ``identity``'s stored vectors, or None when it has none."""
        ...

    def store_vectors(
        self, identity: str, dimensions: int, kb: str, rows: Sequence[tuple[int, Sequence[float] | bytes]]
    ) -> None:
        """Store ``(chunk_id, vector)`` rows, replacing any; a vector as floats or packed float32.

        Raises:
            ValueError: ``identity`` is stored with another dimension (a misconfigured model).
        """
        ...

    def stored_vectors(self, identity: str, chunk_ids: Sequence[int]) -> dict[int, bytes]:
        """``{chunk_id: packed float32}`` of those chunks that have a vector of ``identity``."""
        ...

    def knn(
        self, identity: str, query: Sequence[float], kbs: Sequence[str], where: Where, limit: int
    ) -> list[PassageRow]:
        """The ``limit`` chunks nearest to ``query`` among those ``where`` lets through (score ``1 - cosine distance``).

        Raises:
            ValueError: ``identity`` is stored with another dimension than the query's.
        """
        ...

    # -- the store's embedding model ---------------------------------------------------------------

    def store_model(self) -> StoreModel | None:
        """The store's embedding model as the index records it (a copy of ``embedding.yaml``), or None."""
        ...

    def record_store_model(self, model: StoreModel, *, replace: bool = False) -> StoreModel:
        """Record ``model`` as the store's embedding model, unless one is recorded (with ``replace``: in its
        place); the model recorded now. Of several processes recording at once, one wins and all see it."""
        ...

    def vector_models(self) -> dict[str, int]:
        """``{identity: dimensions}`` of every model that has stored vectors (a table of its own)."""
        ...

    def drop_model(self, identity: str) -> None:
        """Remove every vector of ``identity`` with its table (a model the store no longer uses);
        documents still naming it become due for embedding."""
        ...

    # -- verification and repair -------------------------------------------------------------------

    def count_vectors(self, identity: str, chunk_ids: Sequence[int]) -> int | None:
        """How many of these chunks have a vector of ``identity`` (None: the model has no vectors)."""
        ...

    def check_shared(self) -> list[str]:
        """Problems of the structures shared by every knowledge base (keyword index, orphan vectors)."""
        ...

    def repair_shared(self) -> None:
        """Rebuild the keyword index and drop orphan vectors."""
        ...

    # -- history -----------------------------------------------------------------------------------

    def audit(
        self, event: str, kb: str, actor: str, document_id: str | None = None, details: dict[str, Any] | None = None
    ) -> None: ...

    def record_invocation(
        self, tool: str, client: str, duration_ms: float, outcome: str, error_code: str | None, *, at: str | None = None
    ) -> None:
        """Log one MCP tool call, made at ``at`` (UTC ISO-8601; now when None)."""
        ...

    def audit_events(self, kb: str | None = None, *, limit: int = 1000) -> list[AuditRow]:
        """The audit log, oldest first (the last ``limit`` events), of one knowledge base or all."""
        ...

    def document_events(self, kb: str, document_id: str, event: str) -> list[AuditRow]:
        """One document's events of one kind, oldest first: all of them, however long the audit log."""
        ...

    def invocations(self, *, limit: int = 1000) -> list[InvocationRow]:
        """The logged tool calls, oldest first (the last ``limit``)."""
        ...
