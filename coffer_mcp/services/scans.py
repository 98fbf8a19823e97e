"""When each knowledge base's files were last checked against the index, and the thread that checks big ones.

``Freshness.refresh`` checks a small knowledge base's files on every read; a big one's (a check
costing more than ``reconcile_budget_ms``) again only once ``reconcile_interval`` has passed, and
off the read path, on one background thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from coffer_mcp.errors import KnowledgeBaseNotFoundError
from coffer_mcp.settings import Settings

__all__ = ["MAX_SCAN_SHARE", "WATCHED_RECHECK_SECONDS", "BackgroundChecks", "ScanLog"]

log = logging.getLogger(__name__)

MAX_SCAN_SHARE = 0.05
"""At most this share of a busy reader's time goes to full file checks (a 240 ms check: every 4.8 s)."""
WATCHED_RECHECK_SECONDS = 60.0
"""While a watcher sees ``docs/``, a big knowledge base is still checked in full this often (a safety net)."""


class ScanLog:
    """When each knowledge base's files were last checked against the index, and what it cost."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[str, float, float]] = {}

    def fresh(self, name: str, folder: str, settings: Settings, *, watched: bool = False) -> bool:
        """Whether the last full check still stands: it was expensive, recent, and the folder is as it was.

        "Recent" is ``reconcile_interval``, stretched for a check so slow that a reader busy
        back to back would otherwise spend more than ``MAX_SCAN_SHARE`` of its time re-checking.
        When a watcher sees the folder (``watched``), a changed folder is the watcher's to apply
        and "recent" is ``WATCHED_RECHECK_SECONDS``.
        """
        last = self._last.get(name)
        if last is None or settings.reconcile_interval <= 0:
            return False
        seen, at, cost = last
        if cost * 1000 <= settings.reconcile_budget_ms:
            return False
        wait = max(settings.reconcile_interval, cost / MAX_SCAN_SHARE)
        if watched:
            return time.monotonic() - at < max(wait, WATCHED_RECHECK_SECONDS)
        return seen == folder and time.monotonic() - at < wait

    def big_and_unchanged(self, name: str, folder: str, settings: Settings, *, watched: bool = False) -> bool:
        """Whether a check now may run in the background: the last one was expensive, and the folder
        is as it was then (or a watcher applies what changes in it)."""
        last = self._last.get(name)
        if last is None or settings.reconcile_interval <= 0:
            return False
        seen, _, cost = last
        return cost * 1000 > settings.reconcile_budget_ms and (watched or seen == folder)

    def record(self, name: str, folder: str, at: float, cost: float) -> None:
        self._last[name] = (folder, at, cost)

    def wrote(self, name: str, folder: str) -> None:
        """Our own write changed the folder: the check stays as fresh as it was."""
        if name in self._last:
            _, at, cost = self._last[name]
            self._last[name] = (folder, at, cost)


class BackgroundChecks:
    """Full file checks of big knowledge bases, run one at a time by one thread (started on first use).

    One long-lived thread rather than one per check: each thread holds its own index connection.
    """

    def __init__(self, check: Callable[[str], None]) -> None:
        self._check = check
        self._due: dict[str, None] = {}  # an ordered set: knowledge bases waiting for their check
        self._running: str | None = None
        self._closed = False
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def request(self, name: str) -> None:
        """Have ``name`` checked soon, unless a check of it is already waiting or running."""
        with self._changed:
            if self._closed or name in self._due or name == self._running:
                return
            self._due[name] = None
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="coffer-file-checks", daemon=True)
                self._thread.start()
            self._changed.notify_all()

    def idle(self, timeout: float) -> bool:
        """Wait until no check is waiting or running; whether that happened within ``timeout`` seconds."""
        with self._changed:
            return self._changed.wait_for(lambda: not self._due and self._running is None, timeout)

    def close(self, timeout: float) -> None:
        with self._changed:
            self._closed = True
            self._due.clear()
            self._changed.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._due or self._closed)
                if self._closed:
                    return
                name = next(iter(self._due))
                del self._due[name]
                self._running = name
            try:
                self._check(name)
            except KnowledgeBaseNotFoundError:
                pass  # deleted meanwhile
            except Exception:  # the next read asks again; a thread that died would never check again
                log.warning("the background check of knowledge base %s failed", name, exc_info=True)
            finally:
                with self._changed:
                    self._running = None
                    self._changed.notify_all()
