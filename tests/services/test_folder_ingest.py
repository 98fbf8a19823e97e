"""A long folder ingest: its small files prepared ahead in worker processes, its rows committed by batch."""

from __future__ import annotations

from pathlib import Path

import pytest

from coffer_mcp import Coffer
from coffer_mcp.services import prefetch

FILES = prefetch.MIN_FILES + 10


def _folder(root: Path) -> Path:
    root.mkdir()
    for i in range(FILES):
        heading = f"# Note {i}\n\n" if i % 3 else ""
        (root / f"note-{i:04d}.md").write_text(f"{heading}Body {i}: " + "tides and herons. " * (i % 90), "utf-8")
    (root / "note-empty.md").write_text("", encoding="utf-8")
    (root / "table.csv").write_text("name,value\nalpha,1\n", encoding="utf-8")
    return root


def _documents(coffer: Coffer, kb: str) -> dict[str, tuple[str, str, int, int]]:
    found = {}
    for info in coffer.list_documents(kb, limit=1000).documents:
        source = Path(info.source_path or "").name
        chunks = coffer.index.chunk_texts(info.document_id)
        found[source] = (info.title, info.content_sha256, len(chunks), hash(tuple(text for _, text in chunks)))
    return found


def test_a_long_folder_prepared_by_worker_processes_gives_the_documents_an_ingest_in_process_gives(
    coffer: Coffer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _folder(tmp_path / "notes")
    monkeypatch.setattr(prefetch, "START_SECONDS", 60.0)  # every file the workers' (a short run may not wait)
    coffer.create_kb("ahead")
    ahead = coffer.ingest_path("ahead", folder)
    monkeypatch.setattr(prefetch, "MIN_FILES", 10**9)  # the same folder, every file prepared in this process
    coffer.create_kb("here")
    here = coffer.ingest_path("here", folder)
    assert (ahead.created, ahead.rejected) == (here.created, here.rejected) == (FILES + 1, 1)
    assert [(Path(i.path).name, i.status, i.code) for i in ahead.items] == [
        (Path(i.path).name, i.status, i.code) for i in here.items
    ]
    assert _documents(coffer, "ahead") == _documents(coffer, "here")
    assert coffer.verify("ahead").problems == []
