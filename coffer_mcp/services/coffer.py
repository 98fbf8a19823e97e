"""``Coffer``: the one object every surface (CLI, MCP server, web viewer) calls.

A thin facade over the services, composed here and nowhere else::

    the home's collaborators, one of each:
        Locks ── Catalogue ── Freshness     Providers (embedder, reranker)     FollowActivity, ChangeFeed
    the services, each handed through its constructor only the collaborators it uses:
        KnowledgeBaseService ─┬─ Diagnosis
                              └─ PortabilityService
        EmbeddingService (the store's embedding model: StoreEmbedding, in Providers)
        DocumentService ─┬─ SourceService
                         └─ FollowService ── Watcher (while a server runs)
        RetrievalService

Each operation is written once, in its service; the facade lists which service answers it
(``_forward``): on a ``Coffer`` it is that service's bound method, signature and docstring. Only
the collaborators and ``RetrievalService`` are made with the facade; every other service (and its
module) on its first use, so that a one-shot ``coffer kb search`` loads no ingest pipeline.
Adding an operation means writing it in its service and adding one line here. The HTTP server's
OAuth state (clients, grants, the owner's password) is ``authorization``, an
``AuthorizationService`` used as it is.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, TypeVar, cast

from coffer_mcp import portability
from coffer_mcp.embed import Embedder
from coffer_mcp.index import Index, open_index
from coffer_mcp.services.activity import FollowActivity
from coffer_mcp.services.catalogue import Catalogue
from coffer_mcp.services.changes import ChangeFeed
from coffer_mcp.services.freshness import Freshness
from coffer_mcp.services.locks import Locks
from coffer_mcp.services.providers import Providers
from coffer_mcp.services.retrieval import RetrievalService
from coffer_mcp.settings import Settings
from coffer_mcp.store import KbConfig, StorePaths

if TYPE_CHECKING:
    from coffer_mcp.services.authorization import AuthorizationService
    from coffer_mcp.services.diagnosis import Diagnosis
    from coffer_mcp.services.documents import DocumentService
    from coffer_mcp.services.embeddings import EmbeddingService
    from coffer_mcp.services.follow import FollowService
    from coffer_mcp.services.knowledge_bases import KnowledgeBaseService
    from coffer_mcp.services.portability import PortabilityService
    from coffer_mcp.services.sources import SourceService
    from coffer_mcp.services.watcher import Watcher

__all__ = ["Coffer"]

P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S")


def _forward(service: str, method: Callable[Concatenate[Any, P], R]) -> Callable[Concatenate[Coffer, P], R]:
    """A facade method: ``method`` of the facade's ``service`` attribute, bound to that service."""
    return cast(Callable[Concatenate["Coffer", P], R], _Forward(service, method))


class _Forward:
    """The facade's method that is one of a service's: on a ``Coffer`` it is the service's bound
    method (its signature and docstring); on the class, the service's function."""

    def __init__(self, service: str, method: Callable[..., Any]) -> None:
        self._service, self._method, self._name = service, method, method.__name__

    def __get__(self, coffer: Coffer | None, owner: type | None = None) -> Any:
        if coffer is None:
            return self._method.resolve() if isinstance(self._method, _LaterMethod) else self._method
        return getattr(getattr(coffer, self._service), self._name)


class _Later:
    """A service class named in the facade before its module is loaded: the module loads when the
    service is first used (a search needs neither the ingest pipeline nor followed folders)."""

    def __init__(self, module: str, name: str) -> None:
        self._module, self._name = module, name

    def __getattr__(self, method: str) -> _LaterMethod:
        return _LaterMethod(self._module, self._name, method)


class _LaterMethod:
    """A method of a ``_Later`` class, by name."""

    def __init__(self, module: str, owner: str, name: str) -> None:
        self._module, self._owner, self.__name__ = module, owner, name

    def resolve(self) -> Callable[..., Any]:
        owner = getattr(importlib.import_module(self._module), self._owner)
        function: Callable[..., Any] = getattr(owner, self.__name__)
        return function


if not TYPE_CHECKING:
    AuthorizationService = _Later("coffer_mcp.services.authorization", "AuthorizationService")
    Diagnosis = _Later("coffer_mcp.services.diagnosis", "Diagnosis")
    DocumentService = _Later("coffer_mcp.services.documents", "DocumentService")
    EmbeddingService = _Later("coffer_mcp.services.embeddings", "EmbeddingService")
    FollowService = _Later("coffer_mcp.services.follow", "FollowService")
    KnowledgeBaseService = _Later("coffer_mcp.services.knowledge_bases", "KnowledgeBaseService")
    PortabilityService = _Later("coffer_mcp.services.portability", "PortabilityService")
    SourceService = _Later("coffer_mcp.services.sources", "SourceService")


class _Composed(Generic[S]):
    """A service made on its first use (under the facade's lock: one of each), by ``make``."""

    def __init__(self, make: Callable[[Coffer], S]) -> None:
        self._make = make
        self.__doc__ = make.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self._attribute = name

    def __get__(self, coffer: Coffer | None, owner: type | None = None) -> S:
        if coffer is None:
            return cast(S, self)
        with coffer._composing:
            made = coffer.__dict__.get(self._attribute)
            if made is None:
                made = coffer.__dict__[self._attribute] = self._make(coffer)
        return cast(S, made)


class Coffer:
    """The Coffer core over one ``COFFER_HOME``."""

    def __init__(self, settings: Settings, *, embedder: Embedder | None = None, index: Index | None = None) -> None:
        """A core over ``settings.home``: its folders are made (for a shared index, once it has accepted
        the home as its store), and what a crash left is finished first.

        A restore that a crash interrupted is completed (or rolled back), and the staging folders
        of killed imports (gigabytes, maybe) are removed, before anything reads.

        Args:
            settings: The global settings.
            embedder: An embedder to use instead of the one the settings describe (tests, custom
                providers); it must follow the ``coffer_mcp.embed.Embedder`` protocol.
            index: The index to use instead of the home's own ``coffer.db``.
        """
        self.settings = settings
        self.paths = paths = StorePaths(settings.home)
        self.index = index = index or open_index(settings)
        self.activity = activity = FollowActivity()
        self.changes = ChangeFeed(index, paths)
        """What changed in the knowledge bases someone tracks (resource notifications of the MCP server)."""
        self.locks = locks = Locks(settings, paths, index, self.changes)
        self.catalogue = catalogue = Catalogue(settings, paths, index, locks)
        self.providers = providers = Providers(settings, index, paths, embedder=embedder)
        self.freshness = Freshness(
            settings, paths, index, catalogue=catalogue, locks=locks, providers=providers, activity=activity
        )
        catalogue.prepare_home(connect=False)  # a shared index: at its first connection, if it accepts the home
        portability.recover_interrupted_restores(paths)
        portability.remove_abandoned_imports(paths)
        self._compose_services()

    def _compose_services(self) -> None:
        """Make the services every command uses; the others are made on their first use (``_Composed``),
        so that a one-shot command loads only the modules it needs."""
        self._composing = threading.RLock()  # a service may need another made first
        self.retrieval = RetrievalService(
            settings=self.settings,
            index=self.index,
            paths=self.paths,
            catalogue=self.catalogue,
            freshness=self.freshness,
            providers=self.providers,
        )

    @_Composed
    def knowledge_bases(self) -> KnowledgeBaseService:
        from coffer_mcp.services.knowledge_bases import KnowledgeBaseService

        return KnowledgeBaseService(
            settings=self.settings,
            index=self.index,
            paths=self.paths,
            activity=self.activity,
            catalogue=self.catalogue,
            locks=self.locks,
            freshness=self.freshness,
            providers=self.providers,
        )

    @_Composed
    def documents(self) -> DocumentService:
        from coffer_mcp.services.documents import DocumentService

        return DocumentService(
            settings=self.settings,
            index=self.index,
            catalogue=self.catalogue,
            locks=self.locks,
            freshness=self.freshness,
            providers=self.providers,
        )

    @_Composed
    def follow(self) -> FollowService:
        from coffer_mcp.services.follow import FollowService

        return FollowService(
            settings=self.settings,
            index=self.index,
            paths=self.paths,
            activity=self.activity,
            catalogue=self.catalogue,
            locks=self.locks,
            freshness=self.freshness,
            documents=self.documents,
        )

    @_Composed
    def sources(self) -> SourceService:
        from coffer_mcp.services.sources import SourceService

        return SourceService(
            settings=self.settings,
            index=self.index,
            activity=self.activity,
            catalogue=self.catalogue,
            freshness=self.freshness,
            documents=self.documents,
            follow=self.follow,
        )

    @_Composed
    def portability(self) -> PortabilityService:
        from coffer_mcp.services.portability import PortabilityService

        return PortabilityService(
            settings=self.settings,
            index=self.index,
            activity=self.activity,
            catalogue=self.catalogue,
            locks=self.locks,
            freshness=self.freshness,
            providers=self.providers,
            knowledge_bases=self.knowledge_bases,
        )

    @_Composed
    def diagnosis(self) -> Diagnosis:
        from coffer_mcp.services.diagnosis import Diagnosis

        return Diagnosis(
            settings=self.settings,
            index=self.index,
            paths=self.paths,
            catalogue=self.catalogue,
            providers=self.providers,
            knowledge_bases=self.knowledge_bases,
        )

    @_Composed
    def embeddings(self) -> EmbeddingService:
        from coffer_mcp.services.embeddings import EmbeddingService

        return EmbeddingService(
            index=self.index, paths=self.paths, catalogue=self.catalogue, locks=self.locks, providers=self.providers
        )

    @_Composed
    def authorization(self) -> AuthorizationService:
        """The HTTP server's OAuth state: clients, grants, the owner's password."""
        from coffer_mcp.services.authorization import AuthorizationService

        return AuthorizationService(
            self.index,
            access_seconds=self.settings.auth_access_token_seconds,
            refresh_seconds=self.settings.auth_refresh_token_seconds,
        )

    @property
    def embedder(self) -> Embedder | None:
        return self.providers.embedder

    def modes(self, config: KbConfig) -> list[str]:
        return self.providers.modes(config)

    def watching(self) -> Watcher:
        """A started watcher that applies the changes of followed folders and ``docs/`` folders.

        ``coffer serve`` runs one while it serves: ``with coffer.watching(): serve()``.
        """
        from coffer_mcp.services.watcher import Watcher

        return Watcher(
            settings=self.settings,
            paths=self.paths,
            activity=self.activity,
            catalogue=self.catalogue,
            freshness=self.freshness,
            follow=self.follow,
        ).start()

    def close(self) -> None:
        """Stop the background file checks and search workers, write the queued call log; close every
        connection to the index, and the reranker's."""
        self.freshness.close_checks()
        if "diagnosis" in self.__dict__:  # made only if used
            self.diagnosis.close()
        self.retrieval.close()
        self.providers.close_reranker()
        self.index.close()

    def __enter__(self) -> Coffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- knowledge bases ---------------------------------------------------------------------------
    open_kb = _forward("catalogue", Catalogue.open_kb)
    kb_names = _forward("catalogue", Catalogue.kb_names)
    refresh = _forward("freshness", Freshness.refresh)
    kb_lock = _forward("locks", Locks.kb_lock)
    writing = _forward("locks", Locks.writing)
    create_kb = _forward("knowledge_bases", KnowledgeBaseService.create_kb)
    list_kbs = _forward("knowledge_bases", KnowledgeBaseService.list_kbs)
    describe_kb = _forward("knowledge_bases", KnowledgeBaseService.describe_kb)
    update_kb = _forward("knowledge_bases", KnowledgeBaseService.update_kb)
    delete_kb = _forward("knowledge_bases", KnowledgeBaseService.delete_kb)
    reindex = _forward("knowledge_bases", KnowledgeBaseService.reindex)
    reindex_all = _forward("knowledge_bases", KnowledgeBaseService.reindex_all)
    verify = _forward("knowledge_bases", KnowledgeBaseService.verify)
    registered_kbs = _forward("knowledge_bases", KnowledgeBaseService.registered_kbs)
    vector_kbs = _forward("knowledge_bases", KnowledgeBaseService.vector_kbs)
    document_counts = _forward("knowledge_bases", KnowledgeBaseService.document_counts)
    degraded_count = _forward("knowledge_bases", KnowledgeBaseService.degraded_count)

    # -- documents ---------------------------------------------------------------------------------
    list_documents = _forward("documents", DocumentService.list_documents)
    recent_documents = _forward("documents", DocumentService.recent_documents)
    read_document = _forward("documents", DocumentService.read_document)
    read_original = _forward("documents", DocumentService.read_original)
    add_document = _forward("documents", DocumentService.add_document)
    edit_document = _forward("documents", DocumentService.edit_document)
    delete_document = _forward("documents", DocumentService.delete_document)
    ingest_path = _forward("documents", DocumentService.ingest_path)

    # -- sources -----------------------------------------------------------------------------------
    ingest_allowed_path = _forward("sources", SourceService.ingest_allowed_path)
    ingest_url = _forward("sources", SourceService.ingest_url)
    check_sources = _forward("sources", SourceService.check_sources)
    update_from_source = _forward("sources", SourceService.update_from_source)

    # -- followed folders --------------------------------------------------------------------------
    follow_folder = _forward("follow", FollowService.follow)
    unfollow_folder = _forward("follow", FollowService.unfollow)
    followed_folders = _forward("follow", FollowService.followed)
    sync_followed = _forward("follow", FollowService.sync_all)

    # -- retrieval ---------------------------------------------------------------------------------
    resolve_kbs = _forward("retrieval", RetrievalService.resolve_kbs)
    search = _forward("retrieval", RetrievalService.search)
    grep = _forward("retrieval", RetrievalService.grep)

    # -- portability -------------------------------------------------------------------------------
    export_kb = _forward("portability", PortabilityService.export_kb)
    export_allowed = _forward("portability", PortabilityService.export_allowed)
    import_pack = _forward("portability", PortabilityService.import_pack)
    snapshot_kb = _forward("portability", PortabilityService.snapshot_kb)
    list_snapshots = _forward("portability", PortabilityService.list_snapshots)
    find_snapshot = _forward("portability", PortabilityService.find_snapshot)
    delete_snapshot = _forward("portability", PortabilityService.delete_snapshot)
    restore_snapshot = _forward("portability", PortabilityService.restore_snapshot)

    # -- the store's embedding model ---------------------------------------------------------------
    embedding_status = _forward("diagnosis", Diagnosis.embedder_status)
    use_embedding_model = _forward("embeddings", EmbeddingService.use_embedding_model)

    # -- diagnosis and history ---------------------------------------------------------------------
    doctor = _forward("diagnosis", Diagnosis.doctor)
    record_invocation = _forward("diagnosis", Diagnosis.record_invocation)
    invocations = _forward("diagnosis", Diagnosis.invocations)
