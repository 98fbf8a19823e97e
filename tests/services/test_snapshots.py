"""Snapshots and restore: undo a bad batch of edits, crash-safely."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from coffer_mcp import Coffer, load_settings
from coffer_mcp.errors import KnowledgeBaseNotFoundError
from coffer_mcp.portability import SnapshotError, SnapshotNotFoundError, _snapshots, recover_interrupted_restores
from tests.conftest import REPO
from tests.fakes import HashEmbedder

# Reads catch up on embeddings within a time budget; on a loaded machine 2 s may not embed a
# handful of documents, and these tests are about what is caught up, not about the budget.
READ_BUDGET = 600.0

DOCS = {
    "kayak.md": "# Kayaking\n\nPaddle strokes, spray decks and rolling a sea kayak in cold water.",
    "bread.md": "# Baking\n\nSourdough starter, flour, water, salt and a long cold proof.",
    "garden.md": "# Garden\n\nTomatoes need sun, water and staking; prune the suckers weekly.",
}
QUERIES = ["sea kayak", "sourdough flour", "prune tomatoes", "water"]


class Crash(BaseException):
    """Stands for the process dying: nothing in Coffer catches it."""


def open_service(home: Path, **settings) -> Coffer:
    return Coffer(
        load_settings(home=home, **{"embed_on_read_seconds": READ_BUDGET, **settings}), embedder=HashEmbedder()
    )


def reopen(home: Path) -> Coffer:
    """A fresh service over the same store, as after a restart (recovery runs when the store opens)."""
    service = open_service(home)
    recover_interrupted_restores(service.paths)
    return service


def files_of(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def results(coffer: Coffer) -> list:
    return [
        [(p.document_id, p.position, p.score) for p in coffer.search("notes", q, strategy=s).passages]
        for q in QUERIES
        for s in ("keyword", "hybrid")
    ]


@pytest.fixture
def service(home: Path):
    with open_service(home) as coffer:
        coffer.create_kb("notes", vector=True)
        for name, text in DOCS.items():
            coffer.add_document("notes", name, text)
        yield coffer


def ids_of(coffer: Coffer) -> dict[str, str]:
    return {row["original_filename"]: row["id"] for row in coffer.index.conn.execute("SELECT * FROM documents")}


def damage(coffer: Coffer) -> None:
    """The bad batch of edits to undo: one document deleted, one edited, one added."""
    ids = ids_of(coffer)
    coffer.delete_document("notes", ids["garden.md"])
    coffer.edit_document("notes", ids["bread.md"], "# Baking\n\nRye bread only, no sourdough at all.")
    coffer.add_document("notes", "new.md", "# New\n\nA note about water.")


def test_restore_after_deleting_and_editing_returns_the_exact_earlier_files_and_results(service: Coffer) -> None:
    root = service.paths.kb("notes").root
    earlier_files, earlier_results = files_of(root), results(service)
    taken = service.snapshot_kb("notes", note="before the batch")
    damage(service)
    damaged_files = files_of(root)
    restored = service.restore_snapshot("notes", taken.id)
    assert files_of(root) == earlier_files
    assert results(service) == earlier_results
    assert (restored.snapshot_id, restored.created, restored.documents) == (taken.id, False, 3)
    newest, oldest = service.list_snapshots("notes")
    assert (newest.id, oldest.id) == (restored.pre_restore_snapshot_id, taken.id)
    assert newest.note == f"before restore of {taken.id}"
    assert (newest.documents, oldest.documents, oldest.note) == (3, 3, "before the batch")
    kept = files_of(Path(newest.path))
    assert {k: v for k, v in kept.items() if k not in ("manifest.json", "snapshot.json")} == damaged_files
    assert not list(service.paths.knowledge.glob(".*"))
    events = [row[0] for row in service.index.conn.execute("SELECT event FROM audit_log ORDER BY id")]
    assert events[-1] == "KB_RESTORED"


@pytest.mark.parametrize(
    ("stage", "outcome"),
    [("staged", "old"), ("committed", "restored"), ("swapped_out", "restored"), ("swapped_in", "restored")],
)
def test_a_crash_at_any_step_of_a_restore_leaves_the_old_or_the_restored_state(
    stage: str, outcome: str, service: Coffer, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = service.paths.kb("notes").root
    expected = {"restored": (files_of(root), results(service))}
    taken = service.snapshot_kb("notes")
    damage(service)
    expected["old"] = (files_of(root), results(service))

    def crash_at(step: str) -> None:
        if step == stage:
            raise Crash(step)

    monkeypatch.setattr(_snapshots, "_checkpoint", crash_at)
    with pytest.raises(Crash):
        service.restore_snapshot("notes", taken.id)
    assert root.exists() == (stage != "swapped_out")  # between the renames the KB folder is aside
    service.close()
    monkeypatch.undo()
    with reopen(home) as after:
        assert (files_of(root), results(after)) == expected[outcome]
        assert not list(after.paths.knowledge.glob(".*"))
        assert after.describe_kb("notes").documents_degraded == 0


def test_a_restore_killed_between_its_renames_is_completed_when_the_store_opens_again(
    service: Coffer, home: Path
) -> None:
    root = service.paths.kb("notes").root
    earlier = files_of(root)
    taken = service.snapshot_kb("notes")
    damage(service)
    service.close()
    script = textwrap.dedent(f"""
        import os
        from coffer_mcp import Coffer, load_settings
        from coffer_mcp.portability import _snapshots
        from tests.fakes import HashEmbedder

        def die(step):
            if step == "swapped_out":
                os._exit(17)

        _snapshots._checkpoint = die
        Coffer(load_settings(home={str(home)!r}), embedder=HashEmbedder()).restore_snapshot("notes", {taken.id!r})
    """)
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 17, done.stderr
    assert not root.exists()  # killed mid-swap: the KB folder is aside
    with reopen(home) as after:
        assert files_of(root) == earlier
        assert after.search("notes", "prune tomatoes").passages[0].title == "Garden"


def test_retention_keeps_the_newest_snapshots(home: Path) -> None:
    with open_service(home, snapshot_retention=3) as coffer:
        coffer.create_kb("notes")
        coffer.add_document("notes", "a.md", "# A\n\nalpha")
        taken = [coffer.snapshot_kb("notes", note=f"n{i}").id for i in range(5)]
        assert taken == sorted(taken)  # ids sort by time, even within one millisecond
        assert [s.note for s in coffer.list_snapshots("notes")] == ["n4", "n3", "n2"]
        coffer.restore_snapshot("notes", taken[3])
        assert [s.note for s in coffer.list_snapshots("notes")] == [f"before restore of {taken[3]}", "n4", "n3"]


def test_a_damaged_snapshot_is_refused_and_the_knowledge_base_is_unchanged(service: Coffer) -> None:
    taken = service.snapshot_kb("notes")
    damage(service)
    root = service.paths.kb("notes").root
    before = files_of(root)
    doc = next(Path(taken.path, "docs").iterdir())
    doc.write_bytes(doc.read_bytes() + b"tampered")
    with pytest.raises(SnapshotError, match="does not match its manifest") as caught:
        service.restore_snapshot("notes", taken.id)
    assert caught.value.code == "invalid_snapshot"
    assert files_of(root) == before
    assert [s.id for s in service.list_snapshots("notes")] == [taken.id]
    assert not list(service.paths.knowledge.glob(".*"))


def test_snapshots_outlive_their_knowledge_base_and_a_restore_brings_it_back(service: Coffer) -> None:
    earlier_files, earlier_results = files_of(service.paths.kb("notes").root), results(service)
    taken = service.snapshot_kb("notes")
    service.delete_kb("notes")
    assert [s.id for s in service.list_snapshots("notes")] == [taken.id]
    restored = service.restore_snapshot("notes", taken.id)
    assert (restored.created, restored.pre_restore_snapshot_id, restored.documents) == (True, None, 3)
    assert files_of(service.paths.kb("notes").root) == earlier_files
    assert results(service) == earlier_results
    assert service.delete_snapshot("notes", taken.id).id == taken.id
    assert service.list_snapshots("notes") == []


def test_unknown_snapshots_and_knowledge_bases_are_refused_with_hints(service: Coffer) -> None:
    taken = service.snapshot_kb("notes")
    with pytest.raises(SnapshotNotFoundError) as caught:
        service.restore_snapshot("notes", "01ARZ3NDEKTSV4RRFFQ69G5FAV")
    assert taken.id in caught.value.hint
    with pytest.raises(SnapshotNotFoundError):
        service.restore_snapshot("notes", "../../etc")
    with pytest.raises(KnowledgeBaseNotFoundError) as unknown:
        service.list_snapshots("nope")
    assert "notes" in unknown.value.hint
