"""Conversion quality and speed on real documents, against reference Markdown from other engines.

Run from the repository root::

    python -m bench.conversion --out bench/results/conversion.json

Every file of ``../shared/eval/docs-multiformat`` (PDF, Office, HTML, EPUB, ...) is converted by
each engine asked for, one fresh child process per file (so time and peak memory are the file's
own; the engine is warmed up on a fixture of the same format first). Files with a reference in
``expected/`` (docling's or markitdown's Markdown) are measured against it: word recall and
precision, reading order, heading recall, table shapes and header rows. Every output is also
measured on its own: glued words, garbage (``(cid:N)``, U+FFFD), ``NaN``/``Unnamed`` cells, title.
The ``reference`` engine measures the references themselves, so each figure has its anchor.

Engines: ``coffer`` (``coffer_mcp.convert.convert``, what ships), ``reference``, and raw PDF text
extractors compared when choosing the PDF engine: ``pdfminer``, ``pdfplumber``, ``pypdfium2``.
Skips cleanly (exit 0, a message) when the data folder is absent.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from statistics import fmean
from typing import Any

from bench import _convmetrics as m
from bench import _docpages
from bench._measure import log, machine_info, source_fingerprint

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "eval" / "docs-multiformat"
FIXTURES = REPO / "fixtures"
CHILD_TIMEOUT = 600
ENGINES = ("coffer", "reference", "pdfminer", "pdfplumber", "pypdfium2")


# -- engines (run in the child) ------------------------------------------------------------------


def _coffer(path: Path) -> tuple[str, str]:
    from coffer_mcp.convert import convert

    conversion = convert(path.name, path.read_bytes())
    return conversion.markdown, conversion.title


def _pdfminer(path: Path) -> tuple[str, str]:
    import pdfminer.high_level

    return pdfminer.high_level.extract_text(str(path)), ""


def _pdfplumber(path: Path) -> tuple[str, str]:
    import pdfplumber

    with pdfplumber.open(path) as pdf:
        return "\n\n".join(page.extract_text() or "" for page in pdf.pages), ""


def _pypdfium2(path: Path) -> tuple[str, str]:
    import pypdfium2

    pdf = pypdfium2.PdfDocument(str(path))
    try:
        return "\n\n".join(page.get_textpage().get_text_range() for page in pdf), ""
    finally:
        pdf.close()


CHILD_ENGINES: dict[str, Callable[[Path], tuple[str, str]]] = {
    "coffer": _coffer,
    "pdfminer": _pdfminer,
    "pdfplumber": _pdfplumber,
    "pypdfium2": _pypdfium2,
}
PDF_ONLY = {"pdfminer", "pdfplumber", "pypdfium2"}


def child(engine: str, path: Path) -> None:
    """Convert one file with ``engine`` and print a JSON record (markdown, time, memory)."""
    import warnings

    warnings.simplefilter("ignore")
    convert = CHILD_ENGINES[engine]
    warm = FIXTURES / f"sample{path.suffix.lower()}"
    if warm.exists():  # imports and lazy engines load here, outside the timed conversion
        convert(warm)
    before = _maxrss_mb()
    started = time.perf_counter()
    try:
        markdown, title = convert(path)
        error = None
    except Exception as exc:  # noqa: BLE001 - a rejection is a result too
        markdown, title, error = "", "", f"{type(exc).__name__}: {getattr(exc, 'reason', '')} {exc}"[:300]
    seconds = time.perf_counter() - started
    record = {
        "markdown": markdown,
        "title": title,
        "seconds": seconds,
        "error": error,
        "rss_before_mb": before,
        "peak_mb": _maxrss_mb(),
    }
    sys.stdout.write(json.dumps(record))


def _maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KB on Linux


# -- the run (parent) ----------------------------------------------------------------------------


def reference_of(data: Path, name: str) -> tuple[str, str] | None:
    """The reference Markdown of ``name`` and its engine (docling first), or None."""
    for engine in ("docling", "markitdown", "hand"):  # hand: written for a fixture (fixtures/expected)
        path = data / "expected" / f"{engine}__{name}.md"
        if path.exists():
            return path.read_text(encoding="utf-8"), engine
    return None


def pages_of(path: Path) -> int:
    """Pages of a PDF, slides of a PPTX, else 1."""
    ext = path.suffix.lower()
    try:
        if ext == ".pdf":
            import pypdfium2

            pdf = pypdfium2.PdfDocument(str(path))
            try:
                return len(pdf)
            finally:
                pdf.close()
        if ext == ".pptx":
            with zipfile.ZipFile(path) as archive:
                return sum(1 for n in archive.namelist() if n.startswith("ppt/slides/slide") and n.endswith(".xml"))
    except Exception:  # noqa: BLE001 - a page count is a nicety
        return 1
    return 1


def run_child(engine: str, path: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-m", "bench.conversion", "--child", engine, str(path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=CHILD_TIMEOUT,
        check=False,
    )
    if done.returncode != 0:
        return {
            "markdown": "",
            "title": "",
            "seconds": None,
            "error": f"child exited {done.returncode}: " + done.stderr.strip()[-300:],
            "rss_before_mb": None,
            "peak_mb": None,
        }
    return json.loads(done.stdout)


def measure(
    name: str,
    engine: str,
    out: dict[str, Any],
    ref: tuple[str, str] | None,
    other: str | None,
    html: str | None,
    pages: int,
) -> dict[str, Any]:
    """Every measure of one output; ``other`` is the output the glued-word vocabulary is shared with."""
    markdown = out["markdown"]
    words = m.tokens(markdown)
    stem = name.rsplit(".", 1)[0]
    title = out["title"] or stem
    row: dict[str, Any] = {
        "file": name,
        "format": name.rsplit(".", 1)[-1].lower(),
        "engine": engine,
        "error": out.get("error"),
        "chars": len(markdown),
        "words": len(words),
        "pages": pages,
        "seconds": out.get("seconds"),
        "peak_mb": out.get("peak_mb"),
        "rss_before_mb": out.get("rss_before_mb"),
        "title": title,
        "title_is_stem": title == stem,
        "garbage": m.garbage_count(markdown),
        "nan_unnamed": m.nan_unnamed_count(markdown),
        "headings": len(m.headings(markdown)),
        "tables": len(m.tables(markdown)),
    }
    if row["seconds"]:
        row["pages_per_s"] = pages / row["seconds"]
    vocabulary = set(words) | set(m.tokens(other or ""))
    if ref is not None and not row["error"]:  # a rejected file is reported as such, not scored
        ref_words = m.tokens(ref[0])
        vocabulary |= set(ref_words)
        row["reference_engine"] = ref[1]
        row["precision"], row["recall"] = m.word_precision_recall(words, ref_words)
        row["order"] = m.order_similarity(words, ref_words)
        row["heading_recall"] = m.heading_recall(m.headings(markdown), m.headings(ref[0]))
        row["heading_precision"] = m.heading_precision(m.headings(markdown), m.headings(ref[0]))
        row["ref_headings"] = len(m.headings(ref[0]))
        row.update({f"table_{k}": v for k, v in m.table_agreement(m.tables(markdown), m.tables(ref[0])).items()})
        row["title_ok"] = _title_ok(title, stem, ref_words)
    row["glued"] = m.glued_rate(words, vocabulary)
    if html is not None and not row["error"] and (body := m.body_tokens(html)):
        row["body_recall"] = m.word_precision_recall(words, body)[1]
    return row


def _title_ok(title: str, stem: str, ref_words: list[str]) -> bool:
    """A real title: not the file name, and its words found early in the reference."""
    if title == stem:
        return False
    words = m.tokens(title)
    early = set(ref_words[:300])
    return bool(words) and sum(w in early for w in words) >= 0.8 * len(words)


def reference_output(ref: tuple[str, str]) -> dict[str, Any]:
    """The reference itself as an engine's output; its title is its first heading of any level."""
    found = m.headings(ref[0])
    title = next((line.lstrip("# ").strip() for line in ref[0].split("\n") if line.lstrip().startswith("#")), "")
    return {"markdown": ref[0], "title": title if found else "", "seconds": None, "error": None}


def run(data: Path, engines: list[str], only: list[str], save_md: Path | None) -> list[dict[str, Any]]:
    rows = []
    files = sorted(p for p in data.iterdir() if p.is_file() and p.name != "SOURCE.md")
    for path in files:
        if only and path.name not in only:
            continue
        ref = reference_of(data, path.name)
        html = path.read_text(encoding="utf-8", errors="replace") if path.suffix.lower() in (".html", ".htm") else None
        pages = pages_of(path)
        outputs: dict[str, dict[str, Any]] = {}
        for engine in engines:
            if engine in PDF_ONLY and path.suffix.lower() != ".pdf":
                continue
            if engine == "reference":
                if ref is not None:
                    outputs[engine] = reference_output(ref)
                continue
            log(f"{engine:10} {path.name}")
            outputs[engine] = run_child(engine, path)
            if save_md is not None:
                (save_md / engine).mkdir(parents=True, exist_ok=True)
                (save_md / engine / f"{path.name}.md").write_text(outputs[engine]["markdown"], encoding="utf-8")
        main = outputs.get("coffer", {}).get("markdown")
        for engine, out in outputs.items():
            other = main if engine != "coffer" else (ref[0] if ref else None)
            rows.append(measure(path.name, engine, out, ref, other, html, pages))
    return rows


# -- summary -------------------------------------------------------------------------------------

_MEASURES = (
    "recall",
    "precision",
    "order",
    "heading_recall",
    "heading_precision",
    "table_shape",
    "table_header",
    "glued",
    "garbage",
    "nan_unnamed",
    "title_ok",
    "body_recall",
)


def by_format(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per format and engine: means of the measures, and pages/s over all its files."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["format"], row["engine"]), []).append(row)
    summary = []
    for (fmt, engine), group in sorted(groups.items()):
        entry: dict[str, Any] = {"format": fmt, "engine": engine, "files": len(group)}
        for key in _MEASURES:
            values = [float(r[key]) for r in group if r.get(key) is not None]
            entry[key] = fmean(values) if values else None
        timed = [r for r in group if r.get("seconds")]
        if timed:
            entry["seconds"] = sum(r["seconds"] for r in timed)
            entry["pages_per_s"] = sum(r["pages"] for r in timed) / entry["seconds"]
            entry["peak_mb"] = max(r["peak_mb"] for r in timed)
        summary.append(entry)
    return summary


def _fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def markdown_tables(rows: list[dict[str, Any]], formats: list[dict[str, Any]]) -> str:
    head = (
        "| file | engine | recall | precision | order | headings (rec. / prec.) | tables shape / header | glued "
        "| garbage | NaN | title | s | pages/s | peak MB |"
    )
    lines = ["## Per file", "", head, "|" + " --- |" * 14]
    for r in rows:
        headings = f"{r['headings']}" + (
            f" ({_fmt(r.get('heading_recall'))} / {_fmt(r.get('heading_precision'))})"
            if r.get("heading_recall") is not None
            else ""
        )
        tables = f"{r['tables']}" + (
            f" ({_fmt(r['table_shape'])} / {_fmt(r['table_header'])})" if r.get("table_shape") is not None else ""
        )
        title = (
            "ok"
            if r.get("title_ok")
            else ("stem" if r["title_is_stem"] else ("?" if r.get("title_ok") is None else "off"))
        )
        recall = _fmt(r.get("recall")) + (
            f" (body {_fmt(r['body_recall'])})" if r.get("body_recall") is not None else ""
        )
        lines.append(
            f"| {r['file']} | {r['engine']}{' ✗' if r.get('error') else ''} | {recall} | {_fmt(r.get('precision'))} "
            f"| {_fmt(r.get('order'))} | {headings} | {tables} | {_fmt(r['glued'], 3)} | {r['garbage']} "
            f"| {r['nan_unnamed']} | {title} | {_fmt(r.get('seconds'))} | {_fmt(r.get('pages_per_s'))} "
            f"| {_fmt(r.get('peak_mb'), 0)} |"
        )
    lines += [
        "",
        "## Per format",
        "",
        (
            "| format | engine | files | recall | precision | order | heading rec. | heading prec. | table shape "
            "| table header | glued | garbage | NaN | title ok | s | pages/s | peak MB |"
        ),
        "|" + " --- |" * 17,
    ]
    for f in formats:
        lines.append(
            f"| {f['format']} | {f['engine']} | {f['files']} | {_fmt(f['recall'])} | {_fmt(f['precision'])} "
            f"| {_fmt(f['order'])} | {_fmt(f['heading_recall'])} | {_fmt(f['heading_precision'])} "
            f"| {_fmt(f['table_shape'])} "
            f"| {_fmt(f['table_header'])} "
            f"| {_fmt(f['glued'], 3)} | {_fmt(f['garbage'], 1)} | {_fmt(f['nan_unnamed'], 1)} | {_fmt(f['title_ok'])} "
            f"| {_fmt(f.get('seconds'))} | {_fmt(f.get('pages_per_s'))} | {_fmt(f.get('peak_mb'), 0)} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--engines", default="coffer,reference", help=f"comma-separated, of {', '.join(ENGINES)}")
    parser.add_argument("--files", default="", help="comma-separated file names (default: all)")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "conversion.json")
    parser.add_argument("--save-md", type=Path, help="write every output's Markdown under this folder")
    parser.add_argument(
        "--docs",
        default="",
        help="documentation pages instead: comma-separated sets of " + ", ".join(_docpages.DOC_SETS),
    )
    parser.add_argument("--child", nargs=2, metavar=("ENGINE", "FILE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child[0], Path(args.child[1]))
        return 0
    if args.docs:
        return _run_docs(args.docs.split(","), args.out)
    if not args.data.is_dir():
        print(f"skipped: {args.data} is absent (the shared evaluation data lives beside the repository)")
        return 0
    engines = [e for e in args.engines.split(",") if e]
    unknown = set(engines) - set(ENGINES)
    if unknown:
        parser.error(f"unknown engines: {', '.join(sorted(unknown))}")
    started = time.time()
    rows = run(args.data, engines, [f for f in args.files.split(",") if f], args.save_md)
    formats = by_format(rows)
    report = {
        "benchmark": "conversion",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, "-m", "bench.conversion", *sys.argv[1:]]),
        "data": str(args.data),
        "coffer_source_sha256": source_fingerprint(),
        "machine": machine_info(None),
        "platform": platform.platform(),
        "wall_seconds": time.time() - started,
        "engines": engines,
        "per_format": formats,
        "per_file": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(markdown_tables(rows, formats))
    return 0


def _run_docs(names: list[str], out: Path) -> int:
    """``--docs``: convert documentation pages in this process and measure them (``bench/_docpages.py``)."""
    unknown = set(names) - set(_docpages.DOC_SETS)
    if unknown:
        raise SystemExit(f"unknown documentation sets: {', '.join(sorted(unknown))}")
    started = time.time()
    report = {
        "benchmark": "conversion-docs",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, "-m", "bench.conversion", *sys.argv[1:]]),
        "coffer_source_sha256": source_fingerprint(),
        "machine": machine_info(None),
        **_docpages.run_docs(names, _coffer_bytes),
        "wall_seconds": time.time() - started,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(_docpages.doc_tables(report))
    return 0


def _coffer_bytes(filename: str, data: bytes) -> tuple[str, str]:
    from coffer_mcp.convert import convert

    conversion = convert(filename, data)
    return conversion.markdown, conversion.title


if __name__ == "__main__":
    raise SystemExit(main())
