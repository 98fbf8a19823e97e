"""The catalogue of a Coffer home's knowledge bases: which exist, and their settings.

A knowledge base is a folder of ``knowledge/`` with its ``kb.yaml``; the index mirrors the list
(``knowledge_bases`` rows), brought in line by ``sync`` when a folder was made, removed or
reconfigured by another process or by hand. The settings are parsed again only when their file
changed.
"""

from __future__ import annotations

import shutil
import stat

from coffer_mcp.errors import KnowledgeBaseNotFoundError
from coffer_mcp.index import Index
from coffer_mcp.services.locks import Locks, unknown_kb
from coffer_mcp.settings import Settings
from coffer_mcp.store import (
    CREATING,
    DELETING,
    KbConfig,
    KbPaths,
    StorePaths,
    path_stamp,
    read_kb_config,
    validate_kb_name,
    write_kb_config,
)
from coffer_mcp.timeutil import utc_now

__all__ = ["Catalogue"]


class Catalogue:
    """The knowledge bases of one Coffer home: their folders, settings and rows in the index."""

    def __init__(self, settings: Settings, paths: StorePaths, index: Index, locks: Locks) -> None:
        self.settings = settings
        self.paths = paths
        self.index = index
        self._locks = locks
        self._configs: dict[str, tuple[str, KbConfig]] = {}

    def prepare_home(self, *, connect: bool = True) -> None:
        """Create the home's folders once the index has accepted the home (``Index.check_home``).

        A home that a shared index refuses as another store's is left as it was. Without
        ``connect``, a shared index not connected yet makes them at its first connection.

        Raises:
            StoreError: ``other_store``, or the home or the database cannot be reached.
        """
        if self.index.check_home(connect=connect):
            self.paths.make_folders()

    def open_kb(self, name: str) -> tuple[KbPaths, KbConfig]:
        """The paths and settings of an existing knowledge base.

        Raises:
            InvalidNameError: the name breaks the naming rule.
            KnowledgeBaseNotFoundError: no such knowledge base; the hint names those that exist.
        """
        kb = self.paths.kb(validate_kb_name(name))
        try:
            mode = kb.root.lstat().st_mode  # one call on every read: is it there, and a folder or a link
        except OSError:
            mode = 0
        if stat.S_ISLNK(mode):  # never listed (``kb_names``) nor indexed: a store holds its folders
            raise KnowledgeBaseNotFoundError(
                f"Knowledge base '{name}' does not exist: knowledge/{name} is a symbolic link.",
                hint="A knowledge base is a real folder inside COFFER_HOME/knowledge: move the folder there "
                "instead of linking it, or follow the other folder ({tool:ingest_path} with {arg:follow=true}).",
            )
        if not stat.S_ISDIR(mode):
            raise self.unknown_kb(name)
        if name not in self.index.kb_stamps():
            self.sync()
        return kb, self.config(name)

    def unknown_kb(self, name: str) -> KnowledgeBaseNotFoundError:
        """The error for a knowledge base that does not exist: the hint names those that do."""
        return unknown_kb(self.paths, name)

    def config(self, name: str) -> KbConfig:
        """The KB's settings from ``kb.yaml``, parsed again only when the file changed."""
        kb = self.paths.kb(name)
        stamp = path_stamp(kb.config)
        cached = self._configs.get(name)
        if cached and cached[0] == stamp:
            return cached[1]
        config = read_kb_config(kb.config, fallback_time=utc_now())
        self._configs[name] = (stamp, config)
        return config

    def kb_names(self) -> list[str]:
        """The names of the knowledge-base folders (staging folders and stray names left out)."""
        return self.paths.kb_names()

    def sync(self) -> list[str]:
        """Make the ``knowledge_bases`` rows match the KB folders; returns the KB names."""
        folders = self.kb_names()
        index = self.index
        wanted = {name: path_stamp(self.paths.kb(name).config) for name in folders}
        known = index.kb_stamps()
        leftovers = [
            p for prefix in (DELETING, CREATING) for p in self.paths.knowledge.glob(f"{prefix}*") if p.is_dir()
        ]
        if wanted == known and not leftovers:
            return folders
        with self._locks.registry_lock():
            for path in leftovers:
                shutil.rmtree(path, ignore_errors=True)
            folders = self.kb_names()  # again: another process may have changed them meanwhile
            self._apply_registry(folders, index.kb_stamps())
        return folders

    def _apply_registry(self, folders: list[str], known: dict[str, str]) -> None:
        index = self.index
        for name in folders:
            kb = self.paths.kb(name)
            if not kb.config.exists():
                # A folder made by hand: adopt it with default settings.
                with self._locks.kb_lock(name):
                    if not kb.config.exists():
                        write_kb_config(kb.config, self.config(name))
            if known.get(name) != path_stamp(kb.config):
                with index.transaction():
                    index.upsert_kb(name, self.config(name), path_stamp(kb.config))
        gone = [name for name in known if name not in folders]
        if gone:
            with index.transaction():
                for name in gone:
                    index.delete_kb(name)

    def forget(self, name: str) -> None:
        """Drop what is cached about a deleted knowledge base."""
        self._configs.pop(name, None)
