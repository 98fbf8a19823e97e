"""Embedding providers behind one small contract: ``make_embedder(config) -> Embedder | None``.

    from coffer_mcp.embed import EmbeddingConfig, make_embedder

    embedder = make_embedder(EmbeddingConfig(provider="fastembed"))  # loads nothing yet
    vectors = embedder.embed_documents(["first text", "second text"])  # L2-normalized floats

fastembed and openai are imported on first use, never by importing this package. With
``service="auto"``, fastembed runs in one shared model service per user and model
(``SharedEmbedder``), started on the first embed, instead of in every process.
"""

from __future__ import annotations

from coffer_mcp.embed._factory import make_embedder
from coffer_mcp.embed._fastembed import FastEmbedEmbedder
from coffer_mcp.embed._openai import OpenAIEmbedder
from coffer_mcp.embed._shared import SharedEmbedder
from coffer_mcp.embed.base import CooldownEmbedder, Embedder, EmbeddingConfig

__all__ = [
    "CooldownEmbedder",
    "Embedder",
    "EmbeddingConfig",
    "FastEmbedEmbedder",
    "OpenAIEmbedder",
    "SharedEmbedder",
    "make_embedder",
]
