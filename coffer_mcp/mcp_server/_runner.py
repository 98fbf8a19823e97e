"""Running a tool: the core on a worker thread, progress and cancellation, logging, error mapping.

A result goes out lean (``_wire.tool_result``); an error as ``{"code", "message", "hint"}``.

Reads and writes run on separate thread lanes (``READ_THREADS``, ``WRITE_THREADS``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import anyio
import anyio.from_thread
import anyio.to_thread
from anyio.lowlevel import RunVar
from mcp.server.mcpserver import Context
from mcp.types import CallToolResult, LoggingLevel, TextContent
from pydantic import BaseModel

from coffer_mcp.errors import CofferError
from coffer_mcp.mcp_server._client_log import CALL_LOG, NOWHERE, ClientLog
from coffer_mcp.mcp_server._wire import compact_json, tool_result
from coffer_mcp.services.authorization import Scope

if TYPE_CHECKING:
    from coffer_mcp.services import Coffer

__all__ = [
    "ACTOR_KEY",
    "GRANTED_SCOPES_KEY",
    "INTERNAL_ERROR",
    "TASK_PROGRESS",
    "Job",
    "Runner",
    "caller",
    "granted_scopes",
    "internal_error",
    "tool_error",
]

log = logging.getLogger(__name__)

T = TypeVar("T")
INTERNAL_ERROR = "internal_error"
# Where the HTTP surface (``web``) puts what an OAuth token grants, in the ASGI scope of the request
# that carried an MCP message: its scopes (all of them counted, a frozenset) and the audit log's actor.
GRANTED_SCOPES_KEY = "coffer.granted_scopes"
ACTOR_KEY = "coffer.actor"
TASK_PROGRESS: ContextVar[Callable[[int, int, str], None] | None] = ContextVar("coffer_task_progress", default=None)
"""Where a call running as an MCP task reports its progress (set by ``_tasks`` in the task's context): the
call's own request has been answered, so its progress token no longer reaches the client through it."""


@dataclass(frozen=True, slots=True)
class Job:
    """What a tool body gets: the core, who is acting, whether it may write, and progress for long work.

    Attributes:
        service: The core the body calls.
        actor: Recorded in the audit log: ``agent:<client name>``, or ``oauth:<subject> via <client>``
            for a call made with an OAuth token.
        ctx: The MCP request context (progress goes through it).
        writes: False on a read-only server, or for a token without ``coffer:write``: a tool offered
            there (``check_sources``) must not change anything.
        log: Where the call's log messages for the user go (``notify``).
        task: For a call running as an MCP task, where its progress goes (``TASK_PROGRESS``).
    """

    service: Coffer
    actor: str
    ctx: Context
    writes: bool = True
    log: ClientLog = NOWHERE
    task: Callable[[int, int, str], None] | None = None

    def progress(self, done: int, total: int, message: str = "") -> None:
        """Report progress (if the client asked for it) and stop here if the call was cancelled.

        Called from the worker thread between documents, so a cancelled call (or task) stops
        cleanly with every finished document committed.
        """
        anyio.from_thread.check_cancelled()
        if self.task is not None:
            self.task(done, total, message)
            return
        anyio.from_thread.run(self.ctx.report_progress, done, total, message or None)

    def notify(self, level: LoggingLevel, message: str) -> None:
        """Tell the user something about this call through the client's log (if it wants that level)."""
        self.log.send(level, message)


class Runner:
    """Runs a core call on a worker thread, logs it, and maps every exception to a tool error.

    A ``CofferError`` keeps its code; anything else is a bug and becomes ``internal_error``.

    Args:
        service: The core; None for a server whose configuration does not load (it runs no body).
        writes: False for a read-only server (passed on to each body as ``Job.writes``).
    """

    def __init__(self, service: Coffer | None, *, writes: bool = True) -> None:
        self.service = service
        self.writes = writes

    async def __call__(self, ctx: Context, tool: str, call: Callable[[Job], T]) -> T | CallToolResult:
        if self.service is None:  # the unconfigured server refuses every call before it gets here
            raise RuntimeError(f"{tool} ran without a configured service")
        actor, client = caller(ctx)
        granted = granted_scopes(ctx)
        writes = self.writes and (granted is None or Scope.WRITE.value in granted)  # a read token only reads
        job = Job(
            service=self.service, actor=actor, ctx=ctx, writes=writes, log=ClientLog.of(ctx), task=TASK_PROGRESS.get()
        )
        started = time.perf_counter()

        def work() -> T | CallToolResult:
            CALL_LOG.set(job.log)  # this worker's copy of the context: the core's log records go to this client
            outcome, code = "cancelled", None  # only a cancellation leaves the try without setting these
            try:
                result = call(job)
            except CofferError as exc:
                outcome, code = "error", exc.code
                return tool_error(exc)
            except Exception as exc:  # noqa: BLE001 - the MCP edge: a bug still answers in our shape
                outcome, code = "crash", INTERNAL_ERROR
                return tool_error(internal_error(tool, exc))
            else:
                outcome = "ok"
                return tool_result(result) if isinstance(result, BaseModel) else result
            finally:
                self.record(tool, client, started, outcome, code)

        return await anyio.to_thread.run_sync(work, limiter=_lane(tool))

    def record(self, tool: str, client: str, started: float, outcome: str, code: str | None) -> None:
        """Add a call to ``mcp_invocations``; never fails (history must not fail the call it describes)."""
        if self.service is None:
            return
        try:
            self.service.record_invocation(tool, client, (time.perf_counter() - started) * 1000, outcome, code)
        except CofferError as exc:  # e.g. a database server that is down: the call itself said so
            log.warning("could not record the invocation of %s: %s", tool, exc.message)
        except Exception:
            log.exception("could not record the invocation of %s", tool)


# Threads per lane, per event loop. Reads get their own lane so a search never queues behind a
# write waiting for a knowledge base's lock, nor a write behind 50 searches; and few threads:
# a search is mostly Python, so threads beyond a few per core only fight the event loop for the
# GIL (56 searchers on 2 cores: see docs/benchmarks.md, "HTTP under write load").
READ_THREADS = 8
WRITE_THREADS = 8
_READ_LANE: RunVar[anyio.CapacityLimiter] = RunVar("coffer_read_lane")
_WRITE_LANE: RunVar[anyio.CapacityLimiter] = RunVar("coffer_write_lane")


def _lane(tool: str) -> anyio.CapacityLimiter:
    """The thread limiter of this event loop for ``tool``: the read lane or the write lane."""
    from coffer_mcp.mcp_server import READ_TOOLS  # the tool modules import this one

    var, size = (_READ_LANE, READ_THREADS) if tool in READ_TOOLS else (_WRITE_LANE, WRITE_THREADS)
    limiter = var.get(None)
    if limiter is None:
        limiter = anyio.CapacityLimiter(size)
        var.set(limiter)
    return limiter


def tool_error(exc: CofferError) -> CallToolResult:
    """A tool error whose text is ``{"code", "message", "hint"}`` as JSON."""
    return CallToolResult(content=[TextContent(type="text", text=compact_json(exc.to_dict()))], is_error=True)


def internal_error(tool: str, exc: BaseException) -> CofferError:
    """A bug reached the MCP edge: log its traceback on stderr, tell the caller only its type."""
    log.error("%s failed unexpectedly", tool, exc_info=exc)
    return CofferError(
        f"{tool} failed unexpectedly ({type(exc).__name__}).",
        code=INTERNAL_ERROR,
        hint="Coffer did not expect this; it is not a fault in the arguments. The server's log (stderr) has "
        "the traceback: please report it.",
    )


def caller(ctx: Context | None) -> tuple[str, str]:
    """Who makes the call: the audit log's actor, and the client the invocation log names.

    An OAuth token names its owner and client (``oauth:owner via Claude``, for both); otherwise the
    connected client's own name (``agent:Claude`` and ``Claude``).
    """
    request = _request(ctx)
    actor = getattr(request, "scope", {}).get(ACTOR_KEY) if request is not None else None
    if isinstance(actor, str):
        return actor, actor
    client = client_name(ctx) if ctx is not None else "unknown"
    return f"agent:{client}", client


def granted_scopes(ctx: Context | None) -> frozenset[str] | None:
    """The scopes of the OAuth token the call came with; None when it came with none (every scope)."""
    request = _request(ctx)
    granted = getattr(request, "scope", {}).get(GRANTED_SCOPES_KEY) if request is not None else None
    return granted if isinstance(granted, frozenset) else None


def _request(ctx: Context | None) -> object | None:
    """The HTTP request that carried the message (None over stdio and in memory)."""
    try:
        return ctx.request_context.request if ctx is not None else None
    except (AttributeError, ValueError, RuntimeError):
        return None


def client_name(ctx: Context) -> str:
    """The connected client's name from its ``clientInfo`` ("unknown" when it sent none)."""
    try:
        params = ctx.session.client_params
    except (AttributeError, ValueError, RuntimeError):
        return "unknown"
    info = getattr(params, "client_info", None)
    return (getattr(info, "name", None) or "unknown")[:100]
