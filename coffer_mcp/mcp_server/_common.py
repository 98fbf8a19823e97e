"""Annotations and argument types shared by the tool modules.

Bounds the core enforces are imported from the core, so a schema never drifts from what the core
accepts; the bounds defined here are the MCP surface's own (tighter for a model's context window).
"""

from __future__ import annotations

from typing import Annotated

from mcp.types import ToolAnnotations
from pydantic import Field

from coffer_mcp.limits import MAX_OFFSET
from coffer_mcp.models import MAX_TAG_CHARS, MAX_TAGS, SearchFilters
from coffer_mcp.store.paths import MAX_PATH_CHARS

__all__ = [
    "ADD",
    "CHANGE",
    "CREATE",
    "FETCH",
    "MAX_OFFSET",
    "NO_NUL",
    "READ",
    "DocId",
    "Filters",
    "FsPath",
    "KbName",
    "KbSelector",
    "Offset",
    "Tags",
]

# Offsets and positions: far beyond any document or listing a knowledge base can hold, and well
# inside SQLite's 64-bit integers, so a hostile number is refused by the schema, not the database.
# Operating systems refuse NUL inside a path ("embedded null byte"); the schema refuses it first.
NO_NUL = r"^[^\x00]*$"

# No description: the name says it, and a description here is repeated in 17 tools' schemas.
KbName = Annotated[str, Field(max_length=64)]
KbSelector = Annotated[str | list[str], Field(description="A knowledge base name, a list of names, or '*' for all.")]
DocId = Annotated[str, Field(max_length=64)]

Filters = SearchFilters | None  # its schema describes itself
Tags = Annotated[
    Annotated[list[Annotated[str, Field(min_length=1, max_length=MAX_TAG_CHARS)]], Field(max_length=MAX_TAGS)] | None,
    Field(description="Kept in its frontmatter, replacing its own."),
]

# Annotate further for a description: ``Annotated[Offset, Field(description=...)]``.
Offset = Annotated[int, Field(ge=0, le=MAX_OFFSET)]
FsPath = Annotated[str, Field(min_length=1, max_length=MAX_PATH_CHARS, pattern=NO_NUL)]


READ = ToolAnnotations(read_only_hint=True, open_world_hint=False)
ADD = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
CHANGE = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)
CREATE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)
FETCH = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=True)
