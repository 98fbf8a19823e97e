"""The watcher a server runs: followed folders and every knowledge base's ``docs/``, applied as they change.

``coffer serve`` (stdio and HTTP) starts one ``Watcher`` (``Coffer.watching()``): a daemon thread
that asks watchfiles (the Rust ``notify`` crate: inotify on Linux, FSEvents on macOS,
ReadDirectoryChangesW on Windows) for the changes under ``knowledge/`` and under every followed
folder, and applies them through the one ingest routine (followed files: ``FollowService.sync``)
and the one reindex routine (files of ``docs/``: ``Freshness.reindex_changed``), under the same
locks as every other writer.

- **Batched and debounced.** watchfiles hands over a batch once no change came for
  ``watch_debounce_ms`` (or a second after the first, while changes keep coming); the paths
  of a batch are deduplicated, and a path's state on disk when the batch is applied decides what
  happens (an editor's save by rename, a file written in several steps: one change).
- **Nothing missed.** On start, and whenever the watched folders change (a folder followed or
  unfollowed, a knowledge base created, a followed folder that comes back), every followed folder
  is synced in full and every knowledge base reconciled after the new watch is live: what changed
  while no watcher ran (or between two watches) is applied then. A batch that met a busy lock is
  retried with the next one. A followed folder whose sync failed otherwise (the PostgreSQL index
  down, the store not writable) is synced in full again — its batch's events may be all there is
  of those changes — after 1 s, 2 s, 4 s … at most every minute, until that succeeds; meanwhile
  its metrics keep ``pending`` above 0, its old ``last_sync`` and the failure (``warning``). While
  no watcher runs — or where it cannot watch — reconcile-on-read stays in charge.
- **Its own files replaced.** A knowledge base's files replaced under its followed folders (a
  snapshot restored: the knowledge base's folder swapped; ``docs/`` files deleted or put back by
  hand) may leave files of the folder without their document, or documents of files deleted
  since — and those files raise no event of their own. So the folders of such a knowledge base
  are synced in full (``FollowActivity.resync``: a restore in this process asks for it too), and
  until then their metrics keep ``pending`` above 0 and their old ``last_sync``.
- **Names it cannot report.** watchfiles stops (``WatchfilesRustInternalError: Unable to decode
  path``) at an event for a name that is not valid UTF-8 — on Linux already when it starts, if a
  watched folder has such a name — and drops the batch it was collecting. So a followed folder
  whose sync met such a name (``undecodable_name``) is left out of the watch and synced in full
  every ``POLL_SECONDS`` instead (``watched: false``, a ``warning`` says why), until the name is
  gone; when a watch stops at such a name, every followed folder is synced in full to find it.
- **Harmless.** It never writes to stdout (stdio mode: stdout is the protocol; watchfiles' debug
  output is off), logs every failure and carries on (a failure of the watch itself is retried
  every few seconds), and ``stop()`` ends it between two files.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coffer_mcp.errors import CofferError, KnowledgeBaseNotFoundError
from coffer_mcp.services.activity import FollowActivity, inside
from coffer_mcp.services.catalogue import Catalogue
from coffer_mcp.services.follow import WATCHER, FollowService
from coffer_mcp.services.freshness import Freshness
from coffer_mcp.settings import Settings
from coffer_mcp.store import StorePaths

__all__ = ["Watcher"]

log = logging.getLogger(__name__)

TICK_MS = 1000
"""How often an idle watcher looks at its targets (a folder followed meanwhile, one that came back)."""
RETRY_SECONDS = 5.0
"""How long after a failed watch (a folder that vanished, an OS limit) it is tried again."""
RESYNC_SECONDS = (1.0, 60.0)
"""A followed folder whose sync failed is synced in full again after 1 s, then twice as long each time, at most 60 s."""
POLL_SECONDS = 5.0
"""How often a followed folder the watch cannot cover is synced in full (at least 10 times its last sync's length)."""
_UNDECODABLE = "Unable to decode path"
"""How watchfiles says that a name is not valid UTF-8 (the Rust error has no type of its own)."""
MAX_BATCH_MS = 1000
"""While changes keep coming, a batch is applied at the latest this long after its first change."""


class _StoppingError(Exception):
    """The watcher was asked to stop while it applied a batch."""


@dataclass(frozen=True)
class _Targets:
    """What one watch covers: the knowledge folder, and each knowledge base's followed folders."""

    roots: tuple[str, ...]
    follows: tuple[tuple[str, str], ...]  # (kb, folder) of every followed folder that exists and is watched
    polled: tuple[tuple[str, str], ...] = ()  # (kb, folder) of those synced in full periodically instead


@dataclass
class _Behind:
    """A followed folder whose sync failed: synced in full again at ``due`` (``time.monotonic``)."""

    error: str
    failures: int
    due: float
    missed: set[Path]  # the changes seen since (what metrics count as pending)


@dataclass(frozen=True)
class _Failure:
    """Why a piece of work failed: ``busy`` (retried with the next batch), or ``message``."""

    message: str
    busy: bool = False


class _Either:
    """An event that is set when any of its events is (watchfiles checks ``is_set`` every step)."""

    def __init__(self, *events: threading.Event) -> None:
        self.events = events

    def is_set(self) -> bool:
        return any(event.is_set() for event in self.events)


class Watcher:
    """Applies the changes of followed folders and of ``docs/`` folders while a server runs.

    Use it as a context manager, or ``start()`` and ``stop()``.
    """

    def __init__(
        self,
        *,
        settings: Settings,
        paths: StorePaths,
        activity: FollowActivity,
        catalogue: Catalogue,
        freshness: Freshness,
        follow: FollowService,
    ) -> None:
        self.settings = settings
        self.paths = paths
        self.activity = activity
        self.catalogue = catalogue
        self.freshness = freshness
        self.follow = follow
        self.ready = threading.Event()
        """Set once the first watch is live and everything that changed before it was applied."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # Changes that met a busy lock, applied with the next batch: docs/ files by knowledge base,
        # followed paths by (knowledge base, folder).
        self._retry_docs: dict[str, set[Path]] = defaultdict(set)
        self._retry_followed: dict[tuple[str, str], set[Path]] = defaultdict(set)
        self._failing: set[str] = set()  # work that failed once and is retried with the next batch
        self._last_failure = ""
        self._failed_before: set[str] = set()  # work whose failure was logged at WARNING already
        self._behind: dict[tuple[str, str], _Behind] = {}  # followed folders to sync in full again
        self._polls: dict[tuple[str, str], float] = {}  # polled folder -> when it is synced next

    def start(self) -> Watcher:
        """Start watching (once: a started watcher is returned as it is)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="coffer-watcher", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop watching, at the latest after the file being applied; wait up to ``timeout`` seconds."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.warning("the watcher did not stop within %s s", timeout)
        self.activity.watching((), docs=False)

    def __enter__(self) -> Watcher:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the watch loop ----------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._watch()
            except _StoppingError:
                break
            except Exception as exc:  # noqa: BLE001 - a watcher failure must never take the server down
                self.activity.watching((), docs=False)
                try:
                    if _UNDECODABLE in str(exc) and self._find_undecodable(exc):
                        continue  # watch again at once, without the folders found
                except _StoppingError:
                    break
                self._report(exc)
                self._stop.wait(RETRY_SECONDS)
        self.activity.watching((), docs=False)

    def _report(self, exc: Exception) -> None:
        """Log a failed watch: in full the first time, in one line when it fails the same way again."""
        text = f"{type(exc).__name__}: {exc}"
        if text == self._last_failure:
            log.info("the watcher still fails (%s); reads reconcile meanwhile", text)
            return
        self._last_failure = text
        if _UNDECODABLE in text:
            why = "a name that is not valid UTF-8, which watchfiles cannot report: rename it"
        else:
            why = "on Linux, a full inotify watch table needs a higher fs.inotify.max_user_watches, or watch_polling"
        log.warning(
            "the watcher failed; reads reconcile meanwhile, and it starts again in %s s (%s)",
            RETRY_SECONDS,
            why,
            exc_info=exc,
        )

    def _find_undecodable(self, exc: Exception) -> bool:
        """After a watch stopped at a name that is not UTF-8: sync every followed folder in full (the
        batch is lost, and the syncs find the name); True if a folder is to be polled from now on."""
        log.warning(
            "the watcher stopped at a name that is not valid UTF-8 (%s): its changes were not reported; "
            "syncing every followed folder in full",
            exc,
        )
        before = self._targets()
        for kb, folder in before.follows:
            self._full_sync(kb, folder)
        return self._targets().polled != before.polled

    def _watch(self) -> None:
        from watchfiles import Change, watch  # compiled: loaded with the watcher, not with the server

        settings = self.settings
        targets = self._targets()
        retarget = threading.Event()
        started = False
        self._polling(targets.polled)
        for changes in watch(
            *targets.roots,
            watch_filter=None,
            debounce=max(MAX_BATCH_MS, settings.watch_debounce_ms),
            step=settings.watch_debounce_ms,
            stop_event=_Either(self._stop, retarget),
            rust_timeout=TICK_MS,
            yield_on_timeout=True,
            debug=False,  # watchfiles' debug output goes to stdout, which stdio servers must keep clean
            raise_interrupt=False,
            force_polling=True if settings.watch_polling else None,
            ignore_permission_denied=True,
        ):
            if not started:  # the watch is live: apply what changed before it
                self._catch_up(targets)
                started = True
                self._last_failure = ""
                self.ready.set()
            # A folder's own "modified" (its mode, its times) says nothing about its files: a folder
            # added (created, moved in) is walked, a file's own events tell the rest.
            modified = Change.modified
            self._apply(targets, {Path(p) for change, p in changes if change != modified or not os.path.isdir(p)})
            self._catch_up_behind(targets)
            if (now := self._targets()) != targets:
                log.debug("watching %s instead of %s", now, targets)
                retarget.set()  # ends this watch; the next one catches up with the new folders

    def _targets(self) -> _Targets:
        knowledge = self.paths.knowledge
        home = self.paths.home
        follows: list[tuple[str, str]] = []
        polled: list[tuple[str, str]] = []
        for kb in self.catalogue.kb_names():
            with contextlib.suppress(OSError):
                for folder in self.catalogue.config(kb).follow:
                    real = Path(folder)
                    if real == home or real.is_relative_to(home) or home.is_relative_to(real):
                        continue  # kb.yaml edited by hand: the store would ingest itself
                    if real.is_dir():
                        unwatchable = self.activity.get(kb, folder).undecodable
                        (polled if unwatchable else follows).append((kb, folder))
        folders = sorted({folder for _, folder in follows})
        outermost = [f for f in folders if not any(f != g and inside(f, g) for g in folders)]
        return _Targets(roots=(str(knowledge), *outermost), follows=tuple(follows), polled=tuple(polled))

    def _polling(self, polled: tuple[tuple[str, str], ...]) -> None:
        """Start polling the folders the watch leaves out (and stop polling the others); say so once."""
        for kb, folder in polled:
            if (kb, folder) not in self._polls:
                log.warning(
                    "followed folder %s of %s holds names that are not valid UTF-8 (check_sources lists them): the "
                    "watcher cannot be told of its changes, so it syncs the folder in full every %s s or so instead",
                    folder,
                    kb,
                    POLL_SECONDS,
                )
        self._polls = {key: self._polls.get(key, 0.0) for key in polled}

    # -- applying changes --------------------------------------------------------------------------

    def _catch_up(self, targets: _Targets) -> None:
        """Apply everything that changed while nothing watched: a full check of every folder."""
        self.activity.watching((), docs=False)  # reads reconcile in full until this is done
        for kb in self.catalogue.kb_names():
            self._guarded(f"reconciling {kb}", self.freshness.refresh, kb)
        for kb, folder in (*targets.follows, *targets.polled):
            self._full_sync(kb, folder)
        self.activity.watching(targets.follows, docs=True, polled=targets.polled)

    def _full_sync(self, kb: str, folder: str) -> None:
        """Sync a followed folder in full; a failure puts it (back) among those to sync again."""
        key = (kb, folder)
        started = time.monotonic()
        failure = self._guarded(f"syncing {folder} into {kb}", self._sync, kb, folder, None)
        if key in self._polls:
            self._polls[key] = time.monotonic() + max(POLL_SECONDS, 10 * (time.monotonic() - started))
        if failure is None:
            behind = self._behind.pop(key, None)
            if behind is not None and behind.failures:
                log.warning("%s -> %s: in step again after %d failed syncs", folder, kb, behind.failures)
        else:
            self._fell_behind(key, failure.message, set(), failed=not failure.busy)

    def _fell_behind(self, key: tuple[str, str], error: str, missed: set[Path], *, failed: bool) -> None:
        """A followed folder is to be synced in full again: its sync ``failed`` (then later each time),
        was busy, or changed while it waits (then when it was due anyway)."""
        first, most = RESYNC_SECONDS
        behind = self._behind.get(key)
        if behind is None:
            behind = self._behind[key] = _Behind(error, 0, time.monotonic() + first, set())
        if failed:
            behind.failures += 1
            behind.due = time.monotonic() + min(most, first * 2 ** (behind.failures - 1))
        behind.error = error
        behind.missed |= missed
        self.activity.behind(*key, error, len(behind.missed))

    def _catch_up_behind(self, targets: _Targets) -> None:
        """Sync in full the followed folders whose sync failed (when due), and the polled ones (when due)."""
        now = time.monotonic()
        present = {*targets.follows, *targets.polled}
        due = [key for key, behind in self._behind.items() if behind.due <= now and key in present]
        due += [key for key, when in self._polls.items() if when <= now and key not in due]
        due += [key for key in self.activity.resyncs() if key in present and key not in due]
        for kb, folder in due:
            self._full_sync(kb, folder)

    def _apply(self, targets: _Targets, paths: set[Path]) -> None:
        """Route a batch of changed paths to their knowledge bases and apply them (with what must be retried)."""
        if paths and log.isEnabledFor(logging.DEBUG):
            log.debug("%d changed: %s", len(paths), sorted(map(str, paths))[:20])
        docs, self._retry_docs = self._retry_docs, defaultdict(set)
        followed, self._retry_followed = self._retry_followed, defaultdict(set)
        knowledge = self.paths.knowledge
        for path in paths:
            if path.is_relative_to(knowledge):
                parts = path.relative_to(knowledge).parts
                if len(parts) == 3 and parts[1] == "docs" and not parts[0].startswith("."):
                    docs[parts[0]].add(path)
                elif parts and parts[1:] in ((), ("docs",)) and not parts[0].startswith(".") and path.is_dir():
                    # A knowledge base's folder (or its docs/) put in place whole: a restore's swap.
                    self._resync(targets, parts[0], f"The files of knowledge base '{parts[0]}' were replaced")
                continue  # kb.yaml, raw/, staging folders: _targets sees what matters there
            for kb, folder in targets.follows:
                if inside(str(path), folder):
                    followed[kb, folder].add(path)
        for (kb, folder), changed in followed.items():
            if (key := (kb, folder)) in self._behind:  # its full sync, when due, applies these too
                self._fell_behind(key, self._behind[key].error, changed, failed=False)
                continue
            failure = self._guarded(f"syncing {folder} into {kb}", self._sync, kb, folder, changed)
            if failure is not None and failure.busy:
                self._retry_followed[key].update(changed)
            elif failure is not None:  # its events may be all there is of these changes: a full sync, later
                self._fell_behind(key, failure.message, changed, failed=True)
        for kb, files in docs.items():
            lost: set[str] = set()
            reindex = functools.partial(self.freshness.reindex_changed, sources=lost)
            failure = self._guarded(f"indexing the files of {kb}", reindex, kb, files)
            if failure is not None and (failure.busy or self._failed(f"indexing the files of {kb}")):
                self._retry_docs[kb].update(files)
            if lost:
                self._resync(targets, kb, f"Documents of knowledge base '{kb}' were removed or replaced", lost)

    def _resync(self, targets: _Targets, kb: str, why: str, sources: Iterable[str] | None = None) -> None:
        """Have the followed folders of ``kb`` (those holding ``sources``, if given) synced in full soon."""
        lost = None if sources is None else list(sources)
        folders = [
            folder
            for key, folder in (*targets.follows, *targets.polled)
            if key == kb and (lost is None or any(inside(source, folder) for source in lost))
        ]
        if folders:
            log.info("%s: syncing %s in full", why, ", ".join(folders))
            self.activity.resync(kb, folders, why)

    def _sync(self, kb: str, folder: str, changed: Iterable[Path] | None) -> None:
        activity = self.activity
        if changed is not None:
            changed = sorted(changed)
            activity.pending(kb, folder, len(changed))

        def progress(done: int, total: int, message: str) -> None:
            if self._stop.is_set():
                raise _StoppingError
            activity.pending(kb, folder, max(total - done, 1))  # 0 once the batch is recorded (synced)

        result = self.follow.sync(kb, folder, actor=WATCHER, progress=progress, changed=changed, unchanged_items=False)
        did = {s: getattr(result, s) for s in ("created", "updated", "renamed", "removed", "conflict", "rejected")}
        if any(did.values()):
            log.info("%s -> %s: %s", folder, kb, ", ".join(f"{n} {s}" for s, n in did.items() if n))

    def _guarded(self, what: str, work: Callable[..., object], *args: Any) -> _Failure | None:
        """``work(*args)``; None if it did its work, else why not. Failures are logged, never raised.

        A failure logged once is logged again only at info level until the work succeeds.
        """
        try:
            work(*args)
        except _StoppingError:
            raise
        except KnowledgeBaseNotFoundError:
            pass  # deleted meanwhile: nothing left to apply
        except CofferError as exc:
            if exc.code == "busy":
                log.info("%s: the knowledge base is busy; retrying", what)
                return _Failure(exc.message, busy=True)
            log.log(self._level(what), "%s failed: %s %s", what, exc.message, exc.hint)
            return _Failure(exc.message)
        except Exception as exc:  # one failed change must not stop the others (nor the server): logged
            log.log(self._level(what), "%s failed", what, exc_info=exc)
            return _Failure(f"{type(exc).__name__}: {exc}")
        self._failing.discard(what)
        self._failed_before.discard(what)
        return None

    def _level(self, what: str) -> int:
        """WARNING for a piece of work's first failure, INFO for the ones after (until it succeeds)."""
        if what in self._failed_before:
            return logging.INFO
        self._failed_before.add(what)
        return logging.WARNING

    def _failed(self, what: str) -> bool:
        """Whether to retry a failed ``docs/`` batch: once; the second time it is left to reconcile-on-read."""
        if what in self._failing:
            self._failing.discard(what)
            log.error("%s failed twice; reads reconcile its files", what)
            return False
        self._failing.add(what)
        return True
