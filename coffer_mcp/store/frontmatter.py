"""YAML frontmatter: the metadata half of a truth file.

A document file is ``---\\n<yaml mapping>---\\n\\n<markdown body>\\n``. The body is stored and
hashed stripped of surrounding whitespace, so an editor that adds or removes a final newline
does not count as an edit.

Frontmatter may come from anyone (a file dropped into ``docs/``, a pack), so it is parsed within
bounds: at most ``MAX_FRONTMATTER_CHARS``, no YAML anchors or aliases (an 894-byte "billion
laughs" block of nested aliases otherwise expands to 10⁸ items: minutes, gigabytes of memory and
of index), and at most ``MAX_FRONTMATTER_DEPTH`` levels of nesting.

A block that does not parse — a typo in YAML typed by hand, no closing ``---`` line, a value that
is not a mapping, a block beyond these bounds — gives no metadata, but is never taken for an
absent one: ``parse_frontmatter`` says what is wrong and where (the file's line and column), so
the document keeps its body while Coffer refuses to rewrite the file over the block.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import re
from typing import Any, NamedTuple

import yaml

__all__ = [
    "MAX_FRONTMATTER_CHARS",
    "MAX_FRONTMATTER_DEPTH",
    "ParsedDocument",
    "UnsafeFrontmatterError",
    "body_line_offset",
    "body_sha256",
    "frontmatter_problem",
    "load_bounded_yaml",
    "note_frontmatter",
    "parse_document",
    "parse_frontmatter",
    "render_document",
]

MAX_FRONTMATTER_CHARS = 64 * 1024
MAX_FRONTMATTER_DEPTH = 16

# libyaml's C loader and dumper are ~10x faster than the pure-Python ones; same output.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
_OPEN = "---\n"
_HEADER_LINE = 2  # the file's line of the block's first line: YAML's marks count from the block
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
    """A frontmatter block beyond the parser's bounds (size, aliases, nesting)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ParsedDocument(NamedTuple):
    """A document file split into its frontmatter and its body."""

    frontmatter: dict[str, Any] | None
    """The block's mapping; None without a block, with an empty one, or with one that does not parse."""
    body: str
    problem: str | None = None
    """Why the file's block does not parse (where, when YAML says); None when it does or there is none."""
    salvaged: dict[str, Any] | None = None
    """When the block does not parse: what its top-level entries that parse on their own say (a typo
    in the title leaves the tags, dates and source readable); None otherwise."""


def body_sha256(body: str) -> str:
    """The ``content_sha256`` of a Markdown body."""
    return hashlib.sha256(body.strip().encode("utf-8", "surrogatepass")).hexdigest()


def render_document(metadata: dict[str, Any], body: str) -> str:
    """The full text of a document file (never with YAML aliases: the parser refuses them)."""
    header = "".join(_entry(key, value) for key, value in metadata.items())
    return f"{_OPEN}{header}---\n\n{body.strip()}\n"


def _entry(key: Any, value: Any) -> str:
    """One top-level ``key: value`` entry of a block, exactly as PyYAML writes it.

    PyYAML's representer is Python and cost most of a small document's write (0.26 ms a document
    at load 2); the entries Coffer writes itself (ids, hashes, dates, file names, tags) are short
    words it would write plain or single-quoted, which take a few string checks here. Anything
    else is handed to PyYAML, one entry at a time (a block mapping's entries are independent).
    """
    if isinstance(key, str) and _plain_key(key):
        if isinstance(value, str):
            scalar = _scalar(value)
            if scalar is not None:
                return f"{key}: {scalar}\n"
        elif isinstance(value, list) and all(isinstance(item, str) for item in value):
            items = [_scalar(item) for item in value]
            if not items:
                return f"{key}: []\n"
            if None not in items:
                return f"{key}:\n" + "".join(f"- {item}\n" for item in items)
    return yaml.dump({key: value}, Dumper=_NoAliasDumper, sort_keys=False, allow_unicode=True, width=10_000)


# Strings PyYAML writes plain, unless its resolver reads them as another type (a date, a number,
# ``true``), when it single-quotes them: no indicator, no ": " or " #", no space at either end.
_WORD = re.compile(r"(?!.*: )[A-Za-z0-9_/][A-Za-z0-9_/.:+ -]{0,199}(?<![ :])")
_RESOLVER = yaml.resolver.Resolver()


def _scalar(value: str) -> str | None:
    """``value`` as PyYAML writes it in a block, or None when it is not a word this module writes."""
    if not _WORD.fullmatch(value):
        return None
    return value if _resolves_to_str(value) else f"'{value}'"


@functools.lru_cache(maxsize=256)
def _plain_key(key: str) -> bool:
    return _WORD.fullmatch(key) is not None and _resolves_to_str(key)


def _resolves_to_str(value: str) -> bool:
    return _RESOLVER.resolve(yaml.ScalarNode, value, (True, False)) == "tag:yaml.org,2002:str"


class _NoAliasDumper(_DUMPER):  # type: ignore[misc,valid-type]
    """Writes a value shared twice in the metadata out twice, instead of as an anchor and alias."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def frontmatter_problem(text: str, *, whole: bool = False) -> str | None:
    """Why a document's frontmatter block (``whole``: a whole YAML file) is beyond bounds, or None."""
    header = text if whole else _split(text.lstrip("\ufeff"))[0]
    try:
        _check_bounds(header or "")
    except UnsafeFrontmatterError as exc:
        return exc.reason
    return None


def parse_document(text: str) -> tuple[dict[str, Any] | None, str]:
    """Split a document file into (frontmatter, body), as ``parse_frontmatter`` does, without the problem."""
    return parse_frontmatter(text)[:2]


def parse_frontmatter(text: str) -> ParsedDocument:
    """Split a document file into its frontmatter, its body and what is wrong with its block.

    The body is everything after the block (the whole file when it has none), stripped. A block
    that is opened but never closed, that is not YAML, not a mapping or beyond the parser's bounds
    gives no frontmatter and a ``problem``: a user's typo, not a file without metadata.
    """
    text = text.lstrip("\ufeff")
    header, rest = _split(text)
    if header is None:
        unclosed = text.startswith((_OPEN, "---\r\n"))
        return ParsedDocument(None, text.strip(), "no '---' line closes the frontmatter" if unclosed else None)
    body = text[rest:].strip()
    try:
        _check_bounds(header)
        meta = yaml.load(header, Loader=_LOADER)  # noqa: S506 - a safe loader
    except UnsafeFrontmatterError as exc:
        return ParsedDocument(None, body, exc.reason)
    except yaml.YAMLError as exc:
        return ParsedDocument(None, body, _yaml_problem(exc), _salvaged(header))
    except RecursionError:
        return ParsedDocument(None, body, "the frontmatter nests too deeply")
    if meta is None:  # an empty block, or only comments: nothing to lose
        return ParsedDocument(None, body)
    if not isinstance(meta, dict):
        return ParsedDocument(None, body, f"the frontmatter is a YAML {_kind(meta)}, not 'key: value' lines")
    return ParsedDocument({str(k): _plain(v) for k, v in meta.items()}, body)


def note_frontmatter(text: str) -> tuple[dict[str, Any], str] | None:
    """A Markdown file's own frontmatter (a note from Obsidian, Jekyll, Hugo…) and the body after it.

    None when the file has no block, or one that is no mapping: ``---`` over a paragraph and
    another ``---`` is a thematic break and text, not metadata. A block with a YAML typo gives
    its top-level entries that parse on their own, as adopting a hand-made file does; an empty
    block gives an empty mapping.
    """
    if _split(text.lstrip("\ufeff"))[0] is None:
        return None
    meta, body, problem, salvaged = parse_frontmatter(text)
    found = meta if meta is not None else salvaged
    if found:
        return found, body
    return ({}, body) if problem is None else None


def _salvaged(header: str) -> dict[str, Any]:
    """The top-level entries of a block that does not parse, each parsed on its own; those that do
    not parse alone are left out. An entry is a line at the margin and the lines under it (indented,
    list items, comments, blank lines); only the block's bounds were checked, which hold for each."""
    entries: list[list[str]] = []
    for line in header.splitlines(keepends=True):
        if entries and (not line.strip() or line[0] in " \t#-"):
            entries[-1].append(line)
        else:
            entries.append([line])
    salvaged: dict[str, Any] = {}
    for entry in entries:
        try:
            value = yaml.load("".join(entry), Loader=_LOADER)  # noqa: S506 - a safe loader
        except (yaml.YAMLError, RecursionError):
            continue
        if isinstance(value, dict) and len(value) == 1:
            salvaged.update({str(k): _plain(v) for k, v in value.items()})
    return salvaged


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """One line on a YAML error, at the file's line and column (``line 4, column 5: …``)."""
    if not isinstance(exc, yaml.MarkedYAMLError) or exc.problem_mark is None:
        return f"the frontmatter is not valid YAML: {' '.join(str(exc).split())}"
    where = _mark(exc.problem_mark)
    context = f" ({exc.context} at line {_mark(exc.context_mark)})" if exc.context and exc.context_mark else ""
    return f"line {where}: {exc.problem}{context}"


def _mark(mark: Any) -> str:
    return f"{mark.line + _HEADER_LINE}, column {mark.column + 1}"


def _kind(value: Any) -> str:
    return "list" if isinstance(value, list) else "single value"


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


def load_bounded_yaml(text: str) -> Any:
    """Parse a small YAML file of the store (``kb.yaml``) within the frontmatter's bounds.

    Raises:
        UnsafeFrontmatterError: the text is too long, uses anchors or aliases, or nests too deeply.
        yaml.YAMLError: the text is not YAML.
    """
    _check_bounds(text)
    return yaml.load(text, Loader=_LOADER)  # noqa: S506 - a safe loader


def _check_bounds(header: str) -> None:
    """Refuse a header that is too long, uses anchors or aliases, or nests too deeply.

    Runs libyaml's scanner only (no objects are built), so the check itself is bounded by the
    header's length.
    """
    if len(header) > MAX_FRONTMATTER_CHARS:
        raise UnsafeFrontmatterError(f"the frontmatter is over {MAX_FRONTMATTER_CHARS:,} characters")
    depth = 0
    for token in yaml.scan(header, Loader=_LOADER):
        if isinstance(token, (yaml.AliasToken, yaml.AnchorToken)):
            raise UnsafeFrontmatterError("the frontmatter uses YAML anchors or aliases")
        if isinstance(token, _OPENERS):
            depth += 1
            if depth > MAX_FRONTMATTER_DEPTH:
                raise UnsafeFrontmatterError(f"the frontmatter nests over {MAX_FRONTMATTER_DEPTH} levels")
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
