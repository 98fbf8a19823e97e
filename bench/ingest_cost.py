"""Where the time of an ingest goes, per backend: documents per second and, for PostgreSQL, each statement's share.

Run from the repository root::

    python -m bench.ingest_cost [--documents 1000] [--backend sqlite,postgres] [--postgres-url URL]
                                [--via ingest_path|follow] [--out bench/results/ingest-cost.json]

Writes the first ``--documents`` documents of the scale benchmark's synthetic corpus, ingests them
with ``ingest_path`` (or, with ``--via follow``, by following the folder: ``coffer kb ingest
--follow``'s first sync) into a fresh knowledge base of each backend (512/64 chunking, as
``bench.scale``), and reports documents per second. For PostgreSQL it also times every statement
psycopg runs (``Connection.execute``, grouped by the statement's first words) and the transactions
(``BEGIN``/``COMMIT`` round trips), in milliseconds per document: what an ingest costs in the
database, and what it costs around it. On a shared machine the wall time says as much about the
load as about the code, so the CPU time per document is reported too: the ingest's process with
its prefetch workers (``client``), and the PostgreSQL server's processes (``server``: every backend
and worker of the server, read from ``/proc``), with the load average before and after.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import coffer_mcp
from bench._backends import open_backend, parse_backends
from bench._corpus import CHUNK_OVERLAP, CHUNK_SIZE, generate_document, load_vocabulary
from bench._measure import log, machine_info, source_fingerprint, write_report
from bench.scale import DEFAULT_VOCAB
from coffer_mcp import Coffer, load_settings

__all__ = ["main"]

KB = "bench"


@contextlib.contextmanager
def statement_times() -> Iterator[tuple[Counter[str], Counter[str]]]:
    """Seconds and calls per statement (its first 60 characters) and per transaction, while the block runs."""
    import psycopg

    seconds: Counter[str] = Counter()
    calls: Counter[str] = Counter()
    execute, transaction = psycopg.Connection.execute, psycopg.Connection.transaction

    def timed_execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return execute(self, query, *args, **kwargs)
        finally:
            key = " ".join(str(query).split())[:60]
            seconds[key] += time.perf_counter() - started
            calls[key] += 1

    @contextlib.contextmanager
    def timed_transaction(self: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
        # BEGIN and COMMIT: the time to enter and to leave, not what runs inside.
        started = time.perf_counter()
        with transaction(self, *args, **kwargs) as tx:
            seconds["(BEGIN)"] += time.perf_counter() - started
            calls["(BEGIN)"] += 1
            yield tx
            started = time.perf_counter()
        seconds["(COMMIT)"] += time.perf_counter() - started
        calls["(COMMIT)"] += 1

    psycopg.Connection.execute = timed_execute  # type: ignore[method-assign]
    psycopg.Connection.transaction = timed_transaction  # type: ignore[assignment,method-assign]
    try:
        yield seconds, calls
    finally:
        psycopg.Connection.execute = execute  # type: ignore[method-assign]
        psycopg.Connection.transaction = transaction  # type: ignore[method-assign]


def client_cpu() -> float:
    """CPU seconds of this process and of its children that ended (the prefetch workers)."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def server_cpu(database_url: str | None) -> float | None:
    """CPU seconds the PostgreSQL server at ``database_url`` has spent: its postmaster's, its ended
    children's and its running children's (``/proc``); None without a URL or ``/proc``."""
    if database_url is None or not Path("/proc/self/stat").exists():
        return None
    import psycopg

    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        postmaster = _proc_stat(row[0])[1]  # while the backend lives
    total = 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                fields = _proc_stat(int(entry.name))
                if fields[1] == postmaster:
                    total += fields[11] + fields[12]  # utime, stime
    fields = _proc_stat(postmaster)
    total += fields[11] + fields[12] + fields[13] + fields[14]  # with cutime, cstime: its ended children
    return total / os.sysconf("SC_CLK_TCK")


def _proc_stat(pid: int) -> list[int]:
    """``/proc/PID/stat``'s numeric fields after the command: [state(0), ppid, pgrp, ...]."""
    text = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    rest = text[text.rindex(")") + 2 :].split()
    return [0, *(int(field) for field in rest[1:])]


def ingest(settings: Any, corpus: Path, backend: str, via: str = "ingest_path") -> dict[str, Any]:
    url = settings.database_url.get_secret_value() if settings.database_url is not None else None
    with Coffer(settings) as coffer:
        coffer.create_kb(KB, chunk_size=CHUNK_SIZE, chunk_overlap=CHUNK_OVERLAP)
        timing = statement_times() if backend == "postgres" else contextlib.nullcontext((Counter(), Counter()))
        load_before, server_before, client_before = os.getloadavg()[0], server_cpu(url), client_cpu()
        with timing as (seconds, calls):
            started = time.perf_counter()
            result = coffer.follow_folder(KB, corpus) if via == "follow" else coffer.ingest_path(KB, corpus)
            elapsed = time.perf_counter() - started
        client, server, load_after = client_cpu() - client_before, server_cpu(url), os.getloadavg()[0]
    n = result.created
    report: dict[str, Any] = {"documents": n, "seconds": elapsed, "docs_per_s": n / elapsed}
    report["load_average"] = [round(load_before, 2), round(load_after, 2)]
    report["cpu_ms_per_doc"] = {"client": 1000 * client / n}
    if server is not None and server_before is not None:
        report["cpu_ms_per_doc"]["server"] = 1000 * (server - server_before) / n
    if seconds:
        report["statements_ms_per_doc"] = {
            key: {"ms": 1000 * value / n, "calls": calls[key]} for key, value in seconds.most_common()
        }
        report["in_statements_ms_per_doc"] = 1000 * sum(seconds.values()) / n
        report["total_ms_per_doc"] = 1000 * elapsed / n
    return report


def to_markdown(data: dict[str, Any]) -> str:
    lines = [
        (
            "| backend | documents/s | ms per document | of which in SQL statements | CPU ms per document: "
            "client / server | load average |"
        ),
        "|---|---:|---:|---:|---:|---|",
    ]
    for name, report in data["backends"].items():
        inside, cpu = report.get("in_statements_ms_per_doc"), report["cpu_ms_per_doc"]
        server = f"{cpu['server']:.2f}" if "server" in cpu else "—"
        load = " → ".join(f"{value:.1f}" for value in report["load_average"])
        lines.append(
            f"| {name} | {report['docs_per_s']:.0f} | {1000 * report['seconds'] / report['documents']:.2f} | "
            f"{'—' if inside is None else f'{inside:.2f}'} | {cpu['client']:.2f} / {server} | {load} |"
        )
    for name, report in data["backends"].items():
        if "statements_ms_per_doc" in report:
            lines += ["", f"{name}, per document:", "", "| ms | calls | statement |", "|---:|---:|---|"]
            for key, value in list(report["statements_ms_per_doc"].items())[:15]:
                lines.append(f"| {value['ms']:.3f} | {value['calls']:,} | `{key}` |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.ingest_cost", description=__doc__.split("\n\n")[0])
    parser.add_argument("--documents", type=int, default=1000)
    parser.add_argument("--backend", default="sqlite,postgres")
    parser.add_argument("--postgres-url", default=None)
    parser.add_argument("--via", choices=("ingest_path", "follow"), default="ingest_path")
    parser.add_argument("--seed", type=int, default=20261130)
    parser.add_argument("--vocab", type=Path, default=DEFAULT_VOCAB)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=Path("bench/results/ingest-cost.json"))
    args = parser.parse_args(argv)
    command = " ".join(["python -m bench.ingest_cost", *(sys.argv[1:] if argv is None else argv)])
    backends = parse_backends(args.backend)
    data: dict[str, Any] = {
        "command": command,
        "date": datetime.now(timezone.utc).replace(microsecond=0).isoformat(),
        "coffer_version": coffer_mcp.__version__,
        "coffer_source_sha256": source_fingerprint(),
        "machine": machine_info(None),
        "via": args.via,
        "backends": {},
    }
    with tempfile.TemporaryDirectory(prefix="coffer-ingest-cost-", dir=args.workdir) as tmp:
        root = Path(tmp)
        vocab = load_vocabulary(args.vocab)
        (root / "corpus").mkdir()
        for i in range(args.documents):  # the first documents of bench.scale's corpus (~3.5 chunks each)
            text = generate_document(vocab, args.seed, i)
            (root / "corpus" / f"doc-{i:07d}.md").write_text(text, encoding="utf-8")
        for name in backends:
            with open_backend(name, args.postgres_url) as backend:
                settings = load_settings(home=root / name, embedding_provider="none", **backend.new_index())
                data["backends"][name] = ingest(settings, root / "corpus", name, args.via)
                if name == "postgres":
                    data["postgres"] = backend.describe()
            log(f"{name}: {data['backends'][name]['docs_per_s']:.0f} documents/s")
    write_report(args.out, data, to_markdown(data))
    return data


if __name__ == "__main__":
    main()
