"""Several Coffer servers over one store: HTTP throughput against one server, then two.

Run from the repository root::

    python -m bench.two_servers [--servers 1,2] [--searchers 28] [--writers 4] [--seconds 60]
                                [--documents 400] [--backend postgres] [--postgres-url URL]
                                [--out bench/results/two_servers.json]

For each server count a fresh ``COFFER_HOME`` and a fresh PostgreSQL database (an embedded server,
``bench._backends``, unless ``--postgres-url`` names one) are seeded with generated documents;
that many ``coffer serve --http`` processes start over the same home and database, and the
``bench.http_load`` clients (searchers calling ``coffer__search_knowledge``, writers adding and
editing documents) open their sessions round-robin over the servers. Afterwards every document a
writer was told it added must be in the index, once. Reports throughput and latency per kind,
and the CPU the servers, PostgreSQL and the clients used (the machine is shared: its load average
is recorded too). ``--backend sqlite`` runs the same over the embedded index, for reference.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import anyio

from bench._backends import open_backend
from bench._measure import proc_cpu_seconds
from bench.http_load import (
    KB,
    LoadResult,
    ServerProcess,
    http_server,
    machine_info,
    run_load,
    seed_corpus,
    server_env,
    summarize,
    to_markdown,
)

__all__ = ["main", "servers"]


@contextlib.contextmanager
def servers(home: Path, count: int, env: Mapping[str, str]) -> Iterator[list[ServerProcess]]:
    """``count`` ``coffer serve --http`` processes over ``home``, each on its own loopback port."""
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(http_server(home, env)) for _ in range(count)]


class _Cpu:
    """CPU seconds of the servers, of PostgreSQL (its postmaster and every child) and of this process."""

    def __init__(self, server_pids: Sequence[int], postmaster: int | None) -> None:
        self.server_pids, self.postmaster = list(server_pids), postmaster
        self.start = self._now()
        self.load = round(os.getloadavg()[0], 2)

    def _now(self) -> dict[str, float]:
        servers = sum(proc_cpu_seconds(pid) or 0.0 for pid in self.server_pids)
        return {"servers": servers, "postgres": _tree_cpu(self.postmaster), "client": time.process_time()}

    def stop(self, requests: int) -> dict[str, Any]:
        end = self._now()
        used = {key: round(end[key] - self.start[key], 2) for key in end}
        per = {f"{key}_ms_per_request": round(used[key] * 1000 / requests, 2) if requests else None for key in used}
        return {
            **{f"{key}_seconds": value for key, value in used.items()},
            **per,
            "load_average_1m": [self.load, round(os.getloadavg()[0], 2)],
        }


def _tree_cpu(pid: int | None) -> float:
    """User + system CPU seconds of a process and its children (PostgreSQL forks one per connection);
    0 when unknown. Children that exited meanwhile are not counted (connections stay open here)."""
    if pid is None:
        return 0.0
    import psutil

    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0.0
    total = 0.0
    for process in processes:
        with contextlib.suppress(psutil.Error):
            times = process.cpu_times()
            total += times.user + times.system
    return total


def _postmaster(url: str) -> int | None:
    if not url:
        return None
    import psycopg

    try:
        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute("SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'").fetchone()
        import psutil

        return psutil.Process(row[0]).ppid() if row else None
    except Exception:  # noqa: BLE001 - a remote server: no CPU figure, not a failure
        return None


def one_run(args: argparse.Namespace, backend: Any, count: int, root: Path) -> dict[str, Any]:
    """Seed a fresh home and database, start ``count`` servers over them, run the load, check the writes."""
    home = root / f"home-{count}"
    index = backend.new_index()
    print(f"{count} server(s): seeding {args.documents} documents...", file=sys.stderr)
    seed_corpus(home, args.documents, args.seed, **index)
    env = server_env(home, backend.env(index))
    with servers(home, count, env) as running:
        urls = [server.mcp_url for server in running]
        print(f"loading {', '.join(urls)} for {args.seconds:g} s...", file=sys.stderr)
        cpu = _Cpu([server.proc.pid for server in running], _postmaster(str(index.get("database_url", ""))))
        result: LoadResult = anyio.run(
            lambda: run_load(urls, searchers=args.searchers, writers=args.writers, seconds=args.seconds, seed=args.seed)
        )
        used = cpu.stop(sum(len(v) for v in result.latencies.values()))
        errors = [
            line.rstrip() for server in running for line in server.stderr if "Traceback" in line or "ERROR" in line
        ]
    return {
        "servers": count,
        **summarize(result),
        "cpu": used,
        "writes_check": check_writes(home, index, args.documents, len(result.latencies["add"])),
        "failures": result.failures[:50],
        "server_error_lines": errors[:50],
    }


def check_writes(home: Path, index: Mapping[str, Any], seeded: int, added: int) -> dict[str, Any]:
    """Every acknowledged add is in the index as the servers left it (no reconcile first), once, and
    has its file: at least the seeded documents plus the acknowledged adds (an add that timed out
    on the client may still have landed), as many files as index rows, no name twice."""
    from coffer_mcp import Coffer, load_settings

    with Coffer(load_settings(home=home, embedding_provider="none", **index)) as coffer:
        names = [row.original_filename for row in coffer.index.documents(KB)]
        files = sum(1 for _ in coffer.paths.kb(KB).docs.glob("*.md"))
    expected = seeded + added
    duplicates = len(names) - len(set(names))
    return {
        "documents": len(names),
        "files": files,
        "expected_at_least": expected,
        "duplicates": duplicates,
        "ok": len(names) >= expected and files == len(names) and not duplicates,
    }


def to_table(runs: Sequence[dict[str, Any]]) -> str:
    lines = [
        (
            "| servers | requests/s (all) | searches/s | writes/s | search P50 / P95 ms | write P95 ms | failed "
            "| CPU ms per request: servers / PostgreSQL / clients | writes check |"
        ),
        "|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for run in runs:
        kinds, cpu, check = run["kinds"], run["cpu"], run["writes_check"]
        writes = kinds["add"]["per_second"] + kinds["edit"]["per_second"]
        write_p95 = max(kinds["add"]["p95_ms"], kinds["edit"]["p95_ms"])
        lines.append(
            f"| {run['servers']} | {kinds['all']['per_second']:.1f} | {kinds['search']['per_second']:.1f} "
            f"| {writes:.1f} | {kinds['search']['p50_ms']:.0f} / {kinds['search']['p95_ms']:.0f} | {write_p95:.0f} "
            f"| {run['failed_requests']} | {cpu['servers_ms_per_request']} / {cpu['postgres_ms_per_request']} / "
            f"{cpu['client_ms_per_request']} | {'ok' if check['ok'] else 'FAILED'} ({check['documents']:,} documents) |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", default="1,2", help="comma-separated server counts to compare")
    parser.add_argument("--searchers", type=int, default=28)
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--documents", type=int, default=400, help="generated documents to seed")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--backend", default="postgres", choices=["postgres", "sqlite"], help="the index (sqlite: for reference)"
    )
    parser.add_argument("--postgres-url", default=None, help="a server whose role may create databases")
    parser.add_argument("--out", type=Path, default=Path("bench/results/two_servers.json"))
    args = parser.parse_args(argv)
    counts = [int(n) for n in args.servers.split(",") if n.strip()]
    runs = []
    with tempfile.TemporaryDirectory() as tmp, open_backend(args.backend, args.postgres_url) as backend:
        described = backend.describe()
        for count in counts:
            runs.append(one_run(args, backend, count, Path(tmp)))
            print(to_markdown({key: value for key, value in runs[-1].items() if key != "cpu"}), file=sys.stderr)
    report = {
        "runs": runs,
        "backend": described,
        "documents_seeded": args.documents,
        "command": " ".join(["python", "-m", "bench.two_servers", *(argv if argv is not None else sys.argv[1:])]),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": machine_info(),
    }
    print(to_table(runs))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 1 if any(run["failed_requests"] or not run["writes_check"]["ok"] for run in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
