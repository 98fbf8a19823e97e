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

import dataclasses
import re
from bisect import bisect_left
from collections import deque
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


@dataclass(slots=True)  # not frozen: made once per block, and a frozen one costs twice as much to make
class _Block:
    kind: str  # "heading" | "prose" | "fence" | "table"
    text: str  # for a heading: its title
    level: int = 0
    marker: str = ""  # a fence's opening run of backticks or tildes
    closed: bool = False
    first: int = 0  # its first and last line in the body (0-based)
    last: int = 0


# The smallest piece the packer places -- a whole block, a sentence or a fragment -- as
# (text, sep, atomic, first, last): ``sep`` joins it to the unit before it in the same chunk; an
# ``atomic`` unit (code, table) is never split further nor overlapped; ``first`` and ``last`` are
# the body lines it comes from (0-based). A plain tuple, because a giant paragraph of tiny
# sentences makes hundreds of thousands of them.
_Unit = tuple[str, str, bool, int, int]


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
        Chunks with sequential 0-based positions and the body lines they come from (``lines``,
        1-based: a chunk's own and those of the overlap it opens with); empty for a blank
        document. A document with text but no body blocks (only headings) yields one chunk of
        its stripped text.

    Raises:
        ValueError: If ``chunk_size`` or ``chunk_overlap`` is out of range.
    """
    _validate(chunk_size, chunk_overlap)
    text = markdown.replace("\r\n", "\n").replace("\r", "\n")
    chunks: list[Chunk] = []
    lines = text.split("\n")
    for path, blocks in _sections(_unlinked(_parse_blocks(lines))):
        units = _units(blocks, chunk_size, chunk_overlap)
        for body, first, last in _pack(units, chunk_size, chunk_overlap):
            chunks.append(Chunk(position=len(chunks), text=body, heading_path=path, lines=(first + 1, last + 1)))
    if not chunks and text.strip():
        return [Chunk(position=0, text=_link_text(text).strip() or text.strip(), lines=(1, len(lines)))]
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
            return _Block("fence", "\n".join(lines[i : j + 1]), 0, marker, True, i, j), j + 1
    # An unclosed fence runs to the end of the document, as CommonMark says.
    return _Block("fence", "\n".join(lines[i:]).rstrip(), 0, marker, False, i, len(lines) - 1), len(lines)


def _read_heading(lines: list[str], i: int) -> tuple[_Block, int] | None:
    match = _HEADING.fullmatch(lines[i])
    if match is None:
        return None
    title = (match[2] or "").strip()
    # A closing run of '#' counts only when set off by whitespace ("C#" keeps its '#').
    trimmed = title.rstrip("#")
    if not trimmed or trimmed[-1] in " \t":
        title = trimmed.strip()
    return _Block("heading", title, len(match[1]), "", False, i, i), i + 1


def _read_table(lines: list[str], i: int) -> tuple[_Block, int] | None:
    if not _starts_table(lines, i):
        return None
    j = i + 1
    while j < len(lines) and "|" in lines[j] and lines[j].strip():
        if _HEADING.fullmatch(lines[j]) or fence_opening(lines[j]):
            break
        j += 1
    return _Block("table", "\n".join(lines[i:j]).rstrip(), 0, "", False, i, j - 1), j


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
    return _Block("prose", "\n".join(lines[i:j]).rstrip(), 0, "", False, i, j - 1), j


def _read_paragraph(lines: list[str], i: int) -> tuple[_Block, int]:
    j = i + 1
    while j < len(lines) and lines[j].strip():
        if _starts_leaf(lines, j) or _LIST_INTERRUPT.match(lines[j]):
            break
        j += 1
    return _Block("prose", "\n".join(lines[i:j]).rstrip(), 0, "", False, i, j - 1), j


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
    return block if text is block.text else dataclasses.replace(block, text=text)


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
            units.extend(_prose_units(block, size, overlap))
            continue
        if len(block.text) <= 4 * size:
            pieces = [(block.text, block.first, block.last)]
        elif block.kind == "fence":
            pieces = _split_fence(block, size)
        else:
            pieces = _split_table(block, size)
        units.extend((piece, "\n\n", True, first, last) for piece, first, last in pieces)
    return units


def _prose_units(block: _Block, size: int, overlap: int) -> list[_Unit]:
    text = block.text
    if len(text) <= size:
        return [(text, "\n\n", False, block.first, block.last)]
    breaks = [m.start() for m in re.finditer("\n", text)]

    def line(offset: int) -> int:  # the body line of a character of the block (links made text keep their lines)
        return min(block.first + bisect_left(breaks, offset), block.last)

    sentences = [(m[2].rstrip(), m[1], m.start(2)) for m in _SENTENCE.finditer(text)]
    sentences[0] = (sentences[0][0], "\n\n", sentences[0][2])
    # Fragments leave room for the overlap so a hard-split run still carries context.
    limit = size - overlap - 1 if overlap else size
    units: list[_Unit] = []
    for sentence, sep, at in sentences:
        if len(sentence) <= size:
            units.append((sentence, sep, False, line(at), line(at + len(sentence) - 1)))
        else:
            for piece, piece_sep, start in _fragments(sentence, limit, sep):
                units.append((piece, piece_sep, False, line(at + start), line(at + start + len(piece) - 1)))
    return units


def _fragments(text: str, limit: int, sep: str) -> Iterator[tuple[str, str, int]]:
    """Pieces of a sentence too long for a chunk: (text, sep, where it starts in ``text``)."""
    start = 0
    while start < len(text):
        end = _hard_cut(text, start, limit)
        head = text[start:end].rstrip()
        yield head, sep, start
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


# A piece of a block cut at lines: its text and its first and last body line.
_Piece = tuple[str, int, int]


def _split_fence(block: _Block, size: int) -> list[_Piece]:
    lines = block.text.split("\n")
    opener = lines[0].strip()
    closer = lines[-1].strip() if block.closed else block.marker
    body = lines[1:-1] if block.closed else lines[1:]
    if not body or len(opener) + len(closer) > size:
        return _line_groups(lines, block.first, 2 * size, prefer_blank=True)
    groups = _line_groups(body, block.first + 1, 2 * size, prefer_blank=True)
    return [(f"{opener}\n{group}\n{closer}", first, last) for group, first, last in groups]


def _split_table(block: _Block, size: int) -> list[_Piece]:
    """Pieces of a long table, each repeating its header; a piece's lines are those of its own rows."""
    lines = block.text.split("\n")
    head = 2 if len(lines) > 1 and _is_delimiter_row(lines[1]) else 1
    header = "\n".join(lines[:head])
    # A header bigger than a chunk is not worth repeating in every piece.
    if len(lines) <= head or len(header) > size:
        return _line_groups(lines, block.first, 2 * size, prefer_blank=False)
    groups = _line_groups(lines[head:], block.first + head, 2 * size, False)
    return [(f"{header}\n{group}", first, last) for group, first, last in groups]


def _line_groups(lines: list[str], first: int, limit: int, prefer_blank: bool) -> list[_Piece]:
    """Pack lines (body lines ``first``, ``first + 1``, ...) into groups of at most ``limit`` chars,
    cutting at a late blank line if asked."""
    groups: list[list[tuple[str, int]]] = []
    current: list[tuple[str, int]] = []
    length = 0
    blank, blank_length = -1, 0  # the last blank line in ``current`` and the length before it
    for line, number in _capped_lines(lines, first, limit):
        while current and length + 1 + len(line) > limit:
            if prefer_blank and blank > 0 and 2 * blank_length >= limit:
                groups.append(current[:blank])
                current = current[blank + 1 :]
            else:
                groups.append(current)
                current = []
            length = sum(len(text) for text, _ in current) + max(len(current) - 1, 0)
            blank = -1
        if not line.strip():
            blank, blank_length = len(current), length
        length += len(line) + (1 if current else 0)
        current.append((line, number))
    groups.append(current)
    joined = (("\n".join(text for text, _ in group), group) for group in groups if group)
    return [(text, group[0][1], group[-1][1]) for text, group in joined if text.strip()]


def _capped_lines(lines: list[str], first: int, limit: int) -> Iterator[tuple[str, int]]:
    for number, line in enumerate(lines, first):
        start = 0
        while len(line) - start > limit:
            end = _hard_cut(line, start, limit)
            yield line[start:end], number
            start = end
        yield line[start:], number


# --- packing -------------------------------------------------------------------------------


def _pack(units: list[_Unit], size: int, overlap: int) -> list[_Piece]:
    """Greedily fill chunks with units, opening each prose chunk with the previous one's tail.

    Each chunk comes with the first and last body line of its units and of the tail it opens with.
    """
    chunks: list[_Piece] = []
    parts: list[str] = []
    length = top = bottom = 0  # the open chunk's length, and its first and last line
    prose_run = ""  # the end of the open chunk's trailing prose: where an overlap comes from
    # The units that end in ``prose_run``, as (where they end, first line, last line): offsets count
    # from the open chunk's start (``end`` is where ``prose_run`` ends), so nothing shifts per unit.
    recent: deque[tuple[int, int, int]] = deque()
    end = 0
    for text, sep, atomic, first, last in units:
        if parts and length + len(sep) + len(text) <= size:
            parts += (sep, text)
            length += len(sep) + len(text)
            run = prose_run + sep + text
            end += len(sep) + len(text)
            bottom = max(bottom, last)
        else:
            if parts:
                chunks.append((_tidy("".join(parts)), top, bottom))
            budget = 0 if atomic else min(overlap, size - len(text) - 1)
            tail, start = _overlap_tail(prose_run, budget)
            top, bottom = first, last
            if tail:  # its lines: those of the units it is cut from
                at = end - len(prose_run) + start
                carried = [(f, la) for stop, f, la in recent if stop > at]
                top, bottom = min(top, *(f for f, _ in carried)), max(bottom, *(la for _, la in carried))
            parts = [tail, "\n" if "\n" in sep else " ", text] if tail else [text]
            length = sum(map(len, parts))
            run = "".join(parts)
            end = len(run)
            recent = deque([(len(tail), top, bottom)]) if tail else deque()
        if atomic or not overlap:
            prose_run = ""
            recent.clear()
            continue
        recent.append((end, first, last))
        prose_run = run[-(overlap + 1) :]
        while recent and recent[0][0] <= end - len(prose_run):
            recent.popleft()
    if parts:
        chunks.append((_tidy("".join(parts)), top, bottom))
    return [chunk for chunk in chunks if chunk[0]]


def _overlap_tail(text: str, budget: int) -> tuple[str, int]:
    """The last ``budget`` chars of ``text``, moved forward to a word start (CJK: as is), and where
    they start in ``text``."""
    if budget <= 0 or not text:
        return "", len(text)
    start = max(len(text) - budget, 0)
    if (
        start > 0
        and not (text[start - 1].isspace() or text[start].isspace())
        and not (_CJK.match(text[start]) or _CJK.match(text[start - 1]))
    ):
        space = next((k for k in range(start, len(text)) if text[k].isspace()), -1)
        if space < 0:
            return "", len(text)
        start = space
    return text[start:].strip(), start


def _tidy(text: str) -> str:
    """Strip leading blank lines and trailing whitespace, keeping the first line's indent."""
    return re.sub(r"\A(?:[ \t]*\n)+", "", text).rstrip()
