"""Snapshots of a knowledge base's files, and a crash-safe restore.

A snapshot is a plain folder ``COFFER_HOME/snapshots/<kb>/<ULID>/`` holding a copy of the KB's
truth files (``kb.yaml``, ``docs/``, ``raw/``), ``manifest.json`` (every file's sha256 and
size) and ``snapshot.json`` (id, time, note, counts). It is built as ``.tmp-<ULID>`` and renamed
into place, so it is either complete or absent. Ids are ULIDs, strictly increasing per KB, so
name order is time order. Snapshots outlive their KB (a restore brings a deleted KB back) until
removed or pruned: only the newest ``settings.snapshot_retention`` are kept.

Restore protocol (under the registry lock, then the KB lock)::

    1. copy the snapshot into knowledge/.restore-<kb>/new, verifying every sha256
    2. snapshot the current state ("before restore of <id>")
    3. write knowledge/.restore-<kb>/COMMIT                  <- the commit point
    4. rename knowledge/<kb>              -> .restore-<kb>/old
    5. rename .restore-<kb>/new           -> knowledge/<kb>
    6. delete old, then COMMIT, then the work folder; reindex (files changed => reconcile)

A crash before 3 leaves the KB untouched; recovery deletes the work folder (roll back). A crash
after 3 is rolled forward: recovery does whichever of 4-6 is left. ``recover_interrupted_restores``
runs this for every ``.restore-*`` folder whose KB lock is free (a held lock means a restore is
still running); it is meant to run when a service opens the store, and every function here runs
it too. Dot-folders are invisible to KB scans, so no reader ever sees a half-built folder.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from ulid import ULID

from coffer_mcp import __version__
from coffer_mcp.audit import AuditEvent
from coffer_mcp.errors import (
    CofferError,
    InvalidArgumentError,
    InvalidNameError,
    SnapshotError,
    SnapshotNotFoundError,
    StoreError,
)
from coffer_mcp.limits import MAX_NOTE
from coffer_mcp.portability._files import (
    copy_hashed,
    fsync_tree,
    remove_tree,
    visible_files,
)
from coffer_mcp.store import (
    DELETING,
    RESTORING,
    SOURCE_MAP_SUFFIX,
    KbPaths,
    StorePaths,
    atomic_write,
    file_lock,
    is_document_id,
    validate_kb_name,
)
from coffer_mcp.store.files import fsync_dir
from coffer_mcp.timeutil import utc_now

if TYPE_CHECKING:
    from coffer_mcp.models import Progress
    from coffer_mcp.services.catalogue import Catalogue
    from coffer_mcp.services.knowledge_bases import KnowledgeBaseService
    from coffer_mcp.services.locks import Locks

__all__ = [
    "RestoreResult",
    "SnapshotError",
    "SnapshotInfo",
    "SnapshotNotFoundError",
    "delete_snapshot",
    "find_snapshot",
    "list_snapshots",
    "recover_interrupted_restores",
    "restore_snapshot",
    "snapshot_kb",
]

_FORMAT = "coffer-snapshot"
_COMMIT = "COMMIT"
_FILE = re.compile(r"(docs|raw)/[^/\\\x00]{1,255}")


class SnapshotInfo(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str = Field(description="The snapshot id (a ULID: sorts by time).")
    kb: str
    created_at: str
    note: str = ""
    documents: int
    raw_files: int
    bytes: int = Field(description="Total size of the snapshot's files.")
    path: str = Field(default="", description="Absolute path of the snapshot folder.")


class RestoreResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    kb: str
    snapshot_id: str
    pre_restore_snapshot_id: str | None = Field(
        description="The automatic snapshot of the state replaced (None when the KB did not exist)."
    )
    created: bool = Field(description="True when the restore brought back a deleted knowledge base.")
    documents: int
    indexed: int
    removed: int
    embedded: int


# -- snapshots ---------------------------------------------------------------------------------


def snapshot_kb(catalogue: Catalogue, locks: Locks, name: str, *, note: str = "") -> SnapshotInfo:
    """Copy a knowledge base's files into a new snapshot; prunes beyond ``snapshot_retention``."""
    note = _check_note(note)
    kb, _ = catalogue.open_kb(name)
    with locks.writing(kb):
        info = _take(catalogue.paths, kb, note)
        _prune(catalogue.paths, name, catalogue.settings.snapshot_retention)
    return info


def list_snapshots(catalogue: Catalogue, name: str) -> list[SnapshotInfo]:
    """The snapshots of a knowledge base, newest first (also of a deleted one)."""
    recover_interrupted_restores(catalogue.paths)
    infos = [info for path in _snapshot_dirs(catalogue.paths, validate_kb_name(name)) if (info := _read_info(path))]
    if not infos:
        catalogue.open_kb(name)  # an unknown name (and no snapshots) gets the unknown-KB error and hint
    return infos


def find_snapshot(catalogue: Catalogue, name: str, snapshot_id: str) -> SnapshotInfo:
    """The snapshot ``snapshot_id`` of knowledge base ``name`` (also of a deleted one).

    Raises:
        InvalidNameError: the name breaks the naming rule.
        KnowledgeBaseNotFoundError: no such knowledge base, nor snapshots of one by that name.
        SnapshotNotFoundError: no such snapshot of it; the hint names the newest.
    """
    if not _snapshot_dirs(catalogue.paths, validate_kb_name(name)):
        catalogue.open_kb(name)  # an unknown name (and no snapshots) gets the unknown-KB error and hint
    return _find(catalogue.paths, name, snapshot_id)


def delete_snapshot(catalogue: Catalogue, locks: Locks, name: str, snapshot_id: str) -> SnapshotInfo:
    """Remove one snapshot."""
    info = find_snapshot(catalogue, name, snapshot_id)
    with locks.kb_lock(name):
        remove_tree(Path(info.path))
    return info


def _take(paths: StorePaths, kb: KbPaths, note: str) -> SnapshotInfo:
    """Build a snapshot of ``kb``; call holding its lock."""
    root = paths.snapshots / kb.name
    root.mkdir(parents=True, exist_ok=True)
    for partial in [*root.glob(".tmp-*"), *root.glob(f"{DELETING}*")]:  # left by a crash; we hold the lock
        shutil.rmtree(partial, ignore_errors=True)
    snapshot_id = _next_id(root)
    tmp = root / f".tmp-{snapshot_id}"
    (tmp / "docs").mkdir(parents=True)
    (tmp / "raw").mkdir()
    sources = [("kb.yaml", kb.config)] if kb.config.is_file() else []
    sources += [(f"docs/{p.name}", p) for p in visible_files(kb.docs)]
    sources += [(f"raw/{p.name}", p) for p in visible_files(kb.raw)]
    files: dict[str, dict[str, Any]] = {}
    for rel, source in sources:
        with source.open("rb") as handle:
            sha, size = copy_hashed(handle, tmp / rel)
            stat = os.fstat(handle.fileno())
        os.utime(tmp / rel, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        files[rel] = {"sha256": sha, "size": size}
    info = SnapshotInfo(
        id=snapshot_id,
        kb=kb.name,
        created_at=utc_now(),
        note=note,
        documents=_count(files, "docs/"),
        raw_files=_count(files, "raw/"),
        bytes=sum(f["size"] for f in files.values()),
    )
    manifest = {"format": _FORMAT, "format_version": 1, "coffer_version": __version__, "files": files}
    atomic_write(tmp / "manifest.json", json.dumps(manifest, ensure_ascii=False).encode("utf-8"))
    atomic_write(tmp / "snapshot.json", info.model_dump_json(exclude={"path"}).encode("utf-8"))
    fsync_tree(tmp)
    os.rename(tmp, root / snapshot_id)
    fsync_dir(root)
    return info.model_copy(update={"path": str(root / snapshot_id)})


def _count(files: dict[str, Any], prefix: str) -> int:
    """The documents (``docs/``) or originals (``raw/``, source maps left out) among ``files``."""
    return sum(rel.startswith(prefix) and not rel.endswith(SOURCE_MAP_SUFFIX) for rel in files)


def _next_id(root: Path) -> str:
    """A fresh ULID greater than every existing one (two snapshots in one millisecond stay ordered)."""
    new = ULID()
    latest = max((p.name for p in root.iterdir() if is_document_id(p.name)), default=None)
    if latest is not None and int(new) <= int(ULID.from_str(latest)):
        new = ULID.from_int(int(ULID.from_str(latest)) + 1)
    return str(new)


def _check_note(note: str) -> str:
    note = " ".join(str(note).split())
    if len(note) > MAX_NOTE:
        raise InvalidArgumentError(
            f"The note is {len(note)} characters long.", hint=f"Keep it to {MAX_NOTE} characters or fewer."
        )
    return note


def _snapshot_dirs(paths: StorePaths, name: str) -> list[Path]:
    root = paths.snapshots / name
    if not root.is_dir():
        return []
    return sorted((p for p in root.iterdir() if is_document_id(p.name) and p.is_dir()), reverse=True)


def _read_info(path: Path) -> SnapshotInfo | None:
    try:
        data = json.loads((path / "snapshot.json").read_text(encoding="utf-8"))
        return SnapshotInfo.model_validate({**data, "path": str(path)})
    except (OSError, ValueError, ValidationError):
        return None  # not a complete snapshot: never listed, never restored


def _find(paths: StorePaths, name: str, snapshot_id: str) -> SnapshotInfo:
    info = _read_info(paths.snapshots / name / snapshot_id) if is_document_id(str(snapshot_id)) else None
    if info is None or info.kb != name:
        known = [p.name for p in _snapshot_dirs(paths, name)[:5]]
        raise SnapshotNotFoundError(
            f"Knowledge base '{name}' has no snapshot {str(snapshot_id)[:40]!r}.",
            hint=f"Newest snapshots: {', '.join(known)}." if known else "It has no snapshots; take one first.",
        )
    return info


def _prune(paths: StorePaths, name: str, keep: int) -> None:
    """Keep the newest ``keep`` snapshots; call holding the KB lock."""
    for path in _snapshot_dirs(paths, name)[keep:]:
        remove_tree(path)


# -- restore -----------------------------------------------------------------------------------


def restore_snapshot(
    catalogue: Catalogue,
    locks: Locks,
    knowledge_bases: KnowledgeBaseService,
    name: str,
    snapshot_id: str,
    *,
    actor: str = "cli",
    progress: Progress | None = None,
) -> RestoreResult:
    """Replace a knowledge base's files with a snapshot's, then reindex.

    The current state is snapshotted first (note "before restore of <id>"). The swap is atomic
    with respect to crashes (see the module docstring). A deleted knowledge base is recreated.

    Raises:
        KnowledgeBaseNotFoundError: no such knowledge base, nor snapshots of one by that name.
        SnapshotNotFoundError: no such snapshot of this knowledge base.
        SnapshotError: the snapshot's files do not match its manifest; nothing was changed.
    """
    info = find_snapshot(catalogue, name, snapshot_id)
    recover_interrupted_restores(catalogue.paths)
    kb = catalogue.paths.kb(name)
    if kb.root.is_dir():
        catalogue.open_kb(name)  # registered now: open_kb must not run under the registry lock
    with locks.registry_lock(), locks.kb_lock(name):
        existed = kb.root.is_dir()
        pre = _swap_in(catalogue.paths, kb, info, existed)
        with catalogue.index.transaction():
            catalogue.index.audit(
                AuditEvent.KB_RESTORED,
                name,
                actor,
                details={"snapshot_id": info.id, "pre_restore_snapshot_id": pre.id if pre else None},
            )
        _prune(catalogue.paths, name, catalogue.settings.snapshot_retention)
    counts = knowledge_bases.reindex(name, force=False, progress=progress)
    return RestoreResult(
        kb=name,
        snapshot_id=info.id,
        pre_restore_snapshot_id=pre.id if pre else None,
        created=not existed,
        documents=counts.documents,
        indexed=counts.indexed,
        removed=counts.removed,
        embedded=counts.embedded,
    )


def _swap_in(paths: StorePaths, kb: KbPaths, info: SnapshotInfo, existed: bool) -> SnapshotInfo | None:
    """Steps 1-6 of the protocol; returns the pre-restore snapshot. Call holding the KB lock."""
    work = kb.root.with_name(f"{RESTORING}{kb.name}")
    _complete_or_roll_back(kb.root, work)
    work.mkdir()
    try:
        _stage(Path(info.path), work / "new")
        _checkpoint("staged")
        pre = _take(paths, kb, f"before restore of {info.id}") if existed else None
    except (OSError, CofferError) as exc:
        shutil.rmtree(work, ignore_errors=True)  # nothing was committed: the KB is untouched
        if isinstance(exc, OSError):
            raise StoreError(
                f"Cannot restore '{kb.name}': {exc}.", hint="Check the free space in COFFER_HOME."
            ) from exc
        raise
    atomic_write(work / _COMMIT, json.dumps({"kb": kb.name, "snapshot_id": info.id}).encode("utf-8"))
    _checkpoint("committed")
    try:
        _complete_or_roll_back(kb.root, work, checkpoint=_checkpoint)
    except OSError as exc:
        raise StoreError(
            f"Restoring '{kb.name}' was interrupted: {exc}.",
            hint="It completes on the next start of Coffer; check the disk.",
        ) from exc
    return pre


def _checkpoint(stage: str) -> None:
    """A named point of the restore protocol; tests inject crashes here. Does nothing."""


def _stage(snapshot: Path, dest: Path) -> None:
    """Copy a snapshot's files into ``dest``, verifying each against the snapshot's manifest."""
    files = _snapshot_files(snapshot)
    (dest / "docs").mkdir(parents=True)
    (dest / "raw").mkdir()
    for rel, entry in files.items():
        try:
            with (snapshot / rel).open("rb") as handle:
                sha, size = copy_hashed(handle, dest / rel)
        except FileNotFoundError:
            sha, size = "", -1
        if (sha, size) != (entry.get("sha256"), entry.get("size")):
            raise SnapshotError(
                f"The snapshot's {rel} does not match its manifest; nothing was restored.",
                hint="The snapshot was damaged or edited: restore another one.",
            )
    fsync_tree(dest)


def _snapshot_files(snapshot: Path) -> dict[str, dict[str, Any]]:
    try:
        manifest = json.loads((snapshot / "manifest.json").read_text(encoding="utf-8"))
        files = manifest["files"]
        ok = manifest.get("format") == _FORMAT and isinstance(files, dict)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        ok, files = False, {}
    if not ok or any(not (rel == "kb.yaml" or _FILE.fullmatch(rel)) or "/." in f"/{rel}" for rel in files):
        raise SnapshotError(
            f"The snapshot {snapshot.name} has no valid manifest; nothing was restored.",
            hint="Restore another snapshot.",
        )
    return {rel: entry if isinstance(entry, dict) else {} for rel, entry in files.items()}


def _complete_or_roll_back(root: Path, work: Path, *, checkpoint=lambda stage: None) -> None:
    """Finish (after COMMIT) or undo (before it) a restore whose work folder is ``work``."""
    if not work.exists():
        return
    new, old = work / "new", work / "old"
    if (work / _COMMIT).exists():
        if new.exists():
            if root.exists():
                os.rename(root, old)
                fsync_dir(root.parent)
                checkpoint("swapped_out")
            os.rename(new, root)
            fsync_dir(root.parent)
            checkpoint("swapped_in")
        shutil.rmtree(old, ignore_errors=True)
        (work / _COMMIT).unlink()
    elif old.exists() and not root.exists():
        os.rename(old, root)  # cannot happen by the protocol; never lose the old state regardless
    shutil.rmtree(work, ignore_errors=True)
    fsync_dir(root.parent)


def recover_interrupted_restores(paths: StorePaths, *, timeout: float = 0.0) -> list[str]:
    """Complete or roll back every restore a crash interrupted; returns the KB names repaired.

    A KB whose lock is held is skipped: its restore is still running.
    """
    repaired = []
    for work in sorted(paths.knowledge.glob(f"{RESTORING}*")):
        name = work.name[len(RESTORING) :]
        try:
            validate_kb_name(name)
            with file_lock(paths.lock(name), timeout=timeout, what=f"knowledge base '{name}'"):
                if work.exists():
                    _complete_or_roll_back(paths.kb(name).root, work)
                    repaired.append(name)
        except InvalidNameError:
            continue
        except StoreError as exc:
            if exc.code != "busy":
                raise
    return repaired
