"""Measurements of a real ``coffer serve`` process: MCP stdio latency, memory, start-up."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.types import Implementation

from bench._measure import proc_memory, summarize
from bench.startup import INITIALIZE, INITIALIZED, TOOLS_LIST, one_run

__all__ = ["mcp_search_latency", "serve_memory", "startup_times"]

SEARCH_TOOL = "coffer__search_knowledge"
TIMEOUT_SECONDS = 600


def serve_env(home: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    return {**os.environ, "COFFER_HOME": str(home), **(extra or {})}


def mcp_search_latency(home: Path, kb: str, queries: Sequence[str], *, warmup: int) -> dict[str, Any]:
    """Client-side timings of ``coffer__search_knowledge`` (top_k=5) through the SDK's stdio client."""
    return anyio.run(_mcp_search_latency, home, kb, list(queries), warmup)


async def _mcp_search_latency(home: Path, kb: str, queries: list[str], warmup: int) -> dict[str, Any]:
    params = StdioServerParameters(command=sys.executable, args=["-m", "coffer_mcp", "serve"], env=serve_env(home))
    timings: list[float] = []
    strategies: set[str] = set()
    with anyio.fail_after(TIMEOUT_SECONDS):
        async with Client(params, client_info=Implementation(name="bench-scale", version="1")) as client:
            for i, query in enumerate(queries):
                started = time.perf_counter()
                result = await client.call_tool(SEARCH_TOOL, {"kb": kb, "query": query, "top_k": 5})
                elapsed = (time.perf_counter() - started) * 1000
                if result.is_error:
                    raise RuntimeError(f"{SEARCH_TOOL} failed for {query!r}: {result.content}")
                strategies.add(result.structured_content["strategy"])
                if i >= warmup:
                    timings.append(elapsed)
    return {"search": summarize(timings), "strategies": sorted(strategies)}


def serve_memory(home: Path, env: Mapping[str, str], *, search: tuple[str, str] | None) -> dict[str, Any]:
    """RSS of ``coffer serve`` after ``initialize`` + ``tools/list``, then after one search.

    ``search`` is ``(kb, query)``; the search runs with the server's own strategy choice (hybrid
    on a vector KB with an embedder configured), which loads the embedder.
    """
    with subprocess.Popen(
        [sys.executable, "-m", "coffer_mcp", "serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=serve_env(home, env),
    ) as proc:
        try:
            return _measure_memory(proc, search)
        finally:
            proc.kill()


def _measure_memory(proc: subprocess.Popen[bytes], search: tuple[str, str] | None) -> dict[str, Any]:
    _send(proc, INITIALIZE)
    _reply(proc, INITIALIZE["id"])
    _send(proc, INITIALIZED, TOOLS_LIST)
    _reply(proc, TOOLS_LIST["id"])
    out: dict[str, Any] = {"idle": proc_memory(proc.pid)}
    if search is not None:
        kb, query = search
        call = {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": SEARCH_TOOL, "arguments": {"kb": kb, "query": query, "top_k": 5}},
        }
        _send(proc, call)
        result = _reply(proc, 3)["result"]
        out["after_search"] = proc_memory(proc.pid)
        out["search_strategy"] = (result.get("structuredContent") or {}).get("strategy")
    return out


def _send(proc: subprocess.Popen[bytes], *messages: dict[str, Any]) -> None:
    assert proc.stdin is not None
    proc.stdin.write("".join(json.dumps(m) + "\n" for m in messages).encode())
    proc.stdin.flush()


def _reply(proc: subprocess.Popen[bytes], message_id: int) -> dict[str, Any]:
    """The response to ``message_id`` (notifications in between are skipped)."""
    assert proc.stdout is not None
    while line := proc.stdout.readline():
        message = json.loads(line)
        if message.get("id") == message_id:
            if "error" in message:
                raise RuntimeError(f"coffer serve answered with an error: {message['error']}")
            return message
    raise RuntimeError(f"coffer serve exited before answering request {message_id}")


def startup_times(home: Path, runs: int) -> dict[str, Any]:
    """``bench.startup.one_run`` on this home: one warm-up, then ``runs`` timed runs."""
    _quiet_run(home)
    timed = [_quiet_run(home) for _ in range(runs)]
    return {
        "runs": runs,
        "initialize_ms": summarize([t[0] for t in timed]),
        "tools_list_ms": summarize([t[1] for t in timed]),
    }


def _quiet_run(home: Path) -> tuple[float, float]:
    """``one_run`` leaves its pipes to the garbage collector: silence the ResourceWarning that raises."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        times = one_run(home)
        gc.collect()
    return times
