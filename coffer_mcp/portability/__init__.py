"""Portability and undo: packs (export / import) and snapshots (snapshot / restore).

Files are truth, so both are the knowledge base's files plus a manifest of their hashes; the index
is rebuilt from them (a pack may also carry its vectors, so a big corpus is not re-embedded).

    export_kb(coffer, name, out, with_vectors=...)   -> ExportResult    one .cofferpack file
    import_pack(coffer, pack, as_name=..., merge=...) -> ImportResult   untrusted input, verified first
    snapshot_kb / list_snapshots / delete_snapshot    -> SnapshotInfo
    find_snapshot(coffer, name, snapshot_id)         -> SnapshotInfo    also of a deleted knowledge base
    restore_snapshot(coffer, name, snapshot_id)      -> RestoreResult   crash-safe swap
    recover_interrupted_restores(paths)                                 run when the store opens
    remove_abandoned_imports(paths)                                     run when the store opens

Every function takes the service first and is synchronous; surfaces (CLI, MCP) wrap them.
See docs/portability.md.
"""

from typing import TYPE_CHECKING

from coffer_mcp.exports import lazy_exports

if TYPE_CHECKING:
    from coffer_mcp.portability._export import PACK_SUFFIX, ExportResult, export_kb
    from coffer_mcp.portability._files import remove_abandoned_imports
    from coffer_mcp.portability._format import FORMAT_VERSION, PackError
    from coffer_mcp.portability._import import ImportResult, import_pack
    from coffer_mcp.portability._merge import ImportConflict, SkippedDocument
    from coffer_mcp.portability._snapshots import (
        MAX_NOTE,
        RestoreResult,
        SnapshotError,
        SnapshotInfo,
        SnapshotNotFoundError,
        delete_snapshot,
        find_snapshot,
        list_snapshots,
        recover_interrupted_restores,
        restore_snapshot,
        snapshot_kb,
    )

__all__ = [
    "FORMAT_VERSION",
    "MAX_NOTE",
    "PACK_SUFFIX",
    "ExportResult",
    "ImportConflict",
    "ImportResult",
    "PackError",
    "RestoreResult",
    "SkippedDocument",
    "SnapshotError",
    "SnapshotInfo",
    "SnapshotNotFoundError",
    "delete_snapshot",
    "export_kb",
    "find_snapshot",
    "import_pack",
    "list_snapshots",
    "recover_interrupted_restores",
    "remove_abandoned_imports",
    "restore_snapshot",
    "snapshot_kb",
]

# Opening a store runs the two recovery functions: that must not load the pack format and merge.
__getattr__ = lazy_exports(
    __name__,
    {
        "._export": ("PACK_SUFFIX", "ExportResult", "export_kb"),
        "._files": ("remove_abandoned_imports",),
        "._format": ("FORMAT_VERSION", "PackError"),
        "._import": ("ImportResult", "import_pack"),
        "._merge": ("ImportConflict", "SkippedDocument"),
        "._snapshots": (
            "MAX_NOTE",
            "RestoreResult",
            "SnapshotError",
            "SnapshotInfo",
            "SnapshotNotFoundError",
            "delete_snapshot",
            "find_snapshot",
            "list_snapshots",
            "recover_interrupted_restores",
            "restore_snapshot",
            "snapshot_kb",
        ),
    },
)
