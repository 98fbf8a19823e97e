"""Deterministic synthetic Markdown for the scale benchmark, and the queries run against it.

Words follow a Zipf-Mandelbrot law over a vocabulary ranked by frequency: the words of a BEIR
``corpus.jsonl`` (SciFact) when given, else ~2,000 pronounceable words made from syllables under
a hundred real English function words. Document ``i`` of seed ``s`` depends on ``(s, i)`` only,
so a corpus of n documents is the prefix of every larger one, and nothing is held in memory
beyond the document being written.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from coffer_mcp.indexing.chunking import chunk_markdown

__all__ = ["CorpusInfo", "Vocabulary", "make_queries", "regex_patterns", "write_corpus"]

VOCABULARY_SIZE = 20_000
ZIPF_EXPONENT = 1.0
ZIPF_OFFSET = 2.7  # Mandelbrot's shift: flattens the head as in real English text
DOCUMENT_CHARS = 1_000  # generation stops past this; documents average ~1,200 characters
PHRASES_KEPT = 500

_FUNCTION_WORDS = """the of and to a in is that for it as was with be by on not he this are or his from at
which but have an they you were their one all we can her has there been if more when will would who so
no she other its may these than them some what into only could time two first then do any like my now
over such our man me even most made after also did many before must through back years where much your
way well down should because each just those people how too little state good very make world still own
see men work long get here between both life being under never day same another know while last might
us great old year off come since against go came right used take three""".split()


@dataclass(frozen=True, slots=True)
class Vocabulary:
    """Words by falling frequency, with the cumulative Zipf weights used to draw them."""

    words: list[str]
    source: str
    cdf: np.ndarray = field(repr=False)

    @classmethod
    def of(cls, words: list[str], source: str) -> Vocabulary:
        ranks = np.arange(1, len(words) + 1, dtype=np.float64)
        weights = 1.0 / (ranks + ZIPF_OFFSET) ** ZIPF_EXPONENT
        return cls(words=words, source=source, cdf=np.cumsum(weights) / weights.sum())

    def draw(self, rng: np.random.Generator, n: int) -> list[str]:
        """``n`` words drawn independently with the Zipf skew."""
        picks = np.searchsorted(self.cdf, rng.random(n), side="right")
        return [self.words[min(i, len(self.words) - 1)] for i in picks]


def load_vocabulary(corpus_jsonl: Path | None) -> Vocabulary:
    """The vocabulary of a BEIR corpus (most frequent first) when the file exists, else the built-in one."""
    if corpus_jsonl is None or not corpus_jsonl.is_file():
        return Vocabulary.of(builtin_words(), "built-in (syllables under English function words)")
    counts: Counter[str] = Counter()
    word = re.compile(r"[a-z]+")
    with corpus_jsonl.open(encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                row = json.loads(line)
                counts.update(word.findall(f"{row.get('title') or ''} {row.get('text') or ''}".lower()))
    words = [w for w, n in counts.most_common() if n >= 2 and (len(w) > 1 or w == "a")][:VOCABULARY_SIZE]
    return Vocabulary.of(words, f"{corpus_jsonl} ({len(words)} most frequent words)")


def builtin_words(size: int = 2_000, seed: int = 7) -> list[str]:
    """Function words first, then distinct pronounceable words of two to four syllables."""
    rng = random.Random(seed)
    onsets = "b c d f g h j k l m n p r s t v w z br cl dr fl gr pl pr sh st th tr".split()
    vowels = "a e i o u ai ea io ou".split()
    codas = ["", "", "", "n", "r", "s", "l", "nd", "st", "x", "m"]
    words = list(dict.fromkeys(_FUNCTION_WORDS))
    seen = set(words)
    while len(words) < size:
        syllables = rng.choice((2, 2, 3, 3, 4))
        made = "".join(rng.choice(onsets) + rng.choice(vowels) for _ in range(syllables)) + rng.choice(codas)
        if made not in seen:
            seen.add(made)
            words.append(made)
    return words


# -- documents -----------------------------------------------------------------------------------


class _Writer:
    """Builds one document from a word stream drawn in bulk (one numpy call per ~400 words)."""

    def __init__(self, vocab: Vocabulary, rng: np.random.Generator) -> None:
        self.vocab, self.rng = vocab, rng
        self._stream: Iterator[str] = iter(())

    def words(self, n: int) -> list[str]:
        out = []
        for _ in range(n):
            word = next(self._stream, None)
            if word is None:
                self._stream = iter(self.vocab.draw(self.rng, 400))
                word = next(self._stream)
            out.append(word)
        return out

    def between(self, low: int, high: int) -> int:
        return int(self.rng.integers(low, high + 1))

    def title(self) -> str:
        return " ".join(w.capitalize() for w in self.words(self.between(3, 7)))

    def sentence(self) -> str:
        words = self.words(self.between(8, 22))
        if self.rng.random() < 0.15:
            words.insert(self.between(1, len(words) - 1), str(self.between(2, 2030)))
        if self.rng.random() < 0.3:
            words[self.between(2, len(words) - 2)] += ","
        return " ".join(words).capitalize() + "."

    def paragraph(self) -> str:
        return " ".join(self.sentence() for _ in range(self.between(2, 4)))

    def bullets(self) -> str:
        return "\n".join(f"- {' '.join(self.words(self.between(3, 8)))}" for _ in range(self.between(3, 5)))

    def code(self) -> str:
        lines = [
            f"{a}_{b} = {c}({d}, {self.between(1, 99)})"
            for a, b, c, d in (self.words(4) for _ in range(self.between(2, 5)))
        ]
        return "```python\n" + "\n".join(lines) + "\n```"

    def table(self) -> str:
        head = self.words(3)
        rows = [
            f"| {' | '.join([*self.words(1), str(self.between(1, 999)), self.words(1)[0]])} |"
            for _ in range(self.between(2, 4))
        ]
        return "\n".join([f"| {' | '.join(head)} |", "|---|---:|---|", *rows])

    def section_blocks(self) -> list[str]:
        blocks = [f"## {self.title()}", self.paragraph()]
        roll = self.rng.random()
        if roll < 0.35:
            blocks.append(self.bullets())
        elif roll < 0.45:
            blocks.append(self.code())
        elif roll < 0.53:
            blocks.append(self.table())
        return blocks


def generate_document(vocab: Vocabulary, seed: int, index: int, target_chars: int = DOCUMENT_CHARS) -> str:
    """Document ``index`` of corpus ``seed``: an H1, an intro, H2 sections until ~``target_chars``."""
    writer = _Writer(vocab, np.random.default_rng([seed, index]))
    blocks = [f"# {writer.title()}", writer.paragraph()]
    length = sum(len(b) + 2 for b in blocks)
    while length < target_chars:
        section = writer.section_blocks()
        blocks.extend(section)
        length += sum(len(b) + 2 for b in section)
    return "\n\n".join(blocks) + "\n"


@dataclass(slots=True)
class CorpusInfo:
    """What was written: counts, sizes, and a sample of two-word phrases for queries."""

    folder: Path
    documents: int = 0
    chunks: int = 0
    """Chunks the documents make with the KB's chunking parameters (computed while writing)."""
    bytes: int = 0
    phrases: list[str] = field(default_factory=list)

    @property
    def mb(self) -> float:
        return self.bytes / 1e6


# The synthetic corpora are sized in chunks of this chunking, which every figure in
# docs/benchmarks.md was measured with; the benchmarks create their knowledge bases with it (not
# with today's default for new knowledge bases) so that "100,000 chunks" stays 100,000 chunks.
CHUNK_SIZE = 512
CHUNK_OVERLAP = 64


def write_corpus(
    folder: Path,
    vocab: Vocabulary,
    seed: int,
    *,
    chunks: int | None = None,
    megabytes: float | None = None,
    start: int = 0,
    chunk_size: int = CHUNK_SIZE,
    chunk_overlap: int = CHUNK_OVERLAP,
) -> CorpusInfo:
    """Write documents ``start, start+1, …`` as ``doc-<i>.md`` until ``chunks`` or ``megabytes`` is reached."""
    folder.mkdir(parents=True, exist_ok=True)
    info = CorpusInfo(folder=folder)
    sampler = random.Random(seed)
    index = start
    while (chunks is not None and info.chunks < chunks) or (megabytes is not None and info.mb < megabytes):
        text = generate_document(vocab, seed, index)
        data = text.encode("utf-8")
        (folder / f"doc-{index:07d}.md").write_bytes(data)
        info.documents += 1
        info.bytes += len(data)
        info.chunks += len(chunk_markdown(text, chunk_size, chunk_overlap))
        _keep_phrase(info.phrases, text, sampler, info.documents)
        index += 1
    return info


_PROSE_LINE = re.compile(r"^[A-Z][a-z ,0-9]+\.", re.MULTILINE)


def _keep_phrase(phrases: list[str], text: str, sampler: random.Random, seen: int) -> None:
    """Reservoir-sample one adjacent word pair per document, from its prose."""
    slot = len(phrases) if len(phrases) < PHRASES_KEPT else sampler.randrange(seen)
    if slot >= PHRASES_KEPT:
        return
    prose = _PROSE_LINE.findall(text)
    words = re.findall(r"[a-z]+", " ".join(prose).lower()) if prose else []
    if len(words) < 2:
        return
    i = sampler.randrange(len(words) - 1)
    phrase = f"{words[i]} {words[i + 1]}"
    if slot == len(phrases):
        phrases.append(phrase)
    else:
        phrases[slot] = phrase


# -- queries -------------------------------------------------------------------------------------


def make_queries(vocab: Vocabulary, phrases: list[str], n: int, seed: int) -> list[str]:
    """``n`` keyword queries: 1-4 Zipf-drawn words, and one in five a two-word phrase from the corpus."""
    rng = np.random.default_rng([seed, 1_000_003])
    queries = []
    for _ in range(n):
        if phrases and rng.random() < 0.2:
            queries.append(phrases[int(rng.integers(len(phrases)))])
        else:
            queries.append(" ".join(vocab.draw(rng, int(rng.integers(1, 5)))))
    return queries


def grep_words(vocab: Vocabulary, n: int, seed: int) -> list[str]:
    """``n`` literal words for grep, drawn with the Zipf skew (so some hit early, some scan far)."""
    return vocab.draw(np.random.default_rng([seed, 2_000_003]), n)


def regex_patterns(vocab: Vocabulary, n: int, seed: int) -> list[str]:
    """``n`` small regexes: a word prefix, any word ending, whitespace, then another word."""
    rng = np.random.default_rng([seed, 3_000_017])
    patterns = []
    for _ in range(n):
        first, second = vocab.draw(rng, 2)
        patterns.append(rf"\b{re.escape(first[:4])}\w*\s+{re.escape(second)}\b")
    return patterns
