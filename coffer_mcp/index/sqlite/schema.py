"""The index schema, as named migrations recorded in the database.

``PRAGMA user_version`` is the number of migrations applied; the ``migrations`` table keeps
their names and times. A migration is SQL, or a function when it has to read rows to write them.
Everything here is derived from the files under ``knowledge/`` except ``audit_log`` and
``mcp_invocations``, which are history, not index, and the ``oauth_*`` tables (``oauth``).
"""

from __future__ import annotations

from collections.abc import Callable

from coffer_mcp.errors import StoreError
from coffer_mcp.index.sqlite import keyword, oauth
from coffer_mcp.index.sqlite.db import Connection

__all__ = ["MIGRATIONS", "migrate"]

_CORE = """
CREATE TABLE migrations (
    name TEXT PRIMARY KEY,
    applied_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);

CREATE TABLE knowledge_bases (
    name TEXT PRIMARY KEY,
    description TEXT NOT NULL DEFAULT '',
    chunk_size INTEGER NOT NULL,
    chunk_overlap INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    config_stamp TEXT NOT NULL DEFAULT ''
);

-- One row per document (``kind`` is unused: dropped by 0004_drop_kind).
CREATE TABLE documents (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL DEFAULT 'knowledge_base',
    kb TEXT NOT NULL REFERENCES knowledge_bases(name),
    title TEXT NOT NULL,
    original_filename TEXT NOT NULL,
    original_format TEXT NOT NULL,
    source_sha256 TEXT NOT NULL,
    content_sha256 TEXT NOT NULL,
    source_mode TEXT NOT NULL CHECK (source_mode IN ('converted', 'edited')),
    source_path TEXT,
    conversion_engine TEXT NOT NULL DEFAULT '',
    converted_at TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    metadata TEXT NOT NULL DEFAULT '{}',
    file_stamp TEXT NOT NULL,
    chunk_params TEXT NOT NULL,
    embed_pending INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX documents_by_filename ON documents (kb, original_filename);
CREATE INDEX documents_by_created ON documents (kb, created_at, id);
CREATE INDEX documents_by_source ON documents (kb, source_path) WHERE source_path IS NOT NULL;

CREATE TABLE chunks (
    id INTEGER PRIMARY KEY,
    document_id TEXT NOT NULL REFERENCES documents(id),
    kb TEXT NOT NULL,
    position INTEGER NOT NULL,
    heading_path TEXT NOT NULL,
    headings TEXT NOT NULL,
    text TEXT NOT NULL,
    UNIQUE (document_id, position)
);
CREATE INDEX chunks_by_kb ON chunks (kb);

-- The full-text index (replaced by one table per knowledge base in 0006_keyword_per_kb):
-- contentless (the text lives once, in chunks), one column holding the chunk's headings and text
-- as fts.search_text() renders them (CJK runs as bigrams).
CREATE VIRTUAL TABLE chunks_fts USING fts5(
    body, content='', tokenize='porter unicode61 remove_diacritics 2'
);

CREATE TABLE audit_log (
    id INTEGER PRIMARY KEY,
    at TEXT NOT NULL,
    event TEXT NOT NULL,
    kb TEXT NOT NULL,
    document_id TEXT,
    actor TEXT NOT NULL,
    details TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX audit_by_kb ON audit_log (kb, at);

CREATE TABLE mcp_invocations (
    id INTEGER PRIMARY KEY,
    at TEXT NOT NULL,
    tool TEXT NOT NULL,
    client TEXT NOT NULL,
    duration_ms REAL NOT NULL,
    outcome TEXT NOT NULL,
    error_code TEXT
);
"""

_VECTORS = """
-- Vectors live in one sqlite-vec table per embedding model (index/vectors.py); a document
-- records which model its vectors came from, and whether its embedding is still owed.
CREATE TABLE embedding_models (
    id INTEGER PRIMARY KEY,
    identity TEXT NOT NULL UNIQUE,
    dimensions INTEGER NOT NULL,
    created_at TEXT NOT NULL
);
ALTER TABLE documents ADD COLUMN embedding_model TEXT;
ALTER TABLE knowledge_bases ADD COLUMN vector INTEGER NOT NULL DEFAULT 0;
"""

_LOOKUP_INDEXES = """
-- Re-upload lookups ask for the oldest match (ORDER BY created_at, id): an index that serves the
-- WHERE and the ORDER BY together keeps the planner off a scan of the whole knowledge base.
DROP INDEX documents_by_filename;
DROP INDEX documents_by_source;
CREATE INDEX documents_by_filename ON documents (kb, original_filename, created_at, id);
CREATE INDEX documents_by_source ON documents (kb, source_path, created_at, id);
CREATE INDEX documents_by_url ON documents (kb, json_extract(metadata, '$.source_url'), created_at, id);
"""

_DROP_KIND = """
ALTER TABLE documents DROP COLUMN kind;
"""

_ANN = """
-- The approximate nearest-neighbour graphs beside coffer.db: a cache of the vec0 tables, one
-- file per (embedding model, knowledge base) that has one (index/sqlite/ann_rows.py). ``name``
-- is empty while a graph is being built; ``seq`` the last logged change the file holds.
CREATE TABLE ann_files (
    model_id INTEGER NOT NULL,
    kb TEXT NOT NULL,
    name TEXT NOT NULL,
    seq INTEGER NOT NULL,
    vectors INTEGER NOT NULL,
    size INTEGER NOT NULL,
    sha256 TEXT NOT NULL,
    built_at TEXT NOT NULL,
    PRIMARY KEY (model_id, kb)
);
-- Vector writes to a partition that has a graph, logged in their own transaction: every process
-- brings its graph up to date from here. AUTOINCREMENT: a seq is never reused after a prune.
CREATE TABLE ann_changes (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    model_id INTEGER NOT NULL,
    kb TEXT NOT NULL,
    chunk_id INTEGER NOT NULL
);
CREATE INDEX ann_changes_by_partition ON ann_changes (model_id, kb, seq);
"""

_FILTERS = """
-- Tags, and what searches and listings filter by (index/sqlite/filters.py): ``tags`` as the
-- frontmatter spells them (JSON), ``document_tags`` one row per tag key (case-folded) for lookups,
-- and the document's times in one comparable form (``created_key``, ``updated_key``: UTC, ms).
ALTER TABLE documents ADD COLUMN tags TEXT NOT NULL DEFAULT '[]';
ALTER TABLE documents ADD COLUMN created_key TEXT;
ALTER TABLE documents ADD COLUMN updated_key TEXT;
CREATE TABLE document_tags (
    tag TEXT NOT NULL,
    document_id TEXT NOT NULL,
    PRIMARY KEY (tag, document_id)
) WITHOUT ROWID;
CREATE INDEX document_tags_by_document ON document_tags (document_id);
-- Rows indexed before know neither: with their file stamps forgotten, the next read of each
-- knowledge base reads its files again and rewrites the rows (not the chunks: no content changed).
UPDATE documents SET file_stamp = '';
"""


_SOURCE_STAMPS = """
-- The stamp of the source file whose bytes hash to source_sha256 (access.source_stamp), when one
-- vouches for them: a followed file with that stamp is not read again (services/follow.py).
ALTER TABLE documents ADD COLUMN source_stamp TEXT NOT NULL DEFAULT '';
"""

_STORE_MODEL = """
-- The store's embedding model (store/embedding.py, index/sqlite/model_record.py): one row, a copy of
-- embedding.yaml, recorded when vectors are first written. ``details`` holds how it is built (JSON).
CREATE TABLE store_model (
    one INTEGER PRIMARY KEY CHECK (one = 1),
    identity TEXT NOT NULL,
    dimensions INTEGER NOT NULL,
    details TEXT NOT NULL DEFAULT '{}'
);
"""


_SOURCE_LOCATIONS = """
-- Where each chunk is in its document's original (store/locations.py), as JSON; NULL when unknown.
-- Derived from raw/<id>.map.json beside the original, so a rebuild finds it again.
ALTER TABLE chunks ADD COLUMN source_location TEXT;
"""


def _keyword_per_kb(conn: Connection) -> None:
    """One full-text table per knowledge base (``index/sqlite/keyword.py``), filled from the
    chunks, in place of ``chunks_fts``: BM25 statistics of a knowledge base's own chunks."""
    conn.execute("CREATE TABLE keyword_tables (kb TEXT PRIMARY KEY, id INTEGER NOT NULL UNIQUE)")
    keyword.fill(conn)
    conn.execute("DROP TABLE chunks_fts")


Migration = str | Callable[[Connection], None]

MIGRATIONS: list[tuple[str, Migration]] = [
    ("0001_core", _CORE),
    ("0002_vectors", _VECTORS),
    ("0003_lookup_indexes", _LOOKUP_INDEXES),
    ("0004_drop_kind", _DROP_KIND),
    ("0005_ann", _ANN),
    ("0006_keyword_per_kb", _keyword_per_kb),
    ("0007_filters", _FILTERS),
    ("0008_source_stamps", _SOURCE_STAMPS),
    ("0009_oauth", oauth.SCHEMA),
    ("0010_store_model", _STORE_MODEL),
    ("0011_source_locations", _SOURCE_LOCATIONS),
]


def migrate(conn: Connection) -> None:
    """Bring the schema up to date; safe when several processes start at once."""
    known = len(MIGRATIONS)
    if _version(conn) == known:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        current = _version(conn)
        if current > known:
            raise StoreError(
                f"The index database has schema version {current}; this Coffer knows {known}.",
                code="schema_too_new",
                hint="Upgrade coffer-mcp, or delete coffer.db and run 'coffer kb reindex --all' "
                "(the index is rebuilt from the files).",
            )
        for name, step in MIGRATIONS[current:]:
            if callable(step):
                step(conn)
            else:
                for statement in _statements(step):
                    conn.execute(statement)
            conn.execute("INSERT INTO migrations (name) VALUES (?)", (name,))
        conn.execute(f"PRAGMA user_version = {known}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _version(conn: Connection) -> int:
    return conn.execute("PRAGMA user_version").fetchone()[0]


def _statements(sql: str) -> list[str]:
    """Split a migration script into statements (``executescript`` would commit implicitly)."""
    statements, buffer = [], ""
    for line in sql.splitlines(keepends=True):
        if line.strip().startswith("--"):
            continue
        buffer += line
        if buffer.strip().endswith(";"):
            statements.append(buffer.strip())
            buffer = ""
    if buffer.strip():
        statements.append(buffer.strip())
    return statements
