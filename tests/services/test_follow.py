"""Live folders in the core: following a folder, syncing it, conflicts, deletions, refusals, the watcher."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest
import yaml
from mcp import Client
from mcp.types import Implementation

from coffer_mcp import Coffer, load_settings
from coffer_mcp.access import source_stamp
from coffer_mcp.errors import InvalidArgumentError, PackError, PathNotAllowedError
from coffer_mcp.index import DocumentRow
from coffer_mcp.mcp_server import build_server
from coffer_mcp.portability._format import parse_config
from coffer_mcp.store import parse_document, render_document

CLIENT = Implementation(name="follower", version="1")


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A folder of notes (one nested), with an outside file next to it."""
    notes = tmp_path / "notes"
    (notes / "deep").mkdir(parents=True)
    write(notes / "alpha.md", "# Alpha\n\nAardvarks amble across the alpine meadow.")
    write(notes / "deep" / "beta.md", "# Beta\n\nBeavers build broad dams.")
    write(notes / ".hidden.md", "# Hidden\n\nnever ingested")
    (tmp_path / "outside").mkdir()
    write(tmp_path / "outside" / "secret.md", "# Secret\n\nclassified zeppelin plans")
    return notes.resolve()


@pytest.fixture
def make(home: Path, backend_settings: dict[str, str], folder: Path) -> Iterator[Callable[..., Coffer]]:
    """Build a Coffer over ``home`` (the folder is allowed) with extra settings; all are closed at the end."""
    made: list[Coffer] = []

    def build(**settings: Any) -> Coffer:
        coffer = Coffer(load_settings(home=home, allowed_dirs=[str(folder)], **backend_settings, **settings))
        made.append(coffer)
        if len(made) == 1:
            coffer.create_kb("kb")
        return coffer

    yield build
    for coffer in made:
        coffer.close()


def write(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")


def titles(coffer: Coffer, query: str) -> list[str]:
    return sorted({p.title for p in coffer.search("kb", query, top_k=20).passages})


def sources(coffer: Coffer) -> list[str]:
    return sorted(d.source_path or "" for d in coffer.list_documents("kb", limit=1000).documents)


def events(coffer: Coffer, event: str) -> list[Any]:
    return [e for e in coffer.index.audit_events("kb") if e.event == event]


# -- following -----------------------------------------------------------------------------------


def test_following_a_folder_ingests_it_records_it_in_kb_yaml_and_reports_it(
    make: Callable[..., Coffer], folder: Path, home: Path
) -> None:
    coffer = make()
    result = coffer.follow_folder("kb", folder)
    assert (result.created, result.followed) == (2, str(folder))
    assert sources(coffer) == [str(folder / "alpha.md"), str(folder / "deep" / "beta.md")]
    config = yaml.safe_load((home / "knowledge" / "kb" / "kb.yaml").read_text(encoding="utf-8"))
    assert config["follow"] == [str(folder)]
    [followed] = coffer.describe_kb("kb").followed
    assert (followed.path, followed.present, followed.documents, followed.watched) == (str(folder), True, 2, False)
    assert followed.last_sync is not None
    [reported] = coffer.check_sources("kb").followed  # which brings the folder up to date first
    assert reported.model_copy(update={"last_sync": None}) == followed.model_copy(update={"last_sync": None})
    assert events(coffer, "KB_UPDATED")[-1].details == {"follow": [str(folder)]}
    again = coffer.follow_folder("kb", folder)  # idempotent: nothing new, one entry
    assert (again.created, again.unchanged) == (0, 2)
    assert len(coffer.describe_kb("kb").followed) == 1


def test_a_knowledge_base_without_followed_folders_keeps_its_kb_yaml_as_it_was(coffer: Coffer, home: Path) -> None:
    coffer.create_kb("kb")
    assert "follow" not in (home / "knowledge" / "kb" / "kb.yaml").read_text(encoding="utf-8")
    assert coffer.describe_kb("kb").followed == []


def test_an_agent_follows_only_folders_inside_allowed_dirs_and_never_the_store(
    make: Callable[..., Coffer], folder: Path, home: Path
) -> None:
    coffer = make()
    with pytest.raises(PathNotAllowedError):
        coffer.ingest_allowed_path("kb", str(folder.parent / "outside"), follow=True)
    with pytest.raises(InvalidArgumentError, match="only folders are followed"):
        coffer.ingest_allowed_path("kb", str(folder / "alpha.md"), follow=True)
    with pytest.raises(InvalidArgumentError, match="Coffer home"):
        coffer.follow_folder("kb", home / "knowledge")
    with pytest.raises(InvalidArgumentError, match="Coffer home"):
        coffer.follow_folder("kb", home.parent)
    assert coffer.describe_kb("kb").followed == []


def test_unfollowing_keeps_the_documents_and_empties_the_list(make: Callable[..., Coffer], folder: Path) -> None:
    coffer = make()
    coffer.follow_folder("kb", folder)
    assert coffer.unfollow_folder("kb", str(folder)) == []
    write(folder / "gamma.md", "# Gamma\n\ngnus graze")
    assert coffer.check_sources("kb").followed == []
    assert len(sources(coffer)) == 2  # not followed any more: gamma is not picked up
    with pytest.raises(InvalidArgumentError, match="does not follow"):
        coffer.unfollow_folder("kb", str(folder))


# -- syncing -------------------------------------------------------------------------------------


def test_a_sync_applies_new_changed_and_deleted_files(make: Callable[..., Coffer], folder: Path) -> None:
    coffer = make()
    coffer.follow_folder("kb", folder)
    alpha_id = coffer.index.find_document("kb", source_path=str(folder / "alpha.md")).id
    write(folder / "gamma.md", "# Gamma\n\nGnus graze on the savanna.")
    write(folder / "alpha.md", "# Alpha\n\nAlbatrosses glide over the ocean.")
    (folder / "deep" / "beta.md").unlink()
    [result] = coffer.sync_followed("kb")
    assert (result.created, result.updated, result.removed) == (1, 1, 1)
    assert titles(coffer, "albatrosses") == ["Alpha"]
    assert titles(coffer, "aardvarks") == []
    assert titles(coffer, "beavers") == []
    assert titles(coffer, "gnus") == ["Gamma"]
    assert coffer.index.find_document("kb", source_path=str(folder / "alpha.md")).id == alpha_id  # same document
    removed = events(coffer, "KB_DOCUMENT_DELETED")
    assert [e.details for e in removed] == [{"source_path": str(folder / "deep" / "beta.md")}]
    [quiet] = coffer.sync_followed("kb")
    assert (quiet.created, quiet.updated, quiet.removed, quiet.unchanged) == (0, 0, 0, 2)


def test_a_sync_reports_each_file_in_the_folders_order_and_remembers_what_it_came_to(
    make: Callable[..., Coffer], folder: Path, home: Path
) -> None:
    # New and changed files are written one while the one before is indexed; files the sync
    # settles itself (unchanged, a conflict, refused) are reported in their place all the same.
    coffer = make()
    coffer.follow_folder("kb", folder)
    beta = coffer.index.find_document("kb", source_path=str(folder / "deep" / "beta.md"))
    coffer.edit_document("kb", beta.id, "# Beta\n\nEdited in Coffer: bison.")
    write(folder / "deep" / "beta.md", "# Beta\n\nThe source moved on: badgers.")
    write(folder / "alpha.md", "# Alpha\n\nAlbatrosses glide over the ocean.")
    write(folder / "a0.md", "# A0\n\nAntelopes at dawn.")
    write(folder / "empty.md", "")
    write(folder / "zeta.md", "# Zeta\n\nZebras at dusk.")
    [first] = coffer.sync_followed("kb")
    [second] = coffer.sync_followed("kb")
    names = ["a0.md", "alpha.md", "deep/beta.md", "empty.md", "zeta.md"]
    assert [(str(Path(i.path).relative_to(folder)), i.status) for i in first.items] == list(
        zip(names, ["created", "updated", "conflict", "rejected", "created"], strict=True)
    )
    assert [(str(Path(i.path).relative_to(folder)), i.status) for i in second.items] == list(
        zip(names, ["unchanged", "unchanged", "conflict", "rejected", "unchanged"], strict=True)
    )
    assert (first.created, first.updated, first.conflict, first.rejected) == (2, 1, 1, 1)
    assert titles(coffer, "albatrosses antelopes zebras") == ["A0", "Alpha", "Zeta"]
    on_disk = {file.stem for file in (home / "knowledge" / "kb" / "docs").glob("*.md")}
    assert set(coffer.index.doc_stamps("kb")) == on_disk
    assert len(events(coffer, "KB_SOURCE_CONFLICT")) == 1


def _aged(file: Path) -> None:
    """Set the file's modification time ten minutes back, as a file that has not changed for a while."""
    info = file.stat()
    os.utime(file, ns=(info.st_atime_ns, info.st_mtime_ns - 600 * 10**9))


def _rewritten_under_the_same_stamp(file: Path, old: str, new: str) -> None:
    """Change words of a file in place, keeping its size, inode and modification time: its stamp."""
    info = file.stat()
    assert len(old) == len(new)
    text = file.read_text(encoding="utf-8")
    with open(file, "r+", encoding="utf-8") as handle:
        handle.write(text.replace(old, new))
    os.utime(file, ns=(info.st_atime_ns, info.st_mtime_ns))
    assert source_stamp(file.stat()) == source_stamp(info)


def test_a_new_process_reads_again_only_followed_files_whose_stamp_does_not_vouch_for_them(
    make: Callable[..., Coffer], folder: Path
) -> None:
    # A file's stamp (modification time, size, inode) vouches for the bytes its document was made
    # from, kept in the index: a server that starts does not read such a file again. Files are
    # rewritten here under their old stamp only to show which ones were read.
    alpha, beta = folder / "alpha.md", folder / "deep" / "beta.md"
    _aged(alpha)  # beta was just written: a stamp taken so soon may not vouch for what was read
    make().follow_folder("kb", folder)
    _rewritten_under_the_same_stamp(alpha, "Aardvarks", "Armadillo")
    _rewritten_under_the_same_stamp(beta, "Beavers", "Badgers")
    [second] = make().sync_followed("kb")  # a new process: it remembers nothing of its own
    assert {Path(i.path).name: i.status for i in second.items} == {"alpha.md": "unchanged", "beta.md": "updated"}
    reader = make()
    assert (titles(reader, "armadillo"), titles(reader, "badgers")) == ([], ["Beta"])
    _aged(beta)  # a new stamp: read once more, found unchanged, and from then on vouched for
    [third] = make().sync_followed("kb")
    assert {Path(i.path).name: i.status for i in third.items} == {"alpha.md": "unchanged", "beta.md": "unchanged"}
    _rewritten_under_the_same_stamp(beta, "Badgers", "Bobcats")
    [fourth] = make().sync_followed("kb")
    assert [i.status for i in fourth.items] == ["unchanged", "unchanged"]
    editor = make()
    assert titles(editor, "bobcats") == []
    kept = editor.index.find_document("kb", source_path=str(beta))
    assert kept is not None
    assert kept.source_stamp == source_stamp(beta.stat())
    editor.edit_document("kb", kept.id, "# Beta\n\nEdited in Coffer.")  # the source is the same: still vouched for
    assert editor.index.find_document("kb", source_path=str(beta)).source_stamp == kept.source_stamp  # type: ignore[union-attr]
    changed = "# Alpha\n\nAlbatrosses glide over the ocean."
    write(alpha, changed)  # a real change moves the stamp: read, and ingested
    [fifth] = make().sync_followed("kb")
    assert [(Path(i.path).name, i.status) for i in fifth.items] == [("alpha.md", "updated"), ("beta.md", "unchanged")]


def test_stamps_learned_by_a_long_sync_are_kept_as_it_goes(
    make: Callable[..., Coffer], folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A first sync after an upgrade may learn the stamps of 100,000 files: it keeps them in
    # batches as it goes (here one at a time), so a server stopped halfway keeps what it learned.
    from coffer_mcp.services import follow as follow_module

    write(folder / "gamma.md", "# Gamma\n\nGnus graze on the savanna.")
    make().follow_folder("kb", folder)  # just written: no stamp vouches for any of them yet
    files = [folder / "alpha.md", folder / "deep" / "beta.md", folder / "gamma.md"]
    for file in files:
        _aged(file)
    monkeypatch.setattr(follow_module, "_VOUCHED_BATCH", 1)

    def stop_at_the_second(done: int, total: int, name: str) -> None:
        if done == 2:
            raise KeyboardInterrupt  # as a server that stops

    with pytest.raises(KeyboardInterrupt):
        make().sync_followed("kb", progress=stop_at_the_second)
    reader = make()
    stamps = [reader.index.find_document("kb", source_path=str(file)).source_stamp for file in files]  # type: ignore[union-attr]
    assert stamps == [source_stamp(files[0].stat()), "", ""]


def statuses(report: Any) -> dict[str, str]:
    return {Path(c.source_path).name: c.status for c in report.documents}


@pytest.mark.anyio
async def test_check_sources_says_what_its_own_sync_of_the_followed_folders_did(
    make: Callable[..., Coffer], folder: Path
) -> None:
    coffer = make()
    coffer.follow_folder("kb", folder)
    beta = coffer.index.find_document("kb", source_path=str(folder / "deep" / "beta.md"))
    write(folder / "alpha.md", "# Alpha\n\nAlbatrosses glide over the ocean.")
    (folder / "deep" / "beta.md").unlink()
    write(folder / "gamma.md", "# Gamma\n\nGnus graze on the savanna.")
    report = coffer.check_sources("kb")
    assert statuses(report) == {"alpha.md": "updated", "beta.md": "removed", "gamma.md": "added"}
    assert (report.unchanged, report.updated, report.added, report.removed) == (0, 1, 1, 1)
    [removed] = [c for c in report.documents if c.status == "removed"]
    assert (removed.document_id, removed.title) == (beta.id, "Beta")
    assert statuses(coffer.check_sources("kb")) == {"alpha.md": "unchanged", "gamma.md": "unchanged"}
    # An agent reads the same; and a snapshot restored behind the folder's back is synced again, and said so.
    snapshot = coffer.snapshot_kb("kb")
    write(folder / "alpha.md", "# Alpha\n\nAnts march in line.")
    (folder / "gamma.md").unlink()
    coffer.check_sources("kb")
    coffer.restore_snapshot("kb", snapshot.id)
    async with Client(build_server(coffer), client_info=CLIENT) as client:
        result = await client.call_tool("coffer__check_sources", {"kb": "kb"})
    body = result.structured_content
    assert {Path(d["source_path"]).name: d["status"] for d in body["documents"]} == {
        "alpha.md": "updated",
        "gamma.md": "removed",
    }
    assert (body["updated"], body["removed"], body.get("added", 0)) == (1, 1, 0)
    assert titles(coffer, "ants") == ["Alpha"]


EDITORS_FILES = ("~$report.docx", "alpha.md~", "#alpha.md#", "notes.swp", "~WRL0001.tmp")
"""Lock, swap, backup and auto-save files that editors leave beside the files they open."""


def test_files_of_a_followed_folder_that_fail_to_ingest_are_listed_with_why_until_they_are_fixed(
    make: Callable[..., Coffer], folder: Path
) -> None:
    coffer = make()
    coffer.follow_folder("kb", folder)
    write(folder / "broken.pdf", "not a pdf")
    write(folder / "deep" / "empty.md", "")
    for name in EDITORS_FILES:  # passed over in silence: never documents, never failures
        (folder / name).write_bytes(b"\x05Owner  " + b"\x00" * 150)
    report = coffer.check_sources("kb")
    assert {Path(f.path).name: f.code for f in report.failed} == {
        "broken.pdf": "conversion_failed",
        "empty.md": "empty",
    }
    assert all(f.message and f.hint for f in report.failed)
    assert len(report.documents) == 2
    assert coffer.describe_kb("kb").followed[0].failed == 2
    # A new process (the CLI, a server that starts) finds them again with its first sync.
    assert coffer.describe_kb("kb").followed[0].failed == 2
    later = make()
    assert later.describe_kb("kb").followed[0].failed is None  # not synced by this process yet: not known
    assert [Path(f.path).name for f in later.check_sources("kb").failed] == ["broken.pdf", "empty.md"]
    assert later.describe_kb("kb").followed[0].failed == 2
    # Fixed or deleted, they are failures no more; a watcher's sync of the changed paths says so too.
    write(folder / "deep" / "empty.md", "# Empty\n\nEmus, at last.")
    later.follow.sync("kb", str(folder), changed=[folder / "deep" / "empty.md"])
    assert later.describe_kb("kb").followed[0].failed == 1
    (folder / "broken.pdf").unlink()
    later.follow.sync("kb", str(folder), changed=[folder / "broken.pdf"])
    assert later.describe_kb("kb").followed[0].failed == 0
    assert later.check_sources("kb").failed == []
    assert titles(later, "emus") == ["Empty"]


GIB = 1 << 30
MIB = 1 << 20
needs_proc_io = pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="counts bytes read through /proc")


def bytes_read(pid: int | str = "self") -> int:
    """How many bytes a process has read so far (``rchar``: every read, page cache or not, holes too)."""
    with open(f"/proc/{pid}/io", encoding="utf-8") as io:
        return next(int(line.split()[1]) for line in io if line.startswith("rchar:"))


def sparse(path: Path, size: int) -> None:
    """Make (or grow) ``path`` to ``size`` bytes without using the disk: a hole, as ``truncate -s``."""
    with open(path, "ab") as file:
        os.truncate(file.fileno(), size)


@needs_proc_io
@pytest.mark.anyio
async def test_a_huge_file_in_a_followed_folder_is_refused_by_its_size_and_never_read(
    make: Callable[..., Coffer], folder: Path
) -> None:
    # An attack: a 4 GiB file dropped in while another file is deleted (a rename to pair), and a
    # followed file grown to 4 GiB. Each was read in full (the rename pairing hashed every new
    # file, a changed file was hashed before its ingest refused it, check_sources hashed it again).
    coffer = make()
    coffer.follow_folder("kb", folder)
    beta = coffer.index.find_document("kb", source_path=str(folder / "deep" / "beta.md"))
    (folder / "alpha.md").unlink()
    sparse(folder / "huge.md", 4 * GIB)
    sparse(folder / "deep" / "beta.md", 4 * GIB)
    write(folder / "gamma.md", "# Gamma\n\nGnus graze on the savanna.")
    before = bytes_read()
    async with Client(build_server(coffer), client_info=CLIENT) as client:
        report = (await client.call_tool("coffer__check_sources", {"kb": "kb"})).structured_content
        metrics = (await client.call_tool("coffer__knowledge_base_metrics", {"kb": "kb"})).structured_content
    assert bytes_read() - before < 64 * MIB  # neither huge file was read: 8 GiB between them
    failed = {Path(f["path"]).name: f for f in report["failed"]}
    assert {name: f["code"] for name, f in failed.items()} == {"huge.md": "too_large", "beta.md": "too_large"}
    assert "4,294,967,296 bytes" in failed["huge.md"]["message"]
    assert "max_document_bytes" in failed["huge.md"]["hint"]
    assert metrics["followed"][0]["failed"] == 2
    statuses = {Path(c["source_path"]).name: (c["status"], c.get("message")) for c in report["documents"]}
    assert statuses["gamma.md"] == ("added", None)
    assert statuses["alpha.md"][0] == "removed"
    assert statuses["beta.md"][0] == "refused"  # its document is kept as it was; its file is not read
    assert "the limit is 26,214,400" in statuses["beta.md"][1]
    # Nothing half-written: beta's document as it was, no document of huge.md.
    assert sources(coffer) == [str(folder / "deep" / "beta.md"), str(folder / "gamma.md")]
    assert coffer.index.get_document("kb", beta.id).source_sha256 == beta.source_sha256
    assert titles(coffer, "beavers") == ["Beta"]
    assert coffer.verify("kb").problems == []
    # A folder ingest refuses them by their size as well.
    coffer.create_kb("other")
    before = bytes_read()
    ingested = coffer.ingest_path("other", folder)
    assert bytes_read() - before < 64 * MIB
    assert {Path(i.path).name: i.code for i in ingested.items if i.status == "rejected"} == {
        "huge.md": "too_large",
        "beta.md": "too_large",
    }


@needs_proc_io
def test_a_rename_is_looked_for_only_among_new_files_of_the_gone_files_size(
    make: Callable[..., Coffer], folder: Path
) -> None:
    coffer = make()
    alpha, _ = followed_alpha(coffer, folder)
    (folder / "alpha.md").rename(folder / "omega.md")
    sparse(folder / "zeros.md", 8 * MIB)  # within max_document_bytes, and not alpha's size
    before = bytes_read()
    [result] = coffer.sync_followed("kb")
    assert bytes_read() - before < 12 * MIB  # read once, by its ingest: not hashed to look for alpha
    moved = {Path(i.path).name: (i.status, i.document_id) for i in result.items if i.status != "unchanged"}
    assert moved == {"omega.md": ("renamed", alpha.id), "zeros.md": ("rejected", None)}


def test_with_follow_deleted_keep_a_deleted_files_document_stays_and_is_reported_missing(
    make: Callable[..., Coffer], folder: Path
) -> None:
    coffer = make(follow_deleted="keep")
    coffer.follow_folder("kb", folder)
    (folder / "alpha.md").unlink()
    [result] = coffer.sync_followed("kb")
    assert [i.status for i in result.items if i.path.endswith("alpha.md")] == ["kept"]
    assert titles(coffer, "aardvarks") == ["Alpha"]
    report = coffer.check_sources("kb")
    assert report.missing == 1


def test_a_followed_folder_that_is_gone_removes_nothing(make: Callable[..., Coffer], folder: Path) -> None:
    coffer = make()
    coffer.follow_folder("kb", folder)
    folder.rename(folder.with_name("unmounted"))
    [result] = coffer.sync_followed("kb")
    assert result.items == []
    assert len(sources(coffer)) == 2
    [followed] = coffer.describe_kb("kb").followed
    assert (followed.present, followed.documents) == (False, 2)


def edited_then_changed_at_its_source(coffer: Coffer, folder: Path) -> DocumentRow:
    """Follow ``folder``, edit alpha.md's document in Coffer, then change the file: its row."""
    coffer.follow_folder("kb", folder)
    doc = coffer.index.find_document("kb", source_path=str(folder / "alpha.md"))
    assert doc is not None
    coffer.edit_document("kb", doc.id, "# Alpha\n\nEdited in Coffer: armadillos.")
    write(folder / "alpha.md", "# Alpha\n\nThe source moved on: anteaters.")
    return doc


def test_an_edit_in_coffer_is_never_overwritten_by_a_later_source_change(
    make: Callable[..., Coffer], folder: Path
) -> None:
    coffer = make()
    doc = edited_then_changed_at_its_source(coffer, folder)
    for _ in range(2):
        [result] = coffer.sync_followed("kb")
        [conflict] = [i for i in result.items if i.status == "conflict"]
        assert (conflict.document_id, conflict.code) == (doc.id, "source_conflict")
    assert "armadillos" in coffer.read_document("kb", doc.id).markdown
    assert titles(coffer, "anteaters") == []
    [audited] = events(coffer, "KB_SOURCE_CONFLICT")  # once, however often it is met
    assert audited.details["source_path"] == str(folder / "alpha.md")
    assert [c.status for c in coffer.check_sources("kb").documents if c.document_id == doc.id] == ["edited"]
    (folder / "alpha.md").unlink()  # deleting its file keeps an edited document too
    [result] = coffer.sync_followed("kb")
    assert [i.status for i in result.items if i.document_id == doc.id] == ["kept"]
    assert "armadillos" in coffer.read_document("kb", doc.id).markdown


def test_a_restore_that_undoes_an_edit_in_coffer_lets_the_next_sync_take_the_changed_file(
    make: Callable[..., Coffer], folder: Path
) -> None:
    coffer = make()
    coffer.follow_folder("kb", folder)
    snapshot = coffer.snapshot_kb("kb")  # before the edit in Coffer
    doc = edited_then_changed_at_its_source(coffer, folder)
    [result] = coffer.sync_followed("kb")
    assert [i.status for i in result.items if i.document_id == doc.id] == ["conflict"]
    coffer.restore_snapshot("kb", snapshot.id)
    [followed] = coffer.describe_kb("kb").followed
    assert followed.pending > 0  # the folder is due for a full sync: not in step yet
    [result] = coffer.sync_followed("kb")  # what this process remembered of the conflict is stale
    assert [i.status for i in result.items if i.document_id == doc.id] == ["updated"]
    assert titles(coffer, "anteaters") == ["Alpha"]
    [followed] = coffer.describe_kb("kb").followed
    assert (followed.pending, followed.documents) == (0, 2)


def followed_alpha(coffer: Coffer, folder: Path) -> tuple[DocumentRow, Path]:
    """Follow ``folder``: alpha.md's document, and its Markdown file."""
    coffer.follow_folder("kb", folder)
    doc = coffer.index.find_document("kb", source_path=str(folder / "alpha.md"))
    assert doc is not None
    return doc, coffer.settings.home / "knowledge" / "kb" / "docs" / f"{doc.id}.md"


def saved_by_hand(coffer: Coffer, folder: Path) -> DocumentRow:
    """Follow ``folder`` and add a line to alpha.md's document file in an editor, unseen by any read yet."""
    doc, path = followed_alpha(coffer, folder)
    with open(path, "a", encoding="utf-8") as file:
        file.write("\nMy own note: capybaras.\n")
    return doc


def test_an_edit_saved_by_hand_that_no_read_has_seen_is_not_overwritten_by_its_source(
    make: Callable[..., Coffer], folder: Path
) -> None:
    coffer = make()
    doc = saved_by_hand(coffer, folder)
    write(folder / "alpha.md", "# Alpha\n\nThe source moved on: narwhals.")
    [result] = coffer.sync_followed("kb")  # what check-sources and a watcher batch holding both changes do
    assert [i.status for i in result.items if i.document_id == doc.id] == ["conflict"]
    assert "capybaras" in coffer.read_document("kb", doc.id).markdown
    assert [e.details["source_path"] for e in events(coffer, "KB_SOURCE_CONFLICT")] == [str(folder / "alpha.md")]


def test_an_edit_saved_by_hand_that_no_read_has_seen_is_kept_when_its_source_is_deleted(
    make: Callable[..., Coffer], folder: Path
) -> None:
    coffer = make()
    doc = saved_by_hand(coffer, folder)
    (folder / "alpha.md").unlink()
    [result] = coffer.sync_followed("kb")
    assert [i.status for i in result.items if i.document_id == doc.id] == ["kept"]
    assert "capybaras" in coffer.read_document("kb", doc.id).markdown


def test_tags_written_by_hand_that_no_read_has_seen_survive_a_change_of_the_source(
    make: Callable[..., Coffer], folder: Path
) -> None:
    coffer = make()
    doc, path = followed_alpha(coffer, folder)
    meta, body = parse_document(path.read_text(encoding="utf-8"))
    path.write_text(render_document({**meta, "tags": ["mine"]}, body), encoding="utf-8")
    write(folder / "alpha.md", "# Alpha\n\nThe source moved on: okapis.")
    [result] = coffer.sync_followed("kb")  # no read in between
    assert [i.status for i in result.items if i.document_id == doc.id] == ["updated"]
    assert titles(coffer, "okapis") == ["Alpha"]
    assert coffer.read_document("kb", doc.id).metadata["tags"] == ["mine"]


def test_a_followed_file_the_database_refused_is_ingested_by_the_next_sync_once_it_works(
    make: Callable[..., Coffer], folder: Path, backend_settings: dict[str, str]
) -> None:
    if "database_url" not in backend_settings:
        pytest.skip("the failure is the database server's: a trigger refusing new documents for a while")
    coffer = make()
    coffer.follow_folder("kb", folder)
    with psycopg.connect(backend_settings["database_url"], autocommit=True) as conn:
        conn.execute(
            "CREATE FUNCTION refuse_for_now() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN RAISE EXCEPTION 'refused for now'; END $$"
        )
        conn.execute("CREATE TRIGGER refuse_for_now BEFORE INSERT ON documents EXECUTE FUNCTION refuse_for_now()")
        write(folder / "gamma.md", "# Gamma\n\nGazelles graze in the grass.")
        [result] = coffer.sync_followed("kb")
        assert [i.status for i in result.items if i.path.endswith("gamma.md")] == ["rejected"]
        conn.execute("DROP TRIGGER refuse_for_now ON documents")
    [result] = coffer.sync_followed("kb")  # the file has not changed: a failure of the database is not its own
    assert [i.status for i in result.items if i.path.endswith("gamma.md")] == ["created"]
    assert titles(coffer, "gazelles") == ["Gamma"]


def test_a_source_conflict_is_audited_once_per_version_of_the_file_across_restarts(
    make: Callable[..., Coffer], folder: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # What a server remembers of a conflict dies with it; the audit log is what every server reads.
    first = make()
    doc = edited_then_changed_at_its_source(first, folder)
    first.sync_followed("kb")
    for coffer in (make(), make(), first):  # two restarts, then the first server again
        [result] = coffer.sync_followed("kb")
        assert [i.status for i in result.items if i.document_id == doc.id] == ["conflict"]
    [audited] = events(first, "KB_SOURCE_CONFLICT")
    write(folder / "alpha.md", "# Alpha\n\nThe source moved on again: aardwolves.")
    for coffer in (make(), first):
        coffer.sync_followed("kb")
    shas = [e.details["source_sha256"] for e in events(first, "KB_SOURCE_CONFLICT")]
    assert shas[0] == audited.details["source_sha256"]
    assert len(shas) == 2
    assert shas[1] != shas[0]
    warned = [r for r in caplog.records if r.levelname == "WARNING" and "was edited in Coffer" in r.getMessage()]
    assert len(warned) == 2
    assert "armadillos" in first.read_document("kb", doc.id).markdown


def test_links_in_a_followed_folder_are_never_followed(make: Callable[..., Coffer], folder: Path) -> None:
    coffer = make()
    (folder / "escape.md").symlink_to(folder.parent / "outside" / "secret.md")
    (folder / "escape-dir").symlink_to(folder.parent / "outside", target_is_directory=True)
    (folder / "alias").symlink_to(folder / "deep", target_is_directory=True)
    coffer.follow_folder("kb", folder)
    # What a watcher would report: the link, and paths through linked folders.
    changed = [folder / "escape.md", folder / "escape-dir" / "secret.md", folder / "alias" / "beta.md"]
    result = coffer.follow.sync("kb", str(folder), changed=changed)
    assert {i.status for i in result.items} == {"rejected"}
    assert {i.code for i in result.items} == {"path_not_allowed"}
    assert titles(coffer, "zeppelin") == []
    assert len(sources(coffer)) == 2  # no second copy of beta through the alias


def test_a_file_moved_into_a_followed_folder_with_its_folder_is_ingested(
    make: Callable[..., Coffer], folder: Path, tmp_path: Path
) -> None:
    coffer = make()
    coffer.follow_folder("kb", folder)
    moved = tmp_path / "papers"
    (moved / "inner").mkdir(parents=True)
    write(moved / "inner" / "delta.md", "# Delta\n\nDolphins dive deep.")
    moved.rename(folder / "papers")
    # A folder moved in raises one event, for the folder; its files have none of their own.
    result = coffer.follow.sync("kb", str(folder), changed=[folder / "papers"])
    assert result.created == 1
    # And a folder removed raises one for the folder too (rm -r may report only it).
    (folder / "papers" / "inner" / "delta.md").unlink()
    (folder / "papers" / "inner").rmdir()
    (folder / "papers").rmdir()
    result = coffer.follow.sync("kb", str(folder), changed=[folder / "papers"])
    assert result.removed == 1
    assert titles(coffer, "dolphins") == []


def test_a_followed_file_replaced_by_a_folder_of_its_name_is_a_deleted_file(
    make: Callable[..., Coffer], folder: Path
) -> None:
    # Seen by the watcher (one event, for the path) and by a full sync alike.
    coffer = make()
    coffer.follow_folder("kb", folder)
    alpha = folder / "alpha.md"
    alpha.unlink()
    alpha.mkdir()
    write(alpha / "inner.md", "# Inner\n\nIbexes on the ridge.")
    result = coffer.follow.sync("kb", str(folder), changed=[alpha])
    assert sorted((Path(i.path).name, i.status) for i in result.items) == [
        ("alpha.md", "removed"),
        ("inner.md", "created"),
    ]
    assert titles(coffer, "aardvarks") == []
    # And the other way round: a followed folder replaced by a file of its name, found by a full sync.
    (folder / "deep" / "beta.md").unlink()
    (folder / "deep").rmdir()
    write(folder / "deep", "# Deep\n\nDugongs graze on seagrass.")
    [full] = coffer.sync_followed("kb")
    assert (full.removed, full.created) == (1, 0)  # "deep" has no extension: not a format Coffer reads
    assert titles(coffer, "beavers") == []
    assert coffer.check_sources("kb").missing == 0


# -- renamed and moved files ---------------------------------------------------------------------


def tagged(coffer: Coffer, path: Path, *tags: str) -> DocumentRow:
    """The document of a followed file, given ``tags`` in Coffer."""
    doc = coffer.index.find_document("kb", source_path=str(path))
    coffer.edit_document("kb", doc.id, tags=list(tags))
    return coffer.index.get_document("kb", doc.id)


def test_a_renamed_followed_file_keeps_its_document_id_tags_and_creation_time(
    make: Callable[..., Coffer], folder: Path
) -> None:
    coffer = make()
    coffer.follow_folder("kb", folder)
    before = tagged(coffer, folder / "alpha.md", "zoo", "draft")
    (folder / "alpha.md").rename(folder / "omega.md")
    [result] = coffer.sync_followed("kb")
    assert (result.renamed, result.created, result.removed) == (1, 0, 0)
    [item] = [i for i in result.items if i.status == "renamed"]
    assert (item.path, item.document_id, item.title) == (str(folder / "omega.md"), before.id, "Alpha")
    # Agents that cited the document find it under the same id, wherever they look.
    info = coffer.read_document("kb", before.id)
    meta = info.metadata or {}
    assert (meta["source_path"], meta["tags"], meta["created_at"]) == (
        str(folder / "omega.md"),
        ["zoo", "draft"],
        before.created_at,
    )
    assert "Aardvarks" in (info.markdown or "")
    assert [p.document_id for p in coffer.search("kb", "aardvarks", top_k=5).passages] == [before.id]
    listed = {d.document_id: d for d in coffer.list_documents("kb", limit=100).documents}
    assert (listed[before.id].source_path, listed[before.id].tags) == (str(folder / "omega.md"), ["zoo", "draft"])
    assert sources(coffer) == [str(folder / "deep" / "beta.md"), str(folder / "omega.md")]
    # The file on disk says so too (files are the truth), and the audit log records the rename.
    on_disk = (coffer.paths.kb("kb").doc(before.id)).read_text(encoding="utf-8")
    assert f"source_path: {folder / 'omega.md'}" in on_disk
    assert "original_filename: omega.md" in on_disk
    [renamed] = events(coffer, "KB_DOCUMENT_RENAMED")
    assert (renamed.document_id, renamed.details) == (
        before.id,
        {"renamed_from": str(folder / "alpha.md"), "source_path": str(folder / "omega.md")},
    )
    assert events(coffer, "KB_DOCUMENT_DELETED") == []
    [quiet] = coffer.sync_followed("kb")
    assert (quiet.renamed, quiet.created, quiet.removed, quiet.unchanged) == (0, 0, 0, 2)


def test_a_file_moved_into_a_subfolder_keeps_its_document_and_check_sources_says_renamed(
    make: Callable[..., Coffer], folder: Path
) -> None:
    coffer = make()
    write(folder / "report.txt", "Quarterly quokka census figures.")  # no heading: its title is its name
    coffer.follow_folder("kb", folder)
    before = tagged(coffer, folder / "report.txt", "finance")
    assert before.title == "report"
    (folder / "archive").mkdir()
    (folder / "report.txt").rename(folder / "archive" / "report-2024.txt")
    report = coffer.check_sources("kb")
    assert (report.renamed, report.added, report.removed) == (1, 0, 0)
    [check] = [c for c in report.documents if c.status == "renamed"]
    assert (check.document_id, check.source_path) == (before.id, str(folder / "archive" / "report-2024.txt"))
    after = coffer.index.get_document("kb", before.id)
    # A title its file name gave follows the new name, as a re-ingest would give it.
    assert (after.title, after.tags, after.created_at) == ("report-2024", ("finance",), before.created_at)


def test_a_renamed_file_whose_document_was_edited_in_coffer_keeps_the_edit(
    make: Callable[..., Coffer], folder: Path
) -> None:
    coffer = make()
    coffer.follow_folder("kb", folder)
    doc = coffer.index.find_document("kb", source_path=str(folder / "alpha.md"))
    coffer.edit_document("kb", doc.id, "# Alpha\n\nArmadillos, edited in Coffer.")
    (folder / "alpha.md").rename(folder / "deep" / "alpha.md")
    [result] = coffer.sync_followed("kb")
    assert [(i.status, i.document_id) for i in result.items if i.status != "unchanged"] == [("renamed", doc.id)]
    row = coffer.index.get_document("kb", doc.id)
    assert (row.source_path, row.source_mode) == (str(folder / "deep" / "alpha.md"), "edited")
    assert "Armadillos" in (coffer.read_document("kb", doc.id).markdown or "")
    assert [c.status for c in coffer.check_sources("kb").documents if c.document_id == doc.id] == ["unchanged"]


def test_identical_files_renamed_at_once_each_keep_a_document_and_none_is_lost_or_merged(
    make: Callable[..., Coffer], folder: Path
) -> None:
    coffer = make()
    same = "# Twin\n\nTapirs trot in twos."
    for name in ("one.md", "two.md", "three.md"):
        write(folder / name, same)
    coffer.follow_folder("kb", folder)
    one, two, three = (tagged(coffer, folder / n, n.split(".")[0]) for n in ("one.md", "two.md", "three.md"))
    (folder / "moved").mkdir()
    (folder / "two.md").rename(folder / "moved" / "two.md")  # the same name: it is two's document
    (folder / "one.md").rename(folder / "a-copy.md")
    (folder / "three.md").unlink()  # two gone of one content and one new: the other is a deletion
    [result] = coffer.sync_followed("kb")
    assert (result.renamed, result.created, result.removed) == (2, 0, 1)
    moved = {i.path: i.document_id for i in result.items if i.status == "renamed"}
    assert moved == {str(folder / "moved" / "two.md"): two.id, str(folder / "a-copy.md"): one.id}
    assert coffer.index.get_document("kb", three.id) is None
    # One file of that content more than there were documents: a new document, the others untouched.
    write(folder / "four.md", same)
    (folder / "a-copy.md").rename(folder / "five.md")
    [result] = coffer.sync_followed("kb")
    assert (result.renamed, result.created, result.removed) == (1, 1, 0)
    ids = {d.source_path: d.document_id for d in coffer.list_documents("kb", limit=100).documents}
    assert ids[str(folder / "five.md")] == one.id  # in order of path: five.md before four.md
    assert ids[str(folder / "four.md")] not in (one.id, two.id)
    assert ids[str(folder / "moved" / "two.md")] == two.id
    assert len(ids) == 5  # alpha, beta, two, four, five: one document per file


def test_a_file_renamed_and_changed_at_once_is_a_deleted_file_and_a_new_one(
    make: Callable[..., Coffer], folder: Path
) -> None:
    # Documented: without the same bytes nothing says it is the same file.
    coffer = make()
    coffer.follow_folder("kb", folder)
    before = tagged(coffer, folder / "alpha.md", "zoo")
    (folder / "alpha.md").unlink()
    write(folder / "omega.md", "# Alpha\n\nAardvarks amble, and an edit.")
    [result] = coffer.sync_followed("kb")
    assert (result.renamed, result.created, result.removed) == (0, 1, 1)
    assert coffer.index.get_document("kb", before.id) is None


def test_a_rename_the_watcher_reports_in_one_batch_or_in_two_keeps_the_document(
    make: Callable[..., Coffer], folder: Path
) -> None:
    coffer = make()
    coffer.follow_folder("kb", folder)
    alpha = tagged(coffer, folder / "alpha.md", "zoo")
    beta = tagged(coffer, folder / "deep" / "beta.md", "dam")
    # Both paths in one batch.
    (folder / "alpha.md").rename(folder / "omega.md")
    result = coffer.follow.sync("kb", str(folder), changed=[folder / "alpha.md", folder / "omega.md"])
    assert [(i.status, i.path, i.document_id) for i in result.items] == [
        ("renamed", str(folder / "omega.md"), alpha.id)
    ]
    # The old path alone (the new name comes in the next batch): the folder is looked at for it.
    (folder / "deep" / "beta.md").rename(folder / "beta-moved.md")
    result = coffer.follow.sync("kb", str(folder), changed=[folder / "deep" / "beta.md"])
    assert [(i.status, i.path, i.document_id) for i in result.items] == [
        ("renamed", str(folder / "beta-moved.md"), beta.id)
    ]
    result = coffer.follow.sync("kb", str(folder), changed=[folder / "beta-moved.md"])
    assert [(i.status, i.document_id) for i in result.items] == [("unchanged", beta.id)]
    # A folder renamed: each file in it.
    (folder / "deep").rename(folder / "deeper")
    (folder / "deeper" / "gamma.md").write_text("# Gamma\n\nGnus.", encoding="utf-8")
    coffer.follow.sync("kb", str(folder), changed=[folder / "deep", folder / "deeper"])
    gamma = tagged(coffer, folder / "deeper" / "gamma.md", "gnu")
    (folder / "deeper").rename(folder / "deepest")
    result = coffer.follow.sync("kb", str(folder), changed=[folder / "deeper", folder / "deepest"])
    assert [(i.status, i.document_id) for i in result.items] == [("renamed", gamma.id)]
    assert coffer.index.get_document("kb", gamma.id).tags == ("gnu",)
    assert {t for d in coffer.list_documents("kb", limit=100).documents for t in d.tags} == {"zoo", "dam", "gnu"}


_KILLED_SYNC = """
import sys
from coffer_mcp import Coffer, load_settings
from tests.reliability.crash_points import _arm
home, folder, k, phase = sys.argv[1:]
_arm(int(k), phase)
with Coffer(load_settings(home=home, allowed_dirs=[folder])) as coffer:
    coffer.sync_followed("kb")
"""


@pytest.mark.sqlite_only
@pytest.mark.skipif(sys.platform != "linux", reason="SIGKILL as on Linux")
def test_a_rename_killed_at_any_file_commit_point_keeps_the_document_and_the_next_sync_finishes_it(
    make: Callable[..., Coffer], folder: Path, home: Path, tmp_path: Path
) -> None:
    coffer = make()
    coffer.follow_folder("kb", folder)
    alpha = tagged(coffer, folder / "alpha.md", "zoo")
    coffer.close()
    (folder / "alpha.md").rename(folder / "omega.md")
    for k in range(1, 5):
        outcomes = []
        for phase in ("before", "after"):
            copy = tmp_path / f"home-{k}-{phase}"
            shutil.copytree(home, copy)
            run = [sys.executable, "-c", _KILLED_SYNC, str(copy), str(folder), str(k), phase]
            done = subprocess.run(run, cwd=Path(__file__).parents[2], capture_output=True, text=True, check=False)
            outcomes.append(done.returncode)
            assert done.returncode in (0, -signal.SIGKILL), done.stderr
            with Coffer(load_settings(home=copy, allowed_dirs=[str(folder)])) as after:
                assert after.verify("kb").problems == [] or done.returncode == -signal.SIGKILL
                after.sync_followed("kb")
                row = after.index.get_document("kb", alpha.id)
                where = f"killed {phase} commit point {k}"
                assert row is not None, where
                assert (row.source_path, row.tags) == (str(folder / "omega.md"), ("zoo",)), where
                assert sources(after) == [str(folder / "deep" / "beta.md"), str(folder / "omega.md")], where
                assert after.verify("kb").problems == [], where
        if -signal.SIGKILL not in outcomes:
            return
    raise AssertionError("the rename has more commit points than the test tries")


@pytest.mark.anyio
async def test_the_watcher_applies_a_rename_to_the_same_document(make: Callable[..., Coffer], folder: Path) -> None:
    coffer = make()
    coffer.follow_folder("kb", folder)
    alpha = tagged(coffer, folder / "alpha.md", "zoo")
    with coffer.watching() as watcher:
        await eventually(watcher.ready.is_set, "the watcher to start")
        (folder / "alpha.md").rename(folder / "deep" / "omega.md")

        def moved() -> bool:
            row = coffer.index.get_document("kb", alpha.id)
            return row is not None and row.source_path == str(folder / "deep" / "omega.md")

        await eventually(moved, "the rename")
    assert coffer.index.get_document("kb", alpha.id).tags == ("zoo",)
    assert sources(coffer) == [str(folder / "deep" / "beta.md"), str(folder / "deep" / "omega.md")]
    assert events(coffer, "KB_DOCUMENT_DELETED") == []


def test_packs_never_carry_followed_folders(make: Callable[..., Coffer], folder: Path, tmp_path: Path) -> None:
    coffer = make()
    coffer.follow_folder("kb", folder)
    coffer.export_kb("kb", tmp_path / "kb.cofferpack")
    imported = coffer.import_pack(tmp_path / "kb.cofferpack", as_name="copy")
    assert imported.documents_added == 2
    assert coffer.describe_kb("copy").followed == []
    hostile = yaml.safe_dump({"created_at": "x", "updated_at": "x", "follow": [str(Path.home())]}).encode()
    with pytest.raises(PackError, match="folders to follow"):
        parse_config(hostile)


# -- the watcher (in this process) ---------------------------------------------------------------


async def eventually(check: Callable[[], bool], what: str, seconds: float = 60) -> None:
    """Poll ``check`` until it holds (a generous deadline: the machine may be busy)."""
    with anyio.fail_after(seconds):
        while not check():  # noqa: ASYNC110 - polls what a watcher thread applies
            await anyio.sleep(0.05)


@pytest.mark.anyio
async def test_the_watcher_applies_changes_of_followed_folders_and_of_docs(
    make: Callable[..., Coffer], folder: Path
) -> None:
    coffer = make()
    coffer.follow_folder("kb", folder)
    with coffer.watching() as watcher:
        assert [t.name for t in threading.enumerate()].count("coffer-watcher") == 1
        await eventually(watcher.ready.is_set, "the watcher to start")
        assert coffer.describe_kb("kb").followed[0].watched
        assert coffer.activity.docs_watched
        write(folder / "gamma.md", "# Gamma\n\nGnus graze on the savanna.")
        await eventually(lambda: titles(coffer, "gnus") == ["Gamma"], "a new file")
        write(folder / "gamma.md", "# Gamma\n\nGeckos climb glass.")
        await eventually(lambda: titles(coffer, "geckos") == ["Gamma"], "a changed file")
        (folder / "gamma.md").unlink()
        await eventually(lambda: titles(coffer, "geckos") == [], "a deleted file")
        # A hand edit of a document's own file is applied by the watcher too.
        doc = coffer.index.find_document("kb", source_path=str(folder / "alpha.md"))
        path = Path(coffer.read_document("kb", doc.id).path)
        write(path, path.read_text(encoding="utf-8").replace("Aardvarks", "Axolotls"))
        await eventually(
            lambda: coffer.index.get_document("kb", doc.id).file_stamp.startswith(str(path.stat().st_mtime_ns)),
            "a hand edit",
        )
    assert not coffer.activity.docs_watched
    assert not coffer.describe_kb("kb").followed[0].watched
    actors = {e.actor for e in coffer.index.audit_events("kb") if e.event.startswith("KB_DOCUMENT")}
    assert "watcher" in actors


@pytest.mark.anyio
async def test_the_watcher_ingests_again_a_followed_file_whose_document_file_was_deleted_by_hand(
    make: Callable[..., Coffer], folder: Path
) -> None:
    coffer = make()
    coffer.follow_folder("kb", folder)
    with coffer.watching() as watcher:
        await eventually(watcher.ready.is_set, "the watcher to start")
        doc = coffer.index.find_document("kb", source_path=str(folder / "alpha.md"))
        Path(coffer.read_document("kb", doc.id).path).unlink()  # the file alpha.md is still there, unchanged
        await eventually(lambda: coffer.index.get_document("kb", doc.id) is None, "the document removed")
        await eventually(lambda: titles(coffer, "aardvarks") == ["Alpha"], "the file ingested again")
        await eventually(lambda: coffer.describe_kb("kb").followed[0].pending == 0, "the folder in step")
        assert coffer.describe_kb("kb").followed[0].documents == 2


@pytest.mark.anyio
async def test_a_file_the_watcher_cannot_ingest_is_logged_and_shown_in_metrics_until_it_is_gone(
    make: Callable[..., Coffer], folder: Path, caplog: pytest.LogCaptureFixture
) -> None:
    coffer = make()
    coffer.follow_folder("kb", folder)
    caplog.set_level(logging.WARNING, logger="coffer_mcp")  # the default level
    with coffer.watching() as watcher:
        await eventually(watcher.ready.is_set, "the watcher to start")
        assert coffer.describe_kb("kb").followed[0].failed == 0
        (folder / "~$report.docx").write_bytes(b"\x05Owner  " + b"\x00" * 150)  # Word's owner file: ignored
        write(folder / "broken.pdf", "not a pdf")
        await eventually(lambda: coffer.describe_kb("kb").followed[0].failed == 1, "the failure to be seen")
        async with Client(build_server(coffer), client_info=CLIENT) as client:
            metrics = (await client.call_tool("coffer__knowledge_base_metrics", {"kb": "kb"})).structured_content
            report = (await client.call_tool("coffer__check_sources", {"kb": "kb"})).structured_content
        assert metrics["followed"][0]["failed"] == 1
        [failure] = report["failed"]
        assert (Path(failure["path"]).name, failure["code"]) == ("broken.pdf", "conversion_failed")
        assert failure["hint"]
        (folder / "broken.pdf").unlink()
        await eventually(lambda: coffer.describe_kb("kb").followed[0].failed == 0, "the failure to be gone")
    logged = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert [m for m in logged if "broken.pdf" in m and "not ingested" in m]
    assert not [m for m in logged if "~$report.docx" in m]
    assert len(sources(coffer)) == 2


@pytest.mark.anyio
async def test_the_watcher_outlives_a_followed_folder_that_vanishes_and_catches_up_when_it_is_back(
    make: Callable[..., Coffer], folder: Path
) -> None:
    coffer = make()
    coffer.follow_folder("kb", folder)
    with coffer.watching() as watcher:
        await eventually(watcher.ready.is_set, "the watcher to start")
        aside = folder.with_name("aside")
        folder.rename(aside)
        await eventually(lambda: not coffer.describe_kb("kb").followed[0].watched, "the folder to be dropped")
        assert len(sources(coffer)) == 2  # nothing removed while it was gone
        write(aside / "gamma.md", "# Gamma\n\nGnus graze on the savanna.")
        aside.rename(folder)
        await eventually(lambda: titles(coffer, "gnus") == ["Gamma"], "the folder to be back")
        await eventually(lambda: coffer.describe_kb("kb").followed[0].watched, "the folder to be watched again")


@pytest.mark.anyio
async def test_a_folder_followed_while_the_watcher_runs_is_watched_from_then_on(
    make: Callable[..., Coffer], folder: Path, tmp_path: Path
) -> None:
    coffer = make()
    with coffer.watching() as watcher:
        await eventually(watcher.ready.is_set, "the watcher to start")
        # What an agent does over MCP: ingest_path with follow=true.
        async with Client(build_server(coffer), client_info=CLIENT) as client:
            result = await client.call_tool("coffer__ingest_path", {"kb": "kb", "path": str(folder), "follow": True})
            assert result.structured_content["followed"] == str(folder)
            await eventually(lambda: coffer.describe_kb("kb").followed[0].watched, "the new folder to be watched")
            write(folder / "gamma.md", "# Gamma\n\nGnus graze on the savanna.")
            await eventually(lambda: titles(coffer, "gnus") == ["Gamma"], "a new file")
            # Searchable as soon as it is indexed; counted once the watcher's batch is done.
            await eventually(lambda: coffer.describe_kb("kb").followed[0].pending == 0, "the batch to end")
            metrics = await client.call_tool("coffer__knowledge_base_metrics", {"kb": "kb"})
            report = await client.call_tool("coffer__check_sources", {"kb": "kb"})
    [followed] = metrics.structured_content["followed"]
    assert (followed["path"], followed["documents"], followed["watched"]) == (str(folder), 3, True)
    assert followed["last_sync"]
    assert json.loads(report.content[0].text)["followed"][0]["path"] == str(folder)


def test_reindex_changed_costs_nothing_for_files_already_indexed(make: Callable[..., Coffer], folder: Path) -> None:
    coffer = make()
    coffer.follow_folder("kb", folder)
    docs = sorted((coffer.paths.kb("kb").docs).glob("*.md"))
    assert coffer.freshness.reindex_changed("kb", docs) == 0  # our own writes: already indexed
    write(docs[0], docs[0].read_text(encoding="utf-8") + "\nA quokka appears.\n")
    os.remove(docs[1])
    write(docs[0].with_name("dropped.md"), "# Dropped\n\nA numbat naps.")
    assert coffer.freshness.reindex_changed("kb", [*docs, docs[0].with_name("dropped.md")]) == 3
    assert titles(coffer, "quokka")
    assert titles(coffer, "numbat") == ["Dropped"]
    assert len(coffer.list_documents("kb").documents) == 2


@pytest.mark.anyio
async def test_a_failure_in_the_watcher_is_logged_and_the_watcher_goes_on(
    make: Callable[..., Coffer], folder: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from coffer_mcp.services import watcher as watcher_module

    coffer = make()
    coffer.follow_folder("kb", folder)
    monkeypatch.setattr(watcher_module, "RETRY_SECONDS", 0.2)
    real_sync, real_targets = coffer.follow.sync, watcher_module.Watcher._targets
    failures = {"sync": 1, "targets": 1}

    def failing_sync(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("changed") is not None and failures["sync"]:
            failures["sync"] -= 1
            raise RuntimeError("injected: one batch fails")
        return real_sync(*args, **kwargs)

    def failing_targets(self: Any) -> Any:
        if failures["targets"]:
            failures["targets"] -= 1
            raise OSError("injected: the watch cannot start")
        return real_targets(self)

    monkeypatch.setattr(coffer.follow, "sync", failing_sync)
    monkeypatch.setattr(watcher_module.Watcher, "_targets", failing_targets)
    with coffer.watching() as watcher:
        await eventually(watcher.ready.is_set, "the watcher to start after its failed first watch")
        write(folder / "gamma.md", "# Gamma\n\nGnus graze on the savanna.")
        await eventually(lambda: titles(coffer, "gnus") == ["Gamma"], "the change whose batch failed once")
        assert failures["sync"] == 0
        write(folder / "delta.md", "# Delta\n\nDolphins dive deep.")
        await eventually(lambda: titles(coffer, "dolphins") == ["Delta"], "the next change")
    logged = caplog.text
    assert "injected: the watch cannot start" in logged
    assert "injected: one batch fails" in logged


def test_a_watched_big_knowledge_base_is_not_checked_in_full_on_every_folder_change() -> None:
    from coffer_mcp.services.scans import WATCHED_RECHECK_SECONDS, ScanLog

    settings = load_settings(reconcile_interval=1.0, reconcile_budget_ms=5.0)
    scans = ScanLog()
    scans.record("kb", "folder@1", at=time.monotonic(), cost=0.2)  # a 200 ms check: big
    assert not scans.fresh("kb", "folder@2", settings)  # a file added: check now
    assert scans.fresh("kb", "folder@2", settings, watched=True)  # the watcher applies it
    scans.record("kb", "folder@1", at=time.monotonic() - WATCHED_RECHECK_SECONDS, cost=0.2)
    assert not scans.fresh("kb", "folder@1", settings, watched=True)  # still checked in full now and then
    scans.record("kb", "folder@1", at=time.monotonic(), cost=0.001)  # small: every read
    assert not scans.fresh("kb", "folder@1", settings, watched=True)


def test_following_from_the_command_line(home: Path, folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from coffer_mcp.cli import main

    assert main(["--home", str(home), "kb", "create", "kb"]) == 0
    capsys.readouterr()
    assert main(["--home", str(home), "kb", "ingest", "kb", str(folder), "--follow"]) == 0
    out, err = capsys.readouterr()
    assert out.count("created") == 2
    assert f"following {folder}" in err
    assert main(["--home", str(home), "kb", "describe", "kb"]) == 0
    assert f"following  {folder}  (2 documents" in capsys.readouterr().out
    write(folder / "gamma.md", "# Gamma\n\nGnus graze on the savanna.")
    (folder / "alpha.md").unlink()
    assert main(["--home", str(home), "kb", "check-sources", "kb"]) == 0  # syncs the followed folder first
    out = capsys.readouterr().out
    assert f"added     {coffer_id(home, folder / 'gamma.md')}  {folder / 'gamma.md'}" in out
    [removed] = [line for line in out.splitlines() if line.startswith("removed")]
    assert removed.endswith(f"  {folder / 'alpha.md'}")
    assert "1 unchanged, 0 changed, 0 missing, 0 edited, 0 updated, 1 added, 1 removed" in out
    assert f"following  {folder}  (2 documents" in out
    write(folder / "gamma.md", "# Gamma\n\nGeckos climb glass.")
    write(folder / "broken.pdf", "not a pdf")
    assert main(["--home", str(home), "kb", "check-sources", "kb", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["updated"], report["added"], report["removed"]) == (1, 0, 0)
    assert {Path(d["source_path"]).name: d["status"] for d in report["documents"]} == {
        "beta.md": "unchanged",
        "gamma.md": "updated",
    }
    assert [(Path(f["path"]).name, f["code"]) for f in report["failed"]] == [("broken.pdf", "conversion_failed")]
    assert main(["--home", str(home), "kb", "check-sources", "kb"]) == 0
    out = capsys.readouterr().out
    assert "rejected  conversion_failed: Could not read 'broken.pdf' as a PDF" in out
    assert "\n          hint: " in out
    assert f"following  {folder}  (2 documents, 1 failed" in out
    assert main(["--home", str(home), "kb", "unfollow", "kb", str(folder), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


def coffer_id(home: Path, source: Path) -> str:
    with Coffer(load_settings(home=home)) as coffer:
        row = coffer.index.find_document("kb", source_path=str(source))
    assert row is not None
    return row.id


def test_a_hand_edited_follow_list_keeps_its_usable_entries(coffer: Coffer, home: Path, folder: Path) -> None:
    coffer.create_kb("kb")
    config = home / "knowledge" / "kb" / "kb.yaml"
    data = yaml.safe_load(config.read_text(encoding="utf-8"))
    data.update(follow=[str(folder), "relative/path", 42, str(folder)], chunk_size="huge")
    config.write_text(yaml.safe_dump(data), encoding="utf-8")
    [followed] = coffer.describe_kb("kb").followed  # a bad chunk_size does not drop the list
    assert followed.path == str(folder)


# -- names that are not UTF-8 --------------------------------------------------------------------


def _bytes_name(folder: Path, name: bytes) -> Path:
    """The path of ``name`` (raw bytes, not UTF-8) in ``folder``, as Python's os functions give it."""
    return Path(os.fsdecode(os.fsencode(folder) + b"/" + name))


@pytest.mark.anyio
async def test_a_name_that_is_not_utf8_is_rejected_with_a_hint_and_the_rest_of_the_folder_is_ingested(
    home: Path, folder: Path
) -> None:
    # The whole ingest (and check-sources, and check_sources over MCP) failed with a traceback:
    # the name's undecodable bytes reached SQL, and ok files were not ingested either.
    write(_bytes_name(folder, b"caf\xe9.md"), "# Cafe\n\nLatin-1 named.")
    (_bytes_name(folder, b"dir\xff")).mkdir()
    write(_bytes_name(folder, b"dir\xff") / "inside.md", "# Inside\n\nnever reached")
    env = {**os.environ, "COFFER_HOME": str(home), "COFFER_EMBEDDING_PROVIDER": "none"}

    def coffer(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "coffer_mcp", *args]
        return subprocess.run(command, env=env, capture_output=True, text=True, check=False)

    assert coffer("kb", "create", "kb").returncode == 0
    for done in (coffer("kb", "ingest", "kb", str(folder), "--follow"), coffer("kb", "check-sources", "kb")):
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr
        rejected = [line for line in done.stdout.splitlines() if line.startswith("rejected")]
        assert len(rejected) == 2, done.stdout
        assert all("undecodable_name" in line for line in rejected)
        assert f"{folder}/caf\\xe9.md" in done.stdout
        assert f"{folder}/dir\\xff" in done.stdout
        assert "hint: Rename it" in done.stdout
    with Coffer(load_settings(home=home, embedding_provider="none", allowed_dirs=[str(folder)])) as core:
        assert sources(core) == [str(folder / "alpha.md"), str(folder / "deep" / "beta.md")]
        async with Client(build_server(core), client_info=CLIENT) as client:
            report = await client.call_tool("coffer__check_sources", {"kb": "kb"})
            assert not report.is_error, report.content
            failed = report.structured_content["failed"]
            assert {(f["path"], f["code"]) for f in failed} == {
                (f"{folder}/caf\\xe9.md", "undecodable_name"),
                (f"{folder}/dir\\xff", "undecodable_name"),
            }
            assert report.structured_content["followed"][0]["failed"] == 2
    # Named on its own, it is refused in one line.
    done = coffer("kb", "ingest", "kb", str(_bytes_name(folder, b"caf\xe9.md")))
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "caf\\xe9.md: the name is not valid UTF-8" in done.stderr


@pytest.mark.anyio
async def test_the_watcher_keeps_applying_a_followed_folder_that_holds_names_it_cannot_report(
    make: Callable[..., Coffer], folder: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # watchfiles cannot report such a name: the watcher died every 5 s (on Linux at once, for a
    # folder's name) and applied nothing of the followed folder, while metrics said failed: 0.
    bad_folder = _bytes_name(folder, b"dir\xff")
    bad_folder.mkdir()
    coffer = make()
    coffer.follow_folder("kb", folder)
    caplog.set_level(logging.WARNING, logger="coffer_mcp")

    def state() -> Any:
        return coffer.describe_kb("kb").followed[0]

    with coffer.watching() as watcher:
        await eventually(watcher.ready.is_set, "the watcher to start")
        await eventually(lambda: state().failed == 1 and state().warning is not None, "the name to be reported")
        assert "not valid UTF-8" in (state().warning or "")
        write(folder / "gamma.md", "# Gamma\n\nGnus graze on the savanna.")
        write(_bytes_name(folder, b"caf\xe9.md"), "# Cafe\n\nLatin-1 named.")
        await eventually(lambda: titles(coffer, "gnus") == ["Gamma"], "a new file beside them")
        await eventually(lambda: state().failed == 2, "the new name to be reported")
        # Renamed, they are ingested, and the folder is watched again.
        bad_folder.rename(folder / "dir")
        write(folder / "dir" / "inside.md", "# Inside\n\nIbises in the dir.")
        _bytes_name(folder, b"caf\xe9.md").rename(folder / "cafe.md")
        await eventually(lambda: titles(coffer, "ibises") == ["Inside"], "the renamed folder's file")
        await eventually(lambda: titles(coffer, "latin") == ["Cafe"], "the renamed file")
        await eventually(lambda: state().watched and state().warning is None, "the folder to be watched again")
        write(folder / "delta.md", "# Delta\n\nDolphins dive deep.")
        await eventually(lambda: titles(coffer, "dolphins") == ["Delta"], "a change, watched")
    logged = caplog.text
    assert "inotify" not in logged  # the failure is not blamed on the watch table
    assert "not valid UTF-8" in logged
