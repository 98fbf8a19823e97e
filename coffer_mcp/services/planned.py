"""What an ingest carries from one step to the next: the bytes it was given, then what it writes.

``Upload`` is a file's bytes with what is known of them before any lock (their hash, taken
once); ``plan`` decides, under the knowledge base's lock, the document's two files and its
frontmatter; ``Planned.write`` writes them, the original first, the Markdown last (its rename is
the commit point of the files). ``Planned.truth`` gives the index what was written without reading
the file back or hashing its body again.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ulid import ULID

from coffer_mcp.convert import Conversion
from coffer_mcp.index import DocumentRow
from coffer_mcp.indexing.truth import Truth, truth_of
from coffer_mcp.models import Chunk
from coffer_mcp.services.uploads import note_tags
from coffer_mcp.store import (
    DocumentMeta,
    FileBatch,
    KbPaths,
    atomic_write_all,
    body_sha256,
    remove_file,
    render_document,
    source_map_bytes,
)
from coffer_mcp.timeutil import utc_now

__all__ = ["Chunked", "Planned", "Upload", "plan"]

Chunked = tuple[tuple[int, int], list[Chunk]]
"""A body's chunks made ahead, with the ``(chunk size, overlap)`` they were made with."""


@dataclass(frozen=True, slots=True)
class Upload:
    """A file's bytes to ingest into a knowledge base, hashed once."""

    paths: KbPaths
    name: str
    data: bytes
    source_path: str | None = None
    source_url: str | None = None
    source_stamp: str = ""  # the source file's, when it vouches for ``data`` (else "")
    source_sha: str = ""

    @classmethod
    def of(
        cls,
        paths: KbPaths,
        name: str,
        data: bytes,
        *,
        source_path: str | None = None,
        source_url: str | None = None,
        source_stamp: str = "",
    ) -> Upload:
        sha = hashlib.sha256(data).hexdigest()
        return cls(paths, name, data, source_path, source_url, source_stamp, sha)


@dataclass(frozen=True, slots=True)
class Planned:
    """An ingest decided under the lock: a document's two files to write, then its rows."""

    paths: KbPaths
    doc_id: str
    existing: DocumentRow | None
    metadata: dict[str, Any]
    body: str
    original: bytes
    ext: str
    details: dict[str, Any]  # the audit record's
    source_stamp: str  # the source file's, when it vouches for ``original`` (else "")
    chunks: Chunked | None = None  # the body's chunks, when they were made ahead
    source_map: bytes | None = None  # where the body's lines are in the original (None: unknown)

    def chunks_for(self, chunk_size: int, chunk_overlap: int) -> list[Chunk] | None:
        """The chunks made ahead, if they were made with these parameters."""
        made = self.chunks
        return made[1] if made is not None and made[0] == (chunk_size, chunk_overlap) else None

    def files(self) -> list[Path]:
        """Every file ``write`` creates, replaces or removes."""
        stale = self._stale_original()
        source_map = self.paths.source_map(self.doc_id)
        return [self._original(self.ext), source_map, self.paths.doc(self.doc_id), *([stale] if stale else [])]

    def write(self) -> None:
        """Write the document's original, its source map and its Markdown, the Markdown landing last, each synced."""
        self.paths.raw.mkdir(exist_ok=True)  # never parents: a deleted knowledge base must stay deleted
        markdown = render_document(self.metadata, self.body).encode("utf-8")
        source_map = self.paths.source_map(self.doc_id)
        maps = [(source_map, self.source_map)] if self.source_map else []
        atomic_write_all([(self._original(self.ext), self.original), *maps, (self.paths.doc(self.doc_id), markdown)])
        if stale := self._stale_original():
            remove_file(stale)
        if not maps and self.existing is not None:
            remove_file(source_map)  # an earlier original's: it says nothing of this one

    def stage(self, batch: FileBatch) -> None:
        """``write`` into ``batch``: the files land, synced, in this order when the batch lands."""
        self.paths.raw.mkdir(exist_ok=True)
        markdown = render_document(self.metadata, self.body).encode("utf-8")
        source_map = self.paths.source_map(self.doc_id)
        batch.write(self._original(self.ext), self.original)
        if self.source_map:
            batch.write(source_map, self.source_map)
        batch.write(self.paths.doc(self.doc_id), markdown)
        if stale := self._stale_original():
            batch.remove(stale)
        if not self.source_map and self.existing is not None:
            batch.remove(source_map)  # an earlier original's: it says nothing of this one

    def truth(self) -> Truth:
        """The written file as the index reads it (its stamp taken now), its body's hash not taken again."""
        sha = str(self.metadata["content_sha256"])
        return truth_of(self.paths, self.doc_id, self.metadata, self.body, source_stamp=self.source_stamp, sha=sha)

    def _original(self, ext: str) -> Path:
        return self.paths.raw / f"{self.doc_id}.{ext or 'bin'}"

    def _stale_original(self) -> Path | None:
        """The original of an earlier upload in another format: only the latest original is kept."""
        old = self.existing
        return self._original(old.original_format) if old is not None and old.original_format != self.ext else None


def plan(
    upload: Upload,
    conversion: Conversion,
    note: dict[str, Any] | None,
    existing: DocumentRow | None,
    on_disk: DocumentRow | None,
    tags: list[str] | None,
    chunks: Chunked | None = None,
) -> Planned:
    """The files of ``upload`` converted to ``conversion``, as document ``existing`` (None: a new one).

    ``on_disk`` is the existing document as its file says (its dates and tags are kept); ``note``
    the frontmatter of a Markdown file's own, kept as ``source_frontmatter`` and read for tags.
    ``tags`` replace the document's own (None keeps them).
    """
    doc_id = existing.id if existing is not None else str(ULID())
    now = utc_now()
    metadata = DocumentMeta(
        id=doc_id,
        title=conversion.title,
        original_filename=upload.name,
        original_format=conversion.original_format,
        source_sha256=upload.source_sha,
        content_sha256=body_sha256(conversion.markdown),
        source_mode="converted",
        conversion_engine=conversion.engine,
        converted_at=now,
        created_at=on_disk.created_at if on_disk is not None else now,
        updated_at=now,
        source_path=upload.source_path,
        source_url=upload.source_url,
        tags=note_tags(note, list(on_disk.tags) if tags is None and on_disk is not None else tags),
        source_frontmatter=note or None,
    ).to_dict()
    return Planned(
        upload.paths,
        doc_id,
        existing,
        metadata,
        conversion.markdown,
        upload.data,
        conversion.original_format,
        {"filename": upload.name, "source_sha256": upload.source_sha},
        upload.source_stamp,
        chunks,
        source_map_bytes(conversion.markdown, conversion.places),
    )
