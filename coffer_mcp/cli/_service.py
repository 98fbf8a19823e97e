"""The core for one command, opened for that command alone and closed when it is done."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

from coffer_mcp.cli._output import NOTES
from coffer_mcp.errors import CofferError

if TYPE_CHECKING:
    import logging

    from coffer_mcp.services import Coffer
    from coffer_mcp.settings import Settings

__all__ = ["service"]


@contextlib.contextmanager
def service(settings: Settings, args: argparse.Namespace) -> Iterator[Coffer]:
    """The core for one command; whether it may embed depends on the command (``Command.embeds``).

    Only the commands that search or embed embed documents that are due; when their embedder
    fails they say so once, in one line, after their output. Every other command reads with
    ``embed_on_read_seconds`` 0: listing or describing never loads a model.
    """
    from coffer_mcp.index import open_index
    from coffer_mcp.services import Coffer

    command = getattr(args, "command", None)
    embeds = command is not None and command.embeds
    if not embeds:
        # Listing, reading or describing must not spend seconds loading a model, or fail to offline.
        settings = settings.model_copy(update={"embed_on_read_seconds": 0.0})
    index = open_index(settings, short_lived=True)  # a search scans where a server would build an ANN graph
    with Coffer(settings, index=index) as coffer, _quiet_embedding_failures(settings, enabled=embeds):
        yield coffer
        if embeds:
            _note_embedding_trouble(coffer)


@contextlib.contextmanager
def _quiet_embedding_failures(settings: Settings, *, enabled: bool) -> Iterator[None]:
    """Hold back the per-document embedding warnings: ``_note_embedding_trouble`` says it once.

    At ``log_level`` INFO or DEBUG they still show, for whoever asked for the detail.
    """
    import logging  # loaded by the core already; imported here so that --help does not load it

    logger = logging.getLogger("coffer_mcp.indexing.vectorize")
    level = logging.getLevelName(settings.log_level.upper())
    if enabled and isinstance(level, int) and level > logging.INFO:
        logger.addFilter(_drop)
    try:
        yield
    finally:
        logger.removeFilter(_drop)


def _drop(record: logging.LogRecord) -> bool:
    return False


def _note_embedding_trouble(coffer: Coffer) -> None:
    try:
        error = getattr(coffer.embedder, "last_error", None)
    except CofferError:  # a broken embedding configuration: the command's own error says it
        return
    if error:
        text = error if len(error) <= 160 else error[:159] + "…"
        NOTES.append(f"note: embedding failed, so search is keyword-only for now: {text} (see 'coffer doctor')")
