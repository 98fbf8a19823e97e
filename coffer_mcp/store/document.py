"""The frontmatter Coffer writes on a document: one model for every writer.

A new document's frontmatter — from an ingest, or the adoption of a file dropped into ``docs/`` —
is built here, so every file Coffer writes carries the same fields in the same order. An edit or
a re-conversion rewrites an existing file: it sets its own fields in that file's mapping
(``updated``), so keys written by hand stay, in their place.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from coffer_mcp.models import MAX_TAGS, unique_tags

__all__ = ["DocumentMeta", "frontmatter_tags"]

_OPTIONAL = ("source_path", "source_url", "tags", "source_frontmatter")


@dataclass(frozen=True, slots=True)
class DocumentMeta:
    """A document's frontmatter (see docs/guide.md, "What a document looks like on disk")."""

    id: str
    title: str
    original_filename: str
    original_format: str
    source_sha256: str
    content_sha256: str
    source_mode: Literal["converted", "edited"]
    conversion_engine: str
    converted_at: str | None
    created_at: str
    updated_at: str
    source_path: str | None = None
    source_url: str | None = None
    tags: list[str] | None = None
    source_frontmatter: dict[str, Any] | None = None
    """A Markdown file's own frontmatter block, as it was (its title and tags also became the document's)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Other keys of the file's frontmatter, kept as they are."""

    def to_dict(self) -> dict[str, Any]:
        """The frontmatter mapping: the known keys in order (optional ones only when set), then the others."""
        # Field by field, not ``asdict``: its deep copy of every value was a tenth of a small file's ingest.
        known = {name: getattr(self, name) for name in _FIELDS}
        known["tags"] = list(self.tags) if self.tags is not None else None
        known["source_frontmatter"] = copy.deepcopy(self.source_frontmatter)
        ordered = {key: value for key, value in known.items() if key not in _OPTIONAL or value}
        return {**ordered, **{key: value for key, value in self.extra.items() if key not in known}}

    @staticmethod
    def updated(frontmatter: dict[str, Any], **values: Any) -> dict[str, Any]:
        """An existing file's frontmatter with Coffer's ``values`` set (what an edit or re-conversion writes).

        Keys keep their place in the file, hand-written ones included; missing ones are added.
        """
        unknown = set(values) - set(DocumentMeta.__dataclass_fields__)
        if unknown:
            raise ValueError(f"not document fields: {sorted(unknown)}")
        return {**frontmatter, **values}


def frontmatter_tags(frontmatter: Mapping[str, Any]) -> tuple[str, ...]:
    """The tags a frontmatter gives its document, however they were written by hand.

    ``tags`` may be a list (``[a, b]``, or one item per line) or one string of tags separated by
    commas or, without commas, by spaces (``a, b`` or ``a b``); a leading ``#`` is dropped and a
    tag differing from an earlier one only by case is the same tag. Other shapes give no tags.
    """
    value = frontmatter.get("tags")
    if isinstance(value, str):
        value = value.split(",") if "," in value else value.split()
    if not isinstance(value, list):
        return ()
    return tuple(unique_tags(value)[:MAX_TAGS])


_FIELDS = tuple(f.name for f in fields(DocumentMeta) if f.name != "extra")
