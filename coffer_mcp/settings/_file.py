"""``config.yaml``: the settings a user writes in the home, read as flat names.

Its ``embedding:`` and ``rerank:`` groups become the settings ``embedding_*`` and ``rerank_*``;
a key it cannot hold (``home``, an API key) or a file that is not a mapping is refused here,
before any value is checked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from coffer_mcp.errors import ConfigError
from coffer_mcp.settings._names import CONFIG_GROUPS

__all__ = ["read_config_file"]


def read_config_file(path: Path) -> dict[str, Any]:
    """The settings ``path`` holds, as flat names; none when there is no file.

    Raises:
        ConfigError: the file cannot be read, is not YAML or not a mapping, or holds what it may not.
    """
    data = _parse(path)
    _check_database_url(data, path)
    _check_auth_credentials(data, path)
    return data


def _parse(path: Path) -> dict[str, Any]:
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


def _check_auth_credentials(from_file: dict[str, Any], config_file: Path) -> None:
    """config.yaml may name the variables holding the introspection client's credentials, never hold them."""
    held = [key for key in ("auth_client_id", "auth_client_secret") if key in from_file]
    if held:
        raise ConfigError(
            f"{config_file} holds {' and '.join(held)}.",
            hint=f"Remove it from {config_file}; put it in the environment (COFFER_AUTH_CLIENT_ID, "
            "COFFER_AUTH_CLIENT_SECRET, or the variables auth_client_id_env and auth_client_secret_env name).",
        )


def _check_database_url(from_file: dict[str, Any], config_file: Path) -> None:
    """config.yaml may name the database server, never hold its password."""
    url = from_file.get("database_url")
    if isinstance(url, str) and urlsplit(url).password:
        raise ConfigError(
            f"{config_file} holds a database password (in database_url).",
            hint="Remove it from the file: put the whole URL in COFFER_DATABASE_URL, or the password in "
            "~/.pgpass (PGPASSFILE).",
        )
