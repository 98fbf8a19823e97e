"""Load on the HTTP transport: clients searching and writing through ``/mcp`` at the same time.

Run from the repository root::

    python -m bench.http_load [--searchers 32] [--writers 4] [--seconds 60] [--documents 400]
                              [--json-response] [--backend sqlite|postgres] [--postgres-url URL]
                              [--out bench/results/http_load.json]

It seeds a fresh ``COFFER_HOME`` with generated documents, starts ``coffer serve --http --port 0``
as a subprocess on 127.0.0.1, opens one MCP session per client with the Python SDK's
streamable-HTTP client, and for ``--seconds``: each searcher calls ``coffer__search_knowledge``
with seeded random queries, each writer alternates ``coffer__add_document`` (a new document) and
``coffer__edit_document`` (one of its own). A request fails when it raises, times out or comes back
as a tool error. Reports latency percentiles (P50/P95/P99, ms) and throughput per kind, prints a
Markdown table, and writes the numbers with the machine, date and command to ``--out``, with the
CPU the server and the client used per request and the machine's load average (the VM is shared).

``tests/reliability/test_http_load.py`` runs a short version of the same load (and reuses
``http_server`` to start the server).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import queue
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import anyio

from bench._backends import BACKENDS, open_backend
from bench._measure import cpu_model, percentile, proc_cpu_seconds, ram_gb

__all__ = ["LoadResult", "ServerProcess", "http_server", "main", "run_load", "seed_corpus", "summarize", "to_markdown"]

KB = "bench"
CALL_TIMEOUT = 60.0
_BANNER = re.compile(r"MCP over streamable HTTP at (http://\S+)/mcp")
# Words for generated documents and queries: technical prose, so BM25 has real work to do.
WORDS = (
    "index query vector search chunk document passage token stemming ranking score latency recall "
    "precision cache memory disk file lock writer reader transaction journal commit rollback crash "
    "replica shard cluster node graph neighbour approximate exact hybrid keyword fusion model embed "
    "protocol session stream server client request response timeout retry backoff queue worker thread "
    "process signal pipe socket loopback origin header token bearer cookie viewer markdown heading "
    "table fence paragraph sentence section title author summary abstract method result dataset "
    "benchmark baseline metric throughput percentile sample median variance error failure recovery"
).split()


# -- the server ----------------------------------------------------------------------------------


@dataclass
class ServerProcess:
    """``coffer serve --http`` running as a subprocess; ``stderr`` collects everything it logged."""

    proc: subprocess.Popen[str]
    url: str
    stderr: list[str] = field(default_factory=list)
    _logged: threading.Condition = field(default_factory=threading.Condition, repr=False)

    @property
    def mcp_url(self) -> str:
        return f"{self.url}/mcp"

    def log(self, line: str) -> None:
        with self._logged:
            self.stderr.append(line)
            self._logged.notify_all()

    def wait_for_line(self, text: str, timeout: float) -> bool:
        """Wait until a line of stderr holds ``text`` (True), or ``timeout`` seconds pass (False)."""
        with self._logged:
            return self._logged.wait_for(lambda: any(text in line for line in self.stderr), timeout)


def server_env(home: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a Coffer subprocess over ``home``: no inherited ``COFFER_*`` settings."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("COFFER_")}
    env.update({"COFFER_HOME": str(home), "COFFER_EMBEDDING_PROVIDER": "none", "PYTHONUNBUFFERED": "1"})
    env.update(extra or {})
    return env


# ``python -m coffer_mcp`` with its descriptor limit (soft and hard) set first to argv[1].
_LIMITED = [
    sys.executable,
    "-c",
    (
        "import resource, runpy, sys; n = int(sys.argv.pop(1)); resource.setrlimit(resource.RLIMIT_NOFILE, (n, n)); "
        "runpy.run_module('coffer_mcp', run_name='__main__', alter_sys=True)"
    ),
]


@contextlib.contextmanager
def http_server(
    home: Path,
    env: Mapping[str, str] | None = None,
    *,
    args: Sequence[str] = (),
    start_timeout: float = 60.0,
    open_files: int | None = None,
) -> Iterator[ServerProcess]:
    """Start ``coffer serve --http --host 127.0.0.1 --port 0`` and yield it once it listens.

    The banner on stderr gives the port; a thread keeps draining stderr into ``stderr`` so the
    server never blocks on a full pipe. On exit the server gets SIGINT (Ctrl-C), then SIGKILL.
    ``open_files`` caps the server's file descriptors (``ulimit -n``, soft and hard; POSIX only).
    """
    python = [sys.executable, "-m", "coffer_mcp"] if open_files is None else [*_LIMITED, str(open_files)]
    command = [*python, "serve", "--http", "--host", "127.0.0.1", "--port", "0", *args]
    proc = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(env) if env is not None else server_env(home),
    )
    server = ServerProcess(proc, url="")
    ready: queue.Queue[str | None] = queue.Queue()

    def drain() -> None:
        for line in proc.stderr:
            server.log(line)
            if match := _BANNER.search(line):
                ready.put(match.group(1))
        ready.put(None)

    reader = threading.Thread(target=drain, name="coffer-http-stderr", daemon=True)
    reader.start()
    try:
        url = ready.get(timeout=start_timeout)
        if url is None:
            raise RuntimeError("coffer serve --http exited before listening:\n" + "".join(server.stderr))
        server.url = url
        try:
            yield server
        except BaseException as exc:
            if proc.poll() is not None and hasattr(exc, "add_note"):  # Python 3.11+: the failure says why
                said = "".join(server.stderr)
                exc.add_note(f"coffer serve --http had exited ({proc.returncode}); its stderr:\n{said}")
            raise
    finally:
        _stop(proc)
        reader.join(10)
        proc.stderr.close()


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# -- the corpus ----------------------------------------------------------------------------------


def prose(rng: random.Random, words: int) -> str:
    """Seeded pseudo-prose: sentences of the benchmark vocabulary."""
    sentences = []
    while words > 0:
        length = min(words, rng.randint(6, 16))
        sentence = " ".join(rng.choice(WORDS) for _ in range(length))
        sentences.append(sentence[0].upper() + sentence[1:] + ".")
        words -= length
    return " ".join(sentences)


def document(rng: random.Random, title: str) -> str:
    """A Markdown document of two sections, about 250 words."""
    return f"# {title}\n\n{prose(rng, 90)}\n\n## Details\n\n{prose(rng, 80)}\n\n## Notes\n\n{prose(rng, 80)}\n"


def seed_corpus(home: Path, documents: int, seed: int = 7, **settings: Any) -> None:
    """Create knowledge base ``bench`` under ``home`` with ``documents`` generated documents
    (``settings``: more ``load_settings`` overrides, e.g. the index backend)."""
    from coffer_mcp import Coffer, load_settings

    rng = random.Random(seed)
    with Coffer(load_settings(home=home, embedding_provider="none", **settings)) as coffer:
        coffer.create_kb(KB, "HTTP load benchmark corpus")
        for i in range(documents):
            coffer.add_document(KB, f"seed-{i:05d}.md", document(rng, f"Seed document {i}"))


# -- the load ------------------------------------------------------------------------------------


@dataclass
class LoadResult:
    """Every request's latency by kind, and every failure."""

    latencies: dict[str, list[float]] = field(default_factory=lambda: {"search": [], "add": [], "edit": []})
    failures: list[dict[str, str]] = field(default_factory=list)
    seconds: float = 0.0
    searchers: int = 0
    writers: int = 0


class _Load:
    def __init__(self, urls: Sequence[str], result: LoadResult, seconds: float, seed: int) -> None:
        self.urls = urls
        self.result = result
        self.seconds = seconds
        self.seed = seed
        self.go = anyio.Event()
        self.connected = 0
        self.clients = result.searchers + result.writers
        self.deadline = math.inf
        self.started = math.nan

    async def call(self, client: Any, kind: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any] | None:
        started = time.perf_counter()
        try:
            with anyio.fail_after(CALL_TIMEOUT):
                reply = await client.call_tool(tool, arguments)
        except Exception as exc:  # noqa: BLE001 - every failure of a request is counted, whatever it is
            self.result.failures.append({"kind": kind, "error": f"{type(exc).__name__}: {exc}"[:500]})
            return None
        elapsed = (time.perf_counter() - started) * 1000
        if reply.is_error:
            text = " ".join(getattr(part, "text", "") for part in reply.content)
            self.result.failures.append({"kind": kind, "error": text[:500]})
            return None
        self.result.latencies[kind].append(elapsed)
        return reply.structured_content

    async def session(self, name: str, body: Any, number: int) -> None:
        """Client ``number`` (0, 1, ...): its session goes to the servers' URLs in turn."""
        from mcp import Client
        from mcp.types import Implementation

        ready = False
        try:
            async with Client(
                self.urls[number % len(self.urls)], client_info=Implementation(name=name, version="1")
            ) as client:
                ready = True
                await self._ready()
                await body(client, random.Random(f"{self.seed}:{name}"))
        except Exception as exc:  # noqa: BLE001 - a broken session is a failure to count, not a crash
            self.result.failures.append({"kind": "session", "error": f"{name}: {type(exc).__name__}: {exc}"[:500]})
            if not ready:
                await self._ready()

    async def _ready(self) -> None:
        """Wait until every client has connected, so the clock measures only the load itself."""
        self.connected += 1
        if self.connected == self.clients:
            self.started = time.monotonic()
            self.deadline = self.started + self.seconds
            self.go.set()
        await self.go.wait()

    async def searcher(self, client: Any, rng: random.Random) -> None:
        while time.monotonic() < self.deadline:
            query = " ".join(rng.sample(WORDS, rng.randint(1, 3)))
            await self.call(client, "search", "coffer__search_knowledge", {"kb": KB, "query": query, "top_k": 5})

    def writer(self, name: str) -> Any:
        async def body(client: Any, rng: random.Random) -> None:
            mine: list[str] = []
            n = 0
            while time.monotonic() < self.deadline:
                n += 1
                if not mine or n % 2:
                    content = document(rng, f"{name} note {n}")
                    args = {"kb": KB, "filename": f"{name}-{n:05d}.md", "content": content}
                    if (out := await self.call(client, "add", "coffer__add_document", args)) is not None:
                        mine.append(out["document_id"])
                else:
                    content = document(rng, f"{name} edit {n}")
                    args = {"kb": KB, "doc_id": rng.choice(mine), "content": content}
                    await self.call(client, "edit", "coffer__edit_document", args)

        return body


async def run_load(
    mcp_url: str | Sequence[str], *, searchers: int, writers: int, seconds: float, seed: int = 1
) -> LoadResult:
    """``searchers`` + ``writers`` MCP sessions against ``mcp_url`` for ``seconds`` once all connected.

    Given several URLs (servers over one store), the sessions are spread over them round-robin,
    the searchers first, then the writers.
    """
    urls = [mcp_url] if isinstance(mcp_url, str) else list(mcp_url)
    result = LoadResult(searchers=searchers, writers=writers)
    load = _Load(urls, result, seconds, seed)
    async with anyio.create_task_group() as group:
        for i in range(searchers):
            group.start_soon(load.session, f"searcher-{i:02d}", load.searcher, i)
        for i in range(writers):
            name = f"writer-{i:02d}"
            group.start_soon(load.session, name, load.writer(name), searchers + i)
    # Requests in flight at the deadline still finish: throughput is over the time they took.
    result.seconds = time.monotonic() - load.started if load.go.is_set() else 0.0
    return result


# -- the report ----------------------------------------------------------------------------------


def summarize(result: LoadResult) -> dict[str, Any]:
    """Counts, throughput and latency percentiles per kind of request (and all together)."""
    kinds = {**result.latencies, "all": [v for values in result.latencies.values() for v in values]}
    rows = {}
    for kind, values in kinds.items():
        rows[kind] = {
            "requests": len(values),
            "per_second": round(len(values) / result.seconds, 1) if result.seconds else 0.0,
            **{f"p{p}_ms": round(percentile(values, p), 1) for p in (50, 95, 99)},
            "max_ms": round(max(values), 1) if values else math.nan,
        }
    return {
        "searchers": result.searchers,
        "writers": result.writers,
        "seconds": round(result.seconds, 2),
        "failed_requests": len(result.failures),
        "kinds": rows,
    }


def to_markdown(summary: dict[str, Any]) -> str:
    lines = [
        (
            f"{summary['searchers']} searching + {summary['writers']} writing clients, {summary['seconds']:.0f} s, "
            f"{summary['failed_requests']} failed requests"
        ),
        "",
        "| requests | count | per second | P50 ms | P95 ms | P99 ms | max ms |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for kind, row in summary["kinds"].items():
        lines.append(
            f"| {kind} | {row['requests']:,} | {row['per_second']:.1f} | {row['p50_ms']:.1f} | "
            f"{row['p95_ms']:.1f} | {row['p99_ms']:.1f} | {row['max_ms']:.1f} |"
        )
    if cpu := summary.get("cpu"):
        lines += [
            "",
            (
                f"CPU per request: server {cpu['server_ms_per_request']} ms, client "
                f"{cpu['client_ms_per_request']} ms; 1-minute load average {cpu['load_average_1m'][0]} "
                f"at the start, {cpu['load_average_1m'][1]} at the end"
            ),
        ]
    return "\n".join(lines)


class _CpuProbe:
    """CPU used by the server and by this client process over the load, and the machine's load average.

    The VM is shared: the load average says how busy its two cores were with other work, and
    CPU milliseconds per request compare runs that latency alone cannot (a closed loop of N
    clients waits about N x CPU per request / cores, whatever else the machine does).
    """

    def __init__(self, server_pid: int) -> None:
        self.pid = server_pid
        self.server = proc_cpu_seconds(server_pid)
        self.client = time.process_time()
        self.load = _load_average()

    def stop(self, requests: int) -> dict[str, Any]:
        server_now = proc_cpu_seconds(self.pid)
        server = server_now - self.server if server_now is not None and self.server is not None else None
        client = time.process_time() - self.client

        def per(seconds: float | None) -> float | None:
            return round(seconds * 1000 / requests, 2) if seconds is not None and requests else None

        return {
            "server_seconds": None if server is None else round(server, 2),
            "client_seconds": round(client, 2),
            "server_ms_per_request": per(server),
            "client_ms_per_request": per(client),
            "load_average_1m": [self.load, _load_average()],
        }


def _load_average() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def machine_info() -> dict[str, Any]:
    """Where the numbers were measured."""
    from coffer_mcp import __version__
    from coffer_mcp.index.sqlite.db import binding

    chosen = binding()
    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "cpu_model": cpu_model(),
        "memory_gb": ram_gb(),
        "coffer_version": __version__,
        "sqlite_binding": chosen.name,
        "sqlite_version": chosen.sqlite_version,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--searchers", type=int, default=32)
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--documents", type=int, default=400, help="generated documents to seed")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json-response", action="store_true", help="serve MCP with JSON replies instead of SSE")
    parser.add_argument("--backend", default="sqlite", choices=BACKENDS, help="the index (postgres: embedded)")
    parser.add_argument("--postgres-url", help="with --backend postgres: this server instead of an embedded one")
    parser.add_argument("--out", type=Path, default=Path("bench/results/http_load.json"))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp, open_backend(args.backend, args.postgres_url) as backend:
        home = Path(tmp) / "home"
        index = backend.new_index()
        described = backend.describe()
        print(f"seeding {args.documents} documents ({args.backend})...", file=sys.stderr)
        seed_corpus(home, args.documents, args.seed, **index)
        server_args = ["--json-response"] if args.json_response else []
        with http_server(home, server_env(home, backend.env(index)), args=server_args) as server:
            print(f"loading {server.mcp_url} for {args.seconds:g} s...", file=sys.stderr)
            probe = _CpuProbe(server.proc.pid)
            result = anyio.run(
                lambda: run_load(
                    server.mcp_url, searchers=args.searchers, writers=args.writers, seconds=args.seconds, seed=args.seed
                )
            )
            cpu = probe.stop(sum(len(v) for v in result.latencies.values()))
            server_errors = [line.rstrip() for line in server.stderr if "Traceback" in line or "ERROR" in line]
    summary = {**summarize(result), "cpu": cpu}
    report = {
        **summary,
        "failures": result.failures[:50],
        "server_error_lines": server_errors[:50],
        "documents_seeded": args.documents,
        "backend": described,
        "transport": "streamable HTTP, " + ("JSON replies" if args.json_response else "SSE replies"),
        "command": " ".join(["python", "-m", "bench.http_load", *(argv if argv is not None else sys.argv[1:])]),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": machine_info(),
    }
    print(to_markdown(summary))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 1 if result.failures else 0


if __name__ == "__main__":
    sys.exit(main())
