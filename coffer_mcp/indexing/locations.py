"""Chunks and lines of a document with their place in its original, from its source map.

Indexing gives each chunk the ``source_location`` of the body lines it comes from
(``store.sourcemap``); reads and grep give a page of the body, or a matching line, theirs. All
of it is derived from the files (the document and ``raw/<id>.map.json``), so a rebuild of the
index finds the same locations.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from coffer_mcp.models import Chunk
from coffer_mcp.store import KbPaths, Location, Place, read_source_map, span_location

__all__ = ["BodyPlaces", "body_places", "located_chunks", "text_location"]


@dataclasses.dataclass(frozen=True, slots=True)
class BodyPlaces:
    """Where each line of one document's body is in its original."""

    places: Sequence[Place]

    def of_lines(self, first: int, last: int) -> Location | None:
        """The location of body lines ``first..last`` (1-based, inclusive); None when unknown."""
        return span_location(self.places, first, last)


def body_places(kb: KbPaths, doc_id: str, body: str) -> BodyPlaces | None:
    """The places of ``body``'s lines (the document's body as on disk now); None without a source map."""
    source_map = read_source_map(kb, doc_id)
    if source_map is None:
        return None
    return BodyPlaces(source_map.places_of(body.replace("\r\n", "\n").replace("\r", "\n")))


def located_chunks(kb: KbPaths, doc_id: str, body: str, chunks: list[Chunk]) -> list[Chunk]:
    """``chunks`` of ``body`` with their ``source_location`` (as they are when it has no source map)."""
    places = body_places(kb, doc_id, body) if chunks else None
    if places is None:
        return chunks
    return [
        dataclasses.replace(chunk, source_location=places.of_lines(*chunk.lines)) if chunk.lines else chunk
        for chunk in chunks
    ]


def text_location(kb: KbPaths, doc_id: str, body: str, first_line: int, text: str) -> Location | None:
    """The location of ``text``, the part of ``body`` from line ``first_line`` on (a page read); None if unknown."""
    if not text.strip():
        return None
    places = body_places(kb, doc_id, body)
    if places is None:
        return None
    return places.of_lines(first_line, first_line + text.rstrip("\n").count("\n"))
