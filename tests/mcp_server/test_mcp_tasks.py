"""Long tools as MCP tasks: a client starts one, polls it, cancels it, and fetches a finished one's result.

Up to 2025-11-25 a client asks for a task (``params.task`` on ``tools/call``); the SDK's client sends
the request through its JSON-RPC dispatcher, since its ``call_tool`` expects a tool result, and
the server runs over stdio (``coffer serve``) and streamable HTTP. From 2026-07-28 the server
decides, for a client declaring the ``io.modelcontextprotocol/tasks`` extension: the SDK's client
takes the ``resultType: "task"`` answer through a result claim, in memory and over HTTP.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, ClassVar, Literal

import anyio
import pytest
from mcp import Client
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp.types import CallToolResult, Implementation, Request, RequestParams, Result
from pydantic import ConfigDict, TypeAdapter

from coffer_mcp import Coffer, load_settings
from coffer_mcp.mcp_server import build_server
from tests.web.support import running

pytestmark = pytest.mark.anyio

CLIENT = Implementation(name="tasker", version="1")
WAIT = 120.0
FILES = 400
TASKS = "io.modelcontextprotocol/tasks"
RELATED = "io.modelcontextprotocol/related-task"
LONG_TOOLS = {
    "coffer__check_sources",
    "coffer__update_knowledge_base",
    "coffer__reindex_knowledge_base",
    "coffer__ingest_path",
    "coffer__ingest_url",
    "coffer__export_knowledge_base",
}


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A folder of many small notes: an ingest long enough to be cancelled midway."""
    notes = tmp_path / "allowed" / "notes"
    notes.mkdir(parents=True)
    for i in range(FILES):
        (notes / f"note-{i:03}.md").write_text(f"# Note {i}\n\nFindings number {i} about zebrafish.\n")
    return notes


@pytest.fixture
def store(home: Path, tmp_path: Path) -> Iterator[Coffer]:
    settings = load_settings(home=home, embedding_provider="none", allowed_dirs=[str(tmp_path / "allowed")])
    with Coffer(settings) as service:
        service.create_kb("notes")
        yield service


def done(task: dict[str, Any]) -> int:
    """How many documents a working task says it has finished (its status message: ``N of M: file``)."""
    first = (task.get("statusMessage") or "").split(" ")[0]
    return int(first) if first.isdigit() else 0


def check_whole(store: Coffer, kb: str) -> int:
    """Every document file has its rows and every row its file, with nothing to repair; how many there are."""
    files = len(list(store.paths.kb(kb).docs.glob("*.md")))
    rows = len(store.index.documents(kb))
    assert files == rows
    report = store.verify(kb)
    assert report.ok, report.problems
    assert len(store.index.documents(kb)) == rows  # verify took up nothing: none was half-written
    return rows


# -- 2025-11-25: the client asks for a task ------------------------------------------------------


class Raw:
    """A 2025-11-25 session of the SDK's client, and its dispatcher for what its typed calls cannot send."""

    def __init__(self, session: ClientSession, dispatcher: JSONRPCDispatcher[Any]) -> None:
        self.session, self.dispatcher = session, dispatcher

    async def request(self, method: str, **params: Any) -> dict[str, Any]:
        return await self.dispatcher.send_raw_request(method, params, {})


@contextlib.asynccontextmanager
async def legacy(where: str, store: Coffer) -> AsyncIterator[tuple[Raw, dict[str, Any]]]:
    """A 2025-11-25 session with ``coffer serve`` over ``stdio`` or the HTTP server; and its capabilities."""
    with contextlib.ExitStack() as stack:
        if where == "http":
            transport = streamable_http_client(f"{stack.enter_context(running(store))}/mcp")
        else:
            env = {k: v for k, v in os.environ.items() if not k.startswith("COFFER_")}
            env.update(
                {
                    "COFFER_HOME": str(store.settings.home),
                    "COFFER_EMBEDDING_PROVIDER": "none",
                    "COFFER_ALLOWED_DIRS": str(store.settings.allowed_dirs[0]),
                }
            )
            command = StdioServerParameters(command=sys.executable, args=["-m", "coffer_mcp", "serve"], env=env)
            transport = stdio_client(command)
        async with transport as (read, write):
            dispatcher = JSONRPCDispatcher(read, write)
            async with ClientSession(dispatcher=dispatcher, client_info=CLIENT) as session:
                started = await session.initialize()
                yield Raw(session, dispatcher), started.capabilities.model_dump(by_alias=True, exclude_none=True)


@pytest.mark.parametrize("where", ["stdio", "http"])
async def test_a_folder_ingest_run_as_a_task_is_polled_and_cancelled_leaving_every_finished_document_whole(
    store: Coffer, folder: Path, where: str
) -> None:
    async with legacy(where, store) as (client, capabilities):
        assert capabilities["tasks"] == {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
        tools = (await client.session.list_tools()).tools
        assert {t.name for t in tools if t.execution and t.execution.task_support == "optional"} == LONG_TOOLS
        arguments = {"kb": "notes", "path": str(folder)}
        created = await client.request(
            "tools/call", name="coffer__ingest_path", arguments=arguments, task={"ttl": 600_000}
        )
        task = created["task"]
        assert task["status"] == "working"
        assert task["ttl"] == 600_000
        with anyio.fail_after(WAIT):
            while done(polled := await client.request("tasks/get", taskId=task["taskId"])) < 5:
                assert polled["status"] == "working", polled
                await anyio.sleep(0.05)  # polling is what a task asks of its client (pollInterval)
        cancelled = await client.request("tasks/cancel", taskId=task["taskId"])
        assert cancelled["status"] == "cancelled"
        with pytest.raises(MCPError, match="cancelled"), anyio.fail_after(WAIT):
            await client.request("tasks/result", taskId=task["taskId"])  # waits for the ingest to stop
        listed = await client.request("tasks/list")
        assert [(t["taskId"], t["status"]) for t in listed["tasks"]] == [(task["taskId"], "cancelled")]
        with pytest.raises(MCPError, match="cannot be cancelled"):
            await client.request("tasks/cancel", taskId=task["taskId"])
    assert 5 <= check_whole(store, "notes") < FILES


@pytest.mark.parametrize("where", ["stdio", "http"])
async def test_a_finished_task_gives_the_tool_result_the_call_would_have(
    store: Coffer, folder: Path, where: str
) -> None:
    small = folder.parent / "small"
    small.mkdir()
    for name in ("a", "b", "c"):
        (small / f"{name}.md").write_text(f"# {name}\n\ntext {name}\n")
    async with legacy(where, store) as (client, _):
        arguments = {"kb": "notes", "path": str(small)}
        task = (await client.request("tools/call", name="coffer__ingest_path", arguments=arguments, task={}))["task"]
        with anyio.fail_after(WAIT):
            result = await client.request("tasks/result", taskId=task["taskId"])
        polled = await client.request("tasks/get", taskId=task["taskId"])
    assert polled["status"] == "completed"
    assert result["_meta"][RELATED] == {"taskId": task["taskId"]}
    payload = CallToolResult.model_validate(result)
    assert not payload.is_error
    assert payload.structured_content is not None
    assert payload.structured_content["created"] == 3
    assert check_whole(store, "notes") == 3


async def test_a_tool_that_is_not_long_work_refuses_to_run_as_a_task(store: Coffer) -> None:
    async with legacy("http", store) as (client, _):
        with pytest.raises(MCPError) as refused:
            await client.request("tools/call", name="coffer__list_knowledge_bases", arguments={}, task={})
        tools = (await client.session.list_tools()).tools
    assert refused.value.code == -32601  # method not found, as the specification asks
    assert all(tool.execution is None for tool in tools if tool.name not in LONG_TOOLS)


async def test_asking_for_an_unknown_task_is_invalid_params(store: Coffer) -> None:
    async with legacy("http", store) as (client, _):
        with pytest.raises(MCPError) as unknown:
            await client.request("tasks/get", taskId="no-such-task")
    assert unknown.value.code == -32602


# -- 2026-07-28: the server decides, for a client that declares the extension ---------------------


class TaskHandle(Result):
    """What a long tool answers a client declaring the tasks extension (``resultType: "task"``)."""

    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"] = "task"
    task_id: str
    status: str


class TaskIdParams(RequestParams):
    task_id: str


class GetTask(Request[TaskIdParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: TaskIdParams
    name_param: ClassVar[str | None] = "taskId"  # the routing header the extension asks for over HTTP


class CancelTask(Request[TaskIdParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: TaskIdParams
    name_param: ClassVar[str | None] = "taskId"


async def _unresolved(handle: TaskHandle, context: ClaimContext) -> CallToolResult:
    raise AssertionError("the tests poll their tasks themselves (call_tool(..., allow_claimed=True))")


class Tasks(ClientExtension):
    """The client side of the extension, as far as the tests need: the claim of task answers."""

    identifier = TASKS

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=TaskHandle, resolve=_unresolved)]


@contextlib.asynccontextmanager
async def modern(where: str, store: Coffer) -> AsyncIterator[Client]:
    with contextlib.ExitStack() as stack:
        target: Any = build_server(store) if where == "memory" else f"{stack.enter_context(running(store))}/mcp"
        async with Client(target, client_info=CLIENT, extensions=[Tasks()]) as connected:
            assert connected.protocol_version == "2026-07-28"
            assert TASKS in (connected.server_capabilities.extensions or {})
            yield connected


async def get_task(client: Client, task_id: str) -> dict[str, Any]:
    return await client.session.send_request(GetTask(params=TaskIdParams(task_id=task_id)), TypeAdapter(dict[str, Any]))


async def until_finished(client: Client, task_id: str) -> dict[str, Any]:
    """Poll a task as its client would, until it is no longer working."""
    with anyio.fail_after(WAIT):
        while True:
            task = await get_task(client, task_id)
            if task["status"] != "working":
                return task
            await anyio.sleep(0.05)


@pytest.mark.parametrize("where", ["memory", "http"])
async def test_a_client_declaring_tasks_gets_a_task_for_a_folder_ingest_and_can_cancel_it(
    store: Coffer, folder: Path, where: str
) -> None:
    async with modern(where, store) as client:
        arguments = {"kb": "notes", "path": str(folder)}
        handle = await client.session.call_tool("coffer__ingest_path", arguments, allow_claimed=True)
        assert isinstance(handle, TaskHandle)
        with anyio.fail_after(WAIT):
            while done(polled := await get_task(client, handle.task_id)) < 5:
                assert polled["status"] == "working", polled
                await anyio.sleep(0.05)
        acknowledged = await client.session.send_request(
            CancelTask(params=TaskIdParams(task_id=handle.task_id)), TypeAdapter(dict[str, Any])
        )
        assert acknowledged["resultType"] == "complete"
        assert (await get_task(client, handle.task_id))["status"] == "cancelled"
        # The task's scope is cancelled; a reindex waits for the ingest's last document and lock.
        reindexed = await client.session.call_tool(
            "coffer__reindex_knowledge_base", {"kb": "notes"}, allow_claimed=True
        )
        finished = await until_finished(client, reindexed.task_id)
    assert finished["status"] == "completed"
    assert finished["result"]["structuredContent"]["kb"] == "notes"
    assert 5 <= check_whole(store, "notes") < FILES


async def test_a_client_that_does_not_declare_tasks_gets_the_tool_result_itself(store: Coffer, folder: Path) -> None:
    async with Client(build_server(store), client_info=CLIENT) as client:
        result = await client.call_tool("coffer__reindex_knowledge_base", {"kb": "notes"})
        with pytest.raises(MCPError) as refused:
            await client.session.send_request(GetTask(params=TaskIdParams(task_id="x")), TypeAdapter(dict[str, Any]))
    assert not result.is_error
    assert refused.value.code == -32021  # missing required client capability
