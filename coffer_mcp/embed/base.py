"""The embedder contract, its configuration, and the cooldown guard every provider is wrapped in.

Providers (``_fastembed``, ``_openai``) import their library on first use, raise ``EmbeddingError``
with a specific hint where they recognise a failure, and may raise anything else where they do
not: ``CooldownEmbedder`` maps the rest at this boundary and keeps a failed provider from being
called again for ``cooldown_seconds``, so a dead provider costs one failure, not one per document.
The pause itself is ``Cooldown``, which the reranker's budget uses too.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, Literal, Protocol, TypeVar, runtime_checkable

from coffer_mcp.errors import EmbeddingError
from coffer_mcp.settings import default_of

__all__ = ["Cooldown", "CooldownEmbedder", "Embedder", "EmbeddingConfig", "Pause", "normalized", "shorten"]

COOLING_DOWN = "embedding_cooling_down"
_T = TypeVar("_T")
_F = TypeVar("_F")


@dataclass(frozen=True, slots=True)
class EmbeddingConfig:
    """How to embed. Settings build it; ``make_embedder`` turns it into an ``Embedder``.

    Attributes:
        provider: ``fastembed`` (in-process ONNX), ``openai`` (any /v1/embeddings server) or ``none``.
        model: The model name; None means the provider's default.
        model_path: fastembed only: a local model directory, so nothing is downloaded.
        cache_dir: fastembed only: where downloaded models are kept (None: fastembed's own
            default, ``FASTEMBED_CACHE_PATH`` or the system temp dir, which a reboot may empty).
        base_url: openai only: the server's base URL, e.g. ``http://localhost:11434/v1``.
        api_key: openai only: the key itself (settings resolve it from the named env var).
        dimensions: openai: requested output size; fastembed: checked against the model's size.
        batch_size: fastembed: texts per request to the shared model service (each text is its own
            model call); openai requests hold ``min(batch_size*8, 128)``.
        cooldown_seconds: After a failure, refuse calls this long instead of trying again.
        threads: fastembed onnxruntime threads (None: onnxruntime's default).
        timeout_seconds: openai request timeout; fastembed: how long to wait for the shared
            model service's answer before embedding in-process.
        service: fastembed only: ``auto`` embeds through the user's shared model service (one
            model per machine, not per process) where the platform has Unix sockets, ``off``
            loads the model in this process. ``off`` here; the ``embedding_service`` setting
            defaults to ``auto``.
        service_idle_seconds: A shared model service exits after this long without a request.
        service_folder: The service's private run folder (None: ``$XDG_RUNTIME_DIR/coffer``,
            else ``<temp dir>/coffer-<uid>``).
    """

    provider: Literal["fastembed", "openai", "none"] = "fastembed"
    model: str | None = None
    model_path: Path | None = None
    cache_dir: Path | None = None
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    dimensions: int | None = None
    batch_size: int = default_of("embedding_batch_size")
    cooldown_seconds: float = default_of("embedding_cooldown_seconds")
    threads: int | None = None
    timeout_seconds: float = 60.0
    service: Literal["auto", "off"] = "off"
    service_idle_seconds: float = default_of("embedding_service_idle_seconds")
    service_folder: Path | None = None


@runtime_checkable
class Embedder(Protocol):
    """Turns text into L2-normalized vectors. Every method may raise ``EmbeddingError``."""

    @property
    def identity(self) -> str:
        """A stable id of the model: vectors with equal identities are comparable. No secrets."""
        ...

    def dimensions(self) -> int:
        """The vector length; may load the model or make one probe call."""
        ...

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order."""
        ...

    def embed_query(self, text: str) -> list[float]:
        """A vector for a search query (some models embed queries differently from passages)."""
        ...


@dataclass(frozen=True, slots=True)
class Pause(Generic[_F]):
    """A ``Cooldown``'s pause: the seconds it has left, the failures in a row behind it, the last one."""

    seconds_left: float
    failures: int
    last: _F


class Cooldown(Generic[_F]):
    """Pauses calls to a failing provider: after ``after`` failures in a row, for ``seconds``.

    Every failure from the ``after``-th on starts the pause again, so once it ends one call goes
    through, and if that fails too the next pause begins at once; a success ends the streak.
    The caller asks ``pause()`` before each call and reports how it went. Thread-safe.

    Args:
        seconds: How long a pause lasts (0: never pause).
        after: How many failures in a row start one.
        clock: Monotonic seconds; tests may pass their own.
    """

    def __init__(self, seconds: float, *, after: int = 1, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self.after = max(1, after)
        self._clock = clock
        self._lock = threading.Lock()
        self._failures = 0
        self._last: _F | None = None
        self._paused_at: float | None = None

    def pause(self) -> Pause[_F] | None:
        """The pause calls are in now, or None: they may go ahead."""
        with self._lock:
            if self._paused_at is None or self._last is None:
                return None
            left = self._paused_at + self.seconds - self._clock()
            return Pause(left, self._failures, self._last) if left > 0 else None

    @property
    def last_failure(self) -> _F | None:
        """The last failure since the last success, if any."""
        with self._lock:
            return self._last

    def failed(self, failure: _F) -> Pause[_F] | None:
        """Count a failure; the pause it starts (again), if any."""
        with self._lock:
            self._failures += 1
            self._last = failure
            if self._failures < self.after or self.seconds <= 0:
                return None
            self._paused_at = self._clock()
            return Pause(self.seconds, self._failures, failure)

    def succeeded(self) -> None:
        with self._lock:
            self._failures, self._last, self._paused_at = 0, None, None


class CooldownEmbedder:
    """Wraps a provider: maps its failures to ``EmbeddingError`` and fails fast while cooling down.

    After a failure, calls raise ``EmbeddingError(code="embedding_cooling_down")`` without reaching
    the provider until ``cooldown_seconds`` have passed; the next call then tries the provider
    again, and a success clears the failure. Thread-safe.

    Args:
        provider: The embedder to guard.
        cooldown_seconds: How long to refuse calls after a failure (0: never refuse).
        hint: What to check when the provider fails with an error it did not explain itself.
        clock: Monotonic seconds; tests may pass their own.
    """

    def __init__(
        self,
        provider: Embedder,
        *,
        cooldown_seconds: float,
        hint: str = "",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.provider = provider
        self._hint = hint
        self._cooldown: Cooldown[EmbeddingError] = Cooldown(cooldown_seconds, clock=clock)

    def __repr__(self) -> str:
        return f"CooldownEmbedder({self.identity!r}, cooling_down={self.cooling_down})"

    @property
    def identity(self) -> str:
        return self.provider.identity

    @property
    def cooling_down(self) -> bool:
        """True while calls are refused after a failure."""
        return self._cooldown.pause() is not None

    @property
    def last_error(self) -> str | None:
        """The message of the failure that started the current cooldown, if any."""
        failure = self._cooldown.last_failure
        return None if failure is None else failure.message

    def dimensions(self) -> int:
        return self._call(self.provider.dimensions)

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return self._call(lambda: self.provider.embed_documents(texts))

    def embed_query(self, text: str) -> list[float]:
        return self._call(lambda: self.provider.embed_query(text))

    def _call(self, call: Callable[[], _T]) -> _T:
        self._refuse_while_cooling_down()
        try:
            result = call()
        except EmbeddingError as exc:
            self._cooldown.failed(exc)
            raise
        # Providers run third-party and native code whose exception types are open-ended; whatever
        # they raise must reach callers as an EmbeddingError, which they answer by degrading to
        # keyword search. KeyboardInterrupt and friends (BaseException) still propagate.
        except Exception as exc:
            error = EmbeddingError(f"Embedding with {self.identity} failed: {shorten(exc)}", hint=self._hint)
            self._cooldown.failed(error)
            raise error from exc
        self._cooldown.succeeded()
        return result

    def _refuse_while_cooling_down(self) -> None:
        pause = self._cooldown.pause()
        if pause is not None:
            raise EmbeddingError(
                f"Embedding with {self.identity} is paused for {math.ceil(pause.seconds_left)} more seconds after a "
                f"failure: {pause.last.message}",
                code=COOLING_DOWN,
                hint=f"{pause.last.hint} It is retried automatically when the pause ends.".strip(),
            )


def normalized(vector: Sequence[float]) -> list[float]:
    """``vector`` scaled to unit length, as plain floats; a zero vector is returned unchanged.

    Raises:
        EmbeddingError: The vector holds NaN or infinite values.
    """
    values = [float(x) for x in vector]
    norm = math.sqrt(math.fsum(x * x for x in values))
    if not math.isfinite(norm):
        raise EmbeddingError(
            "The embedding provider returned a vector with NaN or infinite values.",
            hint="Check the embedding model (a broken or wrongly exported model) or the server behind base_url.",
        )
    return values if norm == 0 else [x / norm for x in values]


def shorten(exc: BaseException, limit: int = 300) -> str:
    """One line naming the exception, short enough for an error message or a status report."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    if not text.startswith(type(exc).__name__):
        text = f"{type(exc).__name__}: {text}"
    return text if len(text) <= limit else text[: limit - 1] + "…"
