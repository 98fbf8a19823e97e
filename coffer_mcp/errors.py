"""The errors Coffer raises, each with a machine ``code`` and an actionable ``hint``.

Every surface maps these at its edge: ``mcp_server`` turns them into MCP tool errors carrying
``code``, ``message`` and ``hint``; ``cli`` prints one line and exits non-zero. Foreign exceptions
are mapped where they enter our code (``raise ... from exc``).

A hint may name a tool or an argument by placeholder, ``{tool:search_knowledge}`` or
``{arg:replace=true}``, so that each surface says it in its own words: ``hint`` (and
``to_dict()``) give the MCP wording (``coffer__search_knowledge``, ``replace=true``),
``hint_for("cli")`` the command line's (``coffer kb search``, ``--replace``), ``hint_for("web")``
the viewer's (``the search box``). Every placeholder has a wording in ``TOOL_WORDS`` or
``ARG_WORDS`` for every surface (a test checks the whole package).

    CofferError
    ├── InvalidArgumentError            invalid_argument | invalid_url (a URL that does not parse)
    │                                   | undecodable_name (a path that is not valid UTF-8)
    │                                   | invalid_request (a JSON-RPC request that does not parse)
    │   ├── InvalidNameError            invalid_name
    │   ├── InvalidPatternError         invalid_pattern
    │   ├── ConfirmationRequiredError   confirmation_required | confirmation_declined
    │   ├── PathNotAllowedError         path_not_allowed
    │   └── UrlRefusedError             url_refused
    ├── FetchError                      fetch_failed
    ├── NotFoundError
    │   ├── KnowledgeBaseNotFoundError  unknown_kb
    │   ├── DocumentNotFoundError       unknown_document
    │   └── SnapshotNotFoundError       unknown_snapshot
    ├── KnowledgeBaseExistsError        kb_exists
    ├── EditConflictError               edit_conflict
    ├── PackError                       invalid_pack (a damaged, tampered or unsafe pack)
    ├── IngestRejectedError             unsupported_type | too_large | empty | scanned_pdf | duplicate
    │                                   | conversion_failed (a malformed file the engine cannot read)
    │   └── EngineUnavailableError      engine_unavailable
    ├── ReconversionBlockedError        reconversion_blocked
    │   └── SourceConflictError         source_conflict
    ├── EmbeddingError                  embedding_unavailable | embedding_cooling_down | store_model_changed
    ├── RerankError                     rerank_unavailable (search keeps its order; doctor reports it)
    ├── ConfigError                     invalid_config
    ├── InsufficientScopeError          insufficient_scope (an OAuth token without the scope a tool needs)
    ├── FrontmatterError                invalid_frontmatter (a document's YAML, typed by hand, does not parse)
    ├── StoreError                      store_error | busy | schema_too_new
    │   └── SnapshotError               invalid_snapshot
    └── the viewer's file actions       NoOpenerError no_opener, OpenerFailedError opener_failed,
                                        OutsideStoreError outside_store, ForbiddenActionError
                                        forbidden_action

Every error class lives here (a test checks). Every code any ``CofferError`` carries is declared
with its meaning in ``ERROR_CODES`` (or ``VIEWER_ERROR_CODES`` for the viewer's HTTP API only);
the error tables in docs/ are generated from them and a test keeps them complete.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

__all__ = [
    "ARG_WORDS",
    "ERROR_CODES",
    "REJECTION_REASONS",
    "SURFACES",
    "TOOL_WORDS",
    "VIEWER_ERROR_CODES",
    "CofferError",
    "ConfigError",
    "ConfirmationRequiredError",
    "DocumentNotFoundError",
    "EditConflictError",
    "EmbeddingError",
    "EngineUnavailableError",
    "FetchError",
    "ForbiddenActionError",
    "FrontmatterError",
    "IngestRejectedError",
    "InsufficientScopeError",
    "InvalidArgumentError",
    "InvalidNameError",
    "InvalidPatternError",
    "KnowledgeBaseExistsError",
    "KnowledgeBaseNotFoundError",
    "NoOpenerError",
    "NotFoundError",
    "OpenerFailedError",
    "OutsideStoreError",
    "PackError",
    "PathNotAllowedError",
    "ReconversionBlockedError",
    "RerankError",
    "SnapshotError",
    "SnapshotNotFoundError",
    "SourceConflictError",
    "StoreError",
    "Surface",
    "UrlRefusedError",
    "counted",
    "render_hint",
    "reword",
    "validation_message",
    "validation_problem",
]

REJECTION_REASONS = frozenset(
    {
        "unsupported_type",
        "too_large",
        "empty",
        "scanned_pdf",
        "duplicate",
        "engine_unavailable",
        "conversion_failed",
    }
)

ERROR_CODES: dict[str, str] = {
    "invalid_argument": "an argument the input schema refuses (missing, wrong type, out of range, too long, a NUL "
    "in a path) or does not declare (the hint lists the accepted ones), or one the core refuses; the message names "
    "the argument, the hint what it allows",
    "invalid_name": "a knowledge-base name breaking the naming rule",
    "invalid_pattern": "a regex that does not compile",
    "confirmation_required": "a destructive call without `confirm=true`, from a client that cannot ask the user",
    "confirmation_declined": "the user declined or dismissed the confirmation the client showed for a destructive "
    "call, or the client's answer was not a clear yes; nothing was changed",
    "path_not_allowed": "a path outside `allowed_dirs` (the hint lists them, or how to allow one)",
    "url_refused": "a URL the SSRF guard refuses: another scheme, a private, local or metadata address, "
    "credentials or a backslash in it",
    "invalid_url": "a URL that does not parse (`http://[::1`, a bad port, a host that is not a valid name)",
    "fetch_failed": "a network or HTTP failure while fetching a URL, or `url_timeout` reached",
    "unknown_kb": "no such knowledge base (the hint lists those that exist)",
    "unknown_document": "no such document id in that knowledge base",
    "unknown_snapshot": "no such snapshot of that knowledge base",
    "unknown_client": "`coffer auth revoke --client`: no such OAuth client (`coffer auth clients` lists them)",
    "unknown_grant": "`coffer auth revoke --grant`: no such live grant (`coffer auth tokens` lists them)",
    "unknown_tool": "a tool this server does not offer (e.g. a write tool with `--read-only`); the hint lists those "
    "it does",
    "unknown_prompt": "`prompts/get` of a prompt this server does not offer (e.g. `file_note` with `--read-only`); "
    "the hint lists those it does",
    "kb_exists": "creating (or importing under) the name of a knowledge base that exists",
    "edit_conflict": "`edit_document` refused to replace a body that changed since it was read "
    "(`expected_content_sha256` differs), or, without that argument, one edited by hand since Coffer last wrote "
    "it; nothing was written",
    "unsupported_type": "an ingest refused: a format Coffer does not convert; nothing was written",
    "too_large": "an ingest refused: larger than `max_document_bytes` (`max_url_bytes` for a URL); nothing was written",
    "empty": "an ingest refused: no content, or no text after conversion; nothing was written",
    "scanned_pdf": "an ingest refused: a PDF without a text layer (scanned pages); nothing was written",
    "duplicate": "an ingest refused: changed content under an existing filename without `replace=true`, or an "
    "upload under the name of documents ingested from a path or URL (never replaced by an upload) or of several "
    "uploads (the message lists their ids); nothing was written",
    "conversion_failed": "an ingest refused: a malformed file the converter cannot read, or a conversion over "
    "`conversion_timeout` or `conversion_memory_mb`; nothing was written",
    "engine_unavailable": "an ingest refused: the converter library for that format is not installed; nothing was "
    "written",
    "unreadable": "`ingest_path`: a file of the folder that could not be read (reported for that file; the others "
    "are ingested)",
    "undecodable_name": "a file or folder whose name is not valid UTF-8 (written in another encoding): the "
    "message shows its bytes as `\\xNN`; in a folder, reported for that file or folder (the others are ingested)",
    "reconversion_blocked": "`update_from_source` on a document edited by hand or one without a source",
    "source_conflict": "a followed file changed, but its document was edited in Coffer: the edits are kept and the "
    "file is not ingested (reported for that file)",
    # Reasons a forced reindex left a document's conversion as it was (in `not_reconverted`, never raised).
    "edited": "a forced reindex did not convert again a document edited by hand",
    "original_missing": "a forced reindex could not convert again: the original in `raw/` is gone",
    "original_changed": "a forced reindex could not convert again: the original no longer matches `source_sha256`",
    "embedding_unavailable": "the embedding provider failed (down, unreachable, bad key); searches fall back to "
    "keyword",
    "embedding_cooling_down": "the embedding provider failed less than `cooldown_seconds` ago and is not called "
    "again until then",
    "store_model_changed": "vectors of a model that is not (or no longer) the store's were about to be stored: "
    "another process changed the store's embedding model (`coffer embeddings use`); nothing was stored, the next "
    "call uses the store's model",
    "rerank_unavailable": "the reranker failed (down, unreachable, bad key, no model); searches keep the "
    "unreranked order and say why (`coffer doctor` reports it)",
    "invalid_pack": "a pack file that is damaged, tampered with, unsafe or not a Coffer pack; nothing was changed",
    "invalid_snapshot": "a snapshot whose files no longer match its manifest; nothing was changed",
    "busy": "another writer held the knowledge base's lock longer than `lock_timeout`",
    "store_error": "a problem with a file or folder in `COFFER_HOME`, or with the PostgreSQL index (down, "
    "refusing a statement); the hint says what to do",
    "other_store": "the PostgreSQL index belongs to another store than this `COFFER_HOME` (an empty or "
    "mistyped home, a volume not mounted); nothing was changed",
    "schema_too_new": "`coffer.db` was written by a newer Coffer; the hint says how to upgrade or rebuild it",
    "invalid_config": "`config.yaml` or a `COFFER_*` variable does not load; the hint names what to fix",
    "insufficient_scope": "a tool call with an OAuth token that lacks the scope the tool needs (over HTTP: a 403 "
    "whose `WWW-Authenticate` names the scope, for the client to ask for it)",
    "invalid_frontmatter": "a write (edit, tags, re-ingest) to a document whose frontmatter does not parse (a YAML "
    "typo made by hand): the message names the file and where YAML failed; the file was left untouched (also why "
    "a forced reindex did not convert it again)",
    "invalid_request": "a JSON-RPC request that does not parse, answered with a JSON-RPC parse error (`-32700`) "
    "rather than a tool error: text holding a lone UTF-16 surrogate (`\\udcff`), which is not a Unicode character "
    "(the message says where), or, on stdio, a line that is not JSON",
    "internal_error": "an unexpected failure inside Coffer (a bug); the message names only the exception's type, "
    "the traceback goes to the server's stderr",
}
"""Every code a ``CofferError`` can carry on every surface, with its meaning (one line each)."""

VIEWER_ERROR_CODES: dict[str, str] = {
    "not_found": "no such endpoint",
    "forbidden_action": "a file action without the page's action token, or not from this server's own page",
    "outside_store": "the file to open resolves outside `COFFER_HOME/knowledge` (e.g. through a symlink)",
    "no_opener": "no program can open the file here (a headless server, a missing editor)",
    "opener_failed": "the program that opens the file could not be started, or exited with an error at once",
    "no_original": "a document whose original is not kept in `raw/` (written in Coffer, or dropped in as Markdown "
    "and its original removed): only its Markdown can be shown",
}
"""Codes only the viewer's HTTP API sends (``web``), with their meanings."""


Surface = Literal["mcp", "cli", "web"]
SURFACES: tuple[Surface, ...] = ("mcp", "cli", "web")

TOOL_WORDS: dict[str, dict[Surface, str]] = {
    "search_knowledge": {"mcp": "coffer__search_knowledge", "cli": "coffer kb search", "web": "the search box"},
    "list_documents": {"mcp": "coffer__list_documents", "cli": "coffer kb documents", "web": "the document list"},
    # The viewer only reads: what it cannot do, the command line does.
    "create_knowledge_base": {
        "mcp": "coffer__create_knowledge_base",
        "cli": "coffer kb create",
        "web": "'coffer kb create' on the command line",
    },
    "ingest_path": {
        "mcp": "coffer__ingest_path",
        "cli": "coffer kb ingest",
        "web": "'coffer kb ingest' on the command line",
    },
    "read_document": {"mcp": "coffer__read_document", "cli": "coffer kb read", "web": "the document page"},
    "ingest_url": {
        "mcp": "coffer__ingest_url",
        "cli": "coffer kb ingest-url",
        "web": "'coffer kb ingest-url' on the command line",
    },
    "delete_document": {
        "mcp": "coffer__delete_document",
        "cli": "coffer kb rm",
        "web": "'coffer kb rm' on the command line",
    },
    # Only MCP and Python callers replace a body (an editor on the document's file does it by hand).
    "edit_document": {
        "mcp": "coffer__edit_document",
        "cli": "edit_document over MCP (or an editor on the document's file)",
        "web": "edit_document over MCP (or an editor on the document's file)",
    },
    "grep_knowledge": {
        "mcp": "coffer__grep_knowledge",
        "cli": "coffer kb grep",
        "web": "'coffer kb grep' on the command line",
    },
    "check_sources": {
        "mcp": "coffer__check_sources",
        "cli": "coffer kb check-sources",
        "web": "'coffer kb check-sources' on the command line",
    },
}
"""How each surface names the tool a ``{tool:NAME}`` placeholder refers to."""

ARG_WORDS: dict[str, dict[Surface, str]] = {
    "replace=true": {"mcp": "replace=true", "cli": "--replace", "web": "'--replace' on the command line"},
    "follow=true": {"mcp": "follow=true", "cli": "--follow", "web": "'--follow' on the command line"},
    # The export tool cannot overwrite: it would let an agent replace any file in allowed_dirs.
    "overwrite": {
        "mcp": "ask the user to remove it (this tool never overwrites a file)",
        "cli": "pass --overwrite to replace it",
        "web": "replace it with 'coffer kb export --overwrite' on the command line",
    },
    "fixed_strings=true": {
        "mcp": "fixed_strings=true",
        "cli": "-F (--fixed-strings)",
        "web": "a literal search (fixed_strings=true)",
    },
    "filters": {
        "mcp": "filters takes tags (a list: documents carrying all of them), path_prefix (an absolute folder, or "
        "file, documents were ingested from), formats (a list of original formats: pdf, docx, md, ...), created_after, "
        "created_before, updated_after and updated_before (ISO 8601, e.g. 2025-01-31 or 2025-01-31T12:00:00Z)",
        "cli": "Filter with --tag TAG (repeated: all of them), --path-prefix PATH (a folder, or file, documents "
        "were ingested from), --format EXT (repeated: any of them), --created-after, --created-before, --updated-after "
        "and --updated-before TIME (ISO 8601, e.g. 2025-01-31 or 2025-01-31T12:00:00Z)",
        "web": "Filter with tag (repeated: all of them), path_prefix (an absolute folder, or file, documents were "
        "ingested from), format (repeated: any of them), created_after, created_before, updated_after and "
        "updated_before (ISO 8601, e.g. 2025-01-31 or 2025-01-31T12:00:00Z)",
    },
    # Only MCP and Python callers replace a body; the other surfaces name the argument as they do.
    "expected_content_sha256": {
        "mcp": "expected_content_sha256",
        "cli": "expected_content_sha256 (an argument of edit_document over MCP)",
        "web": "expected_content_sha256 (an argument of edit_document over MCP)",
    },
    # How a document's tags are given: a list over MCP, words after the id on the command line.
    "tags": {
        "mcp": "as a list, e.g. ['project-x', 'draft']; [] removes them",
        "cli": "e.g. coffer kb tag NAME DOC_ID project-x draft (--clear removes them; coffer kb ingest takes "
        "--tag TAG, repeated)",
        "web": "with edit_document over MCP or 'coffer kb tag' on the command line",
    },
    # The viewer's HTTP API takes these as query parameters, under the MCP names.
    "limit=50": {"mcp": "limit=50", "cli": "--limit 50", "web": "limit=50"},
    "offset=0": {"mcp": "offset=0", "cli": "--offset 0", "web": "offset=0"},
}
"""How each surface says the argument (with its value) an ``{arg:NAME=VALUE}`` placeholder refers to."""

_PLACEHOLDER = re.compile(r"\{(tool|arg):([A-Za-z0-9_]+(?:=[A-Za-z0-9_.-]+)?)\}")
_WORDS = {"tool": TOOL_WORDS, "arg": ARG_WORDS}


def render_hint(template: str, surface: Surface = "mcp") -> str:
    """``template`` with each ``{tool:...}`` / ``{arg:...}`` placeholder in ``surface``'s words.

    A placeholder without a wording (a test keeps there being none) shows its bare name rather
    than failing: this runs while an error is being reported.
    """

    def word(match: re.Match[str]) -> str:
        kind, name = match.groups()
        return _WORDS[kind].get(name, {}).get(surface, name)

    return _PLACEHOLDER.sub(word, template)


def counted(n: int, noun: str, plural: str = "") -> str:
    """``1 document``, ``2 documents`` (``plural``: when not ``noun`` + ``s``, as ``entries``)."""
    return f"{n} {noun}" if n == 1 else f"{n} {plural or noun + 's'}"


def reword(text: str, surface: Surface) -> str:
    """Text already in MCP wording (a hint carried in a result model) in ``surface``'s words."""
    if surface == "mcp" or not text:
        return text
    for table in (TOOL_WORDS, ARG_WORDS):
        for words in table.values():
            said = words[surface].replace("\\", r"\\")  # escaped: re.sub inserts the words as they are
            text = re.sub(rf"(?<![\w-]){re.escape(words['mcp'])}(?![\w-])", said, text)
    return text


def validation_message(error: Mapping[str, Any]) -> str:
    """What one of pydantic's validation errors says, without its "Value error, " prefix."""
    return str(error["msg"]).removeprefix("Value error, ")


def validation_problem(error: Mapping[str, Any]) -> str:
    """One validation error in plain words: ``where: what``, or ``what`` for a check of the whole."""
    where = ".".join(map(str, error["loc"]))
    return f"{where}: {validation_message(error)}" if where else validation_message(error)


class CofferError(Exception):
    """Base of every error Coffer raises on purpose.

    Args:
        message: What went wrong, in one sentence.
        code: A stable machine-readable code (snake_case).
        hint: What the caller can do about it; may name tools and arguments by placeholder
            (``{tool:list_documents}``, ``{arg:replace=true}``), see ``hint_for``.
    """

    code = "coffer_error"

    def __init__(self, message: str, *, code: str | None = None, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.hint_template = hint

    @property
    def hint(self) -> str:
        """The hint in MCP wording (the default surface)."""
        return render_hint(self.hint_template, "mcp")

    def hint_for(self, surface: Surface) -> str:
        """The hint in the words of ``surface``: ``"mcp"``, ``"cli"`` or ``"web"``."""
        return render_hint(self.hint_template, surface)

    def to_dict(self, surface: Surface = "mcp") -> dict[str, str]:
        """``{code, message, hint}``, the hint in the words of ``surface``."""
        return {"code": self.code, "message": self.message, "hint": self.hint_for(surface)}

    def __str__(self) -> str:
        return f"{self.message} (hint: {self.hint})" if self.hint else self.message


class InvalidArgumentError(CofferError):
    code = "invalid_argument"


class InvalidNameError(InvalidArgumentError):
    code = "invalid_name"


class InvalidPatternError(InvalidArgumentError):
    code = "invalid_pattern"


class ConfirmationRequiredError(InvalidArgumentError):
    code = "confirmation_required"


class PathNotAllowedError(InvalidArgumentError):
    """A path outside the folders the configuration allows (``allowed_dirs``)."""

    code = "path_not_allowed"


class UrlRefusedError(InvalidArgumentError):
    """A URL the SSRF guard refuses: another scheme, or a private, local or metadata address."""

    code = "url_refused"


class FetchError(CofferError):
    """A URL could not be fetched (network error, HTTP error status, too many redirects)."""

    code = "fetch_failed"


class NotFoundError(CofferError):
    code = "not_found"


class KnowledgeBaseNotFoundError(NotFoundError):
    code = "unknown_kb"


class DocumentNotFoundError(NotFoundError):
    code = "unknown_document"


class KnowledgeBaseExistsError(CofferError):
    code = "kb_exists"


class EditConflictError(CofferError):
    """A body replacement that could discard a change its caller has not seen; nothing was written."""

    code = "edit_conflict"


class IngestRejectedError(CofferError):
    """An ingest refused before anything was persisted; ``code`` is the rejection reason."""

    def __init__(self, reason: str, message: str, *, hint: str = "") -> None:
        if reason not in REJECTION_REASONS:
            raise ValueError(f"unknown rejection reason {reason!r}")
        super().__init__(message, code=reason, hint=hint)

    @property
    def reason(self) -> str:
        return self.code


class EngineUnavailableError(IngestRejectedError):
    """The converter library for a format is not installed; other formats keep working."""

    def __init__(self, message: str, *, hint: str = "") -> None:
        super().__init__("engine_unavailable", message, hint=hint)


class ReconversionBlockedError(CofferError):
    code = "reconversion_blocked"


class SourceConflictError(ReconversionBlockedError):
    """A followed file changed, but its document was edited in Coffer: the edits win, nothing is written."""

    code = "source_conflict"


class EmbeddingError(CofferError):
    """The embedding provider failed or is cooling down after a failure; search degrades to keyword."""

    code = "embedding_unavailable"


class RerankError(CofferError):
    """The reranker failed; search keeps the order it had and says why, ``coffer doctor`` reports it."""

    code = "rerank_unavailable"


class ConfigError(CofferError):
    code = "invalid_config"


class InsufficientScopeError(CofferError):
    """An OAuth token without the scope what it asked for needs (``coffer:write``, ``coffer:admin``)."""

    code = "insufficient_scope"


class FrontmatterError(CofferError):
    """A document file whose frontmatter does not parse: rewriting it would drop its metadata, so it is left alone."""

    code = "invalid_frontmatter"


class StoreError(CofferError):
    code = "store_error"


# -- portability -----------------------------------------------------------------------------------


class PackError(CofferError):
    """A pack file that is damaged, tampered with, unsafe or not a Coffer pack; nothing was changed."""

    code = "invalid_pack"

    def __init__(self, message: str, *, hint: str = "") -> None:
        super().__init__(message, hint=hint or "The pack is damaged or was modified: export it again from its source.")


class SnapshotNotFoundError(NotFoundError):
    code = "unknown_snapshot"


class SnapshotError(StoreError):
    """A snapshot whose files no longer match its manifest (damaged or edited by hand)."""

    code = "invalid_snapshot"


# -- the viewer's file actions -------------------------------------------------------------------


class NoOpenerError(CofferError):
    """No program can open the target here (headless Linux without xdg-open, a missing editor)."""

    code = "no_opener"


class OpenerFailedError(CofferError):
    """The opener exists but could not be started."""

    code = "opener_failed"


class OutsideStoreError(CofferError):
    """The target resolves outside ``COFFER_HOME/knowledge`` (e.g. through a symlink)."""

    code = "outside_store"


class ForbiddenActionError(CofferError):
    """A filesystem action without the page's action token, or not from this server's own page."""

    code = "forbidden_action"
