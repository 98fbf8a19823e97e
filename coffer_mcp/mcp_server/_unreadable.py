"""An answer for every JSON-RPC request the SDK cannot parse, on stdio and over HTTP.

JSON lets a string hold a lone UTF-16 surrogate (a ``\\udcff`` escape with no partner), which is
no Unicode character; the SDK's parser refuses it. Its stdio transport then hands the server the
parse error instead of the line, and the server drops it: such a request (or any line that is
not JSON) got no answer at all, and its client waited forever. Over HTTP the SDK answers it with
a bare ``-32700`` and a null id.

Here it gets a JSON-RPC parse error (``-32700``) with the request's id (null when the message is
not a request, or not JSON at all, as JSON-RPC says): its message carries the hint, its ``data``
is the usual ``{code, message, hint}``, code ``invalid_request``. ``AnsweringStdin`` does it on
stdio (``CofferServer.run_stdio_async``), ``surrogate_answer`` in front of the HTTP transport
(``web``, which answers the rest itself).
"""

from __future__ import annotations

import json
import logging
import re
from typing import TYPE_CHECKING, Any

import anyio
from mcp.shared.message import SessionMessage
from mcp.types import PARSE_ERROR, ErrorData, JSONRPCError
from pydantic import ValidationError

from coffer_mcp.errors import InvalidArgumentError

if TYPE_CHECKING:  # the SDK's private stream protocols: types only, never imported at run time
    from mcp.shared._stream_protocols import ReadStream, WriteStream

__all__ = ["AnsweringStdin", "surrogate_answer"]

log = logging.getLogger(__name__)

# A \u escape of D800-DFFF: a message without one cannot hold a lone surrogate (a cheap first look).
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE_ESCAPE_BYTES = re.compile(rb"\\u[dD][89a-fA-F]")
# What json.loads leaves of a lone surrogate escape (it joins a valid pair into one character).
_SURROGATE = re.compile("[\ud800-\udfff]")
_SHOWN = 100  # characters of a key shown in a location


def surrogate_answer(raw: str | bytes) -> JSONRPCError | None:
    """The error answering ``raw`` if it holds a lone surrogate; None for any other message (or not JSON)."""
    escape = _SURROGATE_ESCAPE_BYTES.search(raw) if isinstance(raw, bytes) else _SURROGATE_ESCAPE.search(raw)
    if escape is None:
        return None
    message = _decoded(raw)
    found = lone_surrogate(message)
    if found is None:
        return None
    return _answer(_request_id(message), lone_surrogate_error(*found))


def unparsable_answer(raw: str, problem: str) -> JSONRPCError:
    """The error answering ``raw``, a message the SDK's parser refused (``problem`` says why)."""
    return surrogate_answer(raw) or _answer(_request_id(_decoded(raw)), _not_json(problem))


def lone_surrogate(message: Any) -> tuple[str, str] | None:
    """Where ``message`` (decoded JSON) first holds a lone surrogate, and which one (both as ASCII text).

    Returns:
        ``(location, surrogate)``, e.g. ``("params.arguments.query", "\\udcff")``; None when it holds none.
    """
    stack: list[tuple[str, Any]] = [("the message", message)]
    while stack:  # not recursive: json.loads nests deeper than Python's recursion limit allows a walk
        where, value = stack.pop()
        if isinstance(value, str):
            if (match := _SURROGATE.search(value)) is not None:
                return where, _escaped(match.group())
        elif isinstance(value, dict):
            parent = "" if where == "the message" else where
            for key, item in reversed(value.items()):
                stack += [(f"{parent}.{_escaped(key[:_SHOWN])}".lstrip("."), item), (f"a key of {where}", key)]
        elif isinstance(value, list):
            stack += [(f"{where}[{index}]", item) for index, item in reversed(list(enumerate(value)))]
    return None


def lone_surrogate_error(where: str, surrogate: str) -> InvalidArgumentError:
    """The error for a request holding ``surrogate`` (written ``\\udcff``) in ``where``."""
    return InvalidArgumentError(
        f"The request holds a lone UTF-16 surrogate ({surrogate}) in {where}, which is not a Unicode character.",
        code="invalid_request",
        hint="Send text as valid UTF-8, and a character beyond U+FFFF as a whole surrogate pair (\\ud83d\\ude00), "
        "never half of one: a string cut in the middle of a pair, or bytes decoded with "
        "errors='surrogateescape', leave one.",
    )


class AnsweringStdin:
    """The SDK's stdio read stream, answering each line its parser refused instead of dropping it.

    The SDK's stdin reader sends the server, for such a line, the ``ValidationError`` whose
    ``json_invalid`` error holds the line as its input (``tests/mcp_server/test_stdio.py`` pins this). Every
    other item passes through untouched.

    Args:
        inner: The read stream ``mcp.server.stdio.stdio_server`` yields.
        write: Its write stream, where the answers go.
    """

    def __init__(self, inner: ReadStream[SessionMessage | Exception], write: WriteStream[SessionMessage]) -> None:
        self.inner = inner
        self.write = write

    @property
    def last_context(self) -> Any:
        """The sender's context of the last item (the SDK's dispatcher runs the request's handler in it)."""
        return getattr(self.inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        while True:
            item = await self.inner.receive()
            answer = _answer_for(item)
            if answer is None:
                return item
            log.warning("answered a message that does not parse: %s", answer.error.message)
            await self.write.send(SessionMessage(answer))

    async def aclose(self) -> None:
        await self.inner.aclose()

    def __aiter__(self) -> AnsweringStdin:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> AnsweringStdin:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def _answer_for(item: SessionMessage | Exception) -> JSONRPCError | None:
    """The answer to ``item`` if it is the SDK's parse error for a line; None for anything else."""
    if not isinstance(item, ValidationError):
        return None
    for error in item.errors():
        if error["type"] == "json_invalid" and isinstance(error["input"], str):
            return unparsable_answer(error["input"], str(error.get("ctx", {}).get("error", error["msg"])))
    return None


def _decoded(raw: str | bytes) -> Any:
    """``raw`` as Python's JSON parser reads it (it keeps lone surrogates); None when it is not JSON."""
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


def _answer(request_id: int | str | None, error: InvalidArgumentError) -> JSONRPCError:
    message = f"{error.message} {error.hint}"
    return JSONRPCError(
        jsonrpc="2.0", id=request_id, error=ErrorData(code=PARSE_ERROR, message=message, data=error.to_dict())
    )


def _request_id(message: Any) -> int | str | None:
    """The id of ``message`` if it is a request with an id it can be answered under, else None."""
    if not isinstance(message, dict) or "method" not in message:
        return None  # a response or a notification: answered, if at all, with a null id
    request_id = message.get("id")
    if isinstance(request_id, str):
        return request_id if _SURROGATE.search(request_id) is None else None
    return request_id if type(request_id) is int else None


def _escaped(text: str) -> str:
    """``text`` with each surrogate written as its escape (``\\udcff``), so that it can be encoded."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _not_json(problem: str) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"The message is not valid JSON ({problem}).",
        code="invalid_request",
        hint="Send each JSON-RPC message as one line of UTF-8 JSON (no line break inside it).",
    )
