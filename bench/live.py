"""Live folders, measured: pick-up latency, idle CPU, search while files change, a bulk drop.

    python -m bench.live --documents 10000 --out bench/results/live-10k.json

1. **Set-up.** A folder of N synthetic Markdown files (``bench/_corpus``, ~1.2 kB each, in
   subfolders of 1,000) is followed by a knowledge base (``Coffer.follow_folder``: the initial
   ingest is timed), then ``coffer serve --http`` starts; the time until its metrics say the
   folder is ``watched`` is the watcher's start-up catch-up (a full sync that reads the files
   whose stamp does not vouch for their document's bytes: at first, those ingested within a
   minute of being written). At the end a server starts once more, and its catch-up is timed too.
2. **Pick-up latency.** A file is written and the server is searched every 10 ms (over MCP) until
   its unique word is found: new files and changed ones, one at a time, with the server idle and
   while two clients search back to back.
3. **Idle CPU and RSS.** The server's CPU time (``/proc``) over ``--idle-seconds`` with nothing
   happening, right after its catch-up; at the end, the same for a server over the same store
   with the watcher off.
4. **Search under change.** Keyword search latency with the folder quiet, then while a writer
   rewrites 10 files per second.
5. **Bulk.** 1,000 files moved into the folder at once while a second server follows it too: the
   time until all are indexed, then every file is searched for and counted (document rows and
   ``KB_DOCUMENT_INGESTED`` events: none twice).

Keyword search only (``COFFER_EMBEDDING_PROVIDER=none``): embedding would measure the model.
The client (this process) and the servers share the machine; its load average is recorded.
Progress goes to stderr, the JSON report to ``--out``, a Markdown summary to stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import queue
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from mcp.types import Implementation

from bench._corpus import CHUNK_OVERLAP, CHUNK_SIZE, generate_document, load_vocabulary, make_queries
from bench._measure import cpu_model, log, proc_cpu_seconds, proc_memory, ram_gb, source_fingerprint, summarize
from coffer_mcp import Coffer, load_settings
from coffer_mcp.timeutil import utc_now

SEED = 11
PER_FOLDER = 1_000
CLIENT = Implementation(name="bench-live", version="1")
DEADLINE = 600.0
RUN = f"r{int(time.time()) % 100_000:05d}"  # names this run's files and words apart from an earlier run's
_BANNER = re.compile(r"MCP over streamable HTTP at (http://\S+)/mcp")


# -- servers -------------------------------------------------------------------------------------


@dataclass
class Server:
    proc: subprocess.Popen[str]
    url: str = ""
    stderr: list[str] = field(default_factory=list)


def server_env(home: Path, **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("COFFER_")}
    env.update({"COFFER_HOME": str(home), "COFFER_EMBEDDING_PROVIDER": "none", "PYTHONUNBUFFERED": "1", **extra})
    return env


@contextlib.contextmanager
def http_server(home: Path, **extra: str) -> Iterator[Server]:
    """``coffer serve --http --port 0`` over ``home``; yields once it listens. Stopped with SIGINT."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "coffer_mcp", "serve", "--http", "--host", "127.0.0.1", "--port", "0"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=server_env(home, **extra),
    )
    server = Server(proc)
    urls: queue.Queue[str | None] = queue.Queue()

    def drain() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            server.stderr.append(line)
            if match := _BANNER.search(line):
                urls.put(match.group(1))
        urls.put(None)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        url = urls.get(timeout=DEADLINE)
        if url is None:
            raise RuntimeError("coffer serve --http exited:\n" + "".join(server.stderr))
        server.url = url
        yield server
    finally:
        proc.send_signal(2)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)
        reader.join(10)
        if proc.stderr is not None:
            proc.stderr.close()


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    if result.is_error:
        raise RuntimeError(f"{tool} failed: {result.content}")
    return result.structured_content or {}


async def followed(client: Client) -> dict[str, Any]:
    return (await call(client, "coffer__knowledge_base_metrics", kb="kb"))["followed"][0]


async def wait_for(check: Any, what: str, seconds: float = DEADLINE) -> float:
    """Poll the async ``check`` every 50 ms; the seconds it took."""
    started = time.perf_counter()
    with anyio.fail_after(seconds):
        while not await check():  # noqa: ASYNC110 - polls another process
            await anyio.sleep(0.05)
    return time.perf_counter() - started


async def found(client: Client, word: str) -> bool:
    return bool((await call(client, "coffer__search_knowledge", kb="kb", query=word, top_k=1))["passages"])


# -- the corpus ----------------------------------------------------------------------------------


def write_folder(folder: Path, documents: int) -> list[Path]:
    """``documents`` synthetic files in subfolders of ``PER_FOLDER``; their paths."""
    vocab = load_vocabulary(None)
    paths = []
    for i in range(documents):
        path = folder / f"part-{i // PER_FOLDER:03d}" / f"doc-{i:07d}.md"
        if i % PER_FOLDER == 0:
            path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(generate_document(vocab, SEED, i), encoding="utf-8")
        paths.append(path)
    return paths


# -- the measurements ----------------------------------------------------------------------------


async def pickup(client: Client, index: Any, folder: Path, corpus: list[Path], n: int, tag: str) -> dict[str, Any]:
    """Write a file (even i: a new one; odd: a corpus file changed); time it until indexed, then until searchable.

    *Indexed*: its row (new) or its source hash (changed) is in the index, polled every 5 ms
    straight from the index file (the watcher's own latency). *Searchable*: the server's search
    over MCP finds its unique word, polled every 10 ms (one search round trip included).
    """
    timings: dict[str, list[float]] = {"new_indexed": [], "new": [], "changed_indexed": [], "changed": []}
    (folder / "live").mkdir(exist_ok=True)
    for i in range(n):
        word = f"zq{RUN}{tag}{i:04d}x"
        kind = "new" if i % 2 == 0 else "changed"
        if kind == "new":
            path = folder / "live" / f"{RUN}-{tag}-{i:04d}.md"
            text = f"# Live {tag} {i}\n\nA note about {word} written just now.\n"
        else:
            path = corpus[(i * 7919 + len(tag)) % len(corpus)]
            text = path.read_text(encoding="utf-8") + f"\nChanged: {word}.\n"
        data = text.encode("utf-8")
        digest = hashlib.sha256(data).hexdigest()
        started = time.perf_counter()
        path.write_bytes(data)
        with anyio.fail_after(120):
            while not _indexed(index, path, digest):  # noqa: ASYNC110 - polls another process's writes
                await anyio.sleep(0.005)
            timings[f"{kind}_indexed"].append((time.perf_counter() - started) * 1000)
            while not await found(client, word):  # noqa: ASYNC110 - polls another process
                await anyio.sleep(0.01)
        timings[kind].append((time.perf_counter() - started) * 1000)
        await anyio.sleep(0.2)
    result = {name: summarize(values) for name, values in timings.items()}
    result["all_indexed"] = summarize(timings["new_indexed"] + timings["changed_indexed"])
    result["all"] = summarize(timings["new"] + timings["changed"])
    return result


def _indexed(index: Any, path: Path, digest: str) -> bool:
    row = index.find_document("kb", source_path=str(path))
    return row is not None and row.source_sha256 == digest


async def pickup_under_search(
    url: str, index: Any, folder: Path, corpus: list[Path], n: int, queries: list[str]
) -> dict[str, Any]:
    """``pickup`` while two more clients search back to back."""
    searched = 0

    async def searcher(seed: int, stop: anyio.Event) -> None:
        nonlocal searched
        rng = random.Random(seed)
        async with Client(f"{url}/mcp", client_info=CLIENT) as other:
            while not stop.is_set():
                await call(other, "coffer__search_knowledge", kb="kb", query=rng.choice(queries), top_k=5)
                searched += 1

    stop = anyio.Event()
    async with anyio.create_task_group() as group, Client(f"{url}/mcp", client_info=CLIENT) as client:
        for seed in (1, 2):
            group.start_soon(searcher, seed, stop)
        started = time.perf_counter()
        result = await pickup(client, index, folder, corpus, n, "busy")
        stop.set()
    result["background_searches_per_second"] = round(searched / (time.perf_counter() - started), 1)
    return result


async def idle_cpu(pid: int, seconds: float) -> dict[str, Any]:
    await anyio.sleep(3)  # let the start-up or the last change settle
    before = proc_cpu_seconds(pid)
    await anyio.sleep(seconds)
    after = proc_cpu_seconds(pid)
    used = None if before is None or after is None else after - before
    return {
        "seconds": seconds,
        "cpu_seconds": None if used is None else round(used, 3),
        "cpu_percent": None if used is None else round(100 * used / seconds, 3),
        "memory": memory(pid),
    }


def memory(pid: int) -> dict[str, float] | None:
    """RSS, its peak, and its two parts: anonymous (the process's own heap) and file-backed (here
    mostly SQLite's memory-mapped index pages, which the kernel can drop and share)."""
    found = proc_memory(pid)
    if found is None:
        return None
    with contextlib.suppress(OSError, IndexError, ValueError):
        fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text("utf-8").splitlines())
        for key, name in (("RssAnon", "anon_mb"), ("RssFile", "file_mb")):
            found[name] = int(fields[key].split()[0]) / 1024
    return found


async def search_under_change(client: Client, corpus: list[Path], queries: list[str], rate: float) -> dict[str, Any]:
    """Search latency with the folder quiet, then while ``rate`` files per second are rewritten."""

    async def timed() -> list[float]:
        out = []
        for query in queries:
            started = time.perf_counter()
            await call(client, "coffer__search_knowledge", kb="kb", query=query, top_k=5)
            out.append((time.perf_counter() - started) * 1000)
        return out

    quiet = await timed()
    stop = threading.Event()
    written = [0]

    def writer() -> None:
        rng = random.Random(5)
        next_at = time.perf_counter()
        while not stop.is_set():
            path = rng.choice(corpus)
            path.write_text(path.read_text(encoding="utf-8") + f"\nchurn {written[0]}.\n", encoding="utf-8")
            written[0] += 1
            next_at += 1 / rate
            stop.wait(max(0.0, next_at - time.perf_counter()))

    thread = threading.Thread(target=writer, daemon=True)
    started = time.perf_counter()
    thread.start()
    busy = await timed()
    stop.set()
    thread.join()
    elapsed = time.perf_counter() - started
    return {
        "quiet": summarize(quiet),
        "changing": summarize(busy),
        "files_changed": written[0],
        "files_per_second": round(written[0] / elapsed, 2),
    }


async def bulk(home: Path, url: str, folder: Path, count: int, staging: Path) -> dict[str, Any]:
    """Move ``count`` files into the followed folder at once, with a second server following it too."""
    names, target = stage_bulk(staging, folder, count)
    with http_server(home) as second:
        async with (
            Client(f"{url}/mcp", client_info=CLIENT) as one,
            Client(f"{second.url}/mcp", client_info=CLIENT) as two,
        ):
            second_ready = await wait_for(lambda: _watched(two), "the second server's watcher")
            before = (await call(one, "coffer__knowledge_base_metrics", kb="kb"))["document_count"]
            moved_at = utc_now()
            started = time.perf_counter()
            for name in names:
                os.rename(staging / name, target / name)
            indexed = await wait_for(lambda: _count(one, before + count), f"{count} more documents")
            for client in (one, two):
                await wait_for(lambda client=client: _synced_since(client, moved_at), "both watchers' syncs")
            settled = time.perf_counter() - started
    with Coffer(load_settings(home=home, embedding_provider="none")) as coffer:
        missing = [i for i in range(count) if not coffer.search("kb", f"zb{RUN}{i:05d}x", top_k=1).passages]
        rows = [
            r for r in coffer.index.documents("kb", with_source_path=True) if f"/bulk-{RUN}/" in (r.source_path or "")
        ]
        events = Counter(
            e.details.get("filename")
            for e in coffer.index.audit_events("kb", limit=1_000_000)
            if e.event == "KB_DOCUMENT_INGESTED" and str(e.details.get("filename", "")).startswith(f"{RUN}-bulk-")
        )
    return {
        "files": count,
        "second_server_start_s": round(second_ready, 2),
        "all_indexed_s": round(indexed, 2),
        "both_watchers_settled_s": round(settled, 2),
        "files_per_second": round(count / indexed, 1),
        "not_searchable": len(missing),
        "document_rows": len(rows),
        "rows_twice": sum(n > 1 for n in Counter(r.source_path for r in rows).values()),
        "ingested_events": sum(events.values()),
        "ingested_twice": sum(n > 1 for n in events.values()),
    }


def stage_bulk(staging: Path, folder: Path, count: int) -> tuple[list[str], Path]:
    """``count`` files written beside the followed folder (same filesystem: moving them in is a rename)."""
    staging.mkdir(parents=True, exist_ok=True)
    target = folder / f"bulk-{RUN}"
    target.mkdir(exist_ok=True)
    names = [f"{RUN}-bulk-{i:05d}.md" for i in range(count)]
    for i, name in enumerate(names):
        (staging / name).write_text(f"# Bulk {i}\n\nThe bulk note zb{RUN}{i:05d}x arrives with the others.\n", "utf-8")
    return names, target


async def _watched(client: Client) -> bool:
    return bool((await followed(client))["watched"])


async def _count(client: Client, count: int) -> bool:
    return (await call(client, "coffer__knowledge_base_metrics", kb="kb"))["document_count"] >= count


async def _synced_since(client: Client, moment: str) -> bool:
    folder = await followed(client)
    return folder["pending"] == 0 and (folder["last_sync"] or "") > moment


# -- the run -------------------------------------------------------------------------------------


async def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    home, folder = work / "home", work / "notes"
    report: dict[str, Any] = {"documents": args.documents, "run": RUN}
    queries = make_queries(load_vocabulary(None), [], args.searches, SEED)
    if args.reuse and (home / "knowledge" / "kb").is_dir():
        log(f"reusing the followed folder and the store in {work}")
        corpus = sorted(folder.glob("part-*/doc-*.md"))
        previous = json.loads(args.out.read_text(encoding="utf-8")) if args.out.exists() else {}
        report["initial_follow"] = previous.get("initial_follow")
    else:
        log(f"writing {args.documents:,} files")
        corpus = write_folder(folder, args.documents)
        log("following the folder (the initial ingest)")
        started = time.perf_counter()
        with Coffer(load_settings(home=home, embedding_provider="none")) as coffer:
            coffer.create_kb("kb", chunk_size=CHUNK_SIZE, chunk_overlap=CHUNK_OVERLAP)
            result = coffer.follow_folder("kb", folder)
            report["initial_follow"] = {
                "seconds": round(time.perf_counter() - started, 1),
                "created": result.created,
                "chunks": coffer.describe_kb("kb").chunk_count,
            }
        log(f"  {report['initial_follow']}")
    with Coffer(load_settings(home=home, embedding_provider="none")) as reader:
        return await measure(args, work, report, corpus, queries, reader.index)


async def measure(
    args: argparse.Namespace, work: Path, report: dict[str, Any], corpus: list[Path], queries: list[str], index: Any
) -> dict[str, Any]:
    """Everything measured through servers, over a store whose knowledge base follows the folder."""
    home, folder = work / "home", work / "notes"
    with http_server(home) as server:
        async with Client(f"{server.url}/mcp", client_info=CLIENT) as client:
            report["watcher_catch_up_s"] = round(await wait_for(lambda: _watched(client), "the watcher"), 2)
            log(f"watcher live after {report['watcher_catch_up_s']} s; idle CPU over {args.idle_seconds} s")
            report["idle_watching"] = await idle_cpu(server.proc.pid, args.idle_seconds)
            log(f"  {report['idle_watching']}; pick-up, idle")
            report["pickup_idle"] = await pickup(client, index, folder, corpus, args.pickups, "idle")
            log(f"  {report['pickup_idle']['all']}")
        log("pick-up with two clients searching")
        report["pickup_under_search"] = await pickup_under_search(
            server.url, index, folder, corpus, args.pickups, queries
        )
        log(f"  {report['pickup_under_search']['all']}")
        async with Client(f"{server.url}/mcp", client_info=CLIENT) as client:
            log(f"search latency, quiet and with {args.rate} files/s changing")
            report["search_under_change"] = await search_under_change(client, corpus, queries, args.rate)
            log(f"  {report['search_under_change']}")
            await wait_for(lambda: _synced_since(client, "0"), "the watcher to settle")
        log(f"bulk: {args.bulk} files moved in, two servers following")
        report["bulk"] = await bulk(home, server.url, folder, args.bulk, work / "staging")
        log(f"  {report['bulk']}")
        report["memory_after_all"] = memory(server.proc.pid)
    with http_server(home, COFFER_WATCH="0") as plain:
        async with Client(f"{plain.url}/mcp", client_info=CLIENT) as client:
            await followed(client)  # reads what the watcher's catch-up reads: every file's stamp, every row
        log(f"idle CPU over {args.idle_seconds} s (watcher off)")
        report["idle_not_watching"] = await idle_cpu(plain.proc.pid, args.idle_seconds)
        log(f"  {report['idle_not_watching']}")
    with http_server(home) as again:  # the files the first catch-up read now have stamps that vouch
        async with Client(f"{again.url}/mcp", client_info=CLIENT) as client:
            report["watcher_catch_up_again_s"] = round(await wait_for(lambda: _watched(client), "the watcher"), 2)
            log(f"a second start's watcher live after {report['watcher_catch_up_again_s']} s")
    return report


def to_markdown(report: dict[str, Any]) -> str:
    def ms(summary: dict[str, Any]) -> str:
        return f"{summary['p50']:.0f} / {summary['p95']:.0f}" if summary.get("n") else "—"

    idle, plain = report["idle_watching"], report["idle_not_watching"]
    change, drop = report["search_under_change"], report["bulk"]
    follow = report.get("initial_follow") or {}
    on, off, after = idle["memory"] or {}, plain["memory"] or {}, report.get("memory_after_all") or {}
    pick, busy = report["pickup_idle"], report["pickup_under_search"]
    rows = [
        ("initial follow (ingest)", f"{follow.get('seconds', '—')} s for {report['documents']:,} files"),
        (
            "watcher start-up catch-up: first start / a later one",
            f"{report['watcher_catch_up_s']} s / {report.get('watcher_catch_up_again_s', '—')} s",
        ),
        (
            "indexed, idle: new / changed file, P50 / P95 ms",
            f"{ms(pick['new_indexed'])}; {ms(pick['changed_indexed'])}",
        ),
        ("searchable over MCP, idle: new / changed file, P50 / P95 ms", f"{ms(pick['new'])}; {ms(pick['changed'])}"),
        ("2 clients searching: indexed / searchable, P50 / P95 ms", f"{ms(busy['all_indexed'])}; {ms(busy['all'])}"),
        (
            f"idle CPU over {idle['seconds']:g} s: watcher on / off",
            f"{idle['cpu_percent']} % / {plain['cpu_percent']} % ({idle['cpu_seconds']} / {plain['cpu_seconds']} s)",
        ),
        (
            "RSS (anonymous + file-backed) idle: watcher on, after its catch-up / off; after everything",
            f"{_mb(on)} / {_mb(off)}; {_mb(after)}",
        ),
        ("search P50 / P95 ms, folder quiet", ms(change["quiet"])),
        (f"search P50 / P95 ms, {change['files_per_second']} files/s changing", ms(change["changing"])),
        (
            f"bulk: {drop['files']:,} files moved in, 2 servers",
            (
                f"all indexed in {drop['all_indexed_s']} s; {drop['not_searchable']} not searchable, "
                f"{drop['rows_twice']} rows and {drop['ingested_twice']} ingests twice"
            ),
        ),
    ]
    lines = ["| measure | result |", "|---|---|", *(f"| {a} | {b} |" for a, b in rows)]
    return "\n".join(lines) + "\n"


def _mb(memory: dict[str, float]) -> str:
    if not memory:
        return "—"
    return f"{memory['rss_mb']:.0f} MB ({memory.get('anon_mb', 0):.0f} + {memory.get('file_mb', 0):.0f})"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--documents", type=int, default=10_000, help="files in the followed folder")
    parser.add_argument("--pickups", type=int, default=40, help="files written per pick-up measurement")
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    parser.add_argument("--searches", type=int, default=300, help="searches per latency measurement")
    parser.add_argument("--rate", type=float, default=10.0, help="files changed per second during searches")
    parser.add_argument("--bulk", type=int, default=1_000, help="files moved in at once")
    parser.add_argument("--work", type=Path, help="where to put the folder and the home (default: a temp dir)")
    parser.add_argument(
        "--reuse", action="store_true", help="measure again over the folder and store a run left in --work"
    )
    parser.add_argument("--out", type=Path, default=Path("bench/results/live.json"))
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]
    with contextlib.ExitStack() as stack:
        work = args.work or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="coffer-live-")))
        report = anyio.run(run, args, work)
    report["machine"] = {
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "ram_gb": ram_gb(),
        "load_average_1m": [round(load, 2), round(os.getloadavg()[0], 2)],
        "python": sys.version.split()[0],
        "sources": source_fingerprint(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1), encoding="utf-8")
    print(to_markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
