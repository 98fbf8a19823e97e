"""Documents as MCP resources: their ``coffer://<kb>/<document id>`` URIs, written and parsed here only."""

from __future__ import annotations

from coffer_mcp.errors import CofferError
from coffer_mcp.store import is_document_id, stored_document_id, validate_kb_name

__all__ = ["DOCUMENT_TEMPLATE", "SCHEME", "document_of", "document_uri"]

SCHEME = "coffer"
DOCUMENT_TEMPLATE = f"{SCHEME}://{{kb}}/{{doc_id}}"


def document_uri(kb: str, doc_id: str) -> str:
    """The resource URI of a document."""
    return f"{SCHEME}://{kb}/{doc_id}"


def document_of(uri: str) -> tuple[str, str] | None:
    """The knowledge base and document id a resource URI names, None when it names no document."""
    scheme, _, rest = uri.partition("://")
    kb, _, doc_id = rest.partition("/")
    if scheme != SCHEME or not is_document_id(doc_id):
        return None
    try:
        return validate_kb_name(kb), stored_document_id(doc_id)
    except CofferError:
        return None
