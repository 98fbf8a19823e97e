"""The events of the audit log (``audit_log`` in ``coffer.db``), each declared once with its meaning.

Every ``q.audit`` call names one of these; the table in docs/mcp.md is generated from them.
An event is a ``str``, so it is stored as its name ("KB_CREATED") and compares equal to it.
"""

from __future__ import annotations

import enum

__all__ = ["AuditEvent"]


class AuditEvent(str, enum.Enum):
    """A kind of write recorded in the audit log; ``meaning`` says when, and what ``details`` holds."""

    meaning: str

    def __new__(cls, name: str, meaning: str) -> AuditEvent:
        event = str.__new__(cls, name)
        event._value_ = name
        event.meaning = meaning
        return event

    KB_CREATED = "KB_CREATED", "a knowledge base was created (details: description, vector)"
    KB_UPDATED = "KB_UPDATED", "a knowledge base's settings changed (details: the changed settings)"
    KB_DELETED = "KB_DELETED", "a knowledge base was deleted with its documents (details: files removed)"
    KB_DOCUMENT_INGESTED = (
        "KB_DOCUMENT_INGESTED",
        (
            "a document was added (details: filename, source_sha256), or one copied by hand from another knowledge "
            "base was given an id of its own (actor reconcile; details: copied_from, its knowledge base and id there)"
        ),
    )
    KB_DOCUMENT_UPDATED = (
        "KB_DOCUMENT_UPDATED",
        (
            "a document was replaced by a new version of its source (details: filename, source_sha256) or edited "
            "(details: source_mode edited)"
        ),
    )
    KB_DOCUMENT_RENAMED = (
        "KB_DOCUMENT_RENAMED",
        (
            "a followed file was renamed or moved inside its followed folder, its bytes unchanged: its document keeps "
            "its id, tags and dates (details: renamed_from, source_path)"
        ),
    )
    KB_DOCUMENT_DELETED = (
        "KB_DOCUMENT_DELETED",
        "a document was deleted (details, when its followed source file was deleted: source_path)",
    )
    KB_SOURCE_CONFLICT = (
        "KB_SOURCE_CONFLICT",
        (
            "a followed file changed, but its document was edited in Coffer, so the file was not ingested (details: "
            "source_path, source_sha256)"
        ),
    )
    KB_IMPORTED = (
        "KB_IMPORTED",
        "a pack was imported (details: documents_added, conflicts, skipped, vectors_used, pack_created_at)",
    )
    KB_RESTORED = (
        "KB_RESTORED",
        "a knowledge base was put back to a snapshot (details: snapshot_id, pre_restore_snapshot_id)",
    )

    def __str__(self) -> str:
        return self.value
