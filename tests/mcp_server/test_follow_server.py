"""Live folders through real ``coffer serve`` processes (stdio and HTTP) with their watchers on.

Changes are made to real files and looked for through the server's own tools, polled with a
generous deadline: how fast a change is seen is measured by ``bench/live.py``, not asserted here.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import IO, Any

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.types import Implementation

from coffer_mcp import Coffer, load_settings
from coffer_mcp.timeutil import utc_now

pytestmark = pytest.mark.anyio

CLIENT = Implementation(name="follow-test", version="1")
DEADLINE = 120  # seconds: two busy cores, other suites running
_BANNER = re.compile(r"MCP over streamable HTTP at (http://\S+)/mcp")


def server_env(home: Path, folder: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("COFFER_")}
    env.update(
        {
            "COFFER_HOME": str(home),
            "COFFER_ALLOWED_DIRS": str(folder),
            "COFFER_EMBEDDING_PROVIDER": "none",
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


def write(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")


@contextlib.asynccontextmanager
async def stdio_server(home: Path, folder: Path, errlog: IO[str]) -> AsyncIterator[Client]:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "coffer_mcp", "serve"], env=server_env(home, folder)
    )
    async with Client(stdio_client(params, errlog=errlog), client_info=CLIENT) as client:
        yield client


@contextlib.contextmanager
def http_server(home: Path, folder: Path, stderr: list[str]) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``coffer serve --http --port 0``; yields the process and its base URL (from the banner on stderr)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "coffer_mcp", "serve", "--http", "--host", "127.0.0.1", "--port", "0"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=server_env(home, folder),
    )
    urls: queue.Queue[str | None] = queue.Queue()

    def drain() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            stderr.append(line)
            if match := _BANNER.search(line):
                urls.put(match.group(1))
        urls.put(None)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        url = urls.get(timeout=DEADLINE)
        assert url is not None, "".join(stderr)
        yield proc, url
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # Ctrl-C: how an HTTP server is stopped
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)
        reader.join(10)
        assert proc.stderr is not None
        proc.stderr.close()


async def eventually(check: Callable[[], Awaitable[bool]], what: str) -> None:
    try:
        with anyio.fail_after(DEADLINE):
            while not await check():  # noqa: ASYNC110 - polls what another process's watcher applies
                await anyio.sleep(0.1)
    except TimeoutError:
        pytest.fail(f"not seen within {DEADLINE} s: {what}")


async def titles(client: Client, query: str) -> set[str]:
    result = await client.call_tool("coffer__search_knowledge", {"kb": "kb", "query": query, "top_k": 20})
    assert not result.is_error, result.content
    return {p["title"] for p in result.structured_content["passages"] if "title" in p}  # on a document's first


async def followed(client: Client) -> dict[str, Any]:
    result = await client.call_tool("coffer__knowledge_base_metrics", {"kb": "kb"})
    assert not result.is_error, result.content
    [folder] = result.structured_content["followed"]
    return folder


async def watched(client: Client) -> bool:
    return (await followed(client))["watched"]


def audit(home: Path, event: str) -> list[Any]:
    with Coffer(load_settings(home=home, embedding_provider="none")) as coffer:
        return [e for e in coffer.index.audit_events("kb", limit=100_000) if e.event == event]


def prepare(home: Path, folder: Path) -> None:
    """A knowledge base following ``folder``, set up as the user would on the command line."""
    with Coffer(load_settings(home=home, embedding_provider="none")) as coffer:
        coffer.create_kb("kb")
        coffer.follow_folder("kb", folder)


async def test_a_followed_folder_stays_in_step_through_a_stdio_server(home: Path, tmp_path: Path) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    write(folder / "alpha.md", "# Alpha\n\nAardvarks amble across the alpine meadow.")
    (tmp_path / "outside").mkdir()
    write(tmp_path / "outside" / "secret.md", "# Secret\n\nclassified zeppelin plans")
    with (tmp_path / "stderr.txt").open("w", encoding="utf-8") as errlog:
        async with stdio_server(home, folder, errlog) as client:
            await client.call_tool("coffer__create_knowledge_base", {"name": "kb"})
            followed_now = await client.call_tool(
                "coffer__ingest_path", {"kb": "kb", "path": str(folder), "follow": True}
            )
            assert followed_now.structured_content["created"] == 1
            await eventually(lambda: watched(client), "the watcher following the new folder")

            write(folder / "gamma.md", "# Gamma\n\nGnus graze on the savanna.")
            await eventually(lambda: _has(client, "gnus", "Gamma"), "a new file")
            write(folder / "alpha.md", "# Alpha\n\nAlbatrosses glide over the ocean.")
            await eventually(lambda: _has(client, "albatrosses", "Alpha"), "a changed file")
            assert await titles(client, "aardvarks") == set()
            (folder / "gamma.md").unlink()
            await eventually(lambda: _lacks(client, "gnus"), "a deleted file")

            # An edit in Coffer is never overwritten by a later change of its file: a conflict.
            alpha = await client.call_tool("coffer__search_knowledge", {"kb": "kb", "query": "albatrosses"})
            doc_id = alpha.structured_content["passages"][0]["document_id"]
            await client.call_tool("coffer__edit_document", {"kb": "kb", "doc_id": doc_id, "content": _EDITED})
            write(folder / "alpha.md", "# Alpha\n\nAnteaters dig for ants.")
            await eventually(lambda: _audited(home, "KB_SOURCE_CONFLICT"), "the conflict")
            read = await client.call_tool("coffer__read_document", {"kb": "kb", "doc_id": doc_id})
            assert "armadillos" in read.structured_content["markdown"]
            assert await titles(client, "anteaters") == set()
            sources = await client.call_tool("coffer__check_sources", {"kb": "kb"})
            statuses = {c["document_id"]: c["status"] for c in sources.structured_content["documents"]}
            assert statuses[doc_id] == "edited"

            # A link to a file outside the allowed folder is refused; a file written after it is not.
            (folder / "escape.md").symlink_to(tmp_path / "outside" / "secret.md")
            write(folder / "omega.md", "# Omega\n\nOcelots at dusk.")
            await eventually(lambda: _has(client, "ocelots", "Omega"), "the file after the link")
            assert await titles(client, "zeppelin") == set()
    stderr = (tmp_path / "stderr.txt").read_text(encoding="utf-8")
    assert "symbolic link" in stderr  # the refusal is logged on stderr, never on stdout
    assert "Traceback" not in stderr
    writes = audit(home, "KB_DOCUMENT_INGESTED") + audit(home, "KB_DOCUMENT_DELETED")
    actors = Counter((e.event, e.actor) for e in writes)
    assert actors[("KB_DOCUMENT_INGESTED", "watcher")] == 2  # gamma, omega
    assert actors[("KB_DOCUMENT_DELETED", "watcher")] == 1


_EDITED = "# Alpha\n\nEdited in Coffer: armadillos."


async def _has(client: Client, query: str, title: str) -> bool:
    return title in await titles(client, query)


async def _lacks(client: Client, query: str) -> bool:
    return not await titles(client, query)


async def _audited(home: Path, event: str) -> bool:
    return bool(await anyio.to_thread.run_sync(audit, home, event))


async def test_a_server_killed_during_a_burst_of_changes_loses_nothing_after_a_restart(
    home: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    for i in range(20):
        write(folder / f"old{i:02d}.md", f"# Old {i}\n\nold{i:02d}token stays.")
    prepare(home, folder)
    stderr: list[str] = []
    with http_server(home, folder, stderr) as (proc, url):
        async with Client(f"{url}/mcp", client_info=CLIENT) as client:
            await eventually(lambda: watched(client), "the HTTP server's watcher")
        for i in range(60):
            write(folder / f"new{i:02d}.md", f"# New {i}\n\nnew{i:02d}token arrives.")
            if i == 30:
                proc.kill()  # kill -9 in the middle of the burst
        for i in range(10):
            write(folder / f"old{i:02d}.md", f"# Old {i}\n\nold{i:02d}token changed{i:02d}word.")
        for i in range(10, 15):
            (folder / f"old{i:02d}.md").unlink()
    assert proc.returncode == -9
    expected = {str(p) for p in folder.glob("*.md")}
    with (tmp_path / "stderr.txt").open("w", encoding="utf-8") as errlog:
        async with stdio_server(home, folder, errlog) as client:
            await eventually(lambda: _documents(client, len(expected)), f"{len(expected)} documents after the restart")
            await eventually(lambda: _has(client, "changed09word", "Old 9"), "a change made while no server ran")
    with Coffer(load_settings(home=home, embedding_provider="none")) as coffer:
        rows = coffer.index.documents("kb", with_source_path=True)
        assert Counter(r.source_path for r in rows).most_common(1)[0][1] == 1  # none twice
        assert {r.source_path for r in rows} == expected
        # A kill between an original and its Markdown may leave an original without a document
        # (removed by the next reindex); nothing else may disagree.
        problems = coffer.verify("kb").problems
        assert [p for p in problems if "original without a document" not in p] == []
        assert coffer.search("kb", "old12token").passages == []


async def _documents(client: Client, count: int) -> bool:
    result = await client.call_tool("coffer__list_documents", {"kb": "kb", "limit": 1})
    return result.structured_content["total"] == count


async def test_two_servers_following_one_folder_ingest_each_change_once(home: Path, tmp_path: Path) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    prepare(home, folder)
    with (
        (tmp_path / "one.txt").open("w", encoding="utf-8") as log_one,
        (tmp_path / "two.txt").open("w", encoding="utf-8") as log_two,
    ):
        async with stdio_server(home, folder, log_one) as one, stdio_server(home, folder, log_two) as two:
            for client in (one, two):
                await eventually(lambda client=client: watched(client), "both watchers")
            started = utc_now()
            for i in range(100):
                write(folder / f"note{i:03d}.md", f"# Note {i}\n\nnote{i:03d}token is here.")
            await eventually(lambda: _documents(one, 100), "the 100 files")
            for client in (one, two):  # each has looked at the burst (and found the other's work done)
                await eventually(lambda client=client: _synced_since(client, started), "both watchers' syncs")
            changed = utc_now()
            write(folder / "note007.md", "# Note 7\n\nnote007token was rewritten.")
            await eventually(lambda: _has(two, "rewritten", "Note 7"), "the change")
            for client in (one, two):
                await eventually(lambda client=client: _synced_since(client, changed), "both watchers' syncs")
            assert await _documents(two, 100)
    ingested = audit(home, "KB_DOCUMENT_INGESTED")
    assert len(ingested) == 100
    assert len({e.document_id for e in ingested}) == 100
    updated = [e for e in audit(home, "KB_DOCUMENT_UPDATED") if e.details.get("filename") == "note007.md"]
    assert len(updated) == 1
    for log in ("one.txt", "two.txt"):
        assert "Traceback" not in (tmp_path / log).read_text(encoding="utf-8")


async def _synced_since(client: Client, moment: str) -> bool:
    folder = await followed(client)
    return folder["pending"] == 0 and (folder["last_sync"] or "") > moment


async def test_an_http_server_stops_its_watcher_cleanly_on_ctrl_c(home: Path, tmp_path: Path) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    write(folder / "alpha.md", "# Alpha\n\nAardvarks amble across the alpine meadow.")
    prepare(home, folder)
    stderr: list[str] = []
    with http_server(home, folder, stderr) as (proc, url):
        async with Client(f"{url}/mcp", client_info=CLIENT) as client:
            await eventually(lambda: watched(client), "the HTTP server's watcher")
            write(folder / "gamma.md", "# Gamma\n\nGnus graze on the savanna.")
            await eventually(lambda: _has(client, "gnus", "Gamma"), "a new file")
    assert proc.returncode == 0, "".join(stderr)
    assert "Traceback" not in "".join(stderr)


def bytes_read(pid: int) -> int:
    """How many bytes a process has read so far (``rchar``: every read, page cache or not, holes too)."""
    with open(f"/proc/{pid}/io", encoding="utf-8") as io:
        return next(int(line.split()[1]) for line in io if line.startswith("rchar:"))


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="counts the server's bytes read through /proc")
async def test_a_huge_file_dropped_into_a_followed_folder_holds_no_other_file_up_and_is_never_read(
    home: Path, tmp_path: Path
) -> None:
    # The attack: `truncate -s 20G big.md` in a followed folder while another followed file was
    # deleted. The watcher hashed the new file in full to see whether it was the deleted one
    # renamed: 21 GB read, and the next file ingested 202 s later.
    folder = tmp_path / "notes"
    folder.mkdir()
    write(folder / "alpha.md", "# Alpha\n\nAardvarks amble across the alpine meadow.")
    write(folder / "beta.md", "# Beta\n\nBadgers burrow beneath the birches.")
    prepare(home, folder)
    stderr: list[str] = []
    with http_server(home, folder, stderr) as (proc, url):
        async with Client(f"{url}/mcp", client_info=CLIENT) as client:
            await eventually(lambda: watched(client), "the HTTP server's watcher")
            before = bytes_read(proc.pid)
            (folder / "alpha.md").unlink()
            with open(folder / "big.md", "wb") as big:
                os.truncate(big.fileno(), 8 << 30)  # 8 GiB, none of it on disk
            write(folder / "gamma.md", "# Gamma\n\nGnus graze on the savanna.")
            await eventually(lambda: _has(client, "gnus", "Gamma"), "the small file beside it")
            await eventually(lambda: _lacks(client, "aardvarks"), "the deleted file")

            async def refused() -> bool:
                return (await followed(client))["failed"] == 1

            await eventually(refused, "the huge file counted as failed in the metrics")
            report = await client.call_tool("coffer__check_sources", {"kb": "kb"})
            [failure] = report.structured_content["failed"]
            assert (Path(failure["path"]).name, failure["code"]) == ("big.md", "too_large")
            assert "max_document_bytes" in failure["hint"]
            assert bytes_read(proc.pid) - before < 64 << 20  # far below the 8 GiB of the huge file
            listed = await client.call_tool("coffer__list_documents", {"kb": "kb", "limit": 10})
            assert {d["title"] for d in listed.structured_content["documents"]} == {"Beta", "Gamma"}
    done = await anyio.run_process(
        [sys.executable, "-m", "coffer_mcp", "kb", "check-sources", "kb", "--json"],
        env=server_env(home, folder),
        check=False,
    )
    assert done.returncode == 0, done.stderr
    cli_failed = json.loads(done.stdout)["failed"]  # a process of its own, syncing the folder afresh
    assert [(Path(f["path"]).name, f["code"]) for f in cli_failed] == [("big.md", "too_large")]
    assert "Traceback" not in "".join(stderr)


async def _restore_over_mcp(client: Client, home: Path, snapshot_id: str) -> None:
    result = await client.call_tool(
        "coffer__restore_snapshot", {"kb": "kb", "snapshot_id": snapshot_id, "confirm": True}
    )
    assert not result.is_error, result.content


async def _restore_from_the_cli(client: Client, home: Path, snapshot_id: str) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("COFFER_")}
    env.update({"COFFER_HOME": str(home), "COFFER_EMBEDDING_PROVIDER": "none"})
    done = await anyio.run_process([sys.executable, "-m", "coffer_mcp", "kb", "restore", "kb", snapshot_id], env=env)
    assert done.returncode == 0, done.stderr


@contextlib.asynccontextmanager
async def _server(kind: str, home: Path, folder: Path, tmp_path: Path) -> AsyncIterator[Client]:
    if kind == "stdio":
        with (tmp_path / "stderr.txt").open("w", encoding="utf-8") as errlog:
            async with stdio_server(home, folder, errlog) as client:
                yield client
        return
    stderr: list[str] = []
    with http_server(home, folder, stderr) as (_, url):
        async with Client(f"{url}/mcp", client_info=CLIENT) as client:
            yield client
    (tmp_path / "stderr.txt").write_text("".join(stderr), encoding="utf-8")


@pytest.mark.parametrize(
    ("kind", "restore"), [("stdio", _restore_over_mcp), ("http", _restore_from_the_cli)], ids=["mcp", "cli"]
)
async def test_a_restore_while_a_server_runs_is_brought_back_in_step_with_the_followed_folder(
    home: Path, tmp_path: Path, kind: str, restore: Callable[[Client, Path, str], Awaitable[None]]
) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    write(folder / "alpha.md", "# Alpha\n\nAardvarks amble across the alpine meadow.")
    write(folder / "beta.md", "# Beta\n\nBadgers burrow beneath the birches.")
    prepare(home, folder)
    async with _server(kind, home, folder, tmp_path) as client:
        await eventually(lambda: watched(client), "the watcher")
        snapshot = await client.call_tool("coffer__snapshot_knowledge_base", {"kb": "kb"})
        assert not snapshot.is_error, snapshot.content
        # After the snapshot: a file added, one deleted, one changed; the watcher applies them.
        write(folder / "gamma.md", "# Gamma\n\nGnus graze on the savanna.")
        (folder / "alpha.md").unlink()
        write(folder / "beta.md", "# Beta\n\nBeavers build dams in the brook.")
        await eventually(lambda: _has(client, "gnus", "Gamma"), "the new file")
        await eventually(lambda: _has(client, "beavers", "Beta"), "the changed file")
        await eventually(lambda: _lacks(client, "aardvarks"), "the deleted file")

        restored = utc_now()
        await restore(client, home, snapshot.structured_content["id"])
        # The restore took the documents back to the snapshot; the folder did not change. The
        # server brings the knowledge base back in step by itself, and its metrics never say it
        # is in step (nothing pending, a sync since the restore) while it is not.
        in_step = {"Beta", "Gamma"}

        async def back_in_step() -> bool:
            state = await followed(client)
            listed = await client.call_tool("coffer__list_documents", {"kb": "kb", "limit": 100})
            now = {d["title"] for d in listed.structured_content["documents"]}
            if state["pending"] == 0 and (state["last_sync"] or "") > restored:
                assert (now, state["documents"]) == (in_step, len(in_step)), state
            return now == in_step

        await eventually(back_in_step, "the followed folder's files back in the knowledge base")
        await eventually(lambda: _synced_since(client, restored), "the metrics in step again")
        assert await back_in_step()
        assert await titles(client, "aardvarks") == set()
        assert await titles(client, "beavers") == {"Beta"}
    assert "Traceback" not in (tmp_path / "stderr.txt").read_text(encoding="utf-8")
