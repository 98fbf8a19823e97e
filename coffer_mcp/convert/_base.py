"""The converter port and the value it produces."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol

from coffer_mcp.errors import EngineUnavailableError

from ._places import Mapped, Places

__all__ = ["Conversion", "Converter", "ExtensionConverter", "engine_missing"]


@dataclass(frozen=True, slots=True)
class Conversion:
    """A document converted to cleaned Markdown.

    Attributes:
        markdown: Cleaned Markdown body; never empty.
        title: The first H1 outside code fences, else the filename stem.
        engine: Which converter produced it, and which version of it: ``passthrough``, ``csv``,
            ``markitdown``, ``pypdfium2/4``... (``engine_for``). A converter whose output changes
            gets a new value, so documents converted by the old one can be told apart.
        original_format: Lowercase extension without the dot, e.g. ``pdf``.
        places: Where each line of ``markdown`` is in the original (``store.locations``), one
            per line split at ``\\n``; empty when the conversion does not know.
    """

    markdown: str
    title: str
    engine: str
    original_format: str
    places: Places = ()


class Converter(Protocol):
    """Turns the bytes of one family of formats into Markdown (before cleaning).

    Implementations raise ``IngestRejectedError`` for input they cannot read and
    ``EngineUnavailableError`` when a library they need is missing. One that knows where its
    lines come from in the original returns them with the Markdown (``Mapped``).
    """

    name: str

    def can_handle(self, ext: str) -> bool: ...

    def convert(self, data: bytes, filename: str) -> str | Mapped: ...


class ExtensionConverter:
    """A converter that handles a fixed set of extensions (``extensions``)."""

    extensions: ClassVar[frozenset[str]] = frozenset()

    def can_handle(self, ext: str) -> bool:
        return ext in self.extensions


def engine_missing(engine: str, ext: str, install: str) -> EngineUnavailableError:
    """The error for a converter whose library is not installed: ``engine`` names it, ``install``
    is what to pip install; other formats keep working."""
    return EngineUnavailableError(
        f"The {engine} is not installed, so .{ext} files cannot be converted.",
        hint=f"Install it with: pip install {install}. Other formats keep working.",
    )
