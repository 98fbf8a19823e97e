"""Curation operations of the service: guarded path and URL ingest, and source tracking.

Documents ingested from a path keep it as ``source_path``; ``check_sources`` compares each one
with its file (hashing it in blocks) and reports ``unchanged``, ``changed``, ``missing``,
``edited`` (the source changed but the document was edited by hand, so it is never clobbered) or
``updated`` (the knowledge base has ``auto_update_sources`` and the document was refreshed).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING

from coffer_mcp.errors import (
    CofferError,
    DocumentNotFoundError,
    IngestRejectedError,
    InvalidArgumentError,
    PathNotAllowedError,
    ReconversionBlockedError,
)
from coffer_mcp.index import queries as q
from coffer_mcp.store import check_path_text
from coffer_mcp.models import DirectoryIngestResult, IngestResult, SourceCheck, SourceReport

if TYPE_CHECKING:
    from coffer_mcp.service import Coffer, Progress

__all__ = ["CurationOperations", "check_inside", "open_source", "read_source"]

_BLOCK = 1 << 20
_NO_FOLLOW = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


def check_inside(path: str | Path, allowed: Sequence[Path]) -> Path:
    """The real path of ``path`` if it lies inside one of ``allowed`` (symlinks resolved).

    Raises:
        InvalidArgumentError: the path holds a NUL byte or is absurdly long.
        PathNotAllowedError: no folder is allowed, the path is relative, or it resolves outside.
    """
    check_path_text(path)
    if not allowed:
        raise PathNotAllowedError(
            "Reading paths is switched off: no folder is allowed.",
            hint="Add folders to allowed_dirs in config.yaml (or COFFER_ALLOWED_DIRS=/one:/two) and restart "
            "the server.",
        )
    if not Path(path).is_absolute():
        raise PathNotAllowedError(f"{str(path)[:200]!r} is not an absolute path.", hint="Pass an absolute path.")
    try:
        real = Path(os.path.realpath(path))
    except OSError as exc:  # a link swapped for a file while it was being resolved
        raise PathNotAllowedError(f"{path} could not be resolved: {exc.strerror}.",
                                  hint="Try again once the file stops changing.") from None  # fmt: skip
    if not any(real == root or real.is_relative_to(root) for root in allowed):
        raise PathNotAllowedError(
            f"{path} is outside the allowed folders.",
            hint=f"Allowed: {', '.join(map(str, allowed))}. Add a folder to allowed_dirs to read from it.",
        )
    return real


@contextlib.contextmanager
def open_source(path: Path, within: Sequence[Path] | None) -> Iterator[tuple[IO[bytes], os.stat_result]]:
    """Open a source file for reading, then check the file that was opened.

    Checking a path and then opening it is a race: the file can be swapped for a symbolic link to
    an outside file in between. So the file is opened first, without following a final symbolic
    link (and without blocking on a FIFO), and only then checked: a regular file, and — with
    ``within`` — the very file (same device and inode) that the path's real location inside
    ``within`` holds now.

    Raises:
        PathNotAllowedError: a symbolic link, or a file that is (or was swapped to) outside ``within``.
        InvalidArgumentError: not a regular file.
        OSError: the file cannot be opened (missing, unreadable).
    """
    check_path_text(path)
    try:
        fd = os.open(path, _NO_FOLLOW)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise PathNotAllowedError(f"{path} is a symbolic link; links are not followed.",
                                      hint="Pass the path of the file the link points to.") from None  # fmt: skip
        raise
    with os.fdopen(fd, "rb") as handle:
        opened = os.fstat(handle.fileno())
        if not stat.S_ISREG(opened.st_mode):
            raise InvalidArgumentError(f"{path} is not a regular file.", hint="Pass a file or a folder of files.")
        if within is not None:
            real = check_inside(path, within)
            try:
                now = os.stat(real)
            except OSError:
                now = None
            if now is None or (now.st_dev, now.st_ino) != (opened.st_dev, opened.st_ino):
                raise PathNotAllowedError(f"{path} was replaced while it was being opened.",
                                          hint="Try again once the file stops changing.")  # fmt: skip
        yield handle, opened


def read_source(path: Path, within: Sequence[Path] | None, *, max_bytes: int) -> bytes:
    """The bytes of a source file opened with ``open_source``, refused beyond ``max_bytes``."""
    with open_source(path, within) as (handle, opened):
        data = handle.read(max_bytes + 1) if opened.st_size <= max_bytes else b""
        if opened.st_size > max_bytes or len(data) > max_bytes:
            raise IngestRejectedError(
                "too_large",
                f"{path.name} is {max(opened.st_size, len(data)):,} bytes; the limit is {max_bytes:,}.",
                hint="Raise max_document_bytes in config.yaml (COFFER_MAX_DOCUMENT_BYTES) or split the file.",
            )
    return data


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
        self: Coffer, kb: str, *, auto_update: bool = True, actor: str = "cli", progress: Progress | None = None,
        within: Sequence[Path] | None = None,
    ) -> SourceReport:  # fmt: skip
        """Compare every path-ingested document with its source file.

        With the KB's ``auto_update_sources`` (and ``auto_update``), changed documents that were
        not edited by hand are refreshed in place and reported ``updated``. With ``within`` (what
        agents get: ``allowed_dirs``), a source outside those folders is neither read nor hashed
        and is reported ``refused``: a source path may come from an untrusted pack.
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
            status, message = _source_status(row, within)
            if status == "changed" and config.auto_update_sources and auto_update:
                self.update_from_source(kb, row["id"], actor=actor, within=within)
                status = "updated"
            checks.append(SourceCheck(document_id=row["id"], title=row["title"], source_path=row["source_path"],
                                      status=status, message=message))  # fmt: skip
            if progress:
                progress(done, len(rows), row["title"])
        counts = {s: sum(c.status == s for c in checks)
                  for s in ("unchanged", "changed", "missing", "edited", "updated", "refused")}  # fmt: skip
        return SourceReport(kb=kb, documents=checks, **counts)

    def update_from_source(
        self: Coffer, kb: str, doc_id: str, *, actor: str = "cli", within: Sequence[Path] | None = None
    ) -> IngestResult:
        """Re-ingest a document in place from its ``source_path``; refused for edited documents.

        With ``within``, the source is read only if it lies inside those folders (as for ingest).
        """
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
            data = read_source(source, within, max_bytes=self.settings.max_document_bytes)
        except OSError as exc:
            raise ReconversionBlockedError(f"Cannot read the source {source}: {exc.strerror}.",
                                           hint="{tool:check_sources} reports it missing; re-ingest from its new place.") from exc  # fmt: skip
        return self._ingest(paths, row["original_filename"], data, replace=True, actor=actor,
                            source_path=row["source_path"])  # fmt: skip


def _source_status(row, within: Sequence[Path] | None) -> tuple[str, str | None]:  # noqa: ANN001 - a row
    """The status of one document's source, and a message when there is something to say."""
    try:
        digest = _sha256_file(Path(row["source_path"]), within)
    except OSError:
        return "missing", "The source file is gone (or on another machine)."
    except CofferError as exc:
        return "refused", f"{exc.message} {exc.hint}".strip()
    if digest == row["source_sha256"]:
        return "unchanged", None
    return ("edited" if row["source_mode"] == "edited" else "changed"), None


def _sha256_file(path: Path, within: Sequence[Path] | None) -> str:
    """The file's sha256, read in 1 MiB blocks (sources may be large)."""
    digest = hashlib.sha256()
    with open_source(path, within) as (handle, _):
        while block := handle.read(_BLOCK):
            digest.update(block)
    return digest.hexdigest()
