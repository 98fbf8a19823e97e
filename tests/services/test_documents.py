"""Ingest, read, list, edit and delete documents through the core service."""

from __future__ import annotations

import hashlib
import os
import threading
import time
from pathlib import Path

import pytest

from coffer_mcp import Coffer, load_settings
from coffer_mcp.errors import (
    DocumentNotFoundError,
    EditConflictError,
    IngestRejectedError,
    InvalidArgumentError,
    ReconversionBlockedError,
    StoreError,
)
from coffer_mcp.store import parse_document, render_document
from tests.conftest import FIXTURES

FRONTMATTER_KEYS = {
    "id",
    "title",
    "original_filename",
    "original_format",
    "source_sha256",
    "content_sha256",
    "source_mode",
    "conversion_engine",
    "converted_at",
    "created_at",
    "updated_at",
}


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_an_ingest_writes_markdown_with_frontmatter_and_keeps_the_original(
    coffer: Coffer, notes: str, home: Path
) -> None:
    data = (FIXTURES / "sample.csv").read_bytes()
    result = coffer.add_document(notes, "sample.csv", data)
    meta, body = parse_document(Path(result.path).read_text(encoding="utf-8"))
    assert set(meta) >= FRONTMATTER_KEYS
    assert "source_path" not in meta  # uploads never carry a source path
    assert meta["id"] == result.document_id
    assert meta["original_format"] == "csv"
    assert meta["source_sha256"] == hashlib.sha256(data).hexdigest()
    assert "|" in body
    raw = home / "knowledge" / notes / "raw" / f"{result.document_id}.csv"
    assert raw.read_bytes() == data


@pytest.mark.parametrize(
    ("filename", "content", "reason"),
    [
        ("empty.md", "   \n\n ", "empty"),
        ("tool.exe", "MZ binary", "unsupported_type"),
        ("scan.pdf", (FIXTURES / "scanned.pdf").read_bytes(), "scanned_pdf"),
        ("broken.pdf", b"%PDF-1.7 truncated garbage", "conversion_failed"),
        ("nul.md", b"# A\n\nab\x00cd", "unsupported_type"),  # bytes (a file): NUL says binary
    ],
)
def test_a_rejected_ingest_persists_nothing(
    coffer: Coffer, notes: str, home: Path, filename: str, content: str | bytes, reason: str
) -> None:
    before = files_under(home / "knowledge")
    with pytest.raises(IngestRejectedError) as caught:
        coffer.add_document(notes, filename, content)
    assert caught.value.reason == reason
    assert caught.value.hint
    assert files_under(home / "knowledge") == before
    assert coffer.index.document_counts() == {}
    assert [e.event for e in coffer.index.audit_events() if e.event.startswith("KB_DOCUMENT")] == []


def test_text_content_with_nul_characters_is_stored_without_them_as_an_edit_would_be(
    coffer: Coffer, notes: str, home: Path
) -> None:
    # Text an agent sent was refused as "binary"; an edit (and every converter) drops control characters.
    content = "# Log\n\nbefore\x00after\x00\n"
    added = coffer.add_document(notes, "log.md", content)
    assert added.note == "2 NUL characters (\\x00) were removed from the content, the first at offset 13."
    assert coffer.read_document(notes, added.document_id).markdown == "# Log\n\nbeforeafter"
    raw = home / "knowledge" / notes / "raw" / f"{added.document_id}.md"
    assert raw.read_bytes() == b"# Log\n\nbeforeafter\n"  # reconverting the original needs no NUL either
    again = coffer.add_document(notes, "log.md", content)
    assert (again.status, again.document_id) == ("unchanged", added.document_id)
    named = coffer.add_document(notes, "Untitled", "x\x00y")
    assert named.note is not None
    assert named.note.startswith("1 NUL character (\\x00) was removed from the content, the first at offset 1. ")
    assert "'Untitled' has no extension" in named.note


def test_a_file_with_a_nul_byte_is_refused_naming_where(coffer: Coffer, notes: str) -> None:
    with pytest.raises(IngestRejectedError) as caught:
        coffer.add_document(notes, "nul.txt", b"plain\x00text")
    assert caught.value.message == "'nul.txt' does not look like text: it holds a NUL byte (at byte 5)."
    assert "extension" in caught.value.hint


def test_an_oversized_document_is_too_large(home: Path) -> None:
    with Coffer(load_settings(home=home, max_document_bytes=1000)) as coffer:
        coffer.create_kb("kb")
        with pytest.raises(IngestRejectedError) as caught:
            coffer.add_document("kb", "big.md", "x" * 1001)
    assert caught.value.reason == "too_large"


def test_an_identical_re_upload_writes_and_audits_nothing(coffer: Coffer, notes: str, home: Path) -> None:
    first = coffer.add_document(notes, "r.md", "# R\n\nsame")
    stamp = Path(first.path).stat().st_mtime_ns
    again = coffer.add_document(notes, "r.md", "# R\n\nsame")
    assert (again.document_id, again.status) == (first.document_id, "unchanged")
    assert Path(first.path).stat().st_mtime_ns == stamp
    assert [e.event for e in coffer.index.audit_events() if e.event.startswith("KB_DOCUMENT")] == [
        "KB_DOCUMENT_INGESTED"
    ]


def test_a_replacing_re_upload_keeps_the_id_and_resets_an_edit(coffer: Coffer, notes: str) -> None:
    first = coffer.add_document(notes, "r.md", "# R\n\nversion one")
    coffer.edit_document(notes, first.document_id, "# R\n\nhand edit")
    with pytest.raises(IngestRejectedError) as caught:
        coffer.add_document(notes, "r.md", "# R\n\nversion two")
    assert caught.value.reason == "duplicate"
    assert first.document_id in caught.value.message
    replaced = coffer.add_document(notes, "r.md", "# R\n\nversion two", replace=True)
    assert (replaced.document_id, replaced.status, replaced.source_mode) == (first.document_id, "updated", "converted")
    read = coffer.read_document(notes, first.document_id)
    assert "version two" in read.markdown
    assert read.metadata["created_at"] < read.metadata["updated_at"]
    events = [e.event for e in coffer.index.audit_events() if e.document_id is not None]
    assert events == ["KB_DOCUMENT_INGESTED", "KB_DOCUMENT_UPDATED", "KB_DOCUMENT_UPDATED"]


def test_the_same_file_in_two_knowledge_bases_is_two_documents(coffer: Coffer, notes: str) -> None:
    coffer.create_kb("other")
    a = coffer.add_document(notes, "same.md", "# S\n\nx")
    b = coffer.add_document("other", "same.md", "# S\n\nx")
    assert a.document_id != b.document_id


def test_an_upload_never_replaces_a_document_ingested_from_a_path_that_shares_its_name(
    coffer: Coffer, notes: str, tmp_path: Path, home: Path
) -> None:
    source = tmp_path / "notes.md"
    source.write_text("# The user's notes\n\nkept in their folder", encoding="utf-8")
    ingested = coffer.ingest_path(notes, source).items[0].document_id
    assert ingested is not None
    for replace in (False, True):
        with pytest.raises(IngestRejectedError) as caught:
            coffer.add_document(notes, "notes.md", "# Agent note\n\nsomething else", replace=replace)
        assert caught.value.reason == "duplicate"
        assert ingested in caught.value.message
        assert str(source) in caught.value.message
        assert "coffer__edit_document" in caught.value.hint
        assert "replace=true to update that document" not in caught.value.hint  # it would not
    kept = coffer.read_document(notes, ingested)
    assert (kept.metadata["source_path"], kept.title) == (str(source), "The user's notes")
    raw = home / "knowledge" / notes / "raw" / f"{ingested}.md"
    assert raw.read_bytes() == source.read_bytes()
    assert coffer.check_sources(notes).documents[0].status == "unchanged"


def adopt(coffer: Coffer, home: Path, kb: str, name: str, text: str, *, mtime: float | None = None) -> str:
    """A Markdown file dropped into ``docs/`` by hand, adopted (an upload of that name): its id."""
    before = {d.document_id for d in coffer.list_documents(kb).documents}
    dropped = home / "knowledge" / kb / "docs" / name
    dropped.write_text(text, encoding="utf-8")
    if mtime is not None:  # an adopted file's created_at is its modification time
        os.utime(dropped, (mtime, mtime))
    (adopted,) = {d.document_id for d in coffer.list_documents(kb).documents} - before
    return adopted


def test_an_upload_replaces_the_upload_of_its_name_not_an_older_path_document_of_that_name(
    coffer: Coffer, notes: str, tmp_path: Path, home: Path
) -> None:
    source = tmp_path / "notes.md"
    source.write_text("# From the folder\n\nthe file's text", encoding="utf-8")
    ingested = coffer.ingest_path(notes, source).items[0].document_id
    uploaded = adopt(coffer, home, notes, "notes.md", "# Uploaded\n\nfirst version", mtime=time.time() + 3600)
    replaced = coffer.add_document(notes, "notes.md", "# Uploaded\n\nsecond version", replace=True)
    assert (replaced.document_id, replaced.status) == (uploaded, "updated")
    assert "second version" in coffer.read_document(notes, uploaded).markdown
    untouched = coffer.read_document(notes, str(ingested))
    assert ("the file's text" in untouched.markdown, untouched.metadata["source_path"]) == (True, str(source))


def test_an_upload_whose_name_several_uploads_share_is_refused_with_their_ids(
    coffer: Coffer, notes: str, home: Path
) -> None:
    first = adopt(coffer, home, notes, "notes.md", "# One\n\nthe first notes")
    second = adopt(coffer, home, notes, "notes.md", "# Two\n\nthe second notes")
    with pytest.raises(IngestRejectedError) as caught:
        coffer.add_document(notes, "notes.md", "# Three\n\nwhich one?", replace=True)
    assert caught.value.reason == "duplicate"
    assert first in caught.value.message
    assert second in caught.value.message
    assert "coffer__edit_document" in caught.value.hint
    assert "the first notes" in coffer.read_document(notes, first).markdown
    assert "the second notes" in coffer.read_document(notes, second).markdown
    (home / "knowledge" / notes / "docs" / f"{second}.md").unlink()  # deleted by hand: no longer ambiguous
    assert coffer.add_document(notes, "notes.md", "# Three\n\nthis one", replace=True).document_id == first


NOTE = "---\ntitle: Mine\ntags: [own, Shared]\naliases: [x]\nid: the-note's-own-id\n---\n# Body title\n\nHeron text.\n"


def test_a_markdown_notes_own_frontmatter_gives_title_and_tags_and_is_not_indexed_as_text(
    coffer: Coffer, notes: str, home: Path
) -> None:
    added = coffer.add_document(notes, "note.md", NOTE, tags=["shared", "given"])
    assert (added.title, added.tags) == ("Mine", ["own", "Shared", "given"])
    read = coffer.read_document(notes, added.document_id)
    assert read.markdown == "# Body title\n\nHeron text."
    assert read.metadata["id"] == added.document_id  # the note's own keys never take Coffer's place
    assert read.metadata["source_frontmatter"] == {
        "title": "Mine",
        "tags": ["own", "Shared"],
        "aliases": ["x"],
        "id": "the-note's-own-id",
    }
    assert added.chunk_count == 1
    assert coffer.search(notes, "aliases").passages == []
    assert [d.document_id for d in coffer.list_documents(notes, filters={"tags": ["own"]}).documents] == [
        added.document_id
    ]
    raw = home / "knowledge" / notes / "raw" / f"{added.document_id}.md"
    assert raw.read_text(encoding="utf-8") == NOTE  # the original, block and all
    again = coffer.add_document(notes, "note.md", NOTE, tags=["other"])  # identical bytes, new tags
    assert (again.status, again.tags) == ("updated", ["own", "Shared", "other"])
    coffer.reindex(notes)  # rows rebuilt from the files keep them
    assert coffer.read_document(notes, added.document_id).title == "Mine"
    assert coffer.list_documents(notes, filters={"tags": ["own"]}).total == 1


def test_a_followed_or_ingested_note_keeps_its_frontmatter_title_and_a_thematic_break_stays_text(
    coffer: Coffer, notes: str, tmp_path: Path
) -> None:
    (tmp_path / "note.md").write_text(NOTE, encoding="utf-8")
    (tmp_path / "rule.md").write_text("---\nA paragraph between two rules.\n---\n\nMore text.\n", encoding="utf-8")
    (tmp_path / "only.md").write_text("---\ntitle: Nothing else\n---\n", encoding="utf-8")
    items = {Path(i.path).name: i for i in coffer.ingest_path(notes, tmp_path).items}
    assert items["note.md"].title == "Mine"
    assert "title: Mine" not in coffer.read_document(notes, str(items["note.md"].document_id)).markdown
    rule = coffer.read_document(notes, str(items["rule.md"].document_id))
    assert rule.markdown.startswith("---\nA paragraph between two rules.\n---")
    assert "source_frontmatter" not in rule.metadata
    assert (items["only.md"].status, items["only.md"].code) == ("rejected", "empty")


def test_editing_replaces_the_body_marks_it_edited_and_follows_the_new_title(coffer: Coffer, notes: str) -> None:
    doc = coffer.add_document(notes, "a.md", "# Old title\n\nold body text")
    edited = coffer.edit_document(notes, doc.document_id, "# New title\n\nnew body text")
    assert (edited.status, edited.source_mode, edited.title) == ("updated", "edited", "New title")
    assert not coffer.search(notes, "old").passages
    assert coffer.search(notes, "new body").passages[0].title == "New title"
    same = coffer.edit_document(notes, doc.document_id, "# New title\n\nnew body text\n")
    assert same.status == "unchanged"


def test_replace_takes_an_unchanged_source_back_over_the_edits_the_refusal_warned_of(
    coffer: Coffer, notes: str, tmp_path: Path
) -> None:
    source = tmp_path / "plan.md"
    source.write_text("# Plan\n\nthe source's own words", encoding="utf-8")
    doc_id = coffer.ingest_path(notes, source).items[0].document_id
    assert doc_id is not None
    save_by_hand(coffer.read_document(notes, doc_id).path, "MY HAND EDIT")
    with pytest.raises(ReconversionBlockedError) as refused:  # an update from the source would lose the edit
        coffer.update_from_source(notes, doc_id)
    assert "replace" in (refused.value.hint or "")
    assert coffer.ingest_path(notes, source).items[0].status == "unchanged"  # without replace: kept
    assert "MY HAND EDIT" in coffer.read_document(notes, doc_id).markdown
    back = coffer.ingest_path(notes, source, replace=True).items[0]
    assert (back.status, back.document_id) == ("updated", doc_id)
    read = coffer.read_document(notes, doc_id)
    assert "MY HAND EDIT" not in read.markdown
    assert "the source's own words" in read.markdown
    assert read.metadata["source_mode"] == "converted"
    assert coffer.ingest_path(notes, source, replace=True).items[0].status == "unchanged"  # nothing left to undo


def test_an_upload_sent_again_with_replace_undoes_an_agent_s_edit(coffer: Coffer, notes: str) -> None:
    doc = coffer.add_document(notes, "memo.md", "# Memo\n\nas uploaded")
    coffer.edit_document(notes, doc.document_id, "# Memo\n\nrewritten by an agent")
    assert coffer.add_document(notes, "memo.md", "# Memo\n\nas uploaded").status == "unchanged"
    assert "rewritten" in coffer.read_document(notes, doc.document_id).markdown
    again = coffer.add_document(notes, "memo.md", "# Memo\n\nas uploaded", replace=True)
    assert (again.status, again.source_mode) == ("updated", "converted")
    assert "as uploaded" in coffer.read_document(notes, doc.document_id).markdown


def test_a_title_set_by_hand_in_the_frontmatter_survives_a_body_edit(coffer: Coffer, notes: str) -> None:
    doc = coffer.add_document(notes, "note.md", "# Note\n\nbody")
    path = Path(doc.path)
    meta, body = parse_document(path.read_text(encoding="utf-8"))
    path.write_text(render_document({**meta, "title": "My Hand Title"}, body), encoding="utf-8")
    assert coffer.edit_document(notes, doc.document_id, tags=["x"]).title == "My Hand Title"
    edited = coffer.edit_document(notes, doc.document_id, "# Note again\n\nbody changed by the agent")
    assert edited.title == "My Hand Title" == coffer.list_documents(notes).documents[0].title
    assert parse_document(path.read_text(encoding="utf-8"))[0]["title"] == "My Hand Title"
    coffer.reindex(notes)
    assert coffer.list_documents(notes).documents[0].title == "My Hand Title"


def save_by_hand(path: str, line: str) -> None:
    """What an editor does when the user adds a line to a document's file and saves it."""
    with open(path, "a", encoding="utf-8") as file:
        file.write(f"\n{line}\n")


def test_an_edit_built_on_a_read_the_user_has_since_changed_is_refused(coffer: Coffer, notes: str) -> None:
    doc = coffer.add_document(notes, "plan.md", "# Plan\n\nstep 1")
    read = coffer.read_document(notes, doc.document_id)
    save_by_hand(doc.path, "step 2 (the user's)")
    with pytest.raises(EditConflictError) as caught:
        coffer.edit_document(
            notes, doc.document_id, read.markdown + "\n\nstep 3 (agent)", expected_content_sha256=read.content_sha256
        )
    assert caught.value.code == "edit_conflict"
    assert "coffer__read_document" in caught.value.hint
    assert "expected_content_sha256" in caught.value.hint
    assert "step 2 (the user's)" in Path(doc.path).read_text(encoding="utf-8")
    again = coffer.read_document(notes, doc.document_id)
    edited = coffer.edit_document(
        notes, doc.document_id, again.markdown + "\n\nstep 3 (agent)", expected_content_sha256=again.content_sha256
    )
    assert edited.status == "updated"
    assert (
        coffer.read_document(notes, doc.document_id).markdown
        == "# Plan\n\nstep 1\n\nstep 2 (the user's)\n\nstep 3 (agent)"
    )


def test_a_whole_body_edit_without_a_version_never_discards_a_hand_edit(coffer: Coffer, notes: str) -> None:
    doc = coffer.add_document(notes, "plan.md", "# Plan\n\nstep 1")
    read = coffer.read_document(notes, doc.document_id)
    save_by_hand(doc.path, "step 2 (the user's)")
    with pytest.raises(EditConflictError):  # not yet seen by the index
        coffer.edit_document(notes, doc.document_id, read.markdown + "\n\nstep 3 (agent)")
    coffer.list_documents(notes)  # a read picks the hand edit up (a watcher would too)
    with pytest.raises(EditConflictError):  # still not the body Coffer wrote: only a version says it was seen
        coffer.edit_document(notes, doc.document_id, read.markdown + "\n\nstep 3 (agent)")
    assert "step 2 (the user's)" in Path(doc.path).read_text(encoding="utf-8")
    assert not [e for e in coffer.index.audit_events() if e.event == "KB_DOCUMENT_UPDATED"]


def test_a_hand_edited_document_is_retagged_as_it_is_and_then_edited_with_its_version(
    coffer: Coffer, notes: str
) -> None:
    doc = coffer.add_document(notes, "plan.md", "# Plan\n\nstep 1")
    save_by_hand(doc.path, "step 2 (the user's)")
    tagged = coffer.edit_document(notes, doc.document_id, tags=["plan"])  # applies to the file as it is now
    assert tagged.status == "updated"
    read = coffer.read_document(notes, doc.document_id)
    assert "step 2 (the user's)" in read.markdown
    assert (
        read.content_sha256
        == read.metadata["content_sha256"]
        == hashlib.sha256(read.markdown.strip().encode()).hexdigest()
    )
    assert read.content_sha256 == coffer.list_documents(notes).documents[0].content_sha256
    coffer.edit_document(
        notes, doc.document_id, read.markdown + "\n\nstep 3", expected_content_sha256=read.content_sha256
    )
    # Written by Coffer now: the next edit needs no version.
    assert coffer.edit_document(notes, doc.document_id, "# Plan\n\nall done").status == "updated"


@pytest.mark.parametrize("version", ["", "abc", "z" * 64, "0" * 65])
def test_an_edit_with_a_malformed_version_is_refused(coffer: Coffer, notes: str, version: str) -> None:
    doc = coffer.add_document(notes, "a.md", "# A\n\nbody")
    with pytest.raises(InvalidArgumentError) as caught:
        coffer.edit_document(notes, doc.document_id, "# A\n\nnew", expected_content_sha256=version)
    assert "content_sha256" in caught.value.hint


def test_an_edit_to_an_empty_body_is_refused(coffer: Coffer, notes: str) -> None:
    doc = coffer.add_document(notes, "a.md", "# A\n\nbody")
    with pytest.raises(IngestRejectedError) as caught:
        coffer.edit_document(notes, doc.document_id, " \n ")
    assert caught.value.reason == "empty"
    assert "body" in coffer.read_document(notes, doc.document_id).markdown


def test_deleting_a_document_removes_its_files_rows_and_passages(coffer: Coffer, notes: str, home: Path) -> None:
    doc = coffer.add_document(notes, "a.md", "# A\n\nunique marmalade")
    result = coffer.delete_document(notes, doc.document_id)
    assert result.files_removed == 3  # the Markdown, the original and its source map
    assert files_under(home / "knowledge" / notes) == ["kb.yaml"]
    assert not coffer.search(notes, "marmalade").passages
    with pytest.raises(DocumentNotFoundError):
        coffer.delete_document(notes, doc.document_id)


@pytest.mark.parametrize("doc_id", ["nope", "../../etc/passwd", "01M8NP4MZTN0XVCZWDXQ46XW1Z"])
def test_unknown_document_ids_are_not_found(coffer: Coffer, notes: str, doc_id: str) -> None:
    with pytest.raises(DocumentNotFoundError) as caught:
        coffer.read_document(notes, doc_id)
    assert "coffer__search_knowledge" in caught.value.hint


@pytest.mark.parametrize(
    ("page", "message"),
    [
        ({"unit": "lines", "limit": 20_001}, "limit must be from 1 to 20,000 when reading by lines, not 20001."),
        ({"limit": 200_001}, "limit must be from 1 to 200,000 when reading by chars, not 200001."),
        ({"offset": -1}, "offset must be from 0 to 2,147,483,647 chars, not -1."),
    ],
)
def test_a_page_out_of_bounds_is_refused_naming_the_bound_of_its_unit(
    coffer: Coffer, notes: str, page: dict, message: str
) -> None:
    doc_id = coffer.add_document(notes, "a.md", "# A\n\nalpha").document_id
    with pytest.raises(InvalidArgumentError) as caught:
        coffer.read_document(notes, doc_id, **page)
    assert caught.value.message == message


def test_long_documents_are_read_in_pages(coffer: Coffer, notes: str) -> None:
    body = "# Long\n\n" + "".join(f"line {i:05d}\n\n" for i in range(3000))
    doc = coffer.add_document(notes, "long.md", body)
    pages, offset = [], 0
    while True:
        page = coffer.read_document(notes, doc.document_id, offset=offset, limit=10_000)
        pages.append(page.markdown)
        offset += len(page.markdown)
        if not page.has_more:
            break
    whole = coffer.read_document(notes, doc.document_id)
    assert len(pages) > 2
    assert "".join(pages) == whole.markdown
    assert whole.total_chars == len(whole.markdown)


def test_a_page_of_lines_stops_at_the_last_whole_line_within_the_page_cap(coffer: Coffer, notes: str) -> None:
    # 1,000 lines of 10,000 characters came back as one 10,001,000-character page.
    body = "# Wide\n\n" + "".join(f"{i:05d}{'w' * 9_995}\n" for i in range(30))
    doc_id = coffer.add_document(notes, "wide.md", body).document_id
    page = coffer.read_document(notes, doc_id, offset=2, limit=1000, unit="lines")
    assert len(page.markdown) == 19 * 10_001  # a 20th line would pass 200,000
    assert (page.markdown[:5], page.markdown[-1]) == ("00000", "\n")
    assert (page.has_more, page.next_offset, page.next_unit, page.note) == (True, 21, "lines", None)
    last = coffer.read_document(notes, doc_id, offset=21, limit=1000, unit="lines")
    assert (last.markdown[:5], last.has_more, last.next_offset) == ("00019", False, None)
    past = coffer.read_document(notes, doc_id, offset=500, limit=1, unit="lines")
    assert (past.markdown, past.has_more) == ("", False)


def test_a_line_longer_than_a_page_is_cut_at_the_cap_and_goes_on_by_chars(coffer: Coffer, notes: str) -> None:
    # A 1,000,000-character line came back whole from unit="lines", limit=1.
    line = "".join(f"{i:09d}," for i in range(100_000))
    doc_id = coffer.add_document(notes, "long.md", f"# Long\n\n{line}\nafter\n").document_id
    page = coffer.read_document(notes, doc_id, offset=2, limit=1, unit="lines")
    assert page.markdown == line[:200_000]
    assert (page.has_more, page.next_offset, page.next_unit) == (True, 8 + 200_000, "chars")
    assert "Line 3 has 1,000,000 characters" in str(page.note)
    read, offset = page.markdown, page.next_offset
    while offset is not None and "\n" not in read:
        more = coffer.read_document(notes, doc_id, offset=offset, limit=200_000)
        read, offset = read + more.markdown, more.next_offset
    assert read.split("\n")[0] == line
    after = coffer.read_document(notes, doc_id, offset=3, limit=1, unit="lines")
    assert (after.markdown, after.has_more, after.note) == ("after", False, None)


def test_a_document_id_typed_in_lower_case_names_the_document(coffer: Coffer, notes: str) -> None:
    # A ULID is case-insensitive; "01hz…" was refused as an unknown document.
    doc_id = coffer.add_document(notes, "a.md", "# A\n\nalpha words").document_id
    typed = doc_id.lower()
    assert coffer.read_document(notes, typed).document_id == doc_id
    assert coffer.search(notes, "alpha", 5, document_ids=[typed]).passages[0].document_id == doc_id
    assert coffer.edit_document(notes, typed, "# A\n\nbeta words").document_id == doc_id
    assert coffer.delete_document(notes, typed).document_id == doc_id
    assert coffer.list_documents(notes).total == 0


def test_listing_filters_titles_case_insensitively_before_paginating(coffer: Coffer, notes: str) -> None:
    for i in range(5):
        coffer.add_document(notes, f"r{i}.md", f"# Report {i}\n\nx")
        coffer.add_document(notes, f"m{i}.md", f"# Minutes {i}\n\nx")
    page = coffer.list_documents(notes, "REPORT", limit=2, offset=2)
    assert page.total == 5
    assert [d.title for d in page.documents] == ["Report 2", "Report 3"]
    with pytest.raises(InvalidArgumentError):
        coffer.list_documents(notes, limit=0)


@pytest.mark.parametrize(
    ("typed", "title"),
    [("école", "École normale"), ("ΕΛΛΗΝΙΚΆ", "Ελληνικά κείμενα"), ("über", "ÜBER UNS"), ("türkçe", "TÜRKÇE")],
)
def test_listing_filters_titles_in_any_case_beyond_ascii_too(
    coffer: Coffer, notes: str, typed: str, title: str
) -> None:
    # SQLite's lower() folds only ASCII letters: "école" missed "École normale".
    coffer.add_document(notes, "match.md", f"# {title}\n\nx")
    coffer.add_document(notes, "other.md", "# Ecole\n\nx")
    assert [d.title for d in coffer.list_documents(notes, typed).documents] == [title]


def test_a_partial_word_beyond_ascii_is_found_in_any_case(coffer: Coffer, notes: str) -> None:
    # The substring scan (what a partial word falls back to) lower-cased the text's ASCII letters only.
    upper = coffer.add_document(notes, "karten.md", "# Karten\n\nDIE ÜBERSICHTSKARTE DER STADT").document_id
    lower = coffer.add_document(notes, "plan.md", "# Plan\n\nder übersichtsplan").document_id
    found = {p.document_id for p in coffer.search(notes, "übersichts", 5).passages}
    assert found == {upper, lower}


def test_a_directory_ingest_walks_visible_files_and_records_source_paths(
    coffer: Coffer, notes: str, tmp_path: Path
) -> None:
    tree = tmp_path / "corpus"
    (tree / "sub").mkdir(parents=True)
    (tree / ".git").mkdir()
    (tree / "a.md").write_text("# A\n\nalpha", encoding="utf-8")
    (tree / "sub" / "a.md").write_text("# Sub A\n\nbeta", encoding="utf-8")  # same name, other folder
    (tree / "sub" / "empty.txt").write_text("", encoding="utf-8")
    (tree / ".hidden.md").write_text("# H\n\nhidden", encoding="utf-8")
    (tree / ".git" / "config.md").write_text("# G\n\ngit", encoding="utf-8")
    seen = []
    result = coffer.ingest_path(notes, tree, progress=lambda done, total, name: seen.append((done, total)))
    assert (result.created, result.rejected) == (2, 1)
    assert seen[-1] == (3, 3)
    rejected = [i for i in result.items if i.status == "rejected"]
    assert rejected[0].code == "empty"
    sources = sorted(d.source_path for d in coffer.list_documents(notes).documents)
    assert sources == [str(tree / "a.md"), str(tree / "sub" / "a.md")]
    again = coffer.ingest_path(notes, tree)
    assert again.unchanged == 2
    (tree / "a.md").write_text("# A\n\nalpha changed", encoding="utf-8")
    assert coffer.ingest_path(notes, tree).rejected == 2  # changed: duplicate without replace (+ empty)
    assert coffer.ingest_path(notes, tree, replace=True).updated == 1


# Both ways a folder comes in write one file's files while the file before is indexed.
FOLDER_INGESTS = ["ingest_path", "follow_folder"]


@pytest.mark.parametrize("how", FOLDER_INGESTS)
def test_another_writer_gets_its_turn_during_a_folder_ingest(
    coffer: Coffer, notes: str, tmp_path: Path, how: str
) -> None:
    # A folder ingest keeps the knowledge base's write lock from one file to the next, but gives
    # it up after a short turn: a writer that comes meanwhile does not wait for the whole folder.
    tree = tmp_path / "corpus"
    tree.mkdir()
    files = 40
    for i in range(files):
        (tree / f"note-{i:02d}.md").write_text(f"# Note {i}\n\nbody {i}", encoding="utf-8")
    other: dict[str, object] = {}

    def add_another() -> None:
        other["result"] = coffer.add_document(notes, "other.md", "# Other\n\nwritten meanwhile")
        other["at"] = ingested

    writer = threading.Thread(target=add_another)
    ingested = 0

    def progress(done: int, total: int, name: str) -> None:
        nonlocal ingested
        ingested = done
        if done == 1:
            writer.start()
        time.sleep(0.02)  # the folder takes ~4 turns of the lock

    result = getattr(coffer, how)(notes, tree, progress=progress)
    writer.join(timeout=60)
    assert result.created == files
    assert other["result"].status == "created"  # type: ignore[attr-defined]
    assert other["at"] < files - 5, "the other writer waited for the whole folder"
    assert coffer.list_documents(notes).total == files + 1


def _notes_folder(root: Path, files: int) -> Path:
    root.mkdir()
    for i in range(files):
        (root / f"note-{i:02d}.md").write_text(f"# Note {i}\n\nbody {i}", encoding="utf-8")
    return root


def _documents_on_disk(coffer: Coffer, kb: str) -> set[str]:
    return {file.stem for file in coffer.open_kb(kb)[0].docs.glob("*.md")}


@pytest.mark.parametrize("how", FOLDER_INGESTS)
def test_a_folder_ingest_gives_up_the_lock_only_with_every_written_document_indexed(
    coffer: Coffer, notes: str, tmp_path: Path, how: str
) -> None:
    # One file's writes overlap the indexing of the file before it. Whoever takes the lock between
    # two turns of the folder's lease must find no document file without its rows: none written
    # outside the lock, none left unindexed when it was given up.
    files = 40
    tree = _notes_folder(tmp_path / "corpus", files)
    paths, _ = coffer.open_kb(notes)
    looks: list[tuple[set[str], set[str]]] = []
    ingesting, ingested = threading.Event(), threading.Event()

    def look_between_turns() -> None:
        ingesting.wait(60)
        while not ingested.is_set():
            with coffer.writing(paths):
                looks.append((_documents_on_disk(coffer, notes), set(coffer.index.doc_stamps(notes))))
            time.sleep(0.005)

    def progress(done: int, total: int, name: str) -> None:
        ingesting.set()
        time.sleep(0.02)  # the folder takes several turns of the lock

    watcher = threading.Thread(target=look_between_turns)
    watcher.start()
    try:
        result = getattr(coffer, how)(notes, tree, progress=progress)
    finally:
        ingested.set()
        watcher.join(timeout=60)
    assert result.created == files
    assert [Path(item.path).name for item in result.items] == sorted(p.name for p in tree.iterdir())
    between = [(on_disk, rows) for on_disk, rows in looks if 0 < len(on_disk) < files]
    assert between, "the lock was never taken between two turns of the ingest"
    assert all(on_disk == rows for on_disk, rows in between)


@pytest.mark.parametrize("how", FOLDER_INGESTS)
def test_a_folder_ingest_stopped_by_its_caller_leaves_no_written_document_unindexed(
    coffer: Coffer, notes: str, tmp_path: Path, how: str
) -> None:
    tree = _notes_folder(tmp_path / "corpus", 12)

    def progress(done: int, total: int, name: str) -> None:
        if done >= 5:
            raise KeyboardInterrupt  # as a cancelled MCP call stops in its progress report

    with pytest.raises(KeyboardInterrupt):
        getattr(coffer, how)(notes, tree, progress=progress)
    on_disk = _documents_on_disk(coffer, notes)
    assert 5 <= len(on_disk) < 12
    assert set(coffer.index.doc_stamps(notes)) == on_disk  # read before any reconcile could index them


def test_a_folder_of_many_kinds_reports_each_file_in_order(coffer: Coffer, notes: str, tmp_path: Path) -> None:
    # Text files go through the write-behind under the lease; a PDF is converted without the
    # lock, on its own; a rejected file and an unchanged one write nothing. The report keeps the
    # folder's order either way.
    tree = tmp_path / "mixed"
    tree.mkdir()
    (tree / "a.md").write_text("# A\n\nfirst note", encoding="utf-8")
    (tree / "b.pdf").write_bytes((FIXTURES / "sample.pdf").read_bytes())
    (tree / "c.md").write_text("# C\n\nthird note", encoding="utf-8")
    (tree / "d.md").write_bytes(b"")
    (tree / "e.md").write_text("# E\n\nfifth note", encoding="utf-8")
    coffer.ingest_path(notes, tree / "c.md")
    result = coffer.ingest_path(notes, tree)
    assert [(Path(i.path).name, i.status) for i in result.items] == [
        ("a.md", "created"),
        ("b.pdf", "created"),
        ("c.md", "unchanged"),
        ("d.md", "rejected"),
        ("e.md", "created"),
    ]
    assert set(coffer.index.doc_stamps(notes)) == _documents_on_disk(coffer, notes)
    assert len(_documents_on_disk(coffer, notes)) == 4
    assert "granite weather station" in coffer.read_document(notes, result.items[1].document_id).markdown.lower()


def test_a_folder_ingest_gives_up_the_lock_before_a_file_slow_to_convert(coffer: Coffer, notes: str) -> None:
    paths, _ = coffer.open_kb(notes)

    def free_for_another_thread() -> bool:
        answer: list[bool] = []

        def take() -> None:
            try:
                with coffer.writing(paths, timeout=0):
                    answer.append(True)
            except StoreError:
                answer.append(False)

        taker = threading.Thread(target=take)
        taker.start()
        taker.join(timeout=30)
        return answer == [True]

    with coffer.locks.leased(paths) as renew:
        renew(True)  # a Markdown file: the lock is kept for the next one
        assert not free_for_another_thread()
        renew(True)
        assert not free_for_another_thread()
        renew(False)  # a PDF: converted without holding the lock
        assert free_for_another_thread()
    assert free_for_another_thread()


def test_the_chunk_count_of_a_write_is_the_one_the_index_holds(coffer: Coffer, notes: str) -> None:
    body = "# Long\n\n" + "\n\n".join(f"Paragraph {i} " + "word " * 60 for i in range(12))
    created = coffer.add_document(notes, "long.md", body)
    assert created.chunk_count == coffer.index.chunk_count(doc_id=created.document_id) > 1
    again = coffer.add_document(notes, "long.md", body + "\n", replace=True)  # same Markdown: chunks kept
    assert (again.status, again.chunk_count) == ("updated", created.chunk_count)
    shorter = coffer.edit_document(notes, created.document_id, "# Long\n\nnow one paragraph")
    assert shorter.chunk_count == coffer.index.chunk_count(doc_id=created.document_id) == 1
    retagged = coffer.edit_document(notes, created.document_id, tags=["kept"])  # chunks kept
    assert (retagged.chunk_count, retagged.tags) == (1, ["kept"])
    events = [e.event for e in coffer.index.audit_events(notes)]
    assert events.count("KB_DOCUMENT_UPDATED") == 3


FIXTURE_PHRASES = {
    "sample.md": "heron protocol handshake",
    "sample_zh.md": "近邻搜索",
    "sample.txt": "marmalade lighthouse inventory",
    "sample.csv": "Obsidian Kettle",
    "sample.py": "gather_moonstones",
    "sample.html": "tidal orchard",
    "sample.json": "walrus cipher",
    "sample.xml": "Juniper Atlas",
    "sample.ipynb": "Pelican Sums",
    "sample.docx": "bramble yield forecast",
    "sample.xlsx": "saffron ledger",
    "sample.pptx": "Velvet Compass Roadmap",
    "sample.pdf": "granite weather station",
    "sample.epub": "amber tundra chronicle",
}


@pytest.mark.parametrize(("name", "phrase"), sorted(FIXTURE_PHRASES.items()))
def test_every_fixture_format_ingests_to_searchable_markdown(
    coffer: Coffer, notes: str, name: str, phrase: str
) -> None:
    result = coffer.ingest_path(notes, FIXTURES / name)
    [item] = result.items
    assert item.status == "created", item
    [passage, *_] = coffer.search(notes, phrase).passages
    assert passage.document_id == item.document_id
    markdown = coffer.read_document(notes, item.document_id).markdown
    assert phrase.lower() in " ".join(markdown.lower().split())


def test_text_with_lone_surrogates_is_stored_with_replacement_characters(coffer: Coffer, notes: str) -> None:
    doc = coffer.add_document(notes, "s.md", "# T\n\nbad \ud800 surrogate")
    assert coffer.read_document(notes, doc.document_id).markdown == "# T\n\nbad \ufffd surrogate"


def test_a_note_dropped_into_docs_keeps_its_own_block_as_an_ingested_one_does(
    coffer: Coffer, notes: str, home: Path
) -> None:
    adopted = adopt(coffer, home, notes, "dropped.md", NOTE)
    read = coffer.read_document(notes, adopted)
    assert (read.title, read.metadata["id"]) == ("Mine", adopted)
    assert read.metadata["source_frontmatter"]["aliases"] == ["x"]
