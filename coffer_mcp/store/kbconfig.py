"""A knowledge base's own settings, kept in ``knowledge/<kb>/kb.yaml`` beside its documents.

Like the documents, this file is truth: dropping ``coffer.db`` and reindexing restores every
knowledge base with its description and chunking parameters.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from coffer_mcp.errors import InvalidArgumentError, validation_problem
from coffer_mcp.limits import MAX_DESCRIPTION
from coffer_mcp.settings import Settings, bound_of, default_of, refuse_bool
from coffer_mcp.store.files import atomic_write
from coffer_mcp.store.frontmatter import UnsafeFrontmatterError, load_bounded_yaml

__all__ = ["MAX_FOLLOWED", "KbConfig", "config_mapping", "make_kb_config", "read_kb_config", "write_kb_config"]

MAX_FOLLOWED = 100


_SIZE_MIN, _SIZE_MAX = bound_of(Settings, "chunk_size", "ge"), bound_of(Settings, "chunk_size", "le")


class KbConfig(BaseModel):
    """Per-KB settings. Chunk parameters are mutable: changing them re-chunks the corpus.

    A chunk setting the file does not name (a folder made by hand) takes the default and bounds
    of the global setting of the same name, which ``kb create`` gives a new knowledge base.
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    description: str = Field(
        default="",
        max_length=MAX_DESCRIPTION,
        description="What the knowledge base holds, in a sentence or two: `coffer__list_knowledge_bases` shows it "
        "to a model choosing where to search.",
    )
    chunk_size: int = Field(
        default=default_of("chunk_size"),
        ge=_SIZE_MIN,
        le=_SIZE_MAX,
        description="The size of this knowledge base's chunks, in characters: a search's passages are chunks. "
        "`kb create` takes it from the `chunk_size` setting; a `kb.yaml` that does not name it (a folder made by "
        "hand) gets that setting's default. Changing it re-chunks every document.",
    )
    chunk_overlap: int = Field(
        default=default_of("chunk_overlap"),
        ge=0,
        description="The characters of prose a chunk repeats from the end of the one before it, below half of "
        "`chunk_size`. Set like `chunk_size`, from the setting of the same name; changing it re-chunks every "
        "document.",
    )
    vector: bool = Field(
        default=False,
        description="Whether documents are also embedded, so that searches run hybrid (keyword and vector) and "
        "find paraphrases. Turning it on embeds every document; turning it off drops the vectors.",
    )
    auto_update_sources: bool = Field(
        default=False,
        description="Whether `check_sources` also refreshes the documents whose source file changed, instead of "
        "only reporting them.",
    )
    follow: tuple[str, ...] = Field(
        default=(),
        description="Folders (absolute paths) whose files this knowledge base keeps in step with; written only "
        "when there are some, and never carried by an exported pack.",
    )
    created_at: str = Field(
        description="When the knowledge base was created (UTC, ISO 8601); for a folder made by hand, when Coffer "
        "first saw it."
    )
    updated_at: str = Field(description="When its settings last changed (UTC, ISO 8601).")

    @field_validator("chunk_size", "chunk_overlap", mode="before")
    @classmethod
    def _number(cls, value: object) -> object:
        return refuse_bool(value)  # lax pydantic reads a hand-typed `chunk_overlap: true` as 1

    @field_validator("follow", mode="before")
    @classmethod
    def _usable_folders(cls, value: object) -> object:
        # A hand-edited list keeps its usable entries: a bad one must not reset the other settings.
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, (list, tuple)):
            return ()
        folders = [v for v in value if isinstance(v, str) and "\x00" not in v and Path(v).is_absolute()]
        return tuple(dict.fromkeys(folders))[:MAX_FOLLOWED]

    @model_validator(mode="after")
    def _overlap_below_half(self) -> KbConfig:
        if self.chunk_overlap * 2 >= self.chunk_size:
            raise ValueError(
                f"chunk_overlap ({self.chunk_overlap}) must be less than half of chunk_size ({self.chunk_size})"
            )
        return self

    @property
    def chunk_params(self) -> str:
        """The chunking parameters as recorded on each indexed document."""
        return f"{self.chunk_size}:{self.chunk_overlap}"


def make_kb_config(**values: object) -> KbConfig:
    """Build a ``KbConfig``, mapping validation failures to ``InvalidArgumentError``."""
    try:
        return KbConfig.model_validate(values)
    except ValidationError as exc:
        problems = "; ".join(validation_problem(e) for e in exc.errors(include_url=False))
        raise InvalidArgumentError(f"Invalid knowledge base settings: {problems}.", hint=_chunk_hint(values)) from exc


def _chunk_hint(values: dict[str, object]) -> str:
    """What chunk settings are allowed, with the bound for the chunk size the overlap was checked against."""
    hint = f"chunk_size is {_SIZE_MIN}-{_SIZE_MAX} characters; chunk_overlap is 0 up to half of chunk_size"
    size = values.get("chunk_size")
    if isinstance(size, int) and not isinstance(size, bool) and _SIZE_MIN <= size <= _SIZE_MAX:
        hint += f": below {(size + 1) // 2} for chunk_size {size}"
    return hint + "."


def read_kb_config(path: Path, *, fallback_time: str) -> KbConfig:
    """Read ``kb.yaml``; a missing or unreadable file yields defaults (the folder still counts)."""
    data: dict = {}
    with contextlib.suppress(OSError, yaml.YAMLError, UnicodeDecodeError, UnsafeFrontmatterError, RecursionError):
        loaded = load_bounded_yaml(path.read_text(encoding="utf-8"))
        if isinstance(loaded, dict):
            data = loaded
    data = {k: v for k, v in data.items() if isinstance(k, str)}
    data.setdefault("created_at", fallback_time)
    data.setdefault("updated_at", data["created_at"])
    data.setdefault("description", "")
    for key in ("created_at", "updated_at", "description"):
        data[key] = "" if data[key] is None else str(data[key])
    try:
        return KbConfig(**data)
    except ValidationError:
        # A hand-edited file with bad values must not make the KB vanish (nor stop it following
        # its folders): keep what is valid.
        safe = {k: data[k] for k in ("created_at", "updated_at")}
        safe["follow"] = data.get("follow", ())  # the validator keeps its usable entries
        with contextlib.suppress(ValidationError):
            return KbConfig(**safe, description=str(data.get("description", ""))[:MAX_DESCRIPTION])
        return KbConfig(**safe)


def write_kb_config(path: Path, config: KbConfig) -> None:
    text = yaml.safe_dump(config_mapping(config), sort_keys=False, allow_unicode=True, width=10_000)
    atomic_write(path, text.encode("utf-8"))


def config_mapping(config: KbConfig, *, portable: bool = False) -> dict[str, object]:
    """``kb.yaml``'s content: ``follow`` only when the KB follows folders, and never in a ``portable`` copy.

    Followed folders are paths of this machine: a pack carries none (and an imported pack that
    named some would make this machine read them).
    """
    data = config.model_dump()
    folders = data.pop("follow")
    if folders and not portable:
        data["follow"] = list(folders)
    return data
