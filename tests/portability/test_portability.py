"""Packs: export a knowledge base to one verified file, import it elsewhere (untrusted input)."""

from __future__ import annotations

import copy
import gzip
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from coffer_mcp import Coffer, load_settings
from coffer_mcp.errors import InvalidArgumentError, KnowledgeBaseExistsError, KnowledgeBaseNotFoundError
from coffer_mcp.portability import PackError
from tests.conftest import FIXTURES
from tests.fakes import HashEmbedder

# Reads catch up on embeddings within a time budget; on a loaded machine 2 s may not embed a
# handful of documents, and these tests are about what is caught up, not about the budget.
READ_BUDGET = 600.0

MIXED = ["sample.md", "sample.csv", "sample.docx", "sample.pdf", "sample_zh.md"]
QUERIES = [
    "heron protocol handshake",
    "Obsidian Kettle",
    "bramble yield forecast",
    "copper meadow telemetry",
    "向量检索",
]
DOCS = {
    "kayak.md": "# Kayaking\n\nPaddle strokes, spray decks and rolling a sea kayak in cold water.",
    "bread.md": "# Baking\n\nSourdough starter, flour, water, salt and a long cold proof.",
    "garden.md": "# Garden\n\nTomatoes need sun, water and staking; prune the suckers weekly.",
}
Members = list[tuple[tarfile.TarInfo, bytes | None]]


def open_service(home: Path, embedder: HashEmbedder | None = None, **settings) -> Coffer:
    return Coffer(
        load_settings(home=home, **{"embed_on_read_seconds": READ_BUDGET, **settings}),
        embedder=embedder or HashEmbedder(),
    )


def fill(coffer: Coffer, kb: str, docs: dict[str, str] = DOCS) -> dict[str, str]:
    return {name: coffer.add_document(kb, name, text).document_id for name, text in docs.items()}


def results(coffer: Coffer, kb: str, strategy: str) -> list[list[tuple[str, int, float]]]:
    return [
        [(p.document_id, p.position, p.score) for p in coffer.search(kb, q, top_k=8, strategy=strategy).passages]
        for q in QUERIES
    ]


def files_of(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def store_state(coffer: Coffer) -> tuple[list[str], dict[str, int]]:
    """Every path under COFFER_HOME (but the database and lock files) and the row counts."""
    home = coffer.paths.home
    paths = sorted(
        str(p.relative_to(home))
        for p in home.rglob("*")
        if not p.name.startswith("coffer.db") and "locks" not in p.relative_to(home).parts
    )
    tables = ("knowledge_bases", "documents", "chunks", "audit_log")
    return paths, {t: coffer.index.conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables}


def read_members(pack: Path) -> Members:
    with tarfile.open(pack, "r:gz") as tar:
        return [(m, tar.extractfile(m).read() if m.isreg() else None) for m in tar]


def write_members(pack: Path, members: Members) -> Path:
    with tarfile.open(pack, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for member, data in members:
            info = copy.copy(member)
            if data is None:
                tar.addfile(info)  # a header only: links, devices, or a size claim with no data
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return pack


def edit_manifest(members: Members, edit: Callable[[dict], None]) -> Members:
    manifest = json.loads(members[0][1])
    edit(manifest)
    return [(members[0][0], json.dumps(manifest).encode()), *members[1:]]


def named(members: Members, prefix: str) -> int:
    return next(i for i, (info, _) in enumerate(members) if info.name.startswith(prefix))


@pytest.fixture(scope="module")
def pack(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small vector KB exported with its vectors."""
    root = tmp_path_factory.mktemp("source")
    with open_service(root / "home") as source:
        source.create_kb("notes", "kayaks and bread", vector=True)
        fill(source, "notes")
        return Path(source.export_kb("notes", root / "notes.cofferpack", with_vectors=True).path)


def test_a_pack_without_source_maps_stays_format_version_1_which_older_coffers_read(tmp_path: Path) -> None:
    with open_service(tmp_path / "home") as source:
        source.create_kb("pages")
        source.add_document("pages", "page.html", (FIXTURES / "sample.html").read_bytes())  # no pages nor lines
        pack = Path(source.export_kb("pages", tmp_path / "pages.cofferpack").path)
    manifest = json.loads(read_members(pack)[0][1])
    assert manifest["format_version"] == 1
    assert not any(name.endswith(".map.json") for name in manifest["files"])


@pytest.fixture
def target(tmp_path: Path):
    """A store that already holds one knowledge base, to check a refused import leaves it alone."""
    with open_service(tmp_path / "target") as service:
        service.create_kb("keep")
        fill(service, "keep", {"a.md": "# A\n\nalpha"})
        yield service


# -- round trip --------------------------------------------------------------------------------


def test_a_mixed_format_kb_round_trips_with_its_vectors_into_a_fresh_home_without_embedding(tmp_path: Path) -> None:
    with open_service(tmp_path / "a") as source:
        source.create_kb("mixed", vector=True)
        for name in MIXED:
            assert source.ingest_path("mixed", FIXTURES / name).created == 1
        keyword, hybrid = results(source, "mixed", "keyword"), results(source, "mixed", "hybrid")
        exported = source.export_kb("mixed", tmp_path / "mixed.cofferpack", with_vectors=True)
        source_files = files_of(source.paths.kb("mixed").root)
    assert (exported.documents, exported.raw_files, exported.embedding_model) == (5, 5, "test:hash-64")
    embedder = HashEmbedder()
    embedder.failing = True  # any embedding during the import would fail it
    with open_service(tmp_path / "b", embedder) as dest:
        imported = dest.import_pack(tmp_path / "mixed.cofferpack", as_name="copy")
        assert embedder.calls == 0
        assert (imported.created, imported.documents, imported.vectors_used, imported.documents_to_embed) == (
            True,
            5,
            5,
            0,
        )
        assert files_of(dest.paths.kb("copy").root) == source_files
        embedder.failing = False
        assert results(dest, "copy", "keyword") == keyword
        assert results(dest, "copy", "hybrid") == hybrid
        assert embedder.calls == len(QUERIES)  # the queries, and no document
        assert dest.describe_kb("copy").documents_degraded == 0


def listing(coffer: Coffer, kb: str) -> dict[str, dict]:
    """Every document's fields (details included) by original filename, without its id and path."""
    page = coffer.list_documents(kb, limit=100)
    return {d.original_filename: d.model_dump(exclude={"document_id", "kb", "path"}) for d in page.documents}


def test_a_round_trip_keeps_tags_times_to_the_millisecond_and_source_fields(tmp_path: Path) -> None:
    with open_service(tmp_path / "a") as source:
        source.create_kb("notes")
        ids = fill(source, "notes")
        source.edit_document("notes", ids["kayak.md"], tags=["boats", "water"])
        source.ingest_path("notes", FIXTURES / "sample.docx", tags=["office"])
        edited = source.paths.kb("notes").doc(ids["bread.md"])  # edited by hand: its time is the file's
        edited.write_text(edited.read_text(encoding="utf-8") + "\nRye too.\n", encoding="utf-8")
        os.utime(edited, ns=(1_786_002_962_713_456_789, 1_786_002_962_713_456_789))
        before = listing(source, "notes")
        assert before["bread.md"]["updated_at"] == "2026-08-06T07:56:02.713Z"
        source.export_kb("notes", tmp_path / "p.cofferpack")
        copied = source.import_pack(tmp_path / "p.cofferpack", as_name="copy")  # new ids, rewritten files
        assert len(copied.renamed_ids) == 4
        assert listing(source, "copy") == before
    with open_service(tmp_path / "b") as dest:
        dest.import_pack(tmp_path / "p.cofferpack")
        assert listing(dest, "notes") == before
        assert files_of(dest.paths.kb("notes").root) == files_of(tmp_path / "a" / "knowledge" / "notes")


def test_the_pack_is_a_gzip_tar_whose_first_member_is_a_manifest_of_every_file(pack: Path) -> None:
    assert pack.read_bytes()[:2] == b"\x1f\x8b"
    members = read_members(pack)
    assert members[0][0].name == "manifest.json"
    manifest = json.loads(members[0][1])
    files = {info.name: data for info, data in members[1:]}
    assert set(manifest["files"]) == set(files)
    for name, data in files.items():
        assert manifest["files"][name] == {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    assert manifest["counts"] == {"documents": 3, "raw_files": 3, "vectors": 3}
    # Each document's source map (where its lines are in its original) makes it format version 2.
    assert sum(name.endswith(".map.json") for name in files) == 3
    assert (manifest["format"], manifest["format_version"], manifest["kb"]["name"]) == ("coffer-pack", 2, "notes")
    assert manifest["kb"]["config"]["vector"] is True
    assert (manifest["vectors"]["model"], manifest["vectors"]["dimensions"]) == ("test:hash-64", 64)
    assert len(files["vectors.f32"]) == 3 * 64 * 4
    assert all(info.isreg() and info.mode == 0o644 for info, _ in members)


def test_an_export_never_overwrites_unless_asked_and_leaves_no_temp_file(tmp_path: Path) -> None:
    with open_service(tmp_path / "home") as service:
        service.create_kb("notes")
        fill(service, "notes")
        out = tmp_path / "out" / "notes.cofferpack"
        with pytest.raises(InvalidArgumentError, match="does not exist"):
            service.export_kb("notes", out)
        out.parent.mkdir()
        first = service.export_kb("notes", out)
        with pytest.raises(InvalidArgumentError, match="already exists"):
            service.export_kb("notes", out)
        second = service.export_kb("notes", out, overwrite=True)
        with pytest.raises(InvalidArgumentError, match="inside the Coffer store"):
            service.export_kb("notes", service.paths.kb("notes").root / "x.cofferpack")
    assert (first.vectors, second.documents) == (0, 3)
    assert sorted(p.name for p in out.parent.iterdir()) == ["notes.cofferpack"]
    assert hashlib.sha256(out.read_bytes()).hexdigest() == second.sha256


def test_without_vectors_the_documents_stay_due_and_the_next_search_embeds_them(tmp_path: Path) -> None:
    with open_service(tmp_path / "a") as source:
        source.create_kb("notes", vector=True)
        fill(source, "notes")
        source.export_kb("notes", tmp_path / "p.cofferpack")
    embedder = HashEmbedder()
    with open_service(tmp_path / "b", embedder) as dest:
        imported = dest.import_pack(tmp_path / "p.cofferpack")
        assert (imported.kb, imported.vectors_used, imported.documents_to_embed, embedder.calls) == ("notes", 0, 3, 0)
        assert dest.search("notes", "sea kayak").strategy == "hybrid"
        assert dest.describe_kb("notes").documents_degraded == 0


def test_vectors_of_another_model_are_not_used_and_are_made_again_later(pack: Path, tmp_path: Path) -> None:
    other = HashEmbedder(name="other")
    with open_service(tmp_path / "b", other) as dest:
        imported = dest.import_pack(pack)
        assert (imported.vectors_used, imported.documents_to_embed, other.calls) == (0, 3, 0)
        assert "test:hash-64" in imported.note
        assert "test:other-64" in imported.note
        dest.reindex("notes", force=False)
        assert dest.describe_kb("notes").documents_degraded == 0


# -- untrusted input ---------------------------------------------------------------------------


def flip_a_byte_of_a_doc(members: Members) -> Members:
    i = named(members, "docs/")
    data = bytearray(members[i][1])
    data[-2] ^= 0x01
    return [*members[:i], (members[i][0], bytes(data)), *members[i + 1 :]]


def change_a_manifest_count(members: Members) -> Members:
    return edit_manifest(members, lambda m: m["counts"].update(documents=m["counts"]["documents"] + 1))


def change_the_vector_count(members: Members) -> Members:
    return edit_manifest(members, lambda m: m["counts"].update(vectors=2))


def add_a_parent_member(members: Members) -> Members:
    return [*members, (tarfile.TarInfo("docs/../../evil.md"), b"# evil")]


def add_an_absolute_member(members: Members) -> Members:
    return [*members, (tarfile.TarInfo("/tmp/evil.md"), b"# evil")]


def _special(members: Members, kind: bytes, linkname: str = "") -> Members:
    i = named(members, "docs/")
    info = tarfile.TarInfo(members[i][0].name)
    info.type, info.linkname = kind, linkname
    return [*members[:i], (info, None), *members[i + 1 :]]


def make_a_doc_a_symlink(members: Members) -> Members:
    return _special(members, tarfile.SYMTYPE, "/etc/passwd")


def make_a_doc_a_hard_link(members: Members) -> Members:
    return _special(members, tarfile.LNKTYPE, "kb.yaml")


def make_a_doc_a_fifo(members: Members) -> Members:
    return _special(members, tarfile.FIFOTYPE)


def claim_a_huge_member_in_its_header(members: Members) -> Members:
    i = named(members, "raw/")
    info = copy.copy(members[i][0])
    info.size = 10**12
    return [*members[:i], (info, None)]


def claim_a_huge_member_in_the_manifest(members: Members) -> Members:
    name = members[named(members, "raw/")][0].name
    return edit_manifest(members, lambda m: m["files"][name].update(size=10**13))


def inflate_a_member_honestly(members: Members) -> Members:
    """A gzip bomb: 4 MiB of zeros (compressing to a few KiB), the manifest telling the truth."""
    i = named(members, "raw/")
    zeros = bytes(4 * 1024 * 1024)
    name = members[i][0].name
    members = [*members[:i], (members[i][0], zeros), *members[i + 1 :]]
    return edit_manifest(
        members, lambda m: m["files"][name].update(sha256=hashlib.sha256(zeros).hexdigest(), size=len(zeros))
    )


def add_an_oversized_pax_header(members: Members) -> Members:
    i = named(members, "docs/")
    info = copy.copy(members[i][0])
    info.pax_headers = {"comment": "x" * 1_000_000}
    return [*members[:i], (info, members[i][1]), *members[i + 1 :]]


def add_an_unlisted_member(members: Members) -> Members:
    return [*members, (tarfile.TarInfo("notes.txt"), b"hello")]


def duplicate_a_member(members: Members) -> Members:
    return [*members, members[named(members, "docs/")]]


def drop_a_member(members: Members) -> Members:
    i = named(members, "raw/")
    return [*members[:i], *members[i + 1 :]]


def put_the_manifest_last(members: Members) -> Members:
    return [*members[1:], members[0]]


def claim_a_newer_format(members: Members) -> Members:
    return edit_manifest(members, lambda m: m.update(format_version=99))


def disagree_with_kb_yaml(members: Members) -> Members:
    return edit_manifest(members, lambda m: m["kb"]["config"].update(chunk_size=2 * m["kb"]["config"]["chunk_size"]))


TAMPERINGS = [
    (flip_a_byte_of_a_doc, "does not match the sha256"),
    (change_a_manifest_count, "counts 4 documents"),
    (change_the_vector_count, "counts 2 vectors"),
    (add_a_parent_member, "climbs out"),
    (add_an_absolute_member, "absolute path"),
    (make_a_doc_a_symlink, "a link"),
    (make_a_doc_a_hard_link, "a link"),
    (make_a_doc_a_fifo, "device or pipe"),
    (claim_a_huge_member_in_its_header, "claims 1,000,000,000,000 bytes"),
    (claim_a_huge_member_in_the_manifest, "accepts at most"),
    (inflate_a_member_honestly, "accepts at most"),
    (add_an_oversized_pax_header, "oversized tar header"),
    (add_an_unlisted_member, "unexpected member"),
    (duplicate_a_member, "twice"),
    (drop_a_member, "lacks 1 member"),
    (put_the_manifest_last, "not manifest.json"),
    (claim_a_newer_format, "format version 99"),
    (disagree_with_kb_yaml, "disagrees with the settings"),
]


@pytest.mark.parametrize(("tamper", "reason"), TAMPERINGS, ids=[f.__name__ for f, _ in TAMPERINGS])
def test_a_tampered_pack_is_refused_and_the_store_is_unchanged(
    tamper: Callable[[Members], Members], reason: str, pack: Path, target: Coffer, tmp_path: Path
) -> None:
    bad = write_members(tmp_path / "bad.cofferpack", tamper(read_members(pack)))
    assert refused(target, bad, reason, max_bytes=1024 * 1024).hint


def refused(target: Coffer, bad: Path, reason: str, **options: Any) -> PackError:
    """The ``invalid_pack`` error that importing ``bad`` raises (saying ``reason``), the store left as it was."""
    before = store_state(target)
    with pytest.raises(PackError, match=reason) as caught:
        target.import_pack(bad, **options)
    assert caught.value.code == "invalid_pack"
    assert store_state(target) == before
    return caught.value


def test_a_file_that_is_not_a_pack_is_refused(target: Coffer, tmp_path: Path) -> None:
    junk = tmp_path / "junk.cofferpack"
    junk.write_bytes(b"\x1f\x8b" + bytes(range(256)) * 4)
    before = store_state(target)
    with pytest.raises(PackError, match="not a readable"):
        target.import_pack(junk)
    with pytest.raises(InvalidArgumentError, match="Cannot read"):
        target.import_pack(tmp_path / "missing.cofferpack")
    assert store_state(target) == before


def cut_the_trailer(data: bytes) -> bytes:
    return data[:-10]  # `head -c $((size-10))`: the gzip trailer and the end of the deflate stream


def cut_half_the_length(data: bytes) -> bytes:
    return data[:-2]  # only half of the uncompressed size that ends a gzip stream


def append_junk(data: bytes) -> bytes:
    return data + b"junk after the pack\n"  # `cat pack junk > pack2`


def append_zeros(data: bytes) -> bytes:
    return data + bytes(4096)  # the gzip module skips zero padding silently


def append_the_pack_again(data: bytes) -> bytes:
    return data + data  # two gzip members: the gzip module reads them as one stream


def change_the_checksum(data: bytes) -> bytes:
    return data[:-8] + bytes([data[-8] ^ 1]) + data[-7:]  # the CRC-32 of the uncompressed stream


ENDINGS = [
    (cut_the_trailer, "is cut short"),
    (cut_half_the_length, "is cut short"),
    (append_junk, "bytes after its end"),
    (append_zeros, "bytes after its end"),
    (append_the_pack_again, "bytes after its end"),
    (change_the_checksum, "does not match its checksum"),
]


@pytest.mark.parametrize(("damage", "reason"), ENDINGS, ids=[f.__name__ for f, _ in ENDINGS])
def test_a_pack_cut_short_or_followed_by_other_bytes_is_refused_and_the_store_is_unchanged(
    damage: Callable[[bytes], bytes], reason: str, pack: Path, target: Coffer, tmp_path: Path
) -> None:
    # Every member is hashed, so these packs imported with the right content, but a copy cut short
    # (or written over a longer file) is not the pack that was exported: it must not pass as one.
    bad = tmp_path / "bad.cofferpack"
    bad.write_bytes(damage(pack.read_bytes()))
    assert "copy" in refused(target, bad, reason, as_name="copy").hint.lower()


def test_the_command_line_refuses_a_pack_cut_short_and_says_to_copy_it_again(pack: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    cut = tmp_path / "notes.cofferpack"
    cut.write_bytes(pack.read_bytes()[:-10])
    done = subprocess.run(
        [sys.executable, "-m", "coffer_mcp", "--home", str(home), "kb", "import", str(cut)],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "COFFER_EMBEDDING_PROVIDER": "none"},
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.startswith("coffer: The pack is cut short"), done.stderr
    assert "hint: Copy the pack again" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (home / "knowledge" / "notes").exists()
    assert [p.name for p in (home / "knowledge").iterdir()] == []  # no staging folder left


NOT_PACKS = [
    ("sample.docx", "a ZIP archive"),
    ("sample.pdf", "a PDF document"),
    ("sample.md", "a text file"),
]


@pytest.mark.parametrize(("fixture", "found"), NOT_PACKS)
def test_a_document_passed_as_a_pack_is_called_not_a_pack_not_a_damaged_one(
    fixture: str, found: str, target: Coffer
) -> None:
    before = store_state(target)
    with pytest.raises(PackError, match=f"is not a Coffer pack: it is {found}") as caught:
        target.import_pack(FIXTURES / fixture)
    assert "gzip-compressed tar" in caught.value.message
    assert "coffer kb ingest" in caught.value.hint
    assert "damaged" not in caught.value.message + caught.value.hint
    assert store_state(target) == before


def test_a_tar_gz_that_is_not_a_pack_is_called_not_a_pack(target: Coffer, tmp_path: Path) -> None:
    other = write_members(tmp_path / "backup.tar.gz", [(tarfile.TarInfo("notes.txt"), b"hello")])
    with pytest.raises(PackError, match="not a Coffer pack") as caught:
        target.import_pack(other)
    assert "damaged" not in caught.value.message + caught.value.hint
    plain = tmp_path / "notes.txt.gz"
    with gzip.open(plain, "wb") as handle:
        handle.write(b"just some text\n" * 100)
    with pytest.raises(PackError, match="is not a Coffer pack: it is gzip-compressed, but not a tar archive"):
        target.import_pack(plain)


# -- names and merge ---------------------------------------------------------------------------


def test_an_existing_name_is_refused_unless_merging(pack: Path, target: Coffer) -> None:
    target.import_pack(pack)
    before = store_state(target)
    with pytest.raises(KnowledgeBaseExistsError) as caught:
        target.import_pack(pack)
    assert "--merge" in caught.value.hint
    with pytest.raises(KnowledgeBaseExistsError):
        target.import_pack(pack, as_name="keep")
    assert store_state(target) == before
    merged = target.import_pack(pack, merge=True)
    assert (merged.documents_added, len(merged.skipped), merged.conflicts) == (0, 3, [])
    assert {s.reason for s in merged.skipped} == {"already_present"}


@pytest.mark.parametrize("as_name", ["kep", None], ids=["as-name", "pack-name"])
def test_a_merge_into_a_knowledge_base_that_does_not_exist_is_refused_naming_those_that_do(
    pack: Path, target: Coffer, as_name: str | None
) -> None:
    before = store_state(target)
    with pytest.raises(KnowledgeBaseNotFoundError) as caught:
        target.import_pack(pack, as_name=as_name, merge=True)
    name = as_name or "notes"
    assert caught.value.code == "unknown_kb"
    assert (
        caught.value.message == f"Knowledge base '{name}' does not exist. --merge adds to an existing knowledge base."
    )
    assert caught.value.hint == (
        f"Existing knowledge bases: keep. To import the pack as a new knowledge base '{name}', leave out --merge."
    )
    assert store_state(target) == before
    assert [kb.name for kb in target.list_kbs()] == ["keep"]


def test_a_merge_skips_originals_already_there_keeps_ids_and_reports_conflicts(pack: Path, tmp_path: Path) -> None:
    with open_service(tmp_path / "b") as dest:
        first = dest.import_pack(pack)
        ids = {row["original_filename"]: row["id"] for row in dest.index.conn.execute("SELECT * FROM documents")}
        dest.edit_document("notes", ids["bread.md"], "# Baking\n\nRye, not sourdough.")
        dest.delete_document("notes", ids["garden.md"])
        dest.create_kb("other")
        fill(dest, "other", {"kayak.md": DOCS["kayak.md"], "new.md": "# New\n\nsomething else"})
        merged = dest.import_pack(pack, merge=True)
        again = dest.import_pack(pack, as_name="other", merge=True)
        garden = dest.read_document("notes", ids["garden.md"])
    assert first.created
    assert not merged.created
    assert [c.document_id for c in merged.conflicts] == [ids["bread.md"]]
    assert [(s.document_id, s.reason) for s in merged.skipped] == [(ids["kayak.md"], "already_present")]
    assert (merged.documents_added, merged.documents, merged.renamed_ids) == (1, 3, {})
    assert "Tomatoes" in garden.markdown  # the deleted document came back, under its id
    duplicate = [s for s in again.skipped if s.reason == "duplicate_source"]
    assert [s.document_id for s in duplicate] == [ids["kayak.md"]]
    assert duplicate[0].existing_document_id != ids["kayak.md"]
    assert again.documents_added == 2
    assert len(again.renamed_ids) == 2  # ids used by 'notes' are renewed


def test_importing_beside_its_source_gives_the_copy_new_ids_and_leaves_the_source_alone(tmp_path: Path) -> None:
    with open_service(tmp_path / "home") as service:
        service.create_kb("notes", vector=True)
        ids = fill(service, "notes")
        service.export_kb("notes", tmp_path / "p.cofferpack", with_vectors=True)
        source_files = files_of(service.paths.kb("notes").root)
        copied = service.import_pack(tmp_path / "p.cofferpack", as_name="copy")
        assert set(copied.renamed_ids) == set(ids.values())
        assert copied.vectors_used == 3
        assert files_of(service.paths.kb("notes").root) == source_files
        assert service.describe_kb("notes").document_count == service.describe_kb("copy").document_count == 3
        hit = service.search("copy", "sourdough").passages[0]
        assert hit.document_id == copied.renamed_ids[ids["bread.md"]]
        assert service.read_document("copy", hit.document_id).metadata["id"] == hit.document_id


def test_a_merge_reports_a_document_whose_tags_title_or_own_frontmatter_differ_as_a_conflict(
    pack: Path, tmp_path: Path
) -> None:
    with open_service(tmp_path / "b") as dest:
        dest.import_pack(pack)
        ids = {d.original_filename: d.document_id for d in dest.list_documents("notes").documents}
        kb = dest.paths.kb("notes")
        dest.edit_document("notes", ids["kayak.md"], tags=["boats"])
        bread = kb.doc(ids["bread.md"]).read_text(encoding="utf-8")
        kb.doc(ids["bread.md"]).write_text(bread.replace("title: Baking", "title: Bread\nauthor: me"), encoding="utf-8")
        garden = kb.doc(ids["garden.md"]).read_text(encoding="utf-8")  # only Coffer's bookkeeping differs
        kb.doc(ids["garden.md"]).write_text(
            re.sub("updated_at: .*", "updated_at: '2031-01-01T00:00:00.000Z'", garden), encoding="utf-8"
        )
        before = files_of(kb.root)
        merged = dest.import_pack(pack, merge=True)
        assert files_of(kb.root) == before  # the documents here were kept
    conflicts = {c.document_id: c for c in merged.conflicts}
    assert set(conflicts) == {ids["kayak.md"], ids["bread.md"]}
    assert conflicts[ids["kayak.md"]].differences == ["tags"]
    assert "tags (here boats, in the pack none)" in conflicts[ids["kayak.md"]].message
    assert conflicts[ids["bread.md"]].differences == ["title", "metadata"]
    assert "'author'" in conflicts[ids["bread.md"]].message
    assert [(s.document_id, s.reason) for s in merged.skipped] == [(ids["garden.md"], "already_present")]


@pytest.mark.parametrize("mtime", ["nan", "inf", "-1.5", "1e400", "99999999999999999999", "x"])
def test_a_pack_whose_file_time_is_absurd_imports_with_the_time_ignored(
    mtime: str, pack: Path, target: Coffer, tmp_path: Path
) -> None:
    members = read_members(pack)
    i = named(members, "docs/")
    info = copy.copy(members[i][0])
    info.pax_headers = {"mtime": mtime}
    odd = write_members(tmp_path / "odd.cofferpack", [*members[:i], (info, members[i][1]), *members[i + 1 :]])
    assert target.import_pack(odd).documents == 3
