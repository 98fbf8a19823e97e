"""MarkItDown adapter: PDF, Office documents, HTML, EPUB, notebooks and Outlook mail.

``markitdown`` is imported on first use only (it pulls in magika, pandas and friends), and its
exceptions are mapped here, where they enter our code.
"""

from __future__ import annotations

import io
import threading
import warnings
from typing import Any

from coffer_mcp.errors import EngineUnavailableError, IngestRejectedError

from ._stdout import stdout_to_stderr

__all__ = ["MARKITDOWN_EXTENSIONS", "MarkItDownConverter"]

MARKITDOWN_EXTENSIONS = frozenset({"pdf", "docx", "pptx", "xlsx", "xls", "html", "htm", "epub", "ipynb", "msg"})
# extension -> the markitdown pip extra that provides its dependencies
_EXTRAS = {
    "pdf": "pdf",
    "docx": "docx",
    "pptx": "pptx",
    "xlsx": "xlsx",
    "xls": "xls",
    "msg": "outlook",
}
_MAX_DETAIL_CHARS = 200


class MarkItDownConverter:
    """Converts through one lazily built ``MarkItDown`` that only knows the formats we route to it.

    Built-in converters are registered by hand rather than with ``enable_builtins``: the stock
    set ends with a plain-text fallback that would "convert" a corrupt PDF into its raw bytes.
    """

    name = "markitdown"
    extensions = MARKITDOWN_EXTENSIONS

    def __init__(self) -> None:
        self._engine: Any = None
        self._lock = threading.Lock()

    def can_handle(self, ext: str) -> bool:
        return ext in self.extensions

    def convert(self, data: bytes, filename: str) -> str:
        ext = filename.rpartition(".")[2].lower()
        engine = self._load(ext)
        from markitdown import StreamInfo

        info = StreamInfo(extension="." + ext, filename=filename)
        with stdout_to_stderr():
            try:
                result = engine.convert_stream(io.BytesIO(data), stream_info=info)
            except MemoryError:
                raise
            except Exception as exc:  # a parser fed untrusted bytes can raise anything
                raise _map_failure(exc, filename, ext) from exc
        return result.markdown or ""

    def _load(self, ext: str) -> Any:
        if self._engine is None:
            with self._lock:
                if self._engine is None:
                    self._engine = _build_engine(ext)
        return self._engine


def _build_engine(ext: str) -> Any:
    try:
        # Its import warns about optional audio tools (ffmpeg) we never use; keep that quiet.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import markitdown
            from markitdown import converters as mc
    except ImportError as exc:
        raise EngineUnavailableError(
            f"The MarkItDown engine is not installed, so .{ext} files cannot be converted.",
            hint=f"Install it with: {_pip_install(ext)}. Markdown, text, code and CSV files keep working.",
        ) from exc
    with stdout_to_stderr():
        engine = markitdown.MarkItDown(enable_builtins=False, enable_plugins=False)
    engine.register_converter(mc.HtmlConverter(), priority=markitdown.PRIORITY_GENERIC_FILE_FORMAT)
    for converter in (
        mc.DocxConverter(),
        mc.XlsxConverter(),
        mc.XlsConverter(),
        mc.PptxConverter(),
        mc.IpynbConverter(),
        mc.PdfConverter(),
        mc.OutlookMsgConverter(),
        mc.EpubConverter(),
    ):
        engine.register_converter(converter)
    return engine


def _map_failure(exc: Exception, filename: str, ext: str) -> IngestRejectedError:
    from markitdown import MissingDependencyException

    attempts = getattr(exc, "attempts", None) or []
    causes = [a.exc_info[1] for a in attempts if a.exc_info is not None] or [exc]
    if any(isinstance(cause, MissingDependencyException) for cause in causes):
        return EngineUnavailableError(
            f"The MarkItDown converter for .{ext} files is missing a dependency.",
            hint=f"Install it with: {_pip_install(ext)}. Other formats keep working.",
        )
    return IngestRejectedError(
        "conversion_failed",
        f"Could not read {filename!r} as a .{ext} file: {_shorten(causes[-1])}",
        hint=f"The file may be damaged, truncated, password-protected or not really .{ext}; "
        "open and re-save it (or export it to PDF) and ingest it again.",
    )


def _pip_install(ext: str) -> str:
    extra = _EXTRAS.get(ext)
    return f"pip install 'markitdown[{extra}]'" if extra else "pip install markitdown"


def _shorten(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    detail = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    return detail if len(detail) <= _MAX_DETAIL_CHARS else detail[: _MAX_DETAIL_CHARS - 1] + "…"
