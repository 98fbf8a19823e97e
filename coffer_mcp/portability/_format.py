"""The pack format: member names, the manifest, what an import checks, and the pack's own errors.

A pack is a gzip-compressed tar whose first member is ``manifest.json``; then ``kb.yaml``,
``docs/<id>.md``, ``raw/<id>.<ext>``, ``raw/<id>.map.json`` (source maps, from format version 2)
and, optionally, ``vectors.f32``. Nothing else may be in it. A pack holding no source map is
written as version 1, which every Coffer reads.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from coffer_mcp.errors import InvalidArgumentError, PackError
from coffer_mcp.store import KbConfig, config_mapping, make_kb_config

__all__ = [
    "DOC_MEMBER",
    "FORMAT",
    "FORMAT_VERSION",
    "KB_YAML",
    "MANIFEST",
    "MAP_MEMBER",
    "MAX_MANIFEST_BYTES",
    "RAW_MEMBER",
    "VECTORS",
    "Counts",
    "FileEntry",
    "Manifest",
    "PackError",
    "VectorDocument",
    "VectorSet",
    "config_yaml",
    "exact_mtime",
    "member_kind",
    "parse_config",
    "parse_manifest",
    "parse_mtime",
]

FORMAT: Literal["coffer-pack"] = "coffer-pack"
FORMAT_VERSION: Literal[2] = 2
"""The newest format this Coffer writes and reads (2: source maps)."""
MANIFEST = "manifest.json"
KB_YAML = "kb.yaml"
VECTORS = "vectors.f32"
MAX_MANIFEST_BYTES = 256 * 1024 * 1024
MAX_CONFIG_BYTES = 1024 * 1024
_ULID = r"[0-9A-HJKMNP-TV-Z]{26}"
DOC_MEMBER = re.compile(rf"docs/({_ULID})\.md")
RAW_MEMBER = re.compile(rf"raw/({_ULID})\.([a-z0-9_-]{{1,16}})")
MAP_MEMBER = re.compile(rf"raw/({_ULID})\.map\.json")
_SHA256 = r"^[0-9a-f]{64}$"
_MTIME = re.compile(r"(\d{1,11})(?:\.(\d{1,9})\d*)?")
_MAX_MTIME = 2**34  # seconds: beyond the year 2500 a file time is a lie


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FileEntry(_Strict):
    sha256: str = Field(pattern=_SHA256)
    size: int = Field(ge=0)


class VectorDocument(_Strict):
    """One document's vectors: ``chunks`` rows of the vectors member, in chunk-position order."""

    id: str = Field(pattern=f"^{_ULID}$")
    chunks: int = Field(ge=1, le=10_000_000)
    text_sha256: str = Field(pattern=_SHA256, description="sha256 of the title and chunk texts embedded.")


class VectorSet(_Strict):
    model: str = Field(min_length=1, max_length=500, description="The embedding model identity.")
    dimensions: int = Field(ge=1, le=8192)
    dtype: Literal["float32-le"] = "float32-le"
    documents: list[VectorDocument]


class Counts(_Strict):
    documents: int = Field(ge=0)
    raw_files: int = Field(ge=0)
    vectors: int = Field(ge=0, description="Chunk vectors in the vectors member.")


class PackedKb(_Strict):
    name: str = Field(max_length=200)
    config: dict[str, Any]


class Manifest(_Strict):
    format: Literal["coffer-pack"] = FORMAT
    format_version: Literal[1, 2] = 1
    coffer_version: str = Field(max_length=100)
    created_at: str = Field(max_length=100)
    kb: PackedKb
    counts: Counts
    files: dict[str, FileEntry] = Field(description="Every member but the manifest: sha256 and size.")
    vectors: VectorSet | None = None

    @property
    def doc_ids(self) -> list[str]:
        return sorted(m.group(1) for name in self.files if (m := DOC_MEMBER.fullmatch(name)))

    @property
    def declared_bytes(self) -> int:
        return sum(entry.size for entry in self.files.values())


def member_kind(name: str) -> str | None:
    """``manifest``, ``config``, ``vectors``, ``doc``, ``raw`` or ``map``; None for a name a pack may not hold."""
    fixed = {MANIFEST: "manifest", KB_YAML: "config", VECTORS: "vectors"}
    if name in fixed:
        return fixed[name]
    if DOC_MEMBER.fullmatch(name):
        return "doc"
    if RAW_MEMBER.fullmatch(name):
        return "raw"
    if MAP_MEMBER.fullmatch(name):
        return "map"
    return None


def config_yaml(config: KbConfig) -> bytes:
    """``kb.yaml`` as a pack carries it (``write_kb_config``'s rendering, without followed folders)."""
    mapping = config_mapping(config, portable=True)
    return yaml.safe_dump(mapping, sort_keys=False, allow_unicode=True, width=10_000).encode("utf-8")


def parse_config(data: bytes) -> KbConfig:
    """A packed ``kb.yaml``, strictly: a pack's settings must be valid as they are."""
    try:
        loaded = yaml.safe_load(data.decode("utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        raise PackError(f"The pack's kb.yaml is not valid YAML: {exc}.") from exc
    if not isinstance(loaded, dict):
        raise PackError("The pack's kb.yaml does not hold a mapping of settings.")
    if loaded.get("follow"):
        # Followed folders are paths of the machine that made the pack: here they would make this
        # machine read folders nobody chose to follow.
        raise PackError("The pack's kb.yaml lists folders to follow; a pack never carries them.")
    try:
        return make_kb_config(**{str(k): v for k, v in loaded.items()})
    except InvalidArgumentError as exc:
        raise PackError(f"The pack's kb.yaml is invalid: {exc.message}") from exc


def parse_manifest(data: bytes) -> Manifest:
    """Parse and cross-check a manifest; it is untrusted until every member matched it."""
    try:
        raw = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise PackError(f"The pack's manifest is not valid JSON: {exc}.") from exc
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise PackError(
            "This file is not a Coffer pack (its manifest has no 'format: coffer-pack').",
            hint="Pass a .cofferpack file made by 'coffer kb export'.",
        )
    version = raw.get("format_version")
    if isinstance(version, int) and version > FORMAT_VERSION:
        raise PackError(
            f"The pack has format version {version}; this Coffer reads version {FORMAT_VERSION}.",
            hint="Upgrade coffer-mcp on this machine, then import again.",
        )
    try:
        manifest = Manifest.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:5])
        raise PackError(f"The pack's manifest is malformed: {problems}.") from exc
    _check_consistent(manifest)
    return manifest


def _check_consistent(manifest: Manifest) -> None:
    """Refuse a manifest whose own parts disagree (counts, names, vector sizes)."""
    kinds = {name: member_kind(name) for name in manifest.files}
    bad = sorted(name for name, kind in kinds.items() if kind in (None, "manifest"))
    if bad:
        raise PackError(f"The manifest lists a member a pack may not hold: {bad[0]!r:.120}.")
    if KB_YAML not in manifest.files:
        raise PackError("The manifest lists no kb.yaml.")
    docs = set(manifest.doc_ids)
    raws = [m.group(1) for name in manifest.files if (m := RAW_MEMBER.fullmatch(name))]
    if manifest.counts.documents != len(docs) or manifest.counts.raw_files != len(raws):
        raise PackError(
            f"The manifest counts {manifest.counts.documents} documents and {manifest.counts.raw_files} originals "
            f"but lists {len(docs)} and {len(raws)}."
        )
    if any(doc_id not in docs for doc_id in raws):
        raise PackError("The manifest lists an original (raw/) whose document is not in the pack.")
    maps = [m.group(1) for name in manifest.files if (m := MAP_MEMBER.fullmatch(name))]
    if any(doc_id not in docs for doc_id in maps):
        raise PackError("The manifest lists a source map (raw/) whose document is not in the pack.")
    if maps and manifest.format_version < 2:
        raise PackError("The manifest lists source maps, which a pack of format version 1 cannot hold.")
    try:
        make_kb_config(**manifest.kb.config)
    except (InvalidArgumentError, TypeError) as exc:
        raise PackError(f"The manifest's knowledge base settings are invalid: {exc}.") from exc
    _check_vectors(manifest, docs)


def _check_vectors(manifest: Manifest, docs: set[str]) -> None:
    vectors = manifest.vectors
    if vectors is None:
        if manifest.counts.vectors or VECTORS in manifest.files:
            raise PackError("The manifest counts vectors but describes none.")
        return
    ids = [doc.id for doc in vectors.documents]
    if len(set(ids)) != len(ids) or not set(ids) <= docs:
        raise PackError("The manifest's vectors name a document twice, or one that is not in the pack.")
    total = sum(doc.chunks for doc in vectors.documents)
    entry = manifest.files.get(VECTORS)
    if manifest.counts.vectors != total or entry is None or entry.size != total * vectors.dimensions * 4:
        raise PackError(
            f"The manifest counts {manifest.counts.vectors} vectors, which does not match the "
            "vectors it describes or the size of the vectors member."
        )


def exact_mtime(ns: int) -> str:
    """A file time (``st_mtime_ns``) as a pax ``mtime`` record: decimal seconds, to the nanosecond."""
    return f"{ns // 10**9}.{ns % 10**9:09d}"


def parse_mtime(text: str) -> int | None:
    """The nanoseconds of a pax ``mtime`` record read exactly (a float would lose them); None when
    it is not a plain time since 1970 that a file may have."""
    found = _MTIME.fullmatch(text.strip())
    if found is None or int(found.group(1)) >= _MAX_MTIME:
        return None
    return int(found.group(1)) * 10**9 + int((found.group(2) or "0").ljust(9, "0"))
