"""Confirming a destructive call with the user through the client (elicitation), else with ``confirm``.

A tool whose registry entry has a question (deleting a knowledge base, restoring a snapshot)
asks the user itself when the client supports form elicitation: the client shows the question
with a checkbox, and the call goes ahead only if the user ticks it and accepts. Declining,
dismissing, accepting without the tick, or any answer that is not a clear yes (an empty or
malformed form) refuses the call with ``confirmation_declined``, whatever ``confirm`` says: the
model does not answer for the user. A client without elicitation
(or a connection that cannot carry a request to it) falls back to the ``confirm`` argument,
which the model sets to true once the user agreed in the conversation. Either way an unknown target
is refused as such before anyone is asked: the question checks it, and so does the tool's body
before it asks for ``confirm``.

The SDK's resolvers carry the question on either protocol: from 2026-07-28 as an
``InputRequiredResult`` the client answers by calling again, before that as an
``elicitation/create`` request in the middle of the call.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import anyio.to_thread
from mcp.server.mcpserver import AcceptedElicitation, Context, Elicit, ElicitationResult, Resolve
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, Field, ValidationError, ValidatorFunctionWrapHandler, field_validator

from coffer_mcp.errors import CofferError, ConfirmationRequiredError

if TYPE_CHECKING:
    from coffer_mcp.services import Coffer

__all__ = [
    "CONFIRMATION",
    "Confirmation",
    "Question",
    "can_ask",
    "confirmation_parameter",
    "count_documents",
    "delete_kb_question",
    "restore_question",
    "settle",
    "unanswered",
]

CONFIRMATION = "confirmation"  # the tool function's parameter the resolver fills (not in the input schema)

Question = Callable[["Coffer", Mapping[str, Any]], str]
"""What to ask the user, from the call's arguments; raises a ``CofferError`` to refuse the call unasked."""


# The form the client shows under the question. No docstring: pydantic would make it the JSON
# schema's description, which a client may show the user (the 2025-11-25 protocol sends it).
#
# An answer that is not a clear yes is a no: a client that sends "", null or "maybe" for the box
# has not ticked it, and the call is declined as such rather than failing on the answer's shape.
# (What pydantic reads as a boolean keeps its meaning: "true" and 1 tick.)
class Confirmation(BaseModel):
    confirm: bool = Field(default=False, title="Yes, go ahead", description="Tick to let Coffer go ahead.")

    @field_validator("confirm", mode="wrap")
    @classmethod
    def _no_unless_yes(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> bool:
        try:
            return bool(handler(value))
        except ValidationError:
            return False


@dataclass(frozen=True, slots=True)
class _Unasked:
    """The client cannot be asked: the ``confirm`` argument decides."""


@dataclass(frozen=True, slots=True)
class _Refused:
    """The call is refused before anyone is asked (e.g. no such knowledge base)."""

    error: CofferError


UNASKED = _Unasked()


def delete_kb_question(service: Coffer, arguments: Mapping[str, Any]) -> str:
    name = str(arguments["name"])
    service.open_kb(name)  # an unknown name is refused without asking anyone
    service.refresh(name)  # count the documents there are, not those the index knew of
    count = service.document_counts().get(name, 0)
    return (
        f"Delete the knowledge base '{name}' and its {count_documents(count)}? Their files and index entries are "
        "removed; this cannot be undone."
    )


def restore_question(service: Coffer, arguments: Mapping[str, Any]) -> str:
    kb = str(arguments["kb"])
    info = service.find_snapshot(kb, str(arguments["snapshot_id"]))  # an unknown one is refused without asking
    note = f" ('{info.note}')" if info.note else ""
    return (
        f"Put the knowledge base '{kb}' back to its snapshot of {info.created_at}{note}, "
        f"{count_documents(info.documents)}? "
        "Documents added or edited since then go back to that state. The current state is snapshotted first, so "
        "this can be undone."
    )


def count_documents(count: int) -> str:
    """``1 document``, ``2 documents``."""
    return "1 document" if count == 1 else f"{count} documents"


def can_ask(ctx: Context) -> bool:
    """Whether the client can show the user a form now: it declared form elicitation, and its
    connection can carry the question (2026-07-28 carries it in the call's result)."""
    try:
        capabilities = ctx.client_capabilities
    except ValueError:  # no request: called directly, not by a client
        return False
    elicitation = capabilities.elicitation if capabilities is not None else None
    if elicitation is None or (elicitation.form is None and elicitation.url is not None):
        return False  # none, or URL mode only (a bare ``elicitation: {}`` means form)
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS or ctx.session.can_send_request


def confirmation_parameter(
    tool: str, question: Question, service: Callable[[], Coffer | None], arguments: list[inspect.Parameter]
) -> inspect.Parameter:
    """The tool function's parameter that the SDK fills with the user's answer before the body runs.

    Args:
        tool: The tool's name (names the resolver).
        question: What to ask, from the arguments.
        service: The core (None on a server whose configuration does not load).
        arguments: The tool's parameters, which the resolver receives by name.
    """

    async def ask(ctx: Context, **values: Any) -> Elicit[Confirmation] | _Unasked | _Refused:
        core = service()
        if core is None or not can_ask(ctx):
            return UNASKED
        try:
            text = await anyio.to_thread.run_sync(question, core, values)
        except CofferError as exc:
            return _Refused(exc)
        return Elicit(text, Confirmation)

    # The SDK passes a resolver the tool arguments its signature names, and the context.
    context = inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=Context)
    ask.__signature__ = inspect.Signature([context, *arguments])  # type: ignore[attr-defined]
    ask.__annotations__ = {"ctx": Context}
    ask.__name__ = ask.__qualname__ = _resolver_name(tool)  # its key in the protocol's input requests
    annotation = Annotated[ElicitationResult[Confirmation], Resolve(ask)]
    return inspect.Parameter(CONFIRMATION, inspect.Parameter.KEYWORD_ONLY, annotation=annotation)


def _resolver_name(tool: str) -> str:
    return f"confirm_{tool}"


def unanswered(tool: str, error: ToolError) -> CofferError | None:
    """The decline of ``tool``'s call when ``error`` is the SDK refusing the client's answer to its
    question (accepted with no content, or a response of another kind); None for any other error.

    The SDK raises these before the tool runs, naming the resolver that asked; an answer the user's
    client did not fill in is not a yes, so the call is declined like any other no, not reported
    as a fault in Coffer.
    """
    if isinstance(error, UnexpectedToolError) or f"{_resolver_name(tool)}'" not in str(error):
        return None
    return _declined("accepted the question without an answer Coffer could read")


def settle(outcome: ElicitationResult[Any], arguments: dict[str, Any]) -> CofferError | None:
    """Apply the user's answer to ``arguments`` (a confirmation sets ``confirm``); the error that
    refuses the call, or None to run it (the ``confirm`` argument decides when nobody was asked)."""
    if isinstance(outcome, AcceptedElicitation):
        answer = outcome.data
        if isinstance(answer, _Refused):
            return answer.error
        if isinstance(answer, _Unasked):
            return None
        if isinstance(answer, Confirmation) and answer.confirm:
            arguments["confirm"] = True
            return None
        return _declined("accepted the question without ticking 'Yes, go ahead'")
    return _declined("declined" if outcome.action == "decline" else "dismissed the question")


def _declined(how: str) -> CofferError:
    return ConfirmationRequiredError(
        f"The user {how}; nothing was changed.",
        code="confirmation_declined",
        hint="Do not call again, with or without confirm=true, unless the user asks for it again.",
    )
