"""The source service: guarded path and URL ingest, and tracking the files documents came from.

Documents ingested from a path keep it as ``source_path``; ``check_sources`` compares each one
with its file (hashing it in blocks) and reports ``unchanged``, ``changed``, ``missing``,
``edited`` (the source changed but the document was edited by hand, so it is never clobbered) or
``updated`` (the knowledge base has ``auto_update_sources`` and the document was refreshed). What
its own sync of the followed folders did is said too: ``updated``, ``added``, ``renamed`` and
``removed`` documents (a report of all ``unchanged`` after a sync that changed things would hide it).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import get_args

from coffer_mcp.access import check_inside, read_stamped_source, sha256_source
from coffer_mcp.errors import CofferError, DocumentNotFoundError, ReconversionBlockedError
from coffer_mcp.index import DocumentRow, Index
from coffer_mcp.models import DirectoryIngestResult, IngestResult, Progress, SourceCheck, SourceReport, SourceStatus
from coffer_mcp.services.activity import FollowActivity
from coffer_mcp.services.catalogue import Catalogue
from coffer_mcp.services.documents import DocumentService
from coffer_mcp.services.follow import FollowService
from coffer_mcp.services.freshness import Freshness
from coffer_mcp.settings import Settings
from coffer_mcp.store import stored_document_id

__all__ = ["SourceService"]


class SourceService:
    """Documents that come from somewhere: a path (checked against ``allowed_dirs`` for agents) or a URL."""

    def __init__(
        self,
        *,
        settings: Settings,
        index: Index,
        activity: FollowActivity,
        catalogue: Catalogue,
        freshness: Freshness,
        documents: DocumentService,
        follow: FollowService,
    ) -> None:
        self.settings = settings
        self.index = index
        self.activity = activity
        self.catalogue = catalogue
        self.freshness = freshness
        self.documents = documents
        self.follow = follow

    def ingest_allowed_path(
        self,
        kb: str,
        path: str,
        *,
        replace: bool = False,
        follow: bool = False,
        actor: str = "cli",
        progress: Progress | None = None,
    ) -> DirectoryIngestResult:
        """``ingest_path`` limited to ``allowed_dirs`` (the MCP tool's entry point); ``follow`` keeps following it."""
        allowed = self.settings.allowed_dirs
        real = check_inside(path, allowed)
        if follow:
            return self.follow.follow(kb, real, actor=actor, progress=progress, within=allowed)
        return self.documents.ingest_path(kb, real, replace=replace, actor=actor, progress=progress, within=allowed)

    def ingest_url(self, kb: str, url: str, *, replace: bool = False, actor: str = "cli") -> IngestResult:
        """Fetch ``url`` (SSRF-guarded, bounded) and ingest it; the URL is kept as ``source_url``."""
        from coffer_mcp.fetch import fetch_url  # httpcore (and trio, when installed) load on first use

        paths, _ = self.catalogue.open_kb(kb)
        settings = self.settings
        fetched = fetch_url(
            url,
            max_bytes=min(settings.max_url_bytes, settings.max_document_bytes),
            timeout=settings.url_timeout,
            allow=settings.url_allow_private,
        )
        return self.documents.ingest_bytes(
            paths,
            fetched.filename,
            fetched.content,
            replace=replace,
            actor=actor,
            source_path=None,
            source_url=fetched.url,
        )

    def check_sources(
        self,
        kb: str,
        *,
        auto_update: bool = True,
        actor: str = "cli",
        progress: Progress | None = None,
        within: Sequence[Path] | None = None,
    ) -> SourceReport:
        """Compare every path-ingested document with its source file, and list the folders followed.

        With ``auto_update``, the folders the knowledge base follows are first brought up to date
        (new files ingested, changed ones updated, renamed ones moved, deleted ones removed: see
        ``FollowService``), and
        the report says what that did; files there that could not be ingested are listed ``failed``.
        With the KB's ``auto_update_sources`` (and ``auto_update``), changed documents that were
        not edited by hand are refreshed in place and reported ``updated``. With ``within`` (what
        agents get: ``allowed_dirs``), a source outside those folders is neither read nor hashed
        and is reported ``refused``: a source path may come from an untrusted pack.
        """
        _, config = self.catalogue.open_kb(kb)
        synced: dict[str, SourceStatus] = {}  # document id -> what the sync did to it
        removed: list[SourceCheck] = []
        if auto_update and config.follow:
            # Without a server's watcher, this is what brings followed folders up to date.
            results = self.follow.sync_all(kb, actor=actor, progress=progress, unchanged_items=False)
            synced, removed = _what_was_synced(results)
        self.freshness.refresh(kb)
        rows = self.index.documents(kb, with_source_path=True)
        checks = []
        for done, row in enumerate(rows, 1):
            status, message = _source_status(row, within, self.settings.max_document_bytes)
            if status == "changed" and config.auto_update_sources and auto_update:
                self.update_from_source(kb, row.id, actor=actor, within=within)
                status = "updated"
            elif status == "unchanged":
                status = synced.get(row.id, status)
            checks.append(
                SourceCheck(
                    document_id=row.id,
                    title=row.title,
                    source_path=row.source_path or "",
                    status=status,
                    message=message,
                )
            )
            if progress:
                progress(done, len(rows), row.title)
        checks += removed
        counts = {s: sum(c.status == s for c in checks) for s in get_args(SourceStatus)}
        followed = self.follow.followed(kb, sources=[row.source_path or "" for row in rows])
        failed = self.activity.failed(kb, config.follow)
        return SourceReport(kb=kb, documents=checks, followed=followed, failed=failed, **counts)

    def update_from_source(
        self, kb: str, doc_id: str, *, actor: str = "cli", within: Sequence[Path] | None = None
    ) -> IngestResult:
        """Re-ingest a document in place from its ``source_path``; refused for edited documents.

        With ``within``, the source is read only if it lies inside those folders (as for ingest).
        """
        paths, _ = self.catalogue.open_kb(kb)
        self.freshness.refresh(kb)
        row = self.index.get_document(kb, stored_document_id(doc_id))
        if row is None:
            raise DocumentNotFoundError(
                f"Document {doc_id[:80]!r} does not exist in knowledge base '{kb}'.",
                hint="Find ids with {tool:list_documents}.",
            )
        if not row.source_path:
            raise ReconversionBlockedError(
                f"Document {doc_id} was not ingested from a path: it has no source.",
                hint="Only documents ingested with {tool:ingest_path} track a source file.",
            )
        if row.source_mode == "edited":
            raise ReconversionBlockedError(
                f"Document {doc_id} was edited; updating it from its source would overwrite the edits.",
                hint="Re-ingest the file with {arg:replace=true} if you want the source's version back.",
            )
        source = Path(row.source_path)
        try:
            data, stamp = read_stamped_source(source, within, max_bytes=self.settings.max_document_bytes)
        except OSError as exc:
            raise ReconversionBlockedError(
                f"Cannot read the source {source}: {exc.strerror}.",
                hint="{tool:check_sources} reports it missing; re-ingest from its new place.",
            ) from exc
        return self.documents.ingest_bytes(
            paths,
            row.original_filename,
            data,
            replace=True,
            actor=actor,
            source_path=row.source_path,
            keep_edits=True,
            source_stamp=stamp,
        )


_SYNCED: dict[str, SourceStatus] = {"created": "added", "updated": "updated", "renamed": "renamed"}


def _what_was_synced(results: Sequence[DirectoryIngestResult]) -> tuple[dict[str, SourceStatus], list[SourceCheck]]:
    """What syncs of followed folders did: the documents they updated or added, and those they removed."""
    synced: dict[str, SourceStatus] = {}
    removed: list[SourceCheck] = []
    for item in (item for result in results for item in result.items):
        if item.document_id is None:
            continue
        if item.status in ("created", "updated", "renamed"):
            synced[item.document_id] = _SYNCED[item.status]
        elif item.status == "removed":
            removed.append(
                SourceCheck(
                    document_id=item.document_id,
                    title=item.title or "",
                    source_path=item.path,
                    status="removed",
                    message="Its followed file is gone: the document was removed.",
                )
            )
    return synced, removed


def _source_status(row: DocumentRow, within: Sequence[Path] | None, max_bytes: int) -> tuple[SourceStatus, str | None]:
    """The status of one document's source, and a message when there is something to say.

    A source beyond ``max_bytes`` (``max_document_bytes``) is ``refused`` by its size, unread: it
    could not be updated from anyway.
    """
    try:
        digest = sha256_source(Path(row.source_path or ""), within, max_bytes=max_bytes)
    except OSError:
        return "missing", "The source file is gone (or on another machine)."
    except CofferError as exc:
        return "refused", f"{exc.message} {exc.hint}".strip()
    if digest == row.source_sha256:
        return "unchanged", None
    return ("edited" if row.source_mode == "edited" else "changed"), None
