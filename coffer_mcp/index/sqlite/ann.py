"""Approximate nearest-neighbour search for big knowledge bases: one HNSW graph file per partition.

sqlite-vec scans every vector of the knowledge bases asked for (62 ms at 100k chunks, 0.9 s at
1M: docs/benchmarks.md); a graph answers in about a millisecond. A *partition* is one embedding
model's vectors of one knowledge base (a vec0 partition); it gets a graph once its knowledge base
has ``threshold`` chunks. Below that the scan runs, and results are exactly the scan's.

- **Exact scores.** The graph proposes ``max(2 * limit, 64)`` candidates (plus the exact nearest
  of the vectors written since it was built), with their float32 vectors as stored (the graph
  keeps them byte for byte; the delta too); SQL re-scores them with the scan's own distance
  function (``vectors.rescore``), so scores and ties are the scan's, and a chunk deleted since
  the graph was built cannot come back: it no longer joins. (A graph file of an older release,
  quantized, proposes ids only: they are re-scored from the vec0 table until it is rebuilt.)
- **The vec0 table is the truth; a graph file is a cache** beside coffer.db, in
  ``coffer.db-ann/``. SQLite records each file's name, size, SHA-256, vector count and ``seq``
  (``ann_rows``); a file that does not match (missing, truncated, garbage) is not used, and is
  rebuilt from the table. A graph is written to a temporary file, synced, renamed, then recorded,
  so a crash leaves the previous graph or none, never a half-written one in use. Before each
  search a loaded graph's file is looked at (inode, size, times: ``Graph.current``): one written,
  cut short or replaced since is loaded again, against its checksum. Changed *during* a search,
  a graph's memory map sees bytes no checksum checked: it answers short or with keys of no
  chunk, or its viewer process dies of SIGBUS (cut short: viewer.py), or it answers in full and
  wrongly (zeros) — so the file is looked at again after it answered. The search then drops it
  (``distrust``), the scan answers, and the next search checks it again.
- **Up to date in every process.** Each vector write of a partition with a graph is logged in the
  same transaction. Before a search, a process applies the changes after its graph's ``seq``:
  changed chunks leave the graph's answers (``dead``) and their current vectors, if any, join an
  exact in-memory ``Delta``. When the two hold more than 5 % of the graph, the graph file is
  rewritten: loaded, the changes applied (usearch removes and adds in place), saved under a new
  name; built afresh when most of it changed or removals left it too sparse.
- **Built off the request path.** A missing or broken graph is built in a background thread
  (niced) while searches scan; one process builds a partition at a time (a file lock), and files
  that no row names are removed once no builder holds their partition.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coffer_mcp.index.sqlite import ann_rows, hnsw, vectors
from coffer_mcp.index.sqlite.ann_rows import FileRow
from coffer_mcp.index.sqlite.db import Connection, connect, database_errors
from coffer_mcp.settings import default_of
from coffer_mcp.timeutil import utc_now

__all__ = ["DEFAULT_THRESHOLD", "AnnCache", "Partition"]

log = logging.getLogger(__name__)

DEFAULT_THRESHOLD = default_of("ann_min_chunks")  # chunks; below it the scan takes under ~12 ms (benchmarks.md)
MIN_CANDIDATES = 64
COMPACT_SHARE, COMPACT_MIN = 0.05, 1_000  # rebuild once the delta and dead hold this much
DELTA_MAX = 50_000  # past this many changed vectors the scan answers until the rebuild is done
GRAPHS_OFF = (
    "usearch is not installed: no HNSW graphs, so vector searches scan every vector exactly "
    "(slower past ann_min_chunks chunks, same results; pip install usearch)."
)
VACANT_SHARE = 0.2  # a graph with more places of removed vectors than this is built afresh
RETRY_SECONDS = 60.0  # after a failed build
BUSY_RETRY_SECONDS = 5.0  # after finding another process building the graph
GARBAGE_AGE = 3600.0  # seconds before an unnamed graph file is removed
_SAFE_KB = re.compile(r"[a-z0-9._-]{1,64}")

Key = tuple[int, str]


@dataclass(eq=False)
class Partition:
    """This process's view of one partition's graph: the file, and the changes applied since."""

    model_id: int
    kb: str
    name: str
    seq: int
    graph: hnsw.Graph
    delta: hnsw.Delta
    dead: set[int] = field(default_factory=set)
    stale: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def size(self) -> int:
        """How many vectors the partition holds, about (the graph's, the changed ones, the delta's)."""
        return len(self.graph) - len(self.dead) + len(self.delta)

    def usable(self) -> bool:
        return not self.stale and len(self.delta) <= DELTA_MAX and len(self.dead) <= len(self.graph) // 2

    def due(self) -> bool:
        """Whether the graph should be rebuilt: quantized (an older release's), or too many vectors
        changed since it was built."""
        return (
            not self.usable()
            or not self.graph.exact
            or len(self.dead) + len(self.delta) > max(COMPACT_MIN, COMPACT_SHARE * len(self.graph))
        )


class AnnCache:
    """The graphs of one coffer.db (see the module docstring)."""

    def __init__(
        self, db_path: Path, *, threshold: int = DEFAULT_THRESHOLD, background: bool = True, builds: bool = True
    ) -> None:
        """``background``: a search builds the graphs it needs in a background thread (else at once);
        ``builds`` off: a search never builds one (a short-lived process, which would leave each build
        cut off at its exit): its graphs come from a server or ``repair`` (a reindex)."""
        self.db_path = db_path
        self.folder = db_path.with_name(f"{db_path.name}-ann")
        # Without usearch every search scans (GRAPHS_OFF), rather than failing a build per search.
        self.threshold = threshold if hnsw.available() else 0
        self.background = background
        self.builds = builds
        self._parts: dict[Key, Partition] = {}
        self._builds: dict[Key, threading.Thread] = {}
        self._failed: dict[Key, float] = {}
        self._reported: set[str] = set()
        self._guard = threading.Lock()
        self._epoch = 0

    # -- search ------------------------------------------------------------------------------------

    def ready(self, conn: Connection, table: str, kbs: Sequence[str]) -> tuple[list[Partition], list[str]]:
        """The partitions of ``kbs`` whose graph is usable (brought up to date), and the kbs to scan.

        Starts the build of each graph that is missing (for a big knowledge base), broken or due
        (in the background; or now, then uses it, when ``background`` is off).
        """
        if self.threshold <= 0:
            return [], list(kbs)
        parts, scan, due = self._look(conn, table, kbs)
        if due and not self.builds:
            return parts, scan
        if due and self.background:
            for kb in due:
                self._start(table, kb)
        elif due:
            for kb in due:
                self._build_or_note(table, kb, conn, self._epoch)
            parts, scan, _ = self._look(conn, table, kbs)
        return parts, scan

    def _look(self, conn: Connection, table: str, kbs: Sequence[str]) -> tuple[list[Partition], list[str], list[str]]:
        model_id = vectors.model_id(table)
        parts, scan, due = [], [], []
        with ann_rows.snapshot(conn):
            rows = {row.kb: row for row in ann_rows.file_rows(conn, model_id, kbs)}
            for kb in kbs:
                part = self._current(conn, table, model_id, kb, rows.get(kb))
                if part is not None and part.usable():
                    parts.append(part)
                else:
                    scan.append(kb)
                if (part is not None and part.due()) or (
                    part is None and (kb in rows or _chunk_count(conn, kb) >= self.threshold)
                ):
                    due.append(kb)
        with self._guard:
            now = time.monotonic()
            due = [kb for kb in due if now - self._failed.get((model_id, kb), -RETRY_SECONDS) >= RETRY_SECONDS]
        return parts, scan, due

    def candidates(
        self, parts: Sequence[Partition], query: Sequence[float], limit: int, *, count: int | None = None
    ) -> dict[int, bytes | None]:
        """Chunks near ``query`` in these partitions: the graph's (minus changed ones) and the delta's,
        each with its stored float32 vector (None from a quantized graph).

        Each partition proposes ``max(2 * limit, 64)`` of them, or ``count`` (a filtered search).

        Raises:
            ViewerError: the viewer process ended (a graph file cut short under it?), or a graph's
                file changed while it answered: ``distrust`` the partitions and scan.
        """
        vector = hnsw.as_query(query)
        count = max(2 * limit, MIN_CANDIDATES, count or 0)
        found: dict[int, bytes | None] = {}
        for part in parts:
            with part.lock:
                # Dead chunks take places in the graph's answer: ask for that many more.
                wanted = min(len(part.graph), count * len(part.graph) // max(1, len(part.graph) - len(part.dead)) + 1)
                found.update(item for item in part.graph.nearest(vector, wanted) if item[0] not in part.dead)
                found.update((key, part.delta.vector(key)) for key in part.delta.search(vector, count))
            if not part.graph.current():
                # Written over or cut short while it answered, after the check before the search: the
                # answers came from bytes no checksum checked (zeros may still look like a graph's).
                raise hnsw.ViewerError(f"the ANN graph file of {part.kb} changed during the search")
        return found

    def distrust(self, parts: Sequence[Partition]) -> None:
        """Stop using these partitions' graphs as loaded: they answered fewer chunks than they hold,
        or their viewer process ended.

        The next search loads each file again, checking it against its recorded checksum; a file
        that no longer matches is not used, and rebuilt (as at any load).
        """
        with self._guard:
            for part in parts:
                if self._parts.get((part.model_id, part.kb)) is part:
                    del self._parts[part.model_id, part.kb]
        for part in parts:
            log.warning("the ANN graph of %s answered short or failed (its file changed?): checking it again", part.kb)

    def _current(self, conn: Connection, table: str, model_id: int, kb: str, row: FileRow | None) -> Partition | None:
        """The partition's graph as this process holds it, up to date; None without a usable file."""
        key = (model_id, kb)
        with self._guard:
            part = self._parts.get(key)
        if row is None or not row.name:
            part = None
        elif part is None or part.name != row.name or not part.graph.current():
            part = self._load(row)  # a file changed since it was loaded is checked again
        with self._guard:
            if part is None:
                self._parts.pop(key, None)
                return None
            self._parts[key] = part
        try:
            with part.lock:
                self._catch_up(conn, table, part)
        except hnsw.ViewerError:
            self.distrust([part])
            return None
        return part

    def _load(self, row: FileRow) -> Partition | None:
        try:
            graph = hnsw.open_graph(self.folder / row.name, _stamp(row))
        except hnsw.ViewerError:  # not the file's fault, as far as is known (the viewer logged why)
            with self._guard:  # so no rebuild for a while: the scan answers
                self._failed[row.model_id, row.kb] = time.monotonic()
            return None
        except ValueError as exc:
            if row.name not in self._reported:
                self._reported.add(row.name)
                log.warning(
                    "the ANN graph of %s is not used (%s): it is rebuilt, the scan answers meanwhile", row.kb, exc
                )
            return None
        return Partition(row.model_id, row.kb, row.name, row.seq, graph, hnsw.Delta(graph.dimensions))

    def _catch_up(self, conn: Connection, table: str, part: Partition) -> None:
        """Apply the logged changes after ``part.seq`` (state-based: re-reading a chunk is harmless)."""
        ids, last = ann_rows.changes_since(conn, part.model_id, part.kb, part.seq)
        if not ids:
            return
        if len(ids) > DELTA_MAX:
            part.stale, part.seq = True, last  # the scan answers until the graph is rebuilt
            return
        current = vectors.current_vectors(conn, table, ids)
        part.dead.update(key for key, inside in zip(ids, part.graph.contains(ids), strict=True) if inside)
        mine = [(key, current[key][1]) for key in ids if key in current and current[key][0] == part.kb]
        part.delta.discard(ids)
        part.delta.put(mine)
        part.seq = last

    # -- building ----------------------------------------------------------------------------------

    def _start(self, table: str, kb: str) -> None:
        key = (vectors.model_id(table), kb)
        with self._guard:
            running = self._builds.get(key)
            if running is not None and running.is_alive():
                return
            thread = threading.Thread(
                target=self._build_in_background, args=(table, kb, self._epoch), name=f"coffer-ann-{kb}", daemon=True
            )
            self._builds[key] = thread
        thread.start()

    def _build_in_background(self, table: str, kb: str, epoch: int) -> None:
        with contextlib.suppress(OSError, AttributeError):  # below the searches: nice this thread (Linux)
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
        self._build_or_note(table, kb, None, epoch)

    def _build_or_note(self, table: str, kb: str, conn: Connection | None, epoch: int) -> None:
        key = (vectors.model_id(table), kb)
        try:
            built = self.build(table, kb, conn, epoch=epoch)
            with self._guard:
                if built:
                    self._failed.pop(key, None)
                else:  # another process is building it
                    self._failed[key] = time.monotonic() - RETRY_SECONDS + BUSY_RETRY_SECONDS
        except _build_errors() as exc:
            with self._guard:
                self._failed[key] = time.monotonic()
            log.warning("could not build the ANN graph of %s (%s): the scan answers; retried later", kb, exc)

    def build(
        self, table: str, kb: str, conn: Connection | None = None, *, fresh: bool = False, epoch: int | None = None
    ) -> bool:
        """Build the partition's graph now; False if another process is at it.

        The recorded graph with the logged changes applied, or (``fresh``, or when that cannot
        be) a new graph of every vector of the vec0 table. With ``conn`` inside a transaction
        (a repair), the graph's row is part of that transaction.
        """
        model_id = vectors.model_id(table)
        stem = _stem(model_id, kb)
        lock = _try_lock(self.folder / f"{stem}~.lock")
        if lock is None:
            return False
        own = conn is None
        try:
            conn = connect(self.db_path) if conn is None else conn
            recorded = self._build_locked(conn, table, kb, stem, fresh, self._epoch if epoch is None else epoch)
        finally:
            _unlock(lock)
            if own and conn is not None:
                conn.close()
        self.collect_garbage(None if own else conn)
        return recorded

    def _build_locked(self, conn: Connection, table: str, kb: str, stem: str, fresh: bool, epoch: int) -> bool:
        model_id = vectors.model_id(table)
        with ann_rows.snapshot(conn, write=True):
            ann_rows.mark_building(conn, model_id, kb)  # from now on its writes are logged
        (row,) = ann_rows.file_rows(conn, model_id, [kb])
        made = (self._updated(conn, table, row) if row.name and not fresh else None) or self._fresh(
            conn, table, kb, epoch
        )
        if made is None or epoch != self._epoch:
            return False  # the index was closed meanwhile
        builder, seq = made
        stamp = builder.save(self.folder, stem)
        row = FileRow(model_id, kb, stamp.name, seq, stamp.vectors, stamp.size, stamp.sha256, utc_now())
        with ann_rows.snapshot(conn, write=True):
            replaced = ann_rows.record_file(conn, row) if epoch == self._epoch else None
        if replaced is None:  # a newer graph was recorded meanwhile, or the index closed
            (self.folder / stamp.name).unlink(missing_ok=True)
            return False
        if replaced:
            with contextlib.suppress(OSError):  # Windows: still mapped by a reader; collected later
                (self.folder / replaced).unlink(missing_ok=True)
        log.info("built the ANN graph of %s: %d vectors", kb, stamp.vectors)
        return True

    def _fresh(self, conn: Connection, table: str, kb: str, epoch: int) -> tuple[hnsw.Builder, int] | None:
        """A graph of every vector of the partition, and the seq it stands at (None: closed meanwhile)."""
        model_id = vectors.model_id(table)
        dimensions = conn.execute("SELECT dimensions FROM embedding_models WHERE id = ?", (model_id,)).fetchone()[0]
        builder = hnsw.Builder(dimensions)
        with ann_rows.snapshot(conn):  # the vectors and the seq they stand at, in one view
            seq = ann_rows.head(conn)
            for batch in vectors.partition_batches(conn, table, kb):
                if epoch != self._epoch:
                    return None
                builder.add(batch)
        return builder, seq

    def _updated(self, conn: Connection, table: str, row: FileRow) -> tuple[hnsw.Builder, int] | None:
        """The recorded graph with the logged changes applied, and the seq it then stands at.

        None when a fresh build is better: the file is unusable or quantized, most of it changed, or
        removed vectors left too many vacant places in the graph.
        """
        try:
            builder = hnsw.Builder.from_file(self.folder / row.name, _stamp(row))
        except ValueError:
            return None
        if not builder.exact:
            return None  # an older release's quantized graph: built again as float32
        with ann_rows.snapshot(conn):
            seq = ann_rows.head(conn)
            ids, _ = ann_rows.changes_since(conn, row.model_id, row.kb, row.seq)
            if len(ids) > len(builder) // 2:
                return None
            current = vectors.current_vectors(conn, table, ids)
        builder.remove(ids)
        builder.add([(key, current[key][1]) for key in ids if key in current and current[key][0] == row.kb])
        if builder.vacant() > VACANT_SHARE * (len(builder) + builder.vacant()):
            return None
        return builder, seq

    def collect_garbage(self, conn: Connection | None = None) -> None:
        """Remove graph files that no row names (after an hour: a repair records its graphs only
        when it commits) and temporary files, of partitions no process is building now."""
        if not self.folder.is_dir():
            return
        own = connect(self.db_path) if conn is None else None
        try:
            named = {row.name for row in ann_rows.file_rows(conn or own)}
        finally:
            if own is not None:
                own.close()
        for path in self.folder.iterdir():
            if path.suffix not in (".usearch", ".tmp") or path.name in named:
                continue
            with contextlib.suppress(OSError):
                if path.suffix == ".usearch" and time.time() - path.stat().st_mtime < GARBAGE_AGE:
                    continue
                lock = _try_lock(self.folder / f"{path.name.split('~')[0]}~.lock")
                if lock is not None:
                    try:
                        path.unlink()
                    finally:
                        _unlock(lock)

    # -- verification, repair, status --------------------------------------------------------------

    def problems(self, conn: Connection) -> list[tuple[FileRow, str]]:
        """Each recorded graph that is broken or stale, and why."""
        found = []
        for row in ann_rows.file_rows(conn):
            table = vectors.table_by_id(conn, row.model_id)
            problem = "its model's vector table is gone" if table is None else self._problem(conn, table, row)
            if problem:
                found.append((row, problem))
        return found

    def _problem(self, conn: Connection, table: str, row: FileRow) -> str | None:
        if not row.name:
            lock = _try_lock(self.folder / f"{_stem(row.model_id, row.kb)}~.lock")
            if lock is None:
                return None  # being built right now
            _unlock(lock)
            return "its build was interrupted"
        ids, _ = ann_rows.changes_since(conn, row.model_id, row.kb, row.seq)
        try:
            graph = hnsw.open_graph(self.folder / row.name, _stamp(row))
            inside = sum(graph.contains(ids))
        except ValueError as exc:  # ViewerError included: checked again at the next verify
            return str(exc)
        current = vectors.current_vectors(conn, table, ids)
        expected = len(graph) - inside + sum(1 for key in ids if current.get(key, ("",))[0] == row.kb)
        # The documents say how many vectors there are; only when they disagree are the vectors counted.
        if expected == vectors.embedded_chunk_count(conn, row.kb, _identity(conn, row.model_id)):
            return None
        live = vectors.partition_count(conn, table, row.kb)
        if expected != live:
            return f"stale: with its change log it holds {expected:,} vectors, the table {live:,}"
        return None

    def check(self, conn: Connection) -> list[str]:
        return [
            f"ANN graph of {row.kb} (model {_identity(conn, row.model_id)}): {problem}"
            for row, problem in self.problems(conn)
        ]

    def repair(self, conn: Connection) -> None:
        """Rebuild every broken or stale graph now (within the caller's transaction), drop orphan rows."""
        for row, _ in self.problems(conn):
            table = vectors.table_by_id(conn, row.model_id)
            with self._guard:
                self._parts.pop((row.model_id, row.kb), None)
                self._failed.pop((row.model_id, row.kb), None)
            if table is None:
                conn.execute("DELETE FROM ann_files WHERE model_id = ? AND kb = ?", (row.model_id, row.kb))
                continue
            self.build(table, row.kb, conn, fresh=True)
        self.collect_garbage(conn)

    def status(self, conn: Connection, kb: str) -> dict[str, dict[str, Any]]:
        """``{model identity: {vectors, ann, built_at}}`` of ``kb``: whether its searches use a graph."""
        rows = {row.model_id: row for row in ann_rows.file_rows(conn, kbs=[kb])}
        out: dict[str, dict[str, Any]] = {}
        for model_id, identity in conn.execute("SELECT id, identity FROM embedding_models ORDER BY id").fetchall():
            count = vectors.embedded_chunk_count(conn, kb, identity)
            row = rows.get(model_id)
            if count or row is not None:
                built = row is not None and bool(row.name) and self.threshold > 0
                out[identity] = {"vectors": count, "ann": built, "built_at": row.built_at if built and row else None}
        return out

    def join(self, timeout: float | None = None) -> None:
        """Wait for the background builds started so far (tests, benchmarks)."""
        with self._guard:
            threads = list(self._builds.values())
        for thread in threads:
            thread.join(timeout)

    def close(self) -> None:
        """Forget every graph view; builds in progress stop without recording anything."""
        with self._guard:
            self._epoch += 1
            self._parts.clear()


def _build_errors() -> tuple[type[BaseException], ...]:
    """What a failed build raises: the database, the disk, the library (it is logged, then retried)."""
    return (*database_errors(), OSError, ValueError, RuntimeError, MemoryError, ImportError)


def _chunk_count(conn: Connection, kb: str) -> int:
    return conn.execute("SELECT count(*) FROM chunks WHERE kb = ?", (kb,)).fetchone()[0]


def _identity(conn: Connection, model_id: int) -> str:
    row = conn.execute("SELECT identity FROM embedding_models WHERE id = ?", (model_id,)).fetchone()
    return "?" if row is None else row[0]


def _stamp(row: FileRow) -> hnsw.FileStamp:
    return hnsw.FileStamp(row.name, row.size, row.sha256, row.vectors)


def _stem(model_id: int, kb: str) -> str:
    """The file-name prefix of a partition (knowledge base names are already file-name safe)."""
    return f"m{model_id}-{kb if _SAFE_KB.fullmatch(kb) else 'x' + kb.encode().hex()}"


if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
    import msvcrt

    def _lock_fd(fd: int) -> None:
        msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)

    def _unlock_fd(fd: int) -> None:
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)

else:
    import fcntl

    def _lock_fd(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)

    def _unlock_fd(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_UN)


def _try_lock(path: Path) -> int | None:
    """An exclusive lock on ``path`` without waiting (released by the OS if the process dies), or None."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        _lock_fd(fd)
    except OSError:
        os.close(fd)
        return None
    return fd


def _unlock(fd: int) -> None:
    try:
        with contextlib.suppress(OSError):
            _unlock_fd(fd)
    finally:
        os.close(fd)
