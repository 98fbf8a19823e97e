"""Checks of one setting's value, whichever source it came from: numbers, folders, URLs, names.

The model binds each to its fields (``Settings``); a ``ValueError`` becomes pydantic's error for
that field, which ``load_settings`` reports with where the value came from.
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from coffer_mcp.settings._names import AUTH_ALGORITHMS, AUTH_SCOPES

__all__ = [
    "asymmetric_algorithms",
    "check_identity_provider_url",
    "coffer_scopes",
    "expand_home",
    "expand_model_path",
    "http_url",
    "identity_provider_url",
    "known_level",
    "public_url",
    "refuse_bool",
    "resolve_dirs",
    "service_switch",
    "split_algorithms",
    "split_dirs",
    "split_scope_map",
]


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


# -- paths ------------------------------------------------------------------------------------------


def expand_home(value: Any) -> Any:
    """The home as an absolute folder, ``~`` expanded."""
    return Path(value).expanduser().resolve() if isinstance(value, (str, Path)) else value


def expand_model_path(value: Any) -> Any:
    """A local model folder, ``~`` expanded; an empty value is none."""
    return Path(value).expanduser() if isinstance(value, (str, Path)) and str(value) else None


def split_dirs(value: Any) -> Any:
    """The environment gives one string: folders separated by the OS path separator (":" or ";")."""
    if isinstance(value, str):
        return [part for part in value.split(os.pathsep) if part.strip()]
    return value


def resolve_dirs(value: list[Path]) -> list[Path]:
    """The allowed folders, absolute and resolved.

    A relative folder would be resolved against the server's working directory, which an MCP
    client chooses (often /): it would silently allow another folder than the one meant.

    Raises:
        ValueError: a folder is relative.
    """
    relative = [str(p) for p in value if not Path(p).expanduser().is_absolute()]
    if relative:
        raise ValueError(
            f"{', '.join(map(repr, relative))} is relative, so it would mean a folder under whatever folder "
            "Coffer is started in"
        )
    return [Path(p).expanduser().resolve() for p in value]


# -- URLs -------------------------------------------------------------------------------------------


def http_url(value: str | None) -> str | None:
    """An http:// or https:// endpoint (the reranker's)."""
    if value is not None and (urlsplit(value).scheme not in ("http", "https") or not urlsplit(value).netloc):
        raise ValueError("must be an http:// or https:// URL, e.g. http://127.0.0.1:8080/v1/rerank")
    return value


def public_url(value: str | None) -> str | None:
    """The server's root address as clients reach it, without a trailing slash."""
    if value is None:
        return None
    parts = urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise ValueError("must be an http:// or https:// address, e.g. https://coffer.example.com")
    if parts.path not in ("", "/"):
        raise ValueError("must be the server's root address, without a path (Coffer serves /mcp at its root)")
    return value.strip().rstrip("/")


def identity_provider_url(value: str | None) -> str | None:
    """An identity provider's URL, when given (``check_identity_provider_url``)."""
    if value is not None:
        check_identity_provider_url(value)
    return value


# -- names ------------------------------------------------------------------------------------------


def service_switch(value: Any) -> Any:
    """YAML 1.1 reads a bare `off` as false (and `on` as true)."""
    if isinstance(value, bool):
        return "auto" if value else "off"
    return value


def split_algorithms(value: Any) -> Any:
    """The environment gives one string, comma- or space-separated."""
    return value.replace(",", " ").split() if isinstance(value, str) else value


def asymmetric_algorithms(value: list[str]) -> list[str]:
    """Signature algorithms that can be checked without a shared secret, each once."""
    refused = [name for name in value if name not in AUTH_ALGORITHMS]
    if refused:
        raise ValueError(
            f"{', '.join(refused)} refused: only asymmetric signatures can be checked without sharing a secret "
            f"with the identity provider; choose among {', '.join(AUTH_ALGORITHMS)}"
        )
    if not value:
        raise ValueError(f"name at least one of {', '.join(AUTH_ALGORITHMS)}")
    return list(dict.fromkeys(value))


def split_scope_map(value: Any) -> Any:
    """The environment gives one string: "IdpName=coffer:scope coffer:scope,OtherName=coffer:scope"."""
    if not isinstance(value, str):
        return value
    pairs = [part.partition("=") for part in value.split(",") if part.strip()]
    if any(not sep or not name.strip() for name, sep, _ in pairs):
        raise ValueError("write it as IdpName=coffer:read,OtherName=coffer:write coffer:read")
    return {name.strip(): scopes.strip() for name, _, scopes in pairs}


def coffer_scopes(value: dict[str, str]) -> dict[str, str]:
    """An identity provider's names each mapped onto one or more coffer scopes."""
    unknown = sorted({scope for scopes in value.values() for scope in scopes.split()} - set(AUTH_SCOPES))
    if unknown:
        raise ValueError(f"{', '.join(unknown)} is not a coffer scope ({', '.join(AUTH_SCOPES)})")
    if any(not scopes.split() for scopes in value.values()):
        raise ValueError(f"map each name to one or more of {', '.join(AUTH_SCOPES)}")
    return value


def known_level(value: str) -> str:
    """A logging level's name, upper-cased."""
    level = value.upper()
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
        raise ValueError("must be DEBUG, INFO, WARNING, ERROR or CRITICAL")
    return level
