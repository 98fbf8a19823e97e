"""``make_embedder``: an ``EmbeddingConfig`` in, a guarded provider out, without loading anything."""

from __future__ import annotations

from coffer_mcp.embed import _fastembed, _openai, _shared
from coffer_mcp.embed.base import CooldownEmbedder, Embedder, EmbeddingConfig
from coffer_mcp.errors import ConfigError

__all__ = ["make_embedder"]


def make_embedder(config: EmbeddingConfig) -> CooldownEmbedder | None:
    """The configured provider wrapped in a ``CooldownEmbedder``; None for provider ``none``.

    Cheap: imports no model library, loads no model, touches no network. Failures to load or to
    reach the model surface later, as ``EmbeddingError``, from the embedder's methods.

    Raises:
        ConfigError: The configuration cannot work whatever the environment.
    """
    if config.provider == "none":
        return None
    if config.provider == "fastembed":
        return _guard(_fastembed_or_shared(config), config, _fastembed_hint(config))
    if config.provider == "openai":
        provider = _openai.OpenAIEmbedder(
            config.model or _openai.DEFAULT_MODEL,
            base_url=config.base_url,
            api_key=config.api_key,
            dimensions=config.dimensions,
            request_size=min(config.batch_size * 8, _openai.MAX_REQUEST_TEXTS),
            timeout_seconds=config.timeout_seconds,
        )
        hint = (
            f"Check embedding base_url ({provider.base_url}), the model name ({provider.model}) and the API key "
            "in the environment variable named by embedding api_key_env."
        )
        return _guard(provider, config, hint)
    raise ConfigError(f"Unknown embedding provider {config.provider!r}.", hint="Use one of: fastembed, openai, none.")


def _fastembed_or_shared(config: EmbeddingConfig) -> Embedder:
    """fastembed through the user's shared model service when it is wanted and possible, else in-process."""
    local = _fastembed_provider(config)
    if config.service == "off" or not _shared.service_supported():
        return local
    return _shared.SharedEmbedder(
        local,
        folder=config.service_folder,
        idle_seconds=config.service_idle_seconds,
        retry_seconds=config.cooldown_seconds,
        timeout_seconds=config.timeout_seconds,
        hint=_fastembed_hint(config),
    )


def _fastembed_provider(config: EmbeddingConfig) -> _fastembed.FastEmbedEmbedder:
    if config.model_path is not None and config.model is None:
        raise ConfigError(
            f"embedding model_path is set ({config.model_path}) but embedding model is not.",
            hint="Also set embedding model to the name of the model the directory holds (e.g. "
            "sentence-transformers/all-MiniLM-L6-v2): the name decides pooling and normalization and "
            "cannot be read from the directory.",
        )
    return _fastembed.FastEmbedEmbedder(
        config.model or _fastembed.DEFAULT_MODEL,
        model_path=config.model_path,
        batch_size=config.batch_size,
        threads=config.threads,
        dimensions=config.dimensions,
        cache_dir=config.cache_dir,
    )


def _fastembed_hint(config: EmbeddingConfig) -> str:
    if config.model_path is not None:
        return f"Check embedding model_path ({config.model_path}) and that embedding model names the model it holds."
    return "Check the network (the model is downloaded on first use) or set embedding model_path to a local copy."


def _guard(provider: Embedder, config: EmbeddingConfig, hint: str) -> CooldownEmbedder:
    return CooldownEmbedder(provider, cooldown_seconds=config.cooldown_seconds, hint=hint)
