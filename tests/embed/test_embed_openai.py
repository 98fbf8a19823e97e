"""The openai provider against a real HTTP server on 127.0.0.1 speaking ``/v1/embeddings``."""

from __future__ import annotations

import math
import threading
from typing import Any

import pytest

from coffer_mcp.embed import CooldownEmbedder, EmbeddingConfig, make_embedder
from coffer_mcp.embed.base import normalized
from coffer_mcp.errors import EmbeddingError
from tests.embed.fake_openai_server import FakeOpenAIServer, fake_vector


def embedder_for(server: FakeOpenAIServer, **options: Any) -> CooldownEmbedder:
    embedder = make_embedder(
        EmbeddingConfig(provider="openai", base_url=server.base_url, model="fake-embed", **options)
    )
    assert embedder is not None
    return embedder


def test_300_texts_go_in_requests_of_at_most_128_and_come_back_in_order(openai_server: FakeOpenAIServer) -> None:
    texts = [f"text number {i}" for i in range(300)]
    vectors = embedder_for(openai_server).embed_documents(texts)
    assert sorted(len(r.body["input"]) for r in openai_server.requests) == [44, 128, 128]
    assert vectors == [normalized(fake_vector(text)) for text in texts]
    assert {r.path for r in openai_server.requests} == {"/v1/embeddings"}
    assert {r.body["model"] for r in openai_server.requests} == {"fake-embed"}


def test_vectors_are_normalized_to_unit_length(openai_server: FakeOpenAIServer) -> None:
    vector = embedder_for(openai_server).embed_query("hello")
    assert math.hypot(*fake_vector("hello")) > 1.5
    assert math.isclose(math.hypot(*vector), 1.0)


def test_request_size_follows_batch_size_times_eight(openai_server: FakeOpenAIServer) -> None:
    embedder_for(openai_server, batch_size=2).embed_documents([str(i) for i in range(40)])
    assert sorted(len(r.body["input"]) for r in openai_server.requests) == [8, 16, 16]


def test_batches_are_sent_concurrently_and_still_come_back_in_order(openai_server: FakeOpenAIServer) -> None:
    last_arrived = threading.Event()
    first_saw_last: list[bool] = []

    def reply(body: dict[str, Any]) -> tuple[int, Any]:
        if body["input"][0] == "t0":  # the first batch answers only once the last one has arrived
            first_saw_last.append(last_arrived.wait(timeout=10))
        if "t299" in body["input"]:
            last_arrived.set()
        return openai_server.answer(body)

    openai_server.reply = reply
    texts = [f"t{i}" for i in range(300)]
    assert embedder_for(openai_server).embed_documents(texts) == [normalized(fake_vector(t)) for t in texts]
    assert first_saw_last == [True]


def test_dimensions_are_passed_through_and_named_in_the_identity(openai_server: FakeOpenAIServer) -> None:
    embedder = embedder_for(openai_server, dimensions=8)
    assert embedder.identity == "openai:fake-embed@8"
    assert embedder.dimensions() == 8
    assert not openai_server.requests  # configured dimensions need no probe
    vectors = embedder.embed_documents(["a", "b"])
    assert [len(v) for v in vectors] == [8, 8]
    assert openai_server.requests[0].body["dimensions"] == 8
    assert openai_server.requests[0].body["encoding_format"] == "float"


def test_without_dimensions_none_are_sent_and_one_probe_finds_the_size(openai_server: FakeOpenAIServer) -> None:
    embedder = embedder_for(openai_server)
    assert embedder.dimensions() == 32
    assert embedder.dimensions() == 32
    assert len(openai_server.requests) == 1
    assert "dimensions" not in openai_server.requests[0].body


def test_no_texts_send_no_request(openai_server: FakeOpenAIServer) -> None:
    assert embedder_for(openai_server).embed_documents([]) == []
    assert openai_server.requests == []


def test_the_api_key_reaches_the_server_as_a_bearer_token(openai_server: FakeOpenAIServer) -> None:
    embedder_for(openai_server, api_key="sk-test-123").embed_query("hello")
    assert openai_server.requests[0].headers["authorization"] == "Bearer sk-test-123"


def test_a_rejected_key_names_the_env_var_setting_and_hides_the_key(openai_server: FakeOpenAIServer) -> None:
    openai_server.reply = lambda body: (401, {"error": {"message": "Incorrect API key sk-test-123", "type": "auth"}})
    with pytest.raises(EmbeddingError) as caught:
        embedder_for(openai_server, api_key="sk-test-123").embed_query("hello")
    assert "401" in caught.value.message
    assert "sk-test-123" not in caught.value.message
    assert "api_key_env" in caught.value.hint


def test_a_server_that_is_down_fails_then_cools_down_then_works_again_once_restarted(
    openai_server: FakeOpenAIServer,
) -> None:
    cooling = embedder_for(openai_server)  # the default 30 s cooldown
    retrying = embedder_for(openai_server, cooldown_seconds=0)
    openai_server.stop()
    for embedder in (cooling, retrying):
        with pytest.raises(EmbeddingError) as caught:
            embedder.embed_query("hello")
        assert caught.value.code == "embedding_unavailable"
        assert openai_server.base_url in caught.value.message
        assert "base_url" in caught.value.hint
    with pytest.raises(EmbeddingError) as again:
        cooling.embed_query("hello")
    assert again.value.code == "embedding_cooling_down"
    assert cooling.cooling_down
    openai_server.start()
    assert len(retrying.embed_query("hello")) == 32
    assert not retrying.cooling_down
    assert retrying.last_error is None
    with pytest.raises(EmbeddingError, match="paused"):
        cooling.embed_query("hello")
    assert len(openai_server.requests) == 1


def _ok(server: FakeOpenAIServer, body: dict[str, Any]) -> dict[str, Any]:
    return server.answer(body)[1]


MALFORMED = {
    "no data": lambda s, b: {"object": "list"},
    "too few embeddings": lambda s, b: {**_ok(s, b), "data": _ok(s, b)["data"][:1]},
    "wrong indexes": lambda s, b: {**_ok(s, b), "data": [{**d, "index": 7} for d in _ok(s, b)["data"]]},
    "embedding not a list": lambda s, b: {**_ok(s, b), "data": [{**d, "embedding": "abc"} for d in _ok(s, b)["data"]]},
    "unequal lengths": lambda s, b: {
        **_ok(s, b),
        "data": [{**d, "embedding": d["embedding"][: 4 + d["index"]]} for d in _ok(s, b)["data"]],
    },
    "not a number": lambda s, b: {
        **_ok(s, b),
        "data": [{**d, "embedding": [float("nan")] * 3} for d in _ok(s, b)["data"]],
    },
}


@pytest.mark.parametrize("case", [*MALFORMED, "not json"])
def test_a_malformed_response_is_an_embedding_error(openai_server: FakeOpenAIServer, case: str) -> None:
    if case == "not json":
        openai_server.reply = lambda body: (200, b"<html>surprise</html>")
    else:
        openai_server.reply = lambda body: (200, MALFORMED[case](openai_server, body))
    with pytest.raises(EmbeddingError) as caught:
        embedder_for(openai_server).embed_documents(["a", "b"])
    assert caught.value.code == "embedding_unavailable"
    assert caught.value.hint


def test_a_server_that_ignores_dimensions_is_an_embedding_error(openai_server: FakeOpenAIServer) -> None:
    openai_server.reply = lambda body: openai_server.answer({**body, "dimensions": None})
    with pytest.raises(EmbeddingError, match="32-dimensional") as caught:
        embedder_for(openai_server, dimensions=8).embed_query("hello")
    assert "dimensions" in caught.value.hint


def test_an_unknown_model_points_at_the_model_name(openai_server: FakeOpenAIServer) -> None:
    openai_server.reply = lambda body: (
        404,
        {"error": {"message": "model 'fake-embed' not found", "type": "not_found"}},
    )
    with pytest.raises(EmbeddingError) as caught:
        embedder_for(openai_server).embed_query("hello")
    assert "fake-embed" in caught.value.hint


@pytest.mark.anyio
async def test_it_also_works_when_called_on_a_thread_running_an_event_loop(openai_server: FakeOpenAIServer) -> None:
    assert len(embedder_for(openai_server).embed_query("hello")) == 32
