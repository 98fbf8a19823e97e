"""What goes on the wire to a model: lean tool results and lean input schemas.

A result goes out twice, as ``structuredContent`` and as its JSON text for clients that ignore
structure; either may be what a model reads, so both are the same lean object: compact JSON
(``indent=2`` made a search result 13 % longer), and an optional field left out when it holds its
empty default (null, [] or {}), which its output schema declares. Input schemas lose pydantic's
``title``s (each repeats the property's name) and the ``null`` choice of an optional argument
(leaving the argument out is how to pass nothing): an eighth of ``tools/list``, which a client
sends to its model on every turn. Measured in docs/benchmarks.md, "Lean results".
"""

from __future__ import annotations

import json
from typing import Any

from mcp.types import CallToolResult, TextContent
from pydantic import BaseModel
from pydantic.fields import FieldInfo

__all__ = ["compact_json", "input_schema", "tool_result"]

# Keywords whose value is data, not a schema: a "title" inside them is not pydantic's.
_DATA_KEYWORDS = frozenset({"default", "const", "enum", "examples"})
_NULL = {"type": "null"}


def tool_result(result: BaseModel) -> CallToolResult:
    """``result`` as a tool's answer: structured content and the same object as compact JSON text."""
    data = _lean(result, result.model_dump(mode="json"))
    return CallToolResult(content=[TextContent(type="text", text=compact_json(data))], structured_content=data)


def compact_json(data: Any) -> str:
    """JSON without indentation or spaces, non-ASCII text as itself (``\\uXXXX`` is 6 characters each)."""
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def input_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A tool's published input schema, lean.

    No ``additionalProperties: false`` either (5 % of ``tools/list``): an unknown argument is refused
    all the same (``CofferServer.call_tool``), with the accepted ones in the hint.
    """
    lean = _untitled(schema)
    return {**lean, "properties": {name: _optional(prop) for name, prop in lean.get("properties", {}).items()}}


def _lean(value: Any, data: Any) -> Any:
    """``data`` (``value`` dumped as JSON) without the optional fields that hold their empty default."""
    if isinstance(value, BaseModel) and isinstance(data, dict):
        fields = type(value).model_fields
        return {
            key: _lean(getattr(value, key, None), item)
            for key, item in data.items()
            if key not in fields or not _empty_default(fields[key], item)
        }
    if isinstance(value, list | tuple) and isinstance(data, list):
        return [_lean(v, d) for v, d in zip(value, data, strict=False)]
    if isinstance(value, dict) and isinstance(data, dict):
        return {key: _lean(value.get(key), item) for key, item in data.items()}
    return data


def _empty_default(field: FieldInfo, item: Any) -> bool:
    if item is None:
        return not field.is_required() and field.default is None
    return item in ([], {}) and field.default_factory in (list, dict)


def _untitled(node: Any) -> Any:
    if isinstance(node, list):
        return [_untitled(item) for item in node]
    if not isinstance(node, dict):
        return node
    return {
        key: value if key in _DATA_KEYWORDS else _untitled(value)
        for key, value in node.items()
        if not (key == "title" and isinstance(value, str))  # a property named "title" maps to a dict
    }


def _optional(prop: dict[str, Any]) -> dict[str, Any]:
    """``anyOf [X, null]`` with default null becomes ``X``: an optional argument is one to leave out."""
    options = prop.get("anyOf")
    if not options or _NULL not in options or prop.get("default", ...) is not None:
        return prop
    rest = [option for option in options if option != _NULL]
    kept = {key: value for key, value in prop.items() if key not in ("anyOf", "default")}
    return {**kept, **(rest[0] if len(rest) == 1 else {"anyOf": rest})}
