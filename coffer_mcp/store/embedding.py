"""The store's embedding model, kept in ``embedding.yaml`` beside ``config.yaml``.

The model belongs to the store, not to a process: vectors of two models cannot be compared, so
every process of a store (a desktop client's server, a terminal, the servers of a team) must
embed with one. It is recorded when vectors are first written and changed only by an explicit
command (``coffer embeddings use``). The index keeps a copy (``Index.store_model``); this file is
the truth, so a rebuilt index keeps the model.

What a team's machines share is the ``identity`` (``fastembed:NAME``, ``openai:NAME@DIMS``):
equal identities give comparable vectors. The rest says how the machine that recorded it built
the model, for a process whose own settings name none: ``model_path`` (fastembed) is a folder of
that machine, used where it exists; ``base_url`` and ``api_key_env`` (openai) a server and the
*name* of the variable holding its key, never the key.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import yaml
from ulid import ULID

from coffer_mcp.errors import StoreError
from coffer_mcp.store.files import atomic_write

__all__ = ["StoreModel", "create_store_model", "read_store_model", "store_model_stamp", "write_store_model"]

_HEADER = (
    "# The embedding model of this store's vectors, written by Coffer when vectors were first made.\n"
    "# Change it with 'coffer embeddings use MODEL --confirm' (it re-embeds every vector knowledge base),\n"
    "# not by hand: a process that cannot build this model searches by keyword only.\n"
)


@dataclass(frozen=True, slots=True)
class StoreModel:
    """The embedding model a store's vectors come from.

    Attributes:
        identity: What vectors are compared by (``Embedder.identity``), e.g. ``fastembed:BAAI/bge-small-en-v1.5``.
        dimensions: The vectors' length.
        provider: ``fastembed``, ``openai``, or another embedder's own name (a custom one, not buildable).
        model: The model's name as the provider knows it.
        model_path: fastembed: the local model folder on the machine that recorded it.
        base_url: openai: the server that recorded it used.
        api_key_env: openai: the name of the environment variable its key was in (None: it used no key).
        recorded_at: When it became the store's model.
    """

    identity: str
    dimensions: int
    provider: str
    model: str | None = None
    model_path: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None
    recorded_at: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {key: value for key, value in asdict(self).items() if value not in (None, "")}

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> StoreModel:
        """The model a mapping describes (unknown keys ignored).

        Raises:
            ValueError: ``identity`` or ``dimensions`` is missing or not usable.
        """
        known = {f.name for f in fields(cls)}
        values = {key: value for key, value in data.items() if key in known and value is not None}
        identity, dimensions = values.get("identity"), values.get("dimensions")
        if not isinstance(identity, str) or not identity.strip():
            raise ValueError("no identity")
        if isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 1:
            raise ValueError("no dimensions (a positive whole number)")
        text = {key: str(value) for key, value in values.items() if key not in ("identity", "dimensions")}
        return cls(
            identity=identity,
            dimensions=dimensions,
            provider=text.get("provider", ""),
            model=text.get("model"),
            model_path=text.get("model_path"),
            base_url=text.get("base_url"),
            api_key_env=text.get("api_key_env"),
            recorded_at=text.get("recorded_at", ""),
        )


def store_model_stamp(path: Path) -> tuple[int, int, int] | None:
    """What changes whenever the file is written (inode, mtime, size); None while it is absent."""
    try:
        info = path.stat()
    except FileNotFoundError:
        return None
    return info.st_ino, info.st_mtime_ns, info.st_size


def read_store_model(path: Path) -> StoreModel | None:
    """The model ``path`` records; None when there is no such file.

    Raises:
        StoreError: the file cannot be read or does not describe a model.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StoreError(f"Cannot read {path}: {exc.strerror}.", hint=f"Fix the permissions of {path}.") from exc
    try:
        data = yaml.safe_load(text)
        if not isinstance(data, dict):
            raise ValueError("not a mapping")  # noqa: TRY004 (reported as the file's problem below)
        return StoreModel.from_mapping(data)
    except (yaml.YAMLError, ValueError) as exc:
        raise StoreError(
            f"{path} does not describe an embedding model: {str(exc).splitlines()[0]}.",
            hint=f"It names the model of the store's vectors: remove {path} and run 'coffer embeddings use MODEL "
            "--confirm' to record the model again (documents embedded by another one are embedded again).",
        ) from exc


def _render(model: StoreModel) -> bytes:
    return (_HEADER + yaml.safe_dump(model.to_dict(), sort_keys=False, allow_unicode=True)).encode("utf-8")


def write_store_model(path: Path, model: StoreModel) -> None:
    """Record ``model`` in ``path`` (atomically), replacing what it held.

    Raises:
        StoreError: the home cannot be written to.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, _render(model))
    except OSError as exc:
        raise StoreError(f"Cannot write {path}: {exc.strerror}.", hint="Set COFFER_HOME to a writable folder.") from exc


def create_store_model(path: Path, model: StoreModel) -> StoreModel:
    """Record ``model`` in ``path`` unless the file exists; the model the file records now.

    Written aside and made durable, then linked in place: of two processes recording their
    model at once, one wins and both return its model.

    Raises:
        StoreError: the home cannot be written to, or the file there does not describe a model.
    """
    aside = path.with_name(f".{path.name}.{ULID()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, _render(model))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.link(aside, path)
    except FileExistsError:
        pass
    except OSError as exc:
        raise StoreError(f"Cannot write {path}: {exc.strerror}.", hint="Set COFFER_HOME to a writable folder.") from exc
    finally:
        aside.unlink(missing_ok=True)
    recorded = read_store_model(path)
    assert recorded is not None  # linked by us or by another process
    return recorded
