"""A typo in a document's frontmatter, made by hand: never silent, never made permanent.

The file's block does not parse, so it gives no metadata: the document keeps the metadata its row
last had (and its body is indexed as it is), ``verify`` and ``read_document`` say what is wrong
and where, and every write that would rewrite the file over the block is refused, leaving it as
the user left it (an outside trial lost source, dates and conversion record to one ``kb tag``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from coffer_mcp import Coffer
from coffer_mcp.cli import main
from coffer_mcp.errors import FrontmatterError
from coffer_mcp.settings import load_settings
from tests.indexing.test_reconversion import as_if_converted_by_markitdown
from tests.mcp_clients import call, call_error, client_for

TYPO = "title: [Plan: draft"  # an unclosed flow sequence, typed in an editor


def ingest_and_break(coffer: Coffer, kb: str, tmp_path: Path) -> tuple[str, Path, dict]:
    """A document ingested from a file with a tag, then its title mistyped by hand; with its listing before."""
    source = tmp_path / "plan.md"
    source.write_text("# Plan\n\nship the kayaks on friday", encoding="utf-8")
    doc_id = coffer.ingest_path(kb, str(source), tags=["important"]).items[0].document_id
    [before] = coffer.list_documents(kb).documents
    path = coffer.paths.kb(kb).doc(doc_id)
    text = path.read_text(encoding="utf-8")
    assert "\ntitle: Plan\n" in text
    path.write_text(text.replace("\ntitle: Plan\n", f"\n{TYPO}\n"), encoding="utf-8")
    return doc_id, path, before.model_dump()


def test_a_yaml_typo_keeps_the_documents_metadata_and_its_body_searchable(
    coffer: Coffer, notes: str, tmp_path: Path
) -> None:
    doc_id, path, before = ingest_and_break(coffer, notes, tmp_path)
    kept = ("title", "tags", "original_filename", "original_format", "source_path", "created_at", "source_sha256")

    [listed] = coffer.list_documents(notes).documents
    assert {key: listed.model_dump()[key] for key in kept} == {key: before[key] for key in kept}
    assert listed.source_mode == "converted"  # the body is as Coffer wrote it
    assert coffer.list_documents(notes, filters={"tags": ["important"]}).total == 1
    assert [p.document_id for p in coffer.search(notes, "kayaks").passages] == [doc_id]
    read = coffer.read_document(notes, doc_id)
    assert read.warning is not None
    assert str(path) in read.warning
    assert "line 3, column 8" in read.warning  # where the bracket opens
    assert read.metadata is not None
    assert (read.metadata["tags"], read.metadata["source_path"]) == (["important"], before["source_path"])

    # The body edited by hand while the YAML is still broken: indexed, the metadata still kept.
    path.write_text(path.read_text(encoding="utf-8").replace("friday", "monday"), encoding="utf-8")
    [listed] = coffer.list_documents(notes, filters={"tags": ["important"]}).documents
    assert (listed.source_mode, listed.created_at) == ("edited", before["created_at"])
    assert [p.document_id for p in coffer.search(notes, "monday").passages] == [doc_id]
    assert path.read_text(encoding="utf-8").count(TYPO) == 1  # reads never rewrite the file


@pytest.mark.sqlite_only  # deletes coffer.db
def test_after_the_index_is_rebuilt_a_yaml_typo_still_keeps_what_the_blocks_other_entries_say(
    coffer: Coffer, notes: str, tmp_path: Path, home: Path
) -> None:
    """No row is left to keep the metadata from: the entries the typo does not touch still parse."""
    doc_id, path, before = ingest_and_break(coffer, notes, tmp_path)
    coffer.close()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{home / 'coffer.db'}{suffix}").unlink(missing_ok=True)

    with Coffer(load_settings(home=home)) as fresh:
        [listed] = fresh.list_documents(notes, filters={"tags": ["important"]}).documents
        kept = ("tags", "original_filename", "original_format", "source_path", "created_at", "source_sha256")
        assert {key: listed.model_dump()[key] for key in kept} == {key: before[key] for key in kept}
        assert (listed.document_id, listed.title, listed.source_mode) == (doc_id, "Plan", "converted")
        read = fresh.read_document(notes, doc_id)
        assert read.warning is not None
        assert read.metadata is not None
        assert (read.metadata["tags"], read.metadata["created_at"]) == (["important"], before["created_at"])
        assert not fresh.verify(notes).ok
    assert path.read_text(encoding="utf-8").count(TYPO) == 1


def test_verify_reports_a_frontmatter_that_does_not_parse_until_it_is_fixed(
    coffer: Coffer, notes: str, tmp_path: Path
) -> None:
    doc_id, path, _ = ingest_and_break(coffer, notes, tmp_path)
    coffer.reindex(notes)  # a reindex cannot repair it: only the user can
    report = coffer.verify(notes)
    assert not report.ok
    [problem] = report.problems
    assert doc_id in problem
    assert str(path) in problem
    assert "line 3, column 8" in problem

    path.write_text(path.read_text(encoding="utf-8").replace(TYPO, "title: Plan (draft)"), encoding="utf-8")
    assert coffer.verify(notes).ok  # the fixed file is taken up first, as a read takes it
    assert coffer.read_document(notes, doc_id).warning is None
    [listed] = coffer.list_documents(notes).documents
    assert (listed.title, listed.tags) == ("Plan (draft)", ["important"])


def test_no_write_rewrites_a_file_whose_frontmatter_does_not_parse(coffer: Coffer, notes: str, tmp_path: Path) -> None:
    doc_id, path, _ = ingest_and_break(coffer, notes, tmp_path)
    broken = path.read_bytes()
    (tmp_path / "plan.md").write_text("# Plan\n\nthe source changed", encoding="utf-8")
    for edit in ({"content": "# Plan\n\nan agent's new body"}, {"tags": ["fixed"]}):
        with pytest.raises(FrontmatterError) as caught:
            coffer.edit_document(notes, doc_id, **edit)
        assert str(path) in caught.value.message
        assert "line 3, column 8" in caught.value.message
        assert "by hand" in caught.value.hint
        assert path.read_bytes() == broken
    # A re-ingest of its source: reported for that file, as a folder ingest reports each refusal.
    [item] = coffer.ingest_path(notes, str(tmp_path / "plan.md"), replace=True).items
    assert (item.status, item.code) == ("rejected", "invalid_frontmatter")
    assert path.read_bytes() == broken
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temp file left
    assert coffer.list_documents(notes, filters={"tags": ["important"]}).total == 1


def test_a_forced_reindex_does_not_convert_again_over_a_frontmatter_that_does_not_parse(
    coffer: Coffer, notes: str
) -> None:
    doc_id = coffer.add_document(notes, "plan.md", "# Plan\n\nship it").document_id
    path = as_if_converted_by_markitdown(coffer, notes, doc_id)
    coffer.list_documents(notes)  # indexed as converted by an older converter
    path.write_text(path.read_text(encoding="utf-8").replace("title: Old Output", TYPO), encoding="utf-8")
    broken = path.read_bytes()

    result = coffer.reindex(notes)

    assert result.reconverted == 0
    [skip] = result.not_reconverted
    assert (skip.document_id, skip.reason, skip.engine) == (doc_id, "invalid_frontmatter", "markitdown")
    assert path.read_bytes() == broken


@pytest.mark.anyio
async def test_an_agent_is_told_what_is_wrong_and_its_edit_is_refused(
    coffer: Coffer, notes: str, tmp_path: Path
) -> None:
    doc_id, path, _ = ingest_and_break(coffer, notes, tmp_path)
    broken = path.read_bytes()
    async with client_for(coffer) as client:
        read = await call(client, "coffer__read_document", kb=notes, doc_id=doc_id)
        error = await call_error(client, "coffer__edit_document", kb=notes, doc_id=doc_id, content="# New\n\nbody")
    assert "line 3, column 8" in read["warning"]
    assert read["metadata"]["tags"] == ["important"]
    assert error["code"] == "invalid_frontmatter"
    assert str(path) in error["message"]
    assert "by hand" in error["hint"]
    assert path.read_bytes() == broken


@pytest.mark.sqlite_only  # the command line opens the home's own index
def test_the_command_line_refuses_to_tag_it_and_verify_fails(
    coffer: Coffer, notes: str, tmp_path: Path, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc_id, path, _ = ingest_and_break(coffer, notes, tmp_path)
    broken = path.read_bytes()
    capsys.readouterr()
    assert main(["--home", str(home), "kb", "tag", notes, doc_id, "fixed"]) == 1
    assert "line 3, column 8" in capsys.readouterr().err
    assert path.read_bytes() == broken
    assert main(["--home", str(home), "kb", "verify", notes]) == 1
    assert "frontmatter does not parse" in capsys.readouterr().out
    assert main(["--home", str(home), "kb", "read", notes, doc_id]) == 0
    out, err = capsys.readouterr()
    assert "kayaks" in out
    assert "warning" in err
    assert "line 3, column 8" in err
