"""Create and delete one knowledge base over and over (a worker for the concurrency tests).

    python tests/reliability/churn.py HOME NAME CYCLES

Each cycle creates knowledge base NAME (it may exist already) and deletes it again; the last
cycle leaves it deleted. Prints the number of cycles done.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

from coffer_mcp import Coffer, load_settings
from coffer_mcp.errors import KnowledgeBaseExistsError


def main(home: Path, name: str, cycles: int) -> None:
    with Coffer(load_settings(home=home, embedding_provider="none")) as coffer:
        for _ in range(cycles):
            with contextlib.suppress(KnowledgeBaseExistsError):  # left by a writer that raced the previous delete
                coffer.create_kb(name, "here one moment, gone the next")
            coffer.delete_kb(name)
    print(cycles)


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]))
