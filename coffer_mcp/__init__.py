"""Coffer MCP: a local-first knowledge base served over the Model Context Protocol.

The Python API is the core service every surface wraps::

    from coffer_mcp import Coffer, load_settings

    with Coffer(load_settings(home="/tmp/coffer")) as coffer:
        coffer.create_kb("notes")
        coffer.add_document("notes", "hello.md", "# Hello\\n\\nWorld")
        print(coffer.search("notes", "world").passages)

The names are loaded on first use (PEP 562), so that ``import coffer_mcp`` costs nothing:
``coffer --version`` and the command line's parser import the package, not the core behind it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.1.0"

if TYPE_CHECKING:
    from coffer_mcp.errors import CofferError
    from coffer_mcp.services import Coffer
    from coffer_mcp.settings import Settings, load_settings

__all__ = ["Coffer", "CofferError", "Settings", "__version__", "load_settings"]

_HOMES = {
    "Coffer": "coffer_mcp.services",
    "CofferError": "coffer_mcp.errors",
    "Settings": "coffer_mcp.settings",
    "load_settings": "coffer_mcp.settings",
}
"""Where each public name lives: imported when it is first asked for."""


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'coffer_mcp' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # asked once: later look-ups find it without this function
    return value
