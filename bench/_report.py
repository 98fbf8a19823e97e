"""The scale benchmark's Markdown tables and its verdicts against the issue's targets."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

__all__ = ["ann_targets", "markdown", "targets"]

LARGE = 100_000  # chunks: the scale of the latency targets
MILLION = 1_000_000
DOCS = 10_000  # documents: the scale of the reconcile and rebuild targets
GREP_MB = 50


def targets(sizes: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per target of issue #6: the limit, the figure that answers it, where it was measured."""
    sizes = [size for size in sizes if "add_document" in size]  # not the --only-vectors or --files-via-sqlite runs
    if not sizes:
        return []
    largest = max(sizes, key=lambda s: s["target_chunks"])
    large = next((s for s in sorted(sizes, key=lambda s: s["target_chunks"]) if s["target_chunks"] >= LARGE), None)
    return [
        _latency_row("keyword search P95, in-process", 20, large, ("latency_ms", "keyword", "p95")),
        _latency_row(
            "keyword search P95, in-process, queries with a content word",
            20,
            large,
            ("latency_ms", "keyword_content_words", "p95"),
        ),
        _latency_row("keyword search P95, MCP stdio", 30, large, ("mcp", "search", "p95")),
        _latency_row(
            "hybrid search P95 (MiniLM query embedding included)", 60, large, ("hybrid", "latency_ms", "hybrid", "p95")
        ),
        _grep_row(largest),
        _per_docs_row(
            "reconcile-on-read P50, back-to-back reads (default settings)",
            5,
            "ms",
            sizes,
            ("latency_ms", "refresh", "p50"),
        ),
        _per_docs_row(
            "reconcile-on-read P50, every file stat-ed (a read after reconcile_interval)",
            5,
            "ms",
            sizes,
            ("latency_ms", "refresh_every_file", "p50"),
        ),
        _ingest_row(largest),
        _per_docs_row("full rebuild from files", 30, "s", sizes, ("rebuild", "seconds")),
        _row(
            "coffer serve start to tools/list reply (median)",
            "≤ 400 ms",
            _get(largest, "startup", "tools_list_ms", "p50"),
            "ms",
            _at(largest),
            lambda v: v <= 400,
        ),
        _row(
            "coffer serve idle RSS (no embedder)",
            "≤ 120 MB",
            _get(largest, "memory", "idle", "rss_mb"),
            "MB",
            _at(largest),
            lambda v: v <= 120,
        ),
    ]


def ann_targets(sizes: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per measured target of issue #16 (vector search through the ANN graph)."""
    rows = []
    for scale, hybrid_ms in ((LARGE, 60), (MILLION, 100)):
        size = next((s for s in sizes if s["target_chunks"] == scale), None)
        if size is None:
            continue
        ann = size["hybrid"].get("ann", {})
        for name, key in (
            ("vectors like the stored ones", "like_stored_depth_50"),
            ("MiniLM text queries, unrelated to the synthetic vectors", "text_queries_depth_50"),
        ):
            rows.append(
                _row(
                    f"ANN recall@10 vs the exact scan, {name}",
                    "≥ 0.98",
                    _get(ann, "recall_at_10", key),
                    "",
                    _at(size),
                    lambda v: v >= 0.98,
                )
            )
        rows.append(
            _row(
                "hybrid search P95 through the ANN graph (query embedding included)",
                f"≤ {hybrid_ms} ms",
                _get(ann, "latency_ms", "hybrid", "p95"),
                "ms",
                _at(size),
                lambda v, limit=hybrid_ms: v <= limit,
                note=f"keyword search alone: P95 {_num(_get(size, 'latency_ms', 'keyword_without_refresh', 'p95'))} ms",
            )
        )
        if scale == MILLION:
            rows.append(
                _row(
                    "vector search P50 through the ANN graph (query embedding included)",
                    "≤ 5 ms",
                    _get(ann, "latency_ms", "vector", "p50"),
                    "ms",
                    _at(size),
                    lambda v: v <= 5,
                )
            )
    return rows


def _row(
    name: str, limit: str, value: float | None, unit: str, at: str, ok, note: str = "", *, at_scale: bool = True
) -> dict[str, Any]:
    verdict = "not measured" if value is None else ("met" if ok(value) else "missed")
    if value is not None and not at_scale:
        verdict = f"({verdict}, not at the target's scale)"
    return {"target": name, "limit": limit, "value": value, "unit": unit, "at": at, "verdict": verdict, "note": note}


def _latency_row(name: str, limit_ms: float, size: dict[str, Any] | None, path: tuple[str, ...]) -> dict[str, Any]:
    if size is None:
        return _row(
            name,
            f"≤ {limit_ms:g} ms at {LARGE:,} chunks",
            None,
            "ms",
            "",
            None,
            note=f"no size of {LARGE:,} chunks or more was run",
        )
    return _row(
        name, f"≤ {limit_ms:g} ms at {LARGE:,} chunks", _get(size, *path), "ms", _at(size), lambda v: v <= limit_ms
    )


def _grep_row(size: dict[str, Any]) -> dict[str, Any]:
    grep = size.get("grep_target") or {}
    value = _get(grep, "grep_no_match", "p95")
    at = f"{grep['mb']:.1f} MB in {grep['files']:,} files" if "mb" in grep else ""
    note = "a pattern found in no file, so every file is read (the literal and regex rows stop at 50 lines)"
    at_scale = grep.get("mb", 0) >= GREP_MB * 0.95
    return _row(
        "grep P95 over 50 MB of Markdown",
        "≤ 150 ms over 50 MB",
        value,
        "ms",
        at,
        lambda v: v <= 150,
        note,
        at_scale=at_scale,
    )


def _ingest_row(size: dict[str, Any]) -> dict[str, Any]:
    note = f"add_document one at a time: {_get(size, 'add_document', 'docs_per_s'):,.0f} docs/s"
    return _row(
        "ingest of Markdown, keyword only (ingest_path)",
        "≥ 300 docs/s",
        _get(size, "ingest", "docs_per_s"),
        "docs/s",
        _at(size),
        lambda v: v >= 300,
        note,
    )


def _per_docs_row(name: str, limit: float, unit: str, sizes: Sequence[dict[str, Any]], path: tuple[str, ...]):
    points = sorted((s["documents"], _get(s, *path)) for s in sizes if _get(s, *path) is not None)
    if not points:
        return _row(name, f"≤ {limit:g} {unit} at {DOCS:,} documents", None, unit, "", None)
    value, how, at_scale = at_documents(points, DOCS)
    return _row(
        name, f"≤ {limit:g} {unit} at {DOCS:,} documents", value, unit, how, lambda v: v <= limit, at_scale=at_scale
    )


def at_documents(points: Sequence[tuple[int, float]], docs: int) -> tuple[float, str, bool]:
    """The value at ``docs`` documents: measured, interpolated linearly, or scaled in proportion.

    The flag says whether that is a fair reading at this scale (measured, interpolated, or scaled
    from a size within a factor of two).
    """
    for n, value in points:
        if n == docs:
            return value, f"{n:,} documents", True
    below = [p for p in points if p[0] < docs]
    above = [p for p in points if p[0] > docs]
    if below and above:
        (n0, v0), (n1, v1) = below[-1], above[0]
        value = v0 + (v1 - v0) * (docs - n0) / (n1 - n0)
        return value, f"interpolated between {n0:,} and {n1:,} documents", True
    n, value = min(points, key=lambda p: abs(p[0] - docs))
    return value * docs / n, f"scaled in proportion from {n:,} documents", docs / 2 <= n <= docs * 2


def _at(size: dict[str, Any]) -> str:
    return f"{size['chunks']:,} chunks / {size['documents']:,} docs"


def _get(data: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


# -- Markdown ------------------------------------------------------------------------------------

_LATENCY_ROWS = [
    (("latency_ms", "keyword"), "keyword search, in-process (`search`, top_k 5)"),
    (("latency_ms", "keyword_without_refresh"), "keyword search without reconcile (`keyword_search`)"),
    (("latency_ms", "keyword_content_words"), "keyword search, only the queries with a content word"),
    (("latency_ms", "refresh"), "reconcile-on-read alone (`refresh`, nothing changed, back to back)"),
    (("latency_ms", "refresh_every_file"), "reconcile-on-read, every file stat-ed (`reconcile_interval` 0)"),
    (("mcp", "search"), "keyword search through MCP stdio (client side)"),
    (("latency_ms", "grep_literal"), "grep, literal word (max 50 lines)"),
    (("latency_ms", "grep_regex"), "grep, small regex (max 50 lines)"),
    (("latency_ms", "grep_no_match"), "grep, word in no file"),
    (("latency_ms", "read"), "read_document, whole document"),
    (("hybrid", "latency_ms", "hybrid"), "hybrid search (MiniLM query embedding included)"),
    (("hybrid", "latency_ms", "hybrid_content_words"), "hybrid search, only the queries with a content word"),
    (("hybrid", "latency_ms", "keyword_depth_50"), "keyword search alone at depth 50 (hybrid's keyword half)"),
    (("hybrid", "latency_ms", "vector"), "vector search (query embedding included)"),
    (("hybrid", "latency_ms", "embed_query"), "query embedding alone"),
    (("hybrid", "latency_ms", "knn"), "vector KNN alone (sqlite-vec, depth 50)"),
    (("hybrid", "latency_ms", "knn_top5_like_stored"), "vector KNN of a top-5 search, queries like the stored vectors"),
    (("hybrid", "ann", "latency_ms", "hybrid"), "hybrid search through the ANN graph (query embedding included)"),
    (
        ("hybrid", "ann", "latency_ms", "hybrid_content_words"),
        "hybrid through the ANN graph, queries with a content word",
    ),
    (("hybrid", "ann", "latency_ms", "vector"), "vector search through the ANN graph (query embedding included)"),
    (("hybrid", "ann", "latency_ms", "knn"), "vector KNN alone through the ANN graph (depth 50, re-scored)"),
    (
        ("hybrid", "ann", "latency_ms", "knn_top5_like_stored"),
        "vector KNN of a top-5 search through the ANN graph, queries like the stored vectors",
    ),
]


_GREP_ROWS = [("grep_literal", "literal word"), ("grep_regex", "small regex"), ("grep_no_match", "no match")]


def markdown(data: dict[str, Any]) -> str:
    """Every size's tables, then the targets."""
    machine = data["machine"]
    parts = [
        (
            f"Machine: {machine['cpu_model']}, {machine['cpu_count']} cores, {machine['ram_gb']} GB RAM, "
            f"Python {machine['python']}, SQLite {machine['sqlite_version']} ({machine['sqlite_binding']}), "
            f"sqlite-vec {machine['sqlite_vec']}, {machine['ripgrep']}. {data['date']}."
        ),
        f"`{data['command']}`",
    ]
    parts += [size_tables(size) for size in data["sizes"]]
    if data["targets"]:
        parts.append(targets_table(data["targets"]))
    if data.get("ann_targets"):
        parts.append(targets_table(data["ann_targets"], "issue #16 (vector search)"))
    return "\n\n".join(parts)


def size_tables(size: dict[str, Any]) -> str:
    corpus = size["corpus"]
    lines = [
        (
            f"### {size['chunks']:,} chunks ({size['documents']:,} documents, {corpus['mb']:.1f} MB of Markdown; "
            f"{size['docs_folder_mb']:.1f} MB of document files)"
        ),
        "",
        f"Load average (1 min) at start / end: {size['load_average']['start']:.2f} / {size['load_average']['end']:.2f}",
        "",
        "| operation | P50 ms | P95 ms | P99 ms |",
        "|---|---:|---:|---:|",
    ]
    for path, label in _LATENCY_ROWS:
        stats = _get(size, *path)
        if stats and stats.get("n"):
            lines.append(f"| {label} | {_ms(stats['p50'])} | {_ms(stats['p95'])} | {_ms(stats['p99'])} |")
    grep = size.get("grep_target") or {}
    if "mb" in grep:
        for key, label in _GREP_ROWS:
            s = grep[key]
            lines.append(
                f"| grep over {grep['mb']:.1f} MB, {label} | {_ms(s['p50'])} | {_ms(s['p95'])} | {_ms(s['p99'])} |"
            )
    lines += ["", "| throughput, start-up, memory | value |", "|---|---|"]
    lines += [f"| {label} | {value} |" for label, value in _other_rows(size)]
    return "\n".join(lines)


def _other_rows(size: dict[str, Any]) -> list[tuple[str, str]]:
    ingest = size.get("ingest") or size["files_ingest"]
    rows = [
        (
            "ingest_path, one call (keyword-only KB)" if "ingest" in size else "ingest_path through SQLite (the files)",
            f"{ingest['docs_per_s']:,.0f} docs/s, {ingest['mb_per_s']:.2f} MB/s ({ingest['seconds']:.1f} s)",
        )
    ]
    if "add_document" in size:
        add = size["add_document"]
        rows.append((f"add_document loop ({add['documents']:,} documents)", f"{add['docs_per_s']:,.0f} docs/s"))
    if "rebuild" in size:
        rebuild = size["rebuild"]
        took = f"{rebuild['seconds']:.1f} s ({rebuild['docs_per_s']:,.0f} docs/s)"
        rows.append(("full rebuild from files (`reindex_all`)", took))
    hybrid = size["hybrid"]
    if "vectors" in hybrid:
        rows.append(
            (
                f"synthetic vectors stored ({hybrid['identity']})",
                f"{hybrid['vectors']:,} in {hybrid['fill_seconds']:.1f} s",
            )
        )
    if hybrid.get("hnsw_built_after_seconds") is not None:
        rows.append(("HNSW index built after them (one CREATE INDEX)", f"{hybrid['hnsw_built_after_seconds']:.1f} s"))
    rows += _ann_rows(hybrid)
    startup = size.get("startup", {"skipped": "--only-vectors"})
    if "skipped" not in startup:
        init, listed = startup["initialize_ms"]["p50"], startup["tools_list_ms"]["p50"]
        rows.append(("coffer serve start to initialize / tools/list (median)", f"{_ms(init)} / {_ms(listed)} ms"))
    memory = size["memory"]
    if memory.get("idle"):
        rows.append(("coffer serve RSS idle (VmRSS / VmHWM)", _mb(memory["idle"])))
    if memory.get("after_search"):
        rows.append((f"coffer serve RSS after one {memory.get('search_strategy')} search", _mb(memory["after_search"])))
    for key in ("mcp", "hybrid", "memory", "startup"):
        if "skipped" in size.get(key, {}):
            rows.append((f"{key}", f"skipped: {size[key]['skipped']}"))
    return rows


def _ann_rows(hybrid: dict[str, Any]) -> list[tuple[str, str]]:
    ann = hybrid.get("ann")
    if not ann:
        return []
    if "skipped" in ann:
        return [("ANN graph", f"not used: {ann['skipped']}")]
    recall, writes = ann["recall_at_10"], ann["logged_writes"]
    plain = hybrid["restore"]["per_s"]
    return [
        (
            f"ANN graph built from scratch (ann_min_chunks {ann['min_chunks']:,})",
            f"{ann['build_seconds']:.1f} s, {ann['file_mb']:.0f} MB file",
        ),
        (
            "ANN recall@10 vs the scan, depth 50 / 10: vectors like the stored ones",
            f"{recall['like_stored_depth_50']:.3f} / {recall['like_stored_depth_10']:.3f}",
        ),
        (
            "ANN recall@10 vs the scan, depth 50 / 10: MiniLM text queries (unrelated to the synthetic vectors)",
            f"{recall['text_queries_depth_50']:.3f} / {recall['text_queries_depth_10']:.3f}",
        ),
        (
            "vectors re-stored with the graph present (each write logged) / before it existed",
            (
                f"{writes['per_s']:,.0f} / {plain:,.0f} per s ({writes['vectors']:,} re-stored; the next KNN, "
                f"catching up: {_ms(writes['first_search_ms'])} ms, "
                f"the one after: {_ms(writes.get('next_search_ms', math.nan))} ms)"
            ),
        ),
    ]


def targets_table(rows: Sequence[dict[str, Any]], title: str = "issue #6") -> str:
    lines = [
        f"### Against the targets of {title}",
        "",
        "| target | limit | measured | at | verdict |",
        "|---|---|---:|---|---|",
    ]
    for row in rows:
        value = "—" if row["value"] is None else f"{_num(row['value'])} {row['unit']}"
        lines.append(f"| {row['target']} | {row['limit']} | {value} | {row['at']} | {row['verdict']} |")
    return "\n".join(lines)


def _ms(value: float) -> str:
    return _num(value)


def _num(value: float) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"


def _mb(memory: dict[str, float]) -> str:
    return f"{memory['rss_mb']:.0f} / {memory['hwm_mb']:.0f} MB"
