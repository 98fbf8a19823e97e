"""Fixtures for the embedding providers: the local ONNX model and a fake OpenAI server."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import SHARED
from tests.embed.fake_openai_server import FakeOpenAIServer, fake_openai_server

MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
MODEL_ENV = "COFFER_TEST_MODEL_PATH"
MODEL_DIR = SHARED / "models" / "all-MiniLM-L6-v2-int8"


def long_texts(count: int) -> list[str]:
    """``count`` distinct texts longer than the model's 512 tokens (it truncates them there)."""
    words = "the river carried silt from distant mountains across a wide delta where farmers planted rice".split()
    return [" ".join(words[(i * 7 + n) % len(words)] for n in range(700)) + f" text {i}" for i in range(count)]


def local_model_dir() -> Path:
    """The local all-MiniLM-L6-v2 ONNX directory (``$COFFER_TEST_MODEL_PATH`` or ../shared/models)."""
    path = Path(os.environ.get(MODEL_ENV) or MODEL_DIR)
    if not (path / "model.onnx").is_file():
        pytest.skip(f"no local embedding model at {path} (set {MODEL_ENV} to an ONNX export of {MODEL_NAME})")
    return path


@pytest.fixture
def model_dir() -> Path:
    return local_model_dir()


@pytest.fixture
def openai_server() -> Iterator[FakeOpenAIServer]:
    with fake_openai_server() as server:
        yield server
