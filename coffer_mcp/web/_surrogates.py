"""An MCP request over HTTP holding a lone UTF-16 surrogate gets Coffer's error, not a bare parse error.

The SDK's transport answers one (``"\\udcff"`` escaped in the body) with ``-32700`` "Parse
error: lone leading surrogate…" and a null id, or, for protocol 2026-07-28, reads it and hands
the tools text no Unicode string can hold. ``LoneSurrogateAsJsonRpc`` reads the body first and
answers such a request itself, as stdio does (``mcp_server.surrogate_answer``): ``-32700`` with
the request's id, a message that carries the hint, and ``{code, message, hint}`` as ``data``.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from coffer_mcp.mcp_server import surrogate_answer

__all__ = ["LoneSurrogateAsJsonRpc"]


class LoneSurrogateAsJsonRpc:
    """Wraps the ``/mcp`` endpoint: a POSTed body holding a lone surrogate is answered here (400).

    The body is read whole, as the SDK reads it, but never beyond ``limit`` bytes: a larger one
    goes on to the SDK untouched, which refuses it (``TooLargeAsJsonRpc``).

    Args:
        app: The endpoint.
        limit: The largest body the endpoint reads (``mcp_body_limit``).
    """

    def __init__(self, app: ASGIApp, *, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or self._declared_too_large(scope):
            await self.app(scope, receive, send)
            return
        read, complete = await self._read(receive)
        if complete:
            body = b"".join(message.get("body", b"") for message in read)
            answer = surrogate_answer(body)
            if answer is not None:
                payload = answer.model_dump_json(by_alias=True, exclude_unset=True).encode("utf-8")
                headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
                await send({"type": "http.response.start", "status": 400, "headers": headers})
                await send({"type": "http.response.body", "body": payload})
                return
            read = [{"type": "http.request", "body": body, "more_body": False}]

        async def replay() -> Message:
            return read.pop(0) if read else await receive()

        await self.app(scope, replay, send)

    def _declared_too_large(self, scope: Scope) -> bool:
        length = dict(scope["headers"]).get(b"content-length", b"")
        return length.isdigit() and int(length) > self.limit

    async def _read(self, receive: Receive) -> tuple[list[Message], bool]:
        """The body's messages up to ``limit`` bytes, and whether they are all of it."""
        read: list[Message] = []
        size = 0
        while size <= self.limit:
            message = await receive()
            read.append(message)
            if message["type"] != "http.request":  # the client went away: the endpoint hears it too
                return read, False
            size += len(message.get("body", b""))
            if not message.get("more_body", False):
                return read, size <= self.limit
        return read, False
