"""Vector and hybrid retrieval through the service, with a deterministic embedder.

The real providers are tested in tests/embed/ and, end to end, in tests/services/test_hybrid_models.py.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from coffer_mcp import Coffer, load_settings
from coffer_mcp.models import Passage
from coffer_mcp.retrieval.search import fuse_rrf
from coffer_mcp.services import retrieval
from coffer_mcp.services.retrieval import Alongside
from tests.fakes import HashEmbedder

# Reads catch up on embeddings within a time budget; on a loaded machine 2 s may not embed a
# handful of documents, and these tests are about what is caught up, not about the budget.
READ_BUDGET = 600.0

DOCS = {
    "kayak.md": "# Kayaking\n\nPaddle strokes, spray decks and rolling a sea kayak in cold water.",
    "bread.md": "# Baking\n\nSourdough starter, flour, water, salt and a long cold proof.",
    "garden.md": "# Garden\n\nTomatoes need sun, water and staking; prune the suckers weekly.",
}


@pytest.fixture
def embedder() -> HashEmbedder:
    return HashEmbedder()


@pytest.fixture
def vcoffer(home: Path, embedder: HashEmbedder, backend_settings: dict[str, str]):
    settings = load_settings(home=home, embed_on_read_seconds=READ_BUDGET, **backend_settings)
    with Coffer(settings, embedder=embedder) as service:
        service.create_kb("v", vector=True)
        yield service


def fill(coffer: Coffer) -> dict[str, str]:
    return {name: coffer.add_document("v", name, text).document_id for name, text in DOCS.items()}


def vector_rows(coffer: Coffer) -> int:
    index = coffer.index
    return sum(info["vectors"] for kb in index.kb_stamps() for info in index.vector_status(kb).values())


def chunk_rows(coffer: Coffer) -> list[tuple]:
    """Every chunk as (id, document, position, text), read through the index port."""
    index = coffer.index
    rows = [
        (chunk_id, row.id, position, text)
        for kb in index.kb_stamps()
        for row in index.documents(kb)
        for position, (chunk_id, text) in enumerate(index.chunk_texts(row.id))
    ]
    return sorted(rows)


def test_metrics_say_how_many_vectors_and_how_they_are_searched(vcoffer: Coffer, index_backend: str) -> None:
    fill(vcoffer)
    status = vcoffer.describe_kb("v").vector_index
    assert list(status) == ["test:hash-64"]
    assert status["test:hash-64"].vectors == vector_rows(vcoffer) > 0
    # A small knowledge base is scanned exactly on SQLite; PostgreSQL searches through pgvector's HNSW.
    assert status["test:hash-64"].search == ("exact" if index_backend == "sqlite" else "hnsw")


def test_a_vector_knowledge_base_searches_hybrid_and_says_so(vcoffer: Coffer) -> None:
    ids = fill(vcoffer)
    result = vcoffer.search("v", "sea kayak rolling")
    assert result.strategy == "hybrid"
    assert result.passages[0].document_id == ids["kayak.md"]
    details = vcoffer.describe_kb("v")
    assert details.modes == ["grep", "keyword", "vector", "hybrid"]
    assert (details.vector, details.embedding_model, details.documents_degraded) == (True, "test:hash-64", 0)


def test_vector_and_keyword_strategies_can_be_forced(vcoffer: Coffer) -> None:
    fill(vcoffer)
    assert vcoffer.search("v", "tomatoes sun", strategy="vector").strategy == "vector"
    assert vcoffer.search("v", "tomatoes sun", strategy="keyword").strategy == "keyword"


def test_a_keyword_knowledge_base_stays_keyword_even_with_an_embedder(vcoffer: Coffer) -> None:
    vcoffer.create_kb("plain")
    vcoffer.add_document("plain", "a.md", "# A\n\nsea kayak")
    assert vcoffer.search("plain", "kayak").strategy == "keyword"
    assert vcoffer.search("plain", "kayak").hint is None  # keyword is what it has: nothing to explain
    assert vector_rows(vcoffer) == 0
    forced = vcoffer.search("plain", "kayak", strategy="vector")  # asked for by name: said why it did not run
    assert forced.strategy == "keyword"
    assert forced.hint is not None
    assert "'plain' has no vectors, so keyword search ran instead of vector" in forced.hint


def test_a_dead_provider_degrades_search_and_ingest_to_keyword(vcoffer: Coffer, embedder: HashEmbedder) -> None:
    embedder.failing = True
    ids = fill(vcoffer)
    assert vcoffer.describe_kb("v").documents_degraded == 3
    added = vcoffer.add_document("v", "late.md", "# Late\n\nadded while the provider is down")
    assert added.note is not None
    assert "searches find it by keyword only" in added.note
    result = vcoffer.search("v", "sourdough")
    assert (result.strategy, result.passages[0].document_id) == ("keyword", ids["bread.md"])
    assert result.hint is not None
    assert result.hint.startswith("The query could not be embedded, so keyword search ran instead of hybrid: ")


def test_a_recovered_provider_is_caught_up_on_the_next_read_without_rechunking(
    vcoffer: Coffer, embedder: HashEmbedder
) -> None:
    embedder.failing = True
    fill(vcoffer)
    before = chunk_rows(vcoffer)
    embedder.failing = False
    assert vcoffer.describe_kb("v").documents_degraded == 0
    assert chunk_rows(vcoffer) == before
    assert vector_rows(vcoffer) == len(before)
    assert vcoffer.search("v", "sourdough").strategy == "hybrid"
    assert vcoffer.add_document("v", "fresh.md", "# Fresh\n\nembedded at once").note is None


def test_a_new_model_is_used_once_made_the_stores_and_its_vectors_replace_the_old_ones(home: Path, embedder) -> None:
    with Coffer(load_settings(home=home, embed_on_read_seconds=READ_BUDGET), embedder=embedder) as first:
        first.create_kb("v", vector=True)
        fill(first)
        chunks = chunk_rows(first)
    wider = HashEmbedder(dims=96, name="wider")
    with Coffer(load_settings(home=home, embed_on_read_seconds=READ_BUDGET), embedder=wider) as second:
        assert second.search("v", "tomatoes staking").strategy == "keyword"  # its own model is not the store's
        assert (wider.calls, second.describe_kb("v").embedding_model) == (0, "test:hash-64")
        change = second.use_embedding_model(confirm=True)
        assert (change.previous, change.model, change.dimensions) == ("test:hash-64", "test:wider-96", 96)
        assert [(k.kb, k.embedded, k.remaining) for k in change.knowledge_bases] == [("v", 3, 0)]
        assert change.removed_models == ["test:hash-64"]
        assert second.describe_kb("v").embedding_model == "test:wider-96"
        result = second.search("v", "tomatoes staking")
        assert result.strategy == "hybrid"
        assert result.passages
        models = [tuple(r) for r in second.index.conn.execute("SELECT identity, dimensions FROM embedding_models")]
        assert models == [("test:wider-96", 96)]
        assert second.index.conn.execute("SELECT count(*) FROM vec_chunks_2").fetchone()[0] == len(chunks)
        assert chunk_rows(second) == chunks


def test_a_process_whose_model_cannot_embed_leaves_another_models_vectors_in_use(
    home: Path, embedder: HashEmbedder, backend_settings: dict[str, str]
) -> None:
    # A terminal without the client's model settings (its default model unreachable) used to mark
    # every document it read as failed: the client's model then counted them degraded and embedded them again.
    settings = load_settings(home=home, embed_on_read_seconds=READ_BUDGET, **backend_settings)
    with Coffer(settings, embedder=embedder) as client:
        client.create_kb("v", vector=True)
        fill(client)
        calls = embedder.calls
    other = HashEmbedder(dims=96, name="unreachable")
    other.failing = True
    with Coffer(settings, embedder=other) as terminal:
        assert terminal.search("v", "tomatoes staking").strategy == "keyword"
        details = terminal.describe_kb("v")  # the store's model is the client's: every document has its vectors
        assert (details.documents_degraded, details.embedding_model) == (0, "test:hash-64")
    with Coffer(settings, embedder=embedder) as client:
        details = client.describe_kb("v")
        assert (details.documents_degraded, details.embedding_model) == (0, "test:hash-64")
        assert client.search("v", "tomatoes staking").strategy == "hybrid"
    assert embedder.calls == calls + 1  # the query only: no document embedded again


def test_turning_vector_off_drops_the_vectors_and_on_embeds_again(vcoffer: Coffer) -> None:
    fill(vcoffer)
    assert vector_rows(vcoffer) > 0
    off = vcoffer.update_kb("v", vector=False)
    assert (off.vector, off.modes, vector_rows(vcoffer)) == (False, ["grep", "keyword"], 0)
    on = vcoffer.update_kb("v", vector=True)
    assert on.documents_degraded == 0
    assert vector_rows(vcoffer) == len(chunk_rows(vcoffer))


def test_editing_and_deleting_keep_vectors_in_step_with_chunks(vcoffer: Coffer) -> None:
    ids = fill(vcoffer)
    vcoffer.edit_document("v", ids["garden.md"], "# Garden\n\n" + "Roses and compost. " * 80)
    assert vector_rows(vcoffer) == len(chunk_rows(vcoffer))
    vcoffer.delete_document("v", ids["kayak.md"])
    assert vector_rows(vcoffer) == len(chunk_rows(vcoffer))
    vcoffer.delete_kb("v")
    assert vector_rows(vcoffer) == 0


def test_dropping_the_database_and_reindexing_restores_identical_hybrid_results(home: Path, embedder) -> None:
    queries = ["sea kayak", "cold proof flour", "prune tomatoes"]
    with Coffer(load_settings(home=home, embed_on_read_seconds=READ_BUDGET), embedder=embedder) as service:
        service.create_kb("v", vector=True)
        fill(service)
        before = [[(p.document_id, p.position, p.score) for p in service.search("v", q).passages] for q in queries]
    (home / "coffer.db").unlink()
    for suffix in ("-wal", "-shm"):
        Path(f"{home / 'coffer.db'}{suffix}").unlink(missing_ok=True)
    with Coffer(load_settings(home=home, embed_on_read_seconds=READ_BUDGET), embedder=embedder) as service:
        [result] = service.reindex_all()
        assert result.embedded == 3
        after = [[(p.document_id, p.position, p.score) for p in service.search("v", q).passages] for q in queries]
    assert after == before


def test_reindexing_again_computes_no_vector_for_chunks_that_did_not_change(
    vcoffer: Coffer, embedder: HashEmbedder, home: Path
) -> None:
    ids = fill(vcoffer)
    embedded_at_ingest = len(embedder.texts)
    for _ in range(2):
        result = vcoffer.reindex("v")
        assert (result.indexed, result.embedded) == (3, 0)
    assert len(embedder.texts) == embedded_at_ingest
    assert vector_rows(vcoffer) == len(chunk_rows(vcoffer))
    assert vcoffer.verify("v").ok
    found = vcoffer.search("v", "sea kayak rolling")
    assert found.strategy == "hybrid"
    assert found.passages[0].document_id == ids["kayak.md"]

    docs = home / "knowledge" / "v" / "docs"
    bread, garden = docs / f"{ids['bread.md']}.md", docs / f"{ids['garden.md']}.md"
    bread.write_text(bread.read_text(encoding="utf-8").replace("long cold proof", "short warm proof"), encoding="utf-8")
    # The title is part of every embedded text: a new one needs new vectors, even for the same chunks.
    garden.write_text(garden.read_text(encoding="utf-8").replace("title: Garden", "title: Allotment"), encoding="utf-8")
    before_edits = len(embedder.texts)  # the search above embedded its query
    result = vcoffer.reindex("v")
    assert result.embedded == 2
    new_texts = embedder.texts[before_edits:]
    assert any("short warm proof" in t for t in new_texts)
    assert any(t.startswith("Allotment") for t in new_texts)
    assert not any("kayak" in t for t in new_texts)
    assert vcoffer.verify("v").ok
    assert vcoffer.describe_kb("v").documents_degraded == 0


def test_rrf_rewards_passages_both_lists_rank() -> None:
    def passage(doc: str, position: int = 0) -> Passage:
        return Passage(
            text="t",
            document_id=doc,
            title="T",
            score=1.0,
            position=position,
            heading_path=[],
            chunk_id=f"{doc}:{position}",
            kb="v",
        )

    keyword = [passage("a"), passage("b"), passage("c")]
    vector = [passage("d"), passage("b"), passage("a", 1)]
    fused = fuse_rrf([keyword, vector], top_k=4)
    assert [(p.document_id, p.position) for p in fused] == [("b", 0), ("a", 0), ("d", 0), ("a", 1)]
    assert fused[0].score == pytest.approx(2 / 62, abs=1e-6)


def test_convex_fusion_never_lets_vector_only_passages_displace_the_keyword_leader() -> None:
    from coffer_mcp.retrieval.search import fuse_convex

    def passage(doc: str, score: float) -> Passage:
        return Passage(
            text="t", document_id=doc, title="T", score=score, position=0, heading_path=[], chunk_id=f"{doc}:0", kb="v"
        )

    keyword = [passage("a", 9.0), passage("b", 5.0), passage("c", 1.0)]
    noise = [passage("x", 0.31), passage("y", 0.30), passage("b", 0.29)]  # a useless vector ranking
    fused = fuse_convex(keyword, noise, top_k=3)
    assert fused[0].document_id == "a"
    agreeing = [passage("b", 0.9), passage("a", 0.2)]
    assert [p.document_id for p in fuse_convex(keyword, agreeing, top_k=2)] == ["b", "a"]


def test_a_hybrid_search_runs_its_keyword_half_in_a_worker_and_ranks_as_in_turn(
    vcoffer: Coffer, monkeypatch: pytest.MonkeyPatch
) -> None:
    fill(vcoffer)
    threads = []
    real = retrieval.keyword_search

    def keyword_search(*args: Any) -> list[Passage]:
        threads.append(threading.current_thread().name)
        return real(*args)

    monkeypatch.setattr(retrieval, "keyword_search", keyword_search)
    queries = ["sea kayak rolling", "cold water", "sourdough salt proof", "tomatoes"]
    alongside = [vcoffer.search("v", query, 3) for query in queries]
    assert len(threads) == len(queries)
    assert all(name.startswith("coffer-search") for name in threads)
    vcoffer.retrieval.alongside = Alongside(0)  # in turn, in the caller's thread
    in_turn = [vcoffer.search("v", query, 3) for query in queries]
    assert threads[len(queries) :] == [threading.current_thread().name] * len(queries)
    assert [r.strategy for r in alongside] == ["hybrid"] * len(queries)
    assert [r.passages for r in alongside] == [r.passages for r in in_turn]


def test_a_call_runs_in_the_callers_thread_when_every_worker_is_busy() -> None:
    workers, release = Alongside(1), threading.Event()
    busy = workers.start(lambda: (release.wait(60), threading.current_thread().name)[1])
    inline = workers.start(lambda: threading.current_thread().name)
    assert inline() == threading.current_thread().name  # not queued behind the busy worker
    release.set()
    assert busy().startswith("coffer-search")

    def fails() -> None:
        raise ValueError("from the worker")

    with pytest.raises(ValueError, match="from the worker"):
        workers.start(fails)()
    workers.close()
    assert workers.start(lambda: 42)() == 42  # closed: runs in the caller's thread
