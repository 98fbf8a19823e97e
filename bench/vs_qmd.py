"""Coffer's folder ingest over MCP against qmd's ``collection add``, on the same files, alternating.

Run from the repository root::

    python -m bench.vs_qmd [--data ../shared/eval/scifact] [--qmd DIR] [--runs 3] [--baseline CHECKOUT]
                           [--out bench/results/vs-qmd.json]

Writes every document of a BEIR corpus as ``<_id>.md`` (``# title`` then the text, as
``bench.quality`` adds them) into one folder, then, ``--runs`` times with the order switched every
round, (a) starts ``coffer serve`` over a fresh home through the MCP SDK's stdio client, creates a
knowledge base and calls ``coffer__ingest_path`` on the folder, timing that call from the client;
(b) runs qmd's ``qmd collection add FOLDER --name NAME`` with a fresh ``HOME`` and XDG folders,
timing the process. With ``--baseline``, a checkout of another Coffer (an older commit, in a
worktree) runs as a third system in the same rounds, its server started from that checkout: a
before/after under the same load. Each system goes first in turn. The 1-minute load average is
taken before and after each round: the machine is shared.

qmd is not a dependency: install it outside the repository (Node 22; its models are not needed
for ``collection add``) and pass that folder as ``--qmd``::

    mkdir -p ~/.cache/coffer-bench/qmd && cd ~/.cache/coffer-bench/qmd && npm init -y && npm install node@22
    PATH=$PWD/node_modules/node/bin:$PATH npm_config_build_from_source=true \\
        NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm install @tobilu/qmd@2.8.3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.types import Implementation

import coffer_mcp
from bench._measure import log, machine_info, source_fingerprint, write_report

__all__ = ["main"]

KB = "scifact"
TIMEOUT_SECONDS = 900
DEFAULT_QMD = Path("~/.cache/coffer-bench/qmd").expanduser()


def write_corpus(corpus_jsonl: Path, folder: Path) -> int:
    """Every document of ``corpus_jsonl`` as ``<_id>.md`` in ``folder``; how many."""
    folder.mkdir(parents=True)
    count = 0
    with corpus_jsonl.open(encoding="utf-8") as lines:
        for line in lines:
            doc = json.loads(line)
            title, text = doc.get("title", "").strip(), doc["text"]
            body = f"# {title}\n\n{text}\n" if title else f"{text}\n"
            (folder / f"{doc['_id']}.md").write_text(body, encoding="utf-8")
            count += 1
    return count


def coffer_run(folder: Path, home: Path, source: Path | None = None) -> dict[str, Any]:
    """``coffer__ingest_path`` on ``folder`` through a new ``coffer serve`` over stdio, timed by the client;
    ``source``: the checkout whose Coffer serves (None: the one installed)."""
    return anyio.run(_coffer_run, folder, home, source)


async def _coffer_run(folder: Path, home: Path, source: Path | None) -> dict[str, Any]:
    env = {
        **os.environ,
        "COFFER_HOME": str(home),
        "COFFER_ALLOWED_DIRS": str(folder),
        "COFFER_EMBEDDING_PROVIDER": "none",
        **({"PYTHONPATH": str(source)} if source is not None else {}),
    }
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "coffer_mcp", "serve"], env=env, cwd=source or Path.cwd()
    )
    with anyio.fail_after(TIMEOUT_SECONDS):
        session_started = time.perf_counter()
        async with Client(params, client_info=Implementation(name="bench-vs-qmd", version="1")) as client:
            created = await client.call_tool("coffer__create_knowledge_base", {"name": KB})
            if created.is_error:
                raise RuntimeError(f"create_knowledge_base failed: {created.content}")
            started = time.perf_counter()
            result = await client.call_tool("coffer__ingest_path", {"kb": KB, "path": str(folder)})
            seconds = time.perf_counter() - started
            if result.is_error:
                raise RuntimeError(f"ingest_path failed: {result.content}")
        session = time.perf_counter() - session_started
    return {"seconds": seconds, "session_seconds": session, "created": result.structured_content["created"]}


def qmd_run(folder: Path, qmd: Path, home: Path) -> dict[str, Any]:
    """``qmd collection add`` on ``folder`` with its own ``HOME`` and XDG folders, timed as a process."""
    env = {
        **os.environ,
        "HOME": str(home),
        "XDG_CACHE_HOME": str(home / "cache"),
        "XDG_CONFIG_HOME": str(home / "config"),
        "PATH": f"{qmd / 'node_modules' / 'node' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    command = [str(qmd / "node_modules" / ".bin" / "qmd"), "collection", "add", str(folder), "--name", KB]
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=TIMEOUT_SECONDS, check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"qmd failed ({done.returncode}): {done.stderr[-2000:]}")
    indexed = next((line.strip() for line in done.stdout.splitlines() if line.strip().startswith("Indexed:")), "")
    return {"seconds": seconds, "indexed": indexed}


def qmd_version(qmd: Path) -> str:
    package = qmd / "node_modules" / "@tobilu" / "qmd" / "package.json"
    return str(json.loads(package.read_text(encoding="utf-8"))["version"])


def to_markdown(data: dict[str, Any]) -> str:
    systems = data["systems"]
    lines = [
        "| round | order | " + " | ".join(f"{name}, s" for name in systems) + " | load average |",
        "|---:|---|" + "---:|" * len(systems) + "---:|",
    ]
    lines += [
        f"| {row['round']} | {', '.join(row['order'])} | "
        + " | ".join(f"{row[name]['seconds']:.1f}" for name in systems)
        + f" | {row['load_before']:.1f} → {row['load_after']:.1f} |"
        for row in data["rounds"]
    ]
    medians = ", ".join(f"{name} {data['summary'][name]['median_s']:.1f} s" for name in systems)
    ratios = ", ".join(f"{name} / qmd {data['summary'][name]['ratio_to_qmd']:.2f}" for name in systems if name != "qmd")
    lines.append(f"\nMedians over {len(data['rounds'])} rounds: {medians} ({ratios}); {data['documents']:,} files.")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.vs_qmd", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path("../shared/eval/scifact"))
    parser.add_argument("--qmd", type=Path, default=DEFAULT_QMD, help="the folder qmd was npm-installed in")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--baseline", type=Path, default=None, help="a checkout of another Coffer to run too (coffer-baseline)"
    )
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=Path("bench/results/vs-qmd.json"))
    args = parser.parse_args(argv)
    command = " ".join(["python -m bench.vs_qmd", *(sys.argv[1:] if argv is None else argv)])
    data: dict[str, Any] = {
        "command": command,
        "date": datetime.now(timezone.utc).replace(microsecond=0).isoformat(),
        "coffer_version": coffer_mcp.__version__,
        "coffer_source_sha256": source_fingerprint(),
        "qmd_version": qmd_version(args.qmd),
        "machine": machine_info(None),
        "rounds": [],
    }
    with tempfile.TemporaryDirectory(prefix="coffer-vs-qmd-", dir=args.workdir) as tmp:
        root = Path(tmp)
        folder = root / "corpus"
        data["documents"] = write_corpus(args.data / "corpus.jsonl", folder)
        systems = ["coffer", "qmd"] + (["coffer-baseline"] if args.baseline else [])
        data["systems"] = systems
        for round_ in range(1, args.runs + 1):
            shift = (round_ - 1) % len(systems)
            order = systems[shift:] + systems[:shift]  # each system first in turn
            row: dict[str, Any] = {"round": round_, "order": order, "load_before": os.getloadavg()[0]}
            for system in order:
                home = root / f"{system}-{round_}"
                if system == "qmd":
                    row[system] = qmd_run(folder, args.qmd, home)
                else:
                    row[system] = coffer_run(folder, home, args.baseline if system == "coffer-baseline" else None)
                log(f"round {round_}: {system} {row[system]['seconds']:.1f} s (load {os.getloadavg()[0]:.1f})")
            row["load_after"] = os.getloadavg()[0]
            data["rounds"].append(row)
    data["summary"] = {}
    qmd_median = statistics.median(row["qmd"]["seconds"] for row in data["rounds"])
    for name in data["systems"]:
        median = statistics.median(row[name]["seconds"] for row in data["rounds"])
        data["summary"][name] = {"median_s": median, "ratio_to_qmd": median / qmd_median}
    write_report(args.out, data, to_markdown(data))
    return data


if __name__ == "__main__":
    main()
