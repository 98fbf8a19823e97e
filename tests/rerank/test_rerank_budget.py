"""``BudgetedReranker``: the cap, the time budget and every fallback, with a scripted provider.

The provider here is a small deterministic stand-in (like a fake embedder for fusion logic); the
real providers are tested against a real HTTP server and a real ONNX model in the other files.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import pytest

from coffer_mcp.errors import RerankError
from coffer_mcp.models import Passage
from coffer_mcp.rerank import BudgetedReranker

WAIT = 30.0  # generous: a loaded 2-core box


class Scripted:
    """Scores each text by ``scorer``; ``gate`` (when set) makes calls wait until it opens."""

    identity = "scripted:test"

    def __init__(self, scorer: Callable[[str], float] = len, *, parallel: int = 1) -> None:
        self.scorer = scorer
        self.parallel = parallel
        self.gate: threading.Event | None = None
        self.entered = threading.Event()
        self.calls: list[tuple[str, list[str]]] = []
        self.closed = False

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        self.calls.append((query, list(texts)))
        self.entered.set()
        if self.gate is not None:
            assert self.gate.wait(WAIT)
        return [self.scorer(text) for text in texts]

    def close(self) -> None:
        self.closed = True


def passages(*texts: str) -> list[Passage]:
    return [
        Passage(
            text=text,
            document_id=f"doc{i}",
            title="",
            score=round(1 - i / 100, 6),
            position=0,
            heading_path=[],
            chunk_id=f"doc{i}:0",
            kb="kb",
        )
        for i, text in enumerate(texts)
    ]


def texts_of(ranked: Sequence[Passage]) -> list[str]:
    return [p.text for p in ranked]


def test_the_best_candidates_come_back_in_the_providers_order_with_their_own_scores() -> None:
    given = passages("b", "dddd", "a", "ccc")
    reranked, info = BudgetedReranker(Scripted(), candidates=10, timeout_ms=WAIT * 1000).rerank("q", given)
    assert texts_of(reranked) == ["dddd", "ccc", "b", "a"]
    assert {p.chunk_id: p.score for p in reranked} == {p.chunk_id: p.score for p in given}
    assert info.model_dump() == {"applied": True, "model": "scripted:test", "candidates": 4, "reason": None}


def test_only_the_first_candidates_are_sent_and_the_rest_keep_their_place_after_them() -> None:
    provider = Scripted()
    given = passages("a", "bb", "ccc", "dddd", "eeeee")
    reranked, info = BudgetedReranker(provider, candidates=3, timeout_ms=WAIT * 1000).rerank("q", given)
    assert provider.calls == [("q", ["a", "bb", "ccc"])]
    assert texts_of(reranked) == ["ccc", "bb", "a", "dddd", "eeeee"]
    assert info.candidates == 3


def test_equal_scores_keep_the_order_search_gave() -> None:
    reranked, _ = BudgetedReranker(Scripted(lambda _: 1.0), candidates=10, timeout_ms=WAIT * 1000).rerank(
        "q", passages("x", "y", "z")
    )
    assert texts_of(reranked) == ["x", "y", "z"]


def test_the_reranker_reads_the_title_above_the_passage() -> None:
    provider = Scripted()
    given = [passages("the text")[0].model_copy(update={"title": "The Title"})]
    BudgetedReranker(provider, candidates=10, timeout_ms=WAIT * 1000).rerank("q", given)
    assert provider.calls == [("q", ["The Title\nthe text"])]


def test_a_provider_slower_than_the_budget_leaves_the_order_and_says_timeout() -> None:
    provider = Scripted()
    provider.gate = threading.Event()
    given = passages("a", "bb", "ccc")
    try:
        reranked, info = BudgetedReranker(provider, candidates=10, timeout_ms=50).rerank("q", given)
    finally:
        provider.gate.set()
    assert reranked == given
    assert info.model_dump() == {"applied": False, "model": None, "candidates": None, "reason": "timeout"}


def test_while_every_slot_is_taken_by_a_call_over_budget_searches_fall_back_at_once_as_busy() -> None:
    provider = Scripted()
    provider.gate = threading.Event()
    reranker = BudgetedReranker(provider, candidates=10, timeout_ms=50)
    try:
        assert reranker.rerank("q", passages("a", "bb"))[1].reason == "timeout"
        reranked, info = reranker.rerank("q", passages("a", "bb"))
        assert (texts_of(reranked), info.reason) == (["a", "bb"], "busy")
        assert len(provider.calls) == 1  # the busy search did not call the provider
    finally:
        provider.gate.set()


def test_a_slot_is_free_again_once_the_slow_call_ends() -> None:
    provider = Scripted()
    provider.gate = threading.Event()
    reranker = BudgetedReranker(provider, candidates=10, timeout_ms=50)
    assert reranker.rerank("q", passages("a", "bb"))[1].reason == "timeout"
    provider.gate.set()
    provider.gate = None
    for thread in [t for t in threading.enumerate() if t.name == "coffer-rerank"]:
        thread.join(WAIT)  # the slow call's thread gives its slot back as it ends
    reranked, info = reranker.rerank("q", passages("a", "bb"))
    assert (texts_of(reranked), info.applied) == (["bb", "a"], True)


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (RerankError("The reranker at http://x answered HTTP 500: boom"), "error: The reranker at http://x answered"),
        (ValueError("onnxruntime said no"), "error: ValueError: onnxruntime said no"),
    ],
)
def test_a_failing_provider_leaves_the_order_and_says_error(error: Exception, reason: str) -> None:
    def fail(_: str) -> float:
        raise error

    given = passages("a", "bb")
    reranked, info = BudgetedReranker(Scripted(fail), candidates=10, timeout_ms=WAIT * 1000).rerank("q", given)
    assert reranked == given
    assert not info.applied
    assert info.reason is not None
    assert info.reason.startswith(reason)


def test_a_wrong_number_of_scores_leaves_the_order() -> None:
    class Short(Scripted):
        def score(self, query: str, texts: Sequence[str]) -> list[float]:
            return [1.0]

    given = passages("a", "bb")
    reranked, info = BudgetedReranker(Short(), candidates=10, timeout_ms=WAIT * 1000).rerank("q", given)
    assert reranked == given
    assert info.reason == "error: 1 scores for 2 passages"


def test_a_long_error_is_cut_short_in_the_result() -> None:
    def fail(_: str) -> float:
        raise RerankError("x" * 1000)

    _, info = BudgetedReranker(Scripted(fail), candidates=10, timeout_ms=WAIT * 1000).rerank("q", passages("a", "b"))
    assert info.reason is not None
    assert len(info.reason) <= 240


# -- the cooldown after failures in a row -------------------------------------------------------


class Clock:
    """Monotonic seconds that move only when a test moves them."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Flaky:
    """A scorer that fails (a ``RerankError``) while ``failing`` is set, else scores by length."""

    def __init__(self) -> None:
        self.failing = True

    def __call__(self, text: str) -> float:
        if self.failing:
            raise RerankError("model crashed")
        return len(text)


def settle() -> None:
    """Wait for every reranking thread to end (each gives its slot back as it does)."""
    for thread in [t for t in threading.enumerate() if t.name == "coffer-rerank"]:
        thread.join(WAIT)


def test_after_three_timeouts_in_a_row_searches_skip_the_reranker_at_once_and_say_so() -> None:
    provider = Scripted(parallel=4)
    provider.gate = threading.Event()
    reranker = BudgetedReranker(provider, candidates=10, timeout_ms=50, cooldown_seconds=30, clock=Clock())
    try:
        reasons = [reranker.rerank("q", passages("a", "bb"))[1].reason for _ in range(3)]
        reranked, info = reranker.rerank("q", passages("a", "bb"))
    finally:
        provider.gate.set()
    settle()
    assert reasons == ["timeout"] * 3
    assert texts_of(reranked) == ["a", "bb"]
    assert info.model_dump() == {
        "applied": False,
        "model": None,
        "candidates": None,
        "reason": "cooldown: not tried for 30 more seconds after 3 timeouts or errors in a row (the last: timeout)",
    }
    assert len(provider.calls) == 3  # the fourth search never reached the provider


def test_after_the_cooldown_the_next_search_tries_again_and_a_success_ends_the_streak() -> None:
    clock, scorer = Clock(), Flaky()
    provider = Scripted(scorer, parallel=8)
    reranker = BudgetedReranker(provider, candidates=10, timeout_ms=WAIT * 1000, cooldown_seconds=30, clock=clock)

    def reason() -> str | None:
        return reranker.rerank("q", passages("a", "bb"))[1].reason

    assert [reason() for _ in range(3)] == ["error: model crashed"] * 3
    clock.now += 29.5
    assert reason() == (
        "cooldown: not tried for 1 more seconds after 3 timeouts or errors in a row (the last: error: model crashed)"
    )
    clock.now += 0.5
    scorer.failing = False
    reranked, info = reranker.rerank("q", passages("a", "bb"))
    assert (texts_of(reranked), info.applied, len(provider.calls)) == (["bb", "a"], True, 4)
    scorer.failing = True
    assert [reason() for _ in range(2)] == ["error: model crashed"] * 2  # a new streak: no pause yet
    scorer.failing = False
    assert reason() is None
    assert len(provider.calls) == 7


def test_a_failure_after_the_cooldown_starts_the_next_one_at_once() -> None:
    clock = Clock()
    provider = Scripted(Flaky(), parallel=8)
    reranker = BudgetedReranker(provider, candidates=10, timeout_ms=WAIT * 1000, cooldown_seconds=30, clock=clock)
    for _ in range(3):
        reranker.rerank("q", passages("a", "bb"))
    clock.now += 30
    assert reranker.rerank("q", passages("a", "bb"))[1].reason == "error: model crashed"  # tried again
    info = reranker.rerank("q", passages("a", "bb"))[1]
    assert info.reason is not None
    assert info.reason.startswith("cooldown: not tried for 30 more seconds after 4 timeouts or errors in a row")
    assert len(provider.calls) == 4


def test_a_busy_provider_neither_counts_towards_the_cooldown_nor_ends_the_streak() -> None:
    clock, scorer = Clock(), Flaky()
    provider = Scripted(scorer)  # one call at a time
    reranker = BudgetedReranker(provider, candidates=10, timeout_ms=50, cooldown_seconds=30, clock=clock)
    assert reranker.rerank("q", passages("a", "bb"))[1].reason == "error: model crashed"
    settle()
    provider.gate = threading.Event()
    scorer.failing = False
    try:
        assert reranker.rerank("q", passages("a", "bb"))[1].reason == "timeout"  # holds the only slot
        assert [reranker.rerank("q", passages("a", "bb"))[1].reason for _ in range(3)] == ["busy"] * 3
    finally:
        provider.gate.set()
    settle()
    provider.gate = None
    scorer.failing = True
    assert reranker.rerank("q", passages("a", "bb"))[1].reason == "error: model crashed"  # the third in a row
    info = reranker.rerank("q", passages("a", "bb"))[1]
    assert info.reason is not None
    assert info.reason.startswith("cooldown: not tried for 30 more seconds after 3 timeouts or errors")


def test_a_cooldown_of_zero_seconds_never_skips_the_reranker() -> None:
    provider = Scripted(Flaky(), parallel=8)
    reranker = BudgetedReranker(provider, candidates=10, timeout_ms=WAIT * 1000, cooldown_seconds=0)
    reasons = [reranker.rerank("q", passages("a", "bb"))[1].reason for _ in range(5)]
    assert (reasons, len(provider.calls)) == (["error: model crashed"] * 5, 5)


def test_the_doctors_check_ignores_the_budget_and_maps_foreign_errors() -> None:
    provider = Scripted()
    assert BudgetedReranker(provider, candidates=10, timeout_ms=1).check() >= 0
    assert len(provider.calls[0][1]) == 2

    def fail(_: str) -> float:
        raise OSError("model file unreadable")

    with pytest.raises(RerankError, match="Reranking with scripted:test failed: OSError: model file unreadable"):
        BudgetedReranker(Scripted(fail), candidates=10, timeout_ms=1).check()


def test_close_reaches_the_provider() -> None:
    provider = Scripted()
    BudgetedReranker(provider, candidates=10, timeout_ms=10).close()
    assert provider.closed
