"""Kill -9 a Coffer operation at each of its file commit points (a worker, run as a subprocess).

    python tests/reliability/crash_points.py BASE_HOME SOURCES OUT_DIR SCENARIO [SCENARIO ...]

A file commit point is a call of ``os.replace``, ``os.rename`` or ``os.unlink`` — the moments an
atomic write, a delete or a rename becomes visible. For k = 1, 2, … and each phase, this copies
``BASE_HOME`` to ``OUT_DIR/<scenario>/<k>-<phase>``, forks a child that runs ``SCENARIO`` on the copy and
sends itself SIGKILL just before its k-th commit point (``before``: the temp file is written and
fsynced, the rename never happens) or just after it (``after``: the new file is in place, nothing
that follows happened), and waits for it. It stops at the first k the operation never reaches
(or at ``MAX_POINTS``). One JSON line per crash goes to stdout: ``{"scenario", "k", "phase", "home", "outcome"}``, where
``outcome`` is ``killed`` (or ``failed`` if the operation raised before reaching the point).

Forking keeps each crash cheap (the imports are done once) and the kill real: the child dies
with whatever it holds — file descriptors, the knowledge base's lock, an open SQLite transaction.
The scenarios and their inputs live here so the test can build the same base and know the
versions each file may hold.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

from coffer_mcp import Coffer, load_settings
from coffer_mcp.store import parse_document

KB = "notes"
MAX_POINTS = 12
ALPHA = "# Alpha\n\nThe first version of alpha, about lighthouses.\n"
ALPHA_V2 = "# Alpha\n\nThe second version of alpha, about harbours and tides.\n"
BETA = "# Beta\n\nBeta before the edit: " + "a long body to chunk. " * 200 + "\n"
BETA_V2 = "# Beta\n\nBeta after the edit: " + "a different long body. " * 200 + "\n"
NEW = "# New\n\nA document added while the process was killed.\n"
# The folder ingested by "ingest_dir": one file already known (changed since), two new ones.
SOURCES = {
    "known.md": ("# Known\n\nIngested into the base.\n", "# Known\n\nChanged since it was ingested.\n"),
    "fresh.csv": (None, "name,value\nalpha,1\nbeta,2\n"),
    "later.txt": (None, "Plain text that arrives with the folder.\n"),
}
FRESH_KB_DESCRIPTION = "created while the process was killed"

Scenario = Callable[[Coffer, dict[str, str], Path], object]


def build_base(home: Path, sources: Path) -> None:
    """The store every crash starts from, and the folder ``ingest_dir`` ingests (changed since)."""
    sources.mkdir(parents=True, exist_ok=True)
    for name, (old, _) in SOURCES.items():
        if old is not None:
            (sources / name).write_text(old, encoding="utf-8")
    with Coffer(_settings(home)) as coffer:
        coffer.create_kb(KB, "the base")
        coffer.add_document(KB, "a.md", ALPHA)
        coffer.add_document(KB, "b.md", BETA)
        coffer.ingest_path(KB, sources)
    for name, (_, new) in SOURCES.items():
        (sources / name).write_text(new, encoding="utf-8")


COPY = "copy"
"""The knowledge base ``copy_kb`` makes: the base's folder copied by hand (``cp -r``)."""


def copy_kb(coffer: Coffer) -> None:
    """Copy the base's folder by hand (once) and read: the copy's documents are given new ids."""
    copy = coffer.paths.knowledge / COPY
    if not copy.exists():  # copytree makes no commit point: the copy is whole before the first one
        shutil.copytree(coffer.paths.kb(KB).root, copy)
    coffer.list_kbs()


SCENARIOS: dict[str, Scenario] = {
    "add": lambda c, ids, src: c.add_document(KB, "new.md", NEW),
    "replace": lambda c, ids, src: c.add_document(KB, "a.md", ALPHA_V2, replace=True),
    "edit": lambda c, ids, src: c.edit_document(KB, ids["b.md"], BETA_V2),
    "delete": lambda c, ids, src: c.delete_document(KB, ids["a.md"]),
    "ingest_dir": lambda c, ids, src: c.ingest_path(KB, src, replace=True),
    "create_kb": lambda c, ids, src: c.create_kb("fresh", FRESH_KB_DESCRIPTION),
    "delete_kb": lambda c, ids, src: c.delete_kb(KB),
    "update_kb": lambda c, ids, src: c.update_kb(KB, chunk_size=128, chunk_overlap=16),
    "copy_kb": lambda c, ids, src: copy_kb(c),
}


def _settings(home: Path):
    return load_settings(home=home, embedding_provider="none")


def _arm(k: int, phase: str) -> None:
    """Make the k-th file commit point of this process a kill -9."""
    calls = 0
    for name in ("replace", "rename", "unlink"):
        real = getattr(os, name)

        def armed(*args, _real=real, **kwargs):
            nonlocal calls
            calls += 1
            if calls == k and phase == "before":
                os.kill(os.getpid(), signal.SIGKILL)
            result = _real(*args, **kwargs)
            if calls == k and phase == "after":
                os.kill(os.getpid(), signal.SIGKILL)
            return result

        setattr(os, name, armed)


def document_ids(home: Path) -> dict[str, str]:
    """The base's document ids by original filename, read from the truth files."""
    ids = {}
    for path in (home / "knowledge" / KB / "docs").glob("*.md"):
        meta, _ = parse_document(path.read_text(encoding="utf-8"))
        ids[meta["original_filename"]] = meta["id"]
    return ids


def _crash(scenario: str, base: Path, sources: Path, home: Path, k: int, phase: str) -> str:
    """Run the scenario on a copy of the base, armed at point k: ``killed``, ``finished`` or ``failed``."""
    shutil.copytree(base, home, symlinks=True)
    ids = document_ids(base)
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 0
        try:
            _arm(k, phase)
            with Coffer(_settings(home)) as coffer:
                SCENARIOS[scenario](coffer, ids, sources)
        except BaseException:  # noqa: BLE001 - reported to the test through the exit code
            traceback.print_exc()
            code = 3
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
        return "killed"
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
        shutil.rmtree(home)
        return "finished"
    return "failed"


def crash_everywhere(scenario: str, base: Path, sources: Path, out: Path) -> None:
    """Crash ``scenario`` at each of its commit points in turn, printing one line per crash."""
    for k in range(1, MAX_POINTS + 1):
        outcomes = []
        for phase in ("before", "after"):
            home = out / scenario / f"{k:02d}-{phase}"
            outcomes.append(outcome := _crash(scenario, base, sources, home, k, phase))
            if outcome != "finished":
                line = {"scenario": scenario, "k": k, "phase": phase, "home": str(home), "outcome": outcome}
                print(json.dumps(line), flush=True)
        if "killed" not in outcomes:
            return


def main(argv: list[str]) -> None:
    base, sources, out, *scenarios = argv
    for scenario in scenarios:
        crash_everywhere(scenario, Path(base), Path(sources), Path(out))


if __name__ == "__main__":
    main(sys.argv[1:])
