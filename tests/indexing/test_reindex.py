"""Files are truth: reconcile-on-read and rebuilding the index from the files."""

from __future__ import annotations

import os
import random
import shutil
import sqlite3
import threading
import time
from pathlib import Path

import psycopg
import pytest

from coffer_mcp import Coffer, load_settings
from coffer_mcp.index import postgres as postgres_index
from coffer_mcp.services.scans import ScanLog
from coffer_mcp.settings import Settings
from coffer_mcp.store import parse_document
from tests.fakes import HashEmbedder

DOCS = {
    "guide.md": (
        "# Install guide\n\nRun the installer, then configure the proxy settings.\n\n"
        "## Upgrade\n\nStop the service first."
    ),
    "faq.md": "# FAQ\n\nThe proxy needs a restart after configuration changes.",
    "zh.md": "# 说明\n\n近邻搜索和向量检索的区别在于索引结构。",
}
QUERIES = ["proxy configuration", "upgrade service", "近邻搜索", "向量", "restart"]


def fill(coffer: Coffer, kb: str = "notes") -> dict[str, str]:
    return {name: coffer.add_document(kb, name, text).document_id for name, text in DOCS.items()}


def snapshot(coffer: Coffer, kb: str = "notes") -> list:
    """Everything a user can observe through search, for comparing index states."""
    return [
        [(p.document_id, p.position, p.text, p.heading_path, p.score) for p in coffer.search(kb, q).passages]
        for q in QUERIES
    ]


@pytest.mark.sqlite_only  # deletes coffer.db
def test_dropping_the_database_and_reindexing_gives_identical_results(coffer: Coffer, notes: str, home: Path) -> None:
    ids = fill(coffer)
    coffer.edit_document(notes, ids["faq.md"], "# FAQ\n\nThe proxy needs a restart after edits.")
    before = snapshot(coffer)
    rows_before = [
        tuple(r)
        for r in coffer.index.conn.execute(
            "SELECT id, title, original_filename, source_mode, created_at, updated_at, content_sha256, source_sha256 "
            "FROM documents ORDER BY id"
        )
    ]
    coffer.close()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{home / 'coffer.db'}{suffix}").unlink(missing_ok=True)

    with Coffer(load_settings(home=home)) as fresh:
        [result] = fresh.reindex_all()
        assert (result.kb, result.documents) == ("notes", 3)
        assert fresh.describe_kb("notes").description == "test notes"
        assert snapshot(fresh) == before
        rows_after = [
            tuple(r)
            for r in fresh.index.conn.execute(
                "SELECT id, title, original_filename, source_mode, created_at, updated_at, content_sha256, "
                "source_sha256 FROM documents ORDER BY id"
            )
        ]
    assert rows_after == rows_before


@pytest.mark.sqlite_only  # deletes coffer.db
def test_a_read_after_deleting_the_database_rebuilds_without_an_explicit_reindex(
    coffer: Coffer, notes: str, home: Path
) -> None:
    fill(coffer)
    before = snapshot(coffer)
    coffer.close()
    (home / "coffer.db").unlink()
    with Coffer(load_settings(home=home)) as fresh:
        assert snapshot(fresh) == before


def test_a_file_added_by_hand_is_adopted_with_an_id(coffer: Coffer, notes: str, home: Path) -> None:
    docs = home / "knowledge" / "notes" / "docs"
    (docs / "handmade.md").write_text("# Handmade\n\nWritten in an editor, never uploaded.", encoding="utf-8")
    [passage] = coffer.search(notes, "editor uploaded").passages
    assert passage.title == "Handmade"
    assert not (docs / "handmade.md").exists()
    meta, body = parse_document((docs / f"{passage.document_id}.md").read_text(encoding="utf-8"))
    assert meta["original_filename"] == "handmade.md"
    assert body.startswith("# Handmade")
    assert (home / "knowledge" / "notes" / "raw" / f"{passage.document_id}.md").exists()


def test_a_file_deleted_by_hand_leaves_search_and_listing(coffer: Coffer, notes: str, home: Path) -> None:
    ids = fill(coffer)
    (home / "knowledge" / "notes" / "docs" / f"{ids['faq.md']}.md").unlink()
    assert ids["faq.md"] not in {p.document_id for p in coffer.search(notes, "restart").passages}
    assert coffer.list_documents(notes).total == 2
    assert not list((home / "knowledge" / "notes" / "raw").glob(f"{ids['faq.md']}.*"))


def test_a_file_edited_by_hand_becomes_edited_with_the_file_time(coffer: Coffer, notes: str, home: Path) -> None:
    ids = fill(coffer)
    path = home / "knowledge" / "notes" / "docs" / f"{ids['faq.md']}.md"
    path.write_text(path.read_text(encoding="utf-8").replace("restart", "reboot"), encoding="utf-8")
    os.utime(path, ns=(1_700_000_000_000_000_000, 1_700_000_000_000_000_000))
    [info] = [d for d in coffer.list_documents(notes).documents if d.document_id == ids["faq.md"]]
    assert info.source_mode == "edited"
    assert info.updated_at.startswith("2023-11-14T22:13:20")
    assert coffer.search(notes, "reboot").passages


def test_a_file_whose_frontmatter_was_removed_is_still_indexed(coffer: Coffer, notes: str, home: Path) -> None:
    ids = fill(coffer)
    path = home / "knowledge" / "notes" / "docs" / f"{ids['guide.md']}.md"
    path.write_text("# Rewritten\n\nEntirely new words about kayaks.", encoding="utf-8")
    [passage] = coffer.search(notes, "kayaks").passages
    assert (passage.document_id, passage.title) == (ids["guide.md"], "Rewritten")


def test_an_unchanged_corpus_is_not_rewritten_by_reindex(coffer: Coffer, notes: str) -> None:
    fill(coffer)
    result = coffer.reindex(notes, force=False)
    assert (result.indexed, result.removed, result.adopted, result.documents) == (0, 0, 0, 3)


def test_a_rebuild_commits_its_documents_in_batches_and_reports_only_what_it_committed(
    coffer: Coffer, notes: str, tmp_path: Path
) -> None:
    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(150):  # more than two batches of a rebuild
        (folder / f"note-{i:03d}.md").write_text(f"# Note {i}\n\nA line about tides, number {i}.\n", encoding="utf-8")
    coffer.ingest_path(notes, folder)
    steps: list[int] = []

    result = coffer.reindex(notes, progress=lambda done, total, message: steps.append(done))

    assert (result.indexed, result.documents) == (150, 150)
    assert steps == sorted(set(steps))  # forward only
    assert steps[-1] == 150
    assert len(steps) < 75  # a report per committed batch, not per document
    assert coffer.list_documents(notes, limit=200).total == 150
    assert coffer.search(notes, "tides").passages
    assert coffer.verify(notes).problems == []


def test_stray_temp_files_from_a_crash_are_removed_by_reindex(coffer: Coffer, notes: str, home: Path) -> None:
    fill(coffer)
    stray = home / "knowledge" / "notes" / "docs" / ".X.md.tmp-abc123"
    stray.write_text("half", encoding="utf-8")
    coffer.reindex(notes)
    assert not stray.exists()
    assert coffer.list_documents(notes).total == 3


def test_changing_chunk_parameters_rechunks_every_document(coffer: Coffer, notes: str) -> None:
    long_text = "# Long\n\n" + " ".join(f"Sentence number {i} talks about topic {i}." for i in range(60))
    doc = coffer.add_document(notes, "long.md", long_text)
    coarse = doc.chunk_count
    coffer.update_kb(notes, chunk_size=128, chunk_overlap=16)
    fine = coffer.index.chunk_count(doc_id=doc.document_id)
    assert fine > coarse
    assert coffer.describe_kb(notes).chunk_size == 128
    assert coffer.search(notes, "topic 42").passages


def test_a_knowledge_base_folder_removed_by_hand_disappears(coffer: Coffer, notes: str, home: Path) -> None:
    import shutil

    fill(coffer)
    shutil.rmtree(home / "knowledge" / "notes")
    assert coffer.list_kbs() == []
    assert coffer.index.document_counts() == {}
    assert coffer.index.chunk_count(kb="notes") == 0


def test_a_newer_schema_is_refused_with_a_hint(home: Path) -> None:
    home.mkdir(parents=True)
    with sqlite3.connect(home / "coffer.db") as conn:
        conn.execute("PRAGMA user_version = 999")
    from coffer_mcp.errors import StoreError

    with Coffer(load_settings(home=home)) as coffer, pytest.raises(StoreError) as caught:
        coffer.list_kbs()
    assert "reindex" in caught.value.hint


@pytest.mark.sqlite_only  # damages FTS5's own table (the conformance suite damages PostgreSQL's postings)
def test_verify_finds_no_drift_in_a_healthy_store_and_names_each_disagreement(
    coffer: Coffer, notes: str, home: Path
) -> None:
    ids = fill(coffer)
    assert coffer.verify(notes).ok
    docs = home / "knowledge" / "notes" / "docs"
    (docs / f"{ids['faq.md']}.md").write_text("# FAQ\n\nchanged behind the index", encoding="utf-8")
    (home / "knowledge" / "notes" / "raw" / "01M8NP4MZTN0XVCZWDXQ46XW1Z.md").write_text("orphan", encoding="utf-8")
    table = coffer.index.conn.execute("SELECT 'fts_' || id FROM keyword_tables WHERE kb = ?", (notes,)).fetchone()[0]
    coffer.index.conn.execute(f"INSERT INTO {table} (rowid, body) VALUES (999999, 'ghost entry')")
    report = coffer.verify(notes)
    assert not report.ok
    text = "\n".join(report.problems)
    assert ids["faq.md"] not in text  # a file changed by hand is taken up first, as by any read
    assert coffer.search(notes, "behind the index").passages[0].document_id == ids["faq.md"]
    assert "original without a document" in text
    assert "1 entry without a chunk" in text
    coffer.reindex(notes)
    assert coffer.verify(notes).ok


def test_verify_names_two_documents_of_one_source_which_no_reindex_can_choose_between(
    coffer: Coffer, notes: str, home: Path, tmp_path: Path
) -> None:
    # What a server killed between writing a followed file's document and indexing it leaves, once
    # another server has ingested the same file: a second document of that file, read back.
    source = tmp_path / "x.md"
    source.write_text("# X\n\nthe one source", encoding="utf-8")
    first = coffer.ingest_path(notes, source).items[0].document_id
    assert first is not None
    docs = home / "knowledge" / "notes" / "docs"
    twin = "01M8NP4MZTN0XVCZWDXQ46XW1Z"
    (docs / f"{twin}.md").write_text(
        (docs / f"{first}.md").read_text(encoding="utf-8").replace(first, twin), encoding="utf-8"
    )
    coffer.reindex(notes)
    report = coffer.verify(notes)
    both = f"{min(first, twin)}, {max(first, twin)}"
    said = f"{both}: 2 documents ingested from {source}; keep one and delete the others (coffer kb rm)"
    assert report.problems == [said]
    coffer.delete_document(notes, twin)
    assert coffer.verify(notes).ok


def test_a_body_edited_by_hand_reads_back_as_edited_with_the_files_time(coffer: Coffer, notes: str) -> None:
    # read_document's metadata was the frontmatter as written ("converted", the old updated_at)
    # while list_documents said "edited": the viewer's document page and list disagreed.
    doc = coffer.add_document(notes, "plan.md", "# Plan\n\nship it")
    path = coffer.paths.kb(notes).doc(doc.document_id)
    path.write_text(path.read_text(encoding="utf-8").replace("ship it", "ship it today"), encoding="utf-8")
    [listed] = coffer.list_documents(notes).documents
    metadata = coffer.read_document(notes, doc.document_id).metadata
    assert metadata is not None
    assert listed.source_mode == metadata["source_mode"] == "edited"
    assert metadata["updated_at"] == listed.updated_at


def test_a_body_deleted_by_hand_keeps_the_documents_metadata_and_verify_clean(coffer: Coffer, notes: str) -> None:
    # An editor that writes no final newline leaves the file ending in the frontmatter's "---":
    # that block was read as body text (title, tags and dates lost), and verify then reported
    # "no chunks" after every reindex.
    doc = coffer.add_document(notes, "plan.md", "# Plan\n\nship it", tags=["work"])
    created = coffer.read_document(notes, doc.document_id).metadata["created_at"]
    path = coffer.paths.kb(notes).doc(doc.document_id)
    text = path.read_text(encoding="utf-8")
    path.write_text(text[: text.index("\n---\n") + len("\n---")], encoding="utf-8")
    read = coffer.read_document(notes, doc.document_id)
    assert read.markdown == ""
    assert read.title == "Plan"
    assert read.metadata is not None
    assert read.metadata["tags"] == ["work"]
    assert read.metadata["created_at"] == created
    assert coffer.list_documents(notes, filters={"tags": ["work"]}).total == 1
    assert coffer.search(notes, "ship", 5).passages == []
    coffer.reindex(notes)
    assert coffer.verify(notes).ok


def test_a_slow_full_check_is_spaced_out_so_that_it_takes_a_small_share_of_the_time(home: Path) -> None:
    settings = load_settings(home=home, reconcile_interval=1, reconcile_budget_ms=5)
    scans, two_seconds_ago = ScanLog(), time.monotonic() - 2
    scans.record("notes", "stamp", two_seconds_ago, 0.2)  # 200 ms: next one due 4 s after it started
    assert scans.fresh("notes", "stamp", settings)
    assert not scans.fresh("notes", "another stamp", settings)  # the folder changed: check at once
    scans.record("notes", "stamp", two_seconds_ago, 0.02)  # 20 ms: the 1 s interval applies
    assert not scans.fresh("notes", "stamp", settings)
    scans.record("notes", "stamp", time.monotonic(), 0.001)  # within the budget: every read checks
    assert not scans.fresh("notes", "stamp", settings)
    scans.record("notes", "stamp", time.monotonic(), 0.2)
    assert not scans.fresh("notes", "stamp", load_settings(home=home, reconcile_interval=0))


def test_a_big_knowledge_base_is_checked_in_the_background_and_no_read_waits_for_it(home: Path) -> None:
    # reconcile_budget_ms=0: every knowledge base counts as big. A writer holds the lock while a
    # file is edited by hand: a check on the read path would wait for it (up to 60 s).
    settings = load_settings(home=home, reconcile_budget_ms=0, reconcile_interval=0.05, reconcile_lock_wait=60)
    with Coffer(settings) as coffer:
        coffer.create_kb("notes")
        ids = fill(coffer)
        coffer.search("notes", "proxy")  # the first check runs on the read path and counts as big
        path = home / "knowledge" / "notes" / "docs" / f"{ids['faq.md']}.md"
        path.write_text(path.read_text(encoding="utf-8").replace("restart", "reboot"), encoding="utf-8")
        paths, _ = coffer.open_kb("notes")
        holding, release, released_by_reader = threading.Event(), threading.Event(), []

        def writer() -> None:
            with coffer.writing(paths):
                holding.set()
                released_by_reader.append(release.wait(30))

        thread = threading.Thread(target=writer)
        thread.start()
        assert holding.wait(30)
        time.sleep(0.1)  # past reconcile_interval: a check is due
        coffer.search("notes", "reboot")  # asks for the check, is served the index as it is
        release.set()
        thread.join()
        assert released_by_reader == [True], "the read waited for the writer"
        assert coffer.freshness.checks_done(30)
        assert [p.document_id for p in coffer.search("notes", "reboot").passages] == [ids["faq.md"]]
    assert not [t for t in threading.enumerate() if t.name == "coffer-file-checks"], "close() stops the checks"


def test_a_big_knowledge_base_still_sees_files_added_or_saved_by_rename_at_once(home: Path) -> None:
    # reconcile_budget_ms=0 makes every knowledge base count as big: per-file checks are spaced
    # reconcile_interval apart, but any change to the docs/ folder itself triggers one at once.
    with Coffer(load_settings(home=home, reconcile_budget_ms=0, reconcile_interval=3600)) as coffer:
        coffer.create_kb("notes")
        ids = fill(coffer)
        coffer.search("notes", "proxy")  # a full check, now recorded as expensive
        path = home / "knowledge" / "notes" / "docs" / f"{ids['faq.md']}.md"
        path.write_text(path.read_text(encoding="utf-8").replace("restart", "reboot"), encoding="utf-8")
        assert not coffer.search("notes", "reboot").passages  # edited in place: seen within the interval
        replacement = path.with_name(".editor-swap")
        replacement.write_text(path.read_text(encoding="utf-8").replace("reboot", "powercycle"), encoding="utf-8")
        os.replace(replacement, path)  # how most editors save
        assert coffer.search("notes", "powercycle").passages
        (path.parent / "dropped.md").write_text("# Dropped\n\nbrand new words", encoding="utf-8")
        assert coffer.search("notes", "brand new words").passages


# -- after a bulk write, PostgreSQL's tables are vacuumed --------------------------------------------


def vacuums(coffer: Coffer) -> dict[str, tuple[int, int]]:
    """(VACUUMs, ANALYZEs) run so far on each keyword and vector table by a session (autovacuum's not
    counted)."""
    rows = coffer.index.conn.execute(  # type: ignore[attr-defined]
        "SELECT relname, vacuum_count AS v, analyze_count AS a "
        "FROM pg_stat_user_tables WHERE relname IN ('postings', 'chunks') OR relname LIKE 'vec%%'"
    ).fetchall()
    return {row["relname"]: (row["v"], row["a"]) for row in rows}


def thirty_notes(folder: Path) -> Path:
    """A folder of 30 one-chunk notes: enough writes for a vacuum once ``SETTLE_MIN_CHUNKS`` is 20."""
    folder.mkdir()
    for n in range(30):
        (folder / f"note-{n:02}.md").write_text(f"# Note {n}\n\nCells, membranes and proteins, take {n}.\n")
    return folder


def settling_after_20_chunks(tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """PostgreSQL settings under which writing 20 chunks earns a vacuum (and maybe a pack)."""
    monkeypatch.setattr(postgres_index, "SETTLE_MIN_CHUNKS", 20)
    return load_settings(home=tmp_path / "home", index_backend="postgres", database_url=postgres_url)


def settling_on_postgres(tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Settings]:
    """Thirty notes to ingest and PostgreSQL settings under which writing 20 chunks earns a vacuum."""
    return thirty_notes(tmp_path / "folder"), settling_after_20_chunks(tmp_path, postgres_url, monkeypatch)


def test_a_folder_ingest_and_a_reindex_vacuum_postgres_tables_when_they_wrote_enough(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Keyword search reads postings by index-only scans, slow until a vacuum marks the pages.
    folder, settings = settling_on_postgres(tmp_path, postgres_url, monkeypatch)
    with Coffer(settings) as coffer:
        coffer.create_kb("notes")
        coffer.ingest_path("notes", folder / "note-00.md")  # a chunk: too few to vacuum for
        before = vacuums(coffer)
        coffer.ingest_path("notes", folder)
        after_ingest = vacuums(coffer)
        coffer.add_document("notes", "later.md", "# Later\n\nOne more document.")
        coffer.reindex("notes")
        after_reindex = vacuums(coffer)
    for table in ("postings", "chunks"):
        assert after_ingest[table][0] == before[table][0] + 1, table
        assert after_ingest[table][1] == before[table][1] + 1, table
        assert after_reindex[table][0] == after_ingest[table][0] + 1, table


def test_a_folder_ingest_that_embeds_vacuums_the_postgres_vector_table_too(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Left to autovacuum, the documents an embedding pass marked and its vectors were vacuumed and
    # analyzed during the first searches after it (0.3-1.6 s calls at 100,000 chunks).
    folder, settings = settling_on_postgres(tmp_path, postgres_url, monkeypatch)
    with Coffer(settings, embedder=HashEmbedder()) as coffer:
        coffer.create_kb("notes", vector=True)
        coffer.ingest_path("notes", folder / "note-00.md")  # too few to vacuum for
        before = vacuums(coffer)
        coffer.ingest_path("notes", folder)
        after = vacuums(coffer)
    written = [table for table in after if table.startswith("vec")]
    assert len(written) == 1, after
    assert after[written[0]] == (before[written[0]][0] + 1, before[written[0]][1] + 1)


def postings_index_pages(coffer: Coffer) -> int:
    row = coffer.index.conn.execute(  # type: ignore[attr-defined]
        "SELECT pg_relation_size('postings_pkey') / 8192 AS pages"
    ).fetchone()
    return int(row["pages"])


def loose_on_postgres(tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Settings]:
    """800 one-chunk notes over 24 words, and PostgreSQL settings under which their ingest settles
    and a postings index of 16 pages may be packed."""
    monkeypatch.setattr(postgres_index.postings, "LOOSE_MIN_PAGES", 16)
    rng = random.Random(7)
    words = ["".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(4, 9))) for _ in range(24)]
    folder = tmp_path / "folder"
    folder.mkdir()
    for n in range(800):  # each word in half of them: its postings span pages
        (folder / f"note-{n:04}.md").write_text(f"# Note {n}\n\n{' '.join(rng.sample(words, 12))}.\n")
    return folder, settling_after_20_chunks(tmp_path, postgres_url, monkeypatch)


def test_a_bulk_ingest_leaves_the_postgres_keyword_index_as_compact_as_a_fresh_build(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Inserted in chunk order, each word's postings at the end of its range, the B-tree's pages
    # split half-full and stay so: twice the pages to read from disk for each word a search looks up.
    folder, settings = loose_on_postgres(tmp_path, postgres_url, monkeypatch)
    with Coffer(settings) as coffer:
        coffer.create_kb("notes", chunk_size=4096)
        coffer.add_document("notes", "first.md", "# First\n\nA note before the others.")
        # What a pack killed half-way leaves: an invalid copy of the index, which writes still update.
        conn = coffer.index.conn  # type: ignore[attr-defined]
        last = conn.execute("SELECT max(chunk_id) AS id FROM postings").fetchone()["id"]
        with pytest.raises(psycopg.errors.DivisionByZero):
            conn.execute(f"CREATE INDEX CONCURRENTLY postings_pkey_ccnew ON postings ((1 / (chunk_id - {last})))")
        coffer.ingest_path("notes", folder)
        after_ingest = postings_index_pages(coffer)
        invalid = conn.execute("SELECT indexrelid FROM pg_index WHERE NOT indisvalid").fetchall()
        assert invalid == []
        found = coffer.search("notes", "note", strategy="keyword").passages
        conn.execute("REINDEX INDEX postings_pkey")
        built_afresh = postings_index_pages(coffer)
        assert coffer.search("notes", "note", strategy="keyword").passages == found
        assert coffer.verify("notes").ok
    assert built_afresh >= 50, built_afresh  # enough pages to show how full they are
    assert after_ingest <= built_afresh * 1.1, (after_ingest, built_afresh)


def test_a_bulk_ingest_leaves_the_packing_to_another_server_already_at_it(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder, settings = loose_on_postgres(tmp_path, postgres_url, monkeypatch)
    other = postgres_index.PostgresIndex(postgres_url)
    try:
        with Coffer(settings) as coffer:
            coffer.create_kb("notes", chunk_size=4096)
            with other.lock("index:pack-postings", timeout=1):  # another server is packing
                coffer.ingest_path("notes", folder)  # does not wait for it
            left_loose = postings_index_pages(coffer)
            assert len(coffer.search("notes", "note", strategy="keyword").passages) == 5
            coffer.reindex("notes")  # the next bulk write packs it
            packed = postings_index_pages(coffer)
    finally:
        other.close()
    assert packed * 1.4 < left_loose, (packed, left_loose)


def document_ids(coffer: Coffer, kb: str) -> set[str]:
    return {doc.document_id for doc in coffer.list_documents(kb, limit=100).documents}


def test_a_knowledge_base_folder_copied_by_hand_gets_new_ids_and_the_original_keeps_its_own(
    coffer: Coffer, notes: str, home: Path
) -> None:
    # Both folders held the same ids: whichever was read last took the rows, the other listed
    # no document, verify reported drift that a reindex could not fix, and a search of '*' found
    # one copy only.
    ids = fill(coffer)
    coffer.edit_document(notes, ids["faq.md"], "# FAQ\n\nThe proxy needs a restart after edits.")
    knowledge = home / "knowledge"
    shutil.copytree(knowledge / notes, knowledge / "copy")
    copied = document_ids(coffer, "copy")  # the copy is read first
    for _ in range(2):
        assert [(kb.name, kb.document_count) for kb in coffer.list_kbs()] == [("copy", 3), (notes, 3)]
        assert (document_ids(coffer, notes), document_ids(coffer, "copy")) == (set(ids.values()), copied)
    assert not copied & set(ids.values())
    copy = coffer.paths.kb("copy")
    for doc_id in copied:
        meta, _ = parse_document(copy.doc(doc_id).read_text(encoding="utf-8"))
        assert meta["id"] == doc_id
        assert [raw.stem for raw in copy.raw_files(doc_id)] == [doc_id]
    assert sorted(p.name for p in copy.docs.iterdir()) == sorted(f"{i}.md" for i in copied)
    edited = coffer.search("copy", "restart edits").passages[0]
    assert coffer.read_document("copy", edited.document_id).metadata["source_mode"] == "edited"
    hits = coffer.search("*", "proxy restart", 10).passages
    assert {(hit.kb, hit.document_id) for hit in hits} >= {(notes, ids["faq.md"]), ("copy", edited.document_id)}
    adopted = [e for e in coffer.index.audit_events("copy") if e.event == "KB_DOCUMENT_INGESTED"]
    assert sorted(e.details["copied_from"]["document_id"] for e in adopted) == sorted(ids.values())
    assert {e.document_id for e in adopted} == copied
    for name in (notes, "copy"):
        assert coffer.verify(name).ok
        coffer.reindex(name)
        assert coffer.verify(name).ok
    assert (document_ids(coffer, notes), document_ids(coffer, "copy")) == (set(ids.values()), copied)


def test_a_document_file_copied_into_another_knowledge_base_gets_a_new_id_there(
    coffer: Coffer, notes: str, home: Path
) -> None:
    ids = fill(coffer)
    coffer.create_kb("other")
    source, target = coffer.paths.kb(notes), coffer.paths.kb("other")
    shutil.copy2(source.doc(ids["faq.md"]), target.doc(ids["faq.md"]))
    [copied] = document_ids(coffer, "other")
    assert copied != ids["faq.md"]
    assert document_ids(coffer, notes) == set(ids.values())
    assert not target.doc(ids["faq.md"]).exists()
    assert coffer.read_document("other", copied).title == "FAQ"
    assert {hit.kb for hit in coffer.search("*", "restart").passages} == {notes, "other"}
    assert coffer.verify(notes).ok
    assert coffer.verify("other").ok


def test_a_knowledge_base_folder_moved_by_hand_keeps_its_ids(coffer: Coffer, notes: str, home: Path) -> None:
    ids = fill(coffer)
    knowledge = home / "knowledge"
    os.rename(knowledge / notes, knowledge / "moved")
    assert [(kb.name, kb.document_count) for kb in coffer.list_kbs()] == [("moved", 3)]
    assert document_ids(coffer, "moved") == set(ids.values())
    assert coffer.verify("moved").ok


def test_a_document_file_moved_into_another_knowledge_base_keeps_its_id(coffer: Coffer, notes: str, home: Path) -> None:
    ids = fill(coffer)
    coffer.create_kb("other")
    os.rename(coffer.paths.kb(notes).doc(ids["faq.md"]), coffer.paths.kb("other").doc(ids["faq.md"]))
    assert document_ids(coffer, "other") == {ids["faq.md"]}
    assert document_ids(coffer, notes) == {ids["guide.md"], ids["zh.md"]}
    assert coffer.verify("other").ok


def test_a_document_file_copied_into_another_knowledge_base_while_watched_gets_a_new_id(
    coffer: Coffer, notes: str, home: Path
) -> None:
    # What the watcher of ``coffer serve`` applies: the changed files only, not a full check.
    ids = fill(coffer)
    coffer.create_kb("other")
    copied = coffer.paths.kb("other").doc(ids["faq.md"])
    shutil.copy2(coffer.paths.kb(notes).doc(ids["faq.md"]), copied)
    assert coffer.freshness.reindex_changed("other", [copied]) == 1
    assert coffer.index.get_document(notes, ids["faq.md"]) is not None
    [row] = coffer.index.documents("other")
    assert row.id != ids["faq.md"]
    assert coffer.verify(notes).ok
    assert coffer.verify("other").ok
