"""The http reranker against a real HTTP server on 127.0.0.1 speaking the ``/rerank`` API."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from coffer_mcp.errors import RerankError
from coffer_mcp.rerank import HttpReranker
from tests.rerank.fake_rerank_server import FakeRerankServer, relevance

DOCUMENTS = ["sourdough bread needs a starter", "vector search with HNSW graphs", "bread and butter"]
Make = Callable[..., HttpReranker]


@pytest.fixture
def make(rerank_server: FakeRerankServer) -> Iterator[Make]:
    """``make(**options)``: an ``HttpReranker`` of the fake server, closed after the test."""
    made: list[HttpReranker] = []

    def build(url: str | None = None, **options: Any) -> HttpReranker:
        made.append(HttpReranker(url or rerank_server.url, **options))
        return made[-1]

    yield build
    for reranker in made:
        reranker.close()


def test_scores_come_back_in_the_order_of_the_texts_whatever_order_the_server_answers_in(
    make: Make,
    rerank_server: FakeRerankServer,
) -> None:
    scores = make().score("sourdough bread", DOCUMENTS)
    assert scores == [relevance("sourdough bread", doc) for doc in DOCUMENTS]
    assert scores[0] > scores[2] > scores[1]


def test_the_request_carries_model_query_documents_top_n_and_the_key_as_a_bearer_token(
    make: Make,
    rerank_server: FakeRerankServer,
) -> None:
    make(model="bge-reranker-v2-m3", api_key="sk-test").score("q", DOCUMENTS)
    (request,) = rerank_server.requests
    assert request.body == {"model": "bge-reranker-v2-m3", "query": "q", "documents": DOCUMENTS, "top_n": 3}
    assert request.headers["authorization"] == "Bearer sk-test"
    assert request.headers["content-type"] == "application/json"


def test_without_a_model_or_key_neither_is_sent(make: Make, rerank_server: FakeRerankServer) -> None:
    make().score("q", DOCUMENTS)
    (request,) = rerank_server.requests
    assert "model" not in request.body
    assert "authorization" not in request.headers


def test_the_identity_names_the_model_or_else_the_endpoint_never_the_key(
    make: Make, rerank_server: FakeRerankServer
) -> None:
    assert make(model="m", api_key="sk-secret").identity == "http:m"
    assert make(api_key="sk-secret").identity == f"http:127.0.0.1:{rerank_server.port}/v1/rerank"
    assert "sk-secret" not in repr(make(api_key="sk-secret"))


def test_a_bare_list_with_score_keys_is_read_too(make: Make, rerank_server: FakeRerankServer) -> None:
    rerank_server.reply = lambda body: (200, [{"index": 1, "score": 0.9}, {"index": 0, "score": 0.1}])
    assert make().score("q", ["a", "b"]) == [0.1, 0.9]


def test_texts_the_server_leaves_out_score_lowest(make: Make, rerank_server: FakeRerankServer) -> None:
    rerank_server.reply = lambda body: (200, {"results": [{"index": 2, "relevance_score": 0.5}]})
    assert make().score("q", DOCUMENTS) == [-math.inf, -math.inf, 0.5]


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        ({"data": []}, "no 'results' list"),
        ({"results": [{"index": 3, "relevance_score": 1}]}, "index"),
        ({"results": [{"index": 0, "relevance_score": 1}, {"index": 0, "relevance_score": 2}]}, "twice"),
        ({"results": [{"index": 0, "relevance_score": "high"}]}, "not a finite number"),
        ({"results": [{"index": True, "relevance_score": 1}]}, "index"),
    ],
)
def test_a_malformed_answer_is_a_rerank_error_saying_what_is_wrong(
    make: Make, rerank_server: FakeRerankServer, reply: Any, problem: str
) -> None:
    rerank_server.reply = lambda body: (200, reply)
    with pytest.raises(RerankError, match=problem) as caught:
        make().score("q", DOCUMENTS)
    assert "/rerank endpoint" in caught.value.hint


def test_a_body_that_is_not_json_is_a_rerank_error(make: Make, rerank_server: FakeRerankServer) -> None:
    rerank_server.reply = lambda body: (200, b"<html>not json</html>")
    with pytest.raises(RerankError, match="not JSON"):
        make().score("q", DOCUMENTS)


@pytest.mark.parametrize(
    ("status", "hint"),
    [(401, "API key"), (403, "API key"), (404, "/v1/rerank"), (422, "rerank model"), (429, "rate"), (500, "log")],
)
def test_an_error_status_is_a_rerank_error_with_a_hint_and_the_key_redacted(
    make: Make, rerank_server: FakeRerankServer, status: int, hint: str
) -> None:
    rerank_server.reply = lambda body: (status, {"error": "refused key sk-secret"})
    with pytest.raises(RerankError, match=f"HTTP {status}") as caught:
        make(api_key="sk-secret").score("q", DOCUMENTS)
    assert hint in caught.value.hint
    assert "sk-secret" not in caught.value.message
    assert "***" in caught.value.message


def test_a_server_that_is_not_there_is_a_rerank_error_naming_the_url(
    make: Make, rerank_server: FakeRerankServer
) -> None:
    url = rerank_server.url
    rerank_server.stop()
    with pytest.raises(RerankError, match="Could not reach") as caught:
        make(url).score("q", DOCUMENTS)
    assert url in caught.value.message
    assert "COFFER_RERANK_URL" in caught.value.hint


def test_a_server_slower_than_the_request_timeout_is_a_rerank_error(
    make: Make, rerank_server: FakeRerankServer
) -> None:
    rerank_server.hold()
    try:
        with pytest.raises(RerankError, match="did not answer within"):
            make(timeout_seconds=0.2).score("q", DOCUMENTS)
    finally:
        rerank_server.release()


def test_no_texts_make_no_request(make: Make, rerank_server: FakeRerankServer) -> None:
    assert make().score("q", []) == []
    assert rerank_server.requests == []
