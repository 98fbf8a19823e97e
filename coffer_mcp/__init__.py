"""Coffer MCP: a local-first knowledge base served over the Model Context Protocol.

The Python API is the core service every surface wraps::

    from coffer_mcp import Coffer, load_settings

    with Coffer(load_settings(home="/tmp/coffer")) as coffer:
        coffer.create_kb("notes")
        coffer.add_document("notes", "hello.md", "# Hello\\n\\nWorld")
        print(coffer.search("notes", "world").passages)
"""

from __future__ import annotations

__version__ = "0.1.0"

from coffer_mcp.errors import CofferError
from coffer_mcp.services import Coffer
from coffer_mcp.settings import Settings, load_settings

__all__ = ["Coffer", "CofferError", "Settings", "__version__", "load_settings"]
