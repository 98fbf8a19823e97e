"""Annotations and argument types shared by the tool modules."""

from __future__ import annotations

from typing import Annotated

from mcp.types import ToolAnnotations
from pydantic import Field

__all__ = ["ADD", "CHANGE", "CREATE", "READ", "DocId", "KbName", "KbSelector"]

KbName = Annotated[str, Field(description="Knowledge base name (see coffer__list_knowledge_bases).", max_length=64)]
KbSelector = Annotated[
    str | list[str],
    Field(description="A knowledge base name, a list of names, or '*' for every knowledge base."),
]
DocId = Annotated[str, Field(description="Document id (a 26-character ULID).", max_length=64)]

READ = ToolAnnotations(read_only_hint=True, open_world_hint=False)
ADD = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
CHANGE = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)
CREATE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)
