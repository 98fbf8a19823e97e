"""Verification: do the files, the rows, the full-text index and the vectors agree?

Read-only. Used by ``coffer kb verify`` and by the reliability tests after concurrent writers and
crashes; ``coffer kb reindex`` repairs whatever it reports.
"""

from __future__ import annotations

from collections.abc import Sequence

from coffer_mcp.index.db import Connection, database_errors
from coffer_mcp.models import VerifyReport
from coffer_mcp.reindex import read_truth
from coffer_mcp.store import file_stamp
from coffer_mcp.store import KbPaths, is_document_id

__all__ = ["vector_orphans", "verify_fts", "verify_kb"]


def verify_kb(conn: Connection, kb: KbPaths, *, vector_model: str | None) -> VerifyReport:
    """Compare one knowledge base's files with its rows, chunks and vectors."""
    problems: list[str] = []
    files = _document_files(kb)
    rows = {r["id"]: r for r in conn.execute("SELECT * FROM documents WHERE kb = ?", (kb.name,))}
    for doc_id in sorted(set(files) - set(rows)):
        problems.append(f"{doc_id}: file without an index row")
    for doc_id in sorted(set(rows) - set(files)):
        problems.append(f"{doc_id}: index row without a file")
    for doc_id in sorted(set(files) & set(rows)):
        problems += _check_document(conn, kb, doc_id, rows[doc_id], vector_model)
    problems += _orphan_raw(kb, set(files))
    chunks = conn.execute("SELECT count(*) FROM chunks WHERE kb = ?", (kb.name,)).fetchone()[0]
    return VerifyReport(kb=kb.name, documents=len(files), rows=len(rows), chunks=chunks,
                        problems=problems, ok=not problems)  # fmt: skip


def verify_fts(conn: Connection) -> list[str]:
    """Problems of the whole full-text index: internal integrity, and rowids ⇔ chunk ids."""
    problems: list[str] = []
    try:
        conn.execute("INSERT INTO chunks_fts (chunks_fts, rank) VALUES ('integrity-check', 0)")
    except database_errors() as exc:
        problems.append(f"full-text index: {exc}")
    indexed = {row[0] for row in conn.execute("SELECT rowid FROM chunks_fts")}
    chunk_ids = {row[0] for row in conn.execute("SELECT id FROM chunks")}
    if indexed - chunk_ids:
        problems.append(f"full-text index: {len(indexed - chunk_ids)} entries without a chunk")
    if chunk_ids - indexed:
        problems.append(f"full-text index: {len(chunk_ids - indexed)} chunks not indexed")
    return problems


def _document_files(kb: KbPaths) -> dict[str, object]:
    try:
        names = [p for p in kb.docs.iterdir() if p.suffix == ".md" and not p.name.startswith(".")]
    except FileNotFoundError:
        return {}
    return {p.stem: p for p in names if is_document_id(p.stem)}


def _check_document(conn: Connection, kb: KbPaths, doc_id: str, row, vector_model: str | None) -> list[str]:  # noqa: ANN001
    truth = read_truth(kb, doc_id)
    if truth is None:
        return [f"{doc_id}: file vanished during verification"]
    problems = []
    if truth.row["content_sha256"] != row["content_sha256"]:
        problems.append(f"{doc_id}: index holds other content than the file")
    if file_stamp(kb.doc(doc_id).stat()) != row["file_stamp"]:
        problems.append(f"{doc_id}: file changed since it was indexed")
    chunk_ids = [r[0] for r in conn.execute("SELECT id FROM chunks WHERE document_id = ?", (doc_id,))]
    if not chunk_ids:
        problems.append(f"{doc_id}: no chunks")
    if vector_model and row["embedding_model"] == vector_model and not row["embed_pending"]:
        problems += _check_vectors(conn, doc_id, chunk_ids, vector_model)
    return problems


def _check_vectors(conn: Connection, doc_id: str, chunk_ids: Sequence[int], identity: str) -> list[str]:
    model = conn.execute("SELECT id FROM embedding_models WHERE identity = ?", (identity,)).fetchone()
    if model is None:
        return [f"{doc_id}: marked embedded with {identity}, which has no vector table"]
    table = f"vec_chunks_{model[0]}"
    marks = ", ".join("?" * len(chunk_ids))
    present = conn.execute(f"SELECT count(*) FROM {table} WHERE chunk_id IN ({marks})", list(chunk_ids)).fetchone()[0]
    return [] if present == len(chunk_ids) else [f"{doc_id}: {len(chunk_ids) - present} chunks without vectors"]


def _orphan_raw(kb: KbPaths, documents: set[str]) -> list[str]:
    try:
        raws = [p for p in kb.raw.iterdir() if not p.name.startswith(".")]
    except FileNotFoundError:
        return []
    return [f"raw/{p.name}: original without a document" for p in sorted(raws) if p.stem not in documents]


def vector_orphans(conn: Connection) -> list[str]:
    """Vectors whose chunk no longer exists, in any model's table."""
    problems = []
    for (model_id,) in conn.execute("SELECT id FROM embedding_models").fetchall():
        table = f"vec_chunks_{model_id}"
        orphans = conn.execute(
            f"SELECT count(*) FROM {table} v WHERE NOT EXISTS (SELECT 1 FROM chunks c WHERE c.id = v.chunk_id)"
        ).fetchone()[0]
        if orphans:
            problems.append(f"{table}: {orphans} vectors without a chunk")
    return problems

