"""Test doubles for things outside Coffer (never for Coffer's own store, index or service)."""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence

from coffer_mcp.errors import EmbeddingError


class HashEmbedder:
    """A deterministic embedder: each word hashes to a dimension, vectors are L2-normalized.

    Texts sharing words are close; ``failing = True`` makes every call raise like a dead provider.
    """

    def __init__(self, dims: int = 64, name: str = "hash") -> None:
        self.dims = dims
        self.name = name
        self.failing = False
        self.calls = 0
        self.texts: list[str] = []  # every text embedded, in order

    @property
    def identity(self) -> str:
        return f"test:{self.name}-{self.dims}"

    def dimensions(self) -> int:
        return self.dims

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls += 1
        if self.failing:
            raise EmbeddingError("the test provider is down", hint="bring it back")
        self.texts.extend(texts)
        return [self._vector(text) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]

    def _vector(self, text: str) -> list[float]:
        vector = [0.0] * self.dims
        for word in re.findall(r"\w+", text.lower()):
            vector[int(hashlib.sha1(word.encode()).hexdigest(), 16) % self.dims] += 1.0
        norm = math.sqrt(sum(v * v for v in vector)) or 1.0
        return [v / norm for v in vector]
