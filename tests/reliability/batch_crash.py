"""Kill -9 a folder ingest inside one of its batches (a worker, run as a subprocess).

    python tests/reliability/batch_crash.py HOME SOURCES PROGRESS K [DATABASE_URL]

Ingests the folder ``SOURCES`` into knowledge base ``KB`` of ``HOME`` (on PostgreSQL at
``DATABASE_URL`` when given) and sends itself SIGKILL just after its ``K``-th file commit point
(an ``os.replace``: a document's original or Markdown landing). Each file the ingest reports
goes to ``PROGRESS`` as one line, written straight to the file, so the lines survive the kill:
what the user was told was done.

Batches are bounded by count only here (the time bound is lifted), so that the batch the kill
lands in is the same on a loaded machine: 1, 2, 4, 8, … documents.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from coffer_mcp import Coffer, load_settings
from coffer_mcp.services import folder_ingest

KB = "papers"
FILES = 40


def write_sources(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(FILES):
        body = f"# Paper {i}\n\nFindings number {i} about zebrafish fins and tides.\n"
        (folder / f"paper-{i:02d}.md").write_text(body, encoding="utf-8")


def settings(home: Path, url: str | None):
    backend = {"index_backend": "postgres", "database_url": url} if url else {}
    return load_settings(home=home, embedding_provider="none", **backend)


def _arm(k: int) -> None:
    """Make the k-th ``os.replace`` of this process (any thread) its last act."""
    calls = 0
    real = os.replace

    def armed(*args, **kwargs):
        nonlocal calls
        calls += 1
        result = real(*args, **kwargs)
        if calls == k:
            os.kill(os.getpid(), signal.SIGKILL)
        return result

    os.replace = armed


def main(argv: list[str]) -> None:
    home, sources, progress, k, *url = argv
    folder_ingest.BATCH_SECONDS = 3600.0
    with Coffer(settings(Path(home), url[0] if url else None)) as coffer:
        coffer.create_kb(KB)
        fd = os.open(progress, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

        def reported(done: int, total: int, name: str) -> None:
            os.write(fd, f"{name}\n".encode())

        _arm(int(k))
        coffer.ingest_path(KB, sources, progress=reported)


if __name__ == "__main__":
    main(sys.argv[1:])
