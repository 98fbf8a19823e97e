"""The errors Coffer raises, each with a machine ``code`` and an actionable ``hint``.

Every surface maps these at its edge: ``mcp_server`` turns them into MCP tool errors carrying
``code``, ``message`` and ``hint``; ``cli`` prints one line and exits non-zero. Foreign exceptions
are mapped where they enter our code (``raise ... from exc``).

    CofferError
    ├── InvalidArgumentError            invalid_argument | invalid_url (a URL that does not parse)
    │   ├── InvalidNameError            invalid_name
    │   ├── InvalidPatternError         invalid_pattern
    │   ├── ConfirmationRequiredError   confirmation_required
    │   ├── PathNotAllowedError         path_not_allowed
    │   └── UrlRefusedError             url_refused
    ├── FetchError                      fetch_failed
    ├── NotFoundError
    │   ├── KnowledgeBaseNotFoundError  unknown_kb
    │   └── DocumentNotFoundError       unknown_document
    ├── KnowledgeBaseExistsError        kb_exists
    ├── IngestRejectedError             unsupported_type | too_large | empty | scanned_pdf | duplicate
    │                                   | conversion_failed (a malformed file the engine cannot read)
    │   └── EngineUnavailableError      engine_unavailable
    ├── ReconversionBlockedError        reconversion_blocked
    ├── EmbeddingError                  embedding_unavailable | embedding_cooling_down
    ├── ConfigError                     invalid_config
    └── StoreError                      store_error
"""

from __future__ import annotations

__all__ = [
    "CofferError",
    "InvalidArgumentError",
    "InvalidNameError",
    "InvalidPatternError",
    "ConfirmationRequiredError",
    "FetchError",
    "PathNotAllowedError",
    "UrlRefusedError",
    "NotFoundError",
    "KnowledgeBaseNotFoundError",
    "DocumentNotFoundError",
    "KnowledgeBaseExistsError",
    "IngestRejectedError",
    "EngineUnavailableError",
    "ReconversionBlockedError",
    "ConfigError",
    "EmbeddingError",
    "StoreError",
    "REJECTION_REASONS",
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


class CofferError(Exception):
    """Base of every error Coffer raises on purpose.

    Args:
        message: What went wrong, in one sentence.
        code: A stable machine-readable code (snake_case).
        hint: What the caller can do about it.
    """

    code = "coffer_error"

    def __init__(self, message: str, *, code: str | None = None, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.hint = hint

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message, "hint": self.hint}

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


class EmbeddingError(CofferError):
    """The embedding provider failed or is cooling down after a failure; search degrades to keyword."""

    code = "embedding_unavailable"


class ConfigError(CofferError):
    code = "invalid_config"


class StoreError(CofferError):
    code = "store_error"
