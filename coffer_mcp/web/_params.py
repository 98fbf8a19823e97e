"""The JSON API's parameters, parsed strictly and range-checked before the core sees them.

Anything a client types reaches this module first, so every failure here is the client's:
``InvalidArgumentError`` (or ``InvalidNameError``), which the API answers with ``400`` and
``{code, message, hint}``. The core checks its own bounds too; these checks exist so that no
value (a 20-digit offset SQLite cannot bind, Arabic-Indic digits ``int()`` would accept, a NUL
byte) ever reaches it in a shape that fails as a ``500``.
"""

from __future__ import annotations

import re
from typing import Any

from starlette.requests import Request

from coffer_mcp.errors import InvalidArgumentError
from coffer_mcp.limits import MAX_OFFSET
from coffer_mcp.services.retrieval import MAX_QUERY_CHARS
from coffer_mcp.store import is_document_id, validate_kb_name

__all__ = [
    "FILTER_PARAMS",
    "MAX_KBS",
    "MAX_OFFSET",
    "check_known",
    "doc_id",
    "filters",
    "kb_name",
    "kb_selector",
    "query_int",
    "query_text",
]

MAX_KBS = 100
_INTEGER = re.compile(r"-?[0-9]{1,30}")  # ASCII digits only: no '+', '_', spaces or other scripts' digits


def _shown(raw: str) -> str:
    return repr(raw[:40]) + ("…" if len(raw) > 40 else "")


def check_known(request: Request, accepted: tuple[str, ...]) -> None:
    """Refuse query parameters the endpoint does not take, as the MCP tools refuse unknown arguments.

    A misspelt one (``topk=3``, ``tags=draft``) would otherwise be dropped silently, and the
    answer would be the default's or every document's.

    Raises:
        InvalidArgumentError: a parameter not in ``accepted``; the hint lists those accepted.
    """
    unknown = [name for name in dict.fromkeys(request.query_params.keys()) if name not in accepted]
    if unknown:
        names = ", ".join(_shown(name) for name in unknown)
        raise InvalidArgumentError(
            f"Unknown query parameter{'s' if len(unknown) > 1 else ''} {names}.",
            hint=f"Accepted here: {', '.join(accepted)}." if accepted else "This endpoint takes no query parameters.",
        )


def query_int(request: Request, name: str, *, default: int | None, low: int, high: int) -> int | None:
    """The integer query parameter ``name`` (absent or empty: ``default``), within ``low..high``.

    Raises:
        InvalidArgumentError: not a plain decimal integer, or out of range.
    """
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    if not _INTEGER.fullmatch(raw) or not low <= int(raw) <= high:
        raise InvalidArgumentError(
            f"'{name}' must be an integer from {low} to {high}, got {_shown(raw)}.",
            hint=f"Pass plain decimal digits, e.g. {name}={low if default is None else default}.",
        )
    return int(raw)


def query_text(request: Request, name: str, *, max_chars: int = MAX_QUERY_CHARS) -> str:
    """The text query parameter ``name`` ("" when absent), at most ``max_chars`` long, without NUL.

    Raises:
        InvalidArgumentError: too long, or it holds a NUL character.
    """
    raw = request.query_params.get(name, "")
    if len(raw) > max_chars:
        raise InvalidArgumentError(
            f"'{name}' is {len(raw)} characters long; the limit is {max_chars}.",
            hint="Use the key words rather than a whole passage.",
        )
    if "\x00" in raw:
        raise InvalidArgumentError(f"'{name}' holds a NUL character.", hint="Send plain text.")
    return raw


def kb_name(request: Request) -> str:
    """The ``{kb}`` path parameter, checked against the naming rule.

    Raises:
        InvalidNameError: not a knowledge base name (so it cannot name a path either).
    """
    return validate_kb_name(request.path_params["kb"])


def doc_id(request: Request) -> str:
    """The ``{doc_id}`` path parameter, checked to be a document id.

    Raises:
        InvalidArgumentError: not a 26-character ULID.
    """
    value = request.path_params["doc_id"]
    if not is_document_id(value):
        raise InvalidArgumentError(
            f"Invalid document id {_shown(value)}.",
            hint="Document ids are 26-character ULIDs, as the document list shows them.",
        )
    return value


def kb_selector(request: Request) -> str | list[str]:
    """Which knowledge bases a search covers: ``{kb}`` in the path, else ``kb=`` (repeatable), else all.

    Raises:
        InvalidNameError: a name breaks the naming rule.
        InvalidArgumentError: more than ``MAX_KBS`` names.
    """
    if "kb" in request.path_params:
        return kb_name(request)
    names = [name for name in request.query_params.getlist("kb") if name not in ("", "*")]
    if not names:
        return "*"
    if len(names) > MAX_KBS:
        raise InvalidArgumentError(
            f"{len(names)} knowledge bases named; the limit is {MAX_KBS}.",
            hint="Leave 'kb' out to search every knowledge base.",
        )
    return [validate_kb_name(name) for name in names]


# The query parameters of the filters, each a key of the core's ``SearchFilters`` (the MCP tools'
# ``filters``); the repeatable ones are lists.
_FILTER_LISTS = {"tag": "tags", "format": "formats"}
_FILTER_TEXTS = ("path_prefix", "created_after", "created_before", "updated_after", "updated_before")
MAX_FILTER_VALUES = 100
FILTER_PARAMS = (*_FILTER_LISTS, *_FILTER_TEXTS)


def filters(request: Request) -> dict[str, Any] | None:
    """The document filters of a search or listing: ``tag=`` and ``format=`` (repeatable),
    ``path_prefix=``, ``created_after=``, ``created_before=``, ``updated_after=``, ``updated_before=``.

    An empty ``path_prefix=`` or time is left out, as a form's blank box sends it; an empty ``tag=``
    or ``format=`` is passed on, so the core refuses it as the MCP tools do (it is no tag, and leaving
    it out would answer for every document). None when no filter is given. The core checks the values.

    Raises:
        InvalidArgumentError: a value too long or holding NUL, or too many of one parameter.
    """
    found: dict[str, Any] = {}
    for name, key in _FILTER_LISTS.items():
        values = request.query_params.getlist(name)
        if len(values) > MAX_FILTER_VALUES:
            raise InvalidArgumentError(
                f"{len(values)} '{name}' values given; the limit is {MAX_FILTER_VALUES}.",
                hint="Filter by fewer values.",
            )
        for value in values:
            _check_text(name, value, 4096)
        if values:
            found[key] = values
    for name in _FILTER_TEXTS:
        value = query_text(request, name, max_chars=4096)
        if value:
            found[name] = value
    return found or None


def _check_text(name: str, raw: str, max_chars: int) -> None:
    if len(raw) > max_chars:
        raise InvalidArgumentError(
            f"'{name}' is {len(raw)} characters long; the limit is {max_chars}.", hint="Use a shorter value."
        )
    if "\x00" in raw:
        raise InvalidArgumentError(f"'{name}' holds a NUL character.", hint="Send plain text.")
