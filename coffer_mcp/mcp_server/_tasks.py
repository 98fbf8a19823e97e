"""Long tools as MCP tasks: a client starts one, polls it, cancels it, and fetches its result.

The long tools (``TASK_TOOLS``: folder and URL ingests, reindex, settings that re-chunk, source
checks, exports) may run as tasks, in either protocol era:

- 2025-11-25 (experimental tasks, in the core protocol): the tool lists ``execution.taskSupport``
  ``optional``; a ``tools/call`` carrying ``params.task`` is answered at once with
  ``{"task": {...}}``; ``tasks/get`` polls it, ``tasks/result`` waits for the tool's result and
  returns it, ``tasks/list`` lists the caller's tasks, ``tasks/cancel`` cancels one. The SDK
  dispatches none of these, so this module serves them (a middleware answers the task-augmented
  call: the SDK would check its answer against a tool result's shape).
- 2026-07-28 (the ``io.modelcontextprotocol/tasks`` extension): the server decides; a long tool
  called by a client whose request declares the extension answers ``{"resultType": "task", ...}``;
  ``tasks/get`` returns the task, with the tool's ``result`` once completed; ``tasks/cancel`` and
  ``tasks/update`` acknowledge (no Coffer task asks for input).

A task runs the very call a client could have made without one, in the server's task group
(``Background``, from its lifespan): the tool's body on a worker thread, its progress in the task's
``statusMessage`` (and, up to 2025-11-25, in ``notifications/progress`` on the connection when the
call carried a progress token). Cancelling it stops the body between documents, as cancelling a
call does: every document finished is committed, nothing is half-written; the task says
``cancelled`` at once and stays so. Tasks live in memory for their ``ttl`` (an hour unless the
client asks for between a minute and a day); a server restart forgets them. The caller that may
see a task: the OAuth token's owner that started it, else the connection (2025-11-25), else
whoever holds its id (128 random bits).
"""

from __future__ import annotations

import datetime as dt
import logging
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import anyio.from_thread
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.server.session import ServerSession
from mcp.shared.exceptions import MCPError
from mcp.types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    CallToolRequestParams,
    CancelTaskRequestParams,
    GetTaskPayloadRequestParams,
    GetTaskRequestParams,
    PaginatedRequestParams,
    RequestParams,
    TaskStatus,
)
from mcp.types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel

from coffer_mcp.mcp_server._runner import ACTOR_KEY, TASK_PROGRESS

__all__ = ["RELATED_TASK", "TASKS_EXTENSION", "Background", "TaskBook", "TasksExtension", "background"]

log = logging.getLogger(__name__)

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
RELATED_TASK = "io.modelcontextprotocol/related-task"
POLL_MS = 1000
DEFAULT_TTL_MS = 3_600_000
TTL_RANGE_MS = (60_000, 86_400_000)
PAGE = 50
_TERMINAL = ("completed", "failed", "cancelled")
_Sender = Callable[[int, int, str], Coroutine[Any, Any, None]]


@dataclass(frozen=True, slots=True)
class Background:
    """What a Coffer server's lifespan yields: the task group its tasks run in."""

    group: anyio.abc.TaskGroup


def background(*entered: Callable[[], Any]) -> Callable[[Any], Any]:
    """The server's lifespan: a task group for its tasks, inside ``entered`` (async context managers).

    Tasks still running when the server stops are cancelled (between documents, like a cancelled call).
    """

    @asynccontextmanager
    async def lifespan(_server: Any) -> AsyncIterator[Background]:
        async with anyio.create_task_group() as group:
            async with _all(entered):
                yield Background(group)
            group.cancel_scope.cancel()

    return lifespan


@asynccontextmanager
async def _all(managers: Sequence[Callable[[], Any]]) -> AsyncIterator[None]:
    if not managers:
        yield
        return
    async with managers[0](), _all(managers[1:]):
        yield


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(eq=False)
class TaskRecord:
    """One task: its state on the wire, and what runs it."""

    id: str
    owner: object
    ttl_ms: int
    created_at: str = field(default_factory=_now)
    born: float = field(default_factory=time.monotonic)
    status: TaskStatus = "working"
    message: str | None = "Started."
    updated_at: str = field(default_factory=_now)
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    done: anyio.Event = field(default_factory=anyio.Event)
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)

    def wire(self, *, modern: bool) -> dict[str, Any]:
        """The task as ``tasks/get`` answers (2026-07-28 inlines its result or error)."""
        task: dict[str, Any] = {
            "taskId": self.id,
            "status": self.status,
            "createdAt": self.created_at,
            "lastUpdatedAt": self.updated_at,
            "ttlMs" if modern else "ttl": self.ttl_ms,
            "pollIntervalMs" if modern else "pollInterval": POLL_MS,
        }
        if self.message:
            task["statusMessage"] = self.message
        if modern and self.status == "completed" and self.result is not None:
            task["result"] = self.result
        if modern and self.status == "failed" and self.error is not None:
            task["error"] = self.error
        return task

    def say(self, message: str) -> None:
        """A new status message (from the worker thread: one assignment each)."""
        self.message, self.updated_at = message, _now()

    def finish(self, status: TaskStatus, message: str, **outcome: dict[str, Any]) -> None:
        """Reach a terminal status, unless cancelled already (a cancelled task stays cancelled)."""
        if self.status in _TERMINAL:
            return
        self.status, self.result, self.error = status, outcome.get("result"), outcome.get("error")
        self.say(message)

    def expired(self, now: float) -> bool:
        return now - self.born > self.ttl_ms / 1000


class UpdateTaskParams(RequestParams):
    """``tasks/update`` (2026-07-28): responses to a task's input requests (Coffer's tasks ask for none)."""

    task_id: str
    input_responses: dict[str, Any] | None = None


class TaskBook:
    """The tasks of one server, and the handlers of the ``tasks/*`` methods.

    Args:
        tools: The tools that may run as tasks on this server.
    """

    def __init__(self, tools: Sequence[str]) -> None:
        self.tools = frozenset(tools)
        self._tasks: dict[str, TaskRecord] = {}

    # -- starting one ------------------------------------------------------------------------------

    async def legacy_call(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """Middleware: a task-augmented ``tools/call`` (2025-11-25) starts a task and answers ``{"task": ...}``."""
        params = ctx.params or {}
        wanted = params.get("task")
        if ctx.method != "tools/call" or not isinstance(wanted, dict) or _modern(ctx):
            return await call_next(ctx)
        name = params.get("name")
        group = _group(ctx)
        if name not in self.tools or group is None:
            raise MCPError(METHOD_NOT_FOUND, f"{str(name)[:100]!r} does not run as a task on this server.")
        ttl = wanted.get("ttl")
        record = self._start(group, ctx, lambda: call_next(ctx), ttl if isinstance(ttl, int) else None)
        return {"task": record.wire(modern=False)}

    async def modern_call(
        self, params: CallToolRequestParams, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        """Interceptor (2026-07-28): a long tool called by a client that declares tasks runs as one."""
        group = _group(ctx)
        if params.name not in self.tools or group is None or not _declares_tasks(ctx):
            return await call_next(ctx)

        async def run() -> dict[str, Any]:
            outcome = await call_next(ctx)
            if isinstance(outcome, BaseModel):
                return outcome.model_dump(by_alias=True, mode="json", exclude_none=True)
            return dict(outcome or {})

        record = self._start(group, ctx, run, None)
        return {"resultType": "task", **record.wire(modern=True)}

    def _start(
        self,
        group: anyio.abc.TaskGroup,
        ctx: ServerRequestContext[Any, Any],
        run: Callable[[], Awaitable[Any]],
        ttl_ms: int | None,
    ) -> TaskRecord:
        self._purge()
        low, high = TTL_RANGE_MS
        ttl = DEFAULT_TTL_MS if ttl_ms is None else min(max(ttl_ms, low), high)
        record = TaskRecord(id=secrets.token_urlsafe(16), owner=_owner(ctx), ttl_ms=ttl)
        self._tasks[record.id] = record
        group.start_soon(self._run_task, record, run, _progress_sender(ctx))
        return record

    async def _run_task(
        self,
        record: TaskRecord,
        run: Callable[[], Awaitable[Any]],
        send: _Sender | None,
    ) -> None:
        def progress(done: int, total: int, message: str) -> None:
            record.say(f"{done} of {total}{': ' + message if message else ''}")
            if send is not None:
                try:
                    anyio.from_thread.run(send, done, total, message)
                except Exception as exc:  # noqa: BLE001 - a lost progress note must not fail the work
                    log.debug("could not send a task's progress: %s", exc)

        TASK_PROGRESS.set(progress)  # this task's context: the Runner hands it to the body's Job
        try:
            with record.scope:
                outcome = await run()
                error = outcome.get("isError") if isinstance(outcome, dict) else None
                record.finish("completed", "Finished with an error." if error else "Finished.", result=outcome)
        except MCPError as exc:
            record.finish("failed", exc.message, error=exc.error.model_dump(mode="json", exclude_none=True))
        except Exception as exc:  # the task's own top level: the tool's errors came back as its result
            log.exception("task %s failed unexpectedly", record.id)
            error = {"code": INTERNAL_ERROR, "message": type(exc).__name__}
            record.finish("failed", "Failed unexpectedly.", error=error)
        finally:
            record.finish("cancelled", "Cancelled.")  # only when the scope stopped it
            record.done.set()

    # -- the tasks/* methods -----------------------------------------------------------------------

    async def get(self, ctx: ServerRequestContext[Any, Any], params: GetTaskRequestParams) -> dict[str, Any]:
        """``tasks/get``: the task's state (2026-07-28: with its result once completed)."""
        return self._find(ctx, params.task_id).wire(modern=_modern(ctx))

    async def result(self, ctx: ServerRequestContext[Any, Any], params: GetTaskPayloadRequestParams) -> dict[str, Any]:
        """``tasks/result`` (2025-11-25): wait for the task to end, then answer what the call would have."""
        record = self._find(ctx, params.task_id)
        await record.done.wait()
        related = {RELATED_TASK: {"taskId": record.id}}
        if record.status == "completed" and record.result is not None:
            return {**record.result, "_meta": {**record.result.get("_meta", {}), **related}}
        if record.status == "failed" and record.error is not None:
            raise MCPError(record.error["code"], record.error["message"], record.error.get("data"))
        raise MCPError(INVALID_REQUEST, f"Task {record.id} was cancelled: it has no result.", data=related)

    async def list(self, ctx: ServerRequestContext[Any, Any], params: PaginatedRequestParams | None) -> dict[str, Any]:
        """``tasks/list`` (2025-11-25): the caller's tasks, newest first, ``PAGE`` at a time."""
        self._purge()
        owner = _owner(ctx)
        mine = [r for r in reversed(self._tasks.values()) if r.owner is None or r.owner == owner]
        cursor = params.cursor if params is not None else None
        start = int(cursor) if cursor and cursor.isdigit() else 0
        page: dict[str, Any] = {"tasks": [r.wire(modern=False) for r in mine[start : start + PAGE]]}
        if start + PAGE < len(mine):
            page["nextCursor"] = str(start + PAGE)
        return page

    async def cancel(self, ctx: ServerRequestContext[Any, Any], params: CancelTaskRequestParams) -> dict[str, Any]:
        """``tasks/cancel``: stop the task between documents; it says ``cancelled`` from now on."""
        record = self._find(ctx, params.task_id)
        if record.status in _TERMINAL:
            raise MCPError(INVALID_PARAMS, f"Task {record.id} is {record.status} already: it cannot be cancelled.")
        record.finish("cancelled", "Cancelled by request; documents finished before it stopped are kept.")
        record.scope.cancel()
        return {} if _modern(ctx) else record.wire(modern=False)

    async def update(self, ctx: ServerRequestContext[Any, Any], params: UpdateTaskParams) -> dict[str, Any]:
        """``tasks/update`` (2026-07-28): acknowledged; Coffer's tasks never wait for input."""
        self._find(ctx, params.task_id)
        return {}

    def _find(self, ctx: ServerRequestContext[Any, Any], task_id: str) -> TaskRecord:
        if _modern(ctx) and not _declares_tasks(ctx):
            raise MCPError(
                MISSING_REQUIRED_CLIENT_CAPABILITY,
                "Missing required client capability",
                data={"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}},
            )
        self._purge()
        record = self._tasks.get(task_id)
        if record is None or (record.owner is not None and record.owner != _owner(ctx)):
            raise MCPError(INVALID_PARAMS, f"Failed to retrieve task: no task {task_id[:64]!r} (or it expired).")
        return record

    def _purge(self) -> None:
        """Forget the tasks that ended more than their ttl after they began (a running one is kept)."""
        now = time.monotonic()
        for task_id in [task_id for task_id, r in self._tasks.items() if r.status in _TERMINAL and r.expired(now)]:
            del self._tasks[task_id]


class TasksExtension(Extension):
    """The tasks methods and the ``tools/call`` interceptor, as the SDK takes an extension."""

    identifier = TASKS_EXTENSION

    def __init__(self, book: TaskBook) -> None:
        self.book = book

    def methods(self) -> Sequence[MethodBinding]:
        handshake, modern = frozenset(HANDSHAKE_PROTOCOL_VERSIONS), frozenset(MODERN_PROTOCOL_VERSIONS)
        book = self.book
        return (
            MethodBinding("tasks/get", GetTaskRequestParams, book.get),
            MethodBinding("tasks/cancel", CancelTaskRequestParams, book.cancel),
            MethodBinding("tasks/result", GetTaskPayloadRequestParams, book.result, handshake),
            MethodBinding("tasks/list", PaginatedRequestParams, book.list, handshake),
            MethodBinding("tasks/update", UpdateTaskParams, book.update, modern),
        )

    async def intercept_tool_call(
        self, params: CallToolRequestParams, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        if not _modern(ctx):
            return await call_next(ctx)
        return await self.book.modern_call(params, ctx, call_next)


def _modern(ctx: ServerRequestContext[Any, Any]) -> bool:
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


def _group(ctx: ServerRequestContext[Any, Any]) -> anyio.abc.TaskGroup | None:
    """The server's task group (None when it runs without Coffer's lifespan: no tasks then)."""
    state = ctx.lifespan_context
    return state.group if isinstance(state, Background) else None


def _declares_tasks(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether the request's client capabilities name the tasks extension (2026-07-28 asks on every request)."""
    capabilities = ctx.session.client_capabilities
    extensions = (capabilities.extensions if capabilities is not None else None) or {}
    return TASKS_EXTENSION in extensions


def _owner(ctx: ServerRequestContext[Any, Any]) -> object:
    """Who may see a task: an OAuth token's owner, else a 2025-11-25 connection, else anyone with its id."""
    actor = getattr(ctx.request, "scope", {}).get(ACTOR_KEY) if ctx.request is not None else None
    if isinstance(actor, str):
        return actor
    if _modern(ctx):
        return None
    return getattr(ctx.session, "_connection", None)  # not public in the SDK yet (see ``_client_log``)


def _progress_sender(ctx: ServerRequestContext[Any, Any]) -> _Sender | None:
    """Progress notifications for a task (2025-11-25, with a token): on the connection, the call having returned."""
    token = (ctx.meta or {}).get("progress_token")
    if token is None or _modern(ctx):  # the tasks extension sends no progress: statusMessage says it
        return None
    session: ServerSession = ctx.session

    async def send(done: int, total: int, message: str) -> None:
        await session.send_progress_notification(token, done, total, message or None)

    return send
