"""The MCP call log (``mcp_invocations``), written off the calls' own threads.

A call's record used to be a transaction of its own on the worker thread that ran the call: on
SQLite it waited for a writer's transaction to commit (the database has one writer), on PostgreSQL
it paid a commit (a WAL flush) per search, and either way the read lane's thread was held
meanwhile, so the searches queued behind it waited too (docs/benchmarks.md, "Search under
writers"). Now a call only queues its record; one thread writes what has queued in one
transaction, in the order the calls ended. ``flush`` waits for what was queued before it; closing
writes the rest. A crash loses at most the records of the last moments.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from coffer_mcp.errors import CofferError
from coffer_mcp.index import Index
from coffer_mcp.timeutil import utc_now

__all__ = ["Invocation", "InvocationLog"]

log = logging.getLogger(__name__)

MAX_BATCH = 500  # records per transaction: a burst is written in a few short transactions


@dataclass(frozen=True, slots=True)
class Invocation:
    """One MCP tool call as logged: no arguments, no content."""

    tool: str
    client: str
    duration_ms: float
    outcome: str
    error_code: str | None
    at: str


class InvocationLog:
    """Queues call records and writes them from one background thread (started on first use)."""

    def __init__(self, index: Index) -> None:
        self._index = index
        self._queued: list[Invocation] = []
        self._added = 0  # records ever queued
        self._done = 0  # records ever written (or given up on)
        self._closed = False
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def record(self, tool: str, client: str, duration_ms: float, outcome: str, error_code: str | None = None) -> None:
        """Queue one call's record (timed now); never waits for the index."""
        entry = Invocation(tool, client, duration_ms, outcome, error_code, utc_now())
        with self._changed:
            if self._closed:  # the service is closing: nobody will write it, so write it here
                self._write([entry])
                return
            self._queued.append(entry)
            self._added += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="coffer-invocations", daemon=True)
                self._thread.start()
            self._changed.notify_all()

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until every record queued so far is written; whether that happened within ``timeout`` s."""
        with self._changed:
            target = self._added
            return self._changed.wait_for(lambda: self._done >= target, timeout)

    def close(self, timeout: float = 30.0) -> None:
        """Write what is queued and stop the thread."""
        self.flush(timeout)
        with self._changed:
            self._closed = True
            self._changed.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._queued or self._closed)
                if not self._queued:
                    return
                batch, self._queued = self._queued[:MAX_BATCH], self._queued[MAX_BATCH:]
            self._write(batch)
            with self._changed:
                self._done += len(batch)
                self._changed.notify_all()

    def _write(self, batch: list[Invocation]) -> None:
        """One transaction for ``batch``; a failure is logged, never raised (history must not fail calls)."""
        index = self._index
        try:
            with index.transaction():
                for entry in batch:
                    index.record_invocation(
                        entry.tool, entry.client, entry.duration_ms, entry.outcome, entry.error_code, at=entry.at
                    )
        except CofferError as exc:  # e.g. a database server that is down: the calls themselves said so
            log.warning("could not record %d MCP call(s): %s", len(batch), exc.message)
        except Exception:  # the thread's top level: log it and keep serving
            log.exception("could not record %d MCP call(s)", len(batch))
