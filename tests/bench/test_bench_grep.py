"""The grep benchmark: one tiny run reports every field, and the map and the scan agree on every grep."""

from __future__ import annotations

import json
from pathlib import Path

from bench.grep import KINDS, main
from coffer_mcp.retrieval.inotify import Inotify

LATENCY = {"n", "p50", "p95", "p99", "mean", "min", "max"}


def test_a_tiny_run_times_both_sides_and_they_find_the_same_lines(tmp_path: Path) -> None:
    out = tmp_path / "grep.json"
    main(["--mb", "0.2", "--queries", "4", "--workdir", str(tmp_path / "work"), "--out", str(out)])
    data = json.loads(out.read_text(encoding="utf-8"))
    assert {"command", "date", "machine", "options", "result", "coffer_source_sha256"} <= data.keys()
    result = data["result"]
    assert result["corpus"]["mb"] >= 0.2
    assert result["corpus"]["files"] > 50
    for kind in KINDS:
        assert result[kind]["results_differ"] == []
        for side in ("scan", "mapped"):
            assert set(result[kind][side]) == LATENCY
            assert result[kind][side]["n"] == 4
    assert result["mixed"]["mapped"]["n"] == 12
    feed = Inotify.open()
    if feed is not None:  # Linux: the folder was mapped before timing
        feed.close()
        assert result["map"]["ready"]
    again = main(["--mb", "0.2", "--queries", "4", "--workdir", str(tmp_path / "work"), "--out", str(out)])
    assert again["result"]["corpus"]["ingest_seconds"] is None  # the corpus is kept in --workdir
