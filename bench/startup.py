"""Time from starting ``coffer serve`` to its answers to ``initialize`` and ``tools/list``.

Usage (from the repo root)::

    python -m bench.startup [--runs 10] [--out bench/results/startup.json]

Each run starts a fresh process on a fresh ``COFFER_HOME`` holding one knowledge base, writes the
two requests, and reads the replies off stdout; the clock starts just before the process is
spawned. Reports min / median / max in milliseconds and writes JSON beside the printed table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}},
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
TOOLS_LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}


def one_run(home: Path) -> tuple[float, float]:
    """Milliseconds from spawn to the initialize reply, and to the tools/list reply."""
    env = {**os.environ, "COFFER_HOME": str(home)}
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "coffer_mcp", "serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        proc.stdin.write((json.dumps(INITIALIZE) + "\n").encode())
        proc.stdin.flush()
        proc.stdout.readline()
        initialized = time.perf_counter()
        proc.stdin.write((json.dumps(INITIALIZED) + "\n" + json.dumps(TOOLS_LIST) + "\n").encode())
        proc.stdin.flush()
        reply = json.loads(proc.stdout.readline())
        listed = time.perf_counter()
        assert reply["result"]["tools"], reply
    finally:
        proc.kill()
        proc.wait()
    return (initialized - started) * 1000, (listed - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--out", type=Path, default=Path("bench/results/startup.json"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        from coffer_mcp import Coffer, load_settings

        with Coffer(load_settings(home=home)) as coffer:
            coffer.create_kb("notes")
            coffer.add_document("notes", "a.md", "# A\n\nwarm-up document")
        one_run(home)  # warm the OS file cache and .pyc files
        runs = [one_run(home) for _ in range(args.runs)]
    init, listed = [r[0] for r in runs], [r[1] for r in runs]
    summary = {
        "initialize_ms": _stats(init),
        "tools_list_ms": _stats(listed),
        "runs": args.runs,
        "command": " ".join(["python", "-m", "bench.startup", *sys.argv[1:]]),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count()},
    }
    print("| from process start to | min ms | median ms | max ms |\n|---|---|---|---|")
    for label, key in (("initialize reply", "initialize_ms"), ("tools/list reply", "tools_list_ms")):
        s = summary[key]
        print(f"| {label} | {s['min']:.0f} | {s['median']:.0f} | {s['max']:.0f} |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")


def _stats(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


if __name__ == "__main__":
    main()
