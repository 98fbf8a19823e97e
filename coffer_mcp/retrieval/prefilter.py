"""Which files a grep can match: a folded copy of each folder's Markdown, kept exact by the kernel.

grep reads every ``*.md`` file of the folders it searches, ~10 µs of system calls a file: 0.3 s for
the 29,000 files of 50 MB (docs/benchmarks.md), most of it for files without a match. This map
holds each file's bytes as ``literals.fold_text`` folds them and, for a pattern's needles
(``literals.needles``), finds by substring search in memory the files with a line that holds all of
them (a match lies within one line, and Markdown lines are short); grep then reads only those, in
its own order, so the lines, their order and where ``max_matches`` cuts are those of a full scan.

That rests on two things: a needle is a proof (a file without it has no matching line, see
literals.py), and the copy is the files' current bytes. The second comes from the kernel's change
feed (``changes.py``): a folder is watched before its files are read, and every grep first reads
the queued events and re-reads the files they name. A folder whose events were lost (the queue
overflowed) or that was removed or replaced is read again from scratch. Where the kernel offers no
such feed (not Linux, a network filesystem) nothing is narrowed.

A folder is mapped once this process greps it a second time (a one-shot ``coffer grep`` never pays
for it), in a background thread; until the copy is complete, greps read every file. The copies of
all folders together are bounded by ``BUDGET_BYTES``: a folder that does not fit is not mapped.
Changed files are held beside a folder's copy; past ``OVERLAY_FILES`` of them the folder is read
again. When even the rarest needle is in more than one in eight of a folder's files, grep is
handed every file of it: in runs of 64 files, then eight times more each time, it has the
``max_matches`` lines of a common word after a run or two instead of after listing the folder.

Memory: the copy itself (the files' bytes, 1.0 times their size, plus ~150 bytes of names and
offsets a file), at most ``BUDGET_BYTES`` for all folders; ``held_bytes`` says how much is held.
"""

from __future__ import annotations

import bisect
import errno
import logging
import os
import stat
import sys
import threading
import time
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from coffer_mcp.retrieval.grep import markdown_names
from coffer_mcp.retrieval.inotify import Inotify, Watch
from coffer_mcp.retrieval.literals import fold_text, needles

__all__ = ["BUDGET_BYTES", "MAX_SHARE", "OVERLAY_FILES", "GrepPrefilter"]

logger = logging.getLogger(__name__)

BUDGET_BYTES = 256 * 1024 * 1024
OVERLAY_FILES = 2048
SEGMENT_BYTES = 1024 * 1024  # files joined into blobs of about this size: one find() call each
_READ_CHUNK = 1024 * 1024
_SAMPLE_FILES = 1000  # files scanned before a needle found in too many of them is given up
_TUPLE_BYTES = sys.getsizeof((0, 0))
MAX_SHARE = 1 / 8
"""A needle found in more of a folder's files than this share narrows nothing there."""


class _Gone:
    """What ``_read`` answers for a name that is no longer a file grep reads."""


_GONE = _Gone()


@dataclass(slots=True)
class _Segment:
    names: list[str]
    starts: array[int]  # where each file's text starts in ``blob``, then one past the end
    blob: bytes  # the texts joined by b"\n" (no needle holds a line break)


@dataclass(slots=True)
class _Folder:
    """One folder's copy: a base read in one go, and the files changed since (``overlay``)."""

    watch: Watch
    ready: bool = False
    off: bool = False  # too big to hold: never narrowed
    segments: list[_Segment] = field(default_factory=list)
    where: dict[str, tuple[int, int]] = field(default_factory=dict)  # name -> (segment, index)
    unreadable: set[str] = field(default_factory=set)  # base files that could not be read
    overlay: dict[str, bytes | None] = field(default_factory=dict)  # None: unreadable
    removed: set[str] = field(default_factory=set)  # base files gone since
    pending: set[str] = field(default_factory=set)  # names the kernel reported, not re-read yet
    size: int = 0

    def files(self) -> int:
        return len(self.where) - len(self.removed) + len(self.overlay.keys() - self.where.keys())


class GrepPrefilter:
    """Narrows a grep to the files that can match; one per service, closed with it."""

    def __init__(self, budget: int = BUDGET_BYTES, max_share: float = MAX_SHARE) -> None:
        self._budget = budget
        self._max_share = max_share
        self._lock = threading.Lock()
        self._built = threading.Condition(self._lock)
        self._feed: Inotify | None = None
        self._feed_tried = False
        self._folders: dict[Path, _Folder] = {}
        self._by_wd: dict[int, _Folder] = {}
        self._seen: dict[Path, int] = {}
        self._unwatched: set[Path] = set()  # not on a local filesystem, or not watchable
        self._threads: list[threading.Thread] = []
        self._closed = False

    def narrow(
        self, folders: Sequence[Path], pattern: str, *, ignore_case: bool = False, fixed_strings: bool = False
    ) -> list[str] | None:
        """The files (absolute paths) of ``folders`` that can hold a line matching ``pattern``, in grep's
        order; None when that is not known (a folder is not mapped yet, or the pattern has no literal)."""
        wanted = needles(pattern, ignore_case=ignore_case, fixed_strings=fixed_strings)
        roots = [Path(os.path.abspath(folder)) for folder in folders]
        with self._lock:
            if self._closed:
                return None
            self._drain()
            mapped = [self._mapped(root) for root in roots]  # every folder: a second grep starts its map
            if not wanted or None in mapped:
                return None
            found: list[str] = []
            for root, folder in zip(roots, mapped, strict=True):
                assert folder is not None
                names = _candidates(folder, wanted, self._max_share)
                prefix = os.path.join(root, "")
                found += [prefix + name for name in names]
            return found

    def wait_until_mapped(self, folders: Iterable[Path], timeout: float) -> bool:
        """Wait until every one of ``folders`` is mapped (for tests and benchmarks); False at once when
        one is not being mapped (grepped once only, or not watchable here), or is too big to be."""
        roots = [Path(os.path.abspath(folder)) for folder in folders]
        deadline = time.monotonic() + timeout
        with self._built:
            while True:
                states = [self._folders.get(root) for root in roots]
                if any(state is None or state.off for state in states):
                    return False
                if all(state is not None and state.ready for state in states):
                    return True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._built.wait(remaining)

    def held_bytes(self) -> int:
        """What the copies of every folder hold: texts, names and offsets (dictionary overheads included)."""
        with self._lock:
            return sum(_held(folder) for folder in self._folders.values())

    def close(self) -> None:
        """Stop the mapping threads and the change feed; narrow() answers None from now on."""
        with self._lock:
            self._closed = True
            threads, self._threads = self._threads, []
        for thread in threads:
            thread.join(10.0)
        with self._lock:
            if self._feed is not None:
                self._feed.close()
                self._feed = None
            self._folders.clear()
            self._by_wd.clear()

    # -- under the lock ----------------------------------------------------------------------------

    def _mapped(self, root: Path) -> _Folder | None:
        """The folder's map if it is ready and current; else start it on a second grep."""
        folder = self._folders.get(root)
        if folder is not None and not folder.off and not folder.watch.still_there():
            self._forget(folder)  # removed, or another folder put in its place
            folder = None
        if folder is None:
            self._seen[root] = self._seen.get(root, 0) + 1
            if self._seen[root] >= 2 and root not in self._unwatched:
                self._start(root)
            return None
        if not folder.ready or folder.off:
            return None
        if not _apply(folder, self._budget - self._held(folder)):
            self._forget(folder)
            self._start(root)
            return None
        return folder

    def _start(self, root: Path) -> None:
        feed = self._open_feed()
        watch = feed.watch(root) if feed is not None else None
        if watch is None:
            if feed is None or root.is_dir():  # a folder made later may still be mapped then
                self._unwatched.add(root)
            return
        folder = _Folder(watch)
        self._folders[root] = folder
        self._by_wd[watch.wd] = folder
        budget = self._budget - sum(other.size for other in self._folders.values() if other is not folder)
        thread = threading.Thread(target=self._build, args=(folder, budget), name="coffer-grep-map", daemon=True)
        self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

    def _open_feed(self) -> Inotify | None:
        if not self._feed_tried:
            self._feed_tried = True
            self._feed = Inotify.open()
        return self._feed

    def _forget(self, folder: _Folder) -> None:
        root = folder.watch.folder
        if self._folders.get(root) is folder:
            del self._folders[root]
        self._by_wd.pop(folder.watch.wd, None)
        if self._feed is not None:
            self._feed.unwatch(folder.watch)

    def _held(self, folder: _Folder) -> int:
        return sum(other.size for other in self._folders.values() if other is not folder)

    def _drain(self) -> None:
        if self._feed is None:
            return
        changed, gone, overflowed = self._feed.drain()
        if overflowed:  # changes were lost: every folder is read again
            gone = set(self._by_wd)
        for wd in gone:
            if (lost := self._by_wd.get(wd)) is not None:
                self._forget(lost)
        for wd, names in changed.items():
            if (folder := self._by_wd.get(wd)) is not None:
                folder.pending |= names

    # -- the mapping thread ------------------------------------------------------------------------

    def _build(self, folder: _Folder, budget: int) -> None:
        """Read the folder's files (watched already: what changes from now on is reported)."""
        root = folder.watch.folder
        started = time.monotonic()
        copy = _Copy()
        for name in markdown_names(root):
            if self._closed:
                return
            text = _read(root / name)
            if not isinstance(text, _Gone):
                copy.add(name, text)
            if copy.size > budget:
                break
        copy.seal()
        with self._built:
            if self._folders.get(root) is folder:
                if copy.size > budget:
                    folder.off = True
                    logger.info("grep reads every file of %s: its files exceed grep's map budget", root)
                else:
                    copy.install(folder)
                    logger.debug("mapped %d files of %s in %.2f s", len(copy.where), root, time.monotonic() - started)
            self._built.notify_all()


class _Copy:
    """A folder's files joined into segments as they are read (never all held twice)."""

    def __init__(self) -> None:
        self.segments: list[_Segment] = []
        self.where: dict[str, tuple[int, int]] = {}
        self.unreadable: set[str] = set()
        self.size = 0
        self._names: list[str] = []
        self._texts: list[bytes] = []
        self._bytes = 0

    def add(self, name: str, text: bytes | None) -> None:
        if text is None:
            self.unreadable.add(name)
            text = b""
        self.where[name] = (len(self.segments), len(self._names))
        self._names.append(name)
        self._texts.append(text)
        self._bytes += len(text) + 1
        self.size += len(text)
        if self._bytes >= SEGMENT_BYTES:
            self.seal()

    def seal(self) -> None:
        """Join the files read since the last segment into one."""
        if not self._names:
            return
        starts = array("q", [0])
        for text in self._texts:
            starts.append(starts[-1] + len(text) + 1)
        self.segments.append(_Segment(self._names, starts, b"\n".join(self._texts)))
        self._names, self._texts, self._bytes = [], [], 0

    def install(self, folder: _Folder) -> None:
        folder.segments, folder.where, folder.unreadable = self.segments, self.where, self.unreadable
        folder.size = self.size
        folder.ready = True


def _held(folder: _Folder) -> int:
    held = sys.getsizeof(folder.where) + _TUPLE_BYTES * len(folder.where)
    for segment in folder.segments:
        held += len(segment.blob) + segment.starts.itemsize * len(segment.starts) + sys.getsizeof(segment.names)
        held += sum(sys.getsizeof(name) for name in segment.names)
    return held + sum(len(text or b"") + sys.getsizeof(name) for name, text in folder.overlay.items())


def _apply(folder: _Folder, budget: int) -> bool:
    """Re-read the files the kernel reported changed; False when there are too many to hold apart."""
    pending = [name for name in folder.pending if name.endswith(".md") and not name.startswith(".")]
    folder.pending.clear()
    if len(folder.overlay) + len(pending) > OVERLAY_FILES:
        return False
    for name in pending:
        text = _read(folder.watch.folder / name)
        old = folder.overlay.pop(name, None)
        folder.size -= len(old or b"")
        if isinstance(text, _Gone):
            if name in folder.where:
                folder.removed.add(name)
            continue
        folder.overlay[name] = text
        folder.removed.discard(name)
        folder.size += len(text or b"")
    return folder.size <= budget


def _read(path: Path) -> bytes | _Gone | None:
    """The file's folded bytes; None if it cannot be read (then it may match); ``_GONE`` if it is
    not a regular file any more (grep skips symbolic links, folders and devices too)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return _GONE
    except OSError as exc:
        return _GONE if exc.errno in (errno.ELOOP, errno.ENOTDIR) else None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return _GONE
        chunks = []
        while chunk := os.read(fd, _READ_CHUNK):
            chunks.append(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    return fold_text(b"".join(chunks))


def _candidates(folder: _Folder, wanted: list[bytes], share: float) -> list[str]:
    """The folder's files with a line holding every needle, in grep's order (a match lies within one
    line). Searched from the needle rarest in the folder's first segment; when even that one is in
    more than ``share`` of the files, every file (grep, reading them in runs of a few files first,
    soon has its lines, and otherwise reads them all in about the time of one folder scan)."""
    ranked = sorted(wanted, key=lambda needle: (_sampled(folder, needle), -len(needle)))
    names = _scan(folder, ranked[0], ranked[1:], share)
    return _every_name(folder) if names is None else names


def _sampled(folder: _Folder, needle: bytes) -> int:
    """How often ``needle`` occurs in the folder's first segment (a guess at how rare it is)."""
    return folder.segments[0].blob.count(needle) if folder.segments else 0


def _every_name(folder: _Folder) -> list[str]:
    names = [name for segment in folder.segments for name in segment.names]
    if not (folder.overlay or folder.removed):
        return names
    current = set(names) - folder.removed
    current.update(folder.overlay)
    return sorted(current, key=os.fsencode)


def _scan(folder: _Folder, needle: bytes, others: list[bytes], share: float) -> list[str] | None:
    """The files with a line holding ``needle`` and ``others`` (and those that could not be read), in
    order; None when more than ``share`` of them do, which the first ``_SAMPLE_FILES`` files scanned
    tell soon enough: then a scan of every file finds ``max_matches`` lines early, and costs less
    than listing them here."""
    found: list[str] = []
    scanned = 0
    for segment in folder.segments:
        blob, starts, names = segment.blob, segment.starts, segment.names
        at = blob.find(needle)
        while at >= 0:
            k = bisect.bisect_right(starts, at) - 1
            if _file_holds(blob, needle, at, (starts[k], starts[k + 1] - 1), others):
                found.append(names[k])
            at = blob.find(needle, starts[k + 1])
        scanned += len(names)
        if scanned >= _SAMPLE_FILES and len(found) > share * scanned:
            return None
    if folder.overlay or folder.removed or folder.unreadable:
        found = _with_changes(folder, found, [needle, *others])
    return None if len(found) > share * folder.files() else found


def _file_holds(text: bytes, needle: bytes, at: int, span: tuple[int, int], others: list[bytes]) -> bool:
    """Whether the file ``text[start:end]`` (``span``), whose first ``needle`` is at ``at``, has a line
    holding it and each of ``others``: looked at line by line only once the file holds them all."""
    start, end = span
    if not others:
        return True
    if any(text.find(other, start, end) < 0 for other in others):
        return False
    while at >= 0:
        if _line_holds(text, at, others):
            return True
        at = text.find(needle, at + 1, end)
    return False


def _line_holds(text: bytes, at: int, others: list[bytes]) -> bool:
    """Whether the line of ``text`` around offset ``at`` holds each of ``others``."""
    if not others:
        return True
    start = text.rfind(b"\n", 0, at) + 1
    end = text.find(b"\n", at)
    end = len(text) if end < 0 else end
    return all(text.find(other, start, end) >= 0 for other in others)


def _text_holds(text: bytes, wanted: list[bytes]) -> bool:
    """Whether a line of ``text`` holds every one of ``wanted``."""
    needle, others = wanted[0], wanted[1:]
    at = text.find(needle)
    while at >= 0:
        if _line_holds(text, at, others):
            return True
        at = text.find(needle, at + 1)
    return False


def _with_changes(folder: _Folder, found: list[str], wanted: list[bytes]) -> list[str]:
    """The base's files found, corrected for the files changed since, in order."""
    stale = folder.removed | folder.overlay.keys()
    names = {name for name in found if name not in stale}
    names.update(name for name in folder.unreadable if name not in stale)
    names.update(name for name, text in folder.overlay.items() if text is None or _text_holds(text, wanted))
    return sorted(names, key=os.fsencode)
