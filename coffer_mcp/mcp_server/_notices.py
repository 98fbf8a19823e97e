"""Notices for the user of a client: documents a write left without vectors (a degraded embed).

A write that cannot embed still succeeds (the document is searchable by keyword at once), so the
tool result alone does not show it; and while the provider cools down after a failure, Coffer
does not call it at all, so no error is logged either. Counting the knowledge base's degraded
documents before and after each write catches every such case, whatever the write was.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from coffer_mcp.errors import CofferError

if TYPE_CHECKING:
    from coffer_mcp.mcp_server._runner import Job
    from coffer_mcp.services import Coffer

__all__ = ["degraded_documents", "reporting_degraded"]

T = TypeVar("T")


def reporting_degraded(job: Job, kb: str | None, call: Callable[[], T]) -> T:
    """Run ``call`` (a write to ``kb``); warn the user when it left more documents without vectors."""
    before = degraded_documents(job.service, kb) or 0  # None: no vectors wanted (yet), so none missing
    result = call()
    after = degraded_documents(job.service, kb)
    if after is not None and after > before:
        job.notify("warning", degraded_message(kb or "", after - before, after))
    return result


def degraded_documents(service: Coffer, kb: str | None) -> int | None:
    """How many documents of ``kb`` lack current vectors; None when it has no vector search (or no such KB)."""
    if not kb:
        return None
    try:
        _, config = service.open_kb(kb)
    except CofferError:
        return None
    model = service.registry.wanted_model(config)
    if not model:  # vector off, or no embedder: nothing is expected, so nothing is degraded
        return None
    return service.index.kb_counts(kb, model).degraded


def degraded_message(kb: str, new: int, total: int) -> str:
    """The warning for ``new`` more degraded documents of ``kb`` (``total`` now)."""
    documents, them = ("1 document", "it") if new == 1 else (f"{new} documents", "them")
    return (
        f"{documents} of '{kb}' could not be embedded (the embedding provider failed, or is cooling down after a "
        f"failure), so searches find {them} by keyword only for now. Coffer embeds the documents that wait on later "
        f"reads, or all at once with a reindex; '{kb}' has {total} waiting (documents_degraded in its metrics)."
    )
