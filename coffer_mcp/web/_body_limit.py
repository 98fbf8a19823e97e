"""How large an MCP request over HTTP may be, and the error a larger one gets.

The SDK's streamable HTTP transport refuses bodies over its ``max_request_body_size`` (4 MiB by
default) with a plain-text 413, which its own client shows as "Server returned an error
response". Coffer sizes that limit from ``max_document_bytes`` instead, and turns the 413 into
a JSON-RPC error carrying ``too_large`` and a hint: the SDK client (and any client that reads a
JSON-RPC error from a non-2xx answer, as the transport's spec allows) shows that message.

The body is read whole before the SDK sees the request: a client that goes away half-way (or is
cut off by the server's body timeout) gets nothing, where the SDK logged a traceback for each one.
"""

from __future__ import annotations

import json
from collections import deque

from mcp.types import INVALID_REQUEST
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from coffer_mcp.errors import IngestRejectedError

__all__ = ["TooLargeAsJsonRpc", "mcp_body_limit"]

_ENVELOPE = 1024 * 1024  # the JSON-RPC request around the document: filename, tags, ids


def mcp_body_limit(max_document_bytes: int) -> int:
    """The largest MCP request body accepted over HTTP for documents of up to ``max_document_bytes``.

    Twice the document limit, plus 1 MiB for the rest of the request: base64 makes a file 4/3 as
    long, and JSON escaping makes text at most twice as long in the common cases (quotes, newlines,
    non-ASCII written as ``\\uXXXX``). The document limit itself is checked on the decoded content.
    """
    return 2 * max_document_bytes + _ENVELOPE


def too_large_error(limit: int, max_document_bytes: int) -> IngestRejectedError:
    """The error a request body over ``limit`` bytes gets."""
    return IngestRejectedError(
        "too_large",
        f"The request is larger than {limit:,} bytes, the most this server reads in one MCP request over HTTP "
        f"(twice max_document_bytes, {max_document_bytes:,}, plus 1 MiB); nothing was written.",
        hint="Send a smaller document (split it), or ask the server's operator to raise max_document_bytes "
        "(config.yaml or COFFER_MAX_DOCUMENT_BYTES).",
    )


class TooLargeAsJsonRpc:
    """Wraps the SDK's ``/mcp`` endpoint: its 413 (body over the limit) becomes a JSON-RPC error.

    The request's id is unknown (the body was never parsed), so the error's ``id`` is null; the
    SDK client matches it to the request it sent on that POST.
    """

    def __init__(self, app: ASGIApp, *, limit: int, max_document_bytes: int) -> None:
        self.app = app
        self.limit = limit
        error = too_large_error(limit, max_document_bytes)
        payload = {
            "jsonrpc": "2.0",
            "id": None,
            "error": {"code": INVALID_REQUEST, "message": error.message, "data": error.to_dict()},
        }
        self.body = json.dumps(payload).encode("utf-8")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        read = await _body_of(scope, receive, self.limit)
        if read is None:
            return  # the client left before its request was complete: no one to answer
        replaced = False

        async def replay() -> Message:
            return read.popleft() if read else await receive()

        async def translate(message: Message) -> None:
            nonlocal replaced
            if message["type"] == "http.response.start" and message["status"] == 413:
                replaced = True
                headers = [(b"content-type", b"application/json"), (b"content-length", str(len(self.body)).encode())]
                await send({"type": "http.response.start", "status": 413, "headers": headers})
                await send({"type": "http.response.body", "body": self.body})
            elif not replaced:
                await send(message)

        await self.app(scope, replay, translate)


async def _body_of(scope: Scope, receive: Receive, limit: int) -> deque[Message] | None:
    """The request's body messages, read until the end or just past ``limit`` bytes; None if the client left.

    A body declared larger than ``limit`` is not read: the SDK refuses it from its headers.
    """
    read: deque[Message] = deque()
    declared = dict(scope["headers"]).get(b"content-length", b"")
    if declared.isdigit() and int(declared) > limit:
        return read
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        read.append(message)
        size += len(message.get("body", b""))
        if not message.get("more_body", False) or size > limit:
            return read
