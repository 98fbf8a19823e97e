"""The limits, choices and defaults that the command line shows before it loads anything.

Each value is declared here once, and read from here by ``settings`` (its ``Field`` defaults and
bounds), ``models``, the services that enforce a limit, and the command line's parser and help.
This module imports nothing but ``typing``: ``coffer --help`` prints these numbers without loading pydantic or
the core (``tests/test_architecture.py`` checks it).

A ``Literal`` type cannot be spelled from a tuple, so where one names the same choices
(``StrategyChoice``, ``Settings.index_backend``...) a test checks that the two agree.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "AUTH_MODES",
    "CHUNK_OVERLAP",
    "CHUNK_OVERLAP_MAX",
    "CHUNK_SIZE",
    "CHUNK_SIZE_MAX",
    "CHUNK_SIZE_MIN",
    "DEFAULT_AUTH",
    "DEFAULT_HOME",
    "DEFAULT_INDEX_BACKEND",
    "EMBEDDING_PROVIDERS",
    "INDEX_BACKENDS",
    "MAX_DESCRIPTION",
    "MAX_LIST_LIMIT",
    "MAX_MATCHES_LIMIT",
    "MAX_NOTE",
    "MAX_OFFSET",
    "MAX_PATTERN_CHARS",
    "MAX_TOP_K",
    "STRATEGY_CHOICES",
]

# -- settings (settings/_model.py declares each one's description) -------------------------------

DEFAULT_HOME = "~/.coffer"
INDEX_BACKENDS = ("sqlite", "postgres")
DEFAULT_INDEX_BACKEND: Final = "sqlite"
AUTH_MODES = ("token", "oauth", "external")
DEFAULT_AUTH: Final = "token"
EMBEDDING_PROVIDERS = ("fastembed", "openai", "none")
CHUNK_SIZE, CHUNK_SIZE_MIN, CHUNK_SIZE_MAX = 1024, 64, 8192
"""Characters per chunk: a new knowledge base's default, and the bounds of any."""
CHUNK_OVERLAP, CHUNK_OVERLAP_MAX = 128, 4096

# -- what one request may ask for ----------------------------------------------------------------

STRATEGY_CHOICES = ("auto", "keyword", "vector", "hybrid")
"""What a search may ask for (``models.StrategyChoice``): ``auto`` lets the knowledge bases decide."""
MAX_TOP_K = 1000
"""The most passages one search returns."""
MAX_MATCHES_LIMIT = 1000
"""The most matching lines one grep returns."""
MAX_PATTERN_CHARS = 1000
"""Characters of a grep pattern."""
MAX_LIST_LIMIT = 1000
"""The most documents one page of a listing holds."""
MAX_OFFSET = 2**31 - 1
"""The largest offset or position any read accepts (SQLite integers overflow at 2**63)."""
MAX_DESCRIPTION = 2000
"""Characters of a knowledge base's description."""
MAX_NOTE = 500
"""Characters of a snapshot's note."""
