"""fastembed: an in-process ONNX cross-encoder (``TextCrossEncoder``), loaded on first use.

Where the model comes from, as for the embedder:

1. ``model_path`` set: that directory, never the network. It holds the model as fastembed lays
   it out: ``onnx/model.onnx`` beside ``tokenizer.json``, ``config.json`` and the other files.
2. Otherwise fastembed's cache (``cache_dir``: Coffer passes ``$COFFER_HOME/models``), offline.
3. Otherwise a download from Hugging Face (``HF_ENDPOINT``), only after a 5-second probe shows the
   hub answers (fastembed would retry for 39 seconds), and never with ``HF_HUB_OFFLINE=1``.

The first search's reranking loads the model on the reranker's own thread: until it is loaded
searches keep their unreranked order (``timeout``, then ``busy``); none waits beyond its budget.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coffer_mcp.embed.fastembed_models import download, not_installed, open_cached, open_directory
from coffer_mcp.errors import RerankError
from coffer_mcp.rerank.base import shorten

if TYPE_CHECKING:
    from fastembed.rerank.cross_encoder import TextCrossEncoder

__all__ = ["DEFAULT_MODEL", "FastEmbedReranker"]

DEFAULT_MODEL = "Xenova/ms-marco-MiniLM-L-6-v2"
BATCH_SIZE = 32
LOAD_RETRY_SECONDS = 60.0


class FastEmbedReranker:
    """Scores texts with a fastembed ``TextCrossEncoder``, loaded lazily and at most once.

    Args:
        model_name: A cross-encoder fastembed supports, e.g. ``Xenova/ms-marco-MiniLM-L-6-v2``.
        model_path: A local directory holding the model's ONNX export (offline use).
        cache_dir: Where downloaded models are kept (None: fastembed's default).
        threads: onnxruntime threads (None: onnxruntime's default).
    """

    parallel = 1  # one model call at a time: onnxruntime spreads one call over its threads already

    def __init__(
        self,
        model_name: str = DEFAULT_MODEL,
        *,
        model_path: Path | None = None,
        cache_dir: Path | None = None,
        threads: int | None = None,
    ) -> None:
        self.model_name = model_name
        self.model_path = model_path
        self.cache_dir = cache_dir
        self.threads = threads
        self._model: TextCrossEncoder | None = None
        self._lock = threading.Lock()
        self._load_failure: tuple[float, RerankError] | None = None

    def __repr__(self) -> str:
        return f"FastEmbedReranker({self.model_name!r}, model_path={self.model_path!r})"

    @property
    def identity(self) -> str:
        return f"fastembed:{self.model_name}"

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        if not texts:
            return []
        with self._lock:
            model = self._load()
            try:
                return [float(s) for s in model.rerank(query, list(texts), batch_size=BATCH_SIZE)]
            except (TypeError, ValueError) as exc:  # an output that is not one number per pair
                raise RerankError(
                    f"{self.model_name} from {self.model_path or 'the cache'} does not give one relevance score "
                    f"per passage: {shorten(exc)}",
                    hint="Is it a cross-encoder? A sentence-embedding model (a bi-encoder) is not: set rerank "
                    "model_path to a reranker's ONNX export (e.g. Xenova/ms-marco-MiniLM-L-6-v2).",
                ) from exc

    def close(self) -> None:
        """Drop the loaded model (it loads again on next use), giving its memory back."""
        with self._lock:
            self._model = None

    def _load(self) -> TextCrossEncoder:
        """The model, loaded once; a failed load is not tried again for ``LOAD_RETRY_SECONDS``.

        A missing model fails the same way on every search, and a download's probe costs seconds.
        """
        if self._model is not None:
            return self._model
        if self._load_failure is not None and time.monotonic() - self._load_failure[0] < LOAD_RETRY_SECONDS:
            raise self._load_failure[1]
        try:
            self._model = self._open()
        except RerankError as exc:
            self._load_failure = (time.monotonic(), exc)
            raise
        self._load_failure = None
        return self._model

    def _open(self) -> TextCrossEncoder:
        try:
            from fastembed.rerank.cross_encoder import TextCrossEncoder
        except ImportError as exc:
            instead = "set rerank provider to http (a /rerank endpoint) or none"
            raise not_installed(exc, what="reranker", error=RerankError, instead=instead) from exc

        self._check_model_name(TextCrossEncoder)
        options: dict[str, Any] = {"threads": self.threads} if self.threads else {}
        if self.model_path is not None:
            return self._open_directory(TextCrossEncoder, self.model_path, options)
        if self.cache_dir is not None:
            options["cache_dir"] = str(self.cache_dir)
        return open_cached(TextCrossEncoder, self.model_name, options) or self._download(TextCrossEncoder, options)

    def _check_model_name(self, cross_encoder: type[TextCrossEncoder]) -> None:
        supported = {entry["model"].lower() for entry in cross_encoder.list_supported_models()}
        if self.model_name.lower() not in supported:
            raise RerankError(
                f"fastembed does not know the reranker {self.model_name!r}.",
                hint="Set rerank model to a cross-encoder fastembed supports (e.g. Xenova/ms-marco-MiniLM-L-6-v2 "
                "or BAAI/bge-reranker-base; see fastembed's TextCrossEncoder.list_supported_models()).",
            )

    def _open_directory(
        self, cross_encoder: type[TextCrossEncoder], path: Path, options: dict[str, Any]
    ) -> TextCrossEncoder:
        hint = (
            f"Check rerank model_path: it must be a directory holding the ONNX export of {self.model_name} "
            "(onnx/model.onnx, tokenizer.json, config.json, ...), and rerank model must name the model it holds."
        )
        return open_directory(
            cross_encoder, self.model_name, path, options, what="reranker model", error=RerankError, hint=hint
        )

    def _download(self, cross_encoder: type[TextCrossEncoder], options: dict[str, Any]) -> TextCrossEncoder:
        hint = (
            f"Set rerank model_path to a local copy of {self.model_name} (works offline), or let Coffer download "
            "it once while Hugging Face is reachable (HF_ENDPOINT selects a mirror)."
        )
        return download(cross_encoder, self.model_name, options, error=RerankError, hint=hint)
