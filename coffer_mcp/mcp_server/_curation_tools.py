"""Curation tools: manage knowledge bases, ingest paths and URLs, track sources."""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations
from pydantic import Field

from coffer_mcp.errors import ConfirmationRequiredError
from coffer_mcp.mcp_server._common import ADD, CHANGE, CREATE, READ, DocId, FsPath, KbName, Offset
from coffer_mcp.mcp_server._runner import Job, Runner
from coffer_mcp.models import (
    DeleteResult,
    DirectoryIngestResult,
    DocumentPage,
    IngestResult,
    KnowledgeBaseDetails,
    ReindexResult,
    SourceReport,
)

__all__ = ["CURATION_READ_TOOLS", "CURATION_WRITE_TOOLS", "register_curation"]

CURATION_READ_TOOLS = ("coffer__list_documents", "coffer__knowledge_base_metrics", "coffer__check_sources")
CURATION_WRITE_TOOLS = (
    "coffer__create_knowledge_base",
    "coffer__update_knowledge_base",
    "coffer__delete_knowledge_base",
    "coffer__reindex_knowledge_base",
    "coffer__ingest_path",
    "coffer__ingest_url",
    "coffer__update_from_source",
)
_FETCH = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=True)
_REPLACE = Annotated[bool, Field(description="Update documents whose content changed, in place.")]


def register_curation(server: MCPServer, run: Runner, *, writes: bool) -> None:
    """Register the curation tools; only the read ones when ``writes`` is false (read-only)."""
    _register_reads(server, run, writes=writes)
    if writes:
        _register_kb_writes(server, run)
        _register_ingest(server, run)


def _register_reads(server: MCPServer, run: Runner, *, writes: bool) -> None:
    svc = run.service

    @server.tool(name="coffer__list_documents", annotations=READ)
    async def list_documents(
        kb: KbName,
        ctx: Context,
        q: Annotated[str, Field(description="Only documents whose title contains this (case-insensitive).",
                                max_length=500)] = "",  # fmt: skip
        limit: Annotated[int, Field(ge=1, le=500)] = 50,
        offset: Offset = 0,
    ) -> DocumentPage:
        """List a knowledge base's documents (id, title, filename, format, dates), oldest first.

        Paginated: total is the number matching the filter; call again with offset += limit.
        """
        return await run(ctx, "coffer__list_documents", lambda _: svc.list_documents(kb, q, limit, offset))

    @server.tool(name="coffer__knowledge_base_metrics", annotations=READ)
    async def knowledge_base_metrics(kb: KbName, ctx: Context) -> KnowledgeBaseDetails:
        """Counts and settings of a knowledge base: documents, chunks, retrieval modes, chunking,
        vector switch and embedding model, documents_degraded (documents still without vectors,
        searched by keyword only), and disk bytes.
        """
        return await run(ctx, "coffer__knowledge_base_metrics", lambda _: svc.describe_kb(kb))

    @server.tool(name="coffer__check_sources", annotations=CHANGE if writes else READ)
    async def check_sources(kb: KbName, ctx: Context) -> SourceReport:
        """Compare documents ingested from a path with their source files.

        Each is unchanged, changed, missing, edited (source changed but the document was edited
        by hand, so it is left alone) or updated (refreshed, when the knowledge base has
        auto_update_sources). Use coffer__update_from_source to refresh a changed one.
        """
        return await run(
            ctx, "coffer__check_sources",
            lambda job: svc.check_sources(kb, auto_update=writes, actor=job.actor, progress=job.progress,
                                         within=svc.settings.allowed_dirs),
        )  # fmt: skip


def _register_kb_writes(server: MCPServer, run: Runner) -> None:
    svc = run.service

    @server.tool(name="coffer__create_knowledge_base", annotations=CREATE)
    async def create_knowledge_base(
        name: Annotated[str, Field(description="1-64 characters of a-z, 0-9, '-', '_', '.', not starting with '.'.")],
        ctx: Context,
        description: Annotated[str, Field(description="What the knowledge base holds.", max_length=2000)] = "",
        vector: Annotated[bool, Field(description="Also embed documents for semantic (hybrid) search.")] = False,
    ) -> KnowledgeBaseDetails:
        """Create an empty knowledge base. Add documents to it with coffer__add_document.

        With vector=true, documents are also embedded so searches find paraphrases, not only
        shared words (needs an embedding provider; search falls back to keyword without one).
        """
        return await run(ctx, "coffer__create_knowledge_base",
                         lambda job: svc.create_kb(name, description, vector=vector, actor=job.actor))  # fmt: skip

    @server.tool(name="coffer__update_knowledge_base", annotations=CHANGE)
    async def update_knowledge_base(
        name: KbName,
        ctx: Context,
        description: Annotated[str | None, Field(max_length=2000)] = None,
        chunk_size: Annotated[int | None, Field(ge=64, le=8192, description="Re-chunks every document.")] = None,
        chunk_overlap: Annotated[int | None, Field(ge=0, le=4096)] = None,
        vector: Annotated[bool | None, Field(description="true embeds every document; false drops the vectors.")] = None,
        auto_update_sources: Annotated[bool | None, Field(description="Let check_sources refresh changed "
                                                          "documents.")] = None,  # fmt: skip
    ) -> KnowledgeBaseDetails:
        """Change a knowledge base's settings; only the arguments given change.

        New chunk settings re-chunk the corpus and vector=true embeds it (both report progress).
        """
        def call(job: Job) -> KnowledgeBaseDetails:
            return svc.update_kb(name, description=description, chunk_size=chunk_size, chunk_overlap=chunk_overlap,
                                 vector=vector, auto_update_sources=auto_update_sources, actor=job.actor,
                                 progress=job.progress)  # fmt: skip

        return await run(ctx, "coffer__update_knowledge_base", call)

    @server.tool(name="coffer__delete_knowledge_base", annotations=CHANGE)
    async def delete_knowledge_base(
        name: KbName,
        confirm: Annotated[bool, Field(description="Must be true: the knowledge base and all its documents are deleted.")],
        ctx: Context,
    ) -> DeleteResult:
        """Delete a knowledge base with every document in it (files and index). Cannot be undone."""
        def call(job: Job) -> DeleteResult:
            if confirm is not True:
                raise ConfirmationRequiredError(
                    f"Deleting '{name}' needs confirm=true.",
                    hint="Ask the user first; this deletes every document in the knowledge base.",
                )
            return svc.delete_kb(name, actor=job.actor)

        return await run(ctx, "coffer__delete_knowledge_base", call)

    @server.tool(name="coffer__reindex_knowledge_base", annotations=ADD)
    async def reindex_knowledge_base(
        kb: KbName,
        ctx: Context,
        force: Annotated[bool, Field(description=(
            "Re-read and re-chunk every document, not only changed ones, and convert again from its original "
            "each document whose converter changed since (unless edited)."
        ))] = False,
    ) -> ReindexResult:
        """Bring the index in line with the files (edits made outside Coffer, missing embeddings).

        Searches already do this for changes; use it after big edits on disk, a model change or a
        Coffer upgrade with better converters (force).
        """
        return await run(ctx, "coffer__reindex_knowledge_base",
                         lambda job: svc.reindex(kb, force=force, progress=job.progress, actor=job.actor))  # fmt: skip


def _register_ingest(server: MCPServer, run: Runner) -> None:
    svc = run.service

    @server.tool(name="coffer__ingest_path", annotations=ADD)
    async def ingest_path(
        kb: KbName,
        path: Annotated[FsPath, Field(description="Absolute path of a file or folder inside the allowed folders.")],
        ctx: Context,
        replace: _REPLACE = False,
    ) -> DirectoryIngestResult:
        """Ingest a file, or every file in a folder (recursively), from the user's disk.

        Only inside the folders the user allowed (allowed_dirs); the source path is kept so
        coffer__check_sources can track changes. Reports progress per file.
        """
        return await run(ctx, "coffer__ingest_path",
                         lambda job: svc.ingest_allowed_path(kb, path, replace=replace, actor=job.actor,
                                                             progress=job.progress))  # fmt: skip

    @server.tool(name="coffer__ingest_url", annotations=_FETCH)
    async def ingest_url(
        kb: KbName,
        url: Annotated[str, Field(description="An http(s) URL of a public page or file.", max_length=4096)],
        ctx: Context,
        replace: _REPLACE = False,
    ) -> IngestResult:
        """Fetch a web page or file and add it to a knowledge base (HTML, PDF, Office, text…).

        Only public http(s) addresses; size and time are bounded. The URL is kept as provenance.
        """
        return await run(ctx, "coffer__ingest_url",
                         lambda job: svc.ingest_url(kb, url, replace=replace, actor=job.actor))  # fmt: skip

    @server.tool(name="coffer__update_from_source", annotations=CHANGE)
    async def update_from_source(kb: KbName, doc_id: DocId, ctx: Context) -> IngestResult:
        """Re-ingest a document from its source file in place (same id).

        Refused for documents edited by hand, so edits are never overwritten.
        """
        return await run(ctx, "coffer__update_from_source",
                         lambda job: svc.update_from_source(kb, doc_id, actor=job.actor,
                                                           within=svc.settings.allowed_dirs))  # fmt: skip
