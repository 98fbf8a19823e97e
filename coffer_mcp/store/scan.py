"""The one scan of a knowledge base's ``docs/`` folder: which Markdown files are there.

Reconcile-on-read runs it before every read, over every file, so it reads no content and makes
no ``stat`` call the directory entry can answer.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from coffer_mcp.store.paths import KbPaths, is_document_id

__all__ = ["document_files", "markdown_entries"]


def markdown_entries(folder: Path) -> Iterator[os.DirEntry[str]]:
    """The visible ``*.md`` regular files directly in ``folder`` (none if it is missing); links are skipped."""
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                name = entry.name
                if name.endswith(".md") and not name.startswith(".") and entry.is_file(follow_symlinks=False):
                    yield entry
    except FileNotFoundError:
        return


def document_files(kb: KbPaths) -> dict[str, Path]:
    """``{document_id: path}`` of the files of ``docs/`` named by a document id."""
    return {entry.name[:-3]: Path(entry.path) for entry in markdown_entries(kb.docs) if is_document_id(entry.name[:-3])}
