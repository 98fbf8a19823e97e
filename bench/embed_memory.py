"""Memory of N stdio servers searching a vector knowledge base: one model per process vs one shared service.

Usage (from the repo root; Linux, reads /proc)::

    python -m bench.embed_memory [--servers 4] [--model-path ../shared/models/all-MiniLM-L6-v2-int8]
                                 [--out bench/results/embed_memory.json]

One small vector knowledge base (40 short documents, embedded with MiniLM int8 once, in this
process). Then, for each configuration and for 1 and N servers: N ``coffer serve`` stdio
processes are started, each answers ``initialize`` and ``tools/list`` (one server's RSS there is
the idle figure), then all N get one ``coffer__search_knowledge`` call at the same moment, and
once all have answered the RSS of every server and of every model service process is summed.

Configurations: ``keyword only`` (embedding provider none: what a server costs without a
model), ``in-process`` (``embedding.service: off``, each server loads its own model) and
``shared service`` (``embedding.service: auto``: one model service for all). The model's memory
is a configuration's total minus the keyword-only total for the same number of servers, as in
issue 16; its target: N=4 at most 1.5 times N=1. RSS counts pages shared between processes once
per process (as the issue measured); PSS, shown beside it, splits them between the processes.

The servers' run folder is a fresh ``XDG_RUNTIME_DIR``, so each shared-service run starts its own
service from nothing; the services it started are stopped at the end of each run.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench._measure import proc_memory
from bench._serve import SEARCH_TOOL, _reply, _send
from bench._vectors import MINILM
from bench.startup import INITIALIZE, INITIALIZED, TOOLS_LIST
from coffer_mcp import Coffer, load_settings

REPO = Path(__file__).resolve().parents[1]
DEFAULT_MODEL = REPO.parent / "shared" / "models" / "all-MiniLM-L6-v2-int8"
KB = "notes"
QUERY = "how do plants turn sunlight into energy"
SERVICE_MODULE = "coffer_mcp.embed._service"
CONFIGS = {
    "keyword only": {"COFFER_EMBEDDING_PROVIDER": "none"},
    "in-process": {"service": "off"},
    "shared service": {"service": "auto"},
}
TOPICS = [
    "Photosynthesis turns sunlight, water and carbon dioxide into sugar and oxygen in the leaves.",
    "A sourdough starter is a culture of wild yeast and lactic acid bacteria kept alive with flour.",
    "Rust's borrow checker rejects programs in which a reference could outlive the value it points to.",
    "The Treaty of Westphalia in 1648 ended the Thirty Years' War and shaped the idea of sovereignty.",
    "Plate tectonics explains earthquakes, volcanoes and mountain ranges by the motion of crustal plates.",
    "An index fund holds every stock of a market index, so its fees stay low and its returns average.",
    "Bees communicate the direction and distance of flowers to their hive mates with a waggle dance.",
    "SQLite keeps a whole database in one file and runs inside the process that uses it.",
]


def build_home(root: Path, model_path: Path) -> Path:
    """A Coffer home with one vector knowledge base, every document embedded with MiniLM."""
    home = root / "home"
    env = {"COFFER_EMBEDDING_MODEL": MINILM, "COFFER_EMBEDDING_MODEL_PATH": str(model_path)}
    with Coffer(load_settings(env, home=home, embedding_service="off")) as coffer:
        coffer.create_kb(KB, "benchmark notes", vector=True)
        for i in range(40):
            text = f"# Note {i}\n\n{TOPICS[i % len(TOPICS)]} Note {i} adds detail number {i * 7 % 13}."
            coffer.add_document(KB, f"note-{i:02d}.md", text)
        assert coffer.search(KB, QUERY).strategy == "hybrid"
    return home


def server_env(home: Path, model_path: Path, runtime: Path, config: dict[str, str]) -> dict[str, str]:
    (home / "config.yaml").write_text(
        f"embedding:\n  service: {config.get('service', 'off')}\n", encoding="utf-8"
    )  # the service setting has no environment variable: config.yaml it is
    env = {**os.environ, "COFFER_HOME": str(home), "XDG_RUNTIME_DIR": str(runtime)}
    env |= {"COFFER_EMBEDDING_MODEL": MINILM, "COFFER_EMBEDDING_MODEL_PATH": str(model_path)}
    return env | {k: v for k, v in config.items() if k.startswith("COFFER_")}


@contextmanager
def servers(count: int, env: dict[str, str]) -> Iterator[list[subprocess.Popen[bytes]]]:
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "coffer_mcp", "serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        for _ in range(count)
    ]
    try:
        yield procs
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
            for pipe in (proc.stdin, proc.stdout):
                if pipe is not None:
                    pipe.close()


def one_run(count: int, env: dict[str, str], runtime: Path) -> dict[str, Any]:
    """Start ``count`` servers, search with all at once, and measure; the services are stopped after."""
    with servers(count, env) as procs:
        for proc in procs:
            _send(proc, INITIALIZE)
        for proc in procs:
            _reply(proc, INITIALIZE["id"])
            _send(proc, INITIALIZED, TOOLS_LIST)
        for proc in procs:
            _reply(proc, TOOLS_LIST["id"])
        idle = proc_memory(procs[0].pid)
        call = {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": SEARCH_TOOL, "arguments": {"kb": KB, "query": QUERY, "top_k": 5}},
        }
        started = time.perf_counter()
        for proc in procs:
            _send(proc, call)
        strategies = {(_reply(proc, 3)["result"].get("structuredContent") or {}).get("strategy") for proc in procs}
        seconds = time.perf_counter() - started
        services = service_pids(runtime)
        figures = {
            "servers": count,
            "strategies": sorted(map(str, strategies)),
            "search_seconds": seconds,
            "idle_rss_mb": idle["rss_mb"] if idle else None,
            "server_rss_mb": sum(rss(p.pid) for p in procs),
            "server_pss_mb": sum(pss(p.pid) for p in procs),
            "service_processes": len(services),
            "service_rss_mb": sum(rss(pid) for pid in services),
            "service_pss_mb": sum(pss(pid) for pid in services),
        }
    stop(services)
    figures["total_rss_mb"] = figures["server_rss_mb"] + figures["service_rss_mb"]
    figures["total_pss_mb"] = figures["server_pss_mb"] + figures["service_pss_mb"]
    return figures


def rss(pid: int) -> float:
    memory = proc_memory(pid)
    return memory["rss_mb"] if memory else 0.0


def pss(pid: int) -> float:
    """Proportional set size in MB: shared pages divided among the processes sharing them."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text(encoding="utf-8")
    except OSError:
        return 0.0
    line = next((line for line in text.splitlines() if line.startswith("Pss:")), None)
    return int(line.split()[1]) / 1024 if line else 0.0


def service_pids(runtime: Path) -> list[int]:
    """The model service processes whose run folder is in ``runtime``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().decode("utf-8", "replace")
            except OSError:
                continue
            if SERVICE_MODULE in cmdline and str(runtime) in cmdline:
                pids.append(int(entry.name))
    return pids


def stop(pids: Sequence[int]) -> None:
    """SIGTERM the services (this benchmark started them) and wait until they are gone."""
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue
        try:
            os.kill(pid, signal.SIGTERM)
            select.select([fd], [], [], 60)
        finally:
            os.close(fd)


def measure(model_path: Path, counts: Sequence[int], workdir: Path | None) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="coffer-embed-memory-", dir=workdir))
    runtime = Path(tempfile.mkdtemp(prefix="cf-run-", dir="/tmp"))  # short: socket paths are limited
    try:
        print("building the knowledge base", file=sys.stderr)
        home = build_home(root, model_path)
        runs = []
        for name, config in CONFIGS.items():
            for count in counts:
                print(f"{name}: {count} server(s)", file=sys.stderr)
                runs.append({"config": name, **one_run(count, server_env(home, model_path, runtime, config), runtime)})
        return {"model": MINILM, "model_path": str(model_path), "query": QUERY, "runs": runs}
    finally:
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(runtime, ignore_errors=True)


def model_memory(report: dict[str, Any], config: str, count: int, key: str = "total_rss_mb") -> float:
    by = {(r["config"], r["servers"]): r for r in report["runs"]}
    return by[(config, count)][key] - by[("keyword only", count)][key]


def table(report: dict[str, Any]) -> str:
    columns = ["configuration", "servers", "strategy", "servers RSS", "service RSS", "total RSS", "total PSS"]
    rows = [f"| {' | '.join(columns)} | model memory (RSS) |", "|---" * (len(columns) + 1) + "|"]
    for r in report["runs"]:
        model = "—" if r["config"] == "keyword only" else f"{model_memory(report, r['config'], r['servers']):.0f} MB"
        service = f"{r['service_rss_mb']:.0f} MB ({r['service_processes']})" if r["service_processes"] else "—"
        rows.append(
            f"| {r['config']} | {r['servers']} | {', '.join(r['strategies'])} | {r['server_rss_mb']:.0f} MB | "
            f"{service} | {r['total_rss_mb']:.0f} MB | {r['total_pss_mb']:.0f} MB | {model} |"
        )
    counts = sorted({r["servers"] for r in report["runs"]})
    low, high = counts[0], counts[-1]
    lines = ["", f"Model memory, {high} servers against {low} (target at most 1.5x):"]
    for config in ("in-process", "shared service"):
        ratio = model_memory(report, config, high) / model_memory(report, config, low)
        pss_ratio = model_memory(report, config, high, "total_pss_mb") / model_memory(
            report, config, low, "total_pss_mb"
        )
        lines.append(f"- {config}: {ratio:.2f}x by RSS, {pss_ratio:.2f}x by PSS")
    shared_vs_one = model_memory(report, "shared service", high) / model_memory(report, "in-process", low)
    lines.append(f"- shared service, {high} servers, against one in-process server: {shared_vs_one:.2f}x by RSS")
    idle = [r["idle_rss_mb"] for r in report["runs"] if r["idle_rss_mb"] is not None]
    lines.append(f"- one server's idle RSS (after tools/list): {min(idle):.0f}–{max(idle):.0f} MB (target ≤ 120 MB)")
    return "\n".join(rows + lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.embed_memory", description=__doc__.split("\n\n")[0])
    parser.add_argument("--servers", type=int, default=4, help="how many servers at once (compared with 1)")
    parser.add_argument("--model-path", type=Path, default=DEFAULT_MODEL, help="the local MiniLM model folder")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON report here")
    parser.add_argument("--workdir", type=Path, default=None, help="where the temporary home goes")
    args = parser.parse_args(argv)
    if not Path("/proc/self/smaps_rollup").exists():
        parser.error("needs Linux (/proc/<pid>/status and smaps_rollup)")
    if not (args.model_path / "model.onnx").exists():
        parser.error(f"no model at {args.model_path}")
    report = measure(args.model_path, sorted({1, args.servers}), args.workdir)
    if args.out:
        args.out.write_text(json.dumps(report, indent=1), encoding="utf-8")
    print(table(report))
    return report


if __name__ == "__main__":
    main()
