"""Kill -9 a rebuild inside one of its batches (a worker, run as a subprocess).

    python tests/reliability/rebuild_crash.py HOME PROGRESS K [DATABASE_URL]

Changes the chunk size of knowledge base ``batch_crash.KB`` of ``HOME`` (on PostgreSQL at
``DATABASE_URL`` when given), which rebuilds every document's rows from its file, committed in
batches of ``BATCH`` documents (the time bound is lifted, so that the batch the kill lands in is
the same on a loaded machine), and sends itself SIGKILL as the ``K``-th document's rows are about
to be written, inside its batch's transaction. Each progress report goes to ``PROGRESS`` as one
line (the number of documents done), written straight to the file, so the lines survive the kill.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from coffer_mcp import Coffer
from coffer_mcp.indexing import reindex
from tests.reliability.batch_crash import KB, settings

BATCH = 8
CHUNK_SIZE, CHUNK_OVERLAP = 128, 16


def _arm(k: int) -> None:
    """Make the k-th document's row write of this process its last act."""
    calls = 0
    real = reindex._store

    def armed(*args, **kwargs):
        nonlocal calls
        calls += 1
        if calls == k:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args, **kwargs)

    reindex._store = armed


def main(argv: list[str]) -> None:
    home, progress, k, *url = argv
    reindex.BATCH_DOCUMENTS, reindex.BATCH_SECONDS = BATCH, 3600.0
    with Coffer(settings(Path(home), url[0] if url else None)) as coffer:
        fd = os.open(progress, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

        def reported(done: int, total: int, message: str) -> None:
            os.write(fd, f"{done}\n".encode())

        _arm(int(k))
        coffer.update_kb(KB, chunk_size=CHUNK_SIZE, chunk_overlap=CHUNK_OVERLAP, progress=reported)


if __name__ == "__main__":
    main(sys.argv[1:])
