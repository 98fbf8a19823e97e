"""YAML frontmatter: the metadata half of a truth file.

A document file is ``---\\n<yaml mapping>---\\n\\n<markdown body>\\n``. The body is stored and
hashed stripped of surrounding whitespace, so an editor that adds or removes a final newline
does not count as an edit.

Frontmatter may come from anyone (a file dropped into ``docs/``, a pack), so it is parsed within
bounds: at most ``MAX_FRONTMATTER_CHARS``, no YAML anchors or aliases (an 894-byte "billion
laughs" block of nested aliases otherwise expands to 10⁸ items: minutes, gigabytes of memory and
of index), and at most ``MAX_FRONTMATTER_DEPTH`` levels of nesting. A block beyond these bounds is
ignored like a mangled one: the document keeps its body and counts as edited outside Coffer.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from typing import Any

import yaml

__all__ = [
    "MAX_FRONTMATTER_CHARS",
    "MAX_FRONTMATTER_DEPTH",
    "UnsafeFrontmatterError",
    "body_line_offset",
    "body_sha256",
    "frontmatter_problem",
    "load_bounded_yaml",
    "parse_document",
    "render_document",
]

MAX_FRONTMATTER_CHARS = 64 * 1024
MAX_FRONTMATTER_DEPTH = 16

# libyaml's C loader and dumper are ~10x faster than the pure-Python ones; same output.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
_OPEN = "---\n"
# The block ends at its first line that is "---" or "..." alone: followed by a line break or by
# the end of the file (an editor that adds no final newline, a body deleted by hand).
_CLOSE = re.compile(r"^(?:---|\.\.\.)[ \t]*(?:\r?\n|\r?\Z)", re.MULTILINE)
_OPENERS = (
    yaml.BlockMappingStartToken,
    yaml.BlockSequenceStartToken,
    yaml.FlowMappingStartToken,
    yaml.FlowSequenceStartToken,
)
_CLOSERS = (yaml.BlockEndToken, yaml.FlowMappingEndToken, yaml.FlowSequenceEndToken)


class UnsafeFrontmatterError(ValueError):
    """A frontmatter block beyond the parser's bounds (size, aliases, nesting); ``body`` follows it."""

    def __init__(self, reason: str, body: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.body = body


def body_sha256(body: str) -> str:
    """The ``content_sha256`` of a Markdown body."""
    return hashlib.sha256(body.strip().encode("utf-8", "surrogatepass")).hexdigest()


def render_document(metadata: dict[str, Any], body: str) -> str:
    """The full text of a document file (never with YAML aliases: the parser refuses them)."""
    header = yaml.dump(metadata, Dumper=_NoAliasDumper, sort_keys=False, allow_unicode=True, width=10_000)
    return f"{_OPEN}{header}---\n\n{body.strip()}\n"


class _NoAliasDumper(_DUMPER):  # type: ignore[misc,valid-type]
    """Writes a value shared twice in the metadata out twice, instead of as an anchor and alias."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def frontmatter_problem(text: str, *, whole: bool = False) -> str | None:
    """Why a document's frontmatter block (``whole``: a whole YAML file) is beyond bounds, or None."""
    try:
        if whole:
            _check_bounds(text, "")
        else:
            _split_and_load(text)
    except UnsafeFrontmatterError as exc:
        return exc.reason
    return None


def parse_document(text: str) -> tuple[dict[str, Any] | None, str]:
    """Split a document file into (frontmatter, body).

    The frontmatter is ``None`` when the file has none, it is not a YAML mapping (a user may
    have mangled it in an editor) or it is beyond the parser's bounds; the body is then
    everything after the block, or the whole file when there is no block at all.
    """
    try:
        return _split_and_load(text)
    except UnsafeFrontmatterError as exc:
        return None, exc.body


def body_line_offset(text: str) -> int:
    """How many lines of a document file come before its body's first line (frontmatter, blank lines).

    Line ``n`` of the body (1-based, as ``parse_document`` returns it) is line ``n + offset`` of the
    file, lines ending at ``\\n``.
    """
    text = text.lstrip("\ufeff")
    rest = _split(text)[1]
    start = len(text) - len(text[rest:].lstrip())  # the body is stripped: its first non-blank character
    return text.count("\n", 0, start)


def _split(text: str) -> tuple[str | None, int]:
    """The frontmatter block's text (None without a block) and where the rest of ``text`` begins."""
    if not text.startswith(_OPEN) and not text.startswith("---\r\n"):
        return None, 0
    head_start = text.index("\n") + 1
    close = _CLOSE.search(text, head_start)
    if close is None:
        return None, 0
    return text[head_start : close.start()], close.end()


def _split_and_load(text: str) -> tuple[dict[str, Any] | None, str]:
    text = text.lstrip("\ufeff")
    header, rest = _split(text)
    if header is None:
        return None, text.strip()
    body = text[rest:]
    try:
        _check_bounds(header, body.strip())
        meta = yaml.load(header, Loader=_LOADER)  # noqa: S506 - a safe loader
    except (yaml.YAMLError, RecursionError):
        return None, body.strip()
    if not isinstance(meta, dict):
        return None, body.strip()
    return {str(k): _plain(v) for k, v in meta.items()}, body.strip()


def load_bounded_yaml(text: str) -> Any:
    """Parse a small YAML file of the store (``kb.yaml``) within the frontmatter's bounds.

    Raises:
        UnsafeFrontmatterError: the text is too long, uses anchors or aliases, or nests too deeply.
        yaml.YAMLError: the text is not YAML.
    """
    _check_bounds(text, "")
    return yaml.load(text, Loader=_LOADER)  # noqa: S506 - a safe loader


def _check_bounds(header: str, body: str) -> None:
    """Refuse a header that is too long, uses anchors or aliases, or nests too deeply.

    Runs libyaml's scanner only (no objects are built), so the check itself is bounded by the
    header's length.
    """
    if len(header) > MAX_FRONTMATTER_CHARS:
        raise UnsafeFrontmatterError(f"the frontmatter is over {MAX_FRONTMATTER_CHARS:,} characters", body)
    depth = 0
    for token in yaml.scan(header, Loader=_LOADER):
        if isinstance(token, (yaml.AliasToken, yaml.AnchorToken)):
            raise UnsafeFrontmatterError("the frontmatter uses YAML anchors or aliases", body)
        if isinstance(token, _OPENERS):
            depth += 1
            if depth > MAX_FRONTMATTER_DEPTH:
                raise UnsafeFrontmatterError(f"the frontmatter nests over {MAX_FRONTMATTER_DEPTH} levels", body)
        elif isinstance(token, _CLOSERS):
            depth -= 1


def _plain(value: Any) -> Any:
    """YAML may hand back dates for unquoted timestamps; keep everything JSON-friendly."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.timezone.utc)
        return value.astimezone(dt.timezone.utc).isoformat().replace("+00:00", "Z")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value
