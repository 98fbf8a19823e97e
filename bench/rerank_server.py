"""A local ``/v1/rerank`` server for measuring Coffer's reranking path where no cross-encoder is at hand.

Run from the repository root, then point Coffer at the URL it prints::

    python -m bench.rerank_server --scorer equal [--delay-ms 300]
    python -m bench.rerank_server --scorer bi-encoder \\
        --model sentence-transformers/all-MiniLM-L6-v2 --model-path ../shared/models/all-MiniLM-L6-v2-int8

    COFFER_RERANK_PROVIDER=http COFFER_RERANK_URL=http://127.0.0.1:PORT/v1/rerank \\
    python -m bench.quality --data ../shared/eval/scifact --split train --rerank

Scorers: ``equal`` gives every passage the same score, so the order stays the search's own and
only the cost of the round trip shows (with ``--delay-ms``, the cost of a server slower than the
budget: the fallback path). ``bi-encoder`` scores by the cosine of a fastembed sentence-embedding
model's vectors — a stand-in that exercises a real model through the whole path, not a
cross-encoder: its quality says nothing about what a real reranker gains. It speaks the API of
``coffer_mcp/rerank/_http.py`` (Jina/Cohere: ``{query, documents, top_n}`` -> ``{results: [{index,
relevance_score}]}``), listens on 127.0.0.1 only, and serves until interrupted.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

Scorer = Callable[[str, list[str]], list[float]]


def equal_scorer(query: str, documents: list[str]) -> list[float]:
    return [0.0] * len(documents)


def bi_encoder_scorer(model: str, model_path: Path | None) -> Scorer:
    """Cosine similarity of a fastembed sentence-embedding model's (unit-length) vectors."""
    from fastembed import TextEmbedding

    options = {"specific_model_path": str(model_path)} if model_path else {}
    encoder = TextEmbedding(model, **options)
    lock = threading.Lock()  # one model call at a time, as Coffer's own embedder does

    def score(query: str, documents: list[str]) -> list[float]:
        with lock:
            (q,) = list(encoder.query_embed(query))
            vectors = list(encoder.passage_embed(documents))
        return [float(q @ v / ((q @ q) ** 0.5 * (v @ v) ** 0.5)) for v in vectors]

    return score


def handler(scorer: Scorer, delay_ms: float) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # The headers and the body go out in two writes: without TCP_NODELAY the body waits for
        # the client's delayed ACK of the headers, 40 ms on Linux, on every answer.
        disable_nagle_algorithm = True

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            if delay_ms:
                time.sleep(delay_ms / 1000)
            documents = [str(d) for d in body.get("documents") or []]
            scores = scorer(str(body.get("query", "")), documents)
            results = sorted(
                ({"index": i, "relevance_score": s} for i, s in enumerate(scores)),
                key=lambda r: -r["relevance_score"],
            )
            self._send(200, {"results": results[: body.get("top_n") or len(results)]})

        def _send(self, status: int, payload: Any) -> None:
            data = json.dumps(payload).encode("utf-8")
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # Coffer stopped waiting (its budget ran out)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
            pass

    return Handler


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.rerank_server", description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0, help="default: any free port (printed)")
    parser.add_argument("--scorer", choices=["equal", "bi-encoder"], default="equal")
    parser.add_argument("--delay-ms", type=float, default=0.0, help="wait this long before each answer")
    parser.add_argument("--model", default="sentence-transformers/all-MiniLM-L6-v2", help="bi-encoder: the model")
    parser.add_argument("--model-path", type=Path, default=None, help="bi-encoder: a local model folder")
    args = parser.parse_args(argv)
    scorer = bi_encoder_scorer(args.model, args.model_path) if args.scorer == "bi-encoder" else equal_scorer
    server = ThreadingHTTPServer(("127.0.0.1", args.port), handler(scorer, args.delay_ms))
    server.daemon_threads = True
    print(f"http://127.0.0.1:{server.server_address[1]}/v1/rerank", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
