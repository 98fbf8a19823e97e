"""Tool arguments that break a tool's input schema, as ``invalid_argument`` errors in plain words.

The SDK validates arguments with pydantic before a tool body runs; its message is pydantic's
report (type names, a documentation URL). Here each refused argument is named, with what the
published input schema allows, so the model can correct the call from the error alone. The
schema is the one ``tools/list`` publishes, so what is refused and what is advertised agree.
A refused part of an argument is named by its path: ``'filters' has no key 'tag'``,
``'filters' key 'created_after' is refused: ...``, ``'tags' item 0 must be ...``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import ValidationError

from coffer_mcp.errors import InvalidArgumentError, validation_message
from coffer_mcp.mcp_server._common import NO_NUL
from coffer_mcp.models import FILTER_HINT

__all__ = ["describe", "invalid_arguments", "mistyped_arguments", "unknown_arguments"]

_SHOWN_VALUE = 40  # characters of a refused value echoed back
_HINTS = {"filters": FILTER_HINT}  # arguments whose schema says less than a sentence can


def unknown_arguments(
    tool: str, schema: Mapping[str, Any], arguments: Mapping[str, Any]
) -> InvalidArgumentError | None:
    """An error naming the arguments ``schema`` does not declare, or None when there are none.

    A misspelt optional argument (``topk`` for ``top_k``) would otherwise be dropped silently and
    the call would run with the default.
    """
    accepted = list(schema.get("properties", {}))
    unknown = [key for key in arguments if key not in accepted]
    if not unknown:
        return None
    names = ", ".join(f"'{key[:_SHOWN_VALUE]}'" for key in unknown)
    return InvalidArgumentError(
        f"{tool} has no argument {names}.",
        hint=f"Accepted arguments: {', '.join(accepted) or 'none'}.",
    )


# A JSON value of each JSON-schema type. An integer may be written 2.0 (JSON Schema counts it), never true.
_JSON_TYPES: dict[str, Callable[[object], bool]] = {
    "integer": lambda v: (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, float) and v.is_integer()),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "string": lambda v: isinstance(v, str),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
    "null": lambda v: v is None,
}


def mistyped_arguments(
    tool: str, schema: Mapping[str, Any], arguments: Mapping[str, Any]
) -> InvalidArgumentError | None:
    """An error naming the arguments whose JSON type the schema does not allow, or None.

    The SDK's pydantic validation is lax: it takes ``"2"`` and ``true`` for the integer 2 and 1,
    and ``"yes"`` for true, so a client's mistake would run as some other call than it meant.
    """
    properties, required = schema.get("properties", {}), schema.get("required", ())
    wrong = {
        name: value
        for name, value in arguments.items()
        if name in properties and not (value is None and name not in required) and not _fits(properties[name], value)
    }  # an optional argument passed as null means left out
    if not wrong:
        return None
    message = "; ".join(
        f"'{name}' must be {describe(properties[name])}, not {_shown(value)}" for name, value in wrong.items()
    )
    hint = " ".join(_advice(name, properties[name], required=name in required) for name in wrong)
    noun = "argument" if len(wrong) == 1 else "arguments"
    return InvalidArgumentError(f"Invalid {noun} for {tool}: {message}.", hint=hint)


def _fits(prop: Mapping[str, Any], value: object) -> bool:
    """Whether ``value`` is of a JSON type ``prop`` allows (what else it requires is the SDK's to check)."""
    if "anyOf" in prop:
        return any(_fits(option, value) for option in prop["anyOf"])
    kinds = prop.get("type")
    if kinds is None:  # a reference or a bare enum: left to the SDK
        return True
    kinds = [kinds] if isinstance(kinds, str) else kinds
    return any(_JSON_TYPES.get(kind, lambda _: True)(value) for kind in kinds)


def invalid_arguments(tool: str, schema: Mapping[str, Any], exc: ValidationError) -> InvalidArgumentError:
    """The SDK's validation failure as one error naming each refused argument and what it allows."""
    properties = schema.get("properties", {})
    problems: dict[tuple[Any, ...], str] = {}
    for error in exc.errors(include_url=False):
        name, *rest = tuple(error["loc"]) or ("",)
        steps, part = _locate(properties.get(str(name), {}), rest, schema.get("$defs", {}))
        loc = (name, *steps)
        if loc not in problems:  # a union reports one error per member; the schema covers them all
            problems[loc] = _problem(error, loc, part)
    names = list(dict.fromkeys(str(loc[0]) for loc in problems))
    message = "; ".join(problems.values())
    hints = [
        _HINTS.get(name) or _advice(name, properties[name], required=name in schema.get("required", ()))
        for name in names
        if name in properties
    ]
    noun = "argument" if len(names) == 1 else "arguments"
    hint = " ".join(hints) or f"See the input schema of {tool} in tools/list."
    return InvalidArgumentError(f"Invalid {noun} for {tool}: {message}.", hint=hint)


def describe(prop: Mapping[str, Any]) -> str:
    """What a JSON-schema property allows, in words: "an integer from 1 to 20"."""
    if "anyOf" in prop:
        kinds = [describe(option) for option in prop["anyOf"] if option.get("type") != "null"]
        nullable = len(kinds) < len(prop["anyOf"])
        return " or ".join(kinds) + (", or null" if nullable else "")
    if "enum" in prop or "const" in prop:
        return "one of " + ", ".join(json.dumps(value) for value in prop.get("enum", [prop.get("const")]))
    kind = prop.get("type")
    if "$ref" in prop or kind == "object":
        return "an object"
    if kind in ("integer", "number"):
        return ("an integer" if kind == "integer" else "a number") + _range(prop.get("minimum"), prop.get("maximum"))
    if kind == "boolean":
        return "true or false"
    if kind == "string":
        return "a string" + _length(prop.get("minLength"), prop.get("maxLength")) + _pattern(prop.get("pattern"))
    if kind == "array":
        return f"a list (each item {describe(prop.get('items', {}))})"
    return "a value of the documented type"


def _where(loc: tuple[Any, ...]) -> str:
    """How a message names the refused argument or part of one: 'filters' key 'tags' item 0."""
    name, *steps = loc
    path = "".join(f" item {step}" if isinstance(step, int) else f" key '{str(step)[:_SHOWN_VALUE]}'" for step in steps)
    return f"'{name}'{path}"


def _locate(prop: Mapping[str, Any], path: list[Any], defs: Mapping[str, Any]) -> tuple[list[Any], Mapping[str, Any]]:
    """The steps of ``path`` into an argument (an object's key, a list's item) and the schema there.

    Pydantic also names the member of a union that refused the value (``kb.str``): such a step,
    which is no key of the schema, is left out, and the union's schema stays. An unknown key
    (refused as not accepted) is kept, with no schema.
    """
    steps: list[Any] = []
    found: Mapping[str, Any]
    for step in path:
        options = [prop, *prop.get("anyOf", ())]
        options = [defs.get(str(o["$ref"]).rsplit("/", 1)[-1], {}) if "$ref" in o else o for o in options]
        if isinstance(step, int):
            found = next((o["items"] for o in options if "items" in o), {})
        elif any("properties" in o for o in options):
            found = next((o["properties"][step] for o in options if step in o.get("properties", {})), {})
        elif "anyOf" in prop:
            continue  # a union member's name
        else:
            found = {}
        steps.append(step)
        prop = found
    return steps, prop


def _problem(error: Mapping[str, Any], loc: tuple[Any, ...], prop: Mapping[str, Any]) -> str:
    where = _where(loc)
    if error["type"] == "missing":
        return f"{where} is required"
    if error["type"] == "extra_forbidden" and len(loc) > 1:
        return f"{_where(loc[:-1])} has no key '{str(loc[-1])[:_SHOWN_VALUE]}'"
    if error["type"] == "value_error":  # a check of the value itself: its message says what is wrong
        return f"{where} is refused: " + validation_message(error)
    if not prop:
        return f"{where} is refused: {error['msg']}"
    return f"{where} must be {describe(prop)}, not {_shown(error.get('input'))}"


def _advice(name: str, prop: Mapping[str, Any], *, required: bool) -> str:
    if required:
        default = ""
    elif prop.get("default") is None:  # an optional argument without a default passes nothing when left out
        default = ", or leave it out"
    else:
        default = f", or leave it out for the default {json.dumps(prop['default'])}"
    return f"Pass {name} as {describe(prop)}{default}."


def _shown(value: object) -> str:
    text = json.dumps(value, default=repr)  # as the caller wrote it: JSON
    return text if len(text) <= _SHOWN_VALUE else text[: _SHOWN_VALUE - 1] + "…"


def _range(low: object, high: object) -> str:
    if low is not None and high is not None:
        return f" from {low} to {high}"
    if low is not None:
        return f" of at least {low}"
    return f" of at most {high}" if high is not None else ""


def _length(low: int | None, high: int | None) -> str:
    if low and high:
        return f" of {low} to {high} characters"
    if low:
        return f" of at least {low} character{'s' if low > 1 else ''}"
    return f" of at most {high} characters" if high else ""


def _pattern(pattern: str | None) -> str:
    if pattern is None:
        return ""
    return " without NUL characters" if pattern == NO_NUL else f" matching the regular expression {pattern}"
