"""openai: any server speaking ``POST /v1/embeddings`` (OpenAI, Ollama, LM Studio, vLLM, ...).

The core calling an embedder is synchronous and runs in worker threads, so each call runs its own
event loop (``asyncio.run``) and sends its batches concurrently through ``AsyncOpenAI``. The client
is created per call because an httpx connection pool belongs to the event loop that opened it; a
client shared across ``asyncio.run`` calls would hand a new loop connections of a closed one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, TypeGuard, TypeVar

from coffer_mcp.embed.base import normalized, shorten
from coffer_mcp.errors import EmbeddingError

if TYPE_CHECKING:
    from openai import AsyncOpenAI

__all__ = ["DEFAULT_BASE_URL", "DEFAULT_MODEL", "MAX_REQUEST_TEXTS", "OpenAIEmbedder"]

DEFAULT_MODEL = "text-embedding-3-small"
DEFAULT_BASE_URL = "https://api.openai.com/v1"
MAX_REQUEST_TEXTS = 128
CONCURRENT_REQUESTS = 4
_T = TypeVar("_T")


class OpenAIEmbedder:
    """Embeds through an OpenAI-compatible ``/v1/embeddings`` endpoint.

    Args:
        model: The model name the server knows.
        base_url: The server's base URL (ending in ``/v1``); None means OpenAI's.
        api_key: Sent as ``Authorization: Bearer ...``; local servers usually need none.
        dimensions: Requested output size (``text-embedding-3`` and later); None: the model's own.
        request_size: Texts per request, at most 128.
        timeout_seconds: Per-request timeout.
    """

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        dimensions: int | None = None,
        request_size: int = MAX_REQUEST_TEXTS,
        timeout_seconds: float = 60.0,
    ) -> None:
        self.model = model
        self.base_url = base_url or DEFAULT_BASE_URL
        self._api_key = api_key
        self.requested_dimensions = dimensions
        self.request_size = max(1, min(request_size, MAX_REQUEST_TEXTS))
        self.timeout_seconds = timeout_seconds
        self._size: int | None = dimensions

    def __repr__(self) -> str:
        return f"OpenAIEmbedder({self.model!r}, base_url={self.base_url!r})"

    @property
    def identity(self) -> str:
        suffix = f"@{self.requested_dimensions}" if self.requested_dimensions else ""
        return f"openai:{self.model}{suffix}"

    def dimensions(self) -> int:
        if self._size is None:
            self.embed_query("dimensions")
        assert self._size is not None
        return self._size

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        batches = [list(texts[i : i + self.request_size]) for i in range(0, len(texts), self.request_size)]
        results = _run(lambda: self._embed_batches(batches))
        return [vector for batch in results for vector in batch]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]

    async def _embed_batches(self, batches: list[list[str]]) -> list[list[list[float]]]:
        import asyncio

        from openai import AsyncOpenAI

        limit = asyncio.Semaphore(CONCURRENT_REQUESTS)
        client = AsyncOpenAI(
            base_url=self.base_url,
            api_key=self._api_key or "not-needed",
            timeout=self.timeout_seconds,
            max_retries=1,
        )
        async with client:

            async def one(batch: list[str]) -> list[list[float]]:
                async with limit:
                    return await self._embed_batch(client, batch)

            return await _gather_or_cancel([one(batch) for batch in batches])

    async def _embed_batch(self, client: AsyncOpenAI, batch: list[str]) -> list[list[float]]:
        import openai

        options: dict[str, Any] = {"dimensions": self.requested_dimensions} if self.requested_dimensions else {}
        try:
            response = await client.embeddings.create(model=self.model, input=batch, encoding_format="float", **options)
        except openai.APIError as exc:
            raise self._explain(exc) from exc
        except ValueError as exc:  # a body that is not JSON at all
            raise self._malformed(shorten(exc)) from exc
        return self._vectors(response, len(batch))

    def _vectors(self, response: object, expected: int) -> list[list[float]]:
        """The response's vectors in input order, normalized, after checking its shape."""
        items = getattr(response, "data", None)
        if not isinstance(items, list) or len(items) != expected:
            count = len(items) if isinstance(items, list) else "no"
            raise self._malformed(f"{count} embeddings for {expected} texts")
        by_index = {getattr(item, "index", None): getattr(item, "embedding", None) for item in items}
        if set(by_index) != set(range(expected)):
            raise self._malformed("embedding indexes do not match the inputs")
        vectors: list[list[float]] = []
        for i in range(expected):
            vector = by_index[i]
            if not _is_vector(vector):
                raise self._malformed("an embedding is not a non-empty list of numbers")
            vectors.append(vector)
        sizes = {len(v) for v in vectors}
        if len(sizes) != 1:
            raise self._malformed(f"embeddings of different lengths {sorted(sizes)}")
        self._check_size(sizes.pop())
        return [normalized(v) for v in vectors]

    def _check_size(self, size: int) -> None:
        if self.requested_dimensions and size != self.requested_dimensions:
            raise EmbeddingError(
                f"{self.base_url} returned {size}-dimensional vectors for {self.model}, "
                f"not the {self.requested_dimensions} requested.",
                hint="This server or model ignores 'dimensions': unset embedding dimensions, or use a model "
                "that supports it (text-embedding-3-*).",
            )
        if self._size is not None and size != self._size:
            raise EmbeddingError(
                f"{self.model} at {self.base_url} returned {size}-dimensional vectors "
                f"after {self._size}-dimensional ones.",
                hint="Check that base_url points at one server and the model name is stable.",
            )
        self._size = size

    def _malformed(self, problem: str) -> EmbeddingError:
        return EmbeddingError(
            f"{self.base_url} sent a malformed embeddings response for {self.model}: {problem}.",
            hint="Check that embedding base_url points at an OpenAI-compatible /v1/embeddings endpoint.",
        )

    def _explain(self, exc: Exception) -> EmbeddingError:
        """An ``EmbeddingError`` saying what to check, for an openai client error."""
        import openai

        status = getattr(exc, "status_code", None)
        if isinstance(exc, openai.APIConnectionError):
            hint = f"Is the embedding server at {self.base_url} running and reachable? Check embedding base_url."
        elif isinstance(exc, (openai.AuthenticationError, openai.PermissionDeniedError)):
            hint = "Check the API key: put it in the environment variable named by embedding api_key_env."
        elif isinstance(exc, openai.NotFoundError):
            hint = f"Check the embedding model name ({self.model}) and that base_url ends in /v1."
        elif isinstance(exc, (openai.BadRequestError, openai.UnprocessableEntityError)):
            hint = f"The server refused the request: check the model name ({self.model}) and embedding dimensions."
        elif isinstance(exc, openai.APIResponseValidationError):
            hint = "Check that embedding base_url points at an OpenAI-compatible /v1/embeddings endpoint."
        elif isinstance(exc, openai.RateLimitError):
            hint = "The provider is rate limiting or out of quota; embedding is retried after the pause."
        else:
            hint = f"Check the embedding server at {self.base_url}."
        detail = shorten(exc)
        if self._api_key:
            detail = detail.replace(self._api_key, "***")
        where = f"HTTP {status} from {self.base_url}" if status else self.base_url
        return EmbeddingError(f"Embedding with openai:{self.model} failed ({where}): {detail}", hint=hint)


async def _gather_or_cancel(calls: list[Awaitable[_T]]) -> list[_T]:
    """Results in order; the first failure cancels the calls still running and is raised."""
    import asyncio

    tasks = [asyncio.ensure_future(call) for call in calls]
    try:
        return await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


def _run(main: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
    """Run a coroutine to completion from synchronous code, even on a thread with a running loop."""
    import asyncio  # here, not above: ~15 ms that a process which never embeds over HTTP should not pay
    import concurrent.futures

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(main())
    # Called from async code by mistake: a blocking call either way, but one that works.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(lambda: asyncio.run(main())).result()


def _is_vector(value: object) -> TypeGuard[list[float]]:
    """A non-empty list of numbers, as an embedding must be."""
    return isinstance(value, list) and bool(value) and all(isinstance(x, (int, float)) for x in value)
