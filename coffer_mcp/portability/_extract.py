"""Reading an untrusted pack into a staging folder, verifying every byte against its manifest.

Nothing here writes outside the staging folder, and nothing is extracted by ``tarfile`` itself:
each member is checked (name, type, declared size) before a byte of it is read, then copied into
a file we create, hashed on the way. The manifest comes first, so its claims are checked before
any data: declared sizes over the limit, member counts, unexpected or missing members, and any
member whose header disagrees with it stop the import. The decompressed stream is bounded as
well, so a gzip bomb or an oversized tar header (pax, GNU long name) is refused, not inflated.
The file must be the one gzip stream the export wrote, whole and with nothing after it.
"""

from __future__ import annotations

import contextlib
import io
import os
import tarfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from coffer_mcp.errors import InvalidArgumentError, StoreError
from coffer_mcp.portability._files import CHUNK, copy_hashed, fsync_tree
from coffer_mcp.portability._format import (
    KB_YAML,
    MANIFEST,
    MAX_CONFIG_BYTES,
    MAX_MANIFEST_BYTES,
    VECTORS,
    Manifest,
    PackError,
    member_kind,
    parse_config,
    parse_manifest,
    parse_mtime,
)
from coffer_mcp.portability._sniff import GZIP_MAGIC, HEAD_BYTES, NOT_A_PACK_HINT, check_looks_like_pack
from coffer_mcp.store import KbPaths, make_kb_config
from coffer_mcp.store.frontmatter import frontmatter_problem

if TYPE_CHECKING:
    from coffer_mcp.models import Progress

__all__ = ["Extracted", "Limits", "extract_pack"]

_MAX_READ = 2 * CHUNK  # no legitimate tar header of a pack is larger
_TAR_OVERHEAD = 3 * 512  # a member's header, a pax header and padding
_STREAM_SLACK = 64 * 1024  # end-of-archive blocks and record padding


@dataclass(frozen=True, slots=True)
class Limits:
    """What an import accepts: total uncompressed bytes and number of members."""

    max_bytes: int
    max_members: int


@dataclass(frozen=True, slots=True)
class Extracted:
    """A verified pack in its staging folder: ``kb`` is a complete KB folder ready to move."""

    manifest: Manifest
    kb: KbPaths
    vectors: Path | None


def extract_pack(pack: Path, staging: Path, name: str, limits: Limits, progress: Progress | None = None) -> Extracted:
    """Verify ``pack`` while copying it into ``staging``; raises ``PackError`` at the first lie.

    ``name`` is only the name the staged ``KbPaths`` carries.
    """
    kb = KbPaths(name, staging / "kb")
    kb.docs.mkdir(parents=True)
    kb.raw.mkdir()
    try:
        with _open_pack(pack) as stream, tarfile.open(fileobj=stream, mode="r:") as tar:
            members = iter(tar)
            manifest = _read_manifest(tar, next(members, None), limits)
            overhead = _TAR_OVERHEAD * (len(manifest.files) + 1) + _STREAM_SLACK
            stream.limit = stream.tell() + manifest.declared_bytes + overhead
            _copy_members(tar, members, manifest, staging, progress)
            _check_the_end(stream)
    except (tarfile.TarError, EOFError, zlib.error) as exc:
        raise PackError(f"The pack is not a readable tar.gz archive: {exc}.") from exc
    except OSError as exc:
        raise StoreError(f"Cannot unpack into {staging}: {exc}.", hint="Check the free space in COFFER_HOME.") from exc
    _match_config(kb, manifest)
    fsync_tree(staging)
    return Extracted(manifest=manifest, kb=kb, vectors=staging / VECTORS if manifest.vectors else None)


def _match_config(kb: KbPaths, manifest: Manifest) -> None:
    """The staged ``kb.yaml`` must be valid and say what the manifest says."""
    config = parse_config(kb.config.read_bytes())
    if config != make_kb_config(**manifest.kb.config):
        raise PackError("The pack's kb.yaml disagrees with the settings in its manifest.")


@contextlib.contextmanager
def _open_pack(pack: Path) -> Iterator[_Bounded]:
    try:
        handle = pack.open("rb")
    except IsADirectoryError as exc:
        raise InvalidArgumentError(f"{pack} is a folder, not a pack file.", hint="Pass a .cofferpack file.") from exc
    except OSError as exc:
        raise InvalidArgumentError(f"Cannot read {pack}: {exc.strerror or exc}.", hint="Check the path.") from exc
    with handle:
        head = handle.read(HEAD_BYTES)
        handle.seek(0)
        compressed = head.startswith(GZIP_MAGIC)
        source: BinaryIO = _Gunzip(handle) if compressed else handle  # type: ignore[assignment]
        with source:
            inner = None
            if compressed:  # a damaged gzip stream raises here, and is reported as a damaged pack
                inner = source.read(HEAD_BYTES)
                source.seek(0)
            check_looks_like_pack(pack, head, inner)
            yield _Bounded(source, MAX_MANIFEST_BYTES + _STREAM_SLACK)


class _Bounded(io.RawIOBase):
    """The decompressed tar stream, refusing to grow past ``limit`` or to serve oversized reads."""

    def __init__(self, inner: BinaryIO, limit: int) -> None:
        super().__init__()
        self.inner = inner
        self.limit = limit

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0 or size > _MAX_READ:
            raise PackError("The pack holds an oversized tar header.")
        self._check(self.inner.tell() + size)
        return self.inner.read(size)

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        if whence == os.SEEK_SET:
            self._check(offset)
        return self.inner.seek(offset, whence)

    def tell(self) -> int:
        return self.inner.tell()

    def _check(self, position: int) -> None:
        if position > self.limit:
            raise PackError("The pack expands beyond the sizes its manifest declares (a tar bomb?).")


def _read_manifest(tar: tarfile.TarFile, first: tarfile.TarInfo | None, limits: Limits) -> Manifest:
    if first is None:
        raise PackError("The pack is empty.")
    if first.name != MANIFEST or _member_name(first) != MANIFEST:
        raise PackError(
            f"This tar archive is not a Coffer pack: its first member is {first.name!r:.120}, not manifest.json.",
            hint=f"{NOT_A_PACK_HINT} If it is a pack, it was altered: export it again from its source.",
        )
    if first.size > MAX_MANIFEST_BYTES:
        raise PackError(f"The pack's manifest claims {first.size:,} bytes; the limit is {MAX_MANIFEST_BYTES:,}.")
    manifest = parse_manifest(_read_all(tar, first))
    declared = manifest.declared_bytes
    if declared > limits.max_bytes:
        raise PackError(
            f"The pack declares {declared:,} bytes of files; this import accepts at most {limits.max_bytes:,}.",
            hint="Free disk space in COFFER_HOME, or raise the import's size limit if you trust the pack.",
        )
    if len(manifest.files) + 1 > limits.max_members:
        raise PackError(f"The pack declares {len(manifest.files) + 1:,} members; the limit is {limits.max_members:,}.")
    size = manifest.files[KB_YAML].size
    if size > MAX_CONFIG_BYTES:
        raise PackError(f"The pack's kb.yaml claims {size:,} bytes.")
    return manifest


def _read_all(tar: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    source = tar.extractfile(member)
    assert source is not None  # a regular file, checked by _member_name
    chunks, left = [], member.size
    while left and (block := source.read(min(CHUNK, left))):
        chunks.append(block)
        left -= len(block)
    return b"".join(chunks)


def _copy_members(
    tar: tarfile.TarFile,
    members: Iterator[tarfile.TarInfo],
    manifest: Manifest,
    staging: Path,
    progress: Progress | None,
) -> None:
    seen: set[str] = set()
    total = len(manifest.files)
    for member in members:
        name = _member_name(member)
        if name is None:
            continue
        if name in seen:
            raise PackError(f"The pack holds {name!r} twice.")
        entry = manifest.files.get(name)
        if entry is None:
            raise PackError(f"The pack holds {name!r:.120}, which its manifest does not list.")
        if member.size != entry.size:
            raise PackError(f"{name} claims {member.size:,} bytes; the manifest records {entry.size:,}.")
        source = tar.extractfile(member)
        assert source is not None
        dest = _destination(staging, name)
        sha, size = copy_hashed(source, dest, size=member.size)
        if size != entry.size or sha != entry.sha256:
            raise PackError(f"{name} does not match the sha256 its manifest records: it was altered.")
        _check_yaml(name, dest)
        _keep_time(dest, member)
        seen.add(name)
        if progress:
            progress(len(seen), total, "verifying")
    missing = sorted(set(manifest.files) - seen)
    if missing:
        raise PackError(f"The pack lacks {len(missing)} member(s) its manifest lists, e.g. {missing[0]}.")


def _keep_time(dest: Path, member: tarfile.TarInfo) -> None:
    """Give the file its time in the pack, exactly: it is the ``updated_at`` of a document edited by
    hand, and the fallback for missing timestamps."""
    ns = parse_mtime(member.pax_headers["mtime"] if "mtime" in member.pax_headers else str(member.mtime))
    if ns is not None:
        os.utime(dest, ns=(ns, ns))


def _check_yaml(name: str, path: Path) -> None:
    """Refuse a document or ``kb.yaml`` whose YAML is beyond the store parser's bounds (an alias bomb)."""
    if not (name == KB_YAML or (name.startswith("docs/") and name.endswith(".md"))):
        return
    problem = frontmatter_problem(path.read_bytes().decode("utf-8", errors="replace"), whole=name == KB_YAML)
    if problem:
        raise PackError(
            f"{name} is unsafe: {problem}.",
            hint="Coffer never writes such YAML: the pack was crafted "
            "or altered. Ask its author for a pack made by 'coffer kb export'.",
        )


def _member_name(member: tarfile.TarInfo) -> str | None:
    """The member's name if it is a file a pack may hold; None for the two folders; else refuse."""
    name = member.name
    shown = repr(name[:120])
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        raise PackError(f"The pack holds a member with an absolute path: {shown}.")
    if ".." in name.replace("\\", "/").split("/"):
        raise PackError(f"The pack holds a member that climbs out of its folder: {shown}.")
    if member.issym() or member.islnk():
        raise PackError(f"The pack holds a link: {shown} -> {member.linkname[:120]!r}.")
    if member.ischr() or member.isblk() or member.isfifo():
        raise PackError(f"The pack holds a device or pipe: {shown}.")
    if member.isdir():
        if name.rstrip("/") in ("docs", "raw"):
            return None
        raise PackError(f"The pack holds an unexpected folder: {shown}.")
    if member.type not in (tarfile.REGTYPE, tarfile.AREGTYPE):
        raise PackError(f"The pack holds a member of an unsupported type: {shown}.")
    if member_kind(name) is None:
        raise PackError(f"The pack holds an unexpected member: {shown}.")
    return name


def _destination(staging: Path, name: str) -> Path:
    """Where a verified member goes: the KB's files under ``kb/``, the rest beside it."""
    return staging / "kb" / name if member_kind(name) in ("doc", "raw", "map", "config") else staging / name


_COPY_AGAIN = (
    "Copy the pack again from where it was exported (its sha256, printed by the export, tells a good "
    "copy), or export it again."
)


def _check_the_end(stream: _Bounded) -> None:
    """Read the pack to its end: after the archive's end marker only zeros may follow (tar's padding),
    and reading to the end checks a compressed pack's trailer (``_Gunzip``)."""
    # Within the stream's bound: a pack that goes on past it is refused as one that expands too far.
    while block := stream.read(max(1, min(CHUNK, stream.limit - stream.tell()))):
        if block.strip(b"\0"):
            raise PackError("The pack has bytes after its end: data follows its archive's end.", hint=_COPY_AGAIN)


class _Gunzip(io.RawIOBase):
    """The one gzip stream a pack is, decompressed; refusing a file that ends before the stream's
    trailer, or that goes on after it.

    ``gzip.GzipFile`` reads concatenated streams as one and skips zeros after the last, and only
    checks a trailer it reaches: a pack cut short, or with bytes after it, passed. Seeking
    backwards starts again from the beginning (only the check of the file's head does).
    """

    def __init__(self, raw: BinaryIO) -> None:
        super().__init__()
        self.raw = raw
        self._start()

    def _start(self) -> None:
        self.raw.seek(0)
        self._inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)  # gzip framing: header, CRC-32, length
        self._input = b""
        self._position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        target = offset if whence == os.SEEK_SET else self._position + offset
        if whence not in (os.SEEK_SET, os.SEEK_CUR) or target < 0:
            raise io.UnsupportedOperation("a pack's stream seeks from its start or its position only")
        if target < self._position:
            self._start()
        while self._position < target and self.read(min(CHUNK, target - self._position)):
            pass
        return self._position

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0:
            raise io.UnsupportedOperation("a pack's stream is read in bounded blocks")
        parts: list[bytes] = []
        wanted = size
        while wanted and (block := self._inflated(wanted)):
            parts.append(block)
            wanted -= len(block)
        data = b"".join(parts)
        self._position += len(data)
        return data

    def _inflated(self, most: int) -> bytes:
        """Up to ``most`` more bytes of the stream; b"" at its end (which must be the file's)."""
        while not self._inflate.eof:
            if not self._input:
                self._input = self.raw.read(CHUNK)
                if not self._input:
                    raise PackError(
                        "The pack is cut short: the file ends before its compressed stream does "
                        "(a copy or download that did not finish?).",
                        hint=_COPY_AGAIN,
                    )
            try:
                block = self._inflate.decompress(self._input, most)
            except zlib.error as exc:
                if "incorrect data check" in str(exc) or "incorrect length check" in str(exc):
                    raise PackError(
                        "The pack is damaged: what it decompresses to does not match its checksum.",
                        hint=_COPY_AGAIN,
                    ) from exc
                raise  # reported as an unreadable archive
            self._input = self._inflate.unconsumed_tail
            if self._inflate.eof:
                self._check_nothing_follows()
            if block:
                return block
        return b""

    def _check_nothing_follows(self) -> None:
        here = self.raw.tell()
        after = len(self._inflate.unused_data) + self.raw.seek(0, os.SEEK_END) - here
        if after:
            raise PackError(
                f"The pack has {after:,} bytes after its end: they follow its compressed stream "
                "(two files joined, or a copy written over a longer file?).",
                hint=_COPY_AGAIN,
            )
