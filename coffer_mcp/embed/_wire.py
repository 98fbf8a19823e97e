"""The shared model service's wire format: length-prefixed frames over a Unix socket.

One request per connection. The client sends one frame of JSON::

    {"op": "embed_documents", "texts": ["...", ...]}    at most the service's batch size
    {"op": "embed_query", "text": "..."}
    {"op": "dimensions"}
    {"op": "status"}                                     pid, identity, requests served

The service answers with one JSON frame, ``{"ok": true, "count": n, "dimensions": d, ...}`` or
``{"ok": false, "message": ..., "hint": ..., "code": ...}`` (an ``EmbeddingError`` to re-raise),
and, when ``count`` > 0, one frame of ``n * d`` native float64 values: the very floats the
in-process provider would have returned (both ends run on one machine, so byte order agrees).
A frame is a 4-byte big-endian length and that many bytes; every length is checked against a
bound before anything is read, so a broken or hostile peer cannot make either side allocate much.
"""

from __future__ import annotations

import json
import socket
import struct
from array import array
from typing import Any

__all__ = [
    "MAX_HEADER_BYTES",
    "MAX_REQUEST_BYTES",
    "FrameError",
    "decode_vectors",
    "encode_json",
    "encode_vectors",
    "recv_frame",
    "recv_json",
    "send_frame",
    "send_json",
]

MAX_REQUEST_BYTES = 64 * 1024 * 1024
MAX_HEADER_BYTES = 64 * 1024
_LENGTH = struct.Struct(">I")


class FrameError(ConnectionError):
    """The peer closed the connection early or sent a frame that breaks the format."""


def send_frame(sock: socket.socket, payload: bytes) -> None:
    sock.sendall(_LENGTH.pack(len(payload)) + payload)


def recv_frame(sock: socket.socket, limit: int) -> bytes:
    """One frame's payload; ``FrameError`` when it is longer than ``limit`` or cut short."""
    (length,) = _LENGTH.unpack(_recv_exactly(sock, _LENGTH.size))
    if length > limit:
        raise FrameError(f"a frame of {length} bytes is over the limit of {limit}")
    return _recv_exactly(sock, length)


def send_json(sock: socket.socket, message: dict[str, Any]) -> None:
    send_frame(sock, encode_json(message))


def encode_json(message: dict[str, Any]) -> bytes:
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def recv_json(sock: socket.socket, limit: int) -> dict[str, Any]:
    try:
        message = json.loads(recv_frame(sock, limit).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise FrameError(f"a frame is not JSON: {exc}") from exc
    if not isinstance(message, dict):
        raise FrameError("a frame is not a JSON object")
    return message


def encode_vectors(vectors: list[list[float]]) -> bytes:
    return array("d", (x for vector in vectors for x in vector)).tobytes()


def decode_vectors(payload: bytes, count: int, dimensions: int) -> list[list[float]]:
    if len(payload) != count * dimensions * 8:
        raise FrameError(f"{len(payload)} bytes of vectors, expected {count} x {dimensions} float64")
    values = array("d")
    values.frombytes(payload)
    flat = values.tolist()
    return [flat[i * dimensions : (i + 1) * dimensions] for i in range(count)]


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(min(size - len(chunks), 1 << 20))
        if not chunk:
            raise FrameError("the connection closed in the middle of a frame" if chunks else "the connection closed")
        chunks += chunk
    return bytes(chunks)
