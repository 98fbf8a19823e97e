"""The fastembed reranker: a real ONNX model from a local folder, and the errors without one.

No cross-encoder's weights can be had on this machine (no hub), so the test that reranks with a
real one runs only when ``$COFFER_TEST_RERANK_MODEL_PATH`` names a folder holding
``Xenova/ms-marco-MiniLM-L-6-v2`` (or the model ``$COFFER_TEST_RERANK_MODEL`` names). The errors
are tested for real: a folder that is missing, one without a model, and one holding a real ONNX
model that is not a cross-encoder (the local all-MiniLM-L6-v2 bi-encoder, laid out as fastembed
expects a reranker), which loads and runs but gives no single score per passage.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from coffer_mcp.errors import ConfigError, RerankError
from coffer_mcp.rerank import FastEmbedReranker, RerankConfig, make_reranker
from tests.embed.conftest import local_model_dir

MODEL_ENV = "COFFER_TEST_RERANK_MODEL_PATH"
NAME_ENV = "COFFER_TEST_RERANK_MODEL"
DEFAULT = "Xenova/ms-marco-MiniLM-L-6-v2"


def test_a_model_path_without_a_model_name_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="rerank model_path is set") as caught:
        make_reranker(RerankConfig(provider="fastembed", model_path=tmp_path))
    assert "rerank model" in caught.value.hint


def test_making_the_reranker_loads_nothing(tmp_path: Path) -> None:
    reranker = make_reranker(RerankConfig(provider="fastembed", model=DEFAULT, model_path=tmp_path / "absent"))
    assert reranker is not None
    assert reranker.identity == f"fastembed:{DEFAULT}"
    assert make_reranker(RerankConfig()) is None


def test_a_missing_model_folder_is_a_rerank_error_with_a_hint(tmp_path: Path) -> None:
    reranker = FastEmbedReranker(DEFAULT, model_path=tmp_path / "absent")
    with pytest.raises(RerankError, match="does not exist") as caught:
        reranker.score("q", ["a passage"])
    assert "rerank model_path" in caught.value.hint


def test_a_folder_without_the_model_is_a_rerank_error_and_is_not_loaded_again_at_once(tmp_path: Path) -> None:
    reranker = FastEmbedReranker(DEFAULT, model_path=tmp_path)
    with pytest.raises(RerankError, match=f"Could not load {DEFAULT} from {tmp_path}") as caught:
        reranker.score("q", ["a passage"])
    assert "onnx/model.onnx" in caught.value.hint
    with pytest.raises(RerankError) as again:
        reranker.score("q", ["a passage"])
    assert again.value is caught.value  # remembered: a search does not retry a failed load every time


def test_a_name_fastembed_does_not_know_is_a_rerank_error(tmp_path: Path) -> None:
    with pytest.raises(RerankError, match="does not know the reranker") as caught:
        FastEmbedReranker("nobody/no-such-reranker", model_path=tmp_path).score("q", ["a"])
    assert "list_supported_models" in caught.value.hint


def test_a_sentence_embedding_model_is_refused_as_not_a_cross_encoder(tmp_path: Path) -> None:
    source = local_model_dir()  # skips without the local all-MiniLM-L6-v2 export
    folder = tmp_path / "bi-encoder"
    (folder / "onnx").mkdir(parents=True)
    for item in source.iterdir():
        target = folder / "onnx" / item.name if item.name == "model.onnx" else folder / item.name
        target.symlink_to(item)
    reranker = FastEmbedReranker(DEFAULT, model_path=folder)
    with pytest.raises(RerankError, match="does not give one relevance score per passage") as caught:
        reranker.score("vector search", ["HNSW graphs answer nearest neighbour queries.", "Sourdough bread."])
    assert "cross-encoder" in caught.value.hint


def cross_encoder_dir() -> Path:
    path = Path(os.environ.get(MODEL_ENV) or "/nonexistent")
    if not (path / "onnx" / "model.onnx").is_file():
        pytest.skip(
            f"no local cross-encoder (set {MODEL_ENV} to a folder holding {DEFAULT} as fastembed lays it out, "
            f"and {NAME_ENV} to its name if it is another)"
        )
    return path


def test_a_real_cross_encoder_ranks_the_passage_that_answers_first() -> None:
    folder = cross_encoder_dir()
    reranker = FastEmbedReranker(os.environ.get(NAME_ENV) or DEFAULT, model_path=folder)
    texts = [
        "Sourdough is leavened by a starter of flour and water.",
        "HNSW graphs answer approximate nearest neighbour queries for vector search.",
        "The weather in spring is mild.",
    ]
    scores = reranker.score("how does approximate nearest neighbour search work", texts)
    assert len(scores) == 3
    assert max(range(3), key=scores.__getitem__) == 1
    reranker.close()
