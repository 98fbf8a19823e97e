"""What an upload is: its name, its text, its own frontmatter, and which earlier upload it replaces.

The rules an ingest applies to what it is given before anything is converted or written: a name
that cannot escape the store, text without NUL characters or undeclared base64, a Markdown note's
own frontmatter taken as metadata, and an upload matched only against earlier uploads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from coffer_mcp.convert import Conversion, derive_title, looks_like_base64_of, text_upload_name
from coffer_mcp.errors import IngestRejectedError, InvalidArgumentError
from coffer_mcp.index import DocumentRow
from coffer_mcp.indexing.truth import text_field
from coffer_mcp.models import MAX_TAGS, unique_tags
from coffer_mcp.store import frontmatter_tags, note_frontmatter, sanitize_filename

__all__ = [
    "NAMED",
    "document_filename",
    "note_tags",
    "text_upload",
    "upload_match",
    "without_note_block",
    "without_nul",
]

NAMED = 10
"""The documents of one filename an upload weighs (and a refusal lists)."""


def upload_match(kb: str, name: str, named: Sequence[DocumentRow]) -> DocumentRow | None:
    """The document an upload of ``name`` is a new version of, among the documents of that name (uploads first).

    Only an earlier upload can be: a document ingested from a path or URL is that source's (its
    re-ingest, ``check_sources`` and a followed folder keep it in step), and an upload taking it
    over would drop its source and its original unseen.

    Raises:
        IngestRejectedError: ``duplicate``: several uploads have the name, or only documents of a source do.
    """
    uploads = [row for row in named if not (row.source_path or row.source_url)]
    if len(uploads) == 1:
        return uploads[0]
    if uploads:
        raise IngestRejectedError(
            "duplicate",
            f"'{name}' is the name of {_listed(uploads)} uploaded documents in knowledge base '{kb}' "
            f"({', '.join(row.id for row in uploads)}): an upload cannot tell which one it is a new version of, "
            "so nothing was written.",
            hint="Change the one you mean with {tool:edit_document} and its doc_id, or delete the others with "
            "{tool:delete_document} and upload again; or upload under another filename.",
        )
    if named:
        sources = "; ".join(f"{row.id} from {row.source_path or row.source_url}" for row in named)
        raise IngestRejectedError(
            "duplicate",
            f"'{name}' is the name of {_listed(named, 'document')} ingested from a file or URL in knowledge base "
            f"'{kb}' ({sources}): an upload never replaces such a document, so nothing was written.",
            hint="To change that document, edit it with {tool:edit_document} and its doc_id (it keeps its source), "
            "or ingest its source again ({tool:ingest_path} or {tool:ingest_url} with {arg:replace=true}); to add "
            "your file as a document of its own, upload it under another filename.",
        )
    return None


def _listed(rows: Sequence[DocumentRow], noun: str = "") -> str:
    """How many ``rows`` there are (``10 or more`` when ``NAMED`` were looked at), with ``noun`` pluralised."""
    count = f"{len(rows)} or more" if len(rows) >= NAMED else str(len(rows))
    if not noun:
        return count
    return f"a {noun}" if len(rows) == 1 else f"{count} {noun}s"


def without_note_block(name: str, conversion: Conversion) -> tuple[Conversion, dict[str, Any] | None]:
    """A Markdown file's conversion without its own frontmatter block, and that block's mapping.

    A note's block (Obsidian, Jekyll, Hugo) is metadata, not text to index: its ``title`` is the
    document's, its tags join the document's (``note_tags``), and the whole block is kept as
    ``source_frontmatter`` (the original bytes stay in ``raw/``).

    Raises:
        IngestRejectedError: ``empty``, the file is a block with no body after it.
    """
    if conversion.original_format not in ("md", "markdown"):
        return conversion, None
    found = note_frontmatter(conversion.markdown)
    if found is None:
        return conversion, None
    note, body = found
    if not body:
        raise IngestRejectedError(
            "empty",
            f"{name!r} has a frontmatter block and no text after it.",
            hint="The file has no text to index; check that you picked the right file.",
        )
    title = text_field(note.get("title")) or derive_title(body, name)
    markdown = conversion.markdown.rstrip()
    # The body's lines are the conversion's last ones: they keep their places (the file's lines).
    dropped = markdown[: len(markdown) - len(body)].count("\n") if markdown.endswith(body) else None
    places = conversion.places[dropped:] if dropped is not None else ()
    return Conversion(body, title, conversion.engine, conversion.original_format, places), note


def note_tags(note: object, tags: list[str] | None) -> list[str] | None:
    """``tags`` after the tags of a Markdown file's own frontmatter ``note`` (None: no tags at all)."""
    own = frontmatter_tags(note) if isinstance(note, dict) else ()
    if not own:
        return tags
    return unique_tags([*own, *(tags or [])])[:MAX_TAGS]


def without_nul(content: str) -> tuple[str, str | None]:
    """Text content without its NUL characters, and a note saying where they were.

    Text holds no NUL: a body drops control characters anyway (``clean_markdown``, as an edit's does),
    and PostgreSQL text cannot hold one. Left in, the UTF-8 bytes looked binary and text an agent sent
    was refused as such; they are dropped from the kept original too, so reconverting it works.
    """
    first = content.find("\x00")
    if first < 0:
        return content, None
    count = content.count("\x00")
    said = "1 NUL character (\\x00) was" if count == 1 else f"{count:,} NUL characters (\\x00) were"
    return content.replace("\x00", ""), f"{said} removed from the content, the first at offset {first:,}."


def text_upload(name: str, content: str) -> tuple[str, str | None]:
    """The name to convert text content under, and a note when it was not the given one.

    Raises:
        InvalidArgumentError: the text is the base64 of a binary file sent without saying so.
    """
    if looks_like_base64_of(name, content):
        raise InvalidArgumentError(
            f"The content of {name!r} is base64 text, not a {name.rsplit('.', 1)[-1].upper()} file.",
            hint='Pass content_encoding="base64" with it.',
        )
    converted, added = text_upload_name(name)
    if not added:
        return name, None
    return converted, f"{name!r} has no extension: its text was ingested as Markdown, as {converted!r}."


def document_filename(filename: str) -> str:
    """The name a file is kept under (``sanitize_filename``), or the invalid-argument error when none is left."""
    name = sanitize_filename(filename or "")
    if not name:
        raise InvalidArgumentError(
            f"The filename {filename!r:.80} has no usable name.",
            hint="Pass a plain file name with an extension, e.g. 'notes.md'.",
        )
    return name
