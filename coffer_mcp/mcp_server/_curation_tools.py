"""Curation tools' bodies: manage knowledge bases, ingest paths and URLs, track sources.

Each body takes the ``Job`` first and the tool's arguments after it; its docstring is the tool's
description and its parameters are the input schema. Names and annotations are in ``_registry``.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

from coffer_mcp.errors import ConfirmationRequiredError
from coffer_mcp.mcp_server._common import DocId, FsPath, KbName, Offset
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


def _bound(model: type[BaseModel], field: str, kind: str) -> int:
    """The ``ge``/``le`` bound a pydantic model declares on ``field``, so the schema repeats no number."""
    return next(getattr(m, kind) for m in model.model_fields[field].metadata if hasattr(m, kind))


CHUNK_SIZE_MIN = _bound(KbConfig, "chunk_size", "ge")
CHUNK_SIZE_MAX = _bound(KbConfig, "chunk_size", "le")
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
) -> DocumentPage:
    """List a knowledge base's documents (id, title, filename, format, dates), oldest first.

    Paginated: total is the number matching the filter; call again with offset += limit.
    """
    return job.service.list_documents(kb, q, limit, offset)


def knowledge_base_metrics(job: Job, kb: KbName) -> KnowledgeBaseDetails:
    """Counts and settings of a knowledge base: documents, chunks, retrieval modes, chunking,
    vector switch and embedding model, documents_degraded (documents still without vectors,
    searched by keyword only), followed folders (changes pending, last sync), and disk bytes.
    """
    return job.service.describe_kb(kb)


def check_sources(job: Job, kb: KbName) -> SourceReport:
    """Compare documents ingested from a path with their source files; list the folders followed.

    Each is unchanged, changed, missing, edited (source changed but the document was edited
    by hand, so it is left alone: a conflict) or updated (refreshed, when the knowledge base
    has auto_update_sources). Followed folders are brought up to date first. Use
    coffer__update_from_source to refresh a changed one.
    """
    svc = job.service
    return svc.check_sources(
        kb, auto_update=job.writes, actor=job.actor, progress=job.progress, within=svc.settings.allowed_dirs
    )


def create_knowledge_base(
    job: Job,
    name: Annotated[str, Field(description="1-64 characters of a-z, 0-9, '-', '_', '.', not starting with '.'.")],
    description: Annotated[str, Field(description="What the knowledge base holds.", max_length=MAX_DESCRIPTION)] = "",
    vector: Annotated[bool, Field(description="Also embed documents for semantic (hybrid) search.")] = False,
) -> KnowledgeBaseDetails:
    """Create an empty knowledge base. Add documents to it with coffer__add_document.

    With vector=true, documents are also embedded so searches find paraphrases, not only
    shared words (needs an embedding provider; search falls back to keyword without one).
    """
    return job.service.create_kb(name, description, vector=vector, actor=job.actor)


def update_knowledge_base(
    job: Job,
    name: KbName,
    description: Annotated[str | None, Field(max_length=MAX_DESCRIPTION)] = None,
    chunk_size: Annotated[
        int | None, Field(ge=CHUNK_SIZE_MIN, le=CHUNK_SIZE_MAX, description="Re-chunks every document.")
    ] = None,
    chunk_overlap: Annotated[int | None, Field(ge=0, le=CHUNK_OVERLAP_MAX)] = None,
    vector: Annotated[bool | None, Field(description="true embeds every document; false drops the vectors.")] = None,
    auto_update_sources: Annotated[
        bool | None, Field(description="Let check_sources refresh changed documents.")
    ] = None,
) -> KnowledgeBaseDetails:
    """Change a knowledge base's settings; only the arguments given change.

    New chunk settings re-chunk the corpus and vector=true embeds it (both report progress).
    """
    return job.service.update_kb(
        name,
        description=description,
        chunk_size=chunk_size,
        chunk_overlap=chunk_overlap,
        vector=vector,
        auto_update_sources=auto_update_sources,
        actor=job.actor,
        progress=job.progress,
    )


def delete_knowledge_base(
    job: Job,
    name: KbName,
    confirm: Annotated[bool, Field(description="Must be true: the knowledge base and all its documents are deleted.")],
) -> DeleteResult:
    """Delete a knowledge base with every document in it (files and index). Cannot be undone."""
    if confirm is not True:
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
            description=(
                "Re-read and re-chunk every document, not only changed ones, and convert again from its original "
                "each document whose converter changed since (unless edited)."
            )
        ),
    ] = False,
) -> ReindexResult:
    """Bring the index in line with the files (edits made outside Coffer, missing embeddings).

    Searches already do this for changes; use it after big edits on disk, a model change or a
    Coffer upgrade with better converters (force).
    """
    return job.service.reindex(kb, force=force, progress=job.progress, actor=job.actor)


def ingest_path(
    job: Job,
    kb: KbName,
    path: Annotated[FsPath, Field(description="Absolute path of a file or folder inside the allowed folders.")],
    replace: _REPLACE = False,
    follow: Annotated[
        bool,
        Field(
            description="Keep following the folder: new, changed and deleted files are applied from now on "
            "(documents edited in Coffer are never overwritten)."
        ),
    ] = False,
) -> DirectoryIngestResult:
    """Ingest a file, or every file in a folder (recursively), from the user's disk.

    Only inside the folders the user allowed (allowed_dirs); the source path is kept so
    coffer__check_sources can track changes. With follow=true the folder stays in step:
    the server applies its changes as they happen. Reports progress per file.
    """
    return job.service.ingest_allowed_path(
        kb, path, replace=replace, follow=follow, actor=job.actor, progress=job.progress
    )


def ingest_url(
    job: Job,
    kb: KbName,
    url: Annotated[str, Field(description="An http(s) URL of a public page or file.", max_length=4096)],
    replace: _REPLACE = False,
) -> IngestResult:
    """Fetch a web page or file and add it to a knowledge base (HTML, PDF, Office, text…).

    Only public http(s) addresses; size and time are bounded. The URL is kept as provenance.
    """
    return job.service.ingest_url(kb, url, replace=replace, actor=job.actor)


def update_from_source(job: Job, kb: KbName, doc_id: DocId) -> IngestResult:
    """Re-ingest a document from its source file in place (same id).

    Refused for documents edited by hand, so edits are never overwritten.
    """
    svc = job.service
    return svc.update_from_source(kb, doc_id, actor=job.actor, within=svc.settings.allowed_dirs)
