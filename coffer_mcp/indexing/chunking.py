"""Markdown -> chunks: boundary-aware, pure, stdlib only.

The body is parsed line by line into blocks (ATX headings, fenced code, tables, list groups,
paragraphs). Headings open sections and become each chunk's ``heading_path``; a chunk never spans
two sections and never contains a heading line. Within a section whole blocks are packed greedily
up to ``chunk_size`` characters, joined by a blank line. A paragraph or list group too big for one
chunk is cut at sentence ends (``.`` ``!`` ``?`` ``。`` ``！`` ``？`` ``；`` or a newline), and a
sentence too big for one chunk is hard-split, preferring whitespace. ``chunk_overlap`` characters
of prose (snapped forward to a word start) open the next chunk of the same section; overlap never
flows into or out of code or tables.

Fences and tables are never split and become their own chunk when they do not fit -- with one
deliberate exception: one larger than ``4 * chunk_size`` (a whole source file pasted as a fence)
is cut at line boundaries (blank lines preferred inside a fence) into pieces of at most
``2 * chunk_size`` characters of content, each re-wrapped to stay valid Markdown: a fence piece
reopens and closes with the original markers and info string, a table piece repeats the header
and separator rows. Without it one fence could become a single 60 KB passage.

Links and images keep only their text in chunks: ``[the report](https://…/q3.pdf)`` is indexed and
returned as ``the report``, ``![a chart](data:image/png;base64,…)`` as ``a chart`` (outside code
spans and fences). An address is not prose: it buries the words a passage is about (a converted
web page is often half link targets), and a search for a word that only appears inside one
should not find the page. The document's file keeps the links, and grep, which reads files,
still sees them. ``CHUNKING_VERSION`` names this behaviour; a document chunked by an older one
is chunked again by the next reconcile.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from coffer_mcp.models import Chunk
from coffer_mcp.settings import Settings, bound_of, default_of
from coffer_mcp.store.markdown import closes_fence, fence_opening

__all__ = ["CHUNKING_VERSION", "chunk_markdown"]

CHUNKING_VERSION = 2
"""Bumped whenever the same Markdown gives other chunks (2: link and image addresses left out)."""

_MIN_CHUNK_SIZE = bound_of(Settings, "chunk_size", "ge")
_HEADING = re.compile(r" {0,3}(#{1,6})(?:[ \t]+(.*))?")
_DELIMITER_ROW = re.compile(r"[ \t]*\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*")
_LIST_ITEM = re.compile(r"[ \t]*(?:[-*+]|\d{1,9}[.)])(?:[ \t]|$)")
# CommonMark lets only bullets and lists starting at 1 interrupt a paragraph ("2024. was ...").
_LIST_INTERRUPT = re.compile(r" {0,3}(?:[-*+]|1[.)])[ \t]+\S")
# A sentence runs to . ! ? before whitespace, to a CJK stop, or to the end of its line.
_SENTENCE = re.compile(r"(\s*)(\S.*?(?:[.!?](?=\s|\Z)|[。！？；]|(?=\n)|\Z))")
_CJK = re.compile(r"[\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef\U00020000-\U0002fa1f]")
# An inline link or image, ``[text](address "title")``; its text may hold one level of brackets
# (``[[1]](#cite)``). A code span is matched too, only to be kept whole.
_LINK = re.compile(
    r"(?P<code>(?<!`)(?P<ticks>`+)(?!`)[\s\S]+?(?<!`)(?P=ticks)(?!`))"
    r"|!?\[(?P<text>(?:[^\[\]]|\[[^\[\]]*\])*)\]"
    r"\((?P<to><[^<>\n]*>|[^()\s]*(?:\([^()\s]*\)[^()\s]*)*)(?:\s+(?:\"[^\"]*\"|'[^']*'|\([^()]*\)))?\s*\)"
)
# What makes the part in parentheses an address: a scheme (``https:``, ``data:``), a path, an
# anchor or query, a file or host name with a dot, or nothing at all. Science writes
# ``[Ca(2+)](i)`` and ``[M + K](+)`` too (SciFact has 12), and those are words, not links.
_ADDRESS = re.compile(r"<|[A-Za-z][A-Za-z0-9+.-]*:|[/#?.]|.*\w[./]\w|\Z")


@dataclass(frozen=True, slots=True)
class _Block:
    kind: str  # "heading" | "prose" | "fence" | "table"
    text: str  # for a heading: its title
    level: int = 0
    marker: str = ""  # a fence's opening run of backticks or tildes
    closed: bool = False


# The smallest piece the packer places -- a whole block, a sentence or a fragment -- as
# (text, sep, atomic): ``sep`` joins it to the unit before it in the same chunk; an ``atomic``
# unit (code, table) is never split further nor overlapped. A plain tuple, because a giant
# paragraph of tiny sentences makes hundreds of thousands of them.
_Unit = tuple[str, str, bool]


def chunk_markdown(
    markdown: str, chunk_size: int = default_of("chunk_size"), chunk_overlap: int = default_of("chunk_overlap")
) -> list[Chunk]:
    """Split a document's Markdown body into retrievable chunks.

    Args:
        markdown: The body, frontmatter already removed. CRLF and lone CR are accepted.
        chunk_size: Target maximum characters per chunk; at least the ``chunk_size`` setting's
            lower bound. Only a fence or table
            (up to ``4 * chunk_size``, or a re-wrapped piece of a larger one) may exceed it.
        chunk_overlap: Characters of prose repeated at the start of the next chunk of the same
            section; 0 disables it. Must be below ``chunk_size / 2``. Both default to the settings'
            defaults.

    Returns:
        Chunks with sequential 0-based positions; empty for a blank document. A document with
        text but no body blocks (only headings) yields one chunk of its stripped text.

    Raises:
        ValueError: If ``chunk_size`` or ``chunk_overlap`` is out of range.
    """
    _validate(chunk_size, chunk_overlap)
    text = markdown.replace("\r\n", "\n").replace("\r", "\n")
    chunks: list[Chunk] = []
    for path, blocks in _sections(_unlinked(_parse_blocks(text.split("\n")))):
        units = _units(blocks, chunk_size, chunk_overlap)
        for body in _pack(units, chunk_size, chunk_overlap):
            chunks.append(Chunk(position=len(chunks), text=body, heading_path=path))
    if not chunks and text.strip():
        return [Chunk(position=0, text=_link_text(text).strip() or text.strip())]
    return chunks


def _validate(chunk_size: int, chunk_overlap: int) -> None:
    if chunk_size < _MIN_CHUNK_SIZE:
        raise ValueError(f"chunk_size must be at least {_MIN_CHUNK_SIZE}, got {chunk_size}")
    if chunk_overlap < 0 or 2 * chunk_overlap >= chunk_size:
        raise ValueError(
            f"chunk_overlap must be >= 0 and below chunk_size / 2 ({chunk_size / 2:g}), got {chunk_overlap}"
        )


# --- parsing -------------------------------------------------------------------------------


def _parse_blocks(lines: list[str]) -> list[_Block]:
    blocks: list[_Block] = []
    i = 0
    while i < len(lines):
        if not lines[i].strip():
            i += 1
            continue
        for reader in (_read_fence, _read_heading, _read_table, _read_list):
            found = reader(lines, i)
            if found is not None:
                break
        else:
            found = _read_paragraph(lines, i)
        block, i = found
        blocks.append(block)
    return blocks


def _read_fence(lines: list[str], i: int) -> tuple[_Block, int] | None:
    marker = fence_opening(lines[i])
    if marker is None:
        return None
    for j in range(i + 1, len(lines)):
        if closes_fence(lines[j], marker):
            return _Block("fence", "\n".join(lines[i : j + 1]), marker=marker, closed=True), j + 1
    # An unclosed fence runs to the end of the document, as CommonMark says.
    return _Block("fence", "\n".join(lines[i:]).rstrip(), marker=marker), len(lines)


def _read_heading(lines: list[str], i: int) -> tuple[_Block, int] | None:
    match = _HEADING.fullmatch(lines[i])
    if match is None:
        return None
    title = (match[2] or "").strip()
    # A closing run of '#' counts only when set off by whitespace ("C#" keeps its '#').
    trimmed = title.rstrip("#")
    if not trimmed or trimmed[-1] in " \t":
        title = trimmed.strip()
    return _Block("heading", title, level=len(match[1])), i + 1


def _read_table(lines: list[str], i: int) -> tuple[_Block, int] | None:
    if not _starts_table(lines, i):
        return None
    j = i + 1
    while j < len(lines) and "|" in lines[j] and lines[j].strip():
        if _HEADING.fullmatch(lines[j]) or fence_opening(lines[j]):
            break
        j += 1
    return _Block("table", "\n".join(lines[i:j]).rstrip()), j


def _read_list(lines: list[str], i: int) -> tuple[_Block, int] | None:
    if not _LIST_ITEM.match(lines[i]):
        return None
    j = i + 1
    while j < len(lines):
        line = lines[j]
        if line.strip():
            # Indented lines and lazy continuation lines belong to the item above.
            if line[0] in " \t" or _LIST_ITEM.match(line) or not _starts_leaf(lines, j):
                j += 1
                continue
            break
        k = j
        while k < len(lines) and not lines[k].strip():
            k += 1
        if k == len(lines) or not (lines[k][0] in " \t" or _LIST_ITEM.match(lines[k])):
            break
        j = k
    return _Block("prose", "\n".join(lines[i:j]).rstrip()), j


def _read_paragraph(lines: list[str], i: int) -> tuple[_Block, int]:
    j = i + 1
    while j < len(lines) and lines[j].strip():
        if _starts_leaf(lines, j) or _LIST_INTERRUPT.match(lines[j]):
            break
        j += 1
    return _Block("prose", "\n".join(lines[i:j]).rstrip()), j


def _starts_leaf(lines: list[str], i: int) -> bool:
    line = lines[i]
    return bool(_HEADING.fullmatch(line) or fence_opening(line) or _starts_table(lines, i))


def _starts_table(lines: list[str], i: int) -> bool:
    line = lines[i]
    if line.lstrip().startswith("|"):
        return True
    return "|" in line and i + 1 < len(lines) and _is_delimiter_row(lines[i + 1])


def _is_delimiter_row(line: str) -> bool:
    return "|" in line and _DELIMITER_ROW.fullmatch(line) is not None


def _unlinked(blocks: list[_Block]) -> list[_Block]:
    """The blocks with each link and image reduced to its text (fences left as they are).

    A paragraph that was only an image without alt text is left out.
    """
    kept = (block if block.kind == "fence" else _replace(block, _link_text(block.text)) for block in blocks)
    return [block for block in kept if block.kind == "heading" or block.text.strip()]


def _replace(block: _Block, text: str) -> _Block:
    return block if text is block.text else _Block(block.kind, text, block.level, block.marker, block.closed)


def _link_text(text: str) -> str:
    """``text`` with ``[t](a)`` and ``![t](a)`` as ``t``; an image inside a link needs a second pass."""
    for _ in range(3):
        if "](" not in text:
            break
        text = _LINK.sub(_link_or_code, text)
    return text


def _link_or_code(match: re.Match[str]) -> str:
    if match["code"] or not _ADDRESS.match(match["to"]):
        return match[0]
    return match["text"]


def _sections(blocks: list[_Block]) -> Iterator[tuple[tuple[str, ...], list[_Block]]]:
    stack: list[tuple[int, str]] = []
    path: tuple[str, ...] = ()
    body: list[_Block] = []
    for block in blocks:
        if block.kind != "heading":
            body.append(block)
            continue
        if body:
            yield path, body
        body = []
        while stack and stack[-1][0] >= block.level:
            stack.pop()
        stack.append((block.level, block.text))
        path = tuple(title for _, title in stack)
    if body:
        yield path, body


# --- splitting into units ------------------------------------------------------------------


def _units(blocks: list[_Block], size: int, overlap: int) -> list[_Unit]:
    units: list[_Unit] = []
    for block in blocks:
        if block.kind == "prose":
            units.extend(_prose_units(block.text, size, overlap))
            continue
        if len(block.text) <= 4 * size:
            pieces = [block.text]
        elif block.kind == "fence":
            pieces = _split_fence(block, size)
        else:
            pieces = _split_table(block.text, size)
        units.extend((piece, "\n\n", True) for piece in pieces)
    return units


def _prose_units(text: str, size: int, overlap: int) -> list[_Unit]:
    if len(text) <= size:
        return [(text, "\n\n", False)]
    sentences = [(m[2].rstrip(), m[1]) for m in _SENTENCE.finditer(text)]
    sentences[0] = (sentences[0][0], "\n\n")
    # Fragments leave room for the overlap so a hard-split run still carries context.
    limit = size - overlap - 1 if overlap else size
    units: list[_Unit] = []
    for sentence, sep in sentences:
        if len(sentence) <= size:
            units.append((sentence, sep, False))
        else:
            units.extend(_fragments(sentence, limit, sep))
    return units


def _fragments(text: str, limit: int, sep: str) -> Iterator[_Unit]:
    start = 0
    while start < len(text):
        end = _hard_cut(text, start, limit)
        head = text[start:end].rstrip()
        yield head, sep, False
        rest = start + len(head)
        start = end
        while start < len(text) and text[start].isspace():
            start += 1
        sep = text[rest:start]


def _hard_cut(text: str, start: int, limit: int) -> int:
    """End of the piece from ``start``: at most ``limit`` chars, at whitespace if past half."""
    end = start + limit
    if end >= len(text):
        return len(text)
    for k in range(end, start + limit // 2, -1):
        if text[k].isspace():
            return k
    return end


def _split_fence(block: _Block, size: int) -> list[str]:
    lines = block.text.split("\n")
    opener = lines[0].strip()
    closer = lines[-1].strip() if block.closed else block.marker
    body = lines[1:-1] if block.closed else lines[1:]
    if not body or len(opener) + len(closer) > size:
        return _line_groups(lines, 2 * size, prefer_blank=True)
    groups = _line_groups(body, 2 * size, prefer_blank=True)
    return [f"{opener}\n{group}\n{closer}" for group in groups]


def _split_table(text: str, size: int) -> list[str]:
    lines = text.split("\n")
    head = 2 if len(lines) > 1 and _is_delimiter_row(lines[1]) else 1
    header = "\n".join(lines[:head])
    # A header bigger than a chunk is not worth repeating in every piece.
    if len(lines) <= head or len(header) > size:
        return _line_groups(lines, 2 * size, prefer_blank=False)
    return [f"{header}\n{group}" for group in _line_groups(lines[head:], 2 * size, False)]


def _line_groups(lines: list[str], limit: int, prefer_blank: bool) -> list[str]:
    """Pack lines into groups of at most ``limit`` chars, cutting at a late blank line if asked."""
    groups: list[list[str]] = []
    current: list[str] = []
    length = 0
    blank, blank_length = -1, 0  # the last blank line in ``current`` and the length before it
    for line in _capped_lines(lines, limit):
        while current and length + 1 + len(line) > limit:
            if prefer_blank and blank > 0 and 2 * blank_length >= limit:
                groups.append(current[:blank])
                current = current[blank + 1 :]
            else:
                groups.append(current)
                current = []
            length = sum(map(len, current)) + max(len(current) - 1, 0)
            blank = -1
        if not line.strip():
            blank, blank_length = len(current), length
        length += len(line) + (1 if current else 0)
        current.append(line)
    groups.append(current)
    joined = ("\n".join(group) for group in groups)
    return [group for group in joined if group.strip()]


def _capped_lines(lines: list[str], limit: int) -> Iterator[str]:
    for line in lines:
        start = 0
        while len(line) - start > limit:
            end = _hard_cut(line, start, limit)
            yield line[start:end]
            start = end
        yield line[start:]


# --- packing -------------------------------------------------------------------------------


def _pack(units: list[_Unit], size: int, overlap: int) -> list[str]:
    """Greedily fill chunks with units, opening each prose chunk with the previous one's tail."""
    chunks: list[str] = []
    parts: list[str] = []
    length = 0
    prose_run = ""  # the end of the open chunk's trailing prose: where an overlap comes from
    for text, sep, atomic in units:
        if parts and length + len(sep) + len(text) <= size:
            parts += (sep, text)
            length += len(sep) + len(text)
            run = prose_run + sep + text
        else:
            if parts:
                chunks.append(_tidy("".join(parts)))
            budget = 0 if atomic else min(overlap, size - len(text) - 1)
            tail = _overlap_tail(prose_run, budget)
            parts = [tail, "\n" if "\n" in sep else " ", text] if tail else [text]
            length = sum(map(len, parts))
            run = "".join(parts)
        prose_run = "" if atomic or not overlap else run[-(overlap + 1) :]
    if parts:
        chunks.append(_tidy("".join(parts)))
    return [chunk for chunk in chunks if chunk]


def _overlap_tail(text: str, budget: int) -> str:
    """The last ``budget`` chars of ``text``, moved forward to a word start (CJK: as is)."""
    if budget <= 0 or not text:
        return ""
    start = max(len(text) - budget, 0)
    if (
        start > 0
        and not (text[start - 1].isspace() or text[start].isspace())
        and not (_CJK.match(text[start]) or _CJK.match(text[start - 1]))
    ):
        space = next((k for k in range(start, len(text)) if text[k].isspace()), -1)
        if space < 0:
            return ""
        start = space
    return text[start:].strip()


def _tidy(text: str) -> str:
    """Strip leading blank lines and trailing whitespace, keeping the first line's indent."""
    return re.sub(r"\A(?:[ \t]*\n)+", "", text).rstrip()
