"""The scale benchmark over several index backends: each backend's tables, then side by side.

``bench.scale --backend sqlite,postgres`` tags every size with its backend; this module prints
each backend's usual tables (``_report``), then one table per corpus size with the backends in
columns, and the PostgreSQL targets of issue #14 with their verdicts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bench import _report

__all__ = ["markdown", "of_backend", "pg_targets"]

LARGE = 100_000
MILLION = 1_000_000
NAMES = {"sqlite": "SQLite", "postgres": "PostgreSQL"}

# (label, path in a size's JSON, unit); latencies are dicts of percentiles, the others numbers.
_ROWS: list[tuple[str, tuple[str, ...], str]] = [
    ("keyword search P50, in-process (`search`, top_k 5)", ("latency_ms", "keyword", "p50"), "ms"),
    ("keyword search P95, in-process", ("latency_ms", "keyword", "p95"), "ms"),
    ("keyword search P95 without reconcile (`keyword_search`)", ("latency_ms", "keyword_without_refresh", "p95"), "ms"),
    ("keyword search P95, queries with a content word", ("latency_ms", "keyword_content_words", "p95"), "ms"),
    ("keyword search P95 through MCP stdio (client side)", ("mcp", "search", "p95"), "ms"),
    ("hybrid search P50 (MiniLM query embedding included)", ("hybrid", "latency_ms", "hybrid", "p50"), "ms"),
    ("hybrid search P95 (MiniLM query embedding included)", ("hybrid", "latency_ms", "hybrid", "p95"), "ms"),
    ("vector search P95 (query embedding included)", ("hybrid", "latency_ms", "vector", "p95"), "ms"),
    ("query embedding alone P95", ("hybrid", "latency_ms", "embed_query", "p95"), "ms"),
    ("vector KNN alone P95 (depth 50)", ("hybrid", "latency_ms", "knn", "p95"), "ms"),
    ("read_document P95", ("latency_ms", "read", "p95"), "ms"),
    ("reconcile-on-read P50 (`refresh`, back to back)", ("latency_ms", "refresh", "p50"), "ms"),
    ("reconcile-on-read P50, every file stat-ed", ("latency_ms", "refresh_every_file", "p50"), "ms"),
    ("ingest_path (keyword-only KB)", ("ingest", "docs_per_s"), "docs/s"),
    ("add_document loop", ("add_document", "docs_per_s"), "docs/s"),
    ("full rebuild from files (`reindex_all`)", ("rebuild", "seconds"), "s"),
    ("synthetic vectors stored (HNSW built as they go on PostgreSQL)", ("hybrid", "fill_seconds"), "s"),
    ("coffer serve start to tools/list (median)", ("startup", "tools_list_ms", "p50"), "ms"),
    ("coffer serve idle RSS (the server process only)", ("memory", "idle", "rss_mb"), "MB"),
]


def of_backend(sizes: Sequence[dict[str, Any]], backend: str) -> list[dict[str, Any]]:
    """The sizes measured on ``backend`` (a size without a tag is SQLite's: runs before the tag)."""
    return [size for size in sizes if size.get("backend", "sqlite") == backend]


def backends_of(sizes: Sequence[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(size.get("backend", "sqlite") for size in sizes))


def pg_targets(sizes: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The measured targets of issue #14 for the PostgreSQL sizes (none without such sizes)."""
    pg = of_backend(sizes, "postgres")
    rows = []
    for scale in (LARGE, MILLION):
        size = next((s for s in sorted(pg, key=lambda s: s["target_chunks"]) if s["target_chunks"] >= scale), None)
        if size is None:
            continue
        at = f"{size['chunks']:,} chunks"
        if scale == LARGE:
            rows += [
                _target("keyword search P95, in-process", 30, "ms", _get(size, "latency_ms", "keyword", "p95"), at),
                _target(
                    "hybrid search P95 (MiniLM query embedding included)",
                    40,
                    "ms",
                    _get(size, "hybrid", "latency_ms", "hybrid", "p95"),
                    at,
                ),
                _target("ingest of Markdown (ingest_path)", 300, "docs/s", _get(size, "ingest", "docs_per_s"), at),
            ]
        else:
            rows += [
                _target("keyword search P50, in-process", 30, "ms", _get(size, "latency_ms", "keyword", "p50"), at),
                _target(
                    "vector search P95 (query embedding included)",
                    30,
                    "ms",
                    _get(size, "hybrid", "latency_ms", "vector", "p95"),
                    at,
                ),
            ]
        rows.append(
            {
                "target": "full rebuild from files",
                "limit": "reported",
                "value": _get(size, "rebuild", "seconds"),
                "unit": "s",
                "at": at,
                "verdict": "reported",
            }
        )
    return rows


def _target(name: str, limit: float, unit: str, value: float | None, at: str) -> dict[str, Any]:
    higher = unit.endswith("/s")
    met = value is not None and (value >= limit if higher else value <= limit)
    verdict = "not measured" if value is None else "met" if met else "missed"
    return {
        "target": name,
        "limit": f"{'≥' if higher else '≤'} {limit:g} {unit}",
        "value": value,
        "unit": unit,
        "at": at,
        "verdict": verdict,
    }


def markdown(data: dict[str, Any]) -> str:
    """``_report.markdown`` for one backend; for several, each one's, then side by side."""
    backends = backends_of(data["sizes"])
    if len(backends) == 1 and backends[0] == "sqlite":
        return _report.markdown(data)
    parts = []
    for backend in backends:
        sizes = of_backend(data["sizes"], backend)
        one = {**data, "sizes": sizes, "targets": _report.targets(sizes)}
        parts += [f"## {NAMES.get(backend, backend)}", _report.markdown(one)]
    parts.append(side_by_side(data["sizes"]))
    if data.get("pg_targets"):
        parts.append(targets_table(data["pg_targets"]))
    return "\n\n".join(parts)


def side_by_side(sizes: Sequence[dict[str, Any]]) -> str:
    """One table per corpus size, a column per backend."""
    backends = backends_of(sizes)
    tables = []
    for target in sorted({size["target_chunks"] for size in sizes}):
        columns = [next((s for s in of_backend(sizes, b) if s["target_chunks"] == target), None) for b in backends]
        first = next(size for size in columns if size is not None)
        lines = [
            f"### Side by side: {first['chunks']:,} chunks ({first['documents']:,} documents)",
            "",
            "| | " + " | ".join(NAMES.get(b, b) for b in backends) + " |",
            "|---|" + "---:|" * len(backends),
        ]
        for label, path, unit in _ROWS:
            values = [None if size is None else _get(size, *path) for size in columns]
            if any(value is not None for value in values):
                cells = " | ".join("—" if value is None else f"{_report._num(value)} {unit}" for value in values)
                lines.append(f"| {label} | {cells} |")
        loads = [
            "—" if size is None else f"{size['load_average']['start']:.1f} → {size['load_average']['end']:.1f}"
            for size in columns
        ]
        lines.append(f"| load average (1 min) at start → end | {' | '.join(loads)} |")
        tables.append("\n".join(lines))
    return "\n\n".join(tables)


def targets_table(rows: Sequence[dict[str, Any]]) -> str:
    lines = [
        "### PostgreSQL against the targets of issue #14",
        "",
        "| target | limit | measured | at | verdict |",
        "|---|---|---:|---|---|",
    ]
    for row in rows:
        value = "—" if row["value"] is None else f"{_report._num(row['value'])} {row['unit']}"
        lines.append(f"| {row['target']} | {row['limit']} | {value} | {row['at']} | {row['verdict']} |")
    return "\n".join(lines)


def _get(data: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data
