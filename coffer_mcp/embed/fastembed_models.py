"""Opening a fastembed model (an embedder's or a reranker's): a directory, the cache, or a download.

Where the model comes from, in order: ``model_path`` (never the network); the cache, without
touching the network; a download from Hugging Face (``HF_ENDPOINT``), but only after a 5-second
probe shows the hub answers at all — fastembed would otherwise retry for 39 seconds on every
offline machine. With ``HF_HUB_OFFLINE=1`` nothing is downloaded. Errors are ``error`` (the
caller's ``CofferError`` class) with the caller's hint.

A model class wrapped in ``with_quiet_threads`` makes its onnxruntime session with threads that
sleep instead of spinning while they wait (fastembed exposes only the thread count).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from coffer_mcp.embed.base import shorten
from coffer_mcp.errors import CofferError

__all__ = ["HUB_PROBE_SECONDS", "download", "not_installed", "open_cached", "open_directory", "with_quiet_threads"]

log = logging.getLogger(__name__)

HUB_PROBE_SECONDS = 5.0
_SPINNING = ("session.intra_op.allow_spinning", "session.inter_op.allow_spinning")

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


def with_quiet_threads(model_class: Callable[..., M]) -> Callable[..., M]:
    """``model_class`` (a fastembed model class), whose models make their session with sleeping threads."""

    def make(*args: Any, **kwargs: Any) -> M:
        model = model_class(*args, lazy_load=True, **kwargs)
        _load_session(model)
        return model

    return make


def _load_session(model: Any) -> None:
    """Make the onnxruntime session of ``model``, a fastembed model built with ``lazy_load=True``.

    onnxruntime's pool threads spin on a core while they wait for their next piece of work. On a
    machine whose cores are shared with other work, that spinning takes the CPU the model and
    everything else needs: the same chunks embedded 1.7-1.9 times slower, with 40 % more CPU
    (docs/benchmarks.md, "Embedding at the machine's pace"). fastembed exposes only the thread count
    and the memory arena switch, but it hands the session options it builds to the model's
    ``add_extra_session_options`` before it makes the session: this model's own copy of that hook
    keeps fastembed's options and adds sleeping threads. Should a later fastembed stop calling it,
    the session is still made (spinning) and a warning says so.

    Raises:
        Exception: Whatever onnxruntime raises for a model file it cannot load; callers map it.
    """
    inner = model.model
    fastembeds_own = type(inner).add_extra_session_options
    called: list[bool] = []

    def quiet_threads(session_options: Any, extra_options: dict[str, Any]) -> None:
        fastembeds_own(session_options, extra_options)
        # One model call runs one graph node at a time (the default sequential executor): an
        # inter-op pool of ``threads`` threads, as fastembed asks for, would only wait.
        session_options.inter_op_num_threads = 1
        for entry in _SPINNING:
            session_options.add_session_config_entry(entry, "0")
        called.append(True)

    inner.add_extra_session_options = quiet_threads
    inner.load_onnx_model()
    if not called:
        log.warning("fastembed did not take Coffer's onnxruntime options: the model's threads spin while they wait")


def _unreachable(endpoint: str) -> str | None:
    """Why ``endpoint`` cannot be reached, or None when it answers (any HTTP status counts)."""
    import http.client  # here, not above: ~10 ms that a process which never probes the hub should not pay
    import urllib.error
    import urllib.request

    request = urllib.request.Request(endpoint, method="HEAD")  # noqa: S310 - the hub's own https URL
    try:
        with urllib.request.urlopen(request, timeout=HUB_PROBE_SECONDS):  # noqa: S310 - the same request
            return None
    except urllib.error.HTTPError:
        return None
    except (OSError, http.client.HTTPException, ValueError) as exc:  # URLError is an OSError
        return shorten(exc)
