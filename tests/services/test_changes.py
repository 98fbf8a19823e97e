"""The change feed: what changed in the knowledge bases it tracks since it last looked, whoever changed it."""

from __future__ import annotations

from pathlib import Path

from coffer_mcp import Coffer, load_settings
from coffer_mcp.services.changes import Change


def test_a_look_reports_the_documents_added_edited_and_deleted_since_the_last_one(coffer: Coffer) -> None:
    coffer.create_kb("notes")
    kept = coffer.add_document("notes", "kept.md", "# Kept\n\none").document_id
    gone = coffer.add_document("notes", "gone.md", "# Gone\n\ntwo").document_id
    feed = coffer.changes
    feed.track(["notes"])
    assert feed.look() == []
    added = coffer.add_document("notes", "new.md", "# New\n\nthree").document_id
    coffer.edit_document("notes", kept, "# Kept\n\nfour")
    coffer.delete_document("notes", gone)
    assert set(feed.look()) == {
        Change("notes", added, "added"),
        Change("notes", kept, "edited"),
        Change("notes", gone, "deleted"),
    }
    assert feed.look() == []


def test_knowledge_bases_made_and_deleted_are_reported_when_every_one_is_tracked(coffer: Coffer) -> None:
    feed = coffer.changes
    feed.track(None)
    coffer.create_kb("papers")
    doc = coffer.add_document("papers", "a.md", "# A\n\nalpha").document_id
    assert feed.look() == [Change("papers", None, "added"), Change("papers", doc, "added")]
    coffer.delete_kb("papers")
    assert feed.look() == [Change("papers", doc, "deleted"), Change("papers", None, "deleted")]


def test_only_the_tracked_knowledge_bases_are_looked_at(coffer: Coffer) -> None:
    coffer.create_kb("watched")
    coffer.create_kb("ignored")
    feed = coffer.changes
    feed.track(["watched"])
    coffer.add_document("ignored", "a.md", "# A\n\nalpha")
    seen = coffer.add_document("watched", "b.md", "# B\n\nbeta").document_id
    assert feed.look() == [Change("watched", seen, "added")]


def test_what_changed_before_a_knowledge_base_was_tracked_is_not_reported(coffer: Coffer) -> None:
    coffer.create_kb("notes")
    feed = coffer.changes
    feed.track([])
    feed.look()
    coffer.add_document("notes", "before.md", "# Before\n\nold news")
    feed.track(["notes"])
    assert feed.look() == []


def test_another_process_writes_are_found_by_the_next_look(
    coffer: Coffer, home: Path, backend_settings: dict[str, str]
) -> None:
    # A second core on the same home and index, as another server or the CLI would be: its writes
    # wake no one here, so only what the index and the files say can tell.
    coffer.create_kb("notes")
    doc = coffer.add_document("notes", "a.md", "# A\n\nalpha").document_id
    feed = coffer.changes
    feed.track(["notes"])
    with Coffer(load_settings(home=home, **backend_settings)) as other:
        other.edit_document("notes", doc, "# A\n\nchanged elsewhere")
        added = other.add_document("notes", "b.md", "# B\n\nbeta").document_id
    assert set(feed.look()) == {Change("notes", doc, "edited"), Change("notes", added, "added")}


def test_a_write_of_this_process_wakes_a_waiting_looker_at_once(coffer: Coffer) -> None:
    coffer.create_kb("notes")
    feed = coffer.changes
    feed.track(["notes"])
    feed.look()
    assert not feed.wait(0)
    coffer.add_document("notes", "a.md", "# A\n\nalpha")
    assert feed.wait(0)
    assert len(feed.look()) == 1
    assert not feed.wait(0)
