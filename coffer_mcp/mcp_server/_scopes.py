"""What an OAuth token's scopes let a client see and call (the HTTP surface checks first).

A token holds ``coffer:read``, ``coffer:write`` or ``coffer:admin`` (each with the ones below it);
each tool needs one (``TOOL_SCOPES``, from the registry). ``tools/list`` shows a client only the
tools its token may call, and a call beyond them is refused with ``insufficient_scope``. Over
HTTP such a call never gets here: the guard answers it with 403 and a ``WWW-Authenticate``
challenge naming the scope, which is what MCP clients act on (they ask the user for a token with
it). This is the same rule once more, for a message that reached the server another way.
"""

from __future__ import annotations

from typing import Any

from mcp.server.context import CallNext, ServerRequestContext

from coffer_mcp.errors import CofferError, InsufficientScopeError
from coffer_mcp.mcp_server._registry import TOOL_SCOPES
from coffer_mcp.mcp_server._runner import GRANTED_SCOPES_KEY

__all__ = ["beyond_scope", "hide_tools_beyond_scope"]


def beyond_scope(name: str, granted: frozenset[str] | None) -> CofferError | None:
    """Why a token holding ``granted`` may not call tool ``name`` (None: it may, or no token is in play)."""
    needed = TOOL_SCOPES.get(name)
    if granted is None or needed is None or needed.value in granted:
        return None
    return InsufficientScopeError(
        f"{name} needs the {needed.value} scope, which this client's token does not hold.",
        hint=f"Sign in again granting {needed.value} (the client asks when the server answers 403).",
    )


async def hide_tools_beyond_scope(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> Any:
    """Server middleware: ``tools/list`` without the tools the request's token may not call."""
    result = await call_next(ctx)
    if ctx.method != "tools/list" or not isinstance(result, dict):
        return result
    granted = getattr(ctx.request, "scope", {}).get(GRANTED_SCOPES_KEY)
    if not isinstance(granted, frozenset):
        return result
    tools = [tool for tool in result.get("tools", []) if beyond_scope(str(tool.get("name")), granted) is None]
    return {**result, "tools": tools}
