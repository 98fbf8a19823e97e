"""Verification: do the files, the rows, the full-text index and the vectors agree?

Read-only. Used by ``coffer kb verify`` (after the files are reconciled, as for a read) and by the
reliability tests after concurrent writers and crashes; ``coffer kb reindex`` repairs whatever it
reports, except a frontmatter that does not parse (a typo made by hand) and two documents of one
source (which to keep is the user's call): only the user can fix those.
"""

from __future__ import annotations

from collections.abc import Iterable

from coffer_mcp.index import DocumentRow, Index
from coffer_mcp.indexing.truth import read_truth
from coffer_mcp.models import VerifyReport
from coffer_mcp.store import KbPaths, document_files, file_stamp, raw_owner

__all__ = ["verify_kb"]


def verify_kb(index: Index, kb: KbPaths, *, vector_model: str | None) -> VerifyReport:
    """Compare one knowledge base's files with its rows, chunks and vectors."""
    files = set(document_files(kb))
    rows = {row.id: row for row in index.documents(kb.name)}
    problems = [f"{doc_id}: file without an index row" for doc_id in sorted(files - set(rows))]
    problems += [f"{doc_id}: index row without a file" for doc_id in sorted(set(rows) - files)]
    for doc_id in sorted(files & set(rows)):
        problems += _check_document(index, kb, rows[doc_id], vector_model)
    problems += _orphan_raw(kb, files)
    problems += _one_source_twice(rows.values())
    chunks = index.chunk_count(kb=kb.name)
    return VerifyReport(
        kb=kb.name, documents=len(files), rows=len(rows), chunks=chunks, problems=problems, ok=not problems
    )


def _check_document(index: Index, kb: KbPaths, row: DocumentRow, vector_model: str | None) -> list[str]:
    doc_id = row.id
    truth = read_truth(kb, doc_id)
    if truth is None:
        return [f"{doc_id}: file vanished during verification"]
    problems = []
    if truth.problem is not None:  # not drift a reindex repairs: only the user can fix their YAML
        problems.append(f"{doc_id}: frontmatter does not parse ({truth.problem}); fix it by hand in {kb.doc(doc_id)}")
    if truth.row.content_sha256 != row.content_sha256:
        problems.append(f"{doc_id}: index holds other content than the file")
    if file_stamp(kb.doc(doc_id).stat()) != row.file_stamp:
        problems.append(f"{doc_id}: file changed since it was indexed")
    chunk_ids = [chunk_id for chunk_id, _ in index.chunk_texts(doc_id)]
    if not chunk_ids and truth.body.strip():  # a body emptied in an editor has no chunks to hold
        problems.append(f"{doc_id}: no chunks")
    if vector_model and row.embedding_model == vector_model and not row.embed_pending:
        present = index.count_vectors(vector_model, chunk_ids)
        if present is None:
            problems.append(f"{doc_id}: marked embedded with {vector_model}, which has no vectors")
        elif present != len(chunk_ids):
            problems.append(f"{doc_id}: {len(chunk_ids) - present} chunks without vectors")
    return problems


def _one_source_twice(rows: Iterable[DocumentRow]) -> list[str]:
    """Documents ingested from the same file or URL: a source is one document.

    Not drift a reindex repairs: which of them to keep is the user's call (one may be edited). It can
    happen when a server is killed between writing a document's files and indexing them while another
    server, following the same folder, ingests the same file: both documents are then read back.
    """
    by_source: dict[str, list[str]] = {}
    for row in rows:
        if source := row.source_path or row.source_url:
            by_source.setdefault(source, []).append(row.id)
    return [
        f"{', '.join(sorted(ids))}: {len(ids)} documents ingested from {source}; keep one and delete the others "
        "(coffer kb rm)"
        for source, ids in sorted(by_source.items())
        if len(ids) > 1
    ]


def _orphan_raw(kb: KbPaths, documents: set[str]) -> list[str]:
    try:
        raws = [p for p in kb.raw.iterdir() if not p.name.startswith(".")]
    except FileNotFoundError:
        return []
    return [f"raw/{p.name}: original without a document" for p in sorted(raws) if raw_owner(p.name) not in documents]
