"""The reranker contract, its configuration, and the budget every reranking runs under.

A reranker scores how well each passage answers a query by reading the two together (a
cross-encoder), which the vectors of a bi-encoder cannot do; search uses the scores to reorder its
best candidates. It is optional and never in the way: ``BudgetedReranker`` runs the provider on a
daemon thread and waits at most ``timeout_ms`` for it. Past the budget, on any failure, or while
the provider is still busy with earlier calls, the passages keep the order search gave them and
the result says why. After ``FAILURES_BEFORE_COOLDOWN`` timeouts or failures in a row the provider
is left alone for ``cooldown_seconds`` (the embedder's ``Cooldown``), so a reranker that times
out on every query does not make every search wait the whole budget.
"""

from __future__ import annotations

import concurrent.futures
import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

from coffer_mcp.embed.base import Cooldown, Pause
from coffer_mcp.embed.base import shorten as shorten_error
from coffer_mcp.errors import CofferError, RerankError
from coffer_mcp.models import Passage, RerankInfo
from coffer_mcp.settings import default_of

__all__ = ["BudgetedReranker", "RerankConfig", "Reranker", "shorten"]

log = logging.getLogger(__name__)

DEFAULT_CANDIDATES = default_of("rerank_candidates")
DEFAULT_TIMEOUT_MS = default_of("rerank_timeout_ms")
DEFAULT_COOLDOWN_SECONDS = default_of("rerank_cooldown_seconds")
# One slow answer (a model still loading, a busy server) is no reason to stop asking; three in a
# row are a pattern, and each costs a search the whole budget.
FAILURES_BEFORE_COOLDOWN = 3
MAX_REASON_CHARS = 240
PROBE_QUERY = "Coffer doctor: is the reranker working?"


@dataclass(frozen=True, slots=True)
class RerankConfig:
    """How to rerank. Settings build it; ``make_reranker`` turns it into a ``BudgetedReranker``.

    Attributes:
        provider: ``fastembed`` (an in-process ONNX cross-encoder), ``http`` (a ``/rerank``
            endpoint) or ``none``.
        model: fastembed: the cross-encoder's name (None: the provider's default); http: the
            ``model`` sent with each request (None: not sent).
        model_path: fastembed only: a local model directory, so nothing is downloaded.
        cache_dir: fastembed only: where downloaded models are kept (None: fastembed's default).
        url: http only: the endpoint's full URL, e.g. ``http://127.0.0.1:8080/v1/rerank``.
        api_key: http only: the key itself (settings resolve it from the named env var).
        candidates: How many of a search's best passages are reranked at most.
        timeout_ms: How long a search waits for the reranker at most.
        cooldown_seconds: After ``FAILURES_BEFORE_COOLDOWN`` timeouts or failures in a row,
            searches leave the reranker alone this long (0: never).
        threads: fastembed onnxruntime threads (None: onnxruntime's default).
    """

    provider: Literal["fastembed", "http", "none"] = "none"
    model: str | None = None
    model_path: Path | None = None
    cache_dir: Path | None = None
    url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    candidates: int = DEFAULT_CANDIDATES
    timeout_ms: int = DEFAULT_TIMEOUT_MS
    cooldown_seconds: float = DEFAULT_COOLDOWN_SECONDS
    threads: int | None = None


@runtime_checkable
class Reranker(Protocol):
    """Scores texts against a query. ``score`` may raise ``RerankError`` (or anything, when unexplained)."""

    @property
    def identity(self) -> str:
        """Which reranker this is, e.g. ``fastembed:Xenova/ms-marco-MiniLM-L-6-v2``. No secrets."""
        ...

    @property
    def parallel(self) -> int:
        """How many calls may run at once (an in-process model runs one; a server takes several)."""
        ...

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        """One relevance score per text, in order; higher is more relevant."""
        ...

    def close(self) -> None:
        """Let go of what the provider holds (connections, a loaded model); it may be used again after."""
        ...


class BudgetedReranker:
    """Reorders a search's best passages with ``provider``, within a time budget, or says why not.

    Args:
        provider: The reranker to call.
        candidates: How many of the best passages to rerank at most; the rest keep their place after them.
        timeout_ms: How long ``rerank`` waits for the provider. A call over the budget goes on in
            the background (it holds one of the provider's ``parallel`` slots until it ends).
        cooldown_seconds: How long to leave the provider alone after ``FAILURES_BEFORE_COOLDOWN``
            timeouts or failures in a row (0: never); a search that is let through then tries
            it again, and a success ends the streak.
        clock: Monotonic seconds, for the cooldown; tests may pass their own.
    """

    def __init__(
        self,
        provider: Reranker,
        *,
        candidates: int,
        timeout_ms: int,
        cooldown_seconds: float = DEFAULT_COOLDOWN_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.provider = provider
        self.candidates = max(1, candidates)
        self.timeout_ms = max(1, timeout_ms)
        self._slots = threading.BoundedSemaphore(max(1, provider.parallel))
        self._cooldown: Cooldown[str] = Cooldown(cooldown_seconds, after=FAILURES_BEFORE_COOLDOWN, clock=clock)

    def __repr__(self) -> str:
        return f"BudgetedReranker({self.identity!r}, candidates={self.candidates}, timeout_ms={self.timeout_ms})"

    @property
    def identity(self) -> str:
        return self.provider.identity

    def rerank(self, query: str, passages: Sequence[Passage]) -> tuple[list[Passage], RerankInfo]:
        """The passages with the best ``candidates`` in the reranker's order, and what happened.

        Never raises for the provider's sake: on a timeout, a failure, a busy provider or one
        cooling down the passages come back as they were, with the reason. Scores are left as
        search gave them, so a passage's score means the same whether or not the reranker ran.
        """
        head, tail = list(passages[: self.candidates]), list(passages[self.candidates :])
        texts = [_text(p) for p in head]
        pause = self._cooldown.pause()
        if pause is not None:
            return list(passages), self._paused(pause)
        if not self._slots.acquire(blocking=False):
            return list(passages), self._fell_back("busy")
        try:
            future = self._start(query, texts)
        except RuntimeError as exc:  # no thread can be started (the process is at its limit)
            self._slots.release()
            return list(passages), self._failed(shorten(exc), "")
        try:
            scores = future.result(timeout=self.timeout_ms / 1000)
        except concurrent.futures.TimeoutError:  # not yet the built-in TimeoutError on Python 3.10
            self._count_failure("timeout")
            return list(passages), self._fell_back("timeout")
        except CofferError as exc:
            return list(passages), self._failed(exc.message, exc.hint)
        except Exception as exc:  # noqa: BLE001 - providers run third-party code; any failure falls back
            return list(passages), self._failed(shorten(exc), "")
        if len(scores) != len(head):
            return list(passages), self._failed(f"{len(scores)} scores for {len(head)} passages", "")
        self._cooldown.succeeded()
        order = sorted(range(len(head)), key=lambda i: -scores[i])  # stable: ties keep search's order
        reranked = [head[i] for i in order] + tail
        return reranked, RerankInfo(applied=True, model=self.identity, candidates=len(head))

    def check(self) -> float:
        """Rerank two probe texts without the budget (``coffer doctor``); returns the seconds it took.

        Raises:
            RerankError: The provider failed.
        """
        started = time.perf_counter()
        try:
            self.provider.score(PROBE_QUERY, ["A reranker reads a query and a passage together.", "Sourdough bread."])
        except CofferError:
            raise
        except Exception as exc:  # third-party code's own types, mapped at this boundary
            raise RerankError(f"Reranking with {self.identity} failed: {shorten(exc)}") from exc
        return round(time.perf_counter() - started, 3)

    def close(self) -> None:
        """Close the provider's connections or unload its model."""
        self.provider.close()

    def _start(self, query: str, texts: list[str]) -> concurrent.futures.Future[list[float]]:
        """Run the provider on a daemon thread: a stuck model or server never holds up the process's exit."""
        future: concurrent.futures.Future[list[float]] = concurrent.futures.Future()

        def work() -> None:
            try:
                future.set_result(self.provider.score(query, texts))
            except Exception as exc:  # noqa: BLE001 - handed to the waiting search, which falls back
                future.set_exception(exc)
            finally:
                self._slots.release()

        threading.Thread(target=work, name="coffer-rerank", daemon=True).start()
        return future

    def _fell_back(self, reason: str) -> RerankInfo:
        log.info("search keeps the unreranked order (%s): %s", self.identity, reason)
        return RerankInfo(applied=False, reason=reason)

    def _failed(self, message: str, hint: str) -> RerankInfo:
        """A failure is a configuration to fix: the operator's log says so, with the hint."""
        log.warning("reranking with %s failed: %s %s", self.identity, message, hint)
        reason = _clip(f"error: {message}")
        self._count_failure(reason)
        return RerankInfo(applied=False, reason=reason)

    def _count_failure(self, reason: str) -> None:
        pause = self._cooldown.failed(reason)
        if pause is not None:
            log.warning("searches leave the reranker %s alone: %s", self.identity, _cooling(pause))

    def _paused(self, pause: Pause[str]) -> RerankInfo:
        log.info("search keeps the unreranked order (%s): cooling down", self.identity)
        return RerankInfo(applied=False, reason=_clip(f"cooldown: {_cooling(pause)}"))


def _cooling(pause: Pause[str]) -> str:
    return (
        f"not tried for {math.ceil(pause.seconds_left)} more seconds after {pause.failures} timeouts or errors "
        f"in a row (the last: {pause.last})"
    )


def _clip(reason: str) -> str:
    return reason if len(reason) <= MAX_REASON_CHARS else reason[: MAX_REASON_CHARS - 1] + "…"


def _text(passage: Passage) -> str:
    """What the reranker reads: the document's title above the passage, as the embedder reads it."""
    return f"{passage.title}\n{passage.text}" if passage.title else passage.text


def shorten(exc: BaseException, limit: int = 200) -> str:
    """One line naming the exception, short enough for a search result or a status report."""
    return shorten_error(exc, limit)
