"""The index port, one suite over every backend: SQLite (FTS5 + sqlite-vec) and PostgreSQL (pgvector).

Each test runs against both; the PostgreSQL one on a fresh database of the session's server
(``tests.postgres``). The ranking test indexes one corpus in both and asks for the same order
and the same BM25 scores, which is what makes the PostgreSQL keyword index FTS5's BM25.
"""

from __future__ import annotations

import dataclasses
import math
import random
import struct
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coffer_mcp.errors import StoreError
from coffer_mcp.index.fts import analyze
from coffer_mcp.index.port import DocumentFilter, DocumentRow, Index, pack_vector
from coffer_mcp.index.postgres import PostgresIndex
from coffer_mcp.index.postgres import keyword as pg_keyword
from coffer_mcp.index.sqlite import SqliteIndex
from coffer_mcp.index.sqlite import keyword as sqlite_keyword
from coffer_mcp.index.sqlite import queries as sqlite_queries
from coffer_mcp.models import Chunk
from coffer_mcp.store import StoreModel
from coffer_mcp.store.kbconfig import KbConfig
from tests.index.corpus import QUERIES, passages

BACKENDS = ["sqlite", "postgres"]


def open_backend(name: str, tmp_path: Path, request: pytest.FixtureRequest) -> Index:
    if name == "sqlite":
        return SqliteIndex(tmp_path / "coffer.db")
    return PostgresIndex(request.getfixturevalue("postgres_url"))


@pytest.fixture(params=BACKENDS)
def index(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Index]:
    opened = open_backend(request.param, tmp_path, request)
    yield opened
    opened.close()


def kb(index: Index, name: str, *, vector: bool = False) -> str:
    config = KbConfig(
        description=f"{name} notes", vector=vector, created_at="2025-01-01T00:00:00Z", updated_at="2025-01-02T00:00:00Z"
    )
    with index.transaction():
        index.upsert_kb(name, config, f"stamp-{name}")
    return name


def doc(doc_id: str, kb_name: str, **fields: Any) -> DocumentRow:
    values: dict[str, Any] = {
        "id": doc_id,
        "kb": kb_name,
        "title": f"Title of {doc_id}",
        "original_filename": f"{doc_id}.md",
        "original_format": "md",
        "source_sha256": "s" * 64,
        "content_sha256": "c" * 64,
        "source_mode": "converted",
        "source_path": None,
        "conversion_engine": "markdown",
        "converted_at": "2025-01-01T00:00:00Z",
        "created_at": f"2025-01-01T00:00:{doc_id[-2:]}Z",
        "updated_at": f"2025-01-03T00:00:{doc_id[-2:]}Z",
        "metadata": {"tags": ["a", "b"], "n": 1},
        "file_stamp": f"stamp-{doc_id}",
        "chunk_params": "512:64",
    }
    values.update(fields)
    return DocumentRow(**values)


def add(index: Index, row: DocumentRow, *texts: str) -> list[int]:
    """Index ``row`` with one chunk per text; returns the chunk ids in order."""
    with index.transaction():
        index.upsert_document(row)
        index.replace_chunks(row.kb, row.id, [Chunk(i, text, ("Part", str(i))) for i, text in enumerate(texts)])
    return [chunk_id for chunk_id, _ in index.chunk_texts(row.id)]


def found(rows: list[Any]) -> list[tuple[str, int]]:
    return [(row.document_id, row.position) for row in rows]


def search(
    index: Index,
    query: str,
    operator: str = "AND",
    kbs: tuple[str, ...] = ("notes",),
    doc_ids: list[str] | None = None,
    limit: int = 10,
) -> list[Any]:
    return index.keyword_search(analyze(query).index_terms(), operator, list(kbs), doc_ids, limit)  # type: ignore[arg-type]


# -- documents ---------------------------------------------------------------------------------


def test_a_document_comes_back_as_it_was_written_and_updates_in_place(index: Index) -> None:
    kb(index, "notes")
    row = doc("doc-01", "notes", metadata={"source_url": "https://example.org/x", "tags": ["ü", "中"], "x": 1.5})
    with index.transaction():
        index.upsert_document(row)
    assert index.get_document("notes", "doc-01") == row
    assert index.get_document("other", "doc-01") is None
    changed = dataclasses.replace(row, title="New title", file_stamp="stamp-2", source_path="/src/a.pdf")
    with index.transaction():
        index.upsert_document(changed)
        index.set_embedding("doc-01", pending=True, model="m:1")
    assert index.get_document("notes", "doc-01") == dataclasses.replace(
        changed, embed_pending=True, embedding_model="m:1"
    )
    assert index.doc_stamps("notes") == {"doc-01": ("stamp-2", "512:64")}
    assert index.document_counts() == {"notes": 1}
    assert index.kb_stamps() == {"notes": "stamp-notes"}


def test_a_source_stamp_is_kept_only_for_the_source_bytes_it_was_taken_with(index: Index) -> None:
    kb(index, "notes")
    with index.transaction():
        index.upsert_document(doc("doc-01", "notes", source_stamp="1:2:3"))
        index.upsert_document(doc("doc-02", "notes"))
        index.upsert_document(doc("doc-03", "notes"))
    with index.transaction():  # doc-03 was ingested again meanwhile: its bytes are no longer those hashed
        index.remember_source_stamps([("doc-02", "s" * 64, "4:5:6"), ("doc-03", "t" * 64, "7:8:9")])
    stamps = {d: index.get_document("notes", d).source_stamp for d in ("doc-01", "doc-02", "doc-03")}  # type: ignore[union-attr]
    assert stamps == {"doc-01": "1:2:3", "doc-02": "4:5:6", "doc-03": ""}


def test_find_document_returns_the_oldest_match_of_the_one_criterion_given(index: Index) -> None:
    kb(index, "notes")
    url = {"source_url": "https://example.org/a"}
    with index.transaction():
        index.upsert_document(doc("doc-12", "notes", original_filename="a.pdf", source_path="/x/a.pdf", metadata=url))
        index.upsert_document(doc("doc-11", "notes", original_filename="a.pdf", source_path="/x/a.pdf", metadata=url))
        index.upsert_document(doc("doc-13", "notes", original_filename="b.pdf"))
    for criterion in ({"filename": "a.pdf"}, {"source_path": "/x/a.pdf"}, {"source_url": "https://example.org/a"}):
        match = index.find_document("notes", **criterion)
        assert match is not None, criterion
        assert match.id == "doc-11", criterion
    assert index.find_document("notes", filename="c.pdf") is None
    assert index.find_document("other", filename="a.pdf") is None
    with pytest.raises(ValueError, match="exactly one criterion"):
        index.find_document("notes")
    with pytest.raises(ValueError, match="exactly one criterion"):
        index.find_document("notes", filename="a.pdf", source_path="/x/a.pdf")


def test_many_source_paths_are_matched_at_once_each_to_its_oldest_document_as_one_at_a_time(index: Index) -> None:
    kb(index, "notes")
    kb(index, "other")
    with index.transaction():
        index.upsert_document(doc("doc-12", "notes", source_path="/x/a.md"))
        index.upsert_document(doc("doc-11", "notes", source_path="/x/a.md"))
        index.upsert_document(doc("doc-13", "notes", source_path="/x/b.md"))
        index.upsert_document(doc("doc-14", "other", source_path="/x/c.md"))
    asked = ["/x/a.md", "/x/b.md", "/x/c.md", "/x/missing.md"]
    found = index.find_by_source_paths("notes", asked)
    assert {path: row.id for path, row in found.items()} == {"/x/a.md": "doc-11", "/x/b.md": "doc-13"}
    for path in asked:
        one = index.find_document("notes", source_path=path)
        assert (one.id if one else None) == (found[path].id if path in found else None), path
    assert index.find_by_source_paths("notes", []) == {}


def test_documents_list_in_pages_oldest_first_with_a_case_insensitive_title_filter(index: Index) -> None:
    kb(index, "notes")
    kb(index, "other")
    with index.transaction():
        for i in range(10, 17):
            index.upsert_document(
                doc(
                    f"doc-{i}",
                    "notes",
                    title=f"{'Alpha' if i % 2 else 'beta'} report {i}",
                    source_path=f"/src/{i}" if i % 3 == 0 else None,
                )
            )
        index.upsert_document(doc("doc-20", "other", title="Alpha elsewhere"))
    page, total = index.list_documents("notes", "", 3, 2)
    assert total == 7
    assert [d.id for d in page] == ["doc-12", "doc-13", "doc-14"]
    page, total = index.list_documents("notes", "ALPHA", 10, 0)
    assert total == 3
    assert [d.id for d in page] == ["doc-11", "doc-13", "doc-15"]
    assert [d.id for d in index.documents("notes")] == [f"doc-{i}" for i in range(10, 17)]
    assert [d.id for d in index.documents("notes", with_source_path=True)] == ["doc-12", "doc-15"]
    assert [d.id for d in index.recent_documents(3)] == ["doc-20", "doc-16", "doc-15"]
    assert index.ids_outside("notes", ["doc-10", "doc-20", "nope"]) == {"doc-20": "other"}
    assert index.document_counts() == {"notes": 7, "other": 1}


# -- tags and filters --------------------------------------------------------------------------


def listed(index: Index, where: DocumentFilter, kb_name: str = "notes") -> list[str]:
    """The ids a listing returns, checked against ``document_ids`` (a filtered grep's documents)."""
    rows, total = index.list_documents(kb_name, "", 100, 0, where)
    assert total == len(rows)
    assert sorted(index.document_ids(kb_name, where)) == sorted(row.id for row in rows)
    return [row.id for row in rows]


def test_tags_are_kept_with_the_document_replaced_with_it_and_deleted_with_it(index: Index) -> None:
    kb(index, "notes")
    kb(index, "other")
    row = doc("doc-01", "notes", tags=("Draft", "Projekt Ü"))
    with index.transaction():
        index.upsert_document(row)
        index.upsert_document(doc("doc-02", "other", tags=("draft",)))
    assert index.get_document("notes", "doc-01") == row
    assert listed(index, DocumentFilter(tags=("draft",))) == ["doc-01"]  # keys are case-folded
    assert listed(index, DocumentFilter(tags=("projekt ü",))) == ["doc-01"]
    with index.transaction():
        index.upsert_document(dataclasses.replace(row, tags=("final",)))
    assert listed(index, DocumentFilter(tags=("draft",))) == []
    assert listed(index, DocumentFilter(tags=("final",))) == ["doc-01"]
    with index.transaction():
        index.delete_document("doc-01")
        index.upsert_document(doc("doc-01", "notes"))  # the same id again, untagged
    assert listed(index, DocumentFilter(tags=("final",))) == []
    with index.transaction():
        index.delete_kb("other")
        index.upsert_kb("other", KbConfig(created_at="t", updated_at="t"), "s")
        index.upsert_document(doc("doc-02", "other"))
    assert listed(index, DocumentFilter(tags=("draft",)), "other") == []


def test_every_filter_key_restricts_the_listing_and_they_combine_with_and(index: Index) -> None:
    kb(index, "notes")
    with index.transaction():
        index.upsert_document(
            doc(
                "doc-11",
                "notes",
                tags=("a", "b"),
                original_format="pdf",
                source_path="/home/u/papers/x.pdf",
                created_at="2025-01-10T00:00:00Z",
                updated_at="2025-03-01T00:00:00.000Z",
            )
        )
        index.upsert_document(
            doc(
                "doc-12",
                "notes",
                tags=("a",),
                original_format="MD",
                source_path="/home/u/notes/y.md",
                created_at="2025-02-10",  # a hand-written date: its midnight, UTC
                updated_at="2025-02-11T10:00:00+02:00",
            )
        )
        index.upsert_document(doc("doc-13", "notes", created_at="not a time", updated_at="2025-04-01T00:00:00Z"))
    assert listed(index, DocumentFilter()) == ["doc-11", "doc-12", "doc-13"]
    assert listed(index, DocumentFilter(tags=("a",))) == ["doc-11", "doc-12"]
    assert listed(index, DocumentFilter(tags=("a", "b"))) == ["doc-11"]  # all of them
    assert listed(index, DocumentFilter(path_prefix="/home/u/notes/")) == ["doc-12"]
    assert listed(index, DocumentFilter(path_prefix="/home/u/")) == ["doc-11", "doc-12"]
    assert listed(index, DocumentFilter(formats=("md",))) == ["doc-12", "doc-13"]  # any of them, any case
    assert listed(index, DocumentFilter(formats=("pdf", "docx"))) == ["doc-11"]
    assert listed(index, DocumentFilter(created_after="2025-02-10T00:00:00.000Z")) == ["doc-12"]  # inclusive
    assert listed(index, DocumentFilter(created_before="2025-02-10T00:00:00.000Z")) == ["doc-11"]  # exclusive
    assert listed(index, DocumentFilter(updated_after="2025-02-11T08:00:00.000Z")) == ["doc-11", "doc-12", "doc-13"]
    assert listed(index, DocumentFilter(updated_after="2025-02-11T08:00:00.001Z")) == ["doc-11", "doc-13"]
    assert listed(index, DocumentFilter(updated_before="2025-03-01T00:00:00.000Z")) == ["doc-12"]
    assert listed(index, DocumentFilter(document_ids=("doc-11", "doc-13"))) == ["doc-11", "doc-13"]
    both = DocumentFilter(tags=("a",), formats=("md",), created_after="2025-01-01T00:00:00.000Z")
    assert listed(index, both) == ["doc-12"]
    assert listed(index, DocumentFilter(tags=("b",), formats=("md",))) == []
    page, total = index.list_documents("notes", "title", 1, 1, DocumentFilter(tags=("a",)))
    assert ([row.id for row in page], total) == (["doc-12"], 2)


def test_a_path_prefix_keeps_that_path_and_what_is_under_it_matched_literally(index: Index) -> None:
    kb(index, "notes")
    sources = {
        "doc-01": "/d/papers/x.md",
        "doc-02": "/d/papers/sub/y.md",
        "doc-03": "/d/papers-old/x.md",  # a sibling whose name starts the same
        "doc-04": "/d/pa%ers/x.md",  # LIKE and GLOB wildcards, which must match only themselves
        "doc-05": "/d/pa_ers/x.md",
        "doc-06": "/d/p*[a]?/x.md",
        "doc-07": "/d/notes.md",
        "doc-08": "/d/notes.md.bak",
    }
    for doc_id, source in sources.items():
        add(index, doc(doc_id, "notes", source_path=source), f"lock in {doc_id}")
    add(index, doc("doc-09", "notes"), "lock uploaded, no source")
    cases = {
        "/d/papers": ["doc-01", "doc-02"],
        "/d/papers/": ["doc-01", "doc-02"],
        "/d/pap": [],
        "/d/pa%ers": ["doc-04"],
        "/d/pa_ers": ["doc-05"],
        "/d/p*[a]?": ["doc-06"],
        "/d/p*": [],
        "/d/notes.md": ["doc-07"],  # a file's own path
        "/d/papers/sub/y.md": ["doc-02"],
        "/": [f"doc-0{i}" for i in range(1, 9)],
    }
    for prefix, expected in cases.items():
        where = DocumentFilter(path_prefix=prefix)
        assert listed(index, where) == expected, prefix
        rows = index.keyword_search(["lock"], "AND", ["notes"], where, 20)  # searches alike, inside the query
        assert sorted(row.document_id for row in rows) == expected, prefix


def test_a_filtered_keyword_search_returns_limit_rows_though_better_matches_are_filtered_out(index: Index) -> None:
    kb(index, "notes")
    for i in range(60):  # the best matches of the whole index carry no tag
        add(index, doc(f"doc-{i:02d}", "notes"), "lock lock lock")
    for i in range(60, 72):
        add(index, doc(f"doc-{i:02d}", "notes", tags=("kept",)), f"one lock among many other words, number {i}")
    where = DocumentFilter(tags=("kept",))
    rows = index.keyword_search(analyze("lock").index_terms(), "AND", ["notes"], where, 10)
    assert len(rows) == 10
    assert {row.document_id for row in rows} <= {f"doc-{i}" for i in range(60, 72)}
    assert [row.score for row in rows] == sorted((row.score for row in rows), reverse=True)
    unfiltered = {(r.document_id, r.position): r.score for r in search(index, "lock", limit=100)}
    assert all(unfiltered[(r.document_id, r.position)] == r.score for r in rows)  # filters leave scores alone
    assert len(index.substring_search(["ock"], "AND", ["notes"], where, 10, 1000)) == 10
    assert index.keyword_search(["lock"], "AND", ["notes"], DocumentFilter(tags=("nope",)), 10) == []


def test_a_filtered_knn_returns_limit_rows_though_nearer_vectors_are_filtered_out(index: Index) -> None:
    kb(index, "notes", vector=True)
    crowd = add(index, doc("doc-01", "notes"), *[f"crowd {i}" for i in range(300)])
    few = add(index, doc("doc-02", "notes", original_format="pdf"), *[f"few {i}" for i in range(12)])
    with index.transaction():  # every vector nearest to the query is filtered out
        index.store_vectors("m:2", 2, "notes", [(c, unit(1, i / 1000)) for i, c in enumerate(crowd)])
        index.store_vectors("m:2", 2, "notes", [(c, unit(-1, i / 10)) for i, c in enumerate(few)])
    near = index.knn("m:2", [1.0, 0.0], ["notes"], DocumentFilter(formats=("pdf",)), 10)
    assert found(near) == [("doc-02", i) for i in range(11, 1, -1)]  # the least far first
    assert len(near) == 10
    assert [row.score for row in near] == sorted((row.score for row in near), reverse=True)
    assert index.knn("m:2", [1.0, 0.0], ["notes"], DocumentFilter(formats=("docx",)), 10) == []


def test_a_filtered_knn_through_pgvectors_hnsw_falls_back_to_the_exact_scan_when_its_walk_ends_short(
    request: pytest.FixtureRequest,
) -> None:
    index = PostgresIndex(request.getfixturevalue("postgres_url"))
    try:
        kb(index, "notes", vector=True)
        crowd = add(index, doc("doc-01", "notes"), *[f"crowd {i}" for i in range(300)])
        few = add(index, doc("doc-02", "notes", tags=("far",)), *[f"few {i}" for i in range(12)])
        with index.transaction():
            index.store_vectors("m:2", 2, "notes", [(c, unit(1, i / 1000)) for i, c in enumerate(crowd)])
            index.store_vectors("m:2", 2, "notes", [(c, unit(-1, i / 10)) for i, c in enumerate(few)])
        # The HNSW index answers (no other plan gives the order), and its iterative walk gives up
        # after 20 vectors: all of the crowd.
        for setting in ("enable_seqscan = off", "enable_sort = off", "hnsw.max_scan_tuples = 20"):
            index.conn.execute(f"SET {setting}")
        near = index.knn("m:2", [1.0, 0.0], ["notes"], DocumentFilter(tags=("far",)), 10)
        assert found(near) == [("doc-02", i) for i in range(11, 1, -1)]
    finally:
        index.close()


# -- chunks and keyword search -----------------------------------------------------------------


def test_chunks_are_replaced_whole_and_read_back_in_order(index: Index) -> None:
    kb(index, "notes")
    first = add(index, doc("doc-01", "notes"), "one", "two", "three")
    assert index.chunk_count(doc_id="doc-01") == 3
    assert index.chunk_count(kb="notes") == 3
    rows, last = index.chunk_window("doc-01", 1, 5)
    assert [(r.position, r.heading_path, r.text) for r in rows] == [
        (1, ["Part", "1"], "two"),
        (2, ["Part", "2"], "three"),
    ]
    assert last == 2
    assert index.chunk_window("nope", 0, 1) == ([], None)
    second = add(index, doc("doc-01", "notes"), "uno", "dos")
    assert [text for _, text in index.chunk_texts("doc-01")] == ["uno", "dos"]
    assert not set(first) & set(second) or len(second) == 2
    assert search(index, "three") == []
    assert found(search(index, "dos")) == [("doc-01", 1)]
    assert index.kb_counts("notes", None) == index.kb_counts("notes", None).__class__(1, 2, 0)
    with pytest.raises(ValueError, match="kb or doc_id"):
        index.chunk_count()


def test_a_document_without_a_single_word_is_indexed_and_rebuilt_without_postings(index: Index) -> None:
    kb(index, "notes")
    with index.transaction():
        index.upsert_document(doc("doc-01", "notes"))
        index.replace_chunks("notes", "doc-01", [Chunk(0, "— … —", ())])
    add(index, doc("doc-02", "notes"), "alpha beta")
    assert index.chunk_texts("doc-01") != []
    assert index.check_shared() == []
    index.repair_shared()  # rebuilds the keyword index from the chunks
    assert index.check_shared() == []
    assert found(search(index, "alpha")) == [("doc-02", 0)]


def test_keyword_search_matches_all_terms_or_any_stemmed_best_first(index: Index) -> None:
    kb(index, "notes")
    add(index, doc("doc-01", "notes"), "The servers were running backups nightly.", "Nothing to see here.")
    add(index, doc("doc-02", "notes"), "A server runs. The server, the server!", "Backups of a server run weekly.")
    for i in range(3, 9):  # so that the terms above are rare enough to weigh
        add(index, doc(f"doc-0{i}", "notes"), f"Unrelated filler about gardening, number {i}.")
    both = search(index, "running server")
    assert found(both) == [("doc-02", 0), ("doc-01", 0), ("doc-02", 1)]  # stems; the shorter passage first
    assert [r.score for r in both] == sorted((r.score for r in both), reverse=True)
    assert both[-1].score > 0.1
    assert found(search(index, "backup nothing", "OR")) == [("doc-01", 1), ("doc-01", 0), ("doc-02", 1)]
    top = search(index, "server")[0]
    assert (top.document_id, top.position, top.title, top.heading_path) == (
        "doc-02",
        0,
        "Title of doc-02",
        ["Part", "0"],
    )
    assert search(index, "zebra server") == []
    assert index.matches_more_than("servers", 2)
    assert not index.matches_more_than("servers", 3)
    assert not index.matches_more_than("zebra", 0)


def test_keyword_search_keeps_to_the_knowledge_bases_and_documents_asked_for(index: Index) -> None:
    kb(index, "notes")
    kb(index, "other")
    for i in range(40):  # the best matches of the whole index live in another knowledge base
        add(index, doc(f"doc-{i:02d}", "other"), "lock lock lock")
    add(index, doc("doc-50", "notes"), "one lock in a much longer passage about other things entirely")
    add(index, doc("doc-51", "notes"), "a lock and a lock")
    assert found(search(index, "lock", limit=5)) == [("doc-51", 0), ("doc-50", 0)]
    assert found(search(index, "lock", doc_ids=["doc-50"])) == [("doc-50", 0)]
    assert len(search(index, "lock", kbs=("notes", "other"), limit=100)) == 42
    assert search(index, "lock", kbs=()) == []


def test_equal_scores_are_ordered_by_document_then_position(index: Index) -> None:
    kb(index, "notes")
    add(index, doc("doc-02", "notes"), "same words here", "same words here")
    add(index, doc("doc-01", "notes"), "same words here")
    assert found(search(index, "same words")) == [("doc-01", 0), ("doc-02", 0), ("doc-02", 1)]


def test_chinese_is_found_through_bigrams_and_single_characters_by_substring(index: Index) -> None:
    kb(index, "notes")
    add(index, doc("doc-01", "notes"), "向量检索通过嵌入模型找到段落。", "全文检索用倒排索引。")
    assert analyze("向量检索").index_terms() == ["向量", "量检", "检索"]
    assert found(search(index, "向量检索")) == [("doc-01", 0)]
    assert set(found(search(index, "向量检索", "OR"))) == {("doc-01", 0), ("doc-01", 1)}
    assert search(index, "检") == []  # one character: not an index term of the text
    hits = index.substring_search(["检"], "AND", ["notes"], None, 10, 100)
    assert set(found(hits)) == {("doc-01", 0), ("doc-01", 1)}


def test_substring_search_finds_word_pieces_ranked_by_density(index: Index) -> None:
    kb(index, "notes")
    add(index, doc("doc-01", "notes"), "The Backend and the backends", "a frontend", "BACKEND " * 3)
    hits = index.substring_search(["ackend"], "AND", ["notes"], None, 10, 100)
    assert found(hits) == [("doc-01", 2), ("doc-01", 0)]
    assert hits[0].score == pytest.approx(1000 * 3 / 25)
    assert found(index.substring_search(["ackend", "front"], "OR", ["notes"], None, 10, 100)) == [
        ("doc-01", 2),
        ("doc-01", 1),
        ("doc-01", 0),
    ]
    assert index.substring_search(["ackend", "front"], "AND", ["notes"], None, 10, 100) == []
    assert index.substring_search(["ackend"], "AND", ["notes"], ["doc-02"], 10, 100) == []
    assert len(index.substring_search(["end"], "AND", ["notes"], None, 10, 2)) == 2


# -- vectors -----------------------------------------------------------------------------------


def unit(*values: float) -> list[float]:
    norm = math.sqrt(sum(v * v for v in values))
    return [v / norm for v in values]


def test_vectors_are_stored_per_model_and_found_nearest_first(index: Index) -> None:
    kb(index, "notes", vector=True)
    kb(index, "other", vector=True)
    ids = add(index, doc("doc-01", "notes"), "a", "b", "c")
    other = add(index, doc("doc-02", "other"), "d")
    vectors = [unit(1, 0, 0), unit(1, 1, 0), unit(0, 0, 1)]
    with index.transaction():
        index.store_vectors("m:3", 3, "notes", list(zip(ids[:2], vectors[:2], strict=True)))
        index.store_vectors("m:3", 3, "notes", [(ids[2], pack_vector(vectors[2]))])  # packed bytes too
        index.store_vectors("m:3", 3, "other", [(other[0], unit(1, 0, 0.01))])
    assert index.vector_dimensions("m:3") == 3
    assert index.vector_dimensions("m:4") is None
    assert index.stored_vectors("m:3", ids) == {i: pack_vector(v) for i, v in zip(ids, vectors, strict=True)}
    assert index.stored_vectors("nope", ids) == {}
    assert index.count_vectors("m:3", ids) == 3
    assert index.count_vectors("nope", ids) is None
    near = index.knn("m:3", unit(1, 0.2, 0), ["notes"], None, 2)
    assert found(near) == [("doc-01", 0), ("doc-01", 1)]
    cosine = sum(a * b for a, b in zip(unit(1, 0.2, 0), vectors[0], strict=True))
    assert near[0].score == pytest.approx(cosine, abs=1e-6)
    assert found(index.knn("m:3", unit(1, 0, 0), ["notes", "other"], None, 2)) == [("doc-01", 0), ("doc-02", 0)]
    assert found(index.knn("m:3", unit(1, 0, 0), ["notes"], ["doc-01"], 5)) == [
        ("doc-01", 0),
        ("doc-01", 1),
        ("doc-01", 2),
    ]
    assert index.knn("nope", [1.0, 0.0], ["notes"], None, 3) == []
    with pytest.raises(ValueError, match="m:3 has 3 dimensions in the index, not 2"):
        index.knn("m:3", [1.0, 0.0], ["notes"], None, 3)
    with pytest.raises(ValueError, match="m:3 has 3 dimensions in the index, not 4"), index.transaction():
        index.store_vectors("m:3", 4, "notes", [(ids[0], [1.0, 0.0, 0.0, 0.0])])
    assert index.count_vectors("m:3", ids) == 3  # the failed transaction changed nothing


def test_a_filtered_knn_returns_limit_rows_when_the_knowledge_base_has_them(index: Index) -> None:
    kb(index, "notes", vector=True)
    kb(index, "other", vector=True)
    crowd = add(index, doc("doc-01", "other"), *[f"crowd {i}" for i in range(300)])
    few = add(index, doc("doc-02", "notes"), *[f"few {i}" for i in range(12)])
    with index.transaction():  # the other knowledge base holds every vector nearest to the query
        index.store_vectors("m:2", 2, "other", [(c, unit(1, i / 1000)) for i, c in enumerate(crowd)])
        index.store_vectors("m:2", 2, "notes", [(c, unit(-1, i / 10)) for i, c in enumerate(few)])
    near = index.knn("m:2", [1.0, 0.0], ["notes"], None, 10)
    assert len(near) == 10
    assert {row.kb for row in near} == {"notes"}
    assert [row.score for row in near] == sorted((row.score for row in near), reverse=True)


def test_embedding_bookkeeping_follows_the_documents(index: Index) -> None:
    kb(index, "notes", vector=True)
    ids = add(index, doc("doc-01", "notes"), "a", "b")
    add(index, doc("doc-02", "notes"), "c")
    with index.transaction():
        index.set_embedding("doc-01", pending=False, model="m:2")
        index.set_embedding("doc-02", pending=True, model=None)
        index.store_vectors("m:2", 2, "notes", [(ids[0], [1.0, 0.0]), (ids[1], [0.0, 1.0])])
    assert index.vector_kbs() == {"notes"}
    assert index.pending_documents("notes", "m:2") == ["doc-02"]
    assert index.pending_documents("notes", "m:other", limit=1) == ["doc-01"]
    assert index.embedded_models("notes") == ["m:2"]
    assert index.kb_counts("notes", "m:2") == index.kb_counts("notes", "m:2").__class__(2, 3, 1)
    with index.transaction():
        index.clear_kb_embeddings("notes")
    assert index.count_vectors("m:2", ids) == 0
    assert index.embedded_models("notes") == []
    assert index.pending_documents("notes", "m:2") == ["doc-01", "doc-02"]


def test_a_document_is_due_for_embedding_when_pending_unembedded_or_embedded_by_any_other_model(
    index: Index,
) -> None:
    kb(index, "notes", vector=True)
    kb(index, "other", vector=True)
    models = {"doc-01": "m:1", "doc-02": "m:2", "doc-03": "m:3", "doc-04": None, "doc-05": "M:2", "doc-06": "m:2 "}
    for doc_id in models:
        add(index, doc(doc_id, "notes"), "text")
    add(index, doc("doc-07", "notes"), "text")
    add(index, doc("doc-08", "other"), "text")
    with index.transaction():
        for doc_id, model in models.items():
            index.set_embedding(doc_id, pending=False, model=model)
        index.set_embedding("doc-07", pending=True, model="m:2")  # a failed re-embedding
        index.set_embedding("doc-08", pending=True, model=None)
    assert index.pending_documents("notes", "m:2") == ["doc-01", "doc-03", "doc-04", "doc-05", "doc-06", "doc-07"]
    assert index.pending_documents("notes", "m:2", limit=2) == ["doc-01", "doc-03"]
    assert index.pending_documents("notes", "m:1") == ["doc-02", "doc-03", "doc-04", "doc-05", "doc-06", "doc-07"]
    with index.transaction():
        for doc_id in ("doc-01", "doc-03", "doc-04", "doc-05", "doc-06", "doc-07"):
            index.set_embedding(doc_id, pending=False, model="m:2")
    assert index.pending_documents("notes", "m:2", limit=1) == []
    assert index.pending_documents("other", "m:2") == ["doc-08"]


# -- the store's embedding model ---------------------------------------------------------------


def test_the_first_model_recorded_stays_the_stores_until_one_is_recorded_in_its_place(index: Index) -> None:
    assert index.store_model() is None
    first = StoreModel("fastembed:m", 384, "fastembed", model="m", model_path="/models/m", recorded_at="2026-01-01")
    second = StoreModel("openai:e@256", 256, "openai", model="e", base_url="http://h/v1", api_key_env="KEY")
    with index.transaction():
        assert index.record_store_model(first) == first
    with index.transaction():
        assert index.record_store_model(second) == first  # another process came second: the first stays
    assert index.store_model() == first
    with index.transaction():
        assert index.record_store_model(second, replace=True) == second
    assert index.store_model() == second


def test_dropping_a_model_removes_its_vectors_and_leaves_its_documents_due(index: Index) -> None:
    kb(index, "notes", vector=True)
    one = add(index, doc("doc-01", "notes"), "a", "b")
    two = add(index, doc("doc-02", "notes"), "c")
    with index.transaction():
        index.store_vectors("old:2", 2, "notes", [(one[0], [1.0, 0.0]), (one[1], [0.0, 1.0])])
        index.set_embedding("doc-01", pending=False, model="old:2")
        index.store_vectors("new:3", 3, "notes", [(two[0], [1.0, 0.0, 0.0])])
        index.set_embedding("doc-02", pending=False, model="new:3")
    assert index.vector_models() == {"old:2": 2, "new:3": 3}
    with index.transaction():
        index.drop_model("old:2")
        index.drop_model("never:1")  # no such model: nothing to do
    assert index.vector_models() == {"new:3": 3}
    assert (index.vector_dimensions("old:2"), index.count_vectors("old:2", one)) == (None, None)
    assert index.knn("old:2", [1.0, 0.0], ["notes"], None, 5) == []
    assert index.pending_documents("notes", "new:3") == ["doc-01"]
    assert index.count_vectors("new:3", two) == 1
    assert index.check_shared() == []
    with index.transaction():  # the same identity can have vectors again, of any length
        index.store_vectors("old:2", 4, "notes", [(one[0], [1.0, 0.0, 0.0, 0.0])])
    assert index.vector_dimensions("old:2") == 4


# -- deletes, verification, repair -------------------------------------------------------------


def test_deleting_documents_and_knowledge_bases_drops_their_keyword_entries_and_vectors(index: Index) -> None:
    kb(index, "notes", vector=True)
    kb(index, "other", vector=True)
    one = add(index, doc("doc-01", "notes"), "shared words", "more shared words")
    two = add(index, doc("doc-02", "other"), "shared words elsewhere")
    with index.transaction():
        index.store_vectors("m:2", 2, "notes", [(one[0], [1.0, 0.0]), (one[1], [0.0, 1.0])])
        index.store_vectors("m:2", 2, "other", [(two[0], [1.0, 1.0])])
    score_before = search(index, "shared", kbs=("other",))[0].score
    assert index.check_shared() == []
    with index.transaction():
        index.delete_document("doc-01")
    assert index.get_document("notes", "doc-01") is None
    assert index.chunk_texts("doc-01") == []
    assert search(index, "shared") == []
    assert index.count_vectors("m:2", one) == 0
    assert search(index, "shared", kbs=("other",))[0].score == score_before  # its own statistics did not move
    assert index.check_shared() == []
    with index.transaction():
        index.delete_kb("other")
    assert index.kb_stamps() == {"notes": "stamp-notes"}
    assert index.document_counts() == {}
    assert index.count_vectors("m:2", two) == 0
    assert search(index, "shared", kbs=("other",)) == []
    assert index.check_shared() == []
    add(index, doc("doc-03", "notes"), "shared words again")
    assert found(search(index, "shared")) == [("doc-03", 0)]


def damage(index: Index, chunk_id: int) -> None:
    """Break the shared structures behind the index's back: unindex a chunk, orphan a vector."""
    conn: Any = index.conn  # type: ignore[attr-defined]
    if isinstance(index, SqliteIndex):
        conn.execute("DELETE FROM chunks WHERE id = ?", (chunk_id,))  # its FTS entry stays
        conn.execute(
            "INSERT INTO chunks (id, document_id, kb, position, heading_path, headings, text) "
            "VALUES (999, 'doc-01', 'notes', 99, '[]', '', 'never indexed')"
        )
        return
    conn.execute("DELETE FROM chunks WHERE id = %s", (chunk_id,))  # its postings and vector stay
    conn.execute(
        "INSERT INTO chunks (id, document_id, kb, position, heading_path, headings, text, length) "
        "VALUES (999, 'doc-01', 'notes', 99, '[]', '', 'never indexed', 2)"
    )


def test_check_shared_reports_damage_and_repair_shared_mends_it(index: Index) -> None:
    kb(index, "notes", vector=True)
    ids = add(index, doc("doc-01", "notes"), "alpha beta", "gamma delta")
    with index.transaction():
        index.store_vectors("m:2", 2, "notes", [(ids[0], [1.0, 0.0])])
    damage(index, ids[0])
    problems = index.check_shared()
    assert any("without a chunk" in p for p in problems if "vec" not in p), problems
    assert any("not indexed" in p for p in problems), problems
    assert any("1 vector without a chunk" in p for p in problems), problems
    index.repair_shared()
    assert index.check_shared() == []
    assert found(search(index, "never indexed")) == [("doc-01", 99)]
    assert search(index, "alpha") == []


def test_locks_can_be_taken_nested_and_again(index: Index) -> None:
    for _ in range(2):
        with index.lock("registry", timeout=1), index.lock("kb:notes", timeout=1):
            kb(index, "notes")
    assert index.kb_stamps() == {"notes": "stamp-notes"}


def test_audit_and_invocations_are_recorded(index: Index) -> None:
    with index.transaction():
        index.audit("document.added", "notes", "mcp:client", "doc-01", {"title": "Ü"})
        index.audit("kb.created", "notes", "cli")
        index.record_invocation("coffer__search", "client/1", 12.5, "ok", None)
        index.record_invocation("coffer__add", "client/1", 3.0, "error", "invalid_argument")
    conn: Any = index.conn  # type: ignore[attr-defined]
    audit = [
        tuple(r[k] for k in ("event", "kb", "actor", "document_id", "details"))
        for r in conn.execute("SELECT * FROM audit_log ORDER BY id").fetchall()
    ]
    assert audit == [
        ("document.added", "notes", "mcp:client", "doc-01", '{"title": "Ü"}'),
        ("kb.created", "notes", "cli", None, "{}"),
    ]
    calls = [
        tuple(r[k] for k in ("tool", "outcome", "error_code", "duration_ms"))
        for r in conn.execute("SELECT * FROM mcp_invocations ORDER BY id").fetchall()
    ]
    assert calls == [("coffer__search", "ok", None, 12.5), ("coffer__add", "error", "invalid_argument", 3.0)]


def test_a_documents_events_of_one_kind_are_read_whole_oldest_first(index: Index) -> None:
    with index.transaction():
        index.audit("KB_SOURCE_CONFLICT", "notes", "watcher", "doc-01", {"source_sha256": "a"})
        index.audit("KB_SOURCE_CONFLICT", "notes", "watcher", "doc-02", {"source_sha256": "b"})
        index.audit("KB_DOCUMENT_UPDATED", "notes", "cli", "doc-01", {"source_mode": "edited"})
        index.audit("KB_SOURCE_CONFLICT", "other", "watcher", "doc-01", {"source_sha256": "c"})
        for n in range(1100):  # more than audit_events reads by default
            index.audit("KB_DOCUMENT_CREATED", "notes", "cli", f"doc-{n:04d}")
        index.audit("KB_SOURCE_CONFLICT", "notes", "mcp:client", "doc-01", {"source_sha256": "d"})
    found = index.document_events("notes", "doc-01", "KB_SOURCE_CONFLICT")
    assert [(e.actor, e.details) for e in found] == [
        ("watcher", {"source_sha256": "a"}),
        ("mcp:client", {"source_sha256": "d"}),
    ]
    assert {(e.event, e.kb, e.document_id) for e in found} == {("KB_SOURCE_CONFLICT", "notes", "doc-01")}
    assert index.document_events("notes", "doc-03", "KB_SOURCE_CONFLICT") == []


def test_a_failed_transaction_leaves_nothing_behind(index: Index) -> None:
    kb(index, "notes")

    def written_then_aborted() -> None:
        with index.transaction():
            index.upsert_document(doc("doc-01", "notes"))
            index.replace_chunks("notes", "doc-01", [Chunk(0, "gone")])
            raise RuntimeError("abort")

    with pytest.raises(RuntimeError, match="abort"):
        written_then_aborted()
    assert index.get_document("notes", "doc-01") is None
    assert search(index, "gone") == []
    assert index.check_shared() == []


# -- ranking equivalence -----------------------------------------------------------------------


def build_corpus(index: Index) -> None:
    for name in ("alpha", "beta"):
        kb(index, name)
    documents: dict[tuple[str, str], list[str]] = {}
    for kb_name, doc_id, text in passages():
        documents.setdefault((kb_name, doc_id), []).append(text)
    for (kb_name, doc_id), texts in documents.items():
        add(index, doc(doc_id, kb_name), *texts)


def rankings(index: Index) -> dict[tuple[str, str, str], list[tuple[str, int, float]]]:
    result = {}
    for query in QUERIES:
        for operator in ("AND", "OR"):
            for kbs in ("alpha", "alpha+beta"):
                rows = index.keyword_search(analyze(query).index_terms(), operator, kbs.split("+"), None, 100)  # type: ignore[arg-type]
                result[query, operator, kbs] = [(r.document_id, r.position, r.score) for r in rows]
    return result


def test_both_backends_rank_the_same_passages_with_the_same_bm25_scores(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    results = {}
    for name in BACKENDS:
        index = open_backend(name, tmp_path, request)
        build_corpus(index)
        results[name] = rankings(index)
        index.close()
    sqlite, postgres = results["sqlite"], results["postgres"]
    assert sum(map(len, sqlite.values())) > 150, "the corpus should match plenty"
    for key, expected in sqlite.items():
        got = postgres[key]
        assert [(d, p) for d, p, _ in got] == [(d, p) for d, p, _ in expected], key
        for (_, _, a), (_, _, b) in zip(got, expected, strict=True):
            assert a == pytest.approx(b, rel=1e-9), key


WORDS = ["cell", "membrane", "protein", "signal", "growth", "tissue", "enzyme", "receptor"]


def scored(rows: list[Any]) -> list[tuple[str, int, float]]:
    return [(row.document_id, row.position, row.score) for row in rows]


def word_soup(seed: int, count: int) -> list[str]:
    """``count`` passages of the words above, some far more frequent than others, of varied lengths
    and term frequencies (many equal scores, as in a real corpus's common words)."""
    rng = random.Random(seed)
    weights = [1.5**-k for k in range(len(WORDS))]
    return [
        " ".join(rng.choices(WORDS, weights, k=rng.randint(1, 5)) + ["filler"] * rng.choice([0, 0, 3, 8]))
        for _ in range(count)
    ]


def test_or_queries_rank_as_fts5_when_only_each_terms_best_postings_are_read(
    tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    # PostgreSQL ranks an OR (or a lone term) from each common term's best postings, proving the
    # rest cannot reach the list, else scoring every posting. Here every term counts as common.
    monkeypatch.setattr(pg_keyword, "WHOLE_POSTINGS", 0)
    monkeypatch.setattr(pg_keyword, "PRUNED_POSTINGS", 0)
    outcomes: list[bool] = []

    def pruned_or(*args: Any) -> Any:
        top = real_pruned_or(*args)
        outcomes.append(top is not None)
        return top

    real_pruned_or = pg_keyword.pruned_or
    monkeypatch.setattr(pg_keyword, "pruned_or", pruned_or)
    queries = ["cells", "enzymes", "cells membranes", "proteins signals", "growth enzymes receptors", "receptor cell"]
    results = {}
    for name in BACKENDS:
        index = open_backend(name, tmp_path, request)
        for kb_name, seed in (("alpha", 1), ("beta", 2)):
            kb(index, kb_name)
            for d in range(4):
                add(index, doc(f"{kb_name}-{d:02}", kb_name), *word_soup(seed * 10 + d, 40))
        results[name] = {
            (query, kbs, limit): scored(search(index, query, "OR", kbs, None, limit))
            for query in queries
            for kbs in (("alpha",), ("alpha", "beta"))
            for limit in (1, 3, 10, 40)
        }
        index.close()
    assert True in outcomes, "the pruned ranking should have run"
    assert False in outcomes, "its fallback should have run"
    sqlite, postgres = results["sqlite"], results["postgres"]
    assert sum(len(expected) == key[2] for key, expected in sqlite.items()) > 40, "most lists should be full"
    for key, expected in sqlite.items():
        assert [(d, p) for d, p, _ in postgres[key]] == [(d, p) for d, p, _ in expected], key
        assert [s for _, _, s in postgres[key]] == pytest.approx([s for _, _, s in expected], rel=1e-9), key


def test_a_phrase_of_several_tokens_matches_where_they_are_adjacent_as_in_fts5(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    # FTS5 cuts हिन्दी at its vowel signs into ह न द: a query for it is a phrase of three tokens.
    results = {}
    for name in BACKENDS:
        index = open_backend(name, tmp_path, request)
        kb(index, "notes")
        add(
            index,
            doc("doc-01", "notes"),
            "हिन्दी भाषा",
            "ह न द: apart, yet adjacent tokens",
            "हि न्दी",
            "दी न्ह reversed",
            "हिन्दी हिन्दी twice",
            *[f"filler {i}" for i in range(8)],
        )
        hits = search(index, "हिन्दी", "OR")
        results[name] = (
            [(r.document_id, r.position) for r in hits],
            [r.score for r in hits],
            [index.matches_more_than("हिन्दी", n) for n in (3, 4)],
        )
        index.close()
    (sqlite_found, sqlite_scores, sqlite_more), (pg_found, pg_scores, pg_more) = results["sqlite"], results["postgres"]
    assert sqlite_found == pg_found == [("doc-01", 4), ("doc-01", 2), ("doc-01", 0), ("doc-01", 1)]
    assert pg_scores == pytest.approx(sqlite_scores, rel=1e-9)
    assert sqlite_more == pg_more == [True, False]


def test_function_word_phrases_count_every_occurrence_as_fts5_does_overlapping_ones_too(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    # "to be" occurs twice in "to be or not to be"; "to to" twice in "to to to" (the matches overlap).
    texts = [
        "to be or not to be",
        "to to to, said the owl",
        "be to, not to be: reversed once",
        "tobe is one word",
        *[f"filler {i} about owls" for i in range(8)],
    ]
    results = {}
    for name in BACKENDS:
        index = open_backend(name, tmp_path, request)
        kb(index, "notes")
        add(index, doc("doc-01", "notes"), *texts)
        queries = ("to be", "to to", "not to be")
        results[name] = {query: [(r.position, r.score) for r in search(index, query, "OR")] for query in queries}
        index.close()
    sqlite, postgres = results["sqlite"], results["postgres"]
    assert [position for position, _ in sqlite["to be"]] == [0, 2]
    assert [position for position, _ in sqlite["to to"]] == [1]
    for query, expected in sqlite.items():
        assert [p for p, _ in postgres[query]] == [p for p, _ in expected], query
        assert [s for _, s in postgres[query]] == pytest.approx([s for _, s in expected], rel=1e-9), query


def test_postgres_chunks_written_before_their_terms_were_kept_still_match_phrases(postgres_url: str) -> None:
    index = PostgresIndex(postgres_url)
    kb(index, "notes")
    add(index, doc("doc-01", "notes"), "to be or not to be", "to to to", "be to be", "nothing here")
    fresh = [(r.position, r.score) for query in ("to be", "to to") for r in search(index, query, "OR")]
    # As rows indexed before 0006_chunk_terms: no terms, and so no pairs of function words either.
    index.conn.execute("UPDATE chunks SET terms = NULL")
    index.conn.execute("DELETE FROM postings WHERE term LIKE '%% %%'")
    legacy = [(r.position, r.score) for query in ("to be", "to to") for r in search(index, query, "OR")]
    index.close()
    assert [position for position, _ in fresh] == [0, 2, 1]
    assert legacy == fresh


def test_postgres_chunks_indexed_before_function_word_pairs_get_them_when_the_schema_migrates(
    postgres_url: str,
) -> None:
    texts = ["to be or not to be", "to to to", "be to be", "nothing to see here", "the cat was there"]
    queries = ("to be", "to to", "not to be", "was there", "to be or not")
    index = PostgresIndex(postgres_url)
    kb(index, "notes")
    add(index, doc("doc-01", "notes"), *texts)
    fresh = {query: [(r.position, r.score) for r in search(index, query, "OR")] for query in queries}
    pairs = index.conn.execute("SELECT term, chunk_id, tf, dl FROM postings WHERE term LIKE '%% %%' ORDER BY 1, 2")
    written = pairs.fetchall()
    # The schema as it was before 0007_function_word_pairs: no pairs, no index of the chunks without terms.
    index.conn.execute("DELETE FROM postings WHERE term LIKE '%% %%'")
    index.conn.execute("DROP INDEX chunks_without_terms")
    index.conn.execute("DELETE FROM migrations WHERE name = '0007_function_word_pairs'")
    index.close()
    migrated = PostgresIndex(postgres_url)
    pairs = migrated.conn.execute("SELECT term, chunk_id, tf, dl FROM postings WHERE term LIKE '%% %%' ORDER BY 1, 2")
    assert pairs.fetchall() == written
    assert {query: [(r.position, r.score) for r in search(migrated, query, "OR")] for query in queries} == fresh
    migrated.close()
    assert [position for position, _ in fresh["to to"]] == [1]
    assert [position for position, _ in fresh["was there"]] == [4]
    assert {row["term"] for row in written} >= {"to be", "to to", "not to", "be or", "wa there"}


def test_an_and_query_is_ranked_from_each_knowledge_bases_own_rarest_term(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    # "cell" is rare in alpha and common in beta, "membrane" the other way round.
    results = {}
    for name in BACKENDS:
        index = open_backend(name, tmp_path, request)
        for kb_name, rare, common in (("alpha", "cell", "membrane"), ("beta", "membrane", "cell")):
            kb(index, kb_name)
            both = [f"{rare} and {common} {'again ' * i}" for i in range(3)]
            add(index, doc(f"{kb_name}-01", kb_name), *[f"{common} note {i}" for i in range(12)], *both)
        rows = search(index, "cells membranes", "AND", kbs=("alpha", "beta"), limit=20)
        results[name] = [(r.document_id, r.position, r.score) for r in rows]
        index.close()
    sqlite, postgres = results["sqlite"], results["postgres"]
    assert len(sqlite) == 6
    assert [(d, p) for d, p, _ in postgres] == [(d, p) for d, p, _ in sqlite]
    assert [s for _, _, s in postgres] == pytest.approx([s for _, _, s in sqlite], rel=1e-9)


# -- per-knowledge-base statistics (issue 17) ----------------------------------------------------


def scores(index: Index, query: str, kbs: tuple[str, ...], operator: str = "OR") -> list[tuple[str, int, float]]:
    return [(r.document_id, r.position, r.score) for r in search(index, query, operator, kbs=kbs, limit=100)]


NOTES = [
    "servers keep backups of the database",
    "a database server answers queries",
    "backups are restored weekly",
    "nothing about it here",
]


def test_a_knowledge_bases_scores_do_not_move_when_another_one_gets_documents(index: Index) -> None:
    kb(index, "notes")
    kb(index, "other")
    add(index, doc("doc-01", "notes"), *NOTES)
    before = {query: scores(index, query, ("notes",)) for query in ("database backups", "server", "weekly restored")}
    for i in range(30):
        add(index, doc(f"doc-{i + 10:02d}", "other"), "database database backups server", f"server {i} restored")
    after = {query: scores(index, query, ("notes",)) for query in before}
    assert after == before  # to the last bit
    assert before["database backups"][0][2] > 0
    assert [index.matches_more_than("server", n, ["notes"]) for n in (1, 2)] == [True, False]
    assert index.matches_more_than("server", 2)
    assert index.matches_more_than("server", 2, ["notes", "other"])


def test_postgres_match_counts_kept_between_searches_follow_every_write_of_any_server(postgres_url: str) -> None:
    searcher, writer = PostgresIndex(postgres_url), PostgresIndex(postgres_url)
    kb(searcher, "notes")
    add(searcher, doc("doc-01", "notes"), *NOTES)
    add(searcher, doc("doc-02", "notes"), "database database backups server", "backups again")
    queries = [("database backups", "AND"), ("database backups", "OR"), ("server weekly", "OR"), ("backups", "OR")]

    def ranked(index: Index) -> dict[tuple[str, str], list[tuple[str, int, float]]]:
        return {(query, operator): scores(index, query, ("notes",), operator) for query, operator in queries}

    def agrees() -> bool:
        fresh = PostgresIndex(postgres_url)  # counts nothing kept
        try:
            return ranked(searcher) == ranked(fresh)
        finally:
            fresh.close()

    assert agrees()  # and the searcher now keeps each term's count
    add(writer, doc("doc-03", "notes"), "database backups", "weekly backups of the server")
    assert agrees()
    # Chunks replaced by others of the same number and lengths: the statistics stay, the counts move.
    with writer.transaction():
        same = [Chunk(0, "weekly weekly restored server", ("Part", "0")), Chunk(1, "nothing new", ("Part", "1"))]
        writer.replace_chunks("notes", "doc-02", same)
    assert agrees()
    with writer.transaction():
        writer.delete_document("doc-03")
    assert agrees()
    assert scores(searcher, "database backups", ("notes",), "AND")[0][2] > 0
    searcher.close()
    writer.close()


def test_scores_are_the_same_whatever_the_order_the_index_was_built_in(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    builds = []
    for name in BACKENDS:
        for order in (1, -1):
            (tmp_path / f"{name}{order}").mkdir()
            index = open_backend(name, tmp_path / f"{name}{order}", request)
            kb(index, "notes")
            kb(index, "other")
            steps = [("notes", i, text) for i, text in enumerate(NOTES)] + [("other", 9, "database server")]
            for kb_name, i, text in steps[::order]:
                add(index, doc(f"doc-{i:02d}", kb_name), text, "filler words")
            with index.transaction():  # a document deleted leaves no trace in the statistics
                index.delete_document("doc-09")
            builds.append({q: scores(index, q, ("notes",)) for q in ("database backups", "server", "restored")})
            if name == "postgres" and order == 1:
                _drop_postgres_tables(index)
            index.close()
    assert all(build == builds[0] for build in builds[1:2]), builds
    for build in builds[2:]:
        for query, rows in build.items():
            assert [r[:2] for r in rows] == [r[:2] for r in builds[0][query]]
            assert [r[2] for r in rows] == pytest.approx([r[2] for r in builds[0][query]], rel=1e-9)


def _drop_postgres_tables(index: Index) -> None:
    """Empty the session database so that the next index of the same URL starts afresh."""
    conn: Any = index.conn  # type: ignore[attr-defined]
    conn.execute("DROP SCHEMA public CASCADE")
    conn.execute("CREATE SCHEMA public")


def test_a_multi_kb_search_ranks_as_one_knowledge_base_holding_them_all(index: Index) -> None:
    texts = [NOTES, ["database", "database backups", "servers", *[f"filler {i}" for i in range(6)]]]
    for name in ("a", "b", "ab"):
        kb(index, name)
    for n, chunks in enumerate(texts):
        add(index, doc(f"doc-a{n}", "a"), *chunks)
        add(index, doc(f"doc-b{n}", "b"), *chunks)
        add(index, doc(f"x-doc-a{n}", "ab"), *chunks)  # the same chunks, and so the same mean length
        add(index, doc(f"x-doc-b{n}", "ab"), *chunks)
    for query, operator in [("database backups", "OR"), ("database backups", "AND"), ("server", "OR")]:
        together = scores(index, query, ("a", "b"), operator)
        one = scores(index, query, ("ab",), operator)
        assert [r[:2] for r in together] == [(r[0].removeprefix("x-"), r[1]) for r in one]
        assert [r[2] for r in together] == pytest.approx([r[2] for r in one], rel=1e-9)
        assert together != sorted(scores(index, query, ("a",), operator) + scores(index, query, ("b",), operator))


def test_a_small_knowledge_bases_best_match_is_not_buried_under_a_large_ones_passing_mention(index: Index) -> None:
    """In a knowledge base of one document every word is in every chunk: FTS5 gives it the IDF 1e-6.
    Searched with a larger one, it weighs what it weighs among all their chunks."""
    kb(index, "tiny")
    kb(index, "big")
    add(index, doc("doc-tiny", "tiny"), "the duck: a mallard duck on the pond")
    for n in range(20):
        add(index, doc(f"doc-big{n:02d}", "big"), f"meeting minutes of week {n}", "budget and planning")
    add(index, doc("doc-big99", "big"), "long minutes of a meeting where someone mentioned a duck in passing once")
    assert scores(index, "duck", ("tiny",))[0][2] < 1e-5  # alone, as FTS5 scores it
    ranked = scores(index, "duck", ("tiny", "big"))
    assert [r[0] for r in ranked] == ["doc-tiny", "doc-big99"]
    assert ranked[0][2] > 1


def test_a_multi_kb_search_looks_deeper_where_its_own_ranking_differs_from_the_one_of_all(index: Index) -> None:
    """In "big", ``alpha`` is in most chunks (IDF 1e-6 there): its own ranking puts all the ``beta``
    chunks first, more than a search looks at in one go. Among all the chunks searched ``alpha`` is
    rare, and its chunks come first: the best few of a short list are the same as of the whole one."""
    kb(index, "big")
    kb(index, "other")
    for n in range(35):
        add(index, doc(f"doc-alpha{n:02d}", "big"), f"alpha alpha alpha note {n}")
    for n in range(25):
        add(index, doc(f"doc-beta{n:02d}", "big"), f"beta and some other words of note {n}")
    for n in range(100):
        add(index, doc(f"doc-other{n:02d}", "other"), f"gamma filler {n}", "more filler", "and more")
    whole = scores(index, "alpha beta", ("big", "other"))
    assert whole[0][0].startswith("doc-alpha")
    for limit in (1, 2, 5, 25):
        short = search(index, "alpha beta", "OR", kbs=("big", "other"), limit=limit)
        assert [(r.document_id, r.position, r.score) for r in short] == whole[:limit]


def test_a_phrase_counted_in_more_rows_than_were_read_weighs_as_one_in_every_row() -> None:
    """A multi-KB search reads a table's row count, then each phrase's matches, in separate
    statements; a writer committing in between made a search beside it fail ("math domain error",
    from a CLI search while three other writers added documents)."""
    assert sqlite_keyword.idf(0, 3) == sqlite_keyword.idf(5, 9) == sqlite_keyword.idf(5, 5) == 1e-6
    assert sqlite_keyword.idf(100, 1) == pytest.approx(math.log(99.5 / 1.5))


def test_a_multi_kb_search_of_alike_knowledge_bases_looks_at_each_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two halves of one corpus: each phrase's IDF differs little between a half and both, so the
    first candidates of each table settle a many-word query (a bound that summed every phrase's
    ratio looked 4,096 deep at every search: 1.45 s against 29 ms, SciFact split in two), and
    only the few that can make the list are tokenized and scored (tokenizing is most of the cost)."""
    index = SqliteIndex(tmp_path / "coffer.db")
    kb(index, "a")
    kb(index, "b")
    words = ["cell", "membrane", "protein", "signal", "growth", "tissue", "enzyme", "receptor", "gene", "blood"]
    rng = random.Random(3)
    for n in range(160):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(8, 30)))
        add(index, doc(f"doc-{n:03d}", "ab"[n % 2]), text)
    looks: list[int] = []
    original = sqlite_queries._fts_search_one

    def counted(conn: Any, table: str, expression: str, kb_name: str, where: Any, limit: int) -> list[Any]:
        looks.append(limit)
        return original(conn, table, expression, kb_name, where, limit)

    scored: list[str] = []
    score = sqlite_queries._score

    def scored_counted(row: dict[str, Any], *args: Any) -> float:
        scored.append(row["document_id"])
        return score(row, *args)

    monkeypatch.setattr(sqlite_queries, "_fts_search_one", counted)
    monkeypatch.setattr(sqlite_queries, "_score", scored_counted)
    for query in ("cell membrane protein signal", "growth tissue enzyme", "receptor gene blood cell"):
        looks.clear()
        scored.clear()
        assert len(search(index, query, "OR", kbs=("a", "b"), limit=5)) == 5
        assert looks == [21, 21], query
        assert len(scored) < 21, query  # fewer than one table's first look
    index.close()


def _to_previous_schema(index: Index) -> None:
    """Turn a current index into one at the schema before per-KB statistics (a shared index)."""
    conn: Any = index.conn  # type: ignore[attr-defined]
    if isinstance(index, SqliteIndex):
        tokenizer = "porter unicode61 remove_diacritics 2"
        conn.execute(f"CREATE VIRTUAL TABLE chunks_fts USING fts5(body, content='', tokenize='{tokenizer}')")
        rows = conn.execute("SELECT id, headings, text FROM chunks").fetchall()
        conn.executemany(
            "INSERT INTO chunks_fts (rowid, body) VALUES (?, ?)",
            [(r[0], sqlite_keyword.body(r[1], r[2])) for r in rows],
        )
        for table in sqlite_keyword.tables(conn).values():
            conn.execute(f"DROP TABLE {table}")
        conn.execute("DROP TABLE keyword_tables")
        # SQLite migrates by number: the migrations after it are undone too (tags and filters,
        # source stamps, the authorization server's tables, the store's model, source locations).
        for table in ("document_tags", "oauth_clients", "oauth_tokens", "oauth_owner", "store_model"):
            conn.execute(f"DROP TABLE {table}")
        for column in ("tags", "created_key", "updated_key", "source_stamp"):
            conn.execute(f"ALTER TABLE documents DROP COLUMN {column}")
        conn.execute("ALTER TABLE chunks DROP COLUMN source_location")
        conn.execute(
            "DELETE FROM migrations WHERE name IN ('0006_keyword_per_kb', '0007_filters', '0008_source_stamps', "
            "'0009_oauth', '0010_store_model', '0011_source_locations')"
        )
        conn.execute("PRAGMA user_version = 5")
        return
    conn.execute("ALTER TABLE postings DROP CONSTRAINT postings_pkey")
    conn.execute("ALTER TABLE postings DROP COLUMN kb")
    conn.execute("ALTER TABLE postings ADD PRIMARY KEY (term, chunk_id) INCLUDE (tf, dl)")
    conn.execute("DELETE FROM migrations WHERE name = '0002_keyword_per_kb'")


def test_an_index_with_the_shared_keyword_index_migrates_to_per_kb_statistics(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    for name in BACKENDS:
        (tmp_path / name).mkdir()
        index = open_backend(name, tmp_path / name, request)
        kb(index, "notes")
        kb(index, "other")
        add(index, doc("doc-01", "notes"), *NOTES)
        add(index, doc("doc-02", "other"), "database", "database backups", "servers", "filler")
        expected = {kbs: scores(index, "database backups", kbs) for kbs in (("notes",), ("other",), ("notes", "other"))}
        _to_previous_schema(index)
        index.close()
        migrated = open_backend(name, tmp_path / name, request)
        assert {kbs: scores(migrated, "database backups", kbs) for kbs in expected} == expected
        assert migrated.check_shared() == []
        if isinstance(migrated, SqliteIndex):
            names = {r[0] for r in migrated.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            assert "chunks_fts" not in names
        migrated.close()


# -- PostgreSQL only ---------------------------------------------------------------------------


def test_postings_filed_under_another_knowledge_base_are_reported_and_mended(postgres_url: str) -> None:
    index = PostgresIndex(postgres_url)
    kb(index, "notes")
    kb(index, "other")
    ids = add(index, doc("doc-01", "notes"), "alpha beta")
    before = search(index, "alpha")
    index.conn.execute("UPDATE postings SET kb = 'other' WHERE chunk_id = %s", (ids[0],))
    assert search(index, "alpha") == []
    assert any("without a chunk" in problem for problem in index.check_shared())
    index.repair_shared()
    assert index.check_shared() == []
    assert search(index, "alpha") == before
    index.close()


def test_two_postgres_indexes_migrating_at_once_apply_each_migration_once(empty_postgres_url: str) -> None:
    postgres_url = empty_postgres_url
    from coffer_mcp.index.postgres.schema import MIGRATIONS

    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def run() -> None:
        index = PostgresIndex(postgres_url)
        try:
            start.wait()
            index.kb_stamps()
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)
        finally:
            index.close()

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    index = PostgresIndex(postgres_url)
    rows = index.conn.execute("SELECT name FROM migrations ORDER BY name").fetchall()
    assert [row["name"] for row in rows] == [name for name, _ in MIGRATIONS]
    index.close()


def test_a_wrong_url_or_a_server_that_is_down_is_a_store_error_without_the_password() -> None:
    for url in (
        "postgresql://coffer:s3cret-pw@127.0.0.1:1/coffer?connect_timeout=3",
        "postgresql://coffer:s3cret-pw@127.0.0.1:notaport/coffer",
        "host=127.0.0.1 port=1 password=s3cret-pw connect_timeout=3 dbname=x",
    ):
        index = PostgresIndex(url)
        with pytest.raises(StoreError) as caught:
            index.kb_stamps()
        text = f"{caught.value.message} {caught.value.hint}"
        assert "s3cret-pw" not in text, text
        assert "COFFER_DATABASE_URL" in caught.value.hint, text
        index.close()


def test_a_socket_connection_is_named_by_its_socket_not_by_a_made_up_url(tmp_path: Path) -> None:
    # A folder as host is a Unix socket: it was shown as 'postgresql://coffer@/tmp/x/data:5432/coffer'.
    url = f"postgresql://coffer:s3cret-pw@/coffer?host={tmp_path}&port=1&connect_timeout=3"
    index = PostgresIndex(url)
    with pytest.raises(StoreError) as caught:
        index.kb_stamps()
    assert f"database 'coffer' as user 'coffer' on {tmp_path}/.s.PGSQL.1" in caught.value.message
    assert "@/" not in caught.value.message
    assert "s3cret-pw" not in caught.value.message
    index.close()


def test_a_server_without_the_extension_is_told_what_to_install(postgres_url: str) -> None:
    from coffer_mcp.index.postgres.schema import require_extension

    index = PostgresIndex(postgres_url)
    with pytest.raises(StoreError) as caught, index.conn.transaction():
        require_extension(index.conn, "no_such_extension")
    assert "pgvector" in caught.value.hint
    index.close()


def test_a_lost_connection_is_a_store_error_and_the_next_call_reconnects(postgres_url: str) -> None:
    index = PostgresIndex(postgres_url)
    kb(index, "notes")
    killer = PostgresIndex(postgres_url)
    pid = index.conn.info.backend_pid
    killer.conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
    assert index.kb_stamps() == {"notes": "stamp-notes"}  # idle: retried on a new connection
    assert index.conn.info.backend_pid != pid

    def killed_midway() -> None:
        with index.transaction():
            index.kb_stamps()
            killer.conn.execute("SELECT pg_terminate_backend(%s)", (index.conn.info.backend_pid,))
            index.kb_stamps()

    with pytest.raises(StoreError) as caught:
        killed_midway()
    assert "unreachable" in caught.value.message
    assert index.kb_stamps() == {"notes": "stamp-notes"}
    index.close()
    killer.close()


def test_a_lock_held_by_one_index_keeps_another_out_until_released(postgres_url: str) -> None:
    first, second = PostgresIndex(postgres_url), PostgresIndex(postgres_url)
    with first.lock("registry", timeout=5), first.lock("kb:notes", timeout=5):
        with pytest.raises(StoreError) as caught, second.lock("kb:notes", timeout=0.2):
            pass
        assert caught.value.code == "busy"
        with pytest.raises(StoreError), second.lock("registry", timeout=0):
            pass
        with second.lock("kb:other", timeout=0.2):  # another name is free
            pass
    with second.lock("kb:notes", timeout=0), second.lock("registry", timeout=0):
        pass
    first.close()
    second.close()


def test_a_lock_whose_session_died_is_free_and_the_next_lock_reconnects(postgres_url: str) -> None:
    index, other = PostgresIndex(postgres_url), PostgresIndex(postgres_url)
    with index.lock("kb:notes", timeout=5):
        pass
    dead = index._local.lock_conn.info.backend_pid  # type: ignore[attr-defined]
    other.conn.execute("SELECT pg_terminate_backend(%s)", (dead,))
    with index.lock("kb:notes", timeout=5), pytest.raises(StoreError), other.lock("kb:notes", timeout=0):
        pass
    index.close()
    other.close()


def test_postgres_diagnosis_names_the_server_and_pgvector(postgres_url: str) -> None:
    index = PostgresIndex(postgres_url)
    found_ = index.diagnose()
    assert found_.backend == "postgres"
    assert found_.version.split(".")[0].isdigit()
    assert found_.vector_version
    assert found_.keyword_index
    assert found_.problems == []
    index.close()


def test_nul_characters_are_stored_as_replacement_characters(postgres_url: str) -> None:
    index = PostgresIndex(postgres_url)
    kb(index, "notes")
    add(index, doc("doc-01", "notes", title="a\x00b"), "alpha\x00omega")
    assert index.chunk_texts("doc-01")[0][1] == "alpha\ufffdomega"
    assert found(search(index, "omega")) == [("doc-01", 0)]
    index.close()


def test_stored_vectors_round_trip_exactly_as_float32() -> None:
    values = [0.1, -2.5, 1e-8, 3.4028234663852886e38]
    packed = pack_vector(values)
    assert struct.unpack("4f", packed) == struct.unpack("4f", pack_vector(list(struct.unpack("4f", packed))))


def test_a_batch_commits_many_documents_rows_at_once_or_none_of_them(index: Index) -> None:
    kb(index, "notes")
    with index.batch():  # a folder ingest's group commit: several documents in one transaction
        for n in range(1, 4):
            index.upsert_document(doc(f"doc-0{n}", "notes"))
            index.replace_chunks("notes", f"doc-0{n}", [Chunk(0, f"batched lighthouse {n}")], fresh=True)
            index.audit("KB_DOCUMENT_INGESTED", "notes", "cli", f"doc-0{n}")
    assert sorted(index.doc_stamps("notes")) == ["doc-01", "doc-02", "doc-03"]
    assert {row.document_id for row in search(index, "lighthouse")} == {"doc-01", "doc-02", "doc-03"}

    def failing_batch() -> None:
        with index.batch():
            index.upsert_document(doc("doc-04", "notes"))
            index.replace_chunks("notes", "doc-04", [Chunk(0, "lost lighthouse")], fresh=True)
            raise RuntimeError("a document of the batch failed")

    with pytest.raises(RuntimeError):
        failing_batch()
    assert index.get_document("notes", "doc-04") is None
    assert len(search(index, "lighthouse")) == 3


def test_inside_a_batch_a_read_sees_the_batchs_writes_and_a_document_written_twice_ends_as_written_last(
    index: Index,
) -> None:
    # PostgreSQL holds a batch's writes to send them together: they must still land in order.
    kb(index, "notes")
    with index.batch():
        index.upsert_document(doc("doc-01", "notes", title="First", tags=["moon", "sea"]))
        index.replace_chunks("notes", "doc-01", [Chunk(0, "first lighthouse")], fresh=True)
        index.audit("KB_DOCUMENT_INGESTED", "notes", "cli", "doc-01", {"n": 1})
        row = index.get_document("notes", "doc-01")
        assert row is not None
        assert row.title == "First"
        assert [hit.document_id for hit in search(index, "lighthouse")] == ["doc-01"]
        index.upsert_document(doc("doc-01", "notes", title="Second", tags=["sea", "sky"]))
        index.replace_chunks("notes", "doc-01", [Chunk(0, "second harbour"), Chunk(1, "more harbour")])
        index.audit("KB_DOCUMENT_UPDATED", "notes", "cli", "doc-01", {"n": 2})
        index.upsert_document(doc("doc-02", "notes"))
        index.replace_chunks("notes", "doc-02", [Chunk(0, "harbour wall")], fresh=True)
        index.audit("KB_DOCUMENT_INGESTED", "notes", "cli", "doc-02", {"n": 3})
    row = index.get_document("notes", "doc-01")
    assert row is not None
    assert (row.title, list(row.tags)) == ("Second", ["sea", "sky"])
    assert search(index, "lighthouse") == []
    assert [hit.document_id for hit in search(index, "harbour")] == ["doc-01", "doc-01", "doc-02"]
    assert (index.chunk_count(doc_id="doc-01"), index.chunk_count(kb="notes")) == (2, 3)
    assert [index.document_ids("notes", DocumentFilter(tags=(tag,))) for tag in ("moon", "sky")] == [[], ["doc-01"]]
    assert [(e.event, e.document_id, e.details) for e in index.audit_events("notes")] == [
        ("KB_DOCUMENT_INGESTED", "doc-01", {"n": 1}),
        ("KB_DOCUMENT_UPDATED", "doc-01", {"n": 2}),
        ("KB_DOCUMENT_INGESTED", "doc-02", {"n": 3}),
    ]
    assert index.check_shared() == []  # the keyword statistics count each chunk once
