"""The command table: every command of ``coffer``, its help, its arguments and its handler, once.

The parser is built from it (``_parser``), and code that names a command (in a hint, in the
docs) can read its words here. Importing it loads no part of the core: each handler imports
what it needs when it runs.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from coffer_mcp.cli import _auth, _embeddings, _ingest, _kb, _maintenance, _portability, _retrieval, _serve
from coffer_mcp.cli._arguments import add_doc, add_name

if TYPE_CHECKING:
    from coffer_mcp.settings import Settings

__all__ = ["COMMANDS", "GROUPS", "Command", "Handler"]

Handler = Callable[[argparse.Namespace, "Settings"], "int | None"]
"""A command's body: the parsed arguments and the loaded settings in, an exit status out (None: 0)."""


def _no_arguments(p: argparse.ArgumentParser) -> None:
    """A command that takes no argument of its own (beyond ``--json``)."""


class Command(NamedTuple):
    """One command: the words that call it, what ``--help`` says of it, its arguments and its handler."""

    words: tuple[str, ...]
    help: str
    handler: Handler
    arguments: Callable[[argparse.ArgumentParser], None] = _no_arguments
    description: str | None = None
    """What the command's own ``--help`` says above its options; its ``help`` when None."""
    json: bool = True
    """Whether it takes ``--json`` (print machine-readable JSON)."""
    embeds: bool = False
    """Whether it embeds the documents that are due (or a query); every other command loads no model."""

    @property
    def name(self) -> str:
        """The command as a user types it after ``coffer``, e.g. ``kb search``."""
        return " ".join(self.words)


GROUPS = {
    "kb": "manage knowledge bases and their documents",
    "auth": "the HTTP server's OAuth: the owner's password, clients, grants",
    "index": "the index as a whole (rebuilt from the files)",
    "embeddings": "the store's embedding model: which one, and changing it",
}
"""The commands that only group others (``coffer kb``), by their help."""


COMMANDS: tuple[Command, ...] = (
    Command(
        ("serve",),
        "run the MCP server (stdio, or streamable HTTP with --http)",
        _serve.serve,
        _serve.add_serve,
        json=False,
    ),
    Command(
        ("doctor",),
        "check SQLite, sqlite-vec, ripgrep, the embedder and every KB",
        _maintenance.doctor,
        _maintenance.add_doctor,
    ),
    Command(("kb", "create"), "create a knowledge base", _kb.kb_create, _kb.add_create),
    Command(("kb", "list"), "list knowledge bases", _kb.kb_list),
    Command(("kb", "describe"), "counts, settings and disk usage of a knowledge base", _kb.kb_describe, add_name),
    Command(
        ("kb", "update"),
        "change a knowledge base's description, chunking, vectors or source updates",
        _kb.kb_update,
        _kb.add_update,
        embeds=True,
    ),
    Command(("kb", "delete"), "delete a knowledge base and all its documents", _kb.kb_delete, _kb.add_delete),
    Command(
        ("kb", "ingest"), "add files or folders to a knowledge base", _ingest.kb_ingest, _ingest.add_ingest, embeds=True
    ),
    Command(
        ("kb", "ingest-url"),
        "fetch a public web page or file into a knowledge base",
        _ingest.kb_ingest_url,
        _ingest.add_ingest_url,
        embeds=True,
    ),
    Command(
        ("kb", "check-sources"),
        "compare documents ingested from paths with their files; sync followed folders",
        _ingest.kb_check_sources,
        _ingest.add_check_sources,
        embeds=True,
    ),
    Command(
        ("kb", "unfollow"), "stop following a folder (its documents stay)", _ingest.kb_unfollow, _ingest.add_unfollow
    ),
    Command(
        ("kb", "update-from-source"),
        "re-ingest a document from its source file",
        _ingest.kb_update_from_source,
        add_doc,
        embeds=True,
    ),
    Command(("kb", "search"), "search passages", _retrieval.kb_search, _retrieval.add_search, embeds=True),
    Command(("kb", "grep"), "regex search over the Markdown files", _retrieval.kb_grep, _retrieval.add_grep),
    Command(("kb", "read"), "print a document's Markdown", _kb.kb_read, add_doc),
    Command(("kb", "rm"), "delete a document", _kb.kb_rm, add_doc),
    Command(("kb", "documents"), "list a knowledge base's documents", _kb.kb_documents, _kb.add_documents),
    Command(("kb", "tag"), "set a document's tags (kept in its frontmatter)", _kb.kb_tag, _kb.add_tag),
    Command(
        ("kb", "reindex"),
        "rebuild the index from the files",
        _maintenance.kb_reindex,
        _maintenance.add_reindex,
        embeds=True,
    ),
    Command(
        ("kb", "verify"),
        "check that files, index and vectors agree (exit 1 on drift)",
        _maintenance.kb_verify,
        _maintenance.add_verify,
    ),
    Command(
        ("kb", "export"),
        "write a knowledge base to one verified pack file",
        _portability.kb_export,
        _portability.add_export,
    ),
    Command(
        ("kb", "import"),
        "import a pack file (verified before anything is written)",
        _portability.kb_import,
        _portability.add_import,
        embeds=True,
    ),
    Command(
        ("kb", "snapshot"),
        "save the knowledge base's files as a snapshot",
        _portability.kb_snapshot,
        _portability.add_snapshot,
    ),
    Command(("kb", "snapshots"), "list a knowledge base's snapshots", _portability.kb_snapshots, add_name),
    Command(
        ("kb", "restore"),
        "go back to a snapshot (the current state is snapshotted first)",
        _portability.kb_restore,
        _portability.add_snapshot_id,
        embeds=True,
    ),
    Command(
        ("kb", "snapshot-delete"), "delete one snapshot", _portability.kb_snapshot_delete, _portability.add_snapshot_id
    ),
    Command(
        ("auth", "set-password"),
        "set the owner's password, which the consent page and the viewer accept (read from the terminal or stdin)",
        _auth.auth_set_password,
    ),
    Command(("auth", "clients"), "list the OAuth clients (never their secrets)", _auth.auth_clients),
    Command(("auth", "tokens"), "list the live grants: who holds tokens, for what (never a token)", _auth.auth_tokens),
    Command(
        ("auth", "revoke"), "revoke a client (and all its tokens) or one grant", _auth.auth_revoke, _auth.add_revoke
    ),
    Command(
        ("index", "rebuild"),
        "rebuild every knowledge base's index rows from the files (into the chosen backend)",
        _maintenance.index_rebuild,
        _maintenance.add_rebuild,
        description="Rebuild every knowledge base's rows from its files, e.g. after moving to another backend.",
        embeds=True,
    ),
    Command(
        ("embeddings", "show"),
        "the store's embedding model, and what this process does about it",
        _embeddings.embeddings_show,
        _embeddings.add_show,
    ),
    Command(
        ("embeddings", "use"),
        "make a model the store's and embed every vector knowledge base with it",
        _embeddings.embeddings_use,
        _embeddings.add_use,
        description=_embeddings.USE_DESCRIPTION,
        embeds=True,
    ),
)
"""Every command, in the order ``--help`` lists them."""
