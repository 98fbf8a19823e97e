"""HNSW graph files (usearch), and the exact search over the few vectors written since one was built.

With ``_viewer_process``, the only module that imports ``usearch`` and ``numpy``, both on first
use (``coffer serve`` answers ``initialize`` without them). usearch against faiss-cpu, measured
(docs/benchmarks.md, "Approximate nearest neighbours"): both reach recall@10 ≥ 0.99 after exact
re-scoring (1M vectors, ef 256: usearch i8 0.993, faiss SQ8 0.998); faiss builds faster (346 s
against 631 s) and searches ~25 % faster. usearch was chosen for what matters with several
servers per machine: a saved graph is *viewed* (memory-mapped), so every process shares one copy
in the page cache and opens it in 0.2 s, where faiss reads its HNSW into each process's own
memory (+517 MB per process at 1M vectors, 1.7 s); and a graph takes removals and additions in
place (faiss's HNSW cannot remove), so a changed graph is updated, not rebuilt. The mapping is
made in a viewer process of its own (viewer.py), which a file cut short under it can kill
without killing ours.

Vectors are stored as float32, as sqlite-vec stores them, byte for byte: the exact re-scoring of
a search's candidates takes their vectors from the memory-mapped graph (``Graph.nearest``). Read
from the vec0 table instead, each vector is found at its offset in a 1.5 MB chunk blob by walking
that blob's overflow pages: 100 lookups took 25-36 ms at 1M vectors, where the graph's memory
map gives 65 in 0.1 ms (docs/benchmarks.md, "Re-scoring from the graph"). The price, at 1M
vectors: a 1.7 GB file instead of 533 MB with ``i8``, a build 1.7x as long, and 1.1 s instead
of 0.4 s to check the file's SHA-256 when a process first opens it. A graph saved in another
type still answers (re-scored from the vec0 table) until it is rebuilt as float32.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import importlib.util
import os
import secrets
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coffer_mcp.index.sqlite import viewer
from coffer_mcp.index.sqlite.viewer import ViewerError

__all__ = ["Builder", "Delta", "FileStamp", "Graph", "ViewerError", "as_query", "available", "open_graph"]

DTYPE = "f32"
CONNECTIVITY = 16  # HNSW "M": links per node (usearch's default)
EXPANSION_ADD = 128  # efConstruction (usearch's default)
EXPANSION_SEARCH = 256  # the least ef a search uses (recall@10 0.955 at 128, 0.993 at 256, i8 over 1M vectors)
EXACT_BELOW = 2_000  # vectors: a graph this small is searched exhaustively

Signature = tuple[int, int, int, int, int]


@dataclass(frozen=True, slots=True)
class FileStamp:
    """What a saved graph file must be to be used: its name, size, SHA-256 and vector count."""

    name: str
    size: int
    sha256: str
    vectors: int


def available() -> bool:
    """Whether usearch can be imported (located without importing it, which would load numpy)."""
    try:
        return importlib.util.find_spec("usearch") is not None
    except (ImportError, ValueError):
        return False


@functools.cache
def _index_class() -> Any:
    """usearch's ``Index``, imported once the system C++ runtime has set up its locale.

    usearch's Linux wheels carry their own libstdc++ (statically linked, symbols exported). The
    loader merges the C++ locale's unique statics across the copies, so when usearch is loaded
    first, a library loaded later against the system libstdc++ finds a locale built by the other
    copy and crashes: here, a segfault in ``codecvt::do_unshift`` while importing onnxruntime
    (fastembed) after usearch. With the system runtime's locale built first, both orders work
    (tests/index/test_ann.py runs the crashing order in a subprocess).
    """
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            classic = ctypes.CDLL("libstdc++.so.6")._ZNSt6locale7classicEv  # std::locale::classic()
            classic.restype = ctypes.c_void_p
            classic()
    from usearch.index import Index

    return Index


def as_query(vector: Sequence[float]) -> Any:
    """A query as a unit float32 array (the graph and the delta score cosine on unit vectors)."""
    import numpy as np

    array = np.asarray(vector, dtype=np.float32)
    norm = float(np.linalg.norm(array))
    return array / norm if norm else array


def _rows(blobs: Sequence[bytes], dimensions: int) -> Any:
    import numpy as np

    return np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(blobs), dimensions)


def _unit_rows(blobs: Sequence[bytes], dimensions: int) -> Any:
    import numpy as np

    rows = _rows(blobs, dimensions)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return rows / np.where(norms == 0, 1, norms)


class Graph:
    """A saved graph open for search: viewed by the viewer process (viewer.py says why not here)."""

    def __init__(self, path: Path, view: viewer.View, signature: Signature) -> None:
        self.path, self._view, self._signature = path, view, signature

    def __len__(self) -> int:
        return self._view.size

    @property
    def dimensions(self) -> int:
        return self._view.dimensions

    @property
    def exact(self) -> bool:
        """Whether the graph holds its vectors as stored (float32), so ``nearest`` gives them back."""
        return self._view.exact

    def current(self) -> bool:
        """Whether the graph can be searched as it was opened: its viewer process still runs, and its
        file is the one viewed (same inode, size and times: not written, cut short or replaced since)."""
        return self._view.current() and _signature(self.path) == self._signature

    def nearest(self, query: Any, count: int) -> list[tuple[int, bytes | None]]:
        """The keys of about the ``count`` nearest vectors (approximate), nearest first, each with its
        stored float32 vector (None from a graph that is not ``exact``).

        Raises:
            ViewerError: the viewer process ended (its file was cut short?) or failed.
        """
        import numpy as np

        if not len(self):
            return []
        query = np.asarray(query, dtype=np.float32).tobytes()
        # A small graph is compared with every vector: as fast, and deterministic.
        exhaustive = len(self) <= EXACT_BELOW
        return self._view.nearest(query, count, expansion=max(EXPANSION_SEARCH, count), exhaustive=exhaustive)

    def contains(self, keys: Sequence[int]) -> list[bool]:
        """Raises ViewerError as ``nearest`` does."""
        return self._view.contains(keys) if keys else []


class Builder:
    """A graph being built from batches of ``(chunk_id, float32 blob)``; saved once, atomically."""

    def __init__(self, dimensions: int, *, threads: int = 0, index: Any = None) -> None:
        self.dimensions, self.threads = dimensions, threads
        self._index = (
            index
            if index is not None
            else _index_class()(
                ndim=dimensions,
                metric="cos",
                dtype=DTYPE,
                connectivity=CONNECTIVITY,
                expansion_add=EXPANSION_ADD,
                expansion_search=EXPANSION_SEARCH,
            )
        )

    @classmethod
    def from_file(cls, path: Path, stamp: FileStamp, *, threads: int = 0) -> Builder:
        """A saved graph loaded to be changed (checked as ``open_graph`` checks it).

        Raises:
            ValueError: the file is missing, of another size or content, or unreadable.
        """
        _check(path, stamp)
        try:
            index = _index_class().restore(str(path), view=False)  # read into memory, not mapped
        except (RuntimeError, ValueError, OSError) as exc:
            raise ValueError(f"its file {path.name} cannot be read: {exc}") from exc
        if index is None:
            raise ValueError(f"its file {path.name} is not a graph file")
        _check_count(path, stamp, len(index))
        return cls(int(index.ndim), threads=threads, index=index)

    def __len__(self) -> int:
        return len(self._index)

    def vacant(self) -> int:
        """Places of removed vectors not yet taken by new ones (they slow the graph down)."""
        return int(self._index.stats.nodes) - len(self._index)

    def remove(self, keys: Sequence[int]) -> None:
        import numpy as np

        if keys:
            self._index.remove(np.asarray(keys, dtype=np.uint64))

    @property
    def exact(self) -> bool:
        """Whether the graph holds its vectors as stored (see ``Graph.exact``)."""
        return _holds_floats(self._index)

    def add(self, rows: Sequence[tuple[int, bytes]]) -> None:
        """Add vectors as stored (the cosine metric normalizes them itself; ``Graph.vectors`` gives
        back the same bytes)."""
        import numpy as np

        if rows:
            keys = np.asarray([chunk_id for chunk_id, _ in rows], dtype=np.uint64)
            self._index.add(keys, _rows([blob for _, blob in rows], self.dimensions), threads=self.threads)

    def save(self, folder: Path, stem: str) -> FileStamp:
        """Write the graph as ``<stem>~<token>.usearch``: to a temporary file, synced, then renamed.

        A crash leaves at most a ``.tmp`` file (removed later), never a half-written graph under
        a name the index refers to.
        """
        folder.mkdir(parents=True, exist_ok=True)
        token = secrets.token_hex(6)
        temporary, final = folder / f"{stem}~{token}.tmp", folder / f"{stem}~{token}.usearch"
        try:
            self._index.save(str(temporary))
            _fsync(temporary)
            digest, size = _sha256(temporary)
            os.replace(temporary, final)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
        _fsync_folder(folder)
        return FileStamp(final.name, size, digest, len(self._index))


def open_graph(path: Path, stamp: FileStamp) -> Graph:
    """View a saved graph, after checking it is the file the index recorded (size, SHA-256, count).

    Raises:
        ViewerError: the viewer process cannot start, or ended while it opened the file.
        ValueError: the file is missing, of another size or content, or unreadable.
    """
    viewer.VIEWER.check()  # before reading the whole file for nothing
    signature = _check(path, stamp)
    try:
        view = viewer.VIEWER.open(path)
    except viewer.ViewerError:
        raise
    except ValueError as exc:
        raise ValueError(f"its file {path.name} cannot be read: {exc}") from exc
    _check_count(path, stamp, view.size)
    if _signature(path) != signature:
        raise ValueError(f"its file {path.name} changed while it was opened")
    return Graph(path, view, signature)


def _check(path: Path, stamp: FileStamp) -> Signature:
    """The file's signature (``_signature``) once its size and SHA-256 are the recorded ones."""
    signature = _signature(path)
    if signature is None:
        raise ValueError(f"its file {path.name} is missing")
    size = signature[2]
    if size != stamp.size:
        raise ValueError(f"its file {path.name} has {size:,} bytes, not {stamp.size:,} (truncated or replaced)")
    digest, _ = _sha256(path)
    if digest != stamp.sha256:
        raise ValueError(f"its file {path.name} does not match its checksum (corrupt)")
    return signature


def _check_count(path: Path, stamp: FileStamp, count: int) -> None:
    if count != stamp.vectors:
        raise ValueError(f"its file {path.name} holds {count:,} vectors, not {stamp.vectors:,}")


def _signature(path: Path) -> Signature | None:
    """What changes when a file is written, cut short or replaced: device, inode, size, modified
    and changed times (None: no such file)."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)


def _holds_floats(index: Any) -> bool:
    return getattr(index.dtype, "name", "") == "F32"


class Delta:
    """Vectors written since the graph was built, searched exactly (a few thousand at most)."""

    def __init__(self, dimensions: int) -> None:
        self.dimensions = dimensions
        self._stored: dict[int, bytes] = {}  # as sqlite-vec stores them
        self._matrix: tuple[Any, Any] | None = None  # (keys, unit rows), made at the next search

    def __len__(self) -> int:
        return len(self._stored)

    def put(self, rows: Sequence[tuple[int, bytes]]) -> None:
        if rows:
            self._stored.update(rows)
            self._matrix = None

    def discard(self, chunk_ids: Sequence[int]) -> None:
        for chunk_id in chunk_ids:
            if self._stored.pop(chunk_id, None) is not None:
                self._matrix = None

    def vector(self, chunk_id: int) -> bytes:
        """The stored float32 vector of a chunk the delta holds."""
        return self._stored[chunk_id]

    def search(self, query: Any, count: int) -> list[int]:
        import numpy as np

        if not self._stored:
            return []
        if self._matrix is None:
            keys = np.fromiter(self._stored, dtype=np.int64, count=len(self._stored))
            self._matrix = (keys, _unit_rows(list(self._stored.values()), self.dimensions))
        keys, matrix = self._matrix
        scores = matrix @ query
        best = np.argsort(-scores, kind="stable")[:count]
        return [int(key) for key in keys[best]]


def _sha256(path: Path) -> tuple[str, int]:
    digest, size = hashlib.sha256(), 0
    with path.open("rb") as file:
        while block := file.read(1 << 20):
            digest.update(block)
            size += len(block)
    return digest.hexdigest(), size


def _fsync(path: Path) -> None:
    with path.open("r+b") as file:  # writable: Windows syncs only handles open for writing
        os.fsync(file.fileno())


def _fsync_folder(folder: Path) -> None:
    if os.name == "nt":  # Windows cannot open a folder to sync it; the rename is durable there
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
