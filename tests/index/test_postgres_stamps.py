"""Reconcile-on-read's stamps on PostgreSQL: read once while nothing changes, never stale.

Two ``PostgresIndex`` objects on one database are two servers (each has its own cache); rows
written with plain SQL are what an older Coffer, or a hand-made fix, writes. ``stamps.full_reads``
counts the times a knowledge base's rows were read from the database.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from coffer_mcp import Coffer, load_settings
from coffer_mcp.index.port import DocumentRow
from coffer_mcp.index.postgres import PostgresIndex
from coffer_mcp.models import Chunk
from coffer_mcp.store.kbconfig import KbConfig
from tests.index.test_port import doc as port_doc

PARAMS = "512:64"


@pytest.fixture
def servers(postgres_url: str) -> Iterator[tuple[PostgresIndex, PostgresIndex]]:
    first, second = PostgresIndex(postgres_url), PostgresIndex(postgres_url)
    yield first, second
    first.close()
    second.close()


def kb(index: PostgresIndex, name: str) -> None:
    config = KbConfig(description=name, created_at="2025-01-01T00:00:00Z", updated_at="2025-01-01T00:00:00Z")
    with index.transaction():
        index.upsert_kb(name, config, f"stamp-{name}")


def doc(doc_id: str, kb_name: str = "notes", stamp: str | None = None, params: str = PARAMS) -> DocumentRow:
    return port_doc(doc_id, kb_name, file_stamp=stamp or f"stamp-{doc_id}", chunk_params=params)


def put(index: PostgresIndex, *rows: DocumentRow) -> None:
    with index.transaction():
        for row in rows:
            index.upsert_document(row)
            index.replace_chunks(row.kb, row.id, [Chunk(0, f"text of {row.id}")])


def delete(index: PostgresIndex, *doc_ids: str) -> None:
    with index.transaction():
        for doc_id in doc_ids:
            index.delete_document(doc_id)


def stamps(*pairs: tuple[str, str]) -> dict[str, tuple[str, str]]:
    return {doc_id: (stamp, PARAMS) for doc_id, stamp in pairs}


# -- the cache is used -------------------------------------------------------------------------


def test_an_unchanged_knowledge_base_has_its_rows_read_once(servers: tuple[PostgresIndex, PostgresIndex]) -> None:
    index, _ = servers
    kb(index, "notes")
    put(index, doc("doc-01"), doc("doc-02"))
    assert index.doc_stamps("notes") == stamps(("doc-01", "stamp-doc-01"), ("doc-02", "stamp-doc-02"))
    reads = index.stamps.full_reads
    for _ in range(3):
        assert index.doc_stamps("notes") == stamps(("doc-01", "stamp-doc-01"), ("doc-02", "stamp-doc-02"))
    assert index.stamps.full_reads == reads


def test_what_the_drift_check_does_not_read_does_not_invalidate_the_stamps(
    servers: tuple[PostgresIndex, PostgresIndex],
) -> None:
    index, other = servers
    kb(index, "notes")
    kb(index, "other")
    put(index, doc("doc-01"))
    index.doc_stamps("notes")
    reads = index.stamps.full_reads
    with other.transaction():  # embedding bookkeeping, chunks, another knowledge base's documents
        other.set_embedding("doc-01", pending=True, model="m")
        other.replace_chunks("notes", "doc-01", [Chunk(0, "new text, same file stamp")])
    put(other, doc("doc-09", "other"))
    assert index.doc_stamps("notes") == stamps(("doc-01", "stamp-doc-01"))
    assert index.stamps.full_reads == reads


def test_a_caller_changing_the_stamps_it_got_does_not_change_the_next_answer(
    servers: tuple[PostgresIndex, PostgresIndex],
) -> None:
    index, _ = servers
    kb(index, "notes")
    put(index, doc("doc-01"))
    index.doc_stamps("notes").clear()
    assert index.doc_stamps("notes") == stamps(("doc-01", "stamp-doc-01"))


# -- and never stale ---------------------------------------------------------------------------


def test_every_write_through_another_server_is_seen_by_the_next_read(
    servers: tuple[PostgresIndex, PostgresIndex],
) -> None:
    first, second = servers
    kb(first, "notes")
    put(first, doc("doc-01"), doc("doc-02"))
    assert second.doc_stamps("notes") == stamps(("doc-01", "stamp-doc-01"), ("doc-02", "stamp-doc-02"))
    put(first, doc("doc-01", stamp="edited"))
    assert second.doc_stamps("notes") == stamps(("doc-01", "edited"), ("doc-02", "stamp-doc-02"))
    put(first, doc("doc-03"))
    assert set(second.doc_stamps("notes")) == {"doc-01", "doc-02", "doc-03"}
    delete(first, "doc-02")
    assert second.doc_stamps("notes") == stamps(("doc-01", "edited"), ("doc-03", "stamp-doc-03"))
    put(first, doc("doc-03", stamp="stamp-doc-03", params="256:32"))
    assert second.doc_stamps("notes")["doc-03"] == ("stamp-doc-03", "256:32")


def test_a_write_of_this_server_is_seen_by_its_next_read(servers: tuple[PostgresIndex, PostgresIndex]) -> None:
    index, _ = servers
    kb(index, "notes")
    put(index, doc("doc-01"))
    assert index.doc_stamps("notes") == stamps(("doc-01", "stamp-doc-01"))
    put(index, doc("doc-01", stamp="edited"), doc("doc-02"))
    assert index.doc_stamps("notes") == stamps(("doc-01", "edited"), ("doc-02", "stamp-doc-02"))
    delete(index, "doc-01")
    assert index.doc_stamps("notes") == stamps(("doc-02", "stamp-doc-02"))


def test_a_rolled_back_write_leaves_the_committed_stamps_and_a_later_commit_is_still_seen(
    servers: tuple[PostgresIndex, PostgresIndex],
) -> None:
    first, second = servers
    kb(first, "notes")
    put(first, doc("doc-01"))
    assert first.doc_stamps("notes") == stamps(("doc-01", "stamp-doc-01"))

    def written_read_then_aborted(stamp: str) -> None:
        with first.transaction():
            first.upsert_document(doc("doc-01", stamp=stamp))
            assert first.doc_stamps("notes") == stamps(("doc-01", stamp))  # its own write, not yet committed
            raise RuntimeError("abort")

    with pytest.raises(RuntimeError, match="abort"):
        written_read_then_aborted("rolled back")
    # Another server commits the same change to the same row: the generation it gives the
    # knowledge base is not the one the aborted transaction took (and saw), so it is read.
    put(second, doc("doc-01", stamp="committed"))
    assert first.doc_stamps("notes") == stamps(("doc-01", "committed"))
    with pytest.raises(RuntimeError, match="abort"):
        written_read_then_aborted("rolled back again")
    assert first.doc_stamps("notes") == stamps(("doc-01", "committed"))


def test_stamps_read_inside_a_transaction_are_not_kept_for_after_it(
    servers: tuple[PostgresIndex, PostgresIndex],
) -> None:
    first, second = servers
    kb(first, "notes")
    put(first, doc("doc-01"))
    with first.transaction():
        first.upsert_document(doc("doc-02"))
        assert set(first.doc_stamps("notes")) == {"doc-01", "doc-02"}
        first.upsert_document(doc("doc-03"))  # the knowledge base's generation moved once, already
    assert set(first.doc_stamps("notes")) == {"doc-01", "doc-02", "doc-03"}
    assert set(second.doc_stamps("notes")) == {"doc-01", "doc-02", "doc-03"}


def test_a_write_after_a_rolled_back_savepoint_still_moves_the_generation(
    servers: tuple[PostgresIndex, PostgresIndex],
) -> None:
    first, second = servers
    kb(first, "notes")
    put(first, doc("doc-01"))
    assert second.doc_stamps("notes") == stamps(("doc-01", "stamp-doc-01"))

    def written_then_rolled_back_to_a_savepoint() -> None:
        with first.transaction():  # nested: a savepoint
            first.upsert_document(doc("doc-01", stamp="rolled back"))
            raise RuntimeError("abort")

    with first.transaction():
        with pytest.raises(RuntimeError, match="abort"):
            written_then_rolled_back_to_a_savepoint()
        first.upsert_document(doc("doc-01", stamp="committed"))
    assert second.doc_stamps("notes") == stamps(("doc-01", "committed"))


def test_a_transaction_moves_a_generation_once_however_many_documents_it_writes(
    servers: tuple[PostgresIndex, PostgresIndex],
) -> None:
    # Once, not per row: a row updated again by the transaction that wrote it costs a walk over
    # its versions, and deleting a big knowledge base would take quadratic time.
    index, _ = servers
    kb(index, "notes")
    put(index, *(doc(f"doc-{n:02d}") for n in range(40)))

    def last_generation() -> int:
        row = index.conn.execute("SELECT last_value FROM kb_generations").fetchone()
        assert row is not None
        return int(row["last_value"])

    before = last_generation()
    delete(index, *(f"doc-{n:02d}" for n in range(0, 40, 2)))
    assert last_generation() == before + 1
    put(index, *(doc(f"doc-{n:02d}", stamp="again") for n in range(1, 40, 2)))
    assert last_generation() == before + 2
    assert index.doc_stamps("notes") == stamps(*((f"doc-{n:02d}", "again") for n in range(1, 40, 2)))


def test_rows_written_by_plain_sql_as_an_older_coffer_writes_them_are_seen(
    servers: tuple[PostgresIndex, PostgresIndex],
) -> None:
    index, _ = servers
    kb(index, "notes")
    put(index, doc("doc-01"), doc("doc-02"))
    index.doc_stamps("notes")
    with psycopg.connect(index.url, autocommit=True) as conn:
        conn.execute("UPDATE documents SET file_stamp = '' WHERE id = 'doc-01'")  # as migration 0003 did
        assert index.doc_stamps("notes") == stamps(("doc-01", ""), ("doc-02", "stamp-doc-02"))
        conn.execute("DELETE FROM document_tags WHERE document_id = 'doc-02'")
        conn.execute("DELETE FROM chunks WHERE document_id = 'doc-02'")
        conn.execute("DELETE FROM documents WHERE id = 'doc-02'")
        assert index.doc_stamps("notes") == stamps(("doc-01", ""))


def test_a_knowledge_base_deleted_and_created_again_shows_only_its_new_documents(
    servers: tuple[PostgresIndex, PostgresIndex],
) -> None:
    first, second = servers
    kb(first, "notes")
    put(first, doc("doc-01"))
    assert second.doc_stamps("notes") == stamps(("doc-01", "stamp-doc-01"))
    with first.transaction():
        first.delete_kb("notes")
    assert second.doc_stamps("notes") == {}
    kb(first, "notes")
    assert second.doc_stamps("notes") == {}
    put(first, doc("doc-02"))
    assert second.doc_stamps("notes") == stamps(("doc-02", "stamp-doc-02"))


def test_a_server_restarted_under_the_index_reads_its_stamps_again(
    servers: tuple[PostgresIndex, PostgresIndex],
) -> None:
    index, killer = servers
    kb(index, "notes")
    put(index, doc("doc-01"))
    index.doc_stamps("notes")
    reads = index.stamps.full_reads
    killer.conn.execute("SELECT pg_terminate_backend(%s)", (index.conn.info.backend_pid,))
    # The database may have come back restored from a backup, with generations handed out again.
    assert index.doc_stamps("notes") == stamps(("doc-01", "stamp-doc-01"))
    assert index.stamps.full_reads == reads + 1


def test_an_index_made_before_generations_migrates_and_then_sees_other_servers_writes(postgres_url: str) -> None:
    index = PostgresIndex(postgres_url)
    kb(index, "notes")
    put(index, doc("doc-01"))
    conn: Any = index.conn
    for statement in (
        "DROP TRIGGER documents_added_or_deleted ON documents",
        "DROP TRIGGER documents_restamped ON documents",
        "DROP TRIGGER documents_truncated ON documents",
        "DROP FUNCTION bump_kb_generation()",
        "DROP FUNCTION bump_kb_generation_once(text)",
        "ALTER TABLE knowledge_bases DROP COLUMN generation",
        "DROP SEQUENCE kb_generations",
        "DELETE FROM migrations WHERE name = '0004_kb_generations'",
    ):
        conn.execute(statement)
    index.close()
    first, second = PostgresIndex(postgres_url), PostgresIndex(postgres_url)
    assert first.doc_stamps("notes") == stamps(("doc-01", "stamp-doc-01"))
    put(second, doc("doc-01", stamp="edited"))
    assert first.doc_stamps("notes") == stamps(("doc-01", "edited"))
    first.close()
    second.close()


# -- what it means for two servers on one store ------------------------------------------------


def two_coffers(home: Path, postgres_url: str) -> tuple[Coffer, Coffer]:
    # reconcile_interval 0: every read checks every file, however long the last check took.
    settings = load_settings(
        home=home,
        embedding_provider="none",
        index_backend="postgres",
        database_url=postgres_url,
        reconcile_interval=0,
    )
    return Coffer(settings), Coffer(settings)


def titles(coffer: Coffer) -> dict[str, str]:
    return {d.document_id: d.title for d in coffer.list_documents("notes").documents}


def test_an_edit_through_one_server_is_served_by_the_other_without_it_indexing_again(
    tmp_path: Path, postgres_url: str
) -> None:
    first, second = two_coffers(tmp_path / "home", postgres_url)
    with first, second:
        first.create_kb("notes")
        doc_id = first.add_document("notes", "tides.md", "# Tides\n\nthe moon pulls the sea").document_id
        assert [p.document_id for p in second.search("notes", "moon", strategy="keyword").passages] == [doc_id]
        first.edit_document("notes", doc_id, "# Currents\n\nthe wind pushes the water")
        reads = second.index.stamps.full_reads  # type: ignore[attr-defined]
        assert second.search("notes", "moon", strategy="keyword").passages == []
        assert [p.document_id for p in second.search("notes", "wind", strategy="keyword").passages] == [doc_id]
        assert titles(second) == {doc_id: "Currents"}
        # Read once after the edit, and found as the files are: the second server wrote nothing.
        assert second.index.stamps.full_reads == reads + 1  # type: ignore[attr-defined]
        first.delete_document("notes", doc_id)
        assert titles(second) == {}


def test_rows_changed_behind_both_servers_backs_are_read_again_from_the_files(
    tmp_path: Path, postgres_url: str
) -> None:
    first, second = two_coffers(tmp_path / "home", postgres_url)
    with first, second:
        first.create_kb("notes")
        doc_id = first.add_document("notes", "tides.md", "# Tides\n\nthe moon pulls the sea").document_id
        assert titles(second) == {doc_id: "Tides"}
        with psycopg.connect(postgres_url, autocommit=True) as conn:  # stamps forgotten, as a migration does
            conn.execute("UPDATE documents SET file_stamp = '', title = 'stale'")
        assert titles(second) == {doc_id: "Tides"}
        assert second.verify("notes").ok
