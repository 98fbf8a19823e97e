"""Where every file of the store lives, and the names that may never escape it.

Layout under ``COFFER_HOME``::

    coffer.db                          the index (rebuildable)
    config.yaml                        global settings
    embedding.yaml                     the store's embedding model (store/embedding.py)
    locks/<kb>.lock                    per-KB write locks (outside the KB so delete can remove it)
    knowledge/<kb>/kb.yaml             the KB's own settings (truth, like the documents)
    knowledge/<kb>/docs/<id>.md        Markdown + YAML frontmatter = truth
    knowledge/<kb>/raw/<id>.<ext>      the original upload = provenance
    knowledge/<kb>/raw/<id>.map.json   where each line of the Markdown is in the original (store/sourcemap.py)
    snapshots/<kb>/<id>/               snapshots of a KB's files (undo points)
    models/                            downloaded embedding models (fastembed's cache)

Work in progress lives in hidden folders beside the knowledge bases, named by the prefixes below,
so a crash never leaves a half-made knowledge base visible: ``knowledge/.creating-<kb>-<ulid>``
(a new KB, renamed into place), ``.deleting-<kb>-<ulid>`` (a deleted one, removed after the
rename), ``.importing-<ulid>`` (a pack being verified) and ``.restore-<kb>`` (a restore's journal).
"""

from __future__ import annotations

import contextlib
import os
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from ulid import ULID

from coffer_mcp.errors import InvalidArgumentError, InvalidNameError, StoreError

__all__ = [
    "CREATING",
    "DELETING",
    "IMPORTING",
    "KB_NAME_RULE",
    "MAX_PATH_CHARS",
    "RESTORING",
    "SNAPSHOTS",
    "SOURCE_MAP_SUFFIX",
    "KbPaths",
    "StorePaths",
    "check_path_text",
    "decodable",
    "escape_hidden",
    "is_document_id",
    "raw_owner",
    "sanitize_filename",
    "shown_path",
    "stored_document_id",
    "undecodable_name",
    "validate_kb_name",
]

CREATING = ".creating-"
DELETING = ".deleting-"
IMPORTING = ".importing-"
RESTORING = ".restore-"
SNAPSHOTS = "snapshots"

KB_NAME_RULE = "1-64 characters of a-z, 0-9, '-', '_', '.', not starting with '.'"
_KB_NAME = re.compile(r"[a-z0-9_-][a-z0-9._-]{0,63}")
# Names Windows refuses as file names; refusing them everywhere keeps a store portable.
_RESERVED = {"con", "prn", "aux", "nul"} | {f"{p}{i}" for p in ("com", "lpt") for i in range(1, 10)}
_ULID = re.compile(r"[0-9A-HJKMNP-TV-Z]{26}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
"""Control characters, and the invisible marks that turn text's direction (``report\u202egpj.exe``
shows as ``reportexe.jpg``): a name holding them displays as another name."""
_MAX_FILENAME = 255
MAX_PATH_CHARS = 4096
SOURCE_MAP_SUFFIX = ".map.json"


def check_path_text(path: str | Path) -> str:
    """``path`` as text, refused when no file system could hold it (a NUL byte, absurd length), or
    when it is not valid UTF-8 (``undecodable_name``)."""
    text = os.fspath(path) if isinstance(path, (str, os.PathLike)) else repr(path)
    if (
        not isinstance(path, (str, os.PathLike))
        or not isinstance(text, str)
        or "\0" in text
        or not text.strip()
        or len(text) > MAX_PATH_CHARS
    ):
        raise InvalidArgumentError(
            f"{str(text)[:80]!r} is not a usable path.",
            hint=f"Pass a file or folder path of at most {MAX_PATH_CHARS} characters, without NUL bytes.",
        )
    if not decodable(text):
        raise undecodable_name(text)
    return text


def decodable(text: str) -> bool:
    """Whether a path (or a name) is valid UTF-8 text.

    A name another system wrote in another encoding (``caf\\xe9.md`` in Latin-1) comes from the
    operating system with its bytes as lone surrogates (``os.fsdecode``), which no index, JSON
    answer or log line can hold; the watcher cannot report such a name either (watchfiles stops
    at it).
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def shown_path(text: str) -> str:
    """A path as it can be shown: bytes that are not UTF-8 written ``\\xNN`` (the path itself if it is valid)."""
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a lone surrogate that no byte stands for (JSON's "\\ud800")
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def undecodable_name(path: str) -> InvalidArgumentError:
    """The error for a path whose name (or a folder's on the way) is not valid UTF-8."""
    return InvalidArgumentError(
        f"{shown_path(path)}: the name is not valid UTF-8 (its other bytes are shown as \\xNN), so Coffer "
        "cannot keep it as text.",
        code="undecodable_name",
        hint="Rename it to a UTF-8 name (one written in Latin-1: convmv -f latin1 -t utf8 --notest NAME), then "
        "ingest it again; a followed folder picks it up by itself.",
    )


def validate_kb_name(name: object) -> str:
    """Return ``name`` if it is a valid knowledge-base name, else raise ``InvalidNameError``."""
    if not isinstance(name, str) or not _KB_NAME.fullmatch(name):
        shown = repr(name)[:80]
        raise InvalidNameError(
            f"Invalid knowledge base name {shown}.",
            hint=f"Use {KB_NAME_RULE}, e.g. 'design-notes'.",
        )
    if name.split(".")[0] in _RESERVED or name.endswith("."):
        raise InvalidNameError(
            f"Invalid knowledge base name {name!r}: reserved on some file systems.",
            hint="Pick another name, e.g. add a suffix like '-kb'.",
        )
    return name


def is_document_id(value: str) -> bool:
    """True if ``value`` has the shape of a document id (a ULID)."""
    return bool(_ULID.fullmatch(value))


def stored_document_id(value: str) -> str:
    """A document id as the store writes it: a ULID is case-insensitive, so ``01hz…`` names ``01HZ…``."""
    return value.upper()


def escape_hidden(text: str) -> str:
    """``text`` with its control characters and direction marks (``_CONTROL``) written as escapes
    (``\\n``, ``\\x1b``, ``\\u202e``): shown on a terminal, they would break or disguise the line."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


def hidden_characters(filename: str) -> int:
    """How many characters ``sanitize_filename`` drops from ``filename``'s final component as
    unseen (control characters, direction marks): what an upload's ``note`` tells the agent."""
    return len(_CONTROL.findall(filename.replace("\\", "/").split("/")[-1]))


def sanitize_filename(filename: str) -> str:
    """The final path component of ``filename``, safe to record as metadata.

    Directory parts (``/`` and ``\\``), control characters and marks that turn the text's direction
    (``_CONTROL``), and surrounding dots/spaces are dropped; the result is NFC-normalized and at
    most 255 characters (extension kept). Returns "" when nothing usable remains.
    """
    name = unicodedata.normalize("NFC", filename.replace("\\", "/")).split("/")[-1]
    name = _CONTROL.sub("", name).strip().strip(".").strip()
    name = "".join(ch for ch in name if not 0xD800 <= ord(ch) <= 0xDFFF)
    if len(name) > _MAX_FILENAME:
        stem, dot, ext = name.rpartition(".")
        keep = ext if dot and len(ext) <= 16 else ""
        name = (stem if keep else name)[: _MAX_FILENAME - len(keep) - 1] + ("." + keep if keep else "")
    return name


@dataclass(frozen=True, slots=True)
class KbPaths:
    """The folders and files of one knowledge base."""

    name: str
    root: Path

    @property
    def docs(self) -> Path:
        return self.root / "docs"

    @property
    def raw(self) -> Path:
        return self.root / "raw"

    @property
    def config(self) -> Path:
        return self.root / "kb.yaml"

    def doc(self, doc_id: str) -> Path:
        return self.docs / f"{doc_id}.md"

    def raw_files(self, doc_id: str) -> list[Path]:
        """Every original stored for ``doc_id`` (normally one)."""
        if not self.raw.is_dir():
            return []
        return sorted(p for p in self.raw.glob(f"{doc_id}.*") if p.stem == doc_id)

    def source_map(self, doc_id: str) -> Path:
        """Where ``doc_id``'s source map is (``store.sourcemap``), whether or not it has one."""
        return self.raw / f"{doc_id}{SOURCE_MAP_SUFFIX}"

    def companions(self, doc_id: str) -> list[Path]:
        """Every file of ``raw/`` that belongs to ``doc_id``: its originals and its source map.

        They go where the document goes: removed with it, renamed with it, packed with it.
        """
        found = self.raw_files(doc_id)
        source_map = self.source_map(doc_id)
        return [*found, source_map] if os.path.lexists(source_map) else found


def raw_owner(name: str) -> str:
    """The document id a file of ``raw/`` named ``name`` belongs to (``<id>.pdf``, ``<id>.map.json``)."""
    return name.split(".", 1)[0]


@dataclass(frozen=True, slots=True)
class StorePaths:
    """Paths under ``COFFER_HOME``."""

    home: Path

    @property
    def db(self) -> Path:
        return self.home / "coffer.db"

    @property
    def config(self) -> Path:
        return self.home / "config.yaml"

    @property
    def knowledge(self) -> Path:
        return self.home / "knowledge"

    @property
    def locks(self) -> Path:
        return self.home / "locks"

    @property
    def snapshots(self) -> Path:
        return self.home / SNAPSHOTS

    @property
    def models(self) -> Path:
        return self.home / "models"

    @property
    def embedding_file(self) -> Path:
        """The store's embedding model (``store.embedding``)."""
        return self.home / "embedding.yaml"

    @property
    def store_id_file(self) -> Path:
        """Which store a shared (PostgreSQL) index belongs to: ``store_id``."""
        return self.home / "store-id"

    def kb(self, name: str) -> KbPaths:
        return KbPaths(validate_kb_name(name), self.knowledge / name)

    def kb_names(self) -> list[str]:
        """The names of the knowledge-base folders, sorted (links, staging folders and stray names left out)."""
        try:
            entries = sorted(os.scandir(self.knowledge), key=lambda e: e.name)
        except FileNotFoundError:
            return []
        names = []
        for entry in entries:
            if entry.is_dir(follow_symlinks=False) and not entry.name.startswith("."):
                with contextlib.suppress(InvalidArgumentError):
                    names.append(validate_kb_name(entry.name))
        return names

    def make_folders(self) -> None:
        """Create the home's folders (``knowledge/``, ``locks/``; the home too when it is missing).

        Raises:
            StoreError: the home cannot be written to.
        """
        try:
            self.knowledge.mkdir(parents=True, exist_ok=True)
            self.locks.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(
                f"Cannot create the Coffer home {self.home}: {exc.strerror}.",
                hint="Set COFFER_HOME to a writable folder.",
            ) from exc

    def recorded_store_id(self) -> str | None:
        """This store's id as ``store_id_file`` holds it; None when it holds none yet (nothing is made).

        Raises:
            StoreError: the file holds something else than an id.
        """
        path = self.store_id_file
        try:
            found = path.read_text(encoding="ascii", errors="replace").strip()
        except FileNotFoundError:
            return None
        if is_document_id(found):
            return found
        raise StoreError(
            f"{path} does not hold a store id.",
            hint="It names the store a shared (PostgreSQL) index belongs to: write back the id that index "
            "holds (SELECT id FROM store_identity), or remove the file if this store has no shared index yet.",
        )

    def record_store_id(self, store_id: str) -> bool:
        """Write ``store_id`` to ``store_id_file`` (and the home, when missing) unless the file is
        there; whether it was written.

        Written aside and made durable, then linked in place: of two processes writing it at once,
        one wins, and a crash never leaves an empty id.

        Raises:
            StoreError: the home cannot be written to, or the file holds something else than an id.
        """
        path = self.store_id_file
        if self.recorded_store_id() is not None:
            return False
        aside = path.with_name(f".store-id.{ULID()}")
        try:
            self.home.mkdir(parents=True, exist_ok=True)
            fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                os.write(fd, f"{store_id}\n".encode("ascii"))
                os.fsync(fd)
            finally:
                os.close(fd)
            os.link(aside, path)
        except FileExistsError:
            return False
        except OSError as exc:
            raise StoreError(
                f"Cannot write {path}: {exc.strerror}.", hint="Set COFFER_HOME to a writable folder."
            ) from exc
        finally:
            aside.unlink(missing_ok=True)
        return True

    @staticmethod
    def new_store_id() -> str:
        """A new store id (a ULID), not yet recorded anywhere."""
        return str(ULID())

    def lock(self, name: str) -> Path:
        return self.locks / f"{name}.lock"
