"""fastembed: in-process ONNX embedding, loaded on first use.

Where the model comes from, in order:

1. ``model_path`` set: that directory, never the network.
2. Otherwise the model cache, without touching the network: ``cache_dir`` (Coffer passes
   ``$COFFER_HOME/models``, so a reboot that empties the temp dir does not mean a new download),
   or, when the user set ``FASTEMBED_CACHE_PATH``, that folder.
3. Otherwise a download from Hugging Face (``HF_ENDPOINT``), but only after a 5-second probe
   shows the hub answers at all: when it cannot be reached fastembed retries three times with
   sleeps of 3, 9 and 27 seconds before giving up, and that 39-second stall would hit the first
   document ingested on every offline machine. With ``HF_HUB_OFFLINE=1`` nothing is downloaded.

Each text is its own model call. Batching texts pads them to the longest, and int8 models
(MiniLM and bge-small as Coffer runs them) quantize a call's activations with one scale for the
whole batch, so a text's vector would depend on the texts it happened to share a call with; alone,
it is a function of the text, in-process as in the shared service. It is also the fastest shape
for chunks of a few hundred tokens, and the lightest: 64 texts padded to 512 tokens held 1.8 GB of
activations, one text at most ~110 MB (docs/benchmarks.md, "Embedding at the machine's pace").
Document texts go through the model one at a time; a query does not wait for them: it runs
beside the current one on the same session (onnxruntime sessions take concurrent calls), so a
search is never queued behind a bulk ingest.

fastembed logs through loguru to stderr and huggingface_hub draws its progress bars on stderr;
nothing here writes to stdout, which belongs to the MCP protocol in stdio mode.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coffer_mcp.embed.base import normalized
from coffer_mcp.embed.fastembed_models import (
    download,
    not_installed,
    open_cached,
    open_directory,
    with_quiet_threads,
)
from coffer_mcp.errors import EmbeddingError
from coffer_mcp.settings import default_of

if TYPE_CHECKING:
    from fastembed import TextEmbedding

__all__ = ["DEFAULT_MODEL", "FastEmbedEmbedder"]

DEFAULT_MODEL = "BAAI/bge-small-en-v1.5"


class FastEmbedEmbedder:
    """Embeds with a fastembed ``TextEmbedding`` model, loaded lazily and at most once.

    Args:
        model_name: A model fastembed supports, e.g. ``sentence-transformers/all-MiniLM-L6-v2``;
            it decides pooling and normalization, also for a model loaded from ``model_path``.
        model_path: A local directory holding the model's ONNX export (offline use).
        cache_dir: Where downloaded models are kept (None: fastembed's default).
        batch_size: Texts per request to the shared model service (each text is its own model call).
        threads: onnxruntime threads (None: onnxruntime's default, one per physical core).
        dimensions: When set, the model's vector size must equal it.
    """

    def __init__(
        self,
        model_name: str = DEFAULT_MODEL,
        *,
        model_path: Path | None = None,
        batch_size: int = default_of("embedding_batch_size"),
        threads: int | None = None,
        dimensions: int | None = None,
        cache_dir: Path | None = None,
    ) -> None:
        self.model_name = model_name
        self.model_path = model_path
        self.cache_dir = cache_dir
        self.batch_size = max(1, batch_size)
        self.threads = threads
        self.expected_dimensions = dimensions
        self._model: TextEmbedding | None = None
        self._load_lock = threading.Lock()
        # Two lanes into one session: one document text at a time (onnxruntime already spreads a
        # call over its threads, and more calls at once would only add their memory), and one
        # query at a time beside it, so at most two texts' activations are alive at once.
        self._document_lock = threading.Lock()
        self._query_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"FastEmbedEmbedder({self.model_name!r}, model_path={self.model_path!r})"

    @property
    def identity(self) -> str:
        return f"fastembed:{self.model_name}"

    def dimensions(self) -> int:
        return self._load().embedding_size

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        model = self._load()
        return [self._embed_one(model.passage_embed, text, self._document_lock) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._embed_one(self._load().query_embed, text, self._query_lock)

    def _embed_one(self, embed: Callable[..., Iterable[Any]], text: str, lane: threading.Lock) -> list[float]:
        with lane:
            rows = list(embed([text]))
        if len(rows) != 1:
            raise EmbeddingError(f"{self.identity} returned {len(rows)} vectors for one text.")
        return normalized(rows[0].tolist())

    @property
    def loaded(self) -> bool:
        """Whether the model is in memory (it loads on first use)."""
        return self._model is not None

    def unload(self) -> None:
        """Drop the loaded model (it loads again on next use), giving its memory back.

        A call already running keeps its own reference and finishes with it.
        """
        with self._load_lock:
            self._model = None

    def _load(self) -> TextEmbedding:
        if self._model is None:
            with self._load_lock:
                if self._model is None:
                    self._model = self._open()
        return self._model

    def _open(self) -> TextEmbedding:
        try:
            from fastembed import TextEmbedding
        except ImportError as exc:
            instead = "set embedding provider to openai (any /v1/embeddings server) or none"
            raise not_installed(exc, what="embedding model", error=EmbeddingError, instead=instead) from exc

        self._check_model_name(TextEmbedding)
        make = with_quiet_threads(TextEmbedding)
        options: dict[str, Any] = {"threads": self.threads} if self.threads else {}
        if self.cache_dir is not None and self.model_path is None:
            options["cache_dir"] = str(self.cache_dir)
        if self.model_path is not None:
            model = self._open_directory(make, options)
        else:
            model = open_cached(make, self.model_name, options) or self._download(make, options)
        self._check_dimensions(model.embedding_size)
        return model

    def _check_model_name(self, text_embedding: type[TextEmbedding]) -> None:
        supported = {entry["model"].lower() for entry in text_embedding.list_supported_models()}
        if self.model_name.lower() not in supported:
            raise EmbeddingError(
                f"fastembed does not know the model {self.model_name!r}.",
                hint="Set the embedding model to a name fastembed supports (e.g. BAAI/bge-small-en-v1.5 or "
                "sentence-transformers/all-MiniLM-L6-v2; see fastembed's TextEmbedding.list_supported_models()).",
            )

    def _open_directory(self, make: Callable[..., TextEmbedding], options: dict[str, Any]) -> TextEmbedding:
        assert self.model_path is not None
        hint = (
            f"Check embedding model_path: it must be a directory holding the ONNX export of {self.model_name} "
            "(model.onnx, tokenizer.json, config.json, ...), and the embedding model must name the model it holds."
        )
        return open_directory(
            make,
            self.model_name,
            self.model_path,
            options,
            what="fastembed model",
            error=EmbeddingError,
            hint=hint,
        )

    def _download(self, make: Callable[..., TextEmbedding], options: dict[str, Any]) -> TextEmbedding:
        hint = (
            f"Set embedding model_path to a local copy of {self.model_name} (works offline), or let Coffer "
            "download it once while Hugging Face is reachable (HF_ENDPOINT selects a mirror)."
        )
        return download(make, self.model_name, options, error=EmbeddingError, hint=hint)

    def _check_dimensions(self, size: int) -> None:
        if self.expected_dimensions is not None and self.expected_dimensions != size:
            raise EmbeddingError(
                f"{self.model_name} makes {size}-dimensional vectors, not {self.expected_dimensions}.",
                hint=f"fastembed models have a fixed size: unset embedding dimensions or set it to {size}.",
            )
