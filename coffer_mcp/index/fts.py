"""Turning user text into FTS5 queries. User text is always data, never FTS syntax.

Every term reaches ``MATCH`` as a double-quoted string (quotes doubled inside), so operators,
parentheses, ``*``, ``:`` and ``^`` typed by a user are matched literally or ignored — never a
syntax error.

Two indexes serve two kinds of text (chosen from data; see docs/design.md):

* words (``chunks_fts``, porter + unicode61): English and other space-separated prose, where
  stemming and word-level BM25 rank best;
* trigrams (``chunks_tri``): CJK text, which has no spaces. Each CJK run of the query is cut
  into overlapping 3-grams (``近邻搜索`` → ``近邻搜``, ``邻搜索``); matching whole runs as
  phrases instead scored 0.15 nDCG@10 on CMRC 2018 against 0.92 for 3-grams. Also used for
  substring matches of Latin terms when the word index finds nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import regex

__all__ = ["MAX_TERMS", "STOPWORDS", "QueryTerms", "analyze", "match_expression"]

MAX_TERMS = 64

# Han, kana, Hangul and CJK punctuation-free letters: scripts written without spaces.
_CJK = r"\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}"
_CJK_RUN = regex.compile(rf"[{_CJK}]+")
# What unicode61 treats as token characters: letters, numbers, marks, private use.
_WORD = regex.compile(rf"[\p{{L}}\p{{N}}\p{{M}}\p{{Co}}--[{_CJK}]]+", regex.V1)


# Function words dropped from word-index queries (when something else remains): they match most
# chunks, add nothing to the ranking, and make every OR query score the whole corpus.
STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further had
    has have having he her here hers herself him himself his how i if in into is it its itself just
    me more most my myself no nor not now of off on once only or other our ours ourselves out over
    own same she should so some such than that the their theirs them themselves then there these
    they this those through to too under until up very was we were what when where which while who
    whom why will with would you your yours yourself yourselves""".split()
)


@dataclass(frozen=True, slots=True)
class QueryTerms:
    """The searchable pieces of a query."""

    words: list[str] = field(default_factory=list)
    """Non-CJK word tokens, lower-cased, de-duplicated, in query order."""
    cjk_runs: list[str] = field(default_factory=list)
    """Maximal runs of CJK characters."""

    @property
    def has_cjk(self) -> bool:
        return bool(self.cjk_runs)

    def content_words(self) -> list[str]:
        """Words without stopwords, unless the query is nothing but stopwords ("to be or not")."""
        kept = [word for word in self.words if word not in STOPWORDS]
        return kept or self.words

    def trigram_terms(self) -> list[str]:
        """Terms for the trigram index: CJK 3-grams plus words of 3+ characters."""
        terms: list[str] = []
        for run in self.cjk_runs:
            terms.extend(run[i : i + 3] for i in range(len(run) - 2))
        terms.extend(word for word in self.words if len(word) >= 3)
        return _unique(terms)[:MAX_TERMS]

    def short_terms(self) -> list[str]:
        """Every term, for the substring scan used when no term has 3+ characters."""
        return _unique([*self.cjk_runs, *self.words])[:MAX_TERMS]


def analyze(query: str) -> QueryTerms:
    """Split a user query into word tokens and CJK runs."""
    cjk_runs = _unique(_CJK_RUN.findall(query))
    words = _unique(token.casefold() for token in _WORD.findall(_CJK_RUN.sub(" ", query)))
    return QueryTerms(words=words[:MAX_TERMS], cjk_runs=cjk_runs[:MAX_TERMS])


def match_expression(terms: list[str], operator: str) -> str:
    """An FTS5 expression joining quoted ``terms`` with ``AND`` or ``OR``."""
    if operator not in ("AND", "OR"):
        raise ValueError(operator)
    return f" {operator} ".join(_quote(term) for term in terms)


def _quote(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def _unique(items) -> list[str]:
    return list(dict.fromkeys(items))
