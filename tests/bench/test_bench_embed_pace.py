"""The embedding-pace benchmark's pure parts: its token-bounded batches and its corpus of documentation."""

from __future__ import annotations

from bench._pace_runs import plan_batches
from bench.embed_pace import pick, sections
from coffer_mcp.indexing.chunking import chunk_markdown
from coffer_mcp.settings import default_of


def test_a_batch_padded_to_its_longest_text_stays_within_the_token_budget_and_a_longer_text_goes_alone() -> None:
    lengths = [512, 30, 200, 31, 29, 500, 120, 2000]
    batches = plan_batches(lengths, max_tokens=1024, max_texts=64)
    assert sorted(i for batch in batches for i in batch) == list(range(len(lengths)))
    assert all(len(batch) * max(lengths[i] for i in batch) <= 1024 for batch in batches if len(batch) > 1)
    assert batches == [[4, 1, 3, 6, 2], [5, 0], [7]]  # shortest first: 5 x 200 and 2 x 512 fit in 1,024
    assert all(len(batch) <= 2 for batch in plan_batches([5] * 10, max_tokens=1024, max_texts=2))


def test_the_corpus_takes_documentation_sections_from_each_file_in_turn_until_it_has_the_chunks_asked_for() -> None:
    files = sections()
    assert len(files) > 5
    assert all(name.endswith(".md") for name, _ in files[0])
    picked = pick(files, 30)
    size, overlap = default_of("chunk_size"), default_of("chunk_overlap")
    counts = [len(chunk_markdown(markdown, size, overlap)) for _, markdown in picked]
    assert sum(counts) >= 30 > sum(counts[:-1])
    assert len({name.rsplit("-", 1)[0] for name, _ in picked}) > 1
