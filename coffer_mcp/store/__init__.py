"""Files are truth: paths that cannot escape, atomic writes, frontmatter, per-KB settings, locks."""

from coffer_mcp.store.document import DocumentMeta
from coffer_mcp.store.files import (
    atomic_write,
    file_stamp,
    fsync_dir,
    path_stamp,
    read_store_file,
    remove_file,
    remove_stale_temp_files,
    unindexed_mark,
    unindexed_since,
    unindexed_writes,
)
from coffer_mcp.store.frontmatter import body_sha256, parse_document, render_document
from coffer_mcp.store.kbconfig import KbConfig, make_kb_config, read_kb_config, write_kb_config
from coffer_mcp.store.lock import file_lock, held_here
from coffer_mcp.store.paths import (
    CREATING,
    DELETING,
    IMPORTING,
    KB_NAME_RULE,
    MAX_PATH_CHARS,
    RESTORING,
    SNAPSHOTS,
    KbPaths,
    StorePaths,
    check_path_text,
    is_document_id,
    sanitize_filename,
    validate_kb_name,
)
from coffer_mcp.store.scan import document_files, markdown_entries

__all__ = [
    "CREATING",
    "DELETING",
    "IMPORTING",
    "KB_NAME_RULE",
    "MAX_PATH_CHARS",
    "RESTORING",
    "SNAPSHOTS",
    "DocumentMeta",
    "KbConfig",
    "KbPaths",
    "StorePaths",
    "atomic_write",
    "body_sha256",
    "check_path_text",
    "document_files",
    "file_lock",
    "file_stamp",
    "fsync_dir",
    "held_here",
    "is_document_id",
    "make_kb_config",
    "markdown_entries",
    "parse_document",
    "path_stamp",
    "read_kb_config",
    "read_store_file",
    "remove_file",
    "remove_stale_temp_files",
    "render_document",
    "sanitize_filename",
    "unindexed_mark",
    "unindexed_since",
    "unindexed_writes",
    "validate_kb_name",
    "write_kb_config",
]
