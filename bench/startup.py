"""Start-up: how long the command line and the server take before they answer.

Usage (from the repo root)::

    python -m bench.startup [--runs 10] [--data ../shared/eval/scifact] [--home DIR]
                            [--baseline CHECKOUT] [--importtime] [--phases N]
                            [--out bench/results/startup.json]

Each figure is the median (with min and max) of ``--runs`` fresh processes, timed from just
before the process is spawned to its answer, beside the CPU time (user + system) the process
used, which a loaded machine inflates far less than the wall-clock time:

- ``coffer --version`` and ``coffer --help`` (``python -m coffer_mcp``, as the ``coffer`` script
  runs it);
- ``coffer kb search scifact QUERY``, one SciFact query per run (keyword, the default), over a
  knowledge base of the 5,183 SciFact abstracts built once in ``--home`` (kept there when given,
  so a later run reuses it);
- ``coffer serve`` on stdio to its ``initialize`` and ``tools/list`` replies;
- beside ours, the floors: an empty ``python -c pass``, ``from pydantic import BaseModel``, and
  the MCP SDK's own import (``mcp.server.mcpserver``), which any server built on it pays.

Every process runs without ``PYTHONDONTWRITEBYTECODE`` (an installed package starts from its
``.pyc`` files; compiling the sources again on each start roughly doubled the figures of our own
modules). Each round runs every figure once, so that the machine's load, which changes from one
second to the next, falls on every figure alike. ``--baseline`` names a checkout of another commit (a
``git worktree``) whose commands are measured in the same rounds, from that folder (its
``coffer_mcp`` is imported before the installed one): a before and after under the same load.

``--importtime`` adds, for each command, the modules with the largest cumulative import time
(``python -X importtime``, one run: it slows the process, so it is not part of the timings).

``--phases N`` adds where one ``coffer kb search`` spends its CPU time: N fresh processes (of each
checkout, in turn, after one unrecorded round) run the command through ``cli.main`` with
``time.process_time`` read between its phases (``PHASES``). pydantic and PyYAML are loaded
before the settings there, so that the settings' own cost is not confused with that of the
libraries every later step needs too. With ``--runs 0`` only the phases are measured.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

KB = "scifact"
ROOT = Path(__file__).resolve().parents[1]
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}},
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
TOOLS_LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
# The phases of one ``coffer kb search``, in the order the command pays them (``--phases``).
PHASES = (
    "interpreter start-up",
    "the command line (coffer_mcp.cli)",
    "pydantic: its import and a first model",
    "PyYAML: its import",
    "settings: their modules and the Settings model",
    "load_settings: environment, config.yaml, validation",
    "services: their import (the facade, index, store)",
    "the command: open, check the files, search, print",
)
# Run as ``python -c`` from a checkout, with the command's words as arguments: prints the CPU
# seconds at its start (the interpreter's start-up) and those of each phase after it.
PHASE_SCRIPT = """
import contextlib, io, json, os, sys, time
marks = [time.process_time()]
from coffer_mcp.cli import main
marks.append(time.process_time())
from pydantic import BaseModel
class First(BaseModel):
    x: int = 0
First(x=1)
marks.append(time.process_time())
import yaml
marks.append(time.process_time())
import coffer_mcp.settings
marks.append(time.process_time())
coffer_mcp.settings.load_settings(os.environ)
marks.append(time.process_time())
import coffer_mcp.services
marks.append(time.process_time())
with contextlib.redirect_stdout(io.StringIO()):
    status = main(sys.argv[1:])
marks.append(time.process_time())
assert status == 0, status
print(json.dumps([marks[0], *(after - before for before, after in zip(marks, marks[1:]))]))
"""
FLOORS = {
    "python -c pass": "pass",
    "from pydantic import BaseModel": "from pydantic import BaseModel",
    "import mcp.server.mcpserver (the MCP SDK)": "import mcp.server.mcpserver",
}


def coffer_command() -> list[str]:
    """``coffer``: the package's ``__main__`` run by this interpreter (what the installed script
    runs), from the checkout the process starts in."""
    return [sys.executable, "-m", "coffer_mcp"]


def timed(argv: Sequence[str], env: dict[str, str], cwd: Path | None = None) -> dict[str, float]:
    """Milliseconds from spawning ``argv`` to its exit (it must succeed), and the CPU time it used."""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = (time.perf_counter() - started) * 1000
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0, (argv, proc.returncode)
    return {"wall": wall, "cpu": (usage.ru_utime + usage.ru_stime) * 1000}


def serve_once(env: dict[str, str], cwd: Path | None = None) -> dict[str, float]:
    """Milliseconds from spawning ``coffer serve`` to its tools/list reply (``wall``) and to its
    initialize reply, and the CPU time it had used when killed just after the tools/list reply."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        [*coffer_command(), "serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=cwd,
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
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
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        proc.stdin.close()
        proc.stdout.close()
    return {
        "wall": (listed - started) * 1000,
        "initialize": (initialized - started) * 1000,
        "cpu": (usage.ru_utime + usage.ru_stime) * 1000,
    }


def one_run(home: Path) -> tuple[float, float]:
    """Milliseconds from spawning ``coffer serve`` on ``home`` to its initialize and tools/list replies."""
    times = serve_once({**os.environ, "COFFER_HOME": str(home)})
    return times["initialize"], times["wall"]


def build_home(home: Path, data: Path) -> int:
    """A knowledge base ``scifact`` of the BEIR corpus in ``data`` (unless ``home`` has it already),
    each document as ``bench.quality`` ingests it (its title a heading above its text); its document count."""
    from coffer_mcp import Coffer, load_settings

    with Coffer(load_settings({}, home=home)) as coffer:
        if KB not in {kb.name for kb in coffer.list_kbs()}:
            coffer.create_kb(KB)
            with (data / "corpus.jsonl").open(encoding="utf-8") as lines:
                for row in map(json.loads, filter(str.strip, lines)):
                    title, text = row.get("title") or "", row.get("text") or ""
                    coffer.add_document(KB, f"{row['_id']}.md", f"# {title}\n\n{text}" if title.strip() else text)
        return next(kb.document_count for kb in coffer.list_kbs() if kb.name == KB)


def queries(data: Path, n: int) -> list[str]:
    """The first ``n`` SciFact queries."""
    with (data / "queries.jsonl").open(encoding="utf-8") as lines:
        return [json.loads(line)["text"] for line, _ in zip(lines, range(n), strict=False)]


def importtime(words: Sequence[str], env: dict[str, str], stdin: str = "", top: int = 12) -> list[dict[str, object]]:
    """The ``top`` modules by cumulative import time (ms) of one ``python -X importtime -m coffer_mcp WORDS``."""
    command = [sys.executable, "-X", "importtime", "-m", "coffer_mcp", *words]
    proc = subprocess.run(
        command, check=False, env=env, cwd=ROOT, input=stdin, capture_output=True, text=True, timeout=120
    )
    rows: list[dict[str, object]] = []
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "cumulative" not in line:
            _, cumulative, name = line.removeprefix("import time:").split("|")
            rows.append({"module": name.strip(), "cumulative_ms": int(cumulative) / 1000})
    return sorted(rows, key=lambda row: -float(str(row["cumulative_ms"])))[:top]


@contextmanager
def bench_home(given: Path | None) -> Iterator[Path]:
    if given is not None:
        given.mkdir(parents=True, exist_ok=True)
        yield given
        return
    with tempfile.TemporaryDirectory(prefix="coffer-startup-") as tmp:
        yield Path(tmp)


def phases(
    runs: int, env: dict[str, str], checkouts: dict[str, Path], words: list[str]
) -> dict[str, dict[str, dict[str, float]]]:
    """Each phase's CPU ms (min, median, max) of one ``coffer kb search`` per checkout, over ``runs``
    fresh processes of each, taking turns (run ``i`` searches for ``words[i]``)."""
    samples: dict[str, list[list[float]]] = {prefix: [] for prefix in checkouts}
    for i in range(-1, runs):  # a first round writes the .pyc files, unrecorded
        for prefix, cwd in checkouts.items():
            argv = [sys.executable, "-c", PHASE_SCRIPT, "kb", "search", KB, words[i % len(words)]]
            proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, check=True, timeout=120)
            if i >= 0:
                samples[prefix].append(json.loads(proc.stdout.splitlines()[-1]))
    return {
        f"{prefix}coffer kb search {KB} QUERY": {
            name: _stats([run[i] * 1000 for run in runs_]) for i, name in enumerate(PHASES)
        }
        for prefix, runs_ in samples.items()
    }


def measure(runs: int, probes: dict[str, Callable[[int], dict[str, float]]]) -> dict[str, dict[str, dict[str, float]]]:
    """Each probe's figures over ``runs`` rounds, each round running every probe once (so that a
    change of the machine's load falls on all of them alike), after a round that warms the OS
    file cache and the ``.pyc`` files."""
    samples: dict[str, list[dict[str, float]]] = {label: [] for label in probes}
    for i in range(-1, runs):
        for label, probe in probes.items():
            figures = probe(i)
            if i >= 0:
                samples[label].append(figures)
    return {label: {key: _stats([s[key] for s in runs_]) for key in runs_[0]} for label, runs_ in samples.items()}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--data", type=Path, default=Path("../shared/eval/scifact"))
    parser.add_argument("--home", type=Path, help="keep the SciFact knowledge base here (default: a temporary one)")
    parser.add_argument("--baseline", type=Path, help="a checkout of another commit, measured in the same rounds")
    parser.add_argument("--importtime", action="store_true", help="add each command's slowest imports")
    parser.add_argument("--phases", type=int, default=0, help="add the CPU time of each phase of N searches")
    parser.add_argument("--out", type=Path, default=Path("bench/results/startup.json"))
    args = parser.parse_args(argv)
    with bench_home(args.home) as home:
        documents = build_home(home, args.data)
        env = {**os.environ, "COFFER_HOME": str(home)}
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed Coffer starts from its .pyc files
        words = queries(args.data, max(args.runs, args.phases) + 1)
        probes: dict[str, Callable[[int], dict[str, float]]] = {
            f"floor: {label}": functools.partial(_floor, code, env) for label, code in FLOORS.items()
        }
        checkouts = {"": ROOT, **({"baseline: ": args.baseline.resolve()} if args.baseline else {})}
        for prefix, cwd in checkouts.items():
            probes.update({f"{prefix}{label}": probe for label, probe in _commands(env, cwd, words).items()})
        load_before = os.getloadavg()
        figures = measure(args.runs, probes) if args.runs else {}
        phased = phases(args.phases, env, checkouts, words) if args.phases else None
        profile = _profiles(env, words[0]) if args.importtime else None
    summary = {
        "figures_ms": figures,
        "runs": args.runs,
        "documents": documents,
        "coffer": " ".join(coffer_command()),
        "baseline": str(args.baseline) if args.baseline else None,
        "command": " ".join(["python", "-m", "bench.startup", *(sys.argv[1:] if argv is None else argv)]),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "load_average": {"before": load_before, "after": os.getloadavg()},
        "machine": {"platform": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count()},
        **({"phases_cpu_ms": phased} if phased else {}),
        **({"importtime": profile} if profile else {}),
    }
    _print_figures(figures)
    if phased:
        _print_phases(phased)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")


def _print_figures(figures: dict[str, dict[str, dict[str, float]]]) -> None:
    if not figures:
        return
    print("| from process start to its answer | min ms | median ms | max ms | median CPU ms |")
    print("|---|---:|---:|---:|---:|")
    for label, f in figures.items():
        wall = f["wall"]
        print(f"| {label} | {wall['min']:.0f} | {wall['median']:.0f} | {wall['max']:.0f} | {f['cpu']['median']:.0f} |")
        if "initialize" in f:
            init = f["initialize"]
            print(f"| (its initialize reply) | {init['min']:.0f} | {init['median']:.0f} | {init['max']:.0f} | |")


def _print_phases(phased: dict[str, dict[str, dict[str, float]]]) -> None:
    labels = list(phased)
    print(f"\n| phase (CPU ms, median; min–max) | {' | '.join(labels)} |")
    print(f"|---|{'---:|' * len(labels)}")
    for name in PHASES:
        cells = [
            f"{phased[label][name]['median']:.1f} ({phased[label][name]['min']:.1f}–{phased[label][name]['max']:.1f})"
            for label in labels
        ]
        print(f"| {name} | {' | '.join(cells)} |")


def _commands(env: dict[str, str], cwd: Path, words: list[str]) -> dict[str, Callable[[int], dict[str, float]]]:
    """The commands timed, run from checkout ``cwd``; run ``i`` searches for ``words[i + 1]``."""
    coffer = coffer_command()
    return {
        "coffer --version": lambda _: timed([*coffer, "--version"], env, cwd),
        "coffer --help": lambda _: timed([*coffer, "--help"], env, cwd),
        f"coffer kb search {KB} QUERY": lambda i: timed([*coffer, "kb", "search", KB, words[i + 1]], env, cwd),
        "coffer serve to tools/list reply": lambda _: serve_once(env, cwd),
    }


def _profiles(env: dict[str, str], query: str) -> dict[str, list[dict[str, object]]]:
    serve_input = "\n".join(json.dumps(m) for m in (INITIALIZE, INITIALIZED, TOOLS_LIST)) + "\n"
    return {
        "coffer --version": importtime(["--version"], env),
        "coffer --help": importtime(["--help"], env),
        "coffer kb search": importtime(["kb", "search", KB, query], env),
        "coffer serve": importtime(["serve"], env, stdin=serve_input),
    }


def _floor(code: str, env: dict[str, str], _: int) -> dict[str, float]:
    return timed([sys.executable, "-c", code], env)


def _stats(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


if __name__ == "__main__":
    main()
