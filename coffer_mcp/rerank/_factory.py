"""``make_reranker``: a ``RerankConfig`` in, a budgeted provider out, without loading anything."""

from __future__ import annotations

from coffer_mcp.errors import ConfigError
from coffer_mcp.rerank import _fastembed, _http
from coffer_mcp.rerank.base import BudgetedReranker, RerankConfig, Reranker

__all__ = ["make_reranker"]

MIN_REQUEST_SECONDS = 10.0


def make_reranker(config: RerankConfig) -> BudgetedReranker | None:
    """The configured provider under its candidate cap and time budget; None for provider ``none``.

    Cheap: imports no model library, loads no model, touches no network.

    Raises:
        ConfigError: The configuration cannot work whatever the environment.
    """
    if config.provider == "none":
        return None
    return BudgetedReranker(
        _provider(config),
        candidates=config.candidates,
        timeout_ms=config.timeout_ms,
        cooldown_seconds=config.cooldown_seconds,
    )


def _provider(config: RerankConfig) -> Reranker:
    if config.provider == "fastembed":
        if config.model_path is not None and config.model is None:
            raise ConfigError(
                f"rerank model_path is set ({config.model_path}) but rerank model is not.",
                hint="Also set rerank model to the name of the cross-encoder the directory holds (e.g. "
                "Xenova/ms-marco-MiniLM-L-6-v2): fastembed reads the model's layout from its name.",
            )
        return _fastembed.FastEmbedReranker(
            config.model or _fastembed.DEFAULT_MODEL,
            model_path=config.model_path,
            cache_dir=config.cache_dir,
            threads=config.threads,
        )
    if config.provider == "http":
        if not config.url:
            raise ConfigError(
                "The http reranker needs the endpoint's URL.",
                hint="Set COFFER_RERANK_URL (e.g. http://127.0.0.1:8080/v1/rerank), or rerank provider to none.",
            )
        # A request may outlive the search that gave up on it; it ends on its own soon after.
        seconds = max(config.timeout_ms / 1000, MIN_REQUEST_SECONDS)
        return _http.HttpReranker(config.url, model=config.model, api_key=config.api_key, timeout_seconds=seconds)
    raise ConfigError(f"Unknown rerank provider {config.provider!r}.", hint="Use one of: none, fastembed, http.")
