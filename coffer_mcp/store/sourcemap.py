"""The source map beside a document's original: where each line of its Markdown came from.

``raw/<id>.map.json`` is written with the document when a conversion knows where its lines come
from (a PDF's pages, a deck's slides, a sheet's rows, a text file's lines; ``store.locations``)
and removed with it. It holds, for each line of the Markdown body as converted, a short hash of
the line and its location. The index reads it to give each chunk its ``source_location``, so a
rebuild from the files finds the same locations.

A body edited since (by hand or by an agent) is matched line by line against the hashes, in order
first, then lines moved out of order: a line found unchanged keeps its location, wherever it
moved; a line that is not in the map (written or changed by the edit) has none, and a passage
holding one has no location. Locations are thus either right or absent, never stale.

Format (JSON)::

    {"format": "coffer-source-map", "version": 1, "content_sha256": "<the body's>", "lines": N,
     "hashes": "<8 hex digits per line>", "places": [[first_line, count, location, step?], ...]}

A run of ``places`` gives ``count`` lines from ``first_line`` (1-based) the same location, or,
with ``step`` 1, the location's number growing by one a line (a text file's lines, a table's rows).
"""

from __future__ import annotations

import enum
import hashlib
import json
import logging
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Any, Literal

from coffer_mcp.store.files import read_store_file
from coffer_mcp.store.frontmatter import body_sha256
from coffer_mcp.store.locations import COUNTED, Location, merge, valid_location
from coffer_mcp.store.paths import KbPaths

__all__ = [
    "Mark",
    "Place",
    "SourceMap",
    "align",
    "line_hash",
    "read_source_map",
    "source_map_bytes",
    "span_location",
]

log = logging.getLogger(__name__)

_FORMAT = "coffer-source-map"
_VERSION = 1
_HASH_CHARS = 8
_MAX_LINES = 10_000_000


class Mark(enum.Enum):
    UNMATCHED = "unmatched"
    """A line of an edited body that is not in the source map: text the original does not hold."""


Place = Location | Literal[Mark.UNMATCHED] | None
"""Where one line of a body comes from: a location, nowhere in particular (None: a blank line, a
table's separator row, a title the converter added), or ``Mark.UNMATCHED``."""


def line_hash(line: str) -> str:
    """A short hash of one line of Markdown (8 hex digits: a line's identity within one document)."""
    digest = hashlib.blake2b(line.encode("utf-8", "surrogatepass"), digest_size=_HASH_CHARS // 2)
    return digest.hexdigest()


_BLANK = line_hash("")


@dataclass(frozen=True, slots=True)
class SourceMap:
    """Each line of a document's body as converted: its hash and its location (see the module docstring)."""

    content_sha256: str
    hashes: tuple[str, ...]
    places: tuple[Location | None, ...]

    @classmethod
    def of(cls, body: str, places: Sequence[Location | None]) -> SourceMap:
        """The map of ``body`` (as the document file holds it: stripped), ``places`` one per line."""
        lines = body.strip().split("\n")
        kept = tuple(places[: len(lines)])
        return cls(body_sha256(body), tuple(map(line_hash, lines)), kept + (None,) * (len(lines) - len(kept)))

    def to_bytes(self) -> bytes:
        data = {
            "format": _FORMAT,
            "version": _VERSION,
            "content_sha256": self.content_sha256,
            "lines": len(self.hashes),
            "hashes": "".join(self.hashes),
            "places": _runs(self.places),
        }
        return json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8")

    @classmethod
    def parse(cls, data: bytes) -> SourceMap | None:
        """A map read from disk; None when it is not one this Coffer reads (damaged, hand-made, newer)."""
        try:
            raw = json.loads(data.decode("utf-8"))
            return _parsed(raw) if isinstance(raw, dict) else None
        except (UnicodeDecodeError, ValueError, RecursionError, TypeError, KeyError, IndexError):
            return None

    def places_of(self, body: str) -> list[Place]:
        """The place of each line of ``body``: the map's own when it is the body the map was made
        for, else matched by content (``align``), lines not in the map ``Mark.UNMATCHED``."""
        if body_sha256(body) == self.content_sha256:
            return list(self.places)
        lines = body.strip().split("\n")
        new = [line_hash(line) if line else None for line in lines]
        old = [None if h == _BLANK else h for h in self.hashes]
        matched = align(old, new)
        moved = self._moved(old, matched)
        return [
            None if key is None else self.places[found] if found is not None else moved.get(key, Mark.UNMATCHED)
            for key, found in zip(new, matched, strict=True)
        ]

    def _moved(self, old: list[str | None], matched: list[int | None]) -> dict[str, Location | None]:
        """Lines an edit moved out of order, by hash: the place of each hash of the map's unmatched lines
        that has one place only (a line repeated at two places of the original is not guessed)."""
        taken = {found for found in matched if found is not None}
        places: dict[str, list[Location | None]] = {}
        for index, key in enumerate(old):
            if key is not None and index not in taken:
                places.setdefault(key, []).append(self.places[index])
        return {key: found[0] for key, found in places.items() if all(place == found[0] for place in found)}


def source_map_bytes(body: str, places: Sequence[Location | None]) -> bytes | None:
    """The source map file of a document's ``body`` and its lines' ``places``; None when no line has one."""
    if not any(place is not None for place in places):
        return None
    return SourceMap.of(body, places).to_bytes()


def span_location(places: Sequence[Place], first: int, last: int) -> Location | None:
    """The location of body lines ``first..last`` (1-based, inclusive): none when a line of them is unmatched."""
    chosen = places[max(first, 1) - 1 : last]
    if any(place is Mark.UNMATCHED for place in chosen):
        return None
    return merge(place for place in chosen if isinstance(place, dict))


def align(old: Sequence[Hashable | None], new: Sequence[Hashable | None]) -> list[int | None]:
    """For each item of ``new``, the index of the equal item of ``old`` it matches in order; None
    for an item that matches none, and for None items (blank lines), which are never matched."""
    old_at = [i for i, key in enumerate(old) if key is not None]
    new_at = [j for j, key in enumerate(new) if key is not None]
    a, b = [old[i] for i in old_at], [new[j] for j in new_at]
    matched: list[int | None] = [None] * len(new)
    if a == b:  # nothing changed but blank lines: no need to search
        for i, j in zip(old_at, new_at, strict=True):
            matched[j] = i
        return matched
    for block in SequenceMatcher(None, a, b).get_matching_blocks():
        for k in range(block.size):
            matched[new_at[block.b + k]] = old_at[block.a + k]
    return matched


def read_source_map(kb: KbPaths, doc_id: str) -> SourceMap | None:
    """The source map of a document; None when it has none, or one that cannot be read."""
    path = kb.source_map(doc_id)
    try:
        data, _ = read_store_file(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning("cannot read %s: %s", path, exc)
        return None
    found = SourceMap.parse(data)
    if found is None:
        log.warning("%s is not a source map this Coffer reads: its document has no source locations", path)
    return found


# -- encoding ----------------------------------------------------------------------------------


def _runs(places: Sequence[Location | None]) -> list[list[Any]]:
    """``places`` as runs ``[first_line, count, location]``, with a trailing 1 when the number grows."""
    runs: list[list[Any]] = []  # [first, count, location, step]: step None until a second line decides it
    for line, place in enumerate(places, 1):
        if place is None:
            continue
        if not (runs and _extends(runs[-1], line, place)):
            runs.append([line, 1, place, None])
    return [run[:3] + ([1] if run[3] == 1 else []) for run in runs]


def _extends(run: list[Any], line: int, place: Location) -> bool:
    """Whether ``place`` on ``line`` continues ``run`` (which it then does)."""
    first, count, location, step = run
    if first + count != line:
        return False
    if step != 1 and place == location:
        run[1], run[3] = count + 1, 0
        return True
    if step != 0 and place == _stepped(location, count):
        run[1], run[3] = count + 1, 1
        return True
    return False


def _stepped(location: Location, steps: int) -> Location | None:
    """``location`` with its number ``steps`` further on (None when it has no single number)."""
    for key in COUNTED:
        if isinstance(location.get(key), int):
            return {**location, key: location[key] + steps}
    return None


def _parsed(raw: dict[str, Any]) -> SourceMap | None:
    if raw.get("format") != _FORMAT or raw.get("version") != _VERSION:
        return None
    count, hashes, sha = raw["lines"], raw["hashes"], raw["content_sha256"]
    if not (isinstance(count, int) and 0 < count <= _MAX_LINES and isinstance(hashes, str) and isinstance(sha, str)):
        return None
    if len(hashes) != count * _HASH_CHARS:
        return None
    places: list[Location | None] = [None] * count
    for run in raw["places"]:
        first, length, location = run[0], run[1], run[2]
        step = run[3] if len(run) > 3 else 0
        if not (isinstance(first, int) and isinstance(length, int) and first >= 1 and length >= 1):
            return None
        if first + length - 1 > count or not valid_location(location) or step not in (0, 1):
            return None
        if step and _stepped(location, 1) is None:
            return None
        for k in range(length):
            places[first - 1 + k] = _stepped(location, k) if step else location
    split = tuple(hashes[i : i + _HASH_CHARS] for i in range(0, len(hashes), _HASH_CHARS))
    return SourceMap(sha, split, tuple(places))
