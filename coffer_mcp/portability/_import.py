"""Import: a verified pack becomes a new knowledge base, or is merged into an existing one.

The pack is verified completely in a staging folder under ``knowledge/.importing-<ULID>``
(ignored by every scan) before the store is touched. A new knowledge base appears with one
rename of that folder under the registry lock; a merge moves new documents in one by one (the
original first, then the Markdown, as an ingest does), so a crash leaves whole documents only.
The index is then rebuilt from the files without the embedder; carried vectors are inserted
where the model identity and the chunk texts match, and every other document stays due.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field
from ulid import ULID

from coffer_mcp.audit import AuditEvent
from coffer_mcp.errors import InvalidNameError, KnowledgeBaseExistsError, KnowledgeBaseNotFoundError
from coffer_mcp.indexing.reindex import index_progress, reconcile
from coffer_mcp.portability._extract import Extracted, Limits, extract_pack
from coffer_mcp.portability._files import owned_staging
from coffer_mcp.portability._format import PackError
from coffer_mcp.portability._merge import ImportConflict, SkippedDocument, plan_merge
from coffer_mcp.portability._vectors import load_vectors
from coffer_mcp.store import (
    IMPORTING,
    KbPaths,
    check_path_text,
    file_stamp,
    parse_document,
    read_kb_config,
    render_document,
    validate_kb_name,
)
from coffer_mcp.store.files import atomic_write, fsync_dir
from coffer_mcp.timeutil import utc_now

if TYPE_CHECKING:
    from coffer_mcp.models import Progress
    from coffer_mcp.services.catalogue import Catalogue
    from coffer_mcp.services.locks import Locks
    from coffer_mcp.services.providers import Providers

__all__ = [
    "DEFAULT_MAX_MEMBERS",
    "ImportResult",
    "import_pack",
]

DEFAULT_MAX_BYTES = 64 * 1024**3
DEFAULT_MAX_MEMBERS = 2_000_000
_DISK_MARGIN = 256 * 1024 * 1024


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True)


class ImportResult(_Model):
    """What ``import_pack`` did."""

    kb: str
    created: bool = Field(description="True when the import made a new knowledge base.")
    documents_added: int
    raw_files_added: int
    documents: int = Field(description="Documents in the knowledge base afterwards.")
    skipped: list[SkippedDocument] = Field(default_factory=list, description="Merge: documents already there.")
    conflicts: list[ImportConflict] = Field(
        default_factory=list,
        description="Merge: same id, but a different body, title, tags or hand-written frontmatter; "
        "the existing document was kept.",
    )
    renamed_ids: dict[str, str] = Field(
        default_factory=dict, description="Pack ids taken by another knowledge base here, and their new ids."
    )
    vectors_used: int = Field(description="Documents whose carried vectors were used (no embedding needed).")
    documents_to_embed: int = Field(description="Documents of a vector knowledge base left due for embedding.")
    embedding_model: str | None = Field(default=None, description="Identity of the model the pack's vectors come from.")
    note: str = Field(default="", description="Why carried vectors were not used, when they were not.")


def import_pack(
    catalogue: Catalogue,
    locks: Locks,
    providers: Providers,
    pack: str | Path,
    *,
    as_name: str | None = None,
    merge: bool = False,
    max_bytes: int | None = None,
    actor: str = "cli",
    progress: Progress | None = None,
) -> ImportResult:
    """Import a pack file made by ``export_kb``; the pack is untrusted input.

    Every member is verified (names, types, sizes, sha256, manifest counts) before the store is
    touched; a refused pack changes nothing. The KB is named ``as_name`` or as in the pack.
    An existing name is refused unless ``merge``, which needs one: then documents whose original (source_sha256)
    is already there are skipped, ids are kept, and a document already here under its id that
    differs (body, title, tags, hand-written frontmatter) is reported as a conflict, never
    overwritten (see ``_merge``). The embedder is never called.

    Raises:
        PackError: the pack is damaged, tampered with or unsafe (code ``invalid_pack``).
        KnowledgeBaseExistsError: the name is taken and ``merge`` is false.
        KnowledgeBaseNotFoundError: ``merge`` is true and no knowledge base has the name.
        InvalidNameError: ``as_name`` (or the pack's name) breaks the naming rule.
    """
    if as_name is not None:
        _check_target(catalogue, validate_kb_name(as_name), merge)
    catalogue.prepare_home()  # the staging folder goes inside it
    with owned_staging(catalogue.paths.knowledge, IMPORTING, catalogue.paths.locks) as staging:
        extracted = extract_pack(
            Path(check_path_text(pack)).expanduser(),
            staging,
            as_name or "staged",
            _limits(catalogue, max_bytes),
            progress,
        )
        name = as_name or _pack_name(extracted)
        _check_target(catalogue, name, merge)
        if catalogue.paths.kb(name).root.exists():
            return _merge(catalogue, locks, providers, extracted, name, actor, progress)
        return _install(catalogue, locks, providers, extracted, name, actor, progress)


def _limits(catalogue: Catalogue, max_bytes: int | None) -> Limits:
    free = shutil.disk_usage(catalogue.paths.home).free - _DISK_MARGIN
    return Limits(max_bytes=max(0, min(max_bytes or DEFAULT_MAX_BYTES, free)), max_members=DEFAULT_MAX_MEMBERS)


def _pack_name(extracted: Extracted) -> str:
    try:
        return validate_kb_name(extracted.manifest.kb.name)
    except InvalidNameError as exc:
        raise PackError(
            f"The pack names its knowledge base {extracted.manifest.kb.name!r:.80}, which is not a valid name here.",
            hint="Pass a name to import it as (--as NAME).",
        ) from exc


def _check_target(catalogue: Catalogue, name: str, merge: bool) -> None:
    """A new import needs a free name; a merge, a knowledge base to merge into.

    A merge into a name that does not exist is refused rather than made a new knowledge base:
    it is most likely a typo, which would otherwise leave a second copy beside the one meant.
    """
    exists = catalogue.paths.kb(name).root.exists()
    if exists and not merge:
        raise KnowledgeBaseExistsError(
            f"Knowledge base '{name}' already exists.",
            hint="Import under another name (--as NAME), or merge the pack's new documents into it (--merge).",
        )
    if merge and not exists:
        unknown = catalogue.unknown_kb(name)
        raise KnowledgeBaseNotFoundError(
            f"{unknown.message} --merge adds to an existing knowledge base.",
            hint=f"{unknown.hint_template} To import the pack as a new knowledge base '{name}', leave out --merge.",
        )


def _install(
    catalogue: Catalogue,
    locks: Locks,
    providers: Providers,
    extracted: Extracted,
    name: str,
    actor: str,
    progress: Progress | None,
) -> ImportResult:
    """Move the staged folder into place as a new KB, register and index it (without embedding)."""
    kb = catalogue.paths.kb(name)
    ids = extracted.manifest.doc_ids
    index = catalogue.index
    with locks.registry_lock(), locks.kb_lock(name):
        _check_target(catalogue, name, merge=False)  # under the lock: none was made meanwhile
        renamed = _reassign_ids(catalogue, extracted.kb, ids, name)
        os.rename(extracted.kb.root, kb.root)
        fsync_dir(kb.root.parent)
        config = read_kb_config(kb.config, fallback_time=utc_now())
        with index.transaction():
            index.upsert_kb(name, config, file_stamp(kb.config.stat()))
        counts = reconcile(index, kb, config, force=True, progress=index_progress(progress))
        result = _finish(catalogue, providers, kb, extracted, {i: renamed.get(i, i) for i in ids}, counts["documents"])
        _audit(catalogue, name, actor, extracted, result)
    return result.model_copy(
        update={
            "created": True,
            "renamed_ids": renamed,
            "documents_added": len(ids),
            "raw_files_added": extracted.manifest.counts.raw_files,
        }
    )


def _merge(
    catalogue: Catalogue,
    locks: Locks,
    providers: Providers,
    extracted: Extracted,
    name: str,
    actor: str,
    progress: Progress | None,
) -> ImportResult:
    kb, config = catalogue.open_kb(name)
    index = catalogue.index
    with locks.writing(kb):
        reconcile(index, kb, config)  # the rows must say what the files say before we compare
        plan = plan_merge(kb, index.documents(kb.name), extracted.kb, extracted.manifest.doc_ids)
        renamed = _reassign_ids(catalogue, extracted.kb, plan.add, name)
        raws = sum(_move_document(extracted.kb, kb, renamed.get(i, i)) for i in plan.add)
        counts = reconcile(index, kb, config, progress=index_progress(progress))
        result = _finish(
            catalogue, providers, kb, extracted, {i: renamed.get(i, i) for i in plan.add}, counts["documents"]
        )
        result = result.model_copy(
            update={
                "skipped": plan.skipped,
                "conflicts": plan.conflicts,
                "renamed_ids": renamed,
                "documents_added": len(plan.add),
                "raw_files_added": raws,
            }
        )
        _audit(catalogue, name, actor, extracted, result)
    return result


def _move_document(staged: KbPaths, kb: KbPaths, doc_id: str) -> int:
    """Move one document in: originals and source map first, the Markdown last (the commit point, as in
    ingest); how many originals were moved."""
    raws = staged.companions(doc_id)
    kb.raw.mkdir(parents=True, exist_ok=True)
    for raw in raws:
        os.replace(raw, kb.raw / raw.name)
    fsync_dir(kb.raw)
    os.replace(staged.doc(doc_id), kb.doc(doc_id))
    fsync_dir(kb.docs)
    return len(raws) - (staged.source_map(doc_id) in raws)


def _reassign_ids(catalogue: Catalogue, staged: KbPaths, ids: list[str], target: str) -> dict[str, str]:
    """New ids for pack documents whose id another knowledge base here already uses.

    Document ids are unique across the store, so a pack imported beside its source (a copy)
    cannot keep them. The staged files are renamed and their frontmatter ``id`` rewritten.
    """
    renamed = {}
    for old in sorted(_ids_elsewhere(catalogue, ids, target)):
        new = str(ULID())
        path = staged.doc(old)
        meta, body = parse_document(path.read_bytes().decode("utf-8", errors="replace"))
        if meta is None:
            os.rename(path, staged.doc(new))
        else:
            mtime = path.stat().st_mtime_ns  # the updated_at of a document edited by hand
            atomic_write(staged.doc(new), render_document({**meta, "id": new}, body).encode("utf-8"))
            os.utime(staged.doc(new), ns=(mtime, mtime))
            path.unlink()
        for raw in staged.raw_files(old):
            os.rename(raw, raw.with_name(f"{new}{raw.suffix}"))
        if staged.source_map(old).exists():
            os.rename(staged.source_map(old), staged.source_map(new))
        renamed[old] = new
    return renamed


def _ids_elsewhere(catalogue: Catalogue, ids: list[str], target: str) -> set[str]:
    """Ids used by another knowledge base, in its files or in the index."""
    taken = set(catalogue.index.ids_outside(target, ids))
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(catalogue.paths.knowledge):
            if entry.name.startswith(".") or entry.name == target or not entry.is_dir(follow_symlinks=False):
                continue
            docs = Path(entry.path) / "docs"
            taken.update(doc_id for doc_id in ids if (docs / f"{doc_id}.md").exists())
    return taken


def _finish(
    catalogue: Catalogue,
    providers: Providers,
    kb: KbPaths,
    extracted: Extracted,
    targets: dict[str, str],
    documents: int,
) -> ImportResult:
    """Insert the carried vectors of ``targets`` (pack id -> id here) and count what stays due."""
    config = read_kb_config(kb.config, fallback_time=utc_now())
    vector_set = extracted.manifest.vectors
    used, note = 0, ""
    if vector_set is not None and extracted.vectors is not None:
        if not config.vector:
            note = "The knowledge base does not use vectors, so the pack's vectors were not needed."
        elif providers.embedder is None:
            none = "No embedder is configured here, so the pack's vectors cannot be searched."
            note = providers.models.use.message or none
        else:
            used, note = load_vectors(
                catalogue.index, kb.name, vector_set, extracted.vectors, targets, providers.embedder
            )
    due = 0
    if config.vector:
        due = catalogue.index.kb_counts(kb.name, providers.models.wanted_identity()).degraded
    return ImportResult(
        kb=kb.name,
        created=False,
        documents_added=0,
        raw_files_added=0,
        documents=documents,
        vectors_used=used,
        documents_to_embed=due,
        note=note,
        embedding_model=vector_set.model if vector_set else None,
    )


def _audit(catalogue: Catalogue, name: str, actor: str, extracted: Extracted, result: ImportResult) -> None:
    details = {
        "documents_added": result.documents_added,
        "conflicts": len(result.conflicts),
        "skipped": len(result.skipped),
        "vectors_used": result.vectors_used,
        "pack_created_at": extracted.manifest.created_at,
    }
    with catalogue.index.transaction():
        catalogue.index.audit(AuditEvent.KB_IMPORTED, name, actor, details=details)
