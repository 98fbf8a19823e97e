"""Walking a folder for documents, and the item each of its files is reported as.

Shared by folder ingests, followed folders and their rename detection: one rule for which files
are documents (visible regular files, never an editor's own files, no symbolic links) and one
shape for what happened to each. The walk is where the names of a folder's files enter Coffer: a
name that is not valid UTF-8 stops there, reported (``undecodable_item``), never walked into.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from coffer_mcp.errors import CofferError
from coffer_mcp.models import DirectoryIngestItem, IngestResult
from coffer_mcp.store import decodable, shown_path, undecodable_name

__all__ = ["editors_file", "failed_item", "ingested_item", "skipped_name", "undecodable_item", "visible_files"]

_SKIPPED_DIRS = {"node_modules", "__pycache__", "venv", ".venv"}


def ingested_item(file: Path, result: IngestResult) -> DirectoryIngestItem:
    """A file of a folder ingest (or of a followed folder) that was ingested, or found unchanged."""
    return DirectoryIngestItem(path=str(file), status=result.status, document_id=result.document_id, title=result.title)


def failed_item(file: Path, exc: CofferError | OSError) -> DirectoryIngestItem:
    """A file of a folder ingest (or of a followed folder) that was not ingested, and why."""
    path = shown_path(str(file))
    if isinstance(exc, CofferError):
        status: Literal["conflict", "rejected"] = "conflict" if exc.code == "source_conflict" else "rejected"
        return DirectoryIngestItem(path=path, status=status, code=exc.code, message=exc.message, hint=exc.hint or None)
    return DirectoryIngestItem(
        path=path,
        status="rejected",
        code="unreadable",
        message=str(exc),
        hint="Check that the file exists and is readable by this user.",
    )


def undecodable_item(path: Path) -> DirectoryIngestItem:
    """A file or folder of a folder ingest whose name is not valid UTF-8: rejected, its bytes shown escaped."""
    return failed_item(path, undecodable_name(str(path)))


def visible_files(
    root: Path, *, folders: set[str] | None = None, undecodable: list[Path] | None = None
) -> Iterator[Path]:
    """Visible regular files under ``root``; hidden files and folders (and a few tool folders) skipped.

    Symbolic links are never followed: neither linked files nor linked folders are walked. The
    folders walked are added to ``folders`` when it is given. A file or folder whose name is not
    valid UTF-8 is neither yielded nor walked into (nor opened: watchfiles stops at the event an
    open makes) but added to ``undecodable`` when it is given, for the caller to report.
    """
    if not decodable(str(root)):
        if undecodable is not None:
            undecodable.append(root)
        return
    for folder, dirs, files in os.walk(root):
        if folders is not None:
            folders.add(folder)
        dirs[:] = [d for d in dirs if not skipped_name(d) and _usable(Path(folder) / d, undecodable)]
        for name in files:
            path = Path(folder) / name
            if name.startswith(".") or editors_file(name) or not _usable(path, undecodable):
                continue
            if path.is_file() and not path.is_symlink():
                yield path


def _usable(path: Path, undecodable: list[Path] | None) -> bool:
    """Whether a name found by the walk is valid UTF-8; one that is not goes to ``undecodable``."""
    if decodable(path.name):
        return True
    if undecodable is not None and not path.is_symlink():
        undecodable.append(path)
    return False


def skipped_name(name: str) -> bool:
    """Whether a folder walk skips this name: hidden (``.git``, editors' temp files) or a tool folder."""
    return name.startswith(".") or name in _SKIPPED_DIRS


def editors_file(name: str) -> bool:
    """Whether a file is one an editor keeps beside the file it opened: never a document of its own.

    Office's owner files (``~$report.docx``) and temporary saves (``~WRL0001.tmp``), backups
    (``notes.md~``), Emacs auto-saves (``#notes.md#``), Vim swap files (``notes.swp``); the
    hidden ones (``.~lock.report.docx#``, ``.notes.md.swp``) are skipped as hidden files.
    """
    if name.startswith("~$") or name.endswith(("~", ".swp", ".swo", ".swx")):
        return True
    return (name.startswith("~") and name.endswith(".tmp")) or (len(name) > 1 and name[0] == name[-1] == "#")
