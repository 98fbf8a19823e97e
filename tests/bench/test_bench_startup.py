"""The start-up benchmark: one tiny run, every figure measured, before and after in the same rounds."""

from __future__ import annotations

import json
from pathlib import Path

from bench.startup import PHASES, ROOT, main

COMMANDS = [
    "coffer --version",
    "coffer --help",
    "coffer kb search scifact QUERY",
    "coffer serve to tools/list reply",
]
FLOORS = [
    "floor: python -c pass",
    "floor: from pydantic import BaseModel",
    "floor: import mcp.server.mcpserver (the MCP SDK)",
]


def test_one_run_times_every_command_beside_the_floors_and_the_baseline(tmp_path: Path) -> None:
    data = tmp_path / "beir"
    data.mkdir()
    corpus = [{"_id": "1", "title": "Tides", "text": "The moon pulls the sea."}, {"_id": "2", "text": "Untitled."}]
    (data / "corpus.jsonl").write_text("".join(json.dumps(row) + "\n" for row in corpus), encoding="utf-8")
    queries = [{"_id": "q1", "text": "moon"}, {"_id": "q2", "text": "sea"}]
    (data / "queries.jsonl").write_text("".join(json.dumps(row) + "\n" for row in queries), encoding="utf-8")
    out = tmp_path / "startup.json"
    argv = ["--runs", "1", "--data", str(data), "--home", str(tmp_path / "home"), "--out", str(out)]

    main([*argv, "--baseline", str(ROOT)])  # this checkout as its own baseline: the rows exist, side by side

    result = json.loads(out.read_text(encoding="utf-8"))
    assert result["documents"] == 2
    figures = result["figures_ms"]
    assert list(figures) == [*FLOORS, *COMMANDS, *(f"baseline: {c}" for c in COMMANDS)]
    assert all(f["wall"]["median"] > 0 and f["cpu"]["median"] > 0 for f in figures.values())
    serve = figures["coffer serve to tools/list reply"]
    assert 0 < serve["initialize"]["median"] <= serve["wall"]["median"]
    assert "importtime" not in result


def test_the_cpu_time_of_each_phase_of_a_search_is_measured_for_each_checkout(tmp_path: Path) -> None:
    data = tmp_path / "beir"
    data.mkdir()
    corpus = [{"_id": "1", "title": "Tides", "text": "The moon pulls the sea."}]
    (data / "corpus.jsonl").write_text("".join(json.dumps(row) + "\n" for row in corpus), encoding="utf-8")
    (data / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "moon"}) + "\n", encoding="utf-8")
    out = tmp_path / "startup.json"
    argv = ["--runs", "0", "--phases", "1", "--data", str(data), "--home", str(tmp_path / "home"), "--out", str(out)]

    main([*argv, "--baseline", str(ROOT)])

    result = json.loads(out.read_text(encoding="utf-8"))
    assert result["figures_ms"] == {}  # --runs 0: the phases alone
    phased = result["phases_cpu_ms"]
    assert list(phased) == ["coffer kb search scifact QUERY", "baseline: coffer kb search scifact QUERY"]
    for phases in phased.values():
        assert list(phases) == list(PHASES)
        assert all(phase["median"] >= 0 for phase in phases.values())
        assert phases["the command: open, check the files, search, print"]["median"] > 0
