"""YAML frontmatter: the metadata half of a truth file.

A document file is ``---\\n<yaml mapping>---\\n\\n<markdown body>\\n``. The body is stored and
hashed stripped of surrounding whitespace, so an editor that adds or removes a final newline
does not count as an edit.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from typing import Any

import yaml

__all__ = ["body_sha256", "parse_document", "render_document"]

# libyaml's C loader and dumper are ~10x faster than the pure-Python ones; same output.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
_OPEN = "---\n"
_CLOSE_MARKERS = ("\n---\n", "\n---\r\n", "\n...\n")


def body_sha256(body: str) -> str:
    """The ``content_sha256`` of a Markdown body."""
    return hashlib.sha256(body.strip().encode("utf-8", "surrogatepass")).hexdigest()


def render_document(metadata: dict[str, Any], body: str) -> str:
    """The full text of a document file."""
    header = yaml.dump(metadata, Dumper=_DUMPER, sort_keys=False, allow_unicode=True, width=10_000)
    return f"{_OPEN}{header}---\n\n{body.strip()}\n"


def parse_document(text: str) -> tuple[dict[str, Any] | None, str]:
    """Split a document file into (frontmatter, body).

    The frontmatter is ``None`` when the file has none or it is not a YAML mapping (a user
    may have mangled it in an editor); the body is then everything after the block, or the
    whole file when there is no block at all.
    """
    text = text.lstrip("\ufeff")
    if not text.startswith(_OPEN) and not text.startswith("---\r\n"):
        return None, text.strip()
    head_start = text.index("\n") + 1
    for marker in _CLOSE_MARKERS:
        end = text.find(marker, head_start - 1)
        if end != -1:
            break
    else:
        return None, text.strip()
    header, body = text[head_start:end], text[end + len(marker) :]
    try:
        meta = yaml.load(header, Loader=_LOADER)  # noqa: S506 - a safe loader
    except yaml.YAMLError:
        return None, body.strip()
    if not isinstance(meta, dict):
        return None, body.strip()
    return {str(k): _plain(v) for k, v in meta.items()}, body.strip()


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
