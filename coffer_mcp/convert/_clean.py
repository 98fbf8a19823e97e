"""Normalize converter output into tidy Markdown: the one cleaning pass every engine shares."""

from __future__ import annotations

import re
import unicodedata

from coffer_mcp.store.markdown import split_fences

__all__ = ["clean_markdown", "cleaned_line", "normalize_newlines"]

# C0 controls except \t and \n (\r is normalized before), DEL, C1 controls, lone surrogates and
# the two noncharacters that usually mean a broken decode. A BOM inside text is dropped too.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\ufeff\ufffe\uffff]")
_BLANK_RUNS = re.compile(r"\n{3,}")

# Inline code spans are matched first and kept, so `<!-- -->` written as code survives. Spaces
# after a removed piece go with it, so "a <!-- x --> b" becomes "a b".
_BOILERPLATE = re.compile(
    r"""
      (?P<code>(?<!`)(?P<ticks>`+)(?!`)[^`]+?(?<!`)(?P=ticks)(?!`))
    | (?: <!--.*?-->
        | <(?P<tag>script|style|noscript)\b[^>]*>.*?</(?P=tag)\s*>
        | !?\[\]\([^()\s]*(?:\s+"[^"\n]*")?\)
      ) [ \t]*
    """,
    re.DOTALL | re.IGNORECASE | re.VERBOSE,
)
_BOILERPLATE_HINTS = ("<!--", "<script", "<style", "<noscript", "[](")


def clean_markdown(text: str) -> str:
    """Normalize Markdown text produced by any converter.

    Newlines become ``\\n``, text is NFC-normalized, control characters and lone surrogates are
    removed, trailing whitespace is stripped, HTML comments / ``<script>`` / ``<style>`` blocks and
    empty links are dropped outside code, runs of blank lines outside code collapse to one, and
    leading/trailing blank lines go.

    Args:
        text: Markdown (or plain text) from a converter.

    Returns:
        The cleaned text ending in a single newline, or ``""`` when nothing is left.
    """
    # str methods rather than regexes where possible: a 1 MB document should take milliseconds.
    text = _CONTROL.sub("", normalize_newlines(text))
    text = unicodedata.normalize("NFC", text)
    text = _rstrip_lines(text)
    lowered = text.lower()
    boilerplate = any(hint in lowered for hint in _BOILERPLATE_HINTS)
    if boilerplate or "\n\n\n" in text:  # only then is the fence-aware pass needed
        text = "".join(
            segment if is_code else _clean_prose(segment, boilerplate) for is_code, segment in split_fences(text)
        )
    text = text.strip("\n")
    return text + "\n" if text else ""


def normalize_newlines(text: str) -> str:
    """``text`` with every line break as cleaning counts them (CRLF, CR, U+2028, U+2029) a ``\\n``."""
    for newline in ("\r\n", "\r", "\u2028", "\u2029"):
        text = text.replace(newline, "\n")
    return text


def cleaned_line(line: str) -> str:
    """One line (of ``normalize_newlines``' text) as cleaning leaves it when it keeps it whole."""
    return unicodedata.normalize("NFC", _CONTROL.sub("", line)).rstrip()


def _clean_prose(segment: str, boilerplate: bool) -> str:
    if boilerplate:
        segment = _rstrip_lines(_BOILERPLATE.sub(_keep_code_spans, segment))
    if segment.startswith("\n\n"):  # blank lines right after a code block
        segment = "\n" + segment.lstrip("\n")
    return _BLANK_RUNS.sub("\n\n", segment) if "\n\n\n" in segment else segment


def _rstrip_lines(text: str) -> str:
    return "\n".join([line.rstrip() for line in text.split("\n")])


def _keep_code_spans(match: re.Match[str]) -> str:
    return match.group("code") or ""
