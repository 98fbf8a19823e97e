"""One frozen settings model: flags > ``COFFER_*`` environment > ``config.yaml`` > defaults.

Only ``cli`` reads the real environment; it passes it here as a plain mapping, so the Python
API and the tests can build settings from anything.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, get_args
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, ValidationInfo, field_validator

from coffer_mcp.errors import ConfigError, validation_problem

__all__ = ["ENV_VARS", "Settings", "load_settings", "refuse_bool"]

MB = 1024 * 1024

# Environment variable -> settings field. Documented in README and server.json.
ENV_VARS: dict[str, str] = {
    "COFFER_HOME": "home",
    "COFFER_MAX_DOCUMENT_BYTES": "max_document_bytes",
    "COFFER_GREP_TIMEOUT": "grep_timeout",
    "COFFER_RG_PATH": "rg_path",
    "COFFER_CHUNK_SIZE": "chunk_size",
    "COFFER_CHUNK_OVERLAP": "chunk_overlap",
    "COFFER_CURATION_TOOLS": "curation_tools",
    "COFFER_LOG_LEVEL": "log_level",
    "COFFER_EMBEDDING_PROVIDER": "embedding_provider",
    "COFFER_EMBEDDING_MODEL": "embedding_model",
    "COFFER_EMBEDDING_MODEL_PATH": "embedding_model_path",
    "COFFER_EMBEDDING_BASE_URL": "embedding_base_url",
    "COFFER_EMBEDDING_API_KEY_ENV": "embedding_api_key_env",
    "COFFER_EMBEDDING_DIMENSIONS": "embedding_dimensions",
    "COFFER_RERANK_PROVIDER": "rerank_provider",
    "COFFER_RERANK_MODEL": "rerank_model",
    "COFFER_RERANK_MODEL_PATH": "rerank_model_path",
    "COFFER_RERANK_URL": "rerank_url",
    "COFFER_RERANK_API_KEY_ENV": "rerank_api_key_env",
    "COFFER_RERANK_CANDIDATES": "rerank_candidates",
    "COFFER_RERANK_TIMEOUT_MS": "rerank_timeout_ms",
    "COFFER_RERANK_COOLDOWN_SECONDS": "rerank_cooldown_seconds",
    "COFFER_READ_ONLY": "read_only",
    "COFFER_ALLOWED_DIRS": "allowed_dirs",
    "COFFER_HTTP_TOKEN": "http_token",
    "COFFER_AUTH": "auth",
    "COFFER_PUBLIC_URL": "public_url",
    "COFFER_EDITOR": "editor",
    "COFFER_HTML_MAIN_CONTENT": "html_main_content",
    "COFFER_INDEX_BACKEND": "index_backend",
    "COFFER_DATABASE_URL": "database_url",
    "COFFER_WATCH": "watch",
    "COFFER_WATCH_POLLING": "watch_polling",
}
# config.yaml may group the embedding settings: ``embedding: {provider: openai, model: ...}``.
_EMBEDDING_KEYS = (
    "provider",
    "model",
    "model_path",
    "base_url",
    "api_key_env",
    "dimensions",
    "batch_size",
    "cooldown_seconds",
    "service",
    "service_idle_seconds",
)
# ... and the reranker's: ``rerank: {provider: http, url: ...}``.
_RERANK_KEYS = ("provider", "model", "model_path", "url", "api_key_env", "candidates", "timeout_ms", "cooldown_seconds")


def refuse_bool(value: Any) -> Any:
    """A number setting's value as given, unless it is a boolean.

    pydantic's lax mode takes ``true`` for 1, so ``max_document_bytes: true`` in YAML became a
    one-byte limit. Strict mode would also refuse the strings numbers arrive as from the
    environment; refusing booleans alone keeps those.

    Raises:
        ValueError: ``value`` is ``True`` or ``False``.
    """
    if isinstance(value, bool):
        raise ValueError(f"must be a number, not {str(value).lower()}")  # noqa: TRY004 (pydantic reports ValueError)
    return value


def _is_number(annotation: Any) -> bool:
    return any(kind in (int, float) for kind in (get_args(annotation) or (annotation,)))


class Settings(BaseModel):
    """Global settings. Per-KB settings (chunking, description) live in each KB's ``kb.yaml``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    home: Path = Field(default_factory=lambda: Path("~/.coffer").expanduser())
    index_backend: Literal["sqlite", "postgres"] = Field(
        default="sqlite",
        description="Where the index lives: sqlite (coffer.db in the home, embedded) or postgres (a "
        "PostgreSQL server with pgvector at database_url, which several servers can share).",
    )
    database_url: SecretStr | None = Field(
        default=None,
        description="postgres: the server, as postgresql://user@host:5432/dbname (or ?service=name); its "
        "password only from the environment (COFFER_DATABASE_URL) or a libpq passfile, never config.yaml.",
    )
    max_document_bytes: int = Field(default=25 * MB, ge=1, le=2048 * MB)
    grep_timeout: float = Field(default=5.0, gt=0, le=120)
    rg_path: str | None = Field(
        default=None, description="The ripgrep binary; unset looks for rg on PATH, empty disables ripgrep."
    )
    chunk_size: int = Field(default=1024, ge=64, le=8192, description="Default for new KBs.")
    chunk_overlap: int = Field(default=128, ge=0, le=4096, description="Default for new KBs.")
    curation_tools: bool = True
    read_only: bool = Field(default=False, description="Expose no tool that writes (MCP).")
    allowed_dirs: list[Path] = Field(
        default_factory=list,
        description="Folders coffer__ingest_path may read and export may write to (none by default).",
    )
    url_allow_private: list[str] = Field(
        default_factory=list,
        description="Hosts or CIDR ranges URL ingest may reach despite the SSRF guard (e.g. a test server).",
    )
    conversion_timeout: float = Field(
        default=120.0, gt=0, le=3600, description="Seconds a PDF/Office/HTML conversion may take before it is stopped."
    )
    conversion_memory_mb: int = Field(default=2048, ge=0, description="Memory cap of the converter process (0: none).")
    html_main_content: bool = Field(
        default=True,
        description="Web pages keep only their main content (menus, footers, link lists dropped); false keeps "
        "the whole page.",
    )
    max_url_bytes: int = Field(default=25 * MB, ge=1)
    url_timeout: float = Field(default=30.0, gt=0, le=600)
    http_token: SecretStr | None = Field(default=None, description="Bearer token the HTTP server requires.")
    # -- OAuth (coffer_mcp/web/_oauth.py, services/authorization.py) --
    auth: Literal["token", "oauth", "external"] = Field(
        default="token",
        description="How the HTTP server authenticates: token (only http_token, the static bearer token), oauth "
        "(also OAuth 2.1 tokens of its built-in authorization server, for the store's owner) or external (also "
        "JWTs of an external identity provider, auth_issuer). http_token keeps working in every mode, with every "
        "scope.",
    )
    public_url: str | None = Field(
        default=None,
        description="The address clients reach the HTTP server at, e.g. https://coffer.example.com behind a TLS "
        "proxy: the OAuth issuer, and the resource its tokens are for (PUBLIC_URL/mcp). Default: "
        "http://HOST:PORT of a loopback bind. Servers sharing one index behind one address all set it alike.",
    )
    auth_access_token_seconds: int = Field(
        default=3600, ge=60, le=86_400, description="oauth: how long an access token lasts."
    )
    auth_refresh_token_seconds: int = Field(
        default=30 * 86_400,
        ge=3600,
        le=365 * 86_400,
        description="oauth: how long a refresh token lasts; each refresh issues a new one and retires the old.",
    )
    auth_client_metadata_hosts: list[str] = Field(
        default_factory=list,
        description="oauth: hosts or CIDR ranges whose client metadata documents may be fetched although they "
        "are not public, over http too (tests, an intranet). Empty: https on public addresses only.",
    )
    editor: str | None = Field(default=None, description="Command opening a file in the user's editor.")
    snapshot_retention: int = Field(default=20, ge=1, le=10_000)
    lock_timeout: float = Field(default=60.0, gt=0)
    reconcile_lock_wait: float = Field(
        default=2.0, ge=0, description="How long a read waits for a busy writer before serving the index as is."
    )
    reconcile_interval: float = Field(
        default=1.0,
        ge=0,
        description=(
            "Big knowledge bases: seconds between checks of every file's stamp, made in the background "
            "(or 20 times a check's cost, when longer)."
        ),
    )
    reconcile_budget_ms: float = Field(
        default=5.0, ge=0, description="A knowledge base whose full check costs more than this counts as big."
    )
    log_level: str = "WARNING"
    embedding_provider: Literal["fastembed", "openai", "none"] = "fastembed"
    embedding_model: str | None = Field(default=None, description="None: the provider's default model.")
    embedding_model_path: Path | None = Field(default=None, description="fastembed: a local model folder.")
    embedding_base_url: str | None = Field(default=None, description="openai: any /v1/embeddings server.")
    embedding_api_key_env: str = Field(
        default="OPENAI_API_KEY",
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="The NAME of the environment variable holding the API key (never the key).",
    )
    embedding_api_key: SecretStr | None = Field(default=None, exclude=True, description="Resolved from the env var.")
    embedding_dimensions: int | None = Field(default=None, ge=1, le=8192)
    embedding_batch_size: int = Field(default=16, ge=1, le=128)
    embedding_cooldown_seconds: float = Field(default=30.0, ge=0)
    # -- the shared model service (coffer_mcp/embed/_service.py) --
    embedding_service: Literal["auto", "off"] = Field(
        default="auto",
        description="fastembed: `auto` loads the model once per user and model in a local service that every "
        "Coffer process shares (over a Unix socket only the user can reach; started on first need; in-process on "
        "Windows and whenever the service cannot be used); `off` loads it in each process",
    )
    embedding_service_idle_seconds: float = Field(
        default=300.0, gt=0, description="The shared model service exits after this many seconds without a request."
    )
    embed_on_read_seconds: float = Field(
        default=2.0, ge=0, description="How long a read may spend embedding documents that are due."
    )
    # -- the optional reranker (coffer_mcp/rerank/) --
    rerank_provider: Literal["none", "fastembed", "http"] = Field(
        default="none",
        description="Rerank a search's best passages: none (off), fastembed (an in-process ONNX cross-encoder) or "
        "http (a Jina/Cohere-style /rerank endpoint).",
    )
    rerank_model: str | None = Field(
        default=None, description="fastembed: the cross-encoder; http: the model sent with each request."
    )
    rerank_model_path: Path | None = Field(default=None, description="fastembed: a local model folder.")
    rerank_url: str | None = Field(default=None, description="http: the endpoint's full URL.")
    rerank_api_key_env: str = Field(
        default="COFFER_RERANK_API_KEY",
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="The NAME of the environment variable holding the reranker's API key (never the key).",
    )
    rerank_api_key: SecretStr | None = Field(default=None, exclude=True, description="Resolved from the env var.")
    rerank_candidates: int = Field(
        default=30, ge=1, le=200, description="How many of a search's best passages are reranked at most."
    )
    rerank_timeout_ms: int = Field(
        default=2000,
        ge=1,
        le=60_000,
        description="How long a search waits for the reranker; past it the passages keep the unreranked order.",
    )
    rerank_cooldown_seconds: float = Field(
        default=30.0,
        ge=0,
        description="After 3 timeouts or errors in a row, searches leave the reranker alone this long, then try "
        "it again (0: never).",
    )
    # -- the ANN index (index/sqlite/ann.py) --
    ann_min_chunks: int = Field(
        default=20_000,
        ge=0,
        description="Knowledge bases with at least this many chunks search vectors through an approximate "
        "nearest-neighbour graph kept beside coffer.db, smaller ones by the exact scan (0: always the scan). "
        "The graphs (coffer.db-ann/) are a cache of the index's vectors, rebuilt when missing or broken; they "
        "take about 1.7 GB per million 384-dimension vectors. A server (coffer serve) builds one in the background "
        "at its first vector search; a command of the command line never starts a build (it scans meanwhile).",
    )
    # -- live folders (coffer_mcp/services/follow.py, watcher.py) --
    watch: bool = Field(
        default=True,
        description="`coffer serve` watches followed folders and every knowledge base's docs/ folder and applies "
        "changes as they happen.",
    )
    watch_debounce_ms: int = Field(
        default=100,
        ge=10,
        le=10_000,
        description="The watcher applies a batch of changes once none came for this long (at most a second after "
        "the first while changes keep coming); an idle watcher also wakes this often.",
    )
    watch_polling: bool = Field(
        default=False,
        description="Poll followed folders for changes instead of relying on the OS's notifications.",
    )
    follow_deleted: Literal["remove", "keep"] = Field(
        default="remove",
        description="What a followed file's deletion does to its document: remove it, or keep it (check_sources "
        "reports it missing).",
    )

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields[info.field_name] if info.field_name else None
        return refuse_bool(value) if field is not None and _is_number(field.annotation) else value

    @field_validator("home", mode="before")
    @classmethod
    def _expand_home(cls, value: Any) -> Any:
        return Path(value).expanduser().resolve() if isinstance(value, (str, Path)) else value

    @field_validator("embedding_service", mode="before")
    @classmethod
    def _service_switch(cls, value: Any) -> Any:
        # YAML 1.1 reads a bare `off` as false (and `on` as true).
        if isinstance(value, bool):
            return "auto" if value else "off"
        return value

    @field_validator("embedding_model_path", "rerank_model_path", mode="before")
    @classmethod
    def _expand_model_path(cls, value: Any) -> Any:
        return Path(value).expanduser() if isinstance(value, (str, Path)) and str(value) else None

    @field_validator("rerank_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and (urlsplit(value).scheme not in ("http", "https") or not urlsplit(value).netloc):
            raise ValueError("must be an http:// or https:// URL, e.g. http://127.0.0.1:8080/v1/rerank")
        return value

    @field_validator("public_url")
    @classmethod
    def _public_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
            raise ValueError("must be an http:// or https:// address, e.g. https://coffer.example.com")
        if parts.path not in ("", "/"):
            raise ValueError("must be the server's root address, without a path (Coffer serves /mcp at its root)")
        return value.strip().rstrip("/")

    @field_validator("allowed_dirs", mode="before")
    @classmethod
    def _split_dirs(cls, value: Any) -> Any:
        # The environment gives one string: folders separated by the OS path separator (":" or ";").
        if isinstance(value, str):
            return [part for part in value.split(os.pathsep) if part.strip()]
        return value

    @field_validator("allowed_dirs")
    @classmethod
    def _resolve_dirs(cls, value: list[Path]) -> list[Path]:
        # A relative folder would be resolved against the server's working directory, which an MCP
        # client chooses (often /): it would silently allow another folder than the one meant.
        relative = [str(p) for p in value if not Path(p).expanduser().is_absolute()]
        if relative:
            raise ValueError(
                f"{', '.join(map(repr, relative))} is relative, so it would mean a folder under whatever folder "
                "Coffer is started in"
            )
        return [Path(p).expanduser().resolve() for p in value]

    @field_validator("log_level")
    @classmethod
    def _known_level(cls, value: str) -> str:
        level = value.upper()
        if level not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
            raise ValueError("must be DEBUG, INFO, WARNING, ERROR or CRITICAL")
        return level


_ADVICE = {"allowed_dirs": "give absolute folders, or ones starting with ~ (e.g. ~/Documents)"}
"""What a refused setting's hint adds to "Fix WHERE", where the fix is not obvious from the message."""


def load_settings(environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
    """Build settings from defaults, ``$COFFER_HOME/config.yaml``, the environment and overrides.

    Args:
        environ: Environment variables to read (``cli`` passes ``os.environ``); None reads none.
        **overrides: Values from command-line flags; ``None`` values are ignored.

    Raises:
        ConfigError: a value is invalid, naming where it came from.
    """
    environ = environ or {}
    # An empty variable counts as unset, except COFFER_RG_PATH where "" switches ripgrep off.
    from_env = {
        field: environ[var]
        for var, field in ENV_VARS.items()
        if var in environ and (environ[var] != "" or field == "rg_path")
    }
    flags = {k: v for k, v in overrides.items() if v is not None}
    home = flags.get("home") or from_env.get("home") or Path("~/.coffer").expanduser()
    config_file = Path(home).expanduser().resolve() / "config.yaml"
    from_file = _read_config_file(config_file)
    merged = {**from_file, **from_env, **flags, "home": home}
    # Editors: COFFER_EDITOR, else the conventional VISUAL and EDITOR.
    if "editor" not in merged and (environ.get("VISUAL") or environ.get("EDITOR")):
        merged["editor"] = environ.get("VISUAL") or environ.get("EDITOR")
    key_env = merged.get("embedding_api_key_env") or "OPENAI_API_KEY"
    if environ.get(key_env):
        merged["embedding_api_key"] = environ[key_env]
    rerank_key_env = merged.get("rerank_api_key_env") or "COFFER_RERANK_API_KEY"
    if environ.get(rerank_key_env):
        merged["rerank_api_key"] = environ[rerank_key_env]
    _check_database_url(from_file, config_file)
    sources = _Sources(from_file, from_env, flags, config_file)
    try:
        settings = Settings(**merged)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        problems = "; ".join(_problem(e) for e in errors)
        fields = dict.fromkeys(str(e["loc"][0]) if e["loc"] else "" for e in errors)
        fixes = dict.fromkeys(sources.where(f) + (f": {_ADVICE[f]}" if f in _ADVICE else "") for f in fields)
        raise ConfigError(f"Invalid configuration: {problems}.", hint=f"Fix {' and '.join(fixes)}.") from exc
    _check_rerank(settings)
    settings = _fit_chunk_overlap(settings, merged, sources)
    if settings.index_backend == "postgres" and settings.database_url is None:
        raise ConfigError(
            "The postgres index backend needs the server's address.",
            hint="Set COFFER_DATABASE_URL=postgresql://user@host:5432/dbname (the password from the environment "
            "or ~/.pgpass), or go back to the embedded index (index_backend: sqlite).",
        )
    return settings


def _problem(error: Any) -> str:
    """One refused setting in plain words; a misspelt key names the setting it resembles."""
    if error["type"] == "extra_forbidden":
        where = ".".join(map(str, error["loc"]))
        close = difflib.get_close_matches(where, Settings.model_fields, n=1)
        return f"{where}: no such setting" + (f" (did you mean {close[0]}?)" if close else "")
    return validation_problem(error)


def _fit_chunk_overlap(settings: Settings, given: Mapping[str, Any], sources: _Sources) -> Settings:
    """New knowledge bases' chunk settings, checked as a pair (each alone is checked by its field).

    An overlap left at its default, made for 1,024-character chunks, shrinks in proportion to a
    smaller ``chunk_size`` (as ``coffer kb create --chunk-size`` does); one set by the user must be
    below half the chunk size, or every ``kb create`` would fail without saying why.

    Raises:
        ConfigError: the overlap set is not below half the chunk size; names where each came from.
    """
    size, overlap = settings.chunk_size, settings.chunk_overlap
    if 2 * overlap < size:
        return settings
    if "chunk_overlap" not in given:
        default_size = Settings.model_fields["chunk_size"].default
        return settings.model_copy(update={"chunk_overlap": overlap * size // default_size})
    overlap_from = sources.where("chunk_overlap")
    size_from = sources.where("chunk_size") if "chunk_size" in given else "the default"
    raise ConfigError(
        f"Invalid configuration: chunk_overlap ({overlap}, from {overlap_from}) must be less than half of "
        f"chunk_size ({size}, from {size_from}).",
        hint=f"Fix {overlap_from}: below {(size + 1) // 2}, or raise chunk_size.",
    )


class _Sources:
    """Where each setting's value came from, to name the place a user edits to fix it."""

    def __init__(
        self, from_file: Mapping[str, Any], from_env: Mapping[str, Any], flags: Mapping[str, Any], config_file: Path
    ) -> None:
        self.from_file, self.from_env, self.flags, self.config_file = from_file, from_env, flags, config_file

    def where(self, field: str) -> str:
        """Where the winning value of ``field`` came from, as the place a user edits to fix it."""
        if field in self.flags:
            return f"the --{field.replace('_', '-')} option"
        if field in self.from_env:
            return next(var for var, name in ENV_VARS.items() if name == field) + " in the environment"
        if field in self.from_file:
            return f"{field} in {self.config_file}"
        return f"the COFFER_* environment variables or {self.config_file}"


def _check_rerank(settings: Settings) -> None:
    """Rerank settings that cannot work whatever the environment (the reranker's factory checks them too)."""
    if settings.rerank_provider == "http" and not settings.rerank_url:
        raise ConfigError(
            "The http reranker needs the endpoint's URL.",
            hint="Set COFFER_RERANK_URL (e.g. http://127.0.0.1:8080/v1/rerank), or rerank provider to none.",
        )
    if settings.rerank_provider == "fastembed" and settings.rerank_model_path and not settings.rerank_model:
        raise ConfigError(
            f"rerank model_path is set ({settings.rerank_model_path}) but rerank model is not.",
            hint="Also set COFFER_RERANK_MODEL to the name of the cross-encoder the folder holds (e.g. "
            "Xenova/ms-marco-MiniLM-L-6-v2).",
        )


def _check_database_url(from_file: Mapping[str, Any], config_file: Path) -> None:
    """config.yaml may name the database server, never hold its password."""
    url = from_file.get("database_url")
    if isinstance(url, str) and urlsplit(url).password:
        raise ConfigError(
            f"{config_file} holds a database password (in database_url).",
            hint="Remove it from the file: put the whole URL in COFFER_DATABASE_URL, or the password in "
            "~/.pgpass (PGPASSFILE).",
        )


def _read_config_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigError(f"Cannot read {path}: {exc}.", hint=f"Fix the permissions of {path} or remove it.") from exc
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(
            f"{path} is not valid YAML: {_yaml_problem(exc)}.",
            hint=f"Fix the YAML syntax in {path} (one 'setting: value' per line), or remove the file to use the "
            "defaults.",
        ) from exc
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path} must hold a mapping of settings.",
            hint=f"Write {path} as 'setting: value' lines (see docs/configuration.md).",
        )
    data.pop("home", None)  # the file lives in home; it cannot move it
    data = _flatten_group(data, path, "embedding", _EMBEDDING_KEYS, "provider: fastembed")
    return _flatten_group(data, path, "rerank", _RERANK_KEYS, "provider: http, url: http://127.0.0.1:8080/v1/rerank")


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """PyYAML's report on one line: the problem and where (its own text spans several lines)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return f"{problem} at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else problem


def _flatten_group(data: dict[str, Any], path: Path, group: str, keys: tuple[str, ...], example: str) -> dict[str, Any]:
    """``group: {key: value}`` in config.yaml as the flat settings ``group_key``."""
    section = data.pop(group, None)
    if section is None:
        return data
    if not isinstance(section, dict):
        raise ConfigError(
            f"'{group}' in {path} must be a mapping.",
            hint=f"Write it in {path} as e.g. {group}: {{{example}}}.",
        )
    if "api_key" in section:
        raise ConfigError(
            f"{path} holds a plaintext {group} API key.",
            hint=f"Remove it from {path}; put the key in an environment variable and name that variable in "
            "api_key_env.",
        )
    unknown = set(section) - set(keys)
    if unknown:
        raise ConfigError(
            f"Unknown {group} settings in {path}: {', '.join(sorted(unknown))}.",
            hint=f"Fix them in {path}; known: {', '.join(keys)}.",
        )
    return {**data, **{f"{group}_{key}": value for key, value in section.items()}}
