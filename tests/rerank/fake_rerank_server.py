"""A real HTTP server on 127.0.0.1 speaking the Jina/Cohere ``POST /v1/rerank`` API, for tests.

Its default relevance is deterministic and unlike BM25's: the share of the query's words that
the document contains, plus a bonus for every word of ``favourite`` the document contains, so a
test can make it prefer a passage that keyword search ranks low. Reusable from any test::

    from tests.rerank.fake_rerank_server import fake_rerank_server

    with fake_rerank_server() as server:
        settings = load_settings(home=home, rerank_provider="http", rerank_url=server.url)
        server.hold()      # requests now wait until release() (a slow server)
        server.reply = lambda body: (500, {"error": "boom"})
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["FakeRerankServer", "Request", "fake_rerank_server", "relevance"]

Reply = Callable[[dict[str, Any]], "tuple[int, Any]"]
_WORD = re.compile(r"\w+")
HOLD_LIMIT_SECONDS = 60.0  # a held request answers by itself after this, so a failed test never hangs


def relevance(query: str, document: str, favourite: str = "") -> float:
    """The server's score: query words found in the document (share), +1 per ``favourite`` word found."""
    words = set(_WORD.findall(document.lower()))
    asked = set(_WORD.findall(query.lower()))
    share = len(asked & words) / len(asked) if asked else 0.0
    return round(share + sum(1.0 for w in _WORD.findall(favourite.lower()) if w in words), 6)


@dataclass(frozen=True)
class Request:
    """One request the server received."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]


class FakeRerankServer:
    """The server; ``reply`` may be set to a function ``body -> (status, json)`` to misbehave."""

    def __init__(self) -> None:
        self.reply: Reply | None = None
        self.favourite = ""
        self.port = 0
        self._requests: list[Request] = []
        self._lock = threading.Lock()
        self._released = threading.Event()
        self._released.set()
        self.arrived = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1/rerank"

    @property
    def requests(self) -> list[Request]:
        with self._lock:
            return list(self._requests)

    def hold(self) -> None:
        """Make requests wait (a slow server) until ``release``."""
        self._released.clear()

    def release(self) -> None:
        self._released.set()

    def start(self) -> None:
        self._httpd = ThreadingHTTPServer(("127.0.0.1", self.port), _handler(self))
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.01}, name="fake-rerank", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self.release()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def answer(self, body: dict[str, Any]) -> tuple[int, Any]:
        """The default, well-behaved reply: results best first, at most ``top_n``."""
        query, documents = body.get("query"), body.get("documents")
        if not isinstance(query, str) or not isinstance(documents, list):
            return 400, {"detail": "query (a string) and documents (a list) are required"}
        scored = [
            {"index": i, "relevance_score": relevance(query, str(doc), self.favourite)}
            for i, doc in enumerate(documents)
        ]
        scored.sort(key=lambda item: -item["relevance_score"])
        return 200, {"model": body.get("model"), "results": scored[: body.get("top_n") or len(scored)]}

    def _record(self, request: Request) -> None:
        with self._lock:
            self._requests.append(request)
        self.arrived.set()


def _handler(server: FakeRerankServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # The headers and the body go out in two writes: without TCP_NODELAY the body waits for
        # the client's delayed ACK of the headers, 40 ms on Linux, on every answer.
        disable_nagle_algorithm = True

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except json.JSONDecodeError:
                body = {}
            server._record(Request(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
            server._released.wait(HOLD_LIMIT_SECONDS)
            if self.path != "/v1/rerank":
                self._send(404, {"detail": f"no route {self.path}"})
                return
            self._send(*(server.reply or server.answer)(body))

        def _send(self, status: int, payload: Any) -> None:
            data = payload if isinstance(payload, bytes) else json.dumps(payload).encode("utf-8")
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up on a held request

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
            pass

    return Handler


@contextmanager
def fake_rerank_server() -> Iterator[FakeRerankServer]:
    """A started ``FakeRerankServer``, stopped on exit."""
    server = FakeRerankServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()
