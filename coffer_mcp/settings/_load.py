"""``load_settings``: flags over the environment over ``config.yaml`` over the defaults, checked as a whole.

Each value is checked by its field (``_model``); here the sources are merged, the settings that
only work together are checked together, and a refusal names the place a user edits to fix it.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from coffer_mcp.errors import ConfigError, validation_problem
from coffer_mcp.limits import DEFAULT_HOME
from coffer_mcp.settings._file import read_config_file
from coffer_mcp.settings._model import Settings, default_of
from coffer_mcp.settings._names import ENV_VARS

__all__ = ["load_settings"]

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
    from_file = read_config_file(config_file)
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
