"""Knowledge-base lifecycle through the core service."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from coffer_mcp import Coffer
from coffer_mcp.errors import (
    InvalidArgumentError,
    InvalidNameError,
    KnowledgeBaseExistsError,
    KnowledgeBaseNotFoundError,
)


def test_creating_a_knowledge_base_makes_its_folders_and_settings_file(coffer: Coffer, home: Path) -> None:
    details = coffer.create_kb("design-notes", "ADRs and notes", chunk_size=256, chunk_overlap=32)
    root = home / "knowledge" / "design-notes"
    assert (root / "docs").is_dir()
    assert (root / "raw").is_dir()
    saved = yaml.safe_load((root / "kb.yaml").read_text(encoding="utf-8"))
    assert (saved["description"], saved["chunk_size"], saved["chunk_overlap"]) == ("ADRs and notes", 256, 32)
    assert (details.name, details.document_count, details.path) == ("design-notes", 0, str(root))
    assert [kb.name for kb in coffer.list_kbs()] == ["design-notes"]


@pytest.mark.parametrize(
    "name",
    ["", ".hidden", "UPPER", "a/b", "../etc", "a" * 65, "con", "nul.txt", "with space", "trailing.", "é", "a\x00b"],
)
def test_invalid_names_are_refused_and_nothing_is_created(coffer: Coffer, home: Path, name: str) -> None:
    with pytest.raises(InvalidNameError) as caught:
        coffer.create_kb(name)
    assert "a-z" in caught.value.hint or "name" in caught.value.hint
    assert coffer.list_kbs() == []
    assert not any((home / "knowledge").iterdir())


def test_a_duplicate_name_is_refused(coffer: Coffer, notes: str) -> None:
    with pytest.raises(KnowledgeBaseExistsError):
        coffer.create_kb(notes)


def test_bad_chunk_settings_are_refused_with_a_hint(coffer: Coffer, home: Path) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        coffer.create_kb("kb", chunk_size=100, chunk_overlap=60)
    message = "Invalid knowledge base settings: chunk_overlap (60) must be less than half of chunk_size (100)."
    assert caught.value.message == message
    assert caught.value.hint.endswith("chunk_overlap is 0 up to half of chunk_size: below 50 for chunk_size 100.")
    assert not (home / "knowledge" / "kb").exists()


def test_a_new_overlap_alone_is_checked_against_the_current_chunk_size_which_the_hint_names(
    coffer: Coffer, notes: str
) -> None:
    assert coffer.describe_kb(notes).chunk_size == 1024
    with pytest.raises(InvalidArgumentError) as caught:
        coffer.update_kb(notes, chunk_overlap=600)
    assert caught.value.message == (
        "Invalid knowledge base settings: chunk_overlap (600) must be less than half of chunk_size (1024)."
    )
    assert "below 512 for chunk_size 1024" in caught.value.hint


def test_describe_reports_counts_and_disk_usage(coffer: Coffer, notes: str) -> None:
    coffer.add_document(notes, "a.md", "# A\n\n" + "word " * 400)
    details = coffer.describe_kb(notes)
    assert details.document_count == 1
    assert details.chunk_count >= 2
    assert details.disk_bytes > 4000
    assert details.modes == ["grep", "keyword"]
    assert details.documents_degraded == 0


def test_updating_the_description_keeps_the_documents(coffer: Coffer, notes: str) -> None:
    coffer.add_document(notes, "a.md", "# A\n\ntext")
    updated = coffer.update_kb(notes, description="new words")
    assert (updated.description, updated.document_count) == ("new words", 1)


def test_an_update_that_changes_nothing_is_refused_or_leaves_the_knowledge_base_as_it_was(
    coffer: Coffer, notes: str
) -> None:
    # Both bumped updated_at and wrote an audit event, while edit_document refuses "Nothing to change".
    before = coffer.update_kb(notes, description="words")
    events = len(coffer.index.audit_events(notes))
    with pytest.raises(InvalidArgumentError) as caught:
        coffer.update_kb(notes)
    assert caught.value.message == "Nothing to change."
    same = coffer.update_kb(notes, description="words", vector=False)
    assert same.updated_at == before.updated_at
    assert len(coffer.index.audit_events(notes)) == events


def test_a_small_chunk_size_alone_gets_an_overlap_that_fits(coffer: Coffer) -> None:
    small = coffer.create_kb("small", chunk_size=200)  # the default overlap, 128, is not below 100

    assert (small.chunk_size, small.chunk_overlap) == (200, 128 * 200 // 1024)
    assert coffer.create_kb("large", chunk_size=2048).chunk_overlap == 128


def test_a_smaller_chunk_size_alone_shrinks_an_overlap_that_would_no_longer_fit(coffer: Coffer) -> None:
    coffer.create_kb("kb", chunk_size=1024, chunk_overlap=128)
    coffer.add_document("kb", "a.md", "# A\n\n" + "word " * 400)

    assert (coffer.update_kb("kb", chunk_size=512).chunk_overlap, coffer.describe_kb("kb").chunk_size) == (128, 512)
    smaller = coffer.update_kb("kb", chunk_size=256)  # 128 is not below half of 256

    assert (smaller.chunk_size, smaller.chunk_overlap) == (256, 64)
    assert smaller.chunk_count >= 8


@pytest.mark.sqlite_only  # counts the rows of every SQLite table
def test_deleting_a_knowledge_base_leaves_no_file_and_no_index_row(coffer: Coffer, notes: str, home: Path) -> None:
    coffer.create_kb("keep")
    coffer.add_document("keep", "k.md", "# Keep\n\nkept words")
    for i in range(3):
        coffer.add_document(notes, f"d{i}.md", f"# D{i}\n\ncontent {i}")
    coffer.delete_kb(notes)
    assert sorted(p.name for p in (home / "knowledge").iterdir()) == ["keep"]
    assert not (home / "locks" / "notes.lock").exists()
    for table, column in (("documents", "kb"), ("chunks", "kb"), ("knowledge_bases", "name")):
        assert (
            coffer.index.conn.execute(f"SELECT count(*) FROM {table} WHERE {column} = ?", (notes,)).fetchone()[0] == 0
        )
    tables = coffer.index.conn.execute("SELECT kb, id FROM keyword_tables").fetchall()
    assert [row[0] for row in tables] == ["keep"]  # the full-text table of notes is dropped with it
    fts = coffer.index.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name GLOB 'fts_*'")
    assert {row[0].split("_")[1] for row in fts} == {str(tables[0][1])}
    assert coffer.search("keep", "kept").passages
    with pytest.raises(KnowledgeBaseNotFoundError):
        coffer.describe_kb(notes)


def test_an_unknown_knowledge_base_hint_lists_the_existing_ones(coffer: Coffer, notes: str) -> None:
    with pytest.raises(KnowledgeBaseNotFoundError) as caught:
        coffer.search("nope", "x")
    assert caught.value.code == "unknown_kb"
    assert "notes" in caught.value.hint


def test_a_folder_created_by_hand_becomes_a_knowledge_base(coffer: Coffer, home: Path) -> None:
    docs = home / "knowledge" / "handmade" / "docs"
    docs.mkdir(parents=True)
    (docs / "readme.md").write_text("# Readme\n\nHello from a hand-made folder.", encoding="utf-8")
    kbs = coffer.list_kbs()
    assert [(kb.name, kb.document_count) for kb in kbs] == [("handmade", 1)]
    assert (home / "knowledge" / "handmade" / "kb.yaml").exists()


@pytest.mark.parametrize(
    "kb_yaml", [None, "description: Notes made by hand\n"], ids=["without kb.yaml", "kb.yaml naming a description"]
)
def test_a_folder_made_by_hand_gets_the_documented_chunk_size_and_overlap(
    coffer: Coffer, home: Path, kb_yaml: str | None
) -> None:
    root = home / "knowledge" / "handmade"
    (root / "docs").mkdir(parents=True)
    if kb_yaml is not None:
        (root / "kb.yaml").write_text(kb_yaml, encoding="utf-8")
    sentence = "Hand-made folders are chunked like the ones kb create makes. "
    text = "# Long\n\n" + "\n\n".join(sentence * 4 for _ in range(12))  # 12 paragraphs of 244 characters
    (root / "docs" / "long.md").write_text(text, encoding="utf-8")
    details = coffer.describe_kb("handmade")
    assert (details.chunk_size, details.chunk_overlap) == (1024, 128)  # docs/configuration.md's defaults
    assert details.description == ("Notes made by hand" if kb_yaml else "")
    assert details.chunk_count == 4  # 1,024-character chunks (512-character ones made 11)
