"""The models a knowledge base's reads and writes call: the store's embedder and the reranker.

One ``Providers`` per Coffer home. The embedder is the store's model (``StoreEmbedding``: made on
first use, the model itself loads on first embed); the reranker is the one the settings describe
(made on first use, a model loads on first rerank).
"""

from __future__ import annotations

import threading

from coffer_mcp.embed import Embedder
from coffer_mcp.index import Index
from coffer_mcp.rerank import BudgetedReranker, RerankConfig, make_reranker
from coffer_mcp.services.store_model import StoreEmbedding, model_cache
from coffer_mcp.settings import Settings
from coffer_mcp.store import KbConfig, StorePaths

__all__ = ["BASE_MODES", "VECTOR_MODES", "Providers", "rerank_config"]

BASE_MODES = ("grep", "keyword")
VECTOR_MODES = ("vector", "hybrid")


class Providers:
    """The store's embedding model and the configured reranker of one Coffer home."""

    def __init__(
        self, settings: Settings, index: Index, paths: StorePaths, *, embedder: Embedder | None = None
    ) -> None:
        """The providers of the home at ``paths``.

        Args:
            settings: The global settings.
            index: The index of this home (it keeps a copy of the store's model).
            paths: The home's paths (``embedding.yaml`` names the store's model).
            embedder: An embedder to use instead of the one the settings describe (tests, custom
                providers); it must follow the ``coffer_mcp.embed.Embedder`` protocol.
        """
        self.settings = settings
        self.models = StoreEmbedding(settings, index, paths, given=embedder)
        self._guard = threading.Lock()
        self._reranker: BudgetedReranker | None = None
        self._reranker_made = False

    @property
    def embedder(self) -> Embedder | None:
        """The embedder of the store's model, None when this process does no vector work (``StoreEmbedding``;
        made on first use, the model itself loads on first embed)."""
        return self.models.embedder

    @property
    def reranker(self) -> BudgetedReranker | None:
        """The configured reranker, None when off (made on first use; a model loads on first rerank).

        Raises:
            ConfigError: The rerank settings cannot work.
        """
        if not self._reranker_made:
            with self._guard:
                if not self._reranker_made:
                    self._reranker = make_reranker(rerank_config(self.settings))
                    self._reranker_made = True
        return self._reranker

    def close_reranker(self) -> None:
        """Close the reranker's connections, if one was made (it reconnects when used again)."""
        if self._reranker is not None:
            self._reranker.close()

    def modes(self, config: KbConfig) -> list[str]:
        """The retrieval modes a knowledge base answers with right now."""
        return [*BASE_MODES, *VECTOR_MODES] if config.vector and self.embedder is not None else list(BASE_MODES)

    def wanted_model(self, config: KbConfig) -> str | None:
        """The model whose vectors a KB's documents should have: the store's ('' when there is none)."""
        if not config.vector:
            return None
        return self.models.wanted_identity()


def rerank_config(settings: Settings) -> RerankConfig:
    """The reranker's settings, taken from the global ones."""
    key = settings.rerank_api_key
    return RerankConfig(
        provider=settings.rerank_provider,
        model=settings.rerank_model,
        model_path=settings.rerank_model_path,
        cache_dir=model_cache(settings),
        url=settings.rerank_url,
        api_key=key.get_secret_value() if key is not None else None,
        candidates=settings.rerank_candidates,
        timeout_ms=settings.rerank_timeout_ms,
        cooldown_seconds=settings.rerank_cooldown_seconds,
    )
