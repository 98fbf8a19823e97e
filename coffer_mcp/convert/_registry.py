"""The converter registry: pick a converter by extension, guard size, convert, clean, title."""

from __future__ import annotations

from dataclasses import dataclass

from coffer_mcp.errors import IngestRejectedError
from coffer_mcp.settings import default_of

from ._base import Conversion, Converter
from ._clean import clean_markdown
from ._csv import CsvConverter
from ._documents import DocumentConverter, document_engine
from ._places import Mapped, Places, after_cleaning, heading_places, part_places
from ._sandbox import convert_in_sandbox
from ._text import PassthroughConverter
from ._title import derive_title, extension_of, safe_filename

__all__ = ["ConversionOptions", "convert", "engine_for", "supported_formats"]

# The settings' defaults, for callers that pass none (the service passes its settings').
_MAX_BYTES, _MAIN_CONTENT = default_of("max_document_bytes"), default_of("html_main_content")
_PASSTHROUGH, _CSV, _DOCUMENTS = PassthroughConverter(), CsvConverter(), DocumentConverter()
_CONVERTERS: tuple[Converter, ...] = (_PASSTHROUGH, _CSV, _DOCUMENTS)
_EXTENSIONS = sorted(_PASSTHROUGH.extensions | _CSV.extensions | _DOCUMENTS.extensions)
_EMPTY_HINT = "The file has no text to index; check that you picked the right file."
_LEGACY = {"doc": "docx", "ppt": "pptx", "rtf": "docx", "odt": "docx", "odp": "pptx", "ods": "xlsx"}


QUICK_BYTES = 1 << 20
"""Text and CSV files up to this size convert in about a millisecond (``quick_to_convert``)."""


def quick_to_convert(filename: str, size: int) -> bool:
    """Whether a file of this name and size converts quickly: text or CSV (no document converter)
    of at most ``QUICK_BYTES``. A folder ingest holds its write lock across such files only."""
    return size <= QUICK_BYTES and not _DOCUMENTS.can_handle(extension_of(safe_filename(filename) or ""))


def supported_formats() -> list[str]:
    """The file extensions (without dots) that ``convert`` accepts, sorted."""
    return list(_EXTENSIONS)


def convert(
    filename: str,
    data: bytes,
    *,
    max_bytes: int = _MAX_BYTES,
    timeout: float | None = None,
    memory_bytes: int = 0,
    html_main_content: bool = _MAIN_CONTENT,
) -> Conversion:
    """Convert one uploaded file to cleaned Markdown with a title.

    Checks run in order: empty bytes, unknown extension, size limit (before any conversion),
    then conversion and cleaning.

    Args:
        filename: The original filename; only its final component and extension are used.
        data: The file's bytes.
        max_bytes: The ``max_document_bytes`` limit.
        timeout: With a value, PDF, Office, HTML and the other heavy formats convert in a worker
            process that is killed
            after this many seconds (``conversion_failed``); None converts in this process.
        memory_bytes: The worker's address-space cap (0: none).
        html_main_content: Web pages keep only their main content (menus, footers and link
            lists dropped); False keeps the whole page.

    Raises:
        IngestRejectedError: ``empty``, ``unsupported_type``, ``too_large``, ``scanned_pdf`` or
            ``conversion_failed``; ``EngineUnavailableError`` when a converter library is missing.
    """
    name = safe_filename(filename) or "document"
    if not data:
        raise IngestRejectedError("empty", f"{name!r} is empty (0 bytes).", hint=_EMPTY_HINT)
    ext = extension_of(name)
    converter = _converter_for(ext, name)
    if len(data) > max_bytes:
        raise _too_large(name, len(data), max_bytes)
    raw: str | Mapped
    if converter is _DOCUMENTS and timeout is not None:
        raw = convert_in_sandbox(
            name, data, timeout=timeout, memory_bytes=memory_bytes, html_main_content=html_main_content
        )
    elif converter is _DOCUMENTS:
        raw = _DOCUMENTS.convert(data, name, html_main_content=html_main_content)
    else:
        raw = converter.convert(data, name)
    text = raw.markdown if isinstance(raw, Mapped) else raw
    markdown = clean_markdown(text)
    # A scan often keeps a text layer of page numbers only: no letters means no text.
    if not markdown or (ext == "pdf" and not any(ch.isalpha() for ch in markdown)):
        raise _nothing_left(name, ext)
    engine = engine_for(ext, html_main_content=html_main_content)
    return Conversion(markdown, derive_title(markdown, name), engine, ext, _places(ext, raw, markdown))


def _places(ext: str, raw: str | Mapped, markdown: str) -> Places:
    """Where each line of the cleaned ``markdown`` is in the original, as far as its converter knows."""
    if isinstance(raw, Mapped):
        return after_cleaning(raw.markdown, raw.places, markdown) if raw.places else ()
    if ext == "docx":
        return heading_places(markdown)
    if ext == "msg":
        return part_places(markdown)
    return ()


def engine_for(ext: str, *, html_main_content: bool = _MAIN_CONTENT) -> str:
    """The ``conversion_engine`` a file of this extension gets today (see ``Conversion.engine``).

    A document whose recorded engine differs was converted by an older converter (or with other
    options): re-converting its original gives different Markdown.
    """
    if _DOCUMENTS.can_handle(ext):
        return document_engine(ext, html_main_content=html_main_content)
    return _PASSTHROUGH.name if _PASSTHROUGH.can_handle(ext) else _CSV.name


@dataclass(frozen=True, slots=True)
class ConversionOptions:
    """How files are converted: the limits and choices of the settings, as one value.

    Ingest and the re-conversion of ``reindex --force`` share it, so the same file converts to
    the same Markdown and records the same ``conversion_engine`` on either path.
    """

    max_bytes: int = _MAX_BYTES
    timeout: float | None = None
    memory_bytes: int = 0
    html_main_content: bool = _MAIN_CONTENT

    def convert(self, filename: str, data: bytes) -> Conversion:
        """``convert`` with these options."""
        return convert(
            filename,
            data,
            max_bytes=self.max_bytes,
            timeout=self.timeout,
            memory_bytes=self.memory_bytes,
            html_main_content=self.html_main_content,
        )

    def engine(self, ext: str) -> str:
        """The ``conversion_engine`` a file of this extension gets with these options."""
        return engine_for(ext, html_main_content=self.html_main_content)


def _converter_for(ext: str, name: str) -> Converter:
    for converter in _CONVERTERS:
        if ext and converter.can_handle(ext):
            return converter
    if ext in _LEGACY:
        hint = f"Save it as .{_LEGACY[ext]} or .pdf and ingest that file instead."
    else:
        hint = "Supported formats: " + ", ".join(_EXTENSIONS) + "."
    kind = f".{ext} files are" if ext else "Files without an extension are"
    raise IngestRejectedError("unsupported_type", f"{kind} not supported ({name!r}).", hint=hint)


def _too_large(name: str, size: int, limit: int) -> IngestRejectedError:
    return IngestRejectedError(
        "too_large",
        f"{name!r} is {_human(size)}, over the {_human(limit)} limit.",
        hint=f"The limit is {limit} bytes; raise the max_document_bytes setting to allow larger "
        "files, or split the document.",
    )


def _nothing_left(name: str, ext: str) -> IngestRejectedError:
    if ext == "pdf":
        return IngestRejectedError(
            "scanned_pdf",
            f"{name!r} has no text layer: it looks scanned / image-only.",
            hint="Run OCR on it first, e.g. `ocrmypdf in.pdf out.pdf`, then ingest the result.",
        )
    message = f"{name!r} contains no text after conversion."
    return IngestRejectedError("empty", message, hint=_EMPTY_HINT)


def _human(size: int) -> str:
    if size < 1024:
        return f"{size} bytes"
    if size < 1024 * 1024:
        return f"{size / 1024:.1f} KB"
    return f"{size / (1024 * 1024):.1f} MB"
