"""A slow-header attack on ``coffer serve --http``, and what an authenticated client sees meanwhile.

Run from the repository root (Linux)::

    python -m bench.http_attack [--connections 1100] [--open-files 1024] [--searches 20]
                                [--header-timeout 10] [--out bench/results/http_attack.json]

It starts ``coffer serve --http`` with a bearer token under a file-descriptor limit of
``--open-files`` (``ulimit -n``), then opens ``--connections`` connections that each send the
start of a request's headers and never finish them, adding one more header line to every open
one each second (slowloris; no token needed). While they are held, an MCP client with the token
opens a session and runs ``--searches`` searches and one add; each is timed. Then the attack
stops sending and the script waits for the server to close the connections it still holds.
Reported: the latency of the authenticated calls, failures, how many attacking connections the
server closed and when the last one was closed, the server's peak descriptor count, and the size of
its stderr (with the number of tracebacks in it).

``tests/reliability/test_hostile_connections.py`` runs a small version of the same attack
(and reuses ``HalfOpen``).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import selectors
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import anyio

from bench._measure import percentile
from bench.http_load import KB, _load_average, http_server, machine_info, seed_corpus, server_env

__all__ = ["HalfOpen", "authenticated_calls", "main"]

PARTIAL_REQUEST = b"GET /api/v1/knowledge_bases HTTP/1.1\r\nHost: 127.0.0.1\r\n"


class HalfOpen:
    """Connections that each send part of a request's headers and never the end of them.

    A thread adds a header line to every open connection each ``trickle`` seconds (so a server
    that only times out silence is not enough) and notes each one the server closes; with
    ``reconnect``, it opens a new one in its place until ``stop_reconnecting``.
    """

    def __init__(self, host: str, port: int, *, trickle: float = 1.0, reconnect: bool = False) -> None:
        self.address = (host, port)
        self.trickle = trickle
        self.reconnect = reconnect
        self.opened = 0
        self.refused = 0  # connect() itself failed
        self.closed_at: list[float] = []  # monotonic times the server closed one
        self._open: dict[socket.socket, None] = {}
        self._selector = selectors.DefaultSelector()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._lately_closed = 0
        self._thread = threading.Thread(target=self._watch, name="half-open", daemon=True)

    def open(self, count: int) -> None:
        """Open ``count`` connections (in the kernel's backlog if the server has not accepted them)."""
        for _ in range(count):
            with self._lock:
                self._connect()
        if not self._thread.is_alive():
            self._thread.start()

    def stop_reconnecting(self) -> None:
        self.reconnect = False

    def _connect(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.settimeout(10)
        try:
            sock.connect(self.address)
            sock.sendall(PARTIAL_REQUEST)
        except OSError:
            self.refused += 1
            sock.close()
            return
        sock.setblocking(False)
        self._open[sock] = None
        self._selector.register(sock, selectors.EVENT_READ)
        self.opened += 1

    @property
    def held(self) -> int:
        """How many the server has not closed yet."""
        with self._lock:
            return len(self._open)

    def wait_all_closed(self, timeout: float) -> bool:
        """Wait until the server has closed every one (True), or ``timeout`` seconds (False)."""
        deadline = time.monotonic() + timeout
        while self.held and time.monotonic() < deadline:
            self._stop.wait(0.05)
        return not self.held

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)
        with self._lock:
            for sock in self._open:
                sock.close()
            self._open.clear()
        self._selector.close()

    def _watch(self) -> None:
        next_line = time.monotonic() + self.trickle
        while not self._stop.is_set():
            with self._lock:
                ready = self._selector.select(0) if self._open else []
                for key, _ in ready:
                    self._note_if_closed(key.fileobj)  # type: ignore[arg-type]
                closed, self._lately_closed = self._lately_closed, 0
                for _ in range(closed if self.reconnect else 0):
                    self._connect()
                if time.monotonic() >= next_line:
                    next_line = time.monotonic() + self.trickle
                    for sock in list(self._open):
                        try:
                            sock.send(b"X-Slow: 1\r\n")
                        except OSError:
                            self._forget(sock)
            self._stop.wait(0.05)

    def _note_if_closed(self, sock: socket.socket) -> None:
        try:
            data = sock.recv(4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data or data.startswith(b"HTTP/"):  # an answer (a 408, a 503) is followed by the close
            self._forget(sock)

    def _forget(self, sock: socket.socket) -> None:
        if sock in self._open:
            del self._open[sock]
            self._selector.unregister(sock)
            sock.close()
            self.closed_at.append(time.monotonic())
            self._lately_closed += 1


@dataclass
class Calls:
    """The authenticated client's calls during the attack: latency per kind, and failures."""

    latencies: dict[str, list[float]] = field(default_factory=lambda: {"session": [], "search": [], "add": []})
    failures: list[str] = field(default_factory=list)


async def authenticated_calls(mcp_url: str, token: str, *, searches: int, adds: int = 1, limit: float = 60) -> Calls:
    """Open an MCP session with ``token``, then run ``searches`` searches and ``adds`` adds, timing each (ms)."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    calls = Calls()
    started = time.perf_counter()
    headers = {"Authorization": f"Bearer {token}"}
    try:
        with anyio.fail_after(limit):
            async with (
                httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(limit, read=300)) as http,
                Client(streamable_http_client(mcp_url, http_client=http)) as client,
            ):
                calls.latencies["session"].append((time.perf_counter() - started) * 1000)
                for i in range(searches + adds):
                    kind = "search" if i < searches else "add"
                    arguments = (
                        {"kb": KB, "query": "server timeout", "top_k": 3}
                        if kind == "search"
                        else {"kb": KB, "filename": f"under-attack-{i}.md", "content": f"# Note {i}\n\nwritten.\n"}
                    )
                    begun = time.perf_counter()
                    tool = "coffer__search_knowledge" if kind == "search" else "coffer__add_document"
                    result = await client.call_tool(tool, arguments)
                    if result.is_error:
                        calls.failures.append(f"{kind}: {result.content}"[:300])
                    else:
                        calls.latencies[kind].append((time.perf_counter() - begun) * 1000)
    except Exception as exc:  # noqa: BLE001 - a failed session is what this measures
        error: BaseException = exc
        while len(inner := getattr(error, "exceptions", ())) == 1:  # the one error inside task groups
            error = inner[0]
        calls.failures.append(f"session: {type(error).__name__}: {error}"[:300])
    return calls


def _descriptors(pid: int) -> int | None:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


class _PeakDescriptors:
    """The largest descriptor count of a process, sampled every 50 ms on a thread."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self._stop = pid, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, _descriptors(self.pid) or 0)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(5)
        return self.peak


def _ms(values: list[float]) -> dict[str, float | int]:
    percentiles = {f"p{p}_ms": round(percentile(values, p), 1) for p in (50, 95)}
    return {"count": len(values), **percentiles, "max_ms": round(max(values), 1) if values else float("nan")}


def run_attack(args: argparse.Namespace) -> dict[str, Any]:
    token = secrets.token_urlsafe(24)
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        seed_corpus(home, args.documents)
        extra = {"COFFER_HTTP_TOKEN": token}
        if args.header_timeout is not None:
            extra["COFFER_HTTP_HEADER_TIMEOUT"] = str(args.header_timeout)
        with http_server(home, server_env(home, extra), open_files=args.open_files) as server:
            port = int(server.url.rsplit(":", 1)[1])
            peak = _PeakDescriptors(server.proc.pid)
            attack = HalfOpen("127.0.0.1", port, reconnect=args.reconnect)
            began = time.monotonic()
            try:
                attack.open(args.connections)
                opened_in = time.monotonic() - began
                held_before = attack.held
                calls = anyio.run(lambda: authenticated_calls(server.mcp_url, token, searches=args.searches))
                held_after = attack.held
                attack.stop_reconnecting()
                stopped = time.monotonic()
                all_closed = attack.wait_all_closed(args.wait)
                last_closed = max(attack.closed_at) - stopped if all_closed and attack.closed_at else None
                held_at_end = attack.held
            finally:
                attack.close()
                peak_fds = peak.stop()
            alive = server.proc.poll() is None
        stderr = "".join(server.stderr)
    return {
        "connections": args.connections,
        "reconnect": args.reconnect,
        "open_files": args.open_files,
        "opened": attack.opened,
        "refused_at_connect": attack.refused,
        "opened_in_s": round(opened_in, 2),
        "held_when_the_client_started": held_before,
        "held_when_the_client_finished": held_after,
        "closed_by_the_server": len(attack.closed_at),
        "still_held_after_wait": held_at_end,
        "last_closed_s_after_the_client_finished": None if last_closed is None else round(last_closed, 1),
        "server_alive": alive,
        "server_peak_descriptors": peak_fds,
        "authenticated": {kind: _ms(values) for kind, values in calls.latencies.items()},
        "failures": calls.failures,
        "stderr_bytes": len(stderr.encode()),
        "stderr_tracebacks": stderr.count("Traceback"),
        "stderr_tail": stderr.splitlines()[-12:],
    }


def to_markdown(report: dict[str, Any]) -> str:
    rows = [
        "| authenticated call | count | P50 ms | P95 ms | max ms |",
        "|---|---:|---:|---:|---:|",
        *(
            f"| {kind} | {row['count']} | {row['p50_ms']:.1f} | {row['p95_ms']:.1f} | {row['max_ms']:.1f} |"
            for kind, row in report["authenticated"].items()
        ),
    ]
    return "\n".join(
        [
            (
                f"{report['opened']:,} half-sent requests at a limit of {report['open_files']:,} descriptors: "
                f"{len(report['failures'])} failed calls, {report['closed_by_the_server']:,} attacking connections "
                f"closed by the server, {report['still_held_after_wait']} still held at the end, peak "
                f"{report['server_peak_descriptors']} descriptors, stderr {report['stderr_bytes']:,} bytes "
                f"({report['stderr_tracebacks']} tracebacks)"
            ),
            "",
            *rows,
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=1100, help="half-sent requests to hold")
    parser.add_argument("--open-files", type=int, default=1024, help="the server's descriptor limit (ulimit -n)")
    parser.add_argument("--searches", type=int, default=20)
    parser.add_argument(
        "--reconnect", action="store_true", help="open a new half-sent request for each one the server closes"
    )
    parser.add_argument("--documents", type=int, default=60, help="generated documents to seed")
    parser.add_argument("--header-timeout", type=float, help="COFFER_HTTP_HEADER_TIMEOUT (default: the server's)")
    parser.add_argument("--wait", type=float, default=60, help="seconds to wait for the server to close them all")
    parser.add_argument("--out", type=Path, default=Path("bench/results/http_attack.json"))
    args = parser.parse_args(argv)
    load = _load_average()
    report = run_attack(args)
    report |= {
        "load_average_1m": [load, _load_average()],  # the VM is shared
        "command": " ".join(["python", "-m", "bench.http_attack", *(argv if argv is not None else sys.argv[1:])]),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": machine_info(),
    }
    print(to_markdown(report))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 1 if report["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
