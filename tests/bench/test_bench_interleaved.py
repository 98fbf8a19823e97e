"""The interleaved benchmark: a tiny run times every operation on both backends, hybrid both ways."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.interleaved import main

OPERATIONS = {
    "keyword",
    "keyword_without_refresh",
    "keyword_content_words",
    "keyword_depth_100",
    "hybrid",
    "hybrid_in_turn",
    "vector",
    "knn_depth_100",
    "keyword_again",
}


def test_a_tiny_run_times_each_operation_on_both_backends(tmp_path: Path, postgres_server: Any) -> None:
    out = tmp_path / "interleaved.json"
    argv = ["--chunks", "80", "--queries", "4", "--warmup", "1", "--fake-embedder", "--workdir", str(tmp_path)]

    main([*argv, "--postgres-url", postgres_server.get_uri(), "--out", str(out)])

    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["chunks"] >= 80
    assert set(data["latency_ms"]) == OPERATIONS
    for stats in data["latency_ms"].values():
        assert (stats["sqlite"]["n"], stats["postgres"]["n"]) == (4, 4)
    assert set(data["began_s"]) == OPERATIONS - {"hybrid_in_turn"}  # timed together with hybrid
