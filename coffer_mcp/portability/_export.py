"""Export: one knowledge base to one verified pack file, written atomically."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import secrets
import tarfile
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import yaml
from pydantic import BaseModel, ConfigDict, Field

from coffer_mcp import __version__
from coffer_mcp.errors import InvalidArgumentError, StoreError
from coffer_mcp.portability._files import CHUNK, hash_file, visible_files
from coffer_mcp.portability._format import (
    DOC_MEMBER,
    FORMAT_VERSION,
    KB_YAML,
    MANIFEST,
    MAP_MEMBER,
    RAW_MEMBER,
    VECTORS,
    Counts,
    FileEntry,
    Manifest,
    PackedKb,
    VectorSet,
    config_yaml,
    exact_mtime,
)
from coffer_mcp.portability._vectors import export_identity, write_vectors
from coffer_mcp.store import KbPaths, read_kb_config, remove_file
from coffer_mcp.store.files import fsync_dir
from coffer_mcp.timeutil import utc_now

if TYPE_CHECKING:
    from coffer_mcp.models import Progress
    from coffer_mcp.services.catalogue import Catalogue
    from coffer_mcp.services.freshness import Freshness
    from coffer_mcp.services.locks import Locks
    from coffer_mcp.services.providers import Providers

__all__ = ["PACK_SUFFIX", "ExportResult", "export_kb"]

PACK_SUFFIX = ".cofferpack"
_COMPRESSLEVEL = 6  # gzip's default trade-off; 9 costs ~2x the time for ~1% on Markdown


class ExportResult(BaseModel):
    """What ``export_kb`` wrote."""

    model_config = ConfigDict(frozen=True)

    kb: str
    path: str = Field(description="Absolute path of the pack file.")
    bytes: int = Field(description="Size of the pack file.")
    sha256: str = Field(description="sha256 of the pack file, to check a copy.")
    documents: int
    raw_files: int
    vectors: int = Field(description="Chunk vectors carried (0 without --with-vectors).")
    embedding_model: str | None = Field(default=None, description="Identity of the model the vectors come from.")
    created_at: str


def export_kb(
    catalogue: Catalogue,
    locks: Locks,
    freshness: Freshness,
    providers: Providers,
    name: str,
    out: str | Path,
    *,
    with_vectors: bool = False,
    overwrite: bool = False,
    progress: Progress | None = None,
) -> ExportResult:
    """Write knowledge base ``name`` to the pack file ``out`` (a gzip tar, ``.cofferpack``).

    The pack holds ``kb.yaml``, every ``docs/<id>.md``, ``raw/<id>.<ext>`` and source map, a manifest with
    each file's sha256 and size, and with ``with_vectors`` the current model's chunk vectors.
    The KB's write lock is held while its files are read, so the pack is one consistent state.
    Surfaces that take ``out`` from an agent restrict it first (``PortabilityService.export_allowed``).

    Raises:
        KnowledgeBaseNotFoundError: no such knowledge base.
        InvalidArgumentError: ``out`` is a folder or exists (without ``overwrite``), its folder does
            not, or it lies inside the store.
    """
    kb, _ = catalogue.open_kb(name)
    target = _output_path(catalogue, Path(out), name, overwrite)
    freshness.refresh(name)  # adopt files dropped in by hand, so every document has an id
    with locks.writing(kb), tempfile.TemporaryFile(dir=catalogue.paths.home) as vector_file:
        config = config_yaml(read_kb_config(kb.config, fallback_time=utc_now()))
        files = _pack_files(kb)
        entries = {KB_YAML: _entry_of_bytes(config)}
        for done, (member, path) in enumerate(files, 1):
            sha, size = hash_file(path)
            entries[member] = FileEntry(sha256=sha, size=size)
            if progress:
                progress(done, len(files), "hashing")
        vector_set = _vectors(catalogue, providers, name, files, vector_file) if with_vectors else None
        if vector_set is not None:
            entries[VECTORS] = _entry_of_file(vector_file)
        manifest = _manifest(name, config, entries, vector_set)
        written = _write_pack(target, manifest, config, files, vector_file if vector_set else None, progress)
    counts = manifest.counts
    return ExportResult(
        kb=name,
        path=str(target),
        bytes=written[1],
        sha256=written[0],
        documents=counts.documents,
        raw_files=counts.raw_files,
        vectors=counts.vectors,
        created_at=manifest.created_at,
        embedding_model=vector_set.model if vector_set else None,
    )


def _output_path(catalogue: Catalogue, out: Path, name: str, overwrite: bool) -> Path:
    target = out.expanduser().absolute()
    if not target.parent.is_dir():
        raise InvalidArgumentError(
            f"The folder {target.parent} does not exist.", hint="Create it, or pick another path."
        )
    resolved = target.parent.resolve() / target.name
    if resolved.is_relative_to(catalogue.paths.knowledge.resolve()):
        raise InvalidArgumentError(
            f"{target} is inside the Coffer store.", hint="Write the pack outside COFFER_HOME/knowledge."
        )
    if target.is_dir():  # not even overwrite replaces a folder
        raise InvalidArgumentError(
            f"{target} is a folder.", hint=f"Name the pack file to write in it, e.g. {target / name}{PACK_SUFFIX}."
        )
    if target.exists() and not overwrite:
        raise InvalidArgumentError(f"{target} already exists.", hint="Pick another file name, or {arg:overwrite}.")
    return resolved


def _pack_files(kb: KbPaths) -> list[tuple[str, Path]]:
    """(member name, path) of every document and its originals, documents first, by id.

    Only files named as a pack may hold them are taken (a hand-made file the reconcile could not
    adopt, e.g. an empty one, stays behind).
    """
    docs = [(f"docs/{p.name}", p) for p in visible_files(kb.docs) if DOC_MEMBER.fullmatch(f"docs/{p.name}")]
    raws = [(f"raw/{p.name}", p) for p in visible_files(kb.raw)]
    live = {member[5:-3] for member, _ in docs}
    return docs + [(m, p) for m, p in raws if (found := _raw_member(m)) and found.group(1) in live]


def _raw_member(name: str) -> re.Match[str] | None:
    """An original's or a source map's member name, matched (its group 1 is the document id)."""
    return RAW_MEMBER.fullmatch(name) or MAP_MEMBER.fullmatch(name)


def _vectors(
    catalogue: Catalogue, providers: Providers, name: str, files: list[tuple[str, Path]], out: BinaryIO
) -> VectorSet | None:
    identity = export_identity(catalogue.index, name, providers.embedder)
    if identity is None:
        return None
    doc_ids = {member[5:-3] for member, _ in files if member.startswith("docs/")}
    vector_set = write_vectors(catalogue.index, name, identity, doc_ids, out)
    out.flush()
    return vector_set


def _entry_of_bytes(data: bytes) -> FileEntry:
    return FileEntry(sha256=hashlib.sha256(data).hexdigest(), size=len(data))


def _entry_of_file(handle: BinaryIO) -> FileEntry:
    handle.seek(0)
    digest, size = hashlib.sha256(), 0
    while block := handle.read(CHUNK):
        digest.update(block)
        size += len(block)
    return FileEntry(sha256=digest.hexdigest(), size=size)


def _manifest(name: str, config: bytes, entries: dict[str, FileEntry], vector_set: VectorSet | None) -> Manifest:
    documents = sum(m.startswith("docs/") for m in entries)
    raws = sum(bool(RAW_MEMBER.fullmatch(m)) for m in entries)
    maps = any(MAP_MEMBER.fullmatch(m) for m in entries)
    vectors = sum(d.chunks for d in vector_set.documents) if vector_set else 0
    return Manifest(
        format_version=FORMAT_VERSION if maps else 1,  # readable by a Coffer that knows no source map
        coffer_version=__version__,
        created_at=utc_now(),
        kb=PackedKb(name=name, config=yaml.safe_load(config)),
        counts=Counts(documents=documents, raw_files=raws, vectors=vectors),
        files=entries,
        vectors=vector_set,
    )


class _HashingWriter:
    """The pack file as tarfile writes it, hashed on the way (saves reading it back)."""

    def __init__(self, raw: BinaryIO) -> None:
        self.raw = raw
        self.digest = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.digest.update(data)
        self.size += len(data)
        return self.raw.write(data)

    def flush(self) -> None:
        self.raw.flush()


class _HashingReader:
    def __init__(self, raw: BinaryIO) -> None:
        self.raw = raw
        self.digest = hashlib.sha256()
        self.size = 0

    def read(self, size: int = -1) -> bytes:
        data = self.raw.read(size)
        self.digest.update(data)
        self.size += len(data)
        return data


def _write_pack(
    target: Path,
    manifest: Manifest,
    config: bytes,
    files: list[tuple[str, Path]],
    vector_file: BinaryIO | None,
    progress: Progress | None,
) -> tuple[str, int]:
    """Write the tar beside ``target``, fsync it, rename it into place. Returns (sha256, size)."""
    tmp = target.with_name(f".{target.name}.tmp-{secrets.token_hex(6)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o644)
    try:
        with os.fdopen(fd, "wb") as raw:
            sink = _HashingWriter(raw)
            with tarfile.open(
                fileobj=sink,
                mode="w:gz",  # type: ignore[call-overload]  # a duck-typed file compresslevel=_COMPRESSLEVEL,
                format=tarfile.PAX_FORMAT,
            ) as tar:
                body = json.dumps(manifest.model_dump(mode="json"), ensure_ascii=False, indent=1).encode("utf-8")
                _add(tar, MANIFEST, io.BytesIO(body), _entry_of_bytes(body))
                _add(tar, KB_YAML, io.BytesIO(config), manifest.files[KB_YAML])
                for done, (member, path) in enumerate(files, 1):
                    with path.open("rb") as handle:
                        _add(tar, member, handle, manifest.files[member], os.fstat(handle.fileno()).st_mtime_ns)
                    if progress:
                        progress(done, len(files), "writing")
                if vector_file is not None:
                    vector_file.seek(0)
                    _add(tar, VECTORS, vector_file, manifest.files[VECTORS])
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(tmp, target)
    except OSError as exc:
        remove_file(tmp)
        raise StoreError(
            f"Cannot write {target}: {exc}.", hint="Check the free space and the folder's permissions."
        ) from exc
    except BaseException:
        remove_file(tmp)
        raise
    fsync_dir(target.parent)
    return sink.digest.hexdigest(), sink.size


def _add(tar: tarfile.TarFile, member: str, handle: BinaryIO, entry: FileEntry, mtime_ns: int | None = None) -> None:
    """Add one member, checking it still has the content the manifest records.

    A file's time travels exactly (to the nanosecond, in a pax ``mtime`` record) beside the whole
    seconds of the tar header: it is the ``updated_at`` of a document edited by hand.
    """
    info = tarfile.TarInfo(member)
    info.size, info.mode, info.mtime = entry.size, 0o644, int(time.time())
    if mtime_ns is not None and mtime_ns >= 0:
        info.mtime = mtime_ns // 10**9
        info.pax_headers = {"mtime": exact_mtime(mtime_ns)}
    reader = _HashingReader(handle)
    try:
        tar.addfile(info, reader)
    except OSError as exc:
        if reader.size < entry.size:  # tarfile's "unexpected end of data": the file shrank
            raise StoreError(f"{member} changed while it was exported.", hint="Export again.") from exc
        raise
    if reader.digest.hexdigest() != entry.sha256:
        raise StoreError(f"{member} changed while it was exported.", hint="Export again.")
