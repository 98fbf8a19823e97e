"""Tool arguments that break a tool's input schema, as ``invalid_argument`` errors in plain words.

The SDK validates arguments with pydantic before a tool body runs; its message is pydantic's
report (type names, a documentation URL). Here each refused argument is named, with what the
published input schema allows, so the model can correct the call from the error alone. The
schema is the one ``tools/list`` publishes, so what is refused and what is advertised agree.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from coffer_mcp.errors import InvalidArgumentError
from coffer_mcp.mcp_server._common import NO_NUL

__all__ = ["describe", "invalid_arguments", "unknown_arguments"]

_SHOWN_VALUE = 40  # characters of a refused value echoed back


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


def invalid_arguments(tool: str, schema: Mapping[str, Any], exc: ValidationError) -> InvalidArgumentError:
    """The SDK's validation failure as one error naming each refused argument and what it allows."""
    properties = schema.get("properties", {})
    problems: dict[str, str] = {}
    for error in exc.errors(include_url=False):
        name = str(error["loc"][0]) if error["loc"] else ""
        if name not in problems:  # a union reports one error per member; the schema covers them all
            problems[name] = _problem(error, properties.get(name, {}))
    message = "; ".join(f"'{name}' {problem}" for name, problem in problems.items())
    hints = [
        _advice(name, properties[name], required=name in schema.get("required", ()))
        for name in problems
        if name in properties
    ]
    noun = "argument" if len(problems) == 1 else "arguments"
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
    if kind in ("integer", "number"):
        return ("an integer" if kind == "integer" else "a number") + _range(prop.get("minimum"), prop.get("maximum"))
    if kind == "boolean":
        return "true or false"
    if kind == "string":
        return "a string" + _length(prop.get("minLength"), prop.get("maxLength")) + _pattern(prop.get("pattern"))
    if kind == "array":
        return f"a list (each item {describe(prop.get('items', {}))})"
    return "a value of the documented type"


def _problem(error: Mapping[str, Any], prop: Mapping[str, Any]) -> str:
    if error["type"] == "missing":
        return "is required"
    return f"must be {describe(prop)}, not {_shown(error.get('input'))}"


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
