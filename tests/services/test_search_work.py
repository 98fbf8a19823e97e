"""A search does each piece of its work once, however deep it looks for enough documents.

The search that looks deeper (one document's passages fill the first 4 x top_k) ran its whole
pipeline again: the query was analysed three times per pass, embedded again per pass (a paid
provider bills each one), and each knowledge base was opened twice before the first pass.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from coffer_mcp import Coffer, load_settings
from coffer_mcp.index import fts
from tests.fakes import HashEmbedder

PORTS = {f"port{n}.md": f"# Port {n}\n\nOne ferry calls here on day {n}." for n in range(4)}
MANUAL = "# Ferry manual\n\n" + "\n\n".join(f"Ferry rule {n}: the ferry crew checks the ferry." for n in range(40))


@pytest.fixture
def embedder() -> HashEmbedder:
    return HashEmbedder()


@pytest.fixture
def fleet(home: Path, backend_settings: dict[str, str], embedder: HashEmbedder) -> Iterator[Coffer]:
    """Two knowledge bases: a manual whose 40 rules outrank four ports, and the ports' schedule."""
    with Coffer(load_settings(home=home, **backend_settings), embedder=embedder) as coffer:
        for kb in ("fleet", "harbour"):
            coffer.create_kb(kb, chunk_size=96, chunk_overlap=0, vector=True)
        coffer.add_document("fleet", "manual.md", MANUAL)
        for name, text in PORTS.items():
            coffer.add_document("fleet", name, text)
        coffer.add_document("harbour", "schedule.md", "# Schedule\n\nThe ferry leaves at noon.")
        yield coffer


@pytest.fixture
def work(fleet: Coffer, monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Counts query analyses and knowledge-base opens (the real functions still run)."""
    counts: Counter[str] = Counter()

    def counting(what: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            counts[what] += 1
            return fn(*args, **kwargs)

        return counted

    real = fts.analyze
    analyze = counting("analyses", real)
    for name, module in list(sys.modules.items()):  # wherever the analyser was imported to
        if name.startswith("coffer_mcp.") and getattr(module, "analyze", None) is real:
            monkeypatch.setattr(module, "analyze", analyze)
    monkeypatch.setattr(fleet.catalogue, "open_kb", counting("opens", fleet.catalogue.open_kb))
    return counts


@pytest.mark.parametrize("strategy", ["keyword", "hybrid"])
def test_a_search_that_looks_deeper_analyses_its_query_once_and_opens_each_knowledge_base_once(
    fleet: Coffer, work: Counter[str], embedder: HashEmbedder, strategy: str
) -> None:
    embeds = embedder.calls
    result = fleet.search(["fleet", "harbour"], "ferry", 6, strategy=strategy)  # type: ignore[arg-type]

    assert result.strategy == strategy
    assert len({p.document_id for p in result.passages}) == 6  # it had to look past the manual's rules
    assert work == {"analyses": 1, "opens": 2}
    assert embedder.calls - embeds == (1 if strategy == "hybrid" else 0)


def test_a_search_of_every_knowledge_base_opens_each_once(fleet: Coffer, work: Counter[str]) -> None:
    result = fleet.search("*", "ferry schedule", 3)

    assert result.knowledge_bases == ["fleet", "harbour"]
    assert work == {"analyses": 1, "opens": 2}


def test_a_grep_opens_each_knowledge_base_once(fleet: Coffer, work: Counter[str]) -> None:
    result = fleet.grep(["fleet", "harbour"], "noon", 10)

    assert [hit.kb for hit in result.hits] == ["harbour"]
    assert work["opens"] == 2
