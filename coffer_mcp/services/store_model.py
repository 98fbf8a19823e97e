"""Which embedding model this process uses: the store's, never one of its own making.

Vectors of two models cannot be compared, so the model belongs to the store (``embedding.yaml``,
``store.embedding``; the index keeps a copy), not to a process. It is recorded when vectors are
first written. Then a process

- whose settings name the same model uses them (``same``);
- whose settings name no model, or another one, uses the store's model, built from what was
  recorded (a fastembed ``model_path`` that exists here, an openai server whose key variable is
  set here), and says so once (``store``);
- that cannot build it does no vector work: no embedding, no vector search; keyword search works,
  and the search's hint and ``coffer doctor`` say why and what to do (``refused``).

So a process never re-embeds a store because of its own environment: only ``coffer embeddings
use`` changes the model (``services.embeddings``). A store whose vectors predate the record has
the model most of its documents were embedded with (``derived``), recorded at the next vectors
written. Every process watches the file: when another one changes the model, the next embed
stops (``store_model_changed``) and the next call uses the new model.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from coffer_mcp.embed import Embedder, EmbeddingConfig, make_embedder
from coffer_mcp.errors import EmbeddingError, StoreError
from coffer_mcp.index import Index
from coffer_mcp.settings import Settings
from coffer_mcp.store import StoreModel, StorePaths, create_store_model, read_store_model, store_model_stamp
from coffer_mcp.store import write_store_model as write_model_file
from coffer_mcp.timeutil import utc_now

__all__ = ["MODEL_SETTINGS", "ModelUse", "StoreEmbedding", "UseStatus", "embedding_config", "model_cache"]

log = logging.getLogger(__name__)

UseStatus = Literal["unrecorded", "same", "store", "refused", "off"]
"""``unrecorded``: the store has no model yet, this process's is recorded with its first vectors;
``same``: its settings name the store's model; ``store``: it uses the store's model instead of
the one its settings name (or of none); ``refused``: it cannot build the store's model, so it does
no vector work; ``off``: its embedding provider is ``none``."""

MODEL_SETTINGS = frozenset(
    {"embedding_provider", "embedding_model", "embedding_model_path", "embedding_base_url", "embedding_dimensions"}
)
"""The settings that name a model: a process that sets none of them names no model."""

CHANGE_COMMAND = "coffer embeddings use --confirm"


@dataclass(frozen=True, slots=True)
class ModelUse:
    """What this process does about the store's embedding model.

    Attributes:
        status: See ``UseStatus``.
        store: The store's model (recorded, or found in its vectors), None when it has none yet.
        configured: The identity of the model this process's settings (or the embedder it was given)
            name; None with provider ``none``.
        message: Why it uses the store's model, or does no vector work (``store``, ``refused``, ``off``).
        hint: What to do about it (``refused``).
    """

    status: UseStatus
    store: StoreModel | None
    configured: str | None
    message: str | None = None
    hint: str | None = None


@dataclass(frozen=True, slots=True)
class _Made:
    """An embedder, and how it was built (None: given ready-made), to record the model it embeds with."""

    embedder: Embedder
    config: EmbeddingConfig | None
    api_key_env: str | None


class StoreEmbedding:
    """The embedder of one process over one store: the store's model or none (see the module docstring).

    Args:
        settings: The global settings (the model they name, and the provider options for any model).
        index: The store's index (its copy of the model, and its vectors for a store without a record).
        paths: The store's paths (``embedding.yaml``).
        given: An embedder to use instead of the one the settings describe (tests, custom providers).
    """

    def __init__(self, settings: Settings, index: Index, paths: StorePaths, *, given: Embedder | None = None) -> None:
        self.settings = settings
        self.index = index
        self.file = paths.embedding_file
        self._given = given
        self._lock = threading.RLock()
        self._seen: object = _UNSEEN  # the file's stamp when ``_use`` was decided
        self._use = ModelUse("unrecorded", None, None)
        self._embedder: Embedder | None = None
        self._confirmed: tuple[object, str] | None = None  # (file stamp, identity) checked by ``confirm``
        self._said: set[str] = set()
        self._own: list[_Made | None] = []  # this process's own embedder, once made (a model loads once)
        self._built: dict[StoreModel, tuple[_Made | None, str]] = {}  # the store's models built from records

    @property
    def embedder(self) -> Embedder | None:
        """The embedder this process uses now (None: no vector work); the model loads on first embed.

        Raises:
            ConfigError: the settings name a model that cannot work whatever the environment.
        """
        self._refresh()
        return self._embedder

    @property
    def use(self) -> ModelUse:
        """What this process does about the store's model now (``ModelUse``)."""
        self._refresh()
        return self._use

    def wanted_identity(self) -> str:
        """The model whose vectors documents should have: the store's ('' when neither it nor this process has one)."""
        use = self.use
        if self._embedder is not None:
            return self._embedder.identity
        return use.store.identity if use.store is not None else ""

    def configured(self) -> tuple[Embedder | None, EmbeddingConfig | None]:
        """This process's own embedder (unguarded) and how it was built, whatever the store's model is."""
        with self._lock:
            made = self._configured()
        return (None, None) if made is None else (made.embedder, made.config)

    # -- deciding ----------------------------------------------------------------------------------

    def _refresh(self) -> None:
        stamp = store_model_stamp(self.file)
        if stamp == self._seen:
            return
        with self._lock:
            if stamp == self._seen:
                return
            try:
                use, made = self._decide(self._store_model())
            except StoreError as exc:  # embedding.yaml unreadable: no vector work, said like a refusal
                configured = self._configured()
                identity = configured.embedder.identity if configured is not None else None
                use, made = ModelUse("refused", None, identity, exc.message, exc.hint), None
            self._use = use
            self._embedder = None if made is None else _StoreModelEmbedder(made, self)
            self._seen = stamp
        if use.status in ("store", "refused") and use.message and use.message not in self._said:
            self._said.add(use.message)
            log.warning("%s%s", use.message, f" {use.hint}" if use.hint else "")

    def _store_model(self) -> StoreModel | None:
        """The store's model: the file's, else the index's copy, else the one most documents were embedded with."""
        found = read_store_model(self.file) or self.index.store_model()
        return found if found is not None else _derived(self.index)

    def _decide(self, store: StoreModel | None) -> tuple[ModelUse, _Made | None]:
        own = self._configured()
        configured = own.embedder.identity if own is not None else None
        if own is None:
            said = f"The store's embedding model is {store.identity}, but " if store is not None else ""
            message = said + "this process's embedding provider is none: it embeds nothing and searches by keyword."
            return ModelUse("off", store, None, message if store is not None else None), None
        if store is None:
            return ModelUse("unrecorded", None, configured), own
        if store.identity == configured:
            return ModelUse("same", store, configured), own
        built, why = self._build(store)
        where = f"{store.identity} (recorded in {self.file})"
        if built is not None:
            if self._names_a_model():
                message = (
                    f"This process's settings name the embedding model {configured}, but the store's is {where}: "
                    f"it uses the store's and never re-embeds with its own (to change the store's model: "
                    f"'{CHANGE_COMMAND}', which re-embeds every vector knowledge base)."
                )
            else:
                message = f"This process's settings name no embedding model, so it uses the store's: {where}."
            return ModelUse("store", store, configured, message), built
        message = (
            f"The store's embedding model is {where}, and this process cannot use it: {why}. Vector search and "
            "embedding are off here; keyword search works."
        )
        return ModelUse("refused", store, configured, message, _refusal_hint(store, configured)), None

    def _names_a_model(self) -> bool:
        return self._given is not None or bool(MODEL_SETTINGS & self.settings.model_fields_set)

    def _configured(self) -> _Made | None:
        """This process's own embedder, made once (a ``ConfigError`` is raised again at each call)."""
        if not self._own:
            if self._given is not None:
                made: _Made | None = _Made(self._given, None, None)
            else:
                config = embedding_config(self.settings)
                embedder = make_embedder(config)
                key_env = self.settings.embedding_api_key_env if config.api_key else None
                made = None if embedder is None else _Made(embedder, config, key_env)
            self._own.append(made)
        return self._own[0]

    def _build(self, store: StoreModel) -> tuple[_Made | None, str]:
        """The store's model built from its record (once per record), or why it cannot be."""
        if store in self._built:
            return self._built[store]
        made, why = self._make(store)
        if made is not None:  # a refusal is looked at again: the folder may appear, the variable be set
            self._built[store] = (made, why)
        return made, why

    def _make(self, store: StoreModel) -> tuple[_Made | None, str]:
        """The store's model built from its record with this process's provider options, or why it cannot be."""
        base = dataclasses.replace(embedding_config(self.settings), base_url=None, api_key=None, model_path=None)
        name, dimensions = _model_name(store)
        if store.provider == "fastembed":
            path = Path(store.model_path) if store.model_path else None
            if path is not None and not path.is_dir():
                return None, f"its model folder {path} is not on this machine"
            config = dataclasses.replace(
                base, provider="fastembed", model=name, model_path=path, dimensions=store.dimensions
            )
            key_env = None
        elif store.provider == "openai":
            key_env = store.api_key_env
            key = os.environ.get(key_env) if key_env else None
            if key_env and not key:
                return None, f"it needs an API key in the environment variable {key_env}, which is not set here"
            config = dataclasses.replace(
                base, provider="openai", model=name, base_url=store.base_url, api_key=key, dimensions=dimensions
            )
        else:
            return None, f"it comes from the embedder '{store.provider or '?'}', which Coffer cannot build by itself"
        embedder = make_embedder(config)
        if embedder is None or embedder.identity != store.identity:
            return None, f"its record builds {embedder.identity if embedder else 'no model'}, not {store.identity}"
        return _Made(embedder, config, key_env), ""

    # -- recording ---------------------------------------------------------------------------------

    def confirm(self, identity: str, dimensions: int, made: _Made) -> None:
        """Before vectors of ``identity`` are stored: check it is still the store's model, or record it
        when the store has none yet (the index's copy too). Cheap when nothing changed (one ``stat``).

        Raises:
            EmbeddingError: ``store_model_changed``: the store's model is another one now (changed by
                another process), or has other dimensions; nothing is to be stored.
        """
        stamp = store_model_stamp(self.file)
        if self._confirmed != (stamp, identity):
            with self._lock:
                model = read_store_model(self.file)
                if model is None:
                    found = self.index.store_model() or _derived(self.index)
                    mine = found is None or found.identity == identity
                    first = self._model_of(identity, dimensions, made, like=found) if mine else found
                    assert first is not None
                    model = create_store_model(self.file, first)
                if model.identity == identity and model.dimensions == dimensions:
                    if self.index.store_model() != model:
                        with self.index.transaction():
                            self.index.record_store_model(model, replace=True)
                    self._confirmed = (store_model_stamp(self.file), identity)
                else:
                    self._confirmed = None
                    raise _changed(model, identity, dimensions, self.file)
        self._refresh()

    def record(self, embedder: Embedder, dimensions: int, config: EmbeddingConfig | None) -> StoreModel:
        """Make ``embedder``'s model the store's (the file, then the index), replacing any; the model recorded.

        The caller confirmed the change (``coffer embeddings use``); every process of the store follows it.
        """
        key_env = self.settings.embedding_api_key_env if config is not None and config.api_key else None
        model = self._model_of(embedder.identity, dimensions, _Made(embedder, config, key_env))
        with self._lock:
            write_model_file(self.file, model)
            with self.index.transaction():
                self.index.record_store_model(model, replace=True)
            self._seen = _UNSEEN
        self._refresh()
        return model

    def _model_of(self, identity: str, dimensions: int, made: _Made, *, like: StoreModel | None = None) -> StoreModel:
        """The record of the model ``made`` embeds with; ``like``: one found for it already (its details kept
        where ``made`` was given ready-made and knows none)."""
        config = made.config
        provider, _, rest = identity.partition(":")
        if config is None:
            return (
                dataclasses.replace(like, dimensions=dimensions, recorded_at=utc_now())
                if like
                else StoreModel(identity, dimensions, provider, model=rest or None, recorded_at=utc_now())
            )
        path = config.model_path.expanduser().resolve() if config.model_path is not None else None
        return StoreModel(
            identity=identity,
            dimensions=dimensions,
            provider=config.provider,
            model=_model_name(StoreModel(identity, dimensions, provider))[0],
            model_path=str(path) if path is not None and config.provider == "fastembed" else None,
            base_url=config.base_url if config.provider == "openai" else None,
            api_key_env=made.api_key_env if config.provider == "openai" else None,
            recorded_at=utc_now(),
        )


class _Unseen:
    pass


_UNSEEN = _Unseen()


class _StoreModelEmbedder:
    """An embedder whose vectors are stored only while its model is the store's (``StoreEmbedding.confirm``)."""

    def __init__(self, made: _Made, owner: StoreEmbedding) -> None:
        self.made = made
        self.provider = made.embedder
        self._owner = owner

    def __repr__(self) -> str:
        return f"StoreModelEmbedder({self.provider!r})"

    @property
    def identity(self) -> str:
        return self.provider.identity

    @property
    def cooling_down(self) -> bool:
        return bool(getattr(self.provider, "cooling_down", False))

    @property
    def last_error(self) -> str | None:
        return getattr(self.provider, "last_error", None)

    def dimensions(self) -> int:
        return self.provider.dimensions()

    def embed_query(self, text: str) -> list[float]:
        return self.provider.embed_query(text)

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        vectors = self.provider.embed_documents(texts)
        if vectors:
            self._owner.confirm(self.identity, len(vectors[0]), self.made)
        return vectors


def _changed(model: StoreModel, identity: str, dimensions: int, file: Path) -> EmbeddingError:
    if model.identity != identity:
        what = f"is {model.identity} now (recorded in {file}), not {identity}"
    else:
        what = f"has {model.dimensions} dimensions (recorded in {file}), but {identity} gave {dimensions}"
    return EmbeddingError(
        f"The store's embedding model {what}: nothing was stored.",
        code="store_model_changed",
        hint="The next call uses the store's model. If the model's output really changed, record it again with "
        f"'{CHANGE_COMMAND}'.",
    )


def _derived(index: Index) -> StoreModel | None:
    """The model most embedded documents of vector knowledge bases have (a store from before the record)."""
    counts: Counter[str] = Counter()
    for kb in sorted(index.vector_kbs()):
        counts.update(index.embedded_models(kb))
    for identity, _ in counts.most_common():
        dimensions = index.vector_dimensions(identity)
        if dimensions:
            provider, _, rest = identity.partition(":")
            name = rest.rpartition("@")[0] if provider == "openai" and "@" in rest else rest
            return StoreModel(identity, dimensions, provider, model=name or None)
    return None


def _model_name(store: StoreModel) -> tuple[str | None, int | None]:
    """The model's name and requested dimensions (openai's ``@N``), read from its identity."""
    provider, _, rest = store.identity.partition(":")
    if provider == "openai":
        name, at, size = rest.rpartition("@")
        if at and size.isdigit():
            return name, int(size)
    return rest or store.model, None


def _refusal_hint(store: StoreModel, configured: str | None) -> str:
    """How to let this process use the store's model, or make its own model the store's."""
    name = _model_name(store)[0] or store.model or store.identity
    if store.provider == "fastembed":
        give = (
            f"set COFFER_EMBEDDING_PROVIDER=fastembed, COFFER_EMBEDDING_MODEL={name} and COFFER_EMBEDDING_MODEL_PATH "
            "to this machine's copy of it (or the embedding section of config.yaml)"
        )
    elif store.provider == "openai":
        key = f" and the API key in {store.api_key_env}" if store.api_key_env else ""
        give = (
            f"set COFFER_EMBEDDING_PROVIDER=openai, COFFER_EMBEDDING_MODEL={name}, COFFER_EMBEDDING_BASE_URL="
            f"{store.base_url or 'its server'}{key}"
        )
    else:
        give = "run it with the embedder that recorded the model"
    own = f" or make {configured} the store's model with '{CHANGE_COMMAND}' (it re-embeds every vector knowledge base)"
    return f"To search by vector here, {give};{own if configured else ''}."


def model_cache(settings: Settings) -> Path | None:
    """Where fastembed keeps downloaded models: the home (the temp dir may be emptied by a reboot),
    unless the user chose a cache folder for fastembed (None: fastembed's own)."""
    return None if os.environ.get("FASTEMBED_CACHE_PATH") else settings.home / "models"


def embedding_config(settings: Settings) -> EmbeddingConfig:
    """The embedder's settings, taken from the global ones."""
    key = settings.embedding_api_key
    return EmbeddingConfig(
        provider=settings.embedding_provider,
        model=settings.embedding_model,
        model_path=settings.embedding_model_path,
        cache_dir=model_cache(settings),
        base_url=settings.embedding_base_url,
        api_key=key.get_secret_value() if key is not None else None,
        dimensions=settings.embedding_dimensions,
        batch_size=settings.embedding_batch_size,
        cooldown_seconds=settings.embedding_cooldown_seconds,
        service=settings.embedding_service,
        service_idle_seconds=settings.embedding_service_idle_seconds,
    )
