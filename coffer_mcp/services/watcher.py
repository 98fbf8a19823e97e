"""The watcher a server runs: followed folders and every knowledge base's ``docs/``, applied as they change.

``coffer serve`` (stdio and HTTP) starts one ``Watcher`` (``Coffer.watching()``): a daemon thread
that asks watchfiles (the Rust ``notify`` crate: inotify on Linux, FSEvents on macOS,
ReadDirectoryChangesW on Windows) for the changes under ``knowledge/`` and under every followed
folder, and applies them through the one ingest routine (followed files: ``FollowService.sync``)
and the one reindex routine (files of ``docs/``: ``Registry.reindex_changed``), under the same
locks as every other writer.

- **Batched and debounced.** watchfiles hands over a batch once no change came for
  ``watch_debounce_ms`` (or a second after the first, while changes keep coming); the paths
  of a batch are deduplicated, and a path's state on disk when the batch is applied decides what
  happens (an editor's save by rename, a file written in several steps: one change).
- **Nothing missed.** On start, and whenever the watched folders change (a folder followed or
  unfollowed, a knowledge base created, a followed folder that comes back), every followed folder
  is synced in full and every knowledge base reconciled after the new watch is live: what changed
  while no watcher ran (or between two watches) is applied then. A batch that met a busy lock is
  retried. While no watcher runs — or where it cannot watch — reconcile-on-read stays in charge.
- **Harmless.** It never writes to stdout (stdio mode: stdout is the protocol; watchfiles' debug
  output is off), logs every failure and carries on (a failure of the watch itself is retried
  every few seconds), and ``stop()`` ends it between two files.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coffer_mcp.errors import CofferError, KnowledgeBaseNotFoundError
from coffer_mcp.services.activity import inside
from coffer_mcp.services.follow import WATCHER, FollowService
from coffer_mcp.services.registry import Registry

__all__ = ["Watcher"]

log = logging.getLogger(__name__)

TICK_MS = 1000
"""How often an idle watcher looks at its targets (a folder followed meanwhile, one that came back)."""
RETRY_SECONDS = 5.0
"""How long after a failed watch (a folder that vanished, an OS limit) it is tried again."""
MAX_BATCH_MS = 1000
"""While changes keep coming, a batch is applied at the latest this long after its first change."""


class _StoppingError(Exception):
    """The watcher was asked to stop while it applied a batch."""


@dataclass(frozen=True)
class _Targets:
    """What one watch covers: the knowledge folder, and each knowledge base's followed folders."""

    roots: tuple[str, ...]
    follows: tuple[tuple[str, str], ...]  # (kb, folder) of every followed folder that exists


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

    def __init__(self, registry: Registry, follow: FollowService) -> None:
        self.registry = registry
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
        self.registry.activity.watching((), docs=False)

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
                self.registry.activity.watching((), docs=False)
                self._report(exc)
                self._stop.wait(RETRY_SECONDS)
        self.registry.activity.watching((), docs=False)

    def _report(self, exc: Exception) -> None:
        """Log a failed watch: in full the first time, in one line when it fails the same way again."""
        text = f"{type(exc).__name__}: {exc}"
        if text == self._last_failure:
            log.info("the watcher still fails (%s); reads reconcile meanwhile", text)
            return
        self._last_failure = text
        log.warning(
            "the watcher failed; reads reconcile meanwhile, and it starts again in %s s (on Linux, a full "
            "inotify watch table needs a higher fs.inotify.max_user_watches, or watch_polling: true)",
            RETRY_SECONDS,
            exc_info=exc,
        )

    def _watch(self) -> None:
        from watchfiles import Change, watch  # compiled: loaded with the watcher, not with the server

        settings = self.registry.settings
        targets = self._targets()
        retarget = threading.Event()
        started = False
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
            if (now := self._targets()) != targets:
                log.debug("watching %s instead of %s", now, targets)
                retarget.set()  # ends this watch; the next one catches up with the new folders

    def _targets(self) -> _Targets:
        knowledge = self.registry.paths.knowledge
        home = self.registry.paths.home
        follows = []
        for kb in self.registry.kb_folders():
            with contextlib.suppress(OSError):
                for folder in self.registry.config(kb).follow:
                    real = Path(folder)
                    if real == home or real.is_relative_to(home) or home.is_relative_to(real):
                        continue  # kb.yaml edited by hand: the store would ingest itself
                    if real.is_dir():
                        follows.append((kb, folder))
        folders = sorted({folder for _, folder in follows})
        outermost = [f for f in folders if not any(f != g and inside(f, g) for g in folders)]
        return _Targets(roots=(str(knowledge), *outermost), follows=tuple(follows))

    # -- applying changes --------------------------------------------------------------------------

    def _catch_up(self, targets: _Targets) -> None:
        """Apply everything that changed while nothing watched: a full check of every folder."""
        self.registry.activity.watching((), docs=False)  # reads reconcile in full until this is done
        for kb in self.registry.kb_folders():
            self._guarded(f"reconciling {kb}", self.registry.refresh, kb)
        for kb, folder in targets.follows:
            self._guarded(f"syncing {folder} into {kb}", self._sync, kb, folder, None)
        self.registry.activity.watching(targets.follows, docs=True)

    def _apply(self, targets: _Targets, paths: set[Path]) -> None:
        """Route a batch of changed paths to their knowledge bases and apply them (with what must be retried)."""
        if paths and log.isEnabledFor(logging.DEBUG):
            log.debug("%d changed: %s", len(paths), sorted(map(str, paths))[:20])
        docs, self._retry_docs = self._retry_docs, defaultdict(set)
        followed, self._retry_followed = self._retry_followed, defaultdict(set)
        knowledge = self.registry.paths.knowledge
        for path in paths:
            if path.is_relative_to(knowledge):
                parts = path.relative_to(knowledge).parts
                if len(parts) == 3 and parts[1] == "docs" and not parts[0].startswith("."):
                    docs[parts[0]].add(path)
                continue  # kb.yaml, raw/, staging folders: _targets sees what matters there
            for kb, folder in targets.follows:
                if inside(str(path), folder):
                    followed[kb, folder].add(path)
        for (kb, folder), changed in followed.items():
            if not self._guarded(f"syncing {folder} into {kb}", self._sync, kb, folder, changed):
                self._retry_followed[kb, folder].update(changed)
        for kb, files in docs.items():
            if not self._guarded(f"indexing the files of {kb}", self.registry.reindex_changed, kb, files):
                self._retry_docs[kb].update(files)

    def _sync(self, kb: str, folder: str, changed: Iterable[Path] | None) -> None:
        activity = self.registry.activity
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

    def _guarded(self, what: str, work: Callable[..., object], *args: Any) -> bool:
        """``work(*args)``; False if it should be retried with the next batch. Failures are logged, never raised.

        A busy lock is retried until it is free; any other failure once, then the changes are left
        to the next full sync (a restart of the watch, ``check_sources``).
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
                return False
            log.warning("%s failed: %s %s", what, exc.message, exc.hint)
            return self._failed(what)
        except Exception:  # one failed change must not stop the others (nor the server): logged
            log.exception("%s failed", what)
            return self._failed(what)
        self._failing.discard(what)
        return True

    def _failed(self, what: str) -> bool:
        """Retry a failed piece of work once; False the first time, True (give up) the second."""
        if what in self._failing:
            self._failing.discard(what)
            log.error("%s failed twice; its changes wait for the next full sync", what)
            return True
        self._failing.add(what)
        return False
