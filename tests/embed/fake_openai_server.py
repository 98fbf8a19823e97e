"""A real HTTP server on 127.0.0.1 speaking OpenAI's ``POST /v1/embeddings``, for tests.

Vectors are deterministic and hash-based (the same text always gets the same vector, different
texts get unrelated ones) and deliberately *not* unit length, so callers' normalization shows.
Reusable from any test::

    from tests.embed.fake_openai_server import fake_openai_server

    with fake_openai_server() as server:
        config = EmbeddingConfig(provider="openai", base_url=server.base_url, model="fake")
        ...
        server.stop()      # connections now refused
        server.start()     # same port again
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import struct
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["DEFAULT_DIMENSIONS", "FakeOpenAIServer", "Request", "fake_openai_server", "fake_vector"]

DEFAULT_DIMENSIONS = 32
Reply = Callable[[dict[str, Any]], "tuple[int, Any]"]


def fake_vector(text: str, dimensions: int = DEFAULT_DIMENSIONS) -> list[float]:
    """The server's vector for ``text``: deterministic, length about 3 (not normalized)."""
    rng = random.Random(hashlib.sha256(text.encode("utf-8")).digest())
    return [rng.gauss(0.0, 3.0 / dimensions**0.5) for _ in range(dimensions)]


@dataclass(frozen=True)
class Request:
    """One request the server received."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]


class FakeOpenAIServer:
    """The server; ``reply`` may be set to a function ``body -> (status, json)`` to misbehave."""

    def __init__(self, dimensions: int = DEFAULT_DIMENSIONS) -> None:
        self.dimensions = dimensions
        self.reply: Reply | None = None
        self.port = 0
        self._requests: list[Request] = []
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def requests(self) -> list[Request]:
        with self._lock:
            return list(self._requests)

    def start(self) -> None:
        """Listen (on the port of the previous start, if there was one)."""
        self._httpd = ThreadingHTTPServer(("127.0.0.1", self.port), _handler(self))
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        # A short poll keeps stop() quick: shutdown() waits for the serving loop's next poll.
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.01}, name="fake-openai", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop listening; connections to the port are refused until ``start`` again."""
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def answer(self, body: dict[str, Any]) -> tuple[int, Any]:
        """The default, well-behaved reply."""
        texts = body.get("input")
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            message = "input must be a string or a list of strings"
            return 400, {"error": {"message": message, "type": "invalid_request_error"}}
        size = body.get("dimensions") or self.dimensions
        data = [
            {"object": "embedding", "index": i, "embedding": _encode(fake_vector(t, size), body.get("encoding_format"))}
            for i, t in enumerate(texts)
        ]
        usage = {"prompt_tokens": len(texts), "total_tokens": len(texts)}
        return 200, {"object": "list", "data": data, "model": body.get("model"), "usage": usage}

    def _record(self, request: Request) -> None:
        with self._lock:
            self._requests.append(request)


def _encode(vector: list[float], encoding_format: str | None) -> list[float] | str:
    if encoding_format == "base64":
        return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")
    return vector


def _handler(server: FakeOpenAIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except json.JSONDecodeError:
                body = {}
            server._record(Request(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
            if self.path.rstrip("/") != "/v1/embeddings":
                self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
                return
            self._send(*(server.reply or server.answer)(body))

        def _send(self, status: int, payload: Any) -> None:
            data = payload if isinstance(payload, bytes) else json.dumps(payload).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
            pass  # keep test output clean

    return Handler


@contextmanager
def fake_openai_server(dimensions: int = DEFAULT_DIMENSIONS) -> Iterator[FakeOpenAIServer]:
    """A started ``FakeOpenAIServer``, stopped on exit."""
    server = FakeOpenAIServer(dimensions)
    server.start()
    try:
        yield server
    finally:
        server.stop()
