"""Bytes to text for the text-like formats: UTF-8 first, then detection."""

from __future__ import annotations

import codecs

from coffer_mcp.errors import IngestRejectedError

__all__ = ["decode_text"]

_SNIFF_BYTES = 8192
_CP1252 = "cp1252"
# UTF-32 before UTF-16: the UTF-32-LE BOM starts with the UTF-16-LE one.
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


def decode_text(data: bytes, filename: str) -> str:
    """Decode text bytes: a UTF BOM wins, then UTF-8, then ``charset_normalizer``'s best guess.

    Raises:
        IngestRejectedError: ``unsupported_type`` when the bytes look binary (NUL bytes early
            on) or no text encoding fits.
    """
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return data.decode(encoding, errors="replace")
    if (nul := data.find(b"\x00", 0, _SNIFF_BYTES)) >= 0:
        raise _binary(filename, f"it holds a NUL byte (at byte {nul:,})")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        pass
    detected = _detect(data)
    if detected is None:
        raise _binary(filename)
    return data.decode(detected, errors="replace")


def _detect(data: bytes) -> str | None:
    import charset_normalizer  # lazy: only needed for non-UTF-8 input

    matches = list(charset_normalizer.from_bytes(data))
    if not matches:
        return None
    # charset_normalizer often ranks a Baltic or DOS code page first for short Western European
    # text; Windows-1252 is far more common, so take it when it reads (almost) as cleanly.
    for match in matches:
        if _CP1252 in match.could_be_from_charset and match.chaos <= matches[0].chaos + 0.1:
            return _CP1252
    return matches[0].encoding


def _binary(filename: str, why: str = "its bytes are binary or in no known encoding") -> IngestRejectedError:
    return IngestRejectedError(
        "unsupported_type",
        f"{filename!r} does not look like text: {why}.",
        hint="Check that the file extension matches the content; save text files as UTF-8.",
    )
