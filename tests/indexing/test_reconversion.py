"""``reindex --force`` converts again, from its original, each document an older converter made.

"An older converter" is simulated the way an upgrade leaves it: the document's frontmatter names
another ``conversion_engine`` (``markitdown``, Coffer's converter before its own) and its body is
that converter's output, with a matching ``content_sha256`` so it is not an edit.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client

from coffer_mcp import Coffer, load_settings
from coffer_mcp.convert import convert
from coffer_mcp.mcp_server import build_server
from coffer_mcp.store import body_sha256, parse_document, render_document
from tests.conftest import FIXTURES

OLD_BODY = "# Old Output\n\nText the old converter made, with the word quokkaold in it."


def as_if_converted_by_markitdown(coffer: Coffer, kb: str, doc_id: str, body: str | None = OLD_BODY) -> Path:
    """Rewrite a document's file as an older converter would have left it (``body`` None: keep the body)."""
    path = coffer.open_kb(kb)[0].doc(doc_id)
    meta, old = parse_document(path.read_text(encoding="utf-8"))
    if body is None:  # the body and its recorded hash stay: an edited document stays edited
        body = old
    else:
        meta.update(title="Old Output", content_sha256=body_sha256(body))
    meta["conversion_engine"] = "markitdown"
    path.write_text(render_document(meta, body), encoding="utf-8")
    return path


def front(path: Path) -> tuple[dict, str]:
    meta, body = parse_document(path.read_text(encoding="utf-8"))
    return meta, body


def ingest_fixture(coffer: Coffer, kb: str, name: str) -> str:
    return coffer.add_document(kb, name, (FIXTURES / name).read_bytes()).document_id


def test_a_forced_reindex_converts_a_document_of_an_older_converter_again_keeping_its_identity(
    coffer: Coffer, notes: str
) -> None:
    doc_id = ingest_fixture(coffer, notes, "sample.docx")
    meta_at_ingest, _ = front(coffer.open_kb(notes)[0].doc(doc_id))
    path = as_if_converted_by_markitdown(coffer, notes, doc_id)
    assert [p.document_id for p in coffer.search(notes, "quokkaold").passages] == [doc_id]

    result = coffer.reindex(notes)

    assert (result.reconverted, result.not_reconverted) == (1, [])
    meta, body = front(path)
    today = convert("sample.docx", (FIXTURES / "sample.docx").read_bytes())
    assert body.strip() == today.markdown.strip()
    assert meta["conversion_engine"] == today.engine != "markitdown"
    assert meta["title"] == "Quarterly Bramble Report" == coffer.list_documents(notes).documents[0].title
    assert meta["content_sha256"] == body_sha256(today.markdown)
    assert meta["source_mode"] == "converted"
    for kept in ("id", "created_at", "original_filename", "original_format", "source_sha256"):
        assert meta[kept] == meta_at_ingest[kept]
    assert meta["converted_at"] > meta_at_ingest["converted_at"]
    assert coffer.search(notes, "quokkaold").passages == []
    assert [p.document_id for p in coffer.search(notes, "bramble yield forecast").passages][:1] == [doc_id]
    assert coffer.reindex(notes).reconverted == 0  # converted by today's engine now


def test_a_title_set_by_hand_survives_reconversion(coffer: Coffer, notes: str) -> None:
    doc_id = ingest_fixture(coffer, notes, "sample.docx")
    path = as_if_converted_by_markitdown(coffer, notes, doc_id)
    meta, body = front(path)
    path.write_text(render_document({**meta, "title": "Bramble notes for Ana"}, body), encoding="utf-8")

    assert coffer.reindex(notes).reconverted == 1
    assert front(path)[0]["title"] == "Bramble notes for Ana"
    assert "bramble yield forecast" in front(path)[1]


def test_an_edited_document_keeps_its_markdown_and_is_reported(coffer: Coffer, notes: str) -> None:
    doc_id = ingest_fixture(coffer, notes, "sample.docx")
    coffer.edit_document(notes, doc_id, "# My bramble notes\n\nRewritten by hand: wombatedit.")
    path = as_if_converted_by_markitdown(coffer, notes, doc_id, body=None)
    before = path.read_text(encoding="utf-8")

    result = coffer.reindex(notes)

    assert result.reconverted == 0
    [skip] = result.not_reconverted
    assert (skip.document_id, skip.reason, skip.engine) == (doc_id, "edited", "markitdown")
    assert path.read_text(encoding="utf-8") == before
    assert [p.document_id for p in coffer.search(notes, "wombatedit").passages] == [doc_id]


def test_a_missing_original_or_a_failed_conversion_keeps_the_markdown_and_the_rest_goes_on(
    coffer: Coffer, notes: str
) -> None:
    kb = coffer.open_kb(notes)[0]
    gone, broken, fine = (ingest_fixture(coffer, notes, name) for name in ("sample.docx", "sample.pptx", "sample.pdf"))
    paths = {doc_id: as_if_converted_by_markitdown(coffer, notes, doc_id) for doc_id in (gone, broken, fine)}
    (kb.raw / f"{gone}.docx").unlink()
    # An original that no longer converts (the hash is updated: it is the file it was made from).
    truncated = (FIXTURES / "sample.pptx").read_bytes()[:300]
    (kb.raw / f"{broken}.pptx").write_bytes(truncated)
    meta, body = front(paths[broken])
    meta["source_sha256"] = hashlib.sha256(truncated).hexdigest()
    paths[broken].write_text(render_document(meta, body), encoding="utf-8")
    before = {doc_id: front(path)[1] for doc_id, path in paths.items()}

    result = coffer.reindex(notes)

    assert result.reconverted == 1
    assert "Copper meadow telemetry" in front(paths[fine])[1]
    reasons = {skip.document_id: skip.reason for skip in result.not_reconverted}
    assert reasons == {gone: "original_missing", broken: "conversion_failed"}
    assert all(skip.hint for skip in result.not_reconverted)
    assert [front(paths[d])[1] for d in (gone, broken)] == [before[gone], before[broken]]
    assert front(paths[gone])[0]["conversion_engine"] == "markitdown"


def test_only_a_forced_reindex_converts_again(coffer: Coffer, notes: str) -> None:
    doc_id = ingest_fixture(coffer, notes, "sample.docx")
    path = as_if_converted_by_markitdown(coffer, notes, doc_id)

    assert coffer.reindex(notes, force=False).reconverted == 0
    coffer.search(notes, "bramble")  # a read reconciles, and converts nothing either
    meta, body = front(path)
    assert (body.strip(), meta["conversion_engine"]) == (OLD_BODY, "markitdown")


def test_the_command_line_reindex_says_what_it_converted_again_and_what_it_kept(home: Path, tmp_path: Path) -> None:
    def coffer_cli(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "coffer_mcp", "--home", str(home), *argv],
            capture_output=True,
            text=True,
            timeout=180,
            env={**os.environ, "COFFER_EMBEDDING_PROVIDER": "none"},
            check=False,
        )

    coffer_cli("kb", "create", "notes")
    ingested = coffer_cli(
        "kb", "ingest", "notes", str(FIXTURES / "sample.docx"), str(FIXTURES / "sample.pdf"), "--json"
    )
    ids = {Path(i["path"]).name: i["document_id"] for r in json.loads(ingested.stdout) for i in r["items"]}
    with Coffer(load_settings(home=home)) as service:
        as_if_converted_by_markitdown(service, "notes", ids["sample.docx"])
        as_if_converted_by_markitdown(service, "notes", ids["sample.pdf"])
        (service.open_kb("notes")[0].raw / f"{ids['sample.pdf']}.pdf").unlink()

    reindexed = coffer_cli("kb", "reindex", "notes")

    assert reindexed.returncode == 0, reindexed.stderr
    first, *rest = reindexed.stdout.strip().splitlines()
    assert first.endswith(", 1 re-converted, 1 not re-converted")
    assert f"not re-converted: {ids['sample.pdf']} 'Old Output' (markitdown): original_missing:" in rest[0]
    assert "--replace" in rest[1]


@pytest.mark.anyio
async def test_the_reindex_tool_reports_documents_converted_again(coffer: Coffer, notes: str) -> None:
    doc_id = ingest_fixture(coffer, notes, "sample.docx")
    as_if_converted_by_markitdown(coffer, notes, doc_id)
    with anyio.fail_after(120):
        async with Client(build_server(coffer)) as client:
            plain = await client.call_tool("coffer__reindex_knowledge_base", {"kb": notes})
            forced = await client.call_tool("coffer__reindex_knowledge_base", {"kb": notes, "force": True})
    assert plain.structured_content["reconverted"] == 0
    assert forced.structured_content["reconverted"] == 1
    assert "not_reconverted" not in forced.structured_content  # empty lists are left out
