"""Curation tools' bodies: manage knowledge bases, ingest paths and URLs, track sources.

Each body takes the ``Job`` first and the tool's arguments after it; its docstring is the tool's
description and its parameters are the input schema. Names and annotations are in ``_registry``.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from coffer_mcp.errors import ConfirmationRequiredError
from coffer_mcp.mcp_server import _lean as lean
from coffer_mcp.mcp_server._common import DocId, Filters, FsPath, KbName, Offset
from coffer_mcp.mcp_server._notices import waiting_message
from coffer_mcp.mcp_server._runner import Job
from coffer_mcp.models import (
    DeleteResult,
    DirectoryIngestResult,
    DocumentPage,
    IngestResult,
    KnowledgeBaseDetails,
    ReindexResult,
    SourceReport,
)
from coffer_mcp.settings import bound_of
from coffer_mcp.store.kbconfig import MAX_DESCRIPTION, KbConfig

__all__ = [
    "check_sources",
    "create_knowledge_base",
    "delete_knowledge_base",
    "ingest_path",
    "ingest_url",
    "knowledge_base_metrics",
    "list_documents",
    "reindex_knowledge_base",
    "update_from_source",
    "update_knowledge_base",
]

MCP_MAX_LIST_LIMIT = 500  # the core pages up to 1000; a model reads 500 titles at most


CHUNK_SIZE_MIN = bound_of(KbConfig, "chunk_size", "ge")  # the schema repeats no number
CHUNK_SIZE_MAX = bound_of(KbConfig, "chunk_size", "le")
CHUNK_OVERLAP_MAX = CHUNK_SIZE_MAX // 2  # the core refuses an overlap of half the chunk size or more

_REPLACE = Annotated[bool, Field(description="Update documents whose content changed, in place.")]


def list_documents(
    job: Job,
    kb: KbName,
    q: Annotated[
        str, Field(description="Only documents whose title contains this (case-insensitive).", max_length=500)
    ] = "",
    limit: Annotated[int, Field(ge=1, le=MCP_MAX_LIST_LIMIT)] = 50,
    offset: Offset = 0,
    details: Annotated[bool, Field(description="Also each document's kb, hashes and file path.")] = False,
    filters: Filters = None,
) -> DocumentPage:
    """List a knowledge base's documents (id, title, filename, tags, dates), oldest first.

    total counts those matching q and filters; next page: offset += limit.
    """
    page = job.service.list_documents(kb, q, limit, offset, filters=filters)
    return page if details else lean.document_page(page)


def knowledge_base_metrics(job: Job, kb: KbName) -> KnowledgeBaseDetails:
    """A knowledge base's counts and settings: documents, chunks, chunking, vectors and embedding model,
    documents_degraded (keyword-only until embedded), followed folders, disk bytes.
    """
    return job.service.describe_kb(kb)


def check_sources(job: Job, kb: KbName) -> SourceReport:
    """Compare documents ingested from a path with their source files.

    Followed folders are synced first, and listed. Each document is unchanged, changed, missing,
    edited (both changed: left alone), updated (refreshed by that sync, or with auto_update_sources),
    added, removed or renamed (by that sync: a new file, a deleted one, one renamed or moved in its
    folder: same id and tags); coffer__update_from_source refreshes a changed one.
    """
    svc = job.service
    return svc.check_sources(
        kb, auto_update=job.writes, actor=job.actor, progress=job.progress, within=svc.settings.allowed_dirs
    )


def create_knowledge_base(
    job: Job,
    name: Annotated[str, Field(description="1-64 characters of a-z, 0-9, '-', '_', '.', not starting with '.'.")],
    description: Annotated[str, Field(max_length=MAX_DESCRIPTION)] = "",
    vector: bool = False,
) -> KnowledgeBaseDetails:
    """Create an empty knowledge base.

    vector=true also embeds documents, so searches find paraphrases (needs an embedding provider; else
    keyword-only).
    """
    return job.service.create_kb(name, description, vector=vector, actor=job.actor)


def update_knowledge_base(
    job: Job,
    name: KbName,
    description: Annotated[str | None, Field(max_length=MAX_DESCRIPTION)] = None,
    chunk_size: Annotated[int | None, Field(ge=CHUNK_SIZE_MIN, le=CHUNK_SIZE_MAX)] = None,
    chunk_overlap: Annotated[int | None, Field(ge=0, le=CHUNK_OVERLAP_MAX)] = None,
    vector: Annotated[bool | None, Field(description="true embeds every document; false drops the vectors.")] = None,
    auto_update_sources: Annotated[
        bool | None, Field(description="Let check_sources refresh changed documents.")
    ] = None,
) -> KnowledgeBaseDetails:
    """Change a knowledge base's settings (only those given).

    New chunk settings re-chunk every document and vector=true embeds them; both report progress.
    """
    details = job.service.update_kb(
        name,
        description=description,
        chunk_size=chunk_size,
        chunk_overlap=chunk_overlap,
        vector=vector,
        auto_update_sources=auto_update_sources,
        actor=job.actor,
        progress=job.progress,
    )
    if details.documents_degraded:
        return details.model_copy(
            update={"warning": waiting_message(job.service, details.name, details.documents_degraded)}
        )
    return details


def delete_knowledge_base(
    job: Job,
    name: KbName,
    confirm: Annotated[
        bool, Field(description="true once the user agreed (if the client can, Coffer asks them itself).")
    ] = False,
) -> DeleteResult:
    """Delete a knowledge base and all its documents (files and index). Cannot be undone."""
    if confirm is not True:
        job.service.open_kb(name)  # an unknown name is refused as such: there is nothing to confirm
        raise ConfirmationRequiredError(
            f"Deleting '{name}' needs confirm=true.",
            hint="Ask the user first; this deletes every document in the knowledge base.",
        )
    return job.service.delete_kb(name, actor=job.actor)


def reindex_knowledge_base(
    job: Job,
    kb: KbName,
    force: Annotated[
        bool,
        Field(
            description="Redo every document, and convert again from its original each one whose converter "
            "changed (unless edited)."
        ),
    ] = False,
) -> ReindexResult:
    """Bring the index in line with the files (outside edits, missing embeddings).

    Searches do this for changes already; use it after big edits on disk, a model change, or (force) a Coffer
    upgrade with better converters.
    """
    result = job.service.reindex(kb, force=force, progress=job.progress, actor=job.actor)
    if result.documents_degraded:
        return result.model_copy(update={"warning": waiting_message(job.service, kb, result.documents_degraded)})
    return result


def ingest_path(
    job: Job,
    kb: KbName,
    path: Annotated[FsPath, Field(description="Absolute path of a file or folder.")],
    replace: _REPLACE = False,
    follow: Annotated[
        bool,
        Field(description="Keep applying the folder's changes as they happen (never over documents edited in Coffer)."),
    ] = False,
) -> DirectoryIngestResult:
    """Ingest a file, or a folder recursively, from the folders the user allowed (allowed_dirs).

    The source path is kept for coffer__check_sources. Reports progress per file.
    """
    return job.service.ingest_allowed_path(
        kb, path, replace=replace, follow=follow, actor=job.actor, progress=job.progress
    )


def ingest_url(
    job: Job,
    kb: KbName,
    url: Annotated[str, Field(max_length=4096)],
    replace: _REPLACE = False,
) -> IngestResult:
    """Fetch a public http(s) page or file (HTML, PDF, Office, text…) into a knowledge base.

    Size and time are bounded; the URL is kept as provenance.
    """
    return job.service.ingest_url(kb, url, replace=replace, actor=job.actor)


def update_from_source(job: Job, kb: KbName, doc_id: DocId) -> IngestResult:
    """Re-ingest a document from its source file in place (same id); refused if edited by hand."""
    svc = job.service
    return svc.update_from_source(kb, doc_id, actor=job.actor, within=svc.settings.allowed_dirs)
