"""Opening a fastembed model (an embedder's or a reranker's): a directory, the cache, or a download.

Where the model comes from, in order: ``model_path`` (never the network); the cache, without
touching the network; a download from Hugging Face (``HF_ENDPOINT``), but only after a 5-second
probe shows the hub answers at all — fastembed would otherwise retry for 39 seconds on every
offline machine. With ``HF_HUB_OFFLINE=1`` nothing is downloaded. Errors are ``error`` (the
caller's ``CofferError`` class) with the caller's hint.
"""

from __future__ import annotations

import http.client
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from coffer_mcp.embed.base import shorten
from coffer_mcp.errors import CofferError

__all__ = ["HUB_PROBE_SECONDS", "download", "not_installed", "open_cached", "open_directory"]

HUB_PROBE_SECONDS = 5.0

M = TypeVar("M")


def not_installed(exc: ImportError, *, what: str, error: type[CofferError], instead: str) -> CofferError:
    """The error for a fastembed that cannot be imported (not installed: no wheel for this platform).

    ``what`` names the model that cannot load; ``instead`` is the setting that does without it.
    """
    return error(
        f"fastembed is not installed (pip install fastembed), so the {what} cannot load: {shorten(exc)}.",
        hint=f"Install it where coffer runs (docs/install.md), or {instead}.",
    )


def open_directory(
    model_class: Callable[..., M],
    name: str,
    path: Path,
    options: dict[str, Any],
    *,
    what: str,
    error: type[CofferError],
    hint: str,
) -> M:
    """The model ``name`` from the directory ``path`` (``what`` names it in the error)."""
    if not path.is_dir():
        raise error(f"The {what} directory {path} does not exist.", hint=hint)
    try:
        return model_class(name, specific_model_path=str(path), **options)
    except Exception as exc:  # onnxruntime and tokenizers raise their own, unrelated types
        raise error(f"Could not load {name} from {path}: {shorten(exc)}", hint=hint) from exc


def open_cached(model_class: Callable[..., M], name: str, options: dict[str, Any]) -> M | None:
    """The model from fastembed's cache, or None when it is not there; never touches the network."""
    from loguru import logger

    # A cache miss is the normal first run, yet fastembed logs it as two ERROR lines.
    logger.disable("fastembed")
    try:
        return model_class(name, local_files_only=True, **options)
    except (ValueError, OSError):
        return None
    finally:
        logger.enable("fastembed")


def download(
    model_class: Callable[..., M], name: str, options: dict[str, Any], *, error: type[CofferError], hint: str
) -> M:
    """The model downloaded from the hub, when downloading is allowed and the hub answers."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        raise error(f"{name} is not in fastembed's cache and HF_HUB_OFFLINE forbids downloading it.", hint=hint)
    problem = _unreachable(constants.ENDPOINT)
    if problem:
        raise error(
            f"{name} is not in fastembed's cache and {constants.ENDPOINT} cannot be reached to download it: {problem}",
            hint=hint,
        )
    try:
        return model_class(name, **options)
    except Exception as exc:  # requests, httpx, huggingface_hub and onnxruntime errors alike
        raise error(f"Could not download {name}: {shorten(exc)}", hint=hint) from exc


def _unreachable(endpoint: str) -> str | None:
    """Why ``endpoint`` cannot be reached, or None when it answers (any HTTP status counts)."""
    request = urllib.request.Request(endpoint, method="HEAD")  # noqa: S310 - the hub's own https URL
    try:
        with urllib.request.urlopen(request, timeout=HUB_PROBE_SECONDS):  # noqa: S310 - the same request
            return None
    except urllib.error.HTTPError:
        return None
    except (OSError, http.client.HTTPException, ValueError) as exc:  # URLError is an OSError
        return shorten(exc)
