"""Every MCP tool, declared once: its name, its body, its tool set, what it may do, its annotations.

Registration, the read-only set, the OAuth scope each tool needs (``TOOL_SCOPES``), the names the
package exports (``TOOL_NAMES``, ``CORE_TOOLS``, ``READ_TOOLS``) and the name each call is logged
under all come from ``TOOLS``; adding a tool is one body in a ``_*_tools`` module and one entry here.

A body is a plain synchronous function ``body(job, **arguments)``: its parameters after ``job``
are the tool's input schema and its docstring the description. ``tool_function`` turns it into
the async function the SDK registers, whose call runs the body on a worker thread through the
``Runner`` (logging, progress, errors). A tool that writes warns the user when it left documents
without vectors (``_notices``); a tool with a ``question`` asks the user before it runs, when the
client can be asked (``_confirm``).
"""

from __future__ import annotations

import enum
import functools
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, NoReturn

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations

from coffer_mcp.errors import CofferError
from coffer_mcp.mcp_server import _core_tools as core
from coffer_mcp.mcp_server import _curation_tools as curation
from coffer_mcp.mcp_server import _portability_tools as portability
from coffer_mcp.mcp_server._common import ADD, CHANGE, CREATE, FETCH, READ
from coffer_mcp.mcp_server._confirm import CONFIRMATION, Question, confirmation_parameter, settle
from coffer_mcp.mcp_server._confirm import delete_kb_question as _delete_kb_question
from coffer_mcp.mcp_server._confirm import restore_question as _restore_question
from coffer_mcp.mcp_server._notices import reporting_degraded
from coffer_mcp.mcp_server._runner import Job, Runner
from coffer_mcp.services.authorization import Scope

__all__ = [
    "CORE_TOOLS",
    "READ_TOOLS",
    "TOOLS",
    "TOOL_NAMES",
    "TOOL_SCOPES",
    "Access",
    "ToolEntry",
    "ToolSet",
    "register_tools",
    "task_tools",
    "tool_function",
]


class ToolSet(enum.Enum):
    """Which switch offers a tool: the core set always, the others with ``curation_tools``."""

    CORE = "core"
    CURATION = "curation"
    PORTABILITY = "portability"


class Access(enum.Enum):
    """What a tool may change, which decides whether a read-only server offers it."""

    READ = "read"
    """Changes nothing; offered everywhere."""
    WRITE = "write"
    """Changes documents or knowledge bases; left out of a read-only server."""
    REFRESH = "refresh"
    """Reads, and refreshes what it finds out of date where the server may write; offered everywhere,
    annotated as a read on a read-only server (``Job.writes`` tells the body which)."""
    ADMIN = "admin"
    """Creates, reconfigures, deletes or restores a whole knowledge base; left out of a read-only server."""

    @property
    def writes(self) -> bool:
        """Whether a read-only server leaves the tool out."""
        return self in (Access.WRITE, Access.ADMIN)

    @property
    def scope(self) -> Scope:
        """The OAuth scope a token needs to call a tool of this access (a refresh without the write
        scope only reads, as on a read-only server)."""
        return {Access.WRITE: Scope.WRITE, Access.ADMIN: Scope.ADMIN}.get(self, Scope.READ)


@dataclass(frozen=True, slots=True)
class ToolEntry:
    """One MCP tool.

    Attributes:
        name: The tool's name on the wire.
        body: ``body(job, **arguments)``; see the module docstring.
        toolset: The switch that offers it.
        access: What it may change.
        annotations: Its MCP annotations where it is offered with writes allowed.
        question: For a destructive tool, what to ask the user before it runs (see ``_confirm``).
        embeds: Its job includes embedding (a reindex, new chunk or vector settings): documents it
            leaves without vectors are reported even when there are no more than before.
        long: Long work a client may run as an MCP task (``_tasks``): it reports progress and stops
            between documents when cancelled.
    """

    name: str
    body: Callable[..., Any]
    toolset: ToolSet
    access: Access
    annotations: ToolAnnotations
    question: Question | None = None
    embeds: bool = False
    long: bool = False

    def offered(self, *, curation: bool, read_only: bool) -> bool:
        """Whether a server with these switches lists this tool."""
        return (curation or self.toolset is ToolSet.CORE) and not (read_only and self.access.writes)

    def annotations_for(self, *, read_only: bool) -> ToolAnnotations:
        """The annotations a server with this switch publishes."""
        return READ if read_only and self.access is Access.REFRESH else self.annotations


_CORE, _CURATION, _PORTABILITY = ToolSet.CORE, ToolSet.CURATION, ToolSet.PORTABILITY
_READ, _WRITE, _ADMIN = Access.READ, Access.WRITE, Access.ADMIN

# In the order tools/list shows them.
TOOLS: tuple[ToolEntry, ...] = (
    ToolEntry("coffer__list_knowledge_bases", core.list_knowledge_bases, _CORE, _READ, READ),
    ToolEntry("coffer__search_knowledge", core.search_knowledge, _CORE, _READ, READ),
    ToolEntry("coffer__grep_knowledge", core.grep_knowledge, _CORE, _READ, READ),
    ToolEntry("coffer__read_document", core.read_document, _CORE, _READ, READ),
    ToolEntry("coffer__add_document", core.add_document, _CORE, _WRITE, ADD),
    ToolEntry("coffer__edit_document", core.edit_document, _CORE, _WRITE, CHANGE),
    ToolEntry("coffer__delete_document", core.delete_document, _CORE, _WRITE, CHANGE),
    ToolEntry("coffer__list_documents", curation.list_documents, _CURATION, _READ, READ),
    ToolEntry("coffer__knowledge_base_metrics", curation.knowledge_base_metrics, _CURATION, _READ, READ),
    ToolEntry("coffer__check_sources", curation.check_sources, _CURATION, Access.REFRESH, CHANGE, long=True),
    ToolEntry("coffer__create_knowledge_base", curation.create_knowledge_base, _CURATION, _ADMIN, CREATE),
    ToolEntry(
        "coffer__update_knowledge_base",
        curation.update_knowledge_base,
        _CURATION,
        _ADMIN,
        CHANGE,
        embeds=True,
        long=True,
    ),
    ToolEntry(
        "coffer__delete_knowledge_base",
        curation.delete_knowledge_base,
        _CURATION,
        _ADMIN,
        CHANGE,
        question=_delete_kb_question,
    ),
    ToolEntry(
        "coffer__reindex_knowledge_base",
        curation.reindex_knowledge_base,
        _CURATION,
        _WRITE,
        ADD,
        embeds=True,
        long=True,
    ),
    # CHANGE: with follow=true, documents whose file left the followed folder are removed.
    ToolEntry("coffer__ingest_path", curation.ingest_path, _CURATION, _WRITE, CHANGE, long=True),
    ToolEntry("coffer__ingest_url", curation.ingest_url, _CURATION, _WRITE, FETCH, long=True),
    ToolEntry("coffer__update_from_source", curation.update_from_source, _CURATION, _WRITE, CHANGE),
    ToolEntry("coffer__list_snapshots", portability.list_kb_snapshots, _PORTABILITY, _READ, READ),
    ToolEntry("coffer__export_knowledge_base", portability.export_knowledge_base, _PORTABILITY, _WRITE, ADD, long=True),
    ToolEntry("coffer__snapshot_knowledge_base", portability.snapshot_knowledge_base, _PORTABILITY, _WRITE, CREATE),
    ToolEntry(
        "coffer__restore_snapshot",
        portability.restore_kb_snapshot,
        _PORTABILITY,
        _ADMIN,
        CHANGE,
        question=_restore_question,
    ),
)

TOOL_NAMES = tuple(entry.name for entry in TOOLS)
CORE_TOOLS = tuple(entry.name for entry in TOOLS if entry.toolset is ToolSet.CORE)
READ_TOOLS = tuple(entry.name for entry in TOOLS if not entry.access.writes)
TOOL_SCOPES: dict[str, Scope] = {entry.name: entry.access.scope for entry in TOOLS}
"""The scope each tool needs (``Access.scope``): what an OAuth token must hold to see and call it."""


def task_tools(*, curation: bool, read_only: bool) -> tuple[str, ...]:
    """The long tools a server with these switches offers: those a client may run as MCP tasks."""
    return tuple(e.name for e in TOOLS if e.long and e.offered(curation=curation, read_only=read_only))


def register_tools(server: MCPServer, run: Runner, *, curation: bool, read_only: bool) -> None:
    """Add to ``server`` every tool its switches offer, each running through ``run``."""
    for entry in TOOLS:
        if entry.offered(curation=curation, read_only=read_only):
            server.add_tool(
                tool_function(entry, run),
                name=entry.name,
                description=_description(entry.body),
                annotations=entry.annotations_for(read_only=read_only),
            )


def tool_function(entry: ToolEntry, run: Runner) -> Callable[..., Awaitable[Any]]:
    """``entry``'s body as the SDK registers a tool: async, taking its arguments and the request context.

    The SDK reads the input schema, the output schema and where to pass the context from the
    function's signature, so the function gets the body's signature with ``job`` replaced by ``ctx``.
    """
    parameters, returns = _interface(entry.body)

    async def tool(ctx: Context, **arguments: Any) -> Any:
        if entry.question is not None:
            refusal = settle(arguments.pop(CONFIRMATION), arguments)
            if refusal is not None:
                return await run(ctx, entry.name, lambda job: _refuse(refusal))
        return await run(ctx, entry.name, lambda job: _run_body(entry, job, arguments))

    if entry.question is not None:  # the user's answer comes in a parameter of its own, before ctx
        *named, context = parameters
        asked = confirmation_parameter(entry.name, entry.question, lambda: run.service, named)
        parameters = (*named, asked, context)
    tool.__name__ = tool.__qualname__ = entry.body.__name__  # names the SDK's argument model
    tool.__doc__ = _description(entry.body)
    tool.__signature__ = inspect.Signature(parameters, return_annotation=returns)  # type: ignore[attr-defined]
    tool.__annotations__ = {p.name: p.annotation for p in parameters} | {"return": returns}
    return tool


def _run_body(entry: ToolEntry, job: Job, arguments: dict[str, Any]) -> Any:
    if entry.access is Access.READ:
        return entry.body(job, **arguments)
    kb = arguments.get("kb", arguments.get("name"))
    return reporting_degraded(
        job, kb if isinstance(kb, str) else None, lambda: entry.body(job, **arguments), embeds=entry.embeds
    )


def _refuse(error: CofferError) -> NoReturn:
    raise error


_CONTEXT = inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=Context)


@functools.cache
def _interface(body: Callable[..., Any]) -> tuple[tuple[inspect.Parameter, ...], Any]:
    """The body's parameters after ``job`` (keyword-only, annotations evaluated) plus ``ctx``, and its return type."""
    signature = inspect.signature(body, eval_str=True)
    _job, *arguments = signature.parameters.values()
    keyword = tuple(p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in arguments)
    return (*keyword, _CONTEXT), signature.return_annotation


def _description(body: Callable[..., Any]) -> str:
    """The docstring dedented, each paragraph on one line: line breaks are for the source's width."""
    paragraphs = inspect.cleandoc(body.__doc__ or "").split("\n\n")
    return "\n".join(" ".join(line.strip() for line in paragraph.splitlines()) for paragraph in paragraphs)
