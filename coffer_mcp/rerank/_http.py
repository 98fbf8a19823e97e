"""http: any server speaking the ``/rerank`` API of Jina and Cohere (vLLM, llama.cpp, Infinity, ...).

One request per search::

    POST <url>  {"model": ..., "query": ..., "documents": [...], "top_n": n}
    ->          {"results": [{"index": i, "relevance_score": s}, ...]}

A bare list of results and a ``score`` key (text-embeddings-inference's answer) are read too. The
URL is the operator's configuration, like the embedder's ``base_url`` (a local server is the usual
case), so it is not put through the SSRF guard that URLs from agents go through. One
``httpx.Client`` is kept for the process: its connection pool is thread-safe, and a kept-alive
connection saves a handshake on every search.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from coffer_mcp.errors import RerankError
from coffer_mcp.rerank.base import shorten

if TYPE_CHECKING:
    import httpx

__all__ = ["HttpReranker"]

PARALLEL_REQUESTS = 4
USER_AGENT = "coffer-mcp"


class HttpReranker:
    """Scores texts through a Jina/Cohere-style ``/rerank`` endpoint.

    Args:
        url: The endpoint's full URL, e.g. ``http://127.0.0.1:8080/v1/rerank``.
        model: Sent as ``model`` (hosted APIs need it; a server with one model may ignore it).
        api_key: Sent as ``Authorization: Bearer ...``; local servers usually need none.
        timeout_seconds: Per-request timeout (a search waits for less: its budget).
    """

    parallel = PARALLEL_REQUESTS

    def __init__(
        self, url: str, *, model: str | None = None, api_key: str | None = None, timeout_seconds: float = 10.0
    ) -> None:
        self.url = url
        self.model = model
        self._api_key = api_key
        self.timeout_seconds = timeout_seconds
        self._client: httpx.Client | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"HttpReranker({self.url!r}, model={self.model!r})"

    @property
    def identity(self) -> str:
        parts = urlsplit(self.url)
        return f"http:{self.model}" if self.model else f"http:{parts.netloc}{parts.path}"

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        if not texts:
            return []
        body: dict[str, Any] = {"query": query, "documents": list(texts), "top_n": len(texts)}
        if self.model:
            body = {"model": self.model, **body}
        return self._scores(self._post(body), len(texts))

    def close(self) -> None:
        """Close the kept connections (a later call opens new ones)."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def _post(self, body: dict[str, Any]) -> Any:
        import httpx

        headers = {"User-Agent": USER_AGENT}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        try:
            response = self._session().post(self.url, json=body, headers=headers)
        except httpx.TimeoutException as exc:
            raise RerankError(
                f"The reranker at {self.url} did not answer within {self.timeout_seconds:g} seconds.",
                hint="Check that the rerank server is running and not overloaded.",
            ) from exc
        except httpx.HTTPError as exc:
            raise RerankError(
                f"Could not reach the reranker at {self.url}: {self._redacted(shorten(exc))}",
                hint="Is the rerank server running? Check rerank url (COFFER_RERANK_URL).",
            ) from exc
        if not response.is_success:
            raise RerankError(
                f"The reranker at {self.url} answered HTTP {response.status_code}: "
                f"{self._redacted(' '.join(response.text.split())[:200])}",
                hint=_status_hint(response.status_code),
            )
        try:
            return response.json()
        except ValueError as exc:
            raise self._malformed("the body is not JSON") from exc

    def _scores(self, data: Any, expected: int) -> list[float]:
        """One score per text; texts the server left out (a short ``top_n``) score lowest, in order."""
        items = data.get("results") if isinstance(data, dict) else data
        if not isinstance(items, list):
            raise self._malformed("no 'results' list")
        scores = [-math.inf] * expected
        seen: set[int] = set()
        for item in items:
            index = item.get("index") if isinstance(item, dict) else None
            value = item.get("relevance_score", item.get("score")) if isinstance(item, dict) else None
            if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < expected or index in seen:
                raise self._malformed(f"a result's index is not one of 0..{expected - 1} (or comes twice)")
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
                raise self._malformed("a result's relevance_score is not a finite number")
            seen.add(index)
            scores[index] = float(value)
        return scores

    def _session(self) -> httpx.Client:
        import httpx

        with self._lock:
            if self._client is None:
                self._client = httpx.Client(timeout=self.timeout_seconds, follow_redirects=False)
            return self._client

    def _malformed(self, problem: str) -> RerankError:
        return RerankError(
            f"The reranker at {self.url} sent a malformed answer: {problem}.",
            hint="Check that rerank url points at a Jina/Cohere-style /rerank endpoint (POST query + documents, "
            "answering results of index and relevance_score).",
        )

    def _redacted(self, text: str) -> str:
        return text.replace(self._api_key, "***") if self._api_key else text


def _status_hint(status: int) -> str:
    if status in (401, 403):
        return "Check the API key: put it in COFFER_RERANK_API_KEY (or the variable rerank api_key_env names)."
    if status == 404:
        return "Check rerank url: the full path of the endpoint, often /rerank, /v1/rerank or /v2/rerank."
    if status in (400, 422):
        return "The server refused the request: check rerank model (COFFER_RERANK_MODEL)."
    if status == 429:
        return "The provider is rate limiting or out of quota."
    return "Check the rerank server's own log."
