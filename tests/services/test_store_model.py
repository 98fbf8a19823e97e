"""The store's embedding model: recorded with the first vectors, followed by every process, changed only on purpose.

The probe that found it: a server started with only ``COFFER_HOME`` took a store embedded with
MiniLM for one due for re-embedding with its default model, and began re-embedding it; two servers
of a team with different environments would have fought over one PostgreSQL store.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coffer_mcp import Coffer, load_settings
from coffer_mcp.errors import ConfirmationRequiredError, EmbeddingError
from coffer_mcp.indexing.vectorize import embed_document
from coffer_mcp.store import StoreModel, read_store_model, write_store_model
from tests.embed.conftest import MODEL_NAME, local_model_dir
from tests.embed.fake_openai_server import FakeOpenAIServer, fake_openai_server
from tests.fakes import HashEmbedder

READ_BUDGET = 600.0  # reads catch up on every due embedding: these tests are about which model, not the budget
DOCS = {
    "kayak.md": "# Kayaking\n\nPaddle strokes, spray decks and rolling a sea kayak in cold water.",
    "bread.md": "# Baking\n\nSourdough starter, flour, water, salt and a long cold proof.",
    "garden.md": "# Garden\n\nTomatoes need sun, water and staking; prune the suckers weekly.",
}
KEY_ENV = "COFFER_TEST_EMBEDDING_KEY"


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with fake_openai_server() as running:
        yield running


def openai(server: FakeOpenAIServer, model: str = "fake-embed") -> dict[str, Any]:
    return {"embedding_provider": "openai", "embedding_base_url": server.base_url, "embedding_model": model}


def service(
    home: Path, backend: dict[str, str], embedder: HashEmbedder | None = None, *, environ: Any = None, **settings: Any
) -> Coffer:
    chosen = load_settings(environ, home=home, embed_on_read_seconds=READ_BUDGET, **backend, **settings)
    return Coffer(chosen, embedder=embedder)


def fill(coffer: Coffer, kb: str = "v", docs: dict[str, str] = DOCS) -> None:
    coffer.create_kb(kb, vector=True)
    for name, text in docs.items():
        coffer.add_document(kb, name, text)


def documents_embedded(server: FakeOpenAIServer) -> list[str]:
    """The texts the server embedded as documents (title, blank line, chunk), not as queries."""
    texts = [text for request in server.requests for text in _inputs(request.body)]
    return [text for text in texts if "\n\n" in text]


def _inputs(body: dict[str, Any]) -> list[str]:
    given = body.get("input")
    return [given] if isinstance(given, str) else list(given or [])


def on_file(home: Path) -> str | None:
    """The identity of the store's model as its home records it."""
    model = read_store_model(home / "embedding.yaml")
    return model.identity if model is not None else None


def in_index(coffer: Coffer) -> str | None:
    model = coffer.index.store_model()
    return model.identity if model is not None else None


def models_of(coffer: Coffer, kb: str = "v") -> set[str | None]:
    return {row.embedding_model for row in coffer.index.documents(kb)}


# -- recording ---------------------------------------------------------------------------------


def test_the_first_vectors_record_the_model_in_the_home_and_in_the_index(
    home: Path, backend_settings: dict[str, str]
) -> None:
    with service(home, backend_settings, HashEmbedder()) as coffer:
        coffer.create_kb("v", vector=True)
        assert read_store_model(home / "embedding.yaml") is None  # no vectors yet, no model
        assert coffer.embedding_status().use == "unrecorded"
        coffer.add_document("v", "kayak.md", DOCS["kayak.md"])
        recorded = read_store_model(home / "embedding.yaml")
        assert recorded is not None
        assert (recorded.identity, recorded.dimensions, recorded.provider) == ("test:hash-64", 64, "test")
        assert coffer.index.store_model() == recorded
        assert coffer.embedding_status().use == "same"


def test_an_openai_model_is_recorded_with_its_server_and_the_name_of_its_key_variable_never_the_key(
    home: Path, server: FakeOpenAIServer
) -> None:
    environ = {KEY_ENV: "sk-secret-value"}
    with service(home, {}, environ=environ, embedding_api_key_env=KEY_ENV, **openai(server)) as coffer:
        fill(coffer)
    text = (home / "embedding.yaml").read_text(encoding="utf-8")
    recorded = read_store_model(home / "embedding.yaml")
    assert recorded == StoreModel(
        "openai:fake-embed",
        32,
        "openai",
        model="fake-embed",
        base_url=server.base_url,
        api_key_env=KEY_ENV,
        recorded_at=recorded.recorded_at if recorded else "",
    )
    assert "sk-secret-value" not in text


# -- processes whose settings disagree ---------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "said"),
    [
        ({}, "settings name no embedding model, so it uses the store's: openai:fake-embed"),
        (
            {"embedding_model": "BAAI/bge-small-en-v1.5"},
            "settings name the embedding model fastembed:BAAI/bge-small-en-v1.5, but the store's is openai:fake-embed",
        ),
    ],
    ids=["names-no-model", "names-another-model"],
)
def test_a_process_whose_settings_disagree_uses_the_stores_model_says_so_once_and_re_embeds_nothing(
    home: Path,
    backend_settings: dict[str, str],
    server: FakeOpenAIServer,
    settings: dict[str, Any],
    said: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    with service(home, backend_settings, **openai(server)) as first:
        fill(first)
    embedded = len(documents_embedded(server))
    with caplog.at_level(logging.WARNING), service(home, backend_settings, **settings) as other:
        for query in ("sea kayak", "sourdough proof", "tomatoes"):
            assert other.search("v", query).strategy == "hybrid"
        assert len(documents_embedded(server)) == embedded  # the queries only
        details = other.describe_kb("v")
        assert (details.embedding_model, details.documents_degraded) == ("openai:fake-embed", 0)
        status = other.embedding_status()
        assert (status.use, status.identity, status.store_model) == ("store", "openai:fake-embed", "openai:fake-embed")
        other.add_document("v", "late.md", "# Late\n\nadded by the other process")  # embedded with the store's model
        assert models_of(other) == {"openai:fake-embed"}
        assert any(said in note for note in other.doctor(check_embedder=False).notes)
    told = [r.getMessage() for r in caplog.records if said in r.getMessage()]
    assert len(told) == 1, told


def test_a_process_that_cannot_build_the_stores_model_does_no_vector_work_and_says_why(
    home: Path, backend_settings: dict[str, str], server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    keyed = {"environ": {KEY_ENV: "sk-1"}, "embedding_api_key_env": KEY_ENV, **openai(server)}
    with service(home, backend_settings, **keyed) as first:
        fill(first)
    requests = len(server.requests)
    own = HashEmbedder(name="own")
    with service(home, backend_settings, own) as other:
        result = other.search("v", "sea kayak rolling")
        assert result.strategy == "keyword"
        assert result.hint is not None
        assert "The store's embedding model is openai:fake-embed" in result.hint
        assert f"it needs an API key in the environment variable {KEY_ENV}, which is not set here" in result.hint
        assert "coffer embeddings use --confirm" in result.hint
        added = other.add_document("v", "late.md", "# Late\n\nadded where the model cannot be built")
        assert added.note is not None
        assert "until a process that can build the store's embedding model embeds it" in added.note
        assert other.describe_kb("v").documents_degraded == 1  # due: waits for a process that has the model
        report = other.doctor(check_embedder=False)
        assert report.embedder.use == "refused"
        assert any(KEY_ENV in problem for problem in report.problems)
    assert (own.calls, len(server.requests)) == (0, requests)
    with service(home, backend_settings, **keyed) as first:  # a process with the model embeds what waited
        assert first.search("v", "late").strategy == "hybrid"
        assert first.describe_kb("v").documents_degraded == 0
    monkeypatch.setenv(KEY_ENV, "sk-1")
    with service(home, backend_settings) as third:  # the key is here now: the store's model is built
        assert third.embedding_status().use == "store"
        assert third.search("v", "sea kayak").strategy == "hybrid"


def test_a_fastembed_model_is_built_from_its_recorded_folder_where_that_folder_exists(home: Path) -> None:
    folder = local_model_dir()
    recorded = StoreModel(f"fastembed:{MODEL_NAME}", 384, "fastembed", model=MODEL_NAME, model_path=str(folder))
    write_store_model(home / "embedding.yaml", recorded)
    with service(home, {}) as here:
        status = here.embedding_status()
        assert (status.use, status.identity) == ("store", f"fastembed:{MODEL_NAME}")
    write_store_model(home / "embedding.yaml", StoreModel(**{**recorded.to_dict(), "model_path": "/nowhere/minilm"}))
    with service(home, {}) as elsewhere:
        status = elsewhere.embedding_status()
        assert (status.use, status.identity) == ("refused", None)
        assert status.note is not None
        assert "its model folder /nowhere/minilm is not on this machine" in status.note
        assert f"COFFER_EMBEDDING_MODEL={MODEL_NAME}" in status.note


def test_a_server_with_only_coffer_home_searches_a_minilm_store_with_minilm_and_re_embeds_nothing(home: Path) -> None:
    # The probe: the store was embedded with MiniLM from a local folder; a server without any
    # COFFER_EMBEDDING_* variable began re-embedding it with its default model.
    minilm = {"embedding_model": MODEL_NAME, "embedding_model_path": str(local_model_dir())}
    home.mkdir(parents=True)
    (home / "config.yaml").write_text("embedding:\n  service: off\n", encoding="utf-8")  # no shared model service
    with service(home, {}, **minilm) as first:
        fill(first)
        before = sorted((row.id, row.embedding_model) for row in first.index.documents("v"))
    environ = {key: value for key, value in os.environ.items() if not key.startswith("COFFER_")}
    search = subprocess.run(
        [sys.executable, "-m", "coffer_mcp", "kb", "search", "v", "paddling a boat", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**environ, "COFFER_HOME": str(home)},
        check=False,
    )
    assert search.returncode == 0, search.stderr
    assert json.loads(search.stdout)["strategy"] == "hybrid"
    assert f"uses the store's: fastembed:{MODEL_NAME}" in search.stderr
    with service(home, {}, embedding_provider="none") as after:
        assert sorted((row.id, row.embedding_model) for row in after.index.documents("v")) == before


# -- changing the model ------------------------------------------------------------------------


def test_changing_the_model_needs_confirmation_then_re_embeds_every_vector_knowledge_base(
    home: Path, backend_settings: dict[str, str]
) -> None:
    old, new = HashEmbedder(name="old"), HashEmbedder(dims=96, name="new")
    with service(home, backend_settings, old) as first:
        fill(first, "a")
        fill(first, "b", {"one.md": "# One\n\nthe only note"})
        first.create_kb("plain")
        first.add_document("plain", "p.md", "# P\n\nkeyword only")
    with service(home, backend_settings, new) as second:
        with pytest.raises(ConfirmationRequiredError) as refused:
            second.use_embedding_model()
        assert "from test:old-64 to test:new-96" in refused.value.message
        assert "4 documents of 2 vector knowledge bases" in refused.value.hint
        assert (new.calls, on_file(home)) == (0, "test:old-64")
        change = second.use_embedding_model(confirm=True)
        assert (change.previous, change.model, change.removed_models) == ("test:old-64", "test:new-96", ["test:old-64"])
        assert [(k.kb, k.embedded, k.remaining) for k in change.knowledge_bases] == [("a", 3, 0), ("b", 1, 0)]
        assert second.index.vector_models() == {"test:new-96": 96}
        assert in_index(second) == "test:new-96"
        assert models_of(second, "a") == models_of(second, "b") == {"test:new-96"}
        assert second.search("a", "sea kayak").strategy == "hybrid"
    with service(home, backend_settings, old) as first:  # the old model is no longer the store's
        assert first.search("a", "sea kayak").strategy == "keyword"
        assert first.embedding_status().use == "refused"
    assert on_file(home) == "test:new-96"


class FailingAfter(HashEmbedder):
    """An embedder whose provider goes down after ``calls`` document embeddings."""

    def __init__(self, calls: int) -> None:
        super().__init__(dims=96, name="new")
        self.budget = calls

    def embed_documents(self, texts: Any) -> list[list[float]]:
        if self.budget <= 0:
            raise EmbeddingError("the provider went down", hint="bring it back")
        self.budget -= 1
        return super().embed_documents(texts)


def test_an_interrupted_change_leaves_the_rest_due_and_the_next_run_finishes_it(
    home: Path, backend_settings: dict[str, str]
) -> None:
    with service(home, backend_settings, HashEmbedder(name="old")) as first:
        fill(first)
    flaky = FailingAfter(calls=2)  # the probe of dimensions() costs none; two documents, then down
    with service(home, backend_settings, flaky) as second:
        change = second.use_embedding_model(confirm=True)
        assert [(k.kb, k.embedded, k.remaining) for k in change.knowledge_bases] == [("v", 2, 1)]
        assert change.warning is not None
        assert "Run the command again to continue" in change.warning
        assert change.removed_models == []  # the old vectors stay until every document has new ones
        assert set(second.index.vector_models()) == {"test:old-64", "test:new-96"}
        assert second.describe_kb("v").documents_degraded == 1
    with service(home, backend_settings, HashEmbedder(dims=96, name="new")) as again:
        done = again.use_embedding_model()  # the store's model already: nothing to confirm, it continues
        assert [(k.kb, k.embedded, k.remaining) for k in done.knowledge_bases] == [("v", 1, 0)]
        assert done.removed_models == ["test:old-64"]
        assert again.describe_kb("v").documents_degraded == 0


def test_a_process_still_embedding_with_the_old_model_stores_none_of_it_once_the_model_changed(home: Path) -> None:
    with service(home, {}, HashEmbedder(name="old")) as before:
        fill(before)
        embedder = before.embedder  # held by a long run of embedding, say
        assert embedder is not None
        with service(home, {}, HashEmbedder(dims=96, name="new")) as changer:
            changer.use_embedding_model(confirm=True)
        doc = before.index.documents("v")[0]
        assert embed_document(before.index, "v", doc.id, embedder) is None
        assert models_of(before) == {"test:new-96"}
        assert before.index.vector_models() == {"test:new-96": 96}
        assert before.embedding_status().use == "refused"


# -- many processes, one store -----------------------------------------------------------------


def test_servers_with_different_settings_on_one_postgres_store_never_re_embed_it(
    home: Path, postgres_url: str, server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    shared = {"index_backend": "postgres", "database_url": postgres_url}
    keyed = {"environ": {KEY_ENV: "sk-1"}, "embedding_api_key_env": KEY_ENV, **openai(server)}
    refusing_model = HashEmbedder(name="elsewhere")
    with service(home, shared, **keyed) as team, service(home, shared, refusing_model) as refusing:
        fill(team)
        assert refusing.embedding_status().use == "refused"  # no key on this host
        monkeypatch.setenv(KEY_ENV, "sk-1")  # the next host has it
        with service(home, shared, HashEmbedder(name="laptop")) as following:
            for round_ in range(3):
                following.add_document("v", f"f{round_}.md", f"# F{round_}\n\nfollowing server's note {round_}")
                refusing.add_document("v", f"r{round_}.md", f"# R{round_}\n\nrefusing server's note {round_}")
                assert following.search("v", "note").strategy == "hybrid"
                assert team.search("v", "note").strategy == "hybrid"
                refused = refusing.search("v", "note")
                assert refused.strategy == "keyword"
                assert refused.hint is not None
                assert "The store's embedding model is openai:fake-embed" in refused.hint
        assert models_of(team) == {"openai:fake-embed"}
        assert team.index.vector_models() == {"openai:fake-embed": 32}
    texts = documents_embedded(server)
    assert len(texts) == len(set(texts)) == len(DOCS) + 6  # each document embedded once, by the store's model
    assert refusing_model.calls == 0


def test_a_store_embedded_before_the_record_keeps_the_model_of_its_vectors(home: Path) -> None:
    with service(home, {}, HashEmbedder(name="old")) as first:
        fill(first)
        first.index.conn.execute("DELETE FROM store_model")  # type: ignore[attr-defined]  # as before the record
    (home / "embedding.yaml").unlink()
    other = HashEmbedder(name="other")
    with service(home, {}, other) as second:
        status = second.embedding_status()
        assert (status.use, status.store_model) == ("refused", "test:old-64")
        second.add_document("v", "late.md", "# Late\n\nadded meanwhile")
        assert second.reindex("v").embedded == 0
    with service(home, {}, HashEmbedder(name="old")) as first:
        assert first.search("v", "late").strategy == "hybrid"
        assert models_of(first) == {"test:old-64"}
    assert other.calls == 0
    assert on_file(home) == "test:old-64"


def test_a_rebuilt_index_keeps_the_stores_model_from_the_home(home: Path) -> None:
    with service(home, {}, HashEmbedder(name="old")) as first:
        fill(first)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{home / 'coffer.db'}{suffix}").unlink(missing_ok=True)
    other = HashEmbedder(name="other")
    with service(home, {}, other) as second:
        [result] = second.reindex_all()
        assert (result.documents, result.embedded) == (3, 0)
        assert second.search("v", "kayak").strategy == "keyword"
    with service(home, {}, HashEmbedder(name="old")) as first:
        [result] = first.reindex_all()
        assert result.embedded == 3
        assert in_index(first) == "test:old-64"
    assert other.calls == 0
