"""The process that views saved graph files for one Coffer process: ``python _viewer_process.py``.

Started by ``viewer.Viewer`` (which imports only ``send`` and ``receive`` from here). It maps
each graph file (usearch's ``Index.view``) and answers searches from the mapping. A file cut
short under a mapping makes the next read of a page past its new end raise SIGBUS, which ends
this process and nothing else: the process it serves sees its pipe close and scans instead.

Protocol (the parent is trusted, and reads only JSON and flat numbers from here): frames of a
JSON header and a binary payload, over stdin and a private duplicate of stdout (fd 1 points at
stderr, so nothing a library prints reaches the channel). Once its imports are done the process
says ``{"ready": true}``; then each request gets one frame back:

- ``{"op": "open", "path": p}`` -> ``{"graph": id, "size": n, "dimensions": d, "exact": bool}``
- ``{"op": "nearest", "graph": id, "count": k, "expansion": ef, "exhaustive": bool}`` and the
  query (float32) -> ``{"found": n}`` and n keys (uint64); from a graph that holds float32
  vectors, then n flags (uint8: the key has a vector) and n vectors (float32)
- ``{"op": "contains", "graph": id}`` and keys (uint64) -> one flag (uint8) per key

Any request may carry ``"close": [id, ...]``: graphs to unmap first. A failure answers
``{"error": text}``. The process exits when its stdin closes (the process it serves is gone).
"""

from __future__ import annotations

import sys

if __name__ == "__main__":
    # Run as a script, this folder is sys.path[0]: its keyword.py would shadow the standard library's.
    del sys.path[0]

import json
import os
import signal
import struct
from typing import IO, Any

__all__ = ["FRAME", "receive", "send"]

FRAME = struct.Struct("<II")  # header bytes, payload bytes


def send(stream: IO[bytes], header: dict[str, Any], payload: bytes = b"") -> None:
    data = json.dumps(header).encode("utf-8")
    stream.write(FRAME.pack(len(data), len(payload)) + data)
    stream.write(payload)
    stream.flush()


def receive(stream: IO[bytes]) -> tuple[dict[str, Any], bytes]:
    """One frame.

    Raises:
        EOFError: the stream ended.
        ValueError, TypeError: it does not hold a frame.
    """
    size, length = FRAME.unpack(_read(stream, FRAME.size))
    header = json.loads(_read(stream, size))
    if not isinstance(header, dict):
        raise TypeError("not a frame")
    return header, _read(stream, length)


def _read(stream: IO[bytes], count: int) -> bytes:
    data = stream.read(count)
    if len(data) < count:
        raise EOFError
    return data


class _Graphs:
    """The graphs this process has open, by id."""

    def __init__(self) -> None:
        import numpy as np
        from usearch.index import Index

        self.np, self.index_class = np, Index
        self.open: dict[int, Any] = {}
        self.next_id = 0

    def answer(self, header: dict[str, Any], payload: bytes) -> tuple[dict[str, Any], bytes]:
        for graph in header.get("close", ()):
            self.open.pop(graph, None)  # usearch unmaps the file when its Index is freed
        op = header.get("op")
        if op == "open":
            return self._open(header["path"]), b""
        if op == "nearest":
            return self._nearest(self.open[header["graph"]], header, payload)
        if op == "contains":
            keys = self.np.frombuffer(payload, dtype=self.np.uint64)
            return {}, self.np.asarray(self.open[header["graph"]].contains(keys), dtype=self.np.uint8).tobytes()
        raise ValueError(f"unknown request {op!r}")

    def _open(self, path: str) -> dict[str, Any]:
        index = self.index_class.restore(path, view=True)
        if index is None:
            raise ValueError("not a graph file")
        self.next_id += 1
        self.open[self.next_id] = index
        exact = getattr(index.dtype, "name", "") == "F32"
        return {"graph": self.next_id, "size": len(index), "dimensions": int(index.ndim), "exact": exact}

    def _nearest(self, index: Any, header: dict[str, Any], payload: bytes) -> tuple[dict[str, Any], bytes]:
        np = self.np
        if not len(index):
            return {"found": 0}, b""
        index.expansion_search = header["expansion"]
        query = np.frombuffer(payload, dtype=np.float32)
        found = index.search(query, header["count"], threads=1, exact=header["exhaustive"])
        keys = np.asarray(found.keys, dtype=np.uint64)
        if getattr(index.dtype, "name", "") != "F32":
            return {"found": len(keys)}, keys.tobytes()
        if not len(keys):
            return {"found": 0}, b""
        missing = np.zeros(int(index.ndim), dtype=np.float32)  # a key without a vector: its flag says so
        stored = index.get(keys, dtype=np.float32)
        flags = np.fromiter((vector is not None for vector in stored), dtype=np.uint8, count=len(keys))
        rows = np.vstack([missing if vector is None else vector for vector in stored])
        return {"found": len(keys)}, keys.tobytes() + flags.tobytes() + rows.tobytes()


def main() -> None:
    channel = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the server; it ends this process by closing stdin
    requests = sys.stdin.buffer
    graphs = _Graphs()
    send(channel, {"ready": True})
    while True:
        try:
            header, payload = receive(requests)
        except EOFError:
            return
        try:
            reply = graphs.answer(header, payload)
        except (RuntimeError, ValueError, OSError, KeyError, TypeError) as exc:
            reply = {"error": f"{type(exc).__name__}: {exc}"}, b""
        send(channel, *reply)


if __name__ == "__main__":
    main()
