"""ANN graphs beside coffer.db: exactly the scan's results, a cache rebuilt when gone or broken, never stale."""

from __future__ import annotations

import dataclasses
import math
import random
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import coffer_mcp.index.sqlite as sqlite_index
from coffer_mcp.index.port import DocumentFilter, DocumentRow, PassageRow
from coffer_mcp.index.sqlite import SqliteIndex, ann, ann_rows, hnsw, viewer
from coffer_mcp.models import Chunk

MODEL = "test:random-32"
DIMS = 32
REPO = Path(__file__).resolve().parents[2]


def unit(rng: random.Random) -> list[float]:
    vector = [rng.gauss(0, 1) for _ in range(DIMS)]
    norm = math.sqrt(sum(v * v for v in vector))
    return [v / norm for v in vector]


def add_documents(
    index: SqliteIndex, kb: str, documents: int, chunks: int, seed: int, *, lengths: bool = False
) -> list[int]:
    """``documents`` documents of ``chunks`` chunks each in ``kb``, every chunk with a random vector
    (a unit vector, or with ``lengths`` of any length, as some providers return them)."""
    rng = random.Random(seed)
    config = SimpleNamespace(
        description="", chunk_size=512, chunk_overlap=0, vector=True, created_at="t", updated_at="t"
    )
    with index.transaction():
        index.upsert_kb(kb, config, "stamp")
        for d in range(documents):
            doc_id = f"{kb}-{seed}-{d:04d}"
            index.upsert_document(
                DocumentRow(
                    id=doc_id,
                    kb=kb,
                    title=doc_id,
                    original_filename=f"{doc_id}.md",
                    original_format="md",
                    source_sha256="",
                    content_sha256="",
                    source_mode="converted",
                    source_path=None,
                    conversion_engine="",
                    converted_at=None,
                    created_at="t",
                    updated_at="t",
                )
            )
            index.replace_chunks(kb, doc_id, [Chunk(i, f"chunk {i} of {doc_id}") for i in range(chunks)])
    ids = [cid for doc in index.documents(kb) for cid, _ in index.chunk_texts(doc.id)]
    with index.transaction():
        length = (lambda: rng.uniform(0.05, 20.0)) if lengths else (lambda: 1.0)
        index.store_vectors(MODEL, DIMS, kb, [(cid, [v * length() for v in unit(rng)]) for cid in ids])
        for d in range(documents):
            index.set_embedding(f"{kb}-{seed}-{d:04d}", pending=False, model=MODEL)
    return ids


def ranked(rows: list[PassageRow]) -> list[tuple[int, float]]:
    return [(row.chunk_id, row.score) for row in rows]


def queries(seed: int, n: int = 20) -> list[list[float]]:
    rng = random.Random(seed)
    return [unit(rng) for _ in range(n)]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "coffer.db"


def graphed(db: Path, **options: object) -> SqliteIndex:
    """An index that searches every knowledge base through a graph, built at the search."""
    return SqliteIndex(db, ann_threshold=1, ann_background=False, **options)  # type: ignore[arg-type]


def scan(db: Path) -> SqliteIndex:
    return SqliteIndex(db, ann_threshold=0)


def uses_graph(index: SqliteIndex, kb: str) -> bool:
    return index.ann_status(kb)[MODEL]["ann"]


def assert_same_as_scan(index: SqliteIndex, db: Path, kbs: list[str], *, limits: tuple[int, ...] = (5, 50)) -> None:
    exact = scan(db)
    for limit in limits:
        for query in queries(limit):
            assert ranked(index.knn(MODEL, query, kbs, None, limit)) == ranked(
                exact.knn(MODEL, query, kbs, None, limit)
            )


def test_searches_through_a_graph_return_exactly_what_the_scan_returns(db: Path) -> None:
    index = graphed(db)
    add_documents(index, "big", 60, 5, seed=1)
    assert_same_as_scan(index, db, ["big"])
    assert uses_graph(index, "big")
    assert len(list((db.parent / "coffer.db-ann").glob("*.usearch"))) == 1


def test_vectors_of_any_length_get_the_scans_scores_from_the_graph(db: Path) -> None:
    # The graph keeps each vector as stored, so re-scoring it is the scan's arithmetic on the same bytes.
    index = graphed(db)
    add_documents(index, "big", 60, 5, seed=3, lengths=True)
    assert_same_as_scan(index, db, ["big"])
    assert uses_graph(index, "big")


def test_a_quantized_graph_of_an_older_release_answers_exactly_until_it_is_rebuilt_with_floats(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = db.parent / "coffer.db-ann"
    monkeypatch.setattr(hnsw, "DTYPE", "i8")  # what releases before float32 graphs saved
    old = graphed(db)
    stored = len(add_documents(old, "big", 60, 5, seed=1))
    old.knn(MODEL, queries(1)[0], ["big"], None, 5)
    old.close()
    monkeypatch.undo()
    (quantized,) = folder.glob("*.usearch")
    quantized_size = quantized.stat().st_size
    rebuilding = ann._try_lock(folder / "m1-big~.lock")  # another process is rebuilding it
    assert rebuilding is not None
    try:
        meanwhile = SqliteIndex(db, ann_threshold=1)
        assert_same_as_scan(meanwhile, db, ["big"])  # its ids, re-scored from the vector table
        assert uses_graph(meanwhile, "big")
        assert [path.name for path in folder.glob("*.usearch")] == [quantized.name]
        meanwhile.ann.join()  # its background build found the lock taken and gave up
        meanwhile.close()
    finally:
        ann._unlock(rebuilding)
    later = graphed(db)
    assert_same_as_scan(later, db, ["big"])
    (rebuilt,) = folder.glob("*.usearch")
    assert rebuilt.name != quantized.name
    assert rebuilt.stat().st_size - quantized_size >= stored * DIMS * 3  # four bytes a dimension, not one


def test_a_small_knowledge_base_keeps_the_scan(db: Path) -> None:
    index = SqliteIndex(db, ann_background=False)  # the default threshold: far above 300 chunks
    add_documents(index, "small", 60, 5, seed=1)
    assert_same_as_scan(index, db, ["small"])
    assert not uses_graph(index, "small")
    assert not (db.parent / "coffer.db-ann").exists()


def test_graphed_and_scanned_knowledge_bases_merge_in_the_scans_order(db: Path) -> None:
    index = SqliteIndex(db, ann_threshold=200, ann_background=False)
    add_documents(index, "big", 60, 5, seed=1)
    add_documents(index, "small", 10, 5, seed=2)
    assert_same_as_scan(index, db, ["big", "small"])
    assert uses_graph(index, "big")
    assert not uses_graph(index, "small")


def test_a_search_restricted_to_documents_scores_all_their_chunks(db: Path) -> None:
    index = graphed(db)
    add_documents(index, "big", 60, 5, seed=1)
    docs = [doc.id for doc in index.documents("big")][:3]
    for query in queries(7):
        # The scan restricts after its k nearest: asked for every chunk, it misses none.
        assert ranked(index.knn(MODEL, query, ["big"], docs, 10)) == ranked(
            scan(db).knn(MODEL, query, ["big"], docs, 300)[:10]
        )


def tag_every_third(index: SqliteIndex, kb: str) -> DocumentFilter:
    """Tag every third document of ``kb`` 'kept'; the filter that keeps them."""
    with index.transaction():
        for row in index.documents(kb)[::3]:
            index.upsert_document(dataclasses.replace(row, tags=("kept",)))
    return DocumentFilter(tags=("kept",))


def assert_filtered_like_the_scan(index: SqliteIndex, db: Path, where: DocumentFilter, limit: int = 10) -> None:
    exact = scan(db)
    kept = {row.id for row in exact.documents("big") if "kept" in row.tags} if where.tags else None
    for query in queries(3):
        near = index.knn(MODEL, query, ["big"], where, limit)
        assert len(near) == limit
        assert kept is None or {row.document_id for row in near} <= kept
        assert ranked(near) == ranked(exact.knn(MODEL, query, ["big"], where, limit))


def test_a_filter_leaving_few_chunks_of_a_graphed_knowledge_base_scans_them(db: Path) -> None:
    index = SqliteIndex(db, ann_threshold=200, ann_background=False)
    add_documents(index, "big", 60, 5, seed=1)
    index.knn(MODEL, queries(1)[0], ["big"], None, 5)
    assert uses_graph(index, "big")
    assert_filtered_like_the_scan(index, db, tag_every_third(index, "big"))  # 100 chunks: below the threshold


def test_a_wide_filter_searches_the_graph_deeper_and_keeps_what_it_lets_through(db: Path) -> None:
    index = graphed(db)
    add_documents(index, "big", 60, 5, seed=1)
    assert_filtered_like_the_scan(index, db, tag_every_third(index, "big"))
    assert uses_graph(index, "big")


def test_a_filtered_search_scans_when_the_graphs_candidates_hold_too_few(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = graphed(db)
    add_documents(index, "big", 60, 5, seed=1)
    where = tag_every_third(index, "big")
    monkeypatch.setattr(ann, "MIN_CANDIDATES", 1)
    monkeypatch.setattr(sqlite_index, "MAX_FILTERED_CANDIDATES", 1)  # 20 candidates, about 7 of them kept
    assert_filtered_like_the_scan(index, db, where)


def test_a_deleted_chunk_never_comes_back(db: Path) -> None:
    index = graphed(db)
    add_documents(index, "big", 60, 5, seed=1)
    doomed = index.documents("big")[0].id
    own = index.stored_vectors(MODEL, [cid for cid, _ in index.chunk_texts(doomed)])
    assert index.knn(MODEL, _floats(next(iter(own.values()))), ["big"], None, 1)[0].document_id == doomed
    with index.transaction():
        index.delete_document(doomed)
    for vector in own.values():
        assert doomed not in {row.document_id for row in index.knn(MODEL, _floats(vector), ["big"], None, 50)}
    assert_same_as_scan(index, db, ["big"])


def test_edited_and_reembedded_chunks_are_found_with_their_new_vectors(db: Path) -> None:
    index = graphed(db)
    add_documents(index, "big", 60, 5, seed=1)
    index.knn(MODEL, queries(1)[0], ["big"], None, 5)
    assert uses_graph(index, "big")
    edited = index.documents("big")[1].id
    with index.transaction():  # an edit: new chunks (ids reused), then their vectors
        index.replace_chunks("big", edited, [Chunk(0, "new text")])
    rng = random.Random(99)
    ((chunk_id, _),) = index.chunk_texts(edited)
    vector = unit(rng)
    with index.transaction():
        index.store_vectors(MODEL, DIMS, "big", [(chunk_id, vector)])
    best = index.knn(MODEL, vector, ["big"], None, 1)[0]
    assert (best.chunk_id, best.text) == (chunk_id, "new text")
    assert_same_as_scan(index, db, ["big"])


@pytest.mark.parametrize("damage", ["deleted", "truncated", "garbage of the same size"])
def test_a_missing_or_corrupt_graph_is_reported_and_rebuilt(db: Path, damage: str) -> None:
    index = graphed(db)
    add_documents(index, "big", 60, 5, seed=1)
    assert_same_as_scan(index, db, ["big"], limits=(5,))
    (file,) = (db.parent / "coffer.db-ann").glob("*.usearch")
    if damage == "deleted":
        file.unlink()
    elif damage == "truncated":
        file.write_bytes(file.read_bytes()[: file.stat().st_size // 2])
    else:
        file.write_bytes(bytes(file.stat().st_size))
    later = graphed(db)  # another process: it opens the file afresh
    problems = later.check_shared()
    assert len(problems) == 1
    assert "ANN graph of big" in problems[0]
    assert_same_as_scan(later, db, ["big"])  # the scan answers, the graph is rebuilt
    assert uses_graph(later, "big")
    assert later.check_shared() == []
    assert [path.name for path in (db.parent / "coffer.db-ann").glob("*.usearch")] != [file.name]


@pytest.mark.parametrize("when", ["between searches", "during a search"])
@pytest.mark.parametrize("damage", ["random bytes", "zeros"])
def test_a_graph_file_changed_under_a_running_search_is_dropped_and_the_scan_answers(
    db: Path, monkeypatch: pytest.MonkeyPatch, damage: str, when: str
) -> None:
    # A backup tool or `cp` writing over the file keeps its inode: the loaded graph's memory map sees
    # the new bytes, which no checksum had checked. Searches failed (random bytes: NULL distances) or
    # lost their vector half (zeros) until the process restarted. Between searches, the file's new
    # times give it away; during one (the write lands after the check before the search, pinned
    # here by that check seeing nothing), the look at the file after the graph answered does: zeros
    # can answer in full with keys of real chunks, which only that look tells from a good answer
    # (the clean-clone CI met that case, by the build's order of the graph's nodes).
    index = graphed(db)
    add_documents(index, "big", 60, 5, seed=1)
    assert_same_as_scan(index, db, ["big"], limits=(5,))  # the graph is loaded
    (file,) = (db.parent / "coffer.db-ann").glob("*.usearch")
    size = file.stat().st_size
    rng = random.Random(7)
    if when == "during a search":
        blind, seen = iter([True]), hnsw.Graph.current
        monkeypatch.setattr(hnsw.Graph, "current", lambda self: next(blind, None) or seen(self))
    with open(file, "r+b") as handle:  # in place: the same inode, as the mapping sees it
        handle.seek(size // 3)
        handle.write(rng.randbytes(size // 2) if damage == "random bytes" else bytes(size // 2))
    assert_same_as_scan(index, db, ["big"], limits=(5, 50))  # the scan answers, exactly
    assert uses_graph(index, "big")  # its file did not match: rebuilt (at the search, in this index)
    assert [path.name for path in (db.parent / "coffer.db-ann").glob("*.usearch")] != [file.name]
    assert index.check_shared() == []


def cut_short(file: Path, cut: str) -> None:
    """Truncate ``file`` in place (the same inode, as a memory map of it sees it): to nothing or to half."""
    size = file.stat().st_size
    with open(file, "r+b") as handle:
        handle.truncate(0 if cut == "emptied" else size // 2)


@pytest.mark.parametrize("cut", ["emptied", "halved"])
def test_a_graph_file_cut_short_while_it_is_viewed_ends_the_viewer_process_not_this_one(db: Path, cut: str) -> None:
    # Reading a mapped page past a file's new end raises SIGBUS, which no Python code can catch:
    # with the graph mapped in this process, this test's process died.
    index = graphed(db)
    add_documents(index, "big", 60, 5, seed=1)
    index.knn(MODEL, queries(1)[0], ["big"], None, 5)
    (row,) = ann_rows.file_rows(index.conn)
    file = db.parent / "coffer.db-ann" / row.name
    graph = hnsw.open_graph(file, ann._stamp(row))
    assert graph.current()
    cut_short(file, cut)
    assert not graph.current()  # what a search checks first: this file is opened again, and refused
    with pytest.raises(hnsw.ViewerError, match="SIGBUS"):
        graph.nearest(hnsw.as_query(queries(1)[0]), 10)  # had it not checked: only the viewer process dies
    assert_same_as_scan(index, db, ["big"], limits=(5,))  # the scan answers, the graph is rebuilt
    assert uses_graph(index, "big")
    assert index.check_shared() == []


@pytest.mark.parametrize("search", ["unfiltered", "filtered"])
@pytest.mark.parametrize("cut", ["emptied", "halved"])
def test_a_graph_file_cut_short_during_a_search_is_answered_by_the_scan_and_rebuilt(
    db: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, cut: str, search: str
) -> None:
    # The cut lands between a search's check of the file and its reads of the graph: pinned here by
    # a check that sees nothing. The viewer process dies of SIGBUS; the search does not.
    index = graphed(db)
    add_documents(index, "big", 60, 5, seed=1)
    where = tag_every_third(index, "big") if search == "filtered" else None
    assert_same_as_scan(index, db, ["big"], limits=(5,))  # the graph is loaded
    (file,) = (db.parent / "coffer.db-ann").glob("*.usearch")
    with monkeypatch.context() as patched:
        patched.setattr(hnsw.Graph, "current", lambda self: True)
        cut_short(file, cut)
        query = queries(5)[0]
        assert ranked(index.knn(MODEL, query, ["big"], where, 10)) == ranked(
            scan(db).knn(MODEL, query, ["big"], where, 10)
        )
    assert "killed by SIGBUS: a graph file was cut short" in caplog.text  # the log says what happened
    assert_same_as_scan(index, db, ["big"], limits=(5, 50))
    assert uses_graph(index, "big")  # rebuilt at the search after (in this index)
    assert [path.name for path in (db.parent / "coffer.db-ann").glob("*.usearch")] != [file.name]
    assert index.check_shared() == []


def test_when_the_graph_viewer_cannot_start_the_scan_answers_and_no_graph_is_rebuilt(
    db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    index = graphed(db)
    add_documents(index, "big", 60, 5, seed=1)
    index.knn(MODEL, queries(1)[0], ["big"], None, 5)
    (built,) = ann_rows.file_rows(index.conn)
    broken = tmp_path / "broken.py"
    broken.write_text("import sys\nsys.exit('usearch is not installed')\n", encoding="utf-8")
    monkeypatch.setattr(viewer, "SCRIPT", broken)
    monkeypatch.setattr(viewer, "VIEWER", viewer.Viewer())
    later = graphed(db)  # another process: it has no graph open yet
    assert_same_as_scan(later, db, ["big"], limits=(5, 50))
    assert ann_rows.file_rows(later.conn) == [built]  # the file is fine: not rebuilt at every search
    assert caplog.text.count("the graph viewer process ended (exit status 1)") == 1  # tried once, not 40 times


def test_repair_rebuilds_a_broken_graph_inside_the_repair_transaction(db: Path) -> None:
    index = graphed(db)
    add_documents(index, "big", 60, 5, seed=1)
    index.knn(MODEL, queries(1)[0], ["big"], None, 5)
    (file,) = (db.parent / "coffer.db-ann").glob("*.usearch")
    file.write_bytes(b"not a graph")
    repairer = scan(db)  # reindex --force: check_shared reports it, repair_shared rebuilds it
    assert repairer.check_shared()
    with repairer.transaction():
        repairer.repair_shared()
    assert repairer.check_shared() == []
    assert_same_as_scan(graphed(db), db, ["big"])


def test_a_graph_out_of_step_with_its_table_is_reported_stale(db: Path) -> None:
    index = graphed(db)
    add_documents(index, "big", 60, 5, seed=1)
    index.knn(MODEL, queries(1)[0], ["big"], None, 5)
    add_documents(index, "big", 2, 5, seed=2)
    index.conn.execute("DELETE FROM ann_changes")  # a lost change log: the graph cannot know those writes
    (problem,) = index.check_shared()
    assert "stale" in problem
    with index.transaction():
        index.repair_shared()
    assert index.check_shared() == []


def test_an_interrupted_build_is_reported_and_its_leftovers_removed(db: Path) -> None:
    index = graphed(db)
    add_documents(index, "big", 60, 5, seed=1)
    index.knn(MODEL, queries(1)[0], ["big"], None, 5)
    with index.transaction():  # a build that died after its row, before its file: a half-written .tmp
        index.conn.execute("UPDATE ann_files SET name = ''")
    half = db.parent / "coffer.db-ann" / "m1-big~deadbeef.tmp"
    half.write_bytes(b"half a graph")
    assert "interrupted" in scan(db).check_shared()[0]
    assert_same_as_scan(graphed(db), db, ["big"])
    assert not half.exists()
    assert scan(db).check_shared() == []


def test_a_second_index_sees_the_writes_of_the_first(db: Path) -> None:
    writer, reader = graphed(db), graphed(db)
    add_documents(writer, "big", 60, 5, seed=1)
    assert_same_as_scan(reader, db, ["big"], limits=(5,))  # the reader holds the graph now
    new_ids = add_documents(writer, "big", 2, 5, seed=3)
    with writer.transaction():
        writer.delete_document(writer.documents("big")[0].id)
    fresh = writer.stored_vectors(MODEL, new_ids)
    for chunk_id, vector in fresh.items():
        assert reader.knn(MODEL, _floats(vector), ["big"], None, 1)[0].chunk_id == chunk_id
    assert_same_as_scan(reader, db, ["big"])


def test_another_process_writes_are_seen_by_a_loaded_graph(db: Path) -> None:
    reader = graphed(db)
    add_documents(reader, "big", 60, 5, seed=1)
    reader.knn(MODEL, queries(1)[0], ["big"], None, 5)
    code = (
        "import sys\n"
        "sys.path[:0] = [sys.argv[2], sys.argv[3]]\n"
        "from pathlib import Path\n"
        "from coffer_mcp.index.sqlite import SqliteIndex\n"
        "import test_ann\n"
        "index = SqliteIndex(Path(sys.argv[1]), ann_threshold=1, ann_background=False)\n"
        "test_ann.add_documents(index, 'big', 1, 4, seed=5)\n"
        "with index.transaction():\n"
        "    index.delete_document(index.documents('big')[1].id)\n"
    )
    subprocess.run([sys.executable, "-c", code, str(db), str(REPO), str(Path(__file__).parent)], check=True)
    added = reader.documents("big")[-1].id
    for chunk_id, vector in reader.stored_vectors(MODEL, [c for c, _ in reader.chunk_texts(added)]).items():
        assert reader.knn(MODEL, _floats(vector), ["big"], None, 1)[0].chunk_id == chunk_id
    assert_same_as_scan(reader, db, ["big"])


def test_deleting_a_knowledge_base_removes_its_vectors_from_results(db: Path) -> None:
    index = graphed(db)
    add_documents(index, "gone", 30, 5, seed=1)
    add_documents(index, "kept", 30, 5, seed=2)
    assert {row.kb for row in index.knn(MODEL, queries(1)[0], ["gone", "kept"], None, 50)} == {"gone", "kept"}
    with index.transaction():
        index.delete_kb("gone")
    assert {row.kb for row in index.knn(MODEL, queries(1)[0], ["gone", "kept"], None, 50)} == {"kept"}
    assert index.ann_status("gone") == {}
    assert_same_as_scan(index, db, ["gone", "kept"])


def test_the_graph_is_rebuilt_once_enough_vectors_changed(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ann, "COMPACT_MIN", 10)
    index = graphed(db)
    add_documents(index, "big", 60, 5, seed=1)
    index.knn(MODEL, queries(1)[0], ["big"], None, 5)
    first = index.ann_status("big")[MODEL]["built_at"]
    (before,) = (db.parent / "coffer.db-ann").glob("*.usearch")
    add_documents(index, "big", 4, 5, seed=4)  # 20 new vectors and 5 deleted: past 10
    with index.transaction():
        index.delete_document(index.documents("big")[0].id)
    assert_same_as_scan(index, db, ["big"])
    (after,) = (db.parent / "coffer.db-ann").glob("*.usearch")
    assert after != before
    assert index.ann_status("big")[MODEL]["built_at"] >= first
    (row,) = index.conn.execute("SELECT vectors FROM ann_files").fetchall()
    assert row[0] == index.ann_status("big")[MODEL]["vectors"] == 315  # the file holds the changes
    assert index.conn.execute("SELECT count(*) FROM ann_changes").fetchone()[0] == 0  # its log pruned
    assert index.check_shared() == []


def test_a_graph_is_built_in_the_background_while_the_scan_answers(db: Path) -> None:
    index = SqliteIndex(db, ann_threshold=1)
    add_documents(index, "big", 60, 5, seed=1)
    assert_same_as_scan(index, db, ["big"], limits=(5,))  # the first searches: the scan, a build started
    index.ann.join(timeout=60)
    assert uses_graph(index, "big")
    assert_same_as_scan(index, db, ["big"])


def _floats(blob: bytes) -> list[float]:
    import struct

    return list(struct.unpack(f"{len(blob) // 4}f", blob))


def test_a_bigger_graph_finds_nearly_every_nearest_neighbour(db: Path) -> None:
    index = SqliteIndex(db, ann_threshold=1, ann_background=False)
    add_documents(index, "big", 600, 5, seed=1)  # 3,000 vectors: searched through the graph proper
    exact, hits, total = scan(db), 0, 0
    for query in queries(11, n=30):
        expected = {row.chunk_id for row in exact.knn(MODEL, query, ["big"], None, 10)}
        hits += len(expected & {row.chunk_id for row in index.knn(MODEL, query, ["big"], None, 10)})
        total += len(expected)
    assert uses_graph(index, "big")
    assert hits / total >= 0.9


def test_loading_the_graph_library_first_does_not_break_onnxruntime_loaded_after() -> None:
    pytest.importorskip("onnxruntime")
    code = (
        "from coffer_mcp.index.sqlite import hnsw\n"
        "builder = hnsw.Builder(4)\n"
        "builder.add([(1, bytes(16))])\n"
        "import onnxruntime\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=False)
    assert (done.returncode, done.stdout.strip()) == (0, "ok"), done.stderr[-500:]
