"""MCP logging: ``logging/setLevel``, and what happens during a tool call sent to its client as log messages.

Two kinds of event reach the client of a tool call as ``notifications/message``:

- notices the MCP layer writes for the user (``ClientLog.send``): documents indexed for keyword
  search only because the embedding provider failed (see ``_notices``);
- the core's own log records (the ``coffer_mcp.*`` loggers) emitted on the worker thread that runs
  the call, as far as Python logging lets them through (``COFFER_LOG_LEVEL``, ``WARNING`` by
  default): a provider failure, ripgrep failing over to the Python scan, a followed file refused.

Which levels a client gets: on the handshake protocol versions (up to 2025-11-25), those at or
above the level it set with ``logging/setLevel``, ``warning`` until it sets one; from 2026-07-28,
where logging is a per-request opt-in, those at or above the level its request asks for in
``_meta`` (``io.modelcontextprotocol/logLevel``), and none when it asks for none. Messages ride the
call's own response stream, never another client's.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, get_args

import anyio.from_thread
from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import Context
from mcp.types import (
    LOG_LEVEL_META_KEY,
    EmptyResult,
    LoggingLevel,
    LoggingMessageNotification,
    LoggingMessageNotificationParams,
    SetLevelRequestParams,
)
from mcp.types.version import MODERN_PROTOCOL_VERSIONS

__all__ = ["CALL_LOG", "DEFAULT_LEVEL", "NOWHERE", "ClientLog", "forward_core_logs", "set_level"]

log = logging.getLogger(__name__)

LEVELS: tuple[LoggingLevel, ...] = get_args(LoggingLevel)  # least severe first (RFC 5424 order)
DEFAULT_LEVEL: LoggingLevel = "warning"
_LEVEL_KEY = "coffer.log_level"  # in the connection's state
_NOTICES = "coffer"  # the logger name of the MCP layer's own notices


@dataclass(frozen=True, slots=True)
class ClientLog:
    """Where one tool call's log messages go, and from which level on.

    Attributes:
        ctx: The call's request context; None sends nothing.
        threshold: Index in ``LEVELS`` of the least severe level sent; None sends nothing.
    """

    ctx: Context | None = None
    threshold: int | None = None

    @classmethod
    def of(cls, ctx: Context) -> ClientLog:
        """The log of the call ``ctx`` belongs to, at the level its client asked for."""
        try:
            request = ctx.request_context
        except ValueError:  # called outside a request (``MCPServer.call_tool`` directly)
            return NOWHERE
        if request.protocol_version in MODERN_PROTOCOL_VERSIONS:
            wanted = (request.meta or {}).get(LOG_LEVEL_META_KEY)
        else:
            wanted = _connection_state(request).get(_LEVEL_KEY, DEFAULT_LEVEL)
        return cls(ctx, LEVELS.index(wanted)) if wanted in LEVELS else NOWHERE

    def wants(self, level: LoggingLevel) -> bool:
        return self.threshold is not None and LEVELS.index(level) >= self.threshold

    def send(self, level: LoggingLevel, message: str, logger: str = _NOTICES) -> None:
        """Send a log message to the client, from the call's worker thread; never fails the call."""
        if not self.wants(level):
            return
        try:
            anyio.from_thread.run(self._send, level, message, logger)
        except Exception as exc:  # noqa: BLE001 - a lost log message must not fail the work it describes
            log.debug("could not send a log message to the client: %s", exc)

    async def _send(self, level: LoggingLevel, message: str, logger: str) -> None:
        assert self.ctx is not None  # wants() checked the threshold, which only a context has
        params = LoggingMessageNotificationParams(level=level, logger=logger, data=message)
        # Request-scoped: on streamable HTTP it rides this call's response stream.
        await self.ctx.session.send_notification(
            LoggingMessageNotification(params=params), related_request_id=self.ctx.request_id
        )


NOWHERE = ClientLog()

CALL_LOG: ContextVar[ClientLog] = ContextVar("coffer_call_log", default=NOWHERE)
"""The log of the tool call running in this context: set on the call's worker thread by the Runner."""


async def set_level(ctx: ServerRequestContext[Any, Any], params: SetLevelRequestParams) -> EmptyResult:
    """``logging/setLevel``: the least severe level this connection's tool calls send from now on."""
    _connection_state(ctx)[_LEVEL_KEY] = params.level
    return EmptyResult()


_FALLBACK_STATE: dict[str, Any] = {}


def _connection_state(request: ServerRequestContext[Any, Any]) -> dict[str, Any]:
    """The state the SDK keeps per client connection (so one HTTP client's level is not another's)."""
    # The SDK hands handlers a per-request session whose connection (and its ``state``) is not
    # public yet; a process-wide level is the fallback (right for stdio: one client per process).
    connection = getattr(request.session, "_connection", None)
    state = getattr(connection, "state", None)
    return state if isinstance(state, dict) else _FALLBACK_STATE


class _CoreLogForwarder(logging.Handler):
    """Sends the core's log records of a tool call to that call's client (see the module docstring)."""

    def handle(self, record: logging.LogRecord) -> bool:
        # No handler lock: sending waits for the event loop, which may log through this handler
        # itself meanwhile; the lock would deadlock the two.
        call = CALL_LOG.get()
        if call.threshold is not None and record.name != __name__:
            call.send(_mcp_level(record.levelno), record.getMessage(), logger=record.name)
        _last_resort(record)
        return True

    def emit(self, record: logging.LogRecord) -> None:  # handle() does the work
        pass


_FORWARDER = _CoreLogForwarder()


def forward_core_logs() -> None:
    """Install the forwarder on the ``coffer_mcp`` logger (once per process)."""
    package = logging.getLogger("coffer_mcp")
    if _FORWARDER not in package.handlers:
        package.addHandler(_FORWARDER)


def _mcp_level(levelno: int) -> LoggingLevel:
    if levelno >= logging.CRITICAL:
        return "critical"
    if levelno >= logging.ERROR:
        return "error"
    if levelno >= logging.WARNING:
        return "warning"
    return "info" if levelno >= logging.INFO else "debug"


def _last_resort(record: logging.LogRecord) -> None:
    """Print ``record`` as Python would if this handler were not there (no other handler anywhere).

    Python prints a warning to stderr when no handler sees it; installing this one must not
    silence those for an application that configured no logging.
    """
    logger: logging.Logger | None = logging.getLogger(record.name)
    while logger is not None:
        if any(handler is not _FORWARDER for handler in logger.handlers):
            return
        if not logger.propagate:
            break
        logger = logger.parent
    if logging.lastResort is not None and record.levelno >= logging.lastResort.level:
        logging.lastResort.handle(record)
