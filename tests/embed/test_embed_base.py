"""The cooldown guard, ``make_embedder`` and lazy imports — no model and no network needed."""

from __future__ import annotations

import hashlib
import math
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from coffer_mcp.embed import CooldownEmbedder, Embedder, EmbeddingConfig, make_embedder
from coffer_mcp.embed.base import normalized
from coffer_mcp.errors import ConfigError, EmbeddingError


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeEmbedder:
    """Deterministic 8-dimensional vectors from a hash; fails while ``failure`` is set; counts calls."""

    identity = "fake:hash-8"

    def __init__(self) -> None:
        self.calls = 0
        self.failure: Exception | None = None

    def dimensions(self) -> int:
        return len(self.embed_query(""))

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls += 1
        if self.failure is not None:
            raise self.failure
        return [normalized(hashlib.sha256(t.encode()).digest()[:8]) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def fake() -> FakeEmbedder:
    return FakeEmbedder()


@pytest.fixture
def guarded(fake: FakeEmbedder, clock: Clock) -> CooldownEmbedder:
    return CooldownEmbedder(fake, cooldown_seconds=30, hint="Check the fake.", clock=clock)


def test_a_healthy_provider_passes_through_the_guard(guarded: CooldownEmbedder, fake: FakeEmbedder) -> None:
    assert guarded.embed_documents(["a", "b"]) == fake.embed_documents(["a", "b"])
    assert guarded.dimensions() == 8
    assert guarded.identity == "fake:hash-8"
    assert not guarded.cooling_down
    assert guarded.last_error is None
    assert isinstance(guarded, Embedder)


def test_a_foreign_failure_becomes_an_embedding_error_naming_the_provider_with_a_hint(
    guarded: CooldownEmbedder, fake: FakeEmbedder
) -> None:
    fake.failure = RuntimeError("onnx session exploded\nwith a long traceback")
    with pytest.raises(EmbeddingError) as caught:
        guarded.embed_query("x")
    error = caught.value
    assert error.code == "embedding_unavailable"
    assert "fake:hash-8" in error.message
    assert "RuntimeError: onnx session exploded with" in error.message
    assert error.hint == "Check the fake."
    assert error.__cause__ is fake.failure


def test_after_a_failure_calls_fail_fast_without_reaching_the_provider(
    guarded: CooldownEmbedder, fake: FakeEmbedder
) -> None:
    fake.failure = ConnectionError("refused")
    with pytest.raises(EmbeddingError):
        guarded.embed_documents(["a"])
    assert fake.calls == 1
    for call in (lambda: guarded.embed_documents(["a"]), lambda: guarded.embed_query("a"), guarded.dimensions):
        with pytest.raises(EmbeddingError) as caught:
            call()
        assert caught.value.code == "embedding_cooling_down"
        assert "refused" in caught.value.message
        assert "Check the fake." in caught.value.hint
    assert fake.calls == 1
    assert guarded.cooling_down
    assert "refused" in (guarded.last_error or "")


def test_the_provider_is_tried_again_once_the_cooldown_has_passed_and_a_success_clears_it(
    guarded: CooldownEmbedder, fake: FakeEmbedder, clock: Clock
) -> None:
    fake.failure = ConnectionError("refused")
    with pytest.raises(EmbeddingError):
        guarded.embed_query("a")
    clock.now += 29.9
    assert guarded.cooling_down
    clock.now += 0.2
    assert not guarded.cooling_down
    fake.failure = None
    assert len(guarded.embed_query("a")) == 8
    assert fake.calls == 2
    assert not guarded.cooling_down
    assert guarded.last_error is None


def test_a_failure_after_the_cooldown_starts_a_new_one(
    guarded: CooldownEmbedder, fake: FakeEmbedder, clock: Clock
) -> None:
    fake.failure = ConnectionError("first")
    with pytest.raises(EmbeddingError):
        guarded.embed_query("a")
    clock.now += 31
    fake.failure = ConnectionError("second")
    with pytest.raises(EmbeddingError) as caught:
        guarded.embed_query("a")
    assert caught.value.code == "embedding_unavailable"
    assert guarded.cooling_down
    assert "second" in (guarded.last_error or "")


def test_an_embedding_error_from_the_provider_keeps_its_own_message_and_hint(
    guarded: CooldownEmbedder, fake: FakeEmbedder
) -> None:
    fake.failure = EmbeddingError("The model directory is empty.", hint="Point model_path at the model.")
    with pytest.raises(EmbeddingError) as caught:
        guarded.embed_query("a")
    assert caught.value is fake.failure
    assert guarded.last_error == "The model directory is empty."
    with pytest.raises(EmbeddingError, match="paused") as cooling:
        guarded.embed_query("a")
    assert cooling.value.hint.startswith("Point model_path at the model.")


def test_a_zero_cooldown_never_refuses_a_call(fake: FakeEmbedder, clock: Clock) -> None:
    guarded = CooldownEmbedder(fake, cooldown_seconds=0, clock=clock)
    fake.failure = ConnectionError("refused")
    for _ in range(3):
        with pytest.raises(EmbeddingError) as caught:
            guarded.embed_query("a")
        assert caught.value.code == "embedding_unavailable"
    assert fake.calls == 3
    assert not guarded.cooling_down


def test_normalized_vectors_have_unit_length_and_bad_values_are_refused() -> None:
    assert math.isclose(math.hypot(*normalized([3, 4])), 1.0)
    assert normalized([0.0, 0.0]) == [0.0, 0.0]
    with pytest.raises(EmbeddingError):
        normalized([1.0, float("nan")])


def test_provider_none_makes_no_embedder() -> None:
    assert make_embedder(EmbeddingConfig(provider="none")) is None


def test_each_provider_has_a_default_model_in_its_identity() -> None:
    fastembed = make_embedder(EmbeddingConfig())
    openai = make_embedder(EmbeddingConfig(provider="openai"))
    assert fastembed is not None
    assert fastembed.identity == "fastembed:BAAI/bge-small-en-v1.5"
    assert openai is not None
    assert openai.identity == "openai:text-embedding-3-small"


def test_an_openai_identity_names_the_dimensions_but_no_secret_or_url() -> None:
    config = EmbeddingConfig(
        provider="openai", model="text-embedding-3-large", dimensions=256, api_key="sk-secret", base_url="http://h/v1"
    )
    embedder = make_embedder(config)
    assert embedder is not None
    assert embedder.identity == "openai:text-embedding-3-large@256"
    assert "sk-secret" not in repr(config) + repr(embedder)


def test_a_model_path_without_a_model_name_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as caught:
        make_embedder(EmbeddingConfig(model_path=Path("/models/minilm")))
    assert "sentence-transformers/all-MiniLM-L6-v2" in caught.value.hint


def test_making_an_embedder_imports_no_model_library() -> None:
    code = """
import sys
from pathlib import Path
from coffer_mcp.embed import EmbeddingConfig, make_embedder
embedders = [
    make_embedder(EmbeddingConfig(model="sentence-transformers/all-MiniLM-L6-v2", model_path=Path("/nowhere"))),
    make_embedder(EmbeddingConfig()),
    make_embedder(EmbeddingConfig(provider="openai", base_url="http://127.0.0.1:9/v1", dimensions=64)),
]
for embedder in embedders:
    embedder.identity, embedder.cooling_down, embedder.last_error
assert embedders[2].dimensions() == 64  # configured dimensions need no probe call
heavy = {"fastembed", "onnxruntime", "openai", "huggingface_hub", "tokenizers", "numpy", "httpx"}
print(sorted(heavy & {name.split(".")[0] for name in sys.modules}))
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
