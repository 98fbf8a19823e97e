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

__all__ = ["degraded_documents", "embedding_failure", "reporting_degraded", "waiting_message"]

T = TypeVar("T")


def reporting_degraded(job: Job, kb: str | None, call: Callable[[], T], *, embeds: bool = False) -> T:
    """Run ``call`` (a write to ``kb``); warn the user when it left more documents without vectors.

    A write whose job is to embed (``embeds``: a reindex, new chunk or vector settings) warns
    whenever it leaves any without, even as many as before: it tried to embed them and could not.
    """
    before = degraded_documents(job.service, kb) or 0  # None: no vectors wanted (yet), so none missing
    result = call()
    after = degraded_documents(job.service, kb)
    if after is not None and after > before:
        job.notify("warning", degraded_message(kb or "", after - before, after))
    elif embeds and after:
        job.notify("warning", waiting_message(job.service, kb or "", after))
    return result


def waiting_message(service: Coffer, kb: str, total: int) -> str:
    """What to tell about ``total`` documents of ``kb`` left without vectors by a call that embeds.

    The reason is the provider's last failure, as the CLI's note gives it (``last_error``).
    """
    documents, them = ("1 document", "it") if total == 1 else (f"{total} documents", "them")
    error = embedding_failure(service)
    why = f" (the embedding provider failed: {error})" if error else " (the embedding provider failed, or cools down)"
    return (
        f"{documents} of '{kb}' could not be embedded{why}, so searches find {them} by keyword only for now. "
        f"Check the provider (coffer doctor); once it works, later reads or a reindex embed {them}."
    )


def embedding_failure(service: Coffer) -> str | None:
    """The provider's last failure since its last success, shortened; None when none (or not known)."""
    try:
        error = getattr(service.embedder, "last_error", None)
    except CofferError:  # a broken embedding configuration: nothing embeds, and the call said why
        return None
    if not isinstance(error, str) or not error:
        return None
    return error if len(error) <= 300 else error[:299] + "…"


def degraded_documents(service: Coffer, kb: str | None) -> int | None:
    """How many documents of ``kb`` lack current vectors; None when it has no vector search (or no such KB)."""
    return service.degraded_count(kb) if kb else None


def degraded_message(kb: str, new: int, total: int) -> str:
    """The warning for ``new`` more degraded documents of ``kb`` (``total`` now)."""
    documents, them = ("1 document", "it") if new == 1 else (f"{new} documents", "them")
    return (
        f"{documents} of '{kb}' could not be embedded (the embedding provider failed, or is cooling down after a "
        f"failure), so searches find {them} by keyword only for now. Coffer embeds the documents that wait on later "
        f"reads, or all at once with a reindex; '{kb}' has {total} waiting (documents_degraded in its metrics)."
    )
