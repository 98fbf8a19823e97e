"""``completion/complete``: values for the prompts' arguments and the document template's variables.

- ``kb`` (any prompt, and ``{kb}`` of ``coffer://{kb}/{doc_id}``): the knowledge-base names
  starting with what was typed; ``research`` also offers ``*`` and completes the last of several
  comma-separated names.
- ``doc_id`` (``summarize_document``, and ``{doc_id}``): the ids of the documents of the
  knowledge base already chosen (the request's context) whose title starts with what was typed,
  then those whose title contains it. A client shows the ids, so the title is the thing to type.

Anything else, or a reference this server does not have, completes to nothing rather than an
error: a client asks on every keystroke.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import anyio.to_thread
from mcp.server.mcpserver import MCPServer
from mcp.types import Completion, CompletionArgument, CompletionContext, PromptReference, ResourceTemplateReference

from coffer_mcp.errors import CofferError
from coffer_mcp.mcp_server._prompts import PROMPTS
from coffer_mcp.mcp_server._uris import DOCUMENT_TEMPLATE

if TYPE_CHECKING:
    from coffer_mcp.services import Coffer

__all__ = ["MAX_VALUES", "complete", "register_completions"]

MAX_VALUES = 100  # the protocol's most per answer
_SEVERAL_KBS = {"research"}  # prompts whose kb argument takes '*' or comma-separated names


def register_completions(server: MCPServer, service: Coffer) -> None:
    @server.completion()
    async def handle(
        ref: PromptReference | ResourceTemplateReference,
        argument: CompletionArgument,
        context: CompletionContext | None,
    ) -> Completion:
        known = dict(context.arguments or {}) if context is not None else {}
        return await anyio.to_thread.run_sync(complete, service, ref, argument.name, argument.value, known)


def complete(
    service: Coffer,
    ref: PromptReference | ResourceTemplateReference,
    name: str,
    value: str,
    known: Mapping[str, str],
) -> Completion:
    """The values for argument ``name`` of ``ref`` starting from ``value``, given the ``known`` ones."""
    if isinstance(ref, ResourceTemplateReference):
        several, offered = False, ref.uri == DOCUMENT_TEMPLATE
    else:
        several, offered = ref.name in _SEVERAL_KBS, any(entry.name == ref.name for entry in PROMPTS)
    if not offered:
        return Completion(values=[])
    try:
        if name == "kb":
            return _kb_names(service, value, several=several)
        if name == "doc_id" and known.get("kb"):
            return _document_ids(service, known["kb"], value)
    except CofferError:  # e.g. an unknown knowledge base in the context: nothing to offer
        pass
    return Completion(values=[])


def _kb_names(service: Coffer, value: str, *, several: bool) -> Completion:
    chosen, _, typed = value.rpartition(",") if several else ("", "", value)
    head = f"{chosen}," if chosen else ""
    taken = {name.strip() for name in chosen.split(",")}
    names = [n for n in service.kb_names() if n.startswith(typed.strip()) and n not in taken]
    if several and not chosen and "*".startswith(typed.strip()):
        names.insert(0, "*")
    return _completion([head + name for name in names])


def _document_ids(service: Coffer, kb: str, typed: str) -> Completion:
    page = service.list_documents(kb, typed, MAX_VALUES, 0)
    wanted = typed.strip().casefold()
    starting = [d.document_id for d in page.documents if d.title.casefold().startswith(wanted)]
    containing = [d.document_id for d in page.documents if not d.title.casefold().startswith(wanted)]
    return _completion(starting + containing, total=page.total)


def _completion(values: list[str], total: int | None = None) -> Completion:
    total = len(values) if total is None else total
    return Completion(values=values[:MAX_VALUES], total=total, has_more=total > MAX_VALUES)
