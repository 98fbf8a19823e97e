"""Turning text into FTS5 terms. User text is always data, never FTS syntax.

One FTS5 index (``porter unicode61``) serves every language. Text written without spaces —
Chinese, Japanese, Korean — is indexed as overlapping character bigrams (``近邻搜索`` →
``近邻 邻搜 搜索``), both in the documents (``search_text``) and in queries (``analyze``), so a
CJK query of two or more characters matches through the same BM25 ranking as English words.
Chosen from data (docs/design.md): on CMRC 2018, bigrams score 0.968 nDCG@10 against 0.918 for
trigram 3-grams, and a trigram index was three times the size of the text it indexed.

Every term reaches ``MATCH`` as a double-quoted string (quotes doubled inside), so operators,
parentheses, ``*``, ``:`` and ``^`` typed by a user are matched literally or ignored — never a
syntax error.

Changing ``search_text`` changes what is in the index: it needs a migration that rebuilds the
FTS table (deletes hand FTS5 the exact text that was inserted).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import regex

__all__ = ["MAX_TERMS", "STOPWORDS", "QueryTerms", "analyze", "match_expression", "search_text", "settled"]

MAX_TERMS = 64

# Scripts written without spaces between words.
_CJK_RUN = regex.compile(r"[\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}]+")
# What unicode61 treats as token characters: letters, numbers, marks, private use.
_WORD = regex.compile(r"[\p{L}\p{N}\p{M}\p{Co}]+")
# Never in indexed text (cleaning drops control characters) and refused by PostgreSQL (NUL, lone surrogates).
_UNSEARCHABLE = regex.compile(r"[\p{Cc}\p{Cs}]+")

# Function words dropped from queries (when something else remains): they match most chunks,
# add nothing to the ranking, and make every OR query score the whole corpus.
STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further had
    has have having he her here hers herself him himself his how i if in into is it its itself just
    me more most my myself no nor not now of off on once only or other our ours ourselves out over
    own same she should so some such than that the their theirs them themselves then there these
    they this those through to too under until up very was we were what when where which while who
    whom why will with would you your yours yourself yourselves""".split()
)


def _bigrams(run: str) -> list[str]:
    return [run] if len(run) == 1 else [run[i : i + 2] for i in range(len(run) - 1)]


def search_text(text: str) -> str:
    """What the FTS index sees of ``text``: CJK runs replaced by their space-separated bigrams."""
    return _CJK_RUN.sub(lambda m: " " + " ".join(_bigrams(m.group())) + " ", text)


@dataclass(frozen=True, slots=True)
class QueryTerms:
    """The searchable pieces of a query."""

    words: list[str] = field(default_factory=list)
    """Non-CJK word tokens, lower-cased, de-duplicated, in query order."""
    cjk_runs: list[str] = field(default_factory=list)
    """Maximal runs of CJK characters, in query order."""
    tokens: list[str] = field(default_factory=list)
    """Non-CJK word tokens, lower-cased, in query order, repeats kept (for a phrase)."""
    literals: list[str] = field(default_factory=list)
    """The query's space-separated pieces, as typed, when it has no word and no CJK run
    (``→``, ``★ ≥``, ``🎉``, ``->``): the index holds no term for them, a substring scan finds them."""

    @property
    def only_symbols(self) -> bool:
        """No word, number or CJK character: nothing the full-text index can look up."""
        return bool(self.literals)

    @property
    def only_stopwords(self) -> bool:
        """Nothing but function words (``the``, ``in is``, ``to be or not to be``)."""
        return bool(self.words) and not self.cjk_runs and all(w in STOPWORDS for w in self.words)

    def index_terms(self) -> list[str]:
        """Terms for the FTS index: content words and the bigrams of CJK runs.

        Stopwords go when something else remains. A query of stopwords alone is one phrase
        (``"to be or not to be"``): each of its words is in most chunks, so as separate terms
        they would match nearly everything with a score of about zero, while the phrase
        finds the passages that say it. One stopword alone has no terms: it says nothing to
        rank by (``query_hint`` tells the caller). A one-character CJK run goes unless
        it is all there is (it can only match one-character runs in the text).
        """
        if self.only_stopwords:
            return [" ".join(self.tokens[:MAX_TERMS])] if len(self.tokens) > 1 else []
        words = [w for w in self.words if w not in STOPWORDS]
        bigrams = [b for run in self.cjk_runs if len(run) > 1 for b in _bigrams(run)]
        terms = _unique([*words, *bigrams]) or _unique(self.cjk_runs)
        return terms[:MAX_TERMS]

    def substring_terms(self) -> list[str]:
        """Terms for the substring scan used when the index finds nothing (``ackend``, ``向``, ``→``)."""
        return _unique([*self.words, *self.cjk_runs, *self.literals])[:MAX_TERMS]


def analyze(query: str) -> QueryTerms:
    """Split a user query into word tokens and CJK runs."""
    cjk_runs = _unique(_CJK_RUN.findall(query))
    # Lower-cased, not case-folded: FTS5's unicode61 folds case itself but keeps "ß" and "ﬁ",
    # which ``casefold`` would turn into "ss" and "fi", words no document holds as written.
    tokens = [token.lower() for token in _WORD.findall(_CJK_RUN.sub(" ", query))]
    # Symbols, emoji and punctuation separate tokens in FTS5 (or are tokens of their own there,
    # for characters newer than its Unicode tables): a query of nothing else is looked for as written.
    literals = [] if tokens or cjk_runs else _unique(_UNSEARCHABLE.sub(" ", query).split())
    return QueryTerms(
        words=_unique(tokens)[:MAX_TERMS],
        cjk_runs=cjk_runs[:MAX_TERMS],
        tokens=tokens[:MAX_TERMS],
        literals=literals[:MAX_TERMS],
    )


def settled(score: float) -> float:
    """A score of a search of several knowledge bases, to 12 significant digits.

    The two indexes compute such a score in different orders of arithmetic (docs/design.md), so
    equal scores may differ in their last bits; settled, they tie, and both indexes order them by
    document and position.
    """
    return float(f"{score:.12g}")


def match_expression(terms: list[str], operator: str) -> str:
    """An FTS5 expression joining quoted ``terms`` with ``AND`` or ``OR``."""
    if operator not in ("AND", "OR"):
        raise ValueError(operator)
    return f" {operator} ".join(_quote(term) for term in terms)


def _quote(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def _unique(items) -> list[str]:
    return list(dict.fromkeys(items))
