"""``MCPServer`` with Coffer's error shape on every tool and prompt error, and documents as resources.

The SDK answers a call it refuses itself (an unknown tool, arguments that break the input schema,
a crash outside the tool body) with its own text. ``call_tool`` is the one place such refusals
pass, so they are turned into ``{"code", "message", "hint"}`` here, like the ``CofferError``s the
tool bodies return through the ``Runner``. ``get_prompt`` does the same for prompts: the SDK
answers an unknown prompt or a missing argument with an internal error, Coffer with invalid params.
On stdio, a line the SDK cannot parse gets an answer too (``_unreadable``), where the SDK drops it.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.server.stdio import stdio_server
from mcp.types import (
    CallToolResult,
    GetPromptResult,
    InputRequiredResult,
    PromptsCapability,
    Resource,
    ResourcesCapability,
    ServerCapabilities,
    ServerTasksCapability,
    ServerTasksRequestsCapability,
    SetLevelRequestParams,
    SubscribeRequestParams,
    SubscriptionsListenRequestParams,
    TasksCallCapability,
    TasksCancelCapability,
    TasksListCapability,
    TasksToolsCapability,
    Tool,
    ToolExecution,
    ToolsCapability,
    UnsubscribeRequestParams,
)
from mcp.types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from coffer_mcp.errors import CofferError, NotFoundError
from coffer_mcp.mcp_server._arguments import invalid_arguments, mistyped_arguments, unknown_arguments
from coffer_mcp.mcp_server._client_log import set_level
from coffer_mcp.mcp_server._confirm import unanswered
from coffer_mcp.mcp_server._notify import Notifier
from coffer_mcp.mcp_server._prompts import invalid_params, prompt_refusal
from coffer_mcp.mcp_server._runner import Runner, caller, granted_scopes, internal_error, tool_error
from coffer_mcp.mcp_server._scopes import beyond_scope
from coffer_mcp.mcp_server._unreadable import AnsweringStdin
from coffer_mcp.mcp_server._uris import document_uri
from coffer_mcp.mcp_server._wire import input_schema

__all__ = ["CofferServer"]

log = logging.getLogger(__name__)

RESOURCE_LIST_LIMIT = 1000


class CofferServer(MCPServer):
    """``MCPServer`` whose tool errors all carry a code and a hint, and whose resources are documents.

    Args:
        runner: Runs the tool bodies; its service (None when unconfigured) lists the resources.
        all_tools: Every tool name Coffer has, to explain one this server does not offer.
        all_prompts: Every prompt name Coffer has, likewise.
        refusal: An error every call answers with, whatever its arguments (the configuration is
            broken, so no tool can run).
        task_tools: The tools a client may run as MCP tasks (``_tasks``): listed with
            ``execution.taskSupport`` ``optional``.
        **kwargs: ``MCPServer``'s keywords.
    """

    def __init__(
        self,
        runner: Runner,
        all_tools: tuple[str, ...] = (),
        *,
        all_prompts: tuple[str, ...] = (),
        refusal: CofferError | None = None,
        task_tools: tuple[str, ...] = (),
        **kwargs: Any,
    ) -> None:
        self._schemas: dict[str, dict[str, Any]] | None = None  # the published input schemas, by tool
        super().__init__(**kwargs)
        self.runner = runner
        self.all_tools = all_tools
        self.all_prompts = all_prompts
        self.refusal = refusal
        self.task_tools = frozenset(task_tools)

    async def list_tools(self) -> list[Tool]:
        optional = ToolExecution(task_support="optional")
        return [
            tool.model_copy(
                update={"input_schema": input_schema(tool.input_schema)}
                | ({"execution": optional} if tool.name in self.task_tools else {})
            )
            for tool in await super().list_tools()
        ]

    def serve_log_levels(self) -> None:
        """Answer ``logging/setLevel`` (and so declare the logging capability); see ``_client_log``."""
        # The SDK deprecates logging as of 2026-07-28 and offers no decorator for it; clients of the
        # earlier versions (most, today) still set a level, and the conformance suite checks it.
        self._lowlevel_server.add_request_handler("logging/setLevel", SetLevelRequestParams, set_level)

    def serve_notifications(self, notifier: Notifier) -> None:
        """Answer ``resources/subscribe`` and ``subscriptions/listen`` with the notifier's (see ``_notify``)."""
        lowlevel = self._lowlevel_server
        lowlevel.add_request_handler("resources/subscribe", SubscribeRequestParams, notifier.subscribe)
        lowlevel.add_request_handler("resources/unsubscribe", UnsubscribeRequestParams, notifier.unsubscribe)
        lowlevel.add_request_handler("subscriptions/listen", SubscriptionsListenRequestParams, notifier.listen)
        self.middleware.append(notifier.hear_lists)

    def declare_capabilities(self, *, notifies: bool, tasks: bool) -> None:
        """Declare what the server does beyond what the SDK derives from its handlers, as each era says it.

        Resource subscriptions and list changes (``notifies``, both eras); tasks (``tasks``) up to
        2025-11-25 as ``capabilities.tasks`` (from 2026-07-28 the extension declares itself); and
        no list changes of tools or prompts: their lists never change while a server runs.
        """
        lowlevel = self._lowlevel_server
        derive = lowlevel.get_capabilities

        def capabilities(
            notification_options: Any = None,
            experimental_capabilities: dict[str, dict[str, Any]] | None = None,
            extensions: dict[str, dict[str, Any]] | None = None,
            *,
            protocol_version: str | None = None,
        ) -> ServerCapabilities:
            era = protocol_version
            found = derive(notification_options, experimental_capabilities, extensions, protocol_version=era)
            resources = ResourcesCapability(subscribe=notifies, list_changed=notifies)
            update: dict[str, Any] = {
                "resources": resources if found.resources else None,
                "tools": ToolsCapability(list_changed=False) if found.tools else None,
                "prompts": PromptsCapability(list_changed=False) if found.prompts else None,
            }
            if tasks and era not in MODERN_PROTOCOL_VERSIONS:
                calls = ServerTasksRequestsCapability(tools=TasksToolsCapability(call=TasksCallCapability()))
                update["tasks"] = ServerTasksCapability(
                    list=TasksListCapability(), cancel=TasksCancelCapability(), requests=calls
                )
            return found.model_copy(update=update)

        # The SDK derives capabilities from the registered handlers and takes list changes as an
        # argument its transports never pass (its own TODO L53); so they are declared here, once.
        lowlevel.get_capabilities = capabilities  # type: ignore[method-assign]

    async def run_stdio_async(self) -> None:
        """Serve stdio as ``MCPServer`` does, but answer a line that does not parse (the SDK drops it)."""
        async with stdio_server() as (read_stream, write_stream):
            lowlevel = self._lowlevel_server
            options = lowlevel.create_initialization_options()
            await lowlevel.run(AnsweringStdin(read_stream, write_stream), write_stream, options)

    def add_tool(self, *args: Any, **kwargs: Any) -> None:
        super().add_tool(*args, **kwargs)
        self._schemas = None

    def remove_tool(self, name: str) -> None:
        super().remove_tool(name)
        self._schemas = None

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context | None = None
    ) -> CallToolResult | InputRequiredResult:
        started = time.perf_counter()
        if self._schemas is None:  # built once: listing the tools costs more than a small search
            self._schemas = {tool.name: tool.input_schema for tool in await self.list_tools()}
        schemas = self._schemas
        refusal = self._refusal(name, arguments, schemas, context)
        if refusal is None:
            try:
                return await super().call_tool(name, arguments, context)
            except ToolError as exc:
                refusal = unanswered(name, exc)  # the client's answer to a confirmation was not a yes
                if refusal is None:
                    if isinstance(exc, UnexpectedToolError) or not isinstance(exc.__cause__, ValidationError):
                        # Output conversion after the body (which the Runner recorded), or the SDK itself: a bug.
                        return tool_error(internal_error(name, exc))
                    refusal = invalid_arguments(name, schemas[name], exc.__cause__)
        # Refused before any tool body ran, so the Runner did not record it: record it here.
        client = caller(context)[1]
        await anyio.to_thread.run_sync(self.runner.record, name, client, started, "error", refusal.code)
        log.info("tool %r refused: %s", name, refusal.message)
        return tool_error(refusal)

    def _refusal(
        self, name: str, arguments: dict[str, Any], schemas: dict[str, dict[str, Any]], context: Context | None
    ) -> CofferError | None:
        """Why the call cannot run, before the SDK validates the argument values: None when it can."""
        if name not in schemas:
            return self._unknown_tool(name, offered=list(schemas))
        schema = schemas[name]
        return (
            self.refusal
            or beyond_scope(name, granted_scopes(context))
            or unknown_arguments(name, schema, arguments)
            or mistyped_arguments(name, schema, arguments)
        )

    async def get_prompt(
        self, name: str, arguments: dict[str, Any] | None = None, context: Context | None = None
    ) -> GetPromptResult | InputRequiredResult:
        # The SDK answers an unknown prompt or a missing argument with a bare ValueError: an
        # "Internal server error" with a traceback on stderr. Refused here, it is invalid params.
        offered = await self.list_prompts()
        switched_off = name in self.all_prompts
        refusal = self.refusal or prompt_refusal(name, arguments or {}, offered, switched_off=switched_off)
        if refusal is not None:
            log.info("prompt %r refused: %s", name[:100], refusal.message)
            raise invalid_params(refusal)
        return await super().get_prompt(name, arguments, context)

    async def list_resources(self) -> list[Resource]:
        static = await super().list_resources()
        if self.runner.service is None:
            return static
        return static + await anyio.to_thread.run_sync(self._document_resources)

    def _document_resources(self) -> list[Resource]:
        service = self.runner.service
        assert service is not None  # list_resources checked
        rows = service.recent_documents(RESOURCE_LIST_LIMIT)
        return [
            Resource(
                uri=document_uri(r.kb, r.id),
                name=f"{r.kb}/{r.id}",
                title=r.title,
                mime_type="text/markdown",
            )
            for r in rows
        ]

    def _unknown_tool(self, name: str, *, offered: list[str]) -> CofferError:
        hidden = "; it is switched off on this server (read-only or without curation tools)"
        return NotFoundError(
            f"There is no tool {name[:100]!r}{hidden if name in self.all_tools else ''}.",
            code="unknown_tool",
            hint=f"Tools on this server: {', '.join(offered)}.",
        )
