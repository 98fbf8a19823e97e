"""Curation operations of the service: guarded path and URL ingest, and source tracking.

Documents ingested from a path keep it as ``source_path``; ``check_sources`` compares each one
with its file (hashing it in blocks) and reports ``unchanged``, ``changed``, ``missing``,
``edited`` (the source changed but the document was edited by hand, so it is never clobbered) or
``updated`` (the knowledge base has ``auto_update_sources`` and the document was refreshed).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from coffer_mcp.errors import (
    DocumentNotFoundError,
    PathNotAllowedError,
    ReconversionBlockedError,
)
from coffer_mcp.index import queries as q
from coffer_mcp.models import DirectoryIngestResult, IngestResult, SourceCheck, SourceReport

if TYPE_CHECKING:
    from coffer_mcp.service import Coffer, Progress

__all__ = ["CurationOperations", "check_inside"]

_BLOCK = 1 << 20


def check_inside(path: str | Path, allowed: Sequence[Path]) -> Path:
    """The real path of ``path`` if it lies inside one of ``allowed`` (symlinks resolved).

    Raises:
        PathNotAllowedError: no folder is allowed, the path is relative, or it resolves outside.
    """
    if not allowed:
        raise PathNotAllowedError(
            "Reading paths is switched off: no folder is allowed.",
            hint="Add folders to allowed_dirs in config.yaml (or COFFER_ALLOWED_DIRS=/one:/two) and restart "
            "the server.",
        )
    if not Path(path).is_absolute():
        raise PathNotAllowedError(f"{str(path)[:200]!r} is not an absolute path.", hint="Pass an absolute path.")
    real = Path(os.path.realpath(path))
    if not any(real == root or real.is_relative_to(root) for root in allowed):
        raise PathNotAllowedError(
            f"{path} is outside the allowed folders.",
            hint=f"Allowed: {', '.join(map(str, allowed))}. Add a folder to allowed_dirs to read from it.",
        )
    return real


class CurationOperations:
    """Mixed into ``Coffer``; kept apart so each module stays small."""

    def ingest_allowed_path(
        self: Coffer, kb: str, path: str, *, replace: bool = False, actor: str = "cli",
        progress: Progress | None = None,
    ) -> DirectoryIngestResult:  # fmt: skip
        """``ingest_path`` limited to ``allowed_dirs`` (the MCP tool's entry point)."""
        real = check_inside(path, self.settings.allowed_dirs)
        return self.ingest_path(kb, real, replace=replace, actor=actor, progress=progress,
                                within=self.settings.allowed_dirs)  # fmt: skip

    def ingest_url(self: Coffer, kb: str, url: str, *, replace: bool = False, actor: str = "cli") -> IngestResult:
        """Fetch ``url`` (SSRF-guarded, bounded) and ingest it; the URL is kept as ``source_url``."""
        from coffer_mcp.fetch import fetch_url  # httpcore (and trio, when installed) load on first use

        paths, _ = self.open_kb(kb)
        settings = self.settings
        fetched = fetch_url(url, max_bytes=min(settings.max_url_bytes, settings.max_document_bytes),
                            timeout=settings.url_timeout, allow=settings.url_allow_private)  # fmt: skip
        return self._ingest(paths, fetched.filename, fetched.content, replace=replace, actor=actor,
                            source_path=None, source_url=fetched.url)  # fmt: skip

    def check_sources(
        self: Coffer, kb: str, *, auto_update: bool = True, actor: str = "cli", progress: Progress | None = None
    ) -> SourceReport:
        """Compare every path-ingested document with its source file.

        With the KB's ``auto_update_sources`` (and ``auto_update``), changed documents that were
        not edited by hand are refreshed in place and reported ``updated``.
        """
        paths, config = self.open_kb(kb)
        self.refresh(kb)
        rows = self.conn.execute(
            "SELECT id, title, source_path, source_sha256, source_mode FROM documents "
            "WHERE kb = ? AND source_path IS NOT NULL ORDER BY created_at, id",
            (kb,),
        ).fetchall()
        checks = []
        for done, row in enumerate(rows, 1):
            status = _source_status(row)
            message = None
            if status == "changed" and config.auto_update_sources and auto_update:
                self.update_from_source(kb, row["id"], actor=actor)
                status = "updated"
            elif status == "missing":
                message = "The source file is gone (or on another machine)."
            checks.append(SourceCheck(document_id=row["id"], title=row["title"], source_path=row["source_path"],
                                      status=status, message=message))  # fmt: skip
            if progress:
                progress(done, len(rows), row["title"])
        counts = {s: sum(c.status == s for c in checks) for s in ("unchanged", "changed", "missing", "edited",
                                                                   "updated")}  # fmt: skip
        return SourceReport(kb=kb, documents=checks, **counts)

    def update_from_source(self: Coffer, kb: str, doc_id: str, *, actor: str = "cli") -> IngestResult:
        """Re-ingest a document in place from its ``source_path``; refused for edited documents."""
        paths, _ = self.open_kb(kb)
        self.refresh(kb)
        row = q.get_document(self.conn, kb, doc_id)
        if row is None:
            raise DocumentNotFoundError(f"Document {doc_id[:80]!r} does not exist in knowledge base '{kb}'.",
                                        hint="Find ids with {tool:list_documents}.")  # fmt: skip
        if not row["source_path"]:
            raise ReconversionBlockedError(f"Document {doc_id} was not ingested from a path: it has no source.",
                                           hint="Only documents ingested with {tool:ingest_path} track a source file.")  # fmt: skip
        if row["source_mode"] == "edited":
            raise ReconversionBlockedError(
                f"Document {doc_id} was edited; updating it from its source would overwrite the edits.",
                hint="Re-ingest the file with {arg:replace=true} if you want the source's version back.",
            )
        source = Path(row["source_path"])
        try:
            data = source.read_bytes()
        except OSError as exc:
            raise ReconversionBlockedError(f"Cannot read the source {source}: {exc.strerror}.",
                                           hint="{tool:check_sources} reports it missing; re-ingest from its new place.") from exc  # fmt: skip
        return self._ingest(paths, row["original_filename"], data, replace=True, actor=actor,
                            source_path=row["source_path"])  # fmt: skip


def _source_status(row) -> str:  # noqa: ANN001 - a database row
    try:
        digest = _sha256_file(Path(row["source_path"]))
    except OSError:
        return "missing"
    if digest == row["source_sha256"]:
        return "unchanged"
    return "edited" if row["source_mode"] == "edited" else "changed"


def _sha256_file(path: Path) -> str:
    """The file's sha256, read in 1 MiB blocks (sources may be large)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(_BLOCK):
            digest.update(block)
    return digest.hexdigest()
