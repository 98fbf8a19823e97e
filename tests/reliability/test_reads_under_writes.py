"""Reads while writes are in flight in the same process: no read waits for a write it need not see.

A write holds its knowledge base's lock from its first file write until its rows are committed.
Searches of the same process must neither queue on that lock (reconcile-on-read) nor behind the
worker threads of blocked writers, and writers of one process get the lock in arrival order.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import anyio
import pytest
from mcp import Client
from mcp.types import Implementation

from coffer_mcp import Coffer, load_settings
from coffer_mcp.errors import StoreError
from coffer_mcp.indexing.reindex import index_document
from coffer_mcp.indexing.truth import truth_of
from coffer_mcp.mcp_server import build_server
from coffer_mcp.store import atomic_write, file_lock, render_document
from coffer_mcp.store import lock as lock_module

pytestmark = pytest.mark.anyio

T = TypeVar("T")
LONG = 120.0  # a wait no passing run comes near: the failure mode is hanging, not slowness
NEW_ID = "01JAAAAAAAAAAAAAAAAAAAAAAA"


@pytest.fixture
def patient(home: Path) -> Iterator[Coffer]:
    """A service whose reads would wait for a busy writer for two minutes before giving up."""
    with Coffer(load_settings(home=home, reconcile_lock_wait=LONG, lock_timeout=LONG)) as service:
        service.create_kb("kb")
        service.add_document("kb", "alpha.md", "# Alpha\n\nalpha words here\n")
        yield service


@contextmanager
def half_done_write(coffer: Coffer, doc_id: str = NEW_ID) -> Iterator[threading.Event]:
    """A write of this process, on another thread, stopped after its file landed and before its rows.

    It does what ``add_document`` does under the lock, in two halves; setting the yielded event
    lets it index the file and let go of the lock.
    """
    kb = coffer.paths.kb("kb")
    landed, finish = threading.Event(), threading.Event()
    metadata = {"id": doc_id, "title": "Beta"}
    body = "# Beta\n\nbeta words here\n"

    def write() -> None:
        with coffer.writing(kb):
            atomic_write(kb.doc(doc_id), render_document(metadata, body).encode("utf-8"))
            landed.set()
            finish.wait(LONG)
            index_document(
                coffer.index, kb, coffer.open_kb("kb")[1], doc_id, truth=truth_of(kb, doc_id, metadata, body)
            )

    writer = threading.Thread(target=write, name="half-done-writer")
    writer.start()
    try:
        assert landed.wait(LONG)
        yield finish
    finally:
        finish.set()
        writer.join(LONG)


async def in_thread(call: Callable[[], T]) -> T:
    """Run a blocking call on a worker thread, failing the test if it hangs."""
    with anyio.fail_after(30):
        return await anyio.to_thread.run_sync(call, abandon_on_cancel=True)


async def test_a_search_does_not_wait_for_a_write_of_this_process_that_is_still_being_indexed(
    patient: Coffer,
) -> None:
    with half_done_write(patient) as finish:
        during = await in_thread(lambda: patient.search("kb", "beta alpha"))
        lock_still_held = not finish.is_set()
    after = await in_thread(lambda: patient.search("kb", "beta"))
    assert lock_still_held
    assert [p.title for p in during.passages] == ["Alpha"]  # the index as it stood: the write was not done
    assert [p.title for p in after.passages] == ["Beta"]  # and once acknowledged, it is found


async def test_an_edit_made_outside_coffer_during_our_write_still_makes_the_read_try_to_reconcile(
    home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with Coffer(load_settings(home=home, reconcile_lock_wait=0.05)) as coffer:
        coffer.create_kb("kb")
        alpha = coffer.add_document("kb", "alpha.md", "# Alpha\n\nalpha words here\n").document_id
        path = coffer.paths.kb("kb").doc(alpha)
        caplog.set_level(logging.INFO, logger="coffer_mcp.services")
        with half_done_write(coffer):
            coffer.search("kb", "beta")
            assert "serving the index as it is" not in caplog.text  # our own write: no wait at all
            edited = path.read_text(encoding="utf-8").replace("alpha words", "gamma words, edited")
            path.write_text(edited, encoding="utf-8")
            coffer.search("kb", "gamma")
            assert "serving the index as it is" in caplog.text  # an editor's change: it tried the lock
        assert [p.title for p in coffer.search("kb", "gamma").passages] == ["Alpha"]


async def test_a_search_answers_while_more_writes_than_worker_threads_wait_for_the_lock(patient: Coffer) -> None:
    kb_lock = patient.paths.lock("kb")
    blocked = 48  # more than anyio's default of 40 threads for everything
    turns = lock_module._turns_of(str(kb_lock))
    server = build_server(patient)
    client = Client(server, client_info=Implementation(name="test-agent", version="1"))
    async with client, anyio.create_task_group() as writers:
        with file_lock(kb_lock):  # another writer of this process holds the knowledge base
            for i in range(blocked):
                writers.start_soon(
                    client.call_tool,
                    "coffer__add_document",
                    {"kb": "kb", "filename": f"w{i}.md", "content": f"# W{i}\n\nword{i}\n"},
                )
            with anyio.fail_after(30):
                # The writes are on their threads, waiting for the lock (whose queue has no event to await).
                while len(turns._queue) < 8:  # noqa: ASYNC110
                    await anyio.sleep(0.01)
                found = await client.call_tool("coffer__search_knowledge", {"kb": "kb", "query": "alpha"})
    assert not found.is_error
    assert [p["title"] for p in found.structured_content["passages"]] == ["Alpha"]
    assert patient.list_documents("kb", limit=100).total == 1 + blocked  # every blocked write then landed


def test_threads_of_one_process_get_a_busy_lock_in_the_order_they_asked(tmp_path: Path) -> None:
    path = tmp_path / "kb.lock"
    order: list[int] = []
    turns = lock_module._turns_of(str(path))

    def wait_then_hold(i: int) -> None:
        with file_lock(path, timeout=LONG):
            order.append(i)

    threads = [threading.Thread(target=wait_then_hold, args=(i,)) for i in range(8)]
    with file_lock(path):
        for i, thread in enumerate(threads):
            thread.start()
            _until(lambda i=i: len(turns._queue) == i + 1)  # it is queued before the next one asks
    for thread in threads:
        thread.join(LONG)
    assert order == list(range(8))


def test_a_thread_that_gives_up_waiting_does_not_hold_up_those_behind_it(tmp_path: Path) -> None:
    path = tmp_path / "kb.lock"
    turns = lock_module._turns_of(str(path))
    outcome: dict[str, object] = {}

    def impatient() -> None:
        try:
            with file_lock(path, timeout=0.2):
                outcome["impatient"] = "held"
        except StoreError as exc:
            outcome["impatient"] = exc.code

    def patient_writer() -> None:
        with file_lock(path, timeout=LONG):
            outcome["patient"] = "held"

    first, second = threading.Thread(target=impatient), threading.Thread(target=patient_writer)
    with file_lock(path):
        first.start()
        _until(lambda: len(turns._queue) == 1)
        second.start()
        first.join(LONG)
    second.join(LONG)
    assert outcome == {"impatient": "busy", "patient": "held"}


def _until(condition: Callable[[], bool]) -> None:
    """Wait for ``condition`` (another thread's progress), failing after a generous bound."""
    done = threading.Event()
    for _ in range(int(LONG / 0.01)):
        if condition():
            return
        done.wait(0.01)
    raise AssertionError("the other thread never got there")
