"""The fastembed provider, for real, against the local all-MiniLM-L6-v2 ONNX model."""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from coffer_mcp.embed import CooldownEmbedder, EmbeddingConfig, FastEmbedEmbedder, make_embedder
from coffer_mcp.errors import EmbeddingError
from tests.embed.conftest import MODEL_NAME, long_texts
from tests.embed.service_support import WAIT_SECONDS

QUERY = "how do farmers plant rice in a river delta"


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def minilm(model_dir: Path, **options: object) -> CooldownEmbedder:
    embedder = make_embedder(EmbeddingConfig(model=MODEL_NAME, model_path=model_dir, **options))  # type: ignore[arg-type]
    assert embedder is not None
    return embedder


def test_the_local_model_makes_deterministic_unit_length_384_dimensional_vectors(model_dir: Path) -> None:
    embedder = minilm(model_dir)
    assert embedder.identity == f"fastembed:{MODEL_NAME}"
    assert embedder.dimensions() == 384
    first = embedder.embed_documents(["hello world", "a second, longer text about search engines"])
    assert [len(v) for v in first] == [384, 384]
    assert all(type(x) is float for x in first[0])
    assert all(math.isclose(math.hypot(*v), 1.0, abs_tol=1e-6) for v in first)
    assert embedder.embed_documents(["hello world", "a second, longer text about search engines"]) == first


def test_a_paraphrase_is_closer_than_an_unrelated_text(model_dir: Path) -> None:
    question, paraphrase, unrelated = minilm(model_dir).embed_documents(
        [
            "How do I reset my password?",
            "Steps to recover account login credentials",
            "Sourdough needs a lively starter",
        ]
    )
    assert cosine(question, paraphrase) > cosine(question, unrelated) + 0.2


def test_a_query_embeds_next_to_the_same_text_as_a_passage(model_dir: Path) -> None:
    embedder = minilm(model_dir)
    query = embedder.embed_query("reset my password")
    passage, other = embedder.embed_documents(["reset my password", "bread baking"])
    assert len(query) == 384
    assert math.isclose(math.hypot(*query), 1.0, abs_tol=1e-6)
    assert cosine(query, passage) > 0.99 > cosine(query, other)


def test_a_texts_vector_is_the_same_whatever_texts_share_its_call(model_dir: Path) -> None:
    # int8 models quantize a model call's activations with one scale: batched, a text's vector
    # moved with its neighbours (and with the padding they brought). Each text is its own call now.
    embedder = FastEmbedEmbedder(MODEL_NAME, model_path=model_dir, batch_size=2)
    texts = ["one", "two words", "a third text, longer than the others by far", "four", "five and six"]
    together = embedder.embed_documents(texts)
    assert together == [embedder.embed_documents([text])[0] for text in texts]
    assert together == embedder.embed_documents(texts[::-1])[::-1]
    other = FastEmbedEmbedder(MODEL_NAME, model_path=model_dir, batch_size=16, threads=1)
    for got, expected in zip(other.embed_documents(texts), together, strict=True):
        assert max(abs(x - y) for x, y in zip(got, expected, strict=True)) <= 1e-6


def test_a_query_is_answered_while_a_bulk_embed_is_inside_the_model(model_dir: Path) -> None:
    embedder = FastEmbedEmbedder(MODEL_NAME, model_path=model_dir)
    expected = embedder.embed_query(QUERY)
    model = embedder._load()
    passage_embed = model.passage_embed
    inside = threading.Event()

    def spy(texts, **kwargs):  # type: ignore[no-untyped-def]
        inside.set()
        return passage_embed(texts, **kwargs)

    model.passage_embed = spy  # type: ignore[method-assign]
    bulk_done = threading.Event()
    bulk = threading.Thread(target=lambda: (embedder.embed_documents(long_texts(16)), bulk_done.set()))
    bulk.start()
    try:
        assert inside.wait(WAIT_SECONDS)
        assert embedder.embed_query(QUERY) == expected
        assert not bulk_done.is_set()  # the query did not wait for the 16 long texts
    finally:
        bulk.join(WAIT_SECONDS)
    assert bulk_done.is_set()


def test_loading_and_embedding_write_nothing_to_stdout(model_dir: Path, capfd: pytest.CaptureFixture[str]) -> None:
    embedder = minilm(model_dir, threads=1)
    embedder.embed_documents(["nothing on stdout, please"])
    embedder.embed_query("still nothing")
    assert capfd.readouterr().out == ""


def test_no_texts_need_no_model() -> None:
    embedder = make_embedder(EmbeddingConfig(model=MODEL_NAME, model_path=Path("/nowhere")))
    assert embedder is not None
    assert embedder.embed_documents([]) == []


def test_a_wrong_model_path_is_an_embedding_error_with_a_hint_then_cools_down(tmp_path: Path) -> None:
    embedder = minilm(tmp_path / "missing")
    with pytest.raises(EmbeddingError) as caught:
        embedder.embed_documents(["text"])
    assert caught.value.code == "embedding_unavailable"
    assert str(tmp_path / "missing") in caught.value.message
    assert "model_path" in caught.value.hint
    with pytest.raises(EmbeddingError) as again:
        embedder.embed_query("text")
    assert again.value.code == "embedding_cooling_down"
    assert embedder.cooling_down
    assert embedder.last_error == caught.value.message


def test_a_directory_without_the_model_is_an_embedding_error_with_a_hint(tmp_path: Path) -> None:
    with pytest.raises(EmbeddingError) as caught:
        minilm(tmp_path).embed_query("text")
    assert "Could not load" in caught.value.message
    assert "model.onnx" in caught.value.hint


def test_a_model_name_fastembed_does_not_know_is_an_embedding_error(model_dir: Path) -> None:
    embedder = make_embedder(EmbeddingConfig(model="acme/not-a-model", model_path=model_dir))
    assert embedder is not None
    with pytest.raises(EmbeddingError, match="acme/not-a-model") as caught:
        embedder.dimensions()
    assert "list_supported_models" in caught.value.hint


def test_configured_dimensions_must_match_the_model(model_dir: Path) -> None:
    with pytest.raises(EmbeddingError, match="384") as caught:
        minilm(model_dir, dimensions=256).embed_query("text")
    assert "dimensions" in caught.value.hint


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"HF_ENDPOINT": f"http://127.0.0.1:{closed_port()}"}, "cannot be reached"),
        ({"HF_HUB_OFFLINE": "1"}, "HF_HUB_OFFLINE"),
    ],
    ids=["hub unreachable", "hub offline"],
)
def test_a_model_that_is_neither_local_nor_downloadable_fails_at_once_with_a_hint(
    tmp_path: Path, env: dict[str, str], expected: str
) -> None:
    code = """
import json
from coffer_mcp.embed import EmbeddingConfig, make_embedder
from coffer_mcp.errors import EmbeddingError
try:
    make_embedder(EmbeddingConfig(model="BAAI/bge-small-en-v1.5")).embed_query("hello")
except EmbeddingError as exc:
    print(json.dumps(exc.to_dict()))
"""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "FASTEMBED_"))}
    environ |= {"FASTEMBED_CACHE_PATH": str(tmp_path), "HF_HOME": str(tmp_path / "hf"), **env}
    # A hang here would be the bug this guards against (fastembed's own retries sleep 39 s).
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=environ, timeout=30, check=False
    )
    error = json.loads(result.stdout)
    assert error["code"] == "embedding_unavailable"
    assert expected in error["message"]
    assert "model_path" in error["hint"]
    assert "ERROR" not in result.stderr  # a cache miss is expected, not worth an error line


def test_constructing_a_fastembed_embedder_loads_nothing(model_dir: Path) -> None:
    code = f"""
import sys
from pathlib import Path
from coffer_mcp.embed import EmbeddingConfig, make_embedder
embedder = make_embedder(EmbeddingConfig(model="{MODEL_NAME}", model_path=Path({str(model_dir)!r})))
print(sorted({{"fastembed", "onnxruntime", "tokenizers"}} & {{m.split(".")[0] for m in sys.modules}}))
embedder.embed_query("now it loads")
print(sorted({{"fastembed", "onnxruntime"}} & {{m.split(".")[0] for m in sys.modules}}))
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.splitlines() == ["[]", "['fastembed', 'onnxruntime']"]
