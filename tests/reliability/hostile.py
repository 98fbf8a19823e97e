"""Hostile strings: curated corpora and the hypothesis strategies built from them.

Curated lists feed the MCP and HTTP tests (one session, every case); the strategies mix the same
lists with generated text for the property tests of the service.
"""

from __future__ import annotations

from hypothesis import Phase, settings
from hypothesis import strategies as st

__all__ = [
    "ANY_CHARACTER",
    "CATASTROPHIC_PATTERNS",
    "FILENAMES",
    "KB_NAMES",
    "PROPERTY",
    "QUERIES",
    "filenames",
    "kb_names",
    "patterns",
    "queries",
]

# Seeded: CI draws the same examples on every run.
# No "explain" phase: it imports modules that raise DeprecationWarnings, and warnings are errors.
PROPERTY = settings(
    max_examples=80,
    deadline=None,
    derandomize=True,
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
)

# Every Unicode category, lone surrogates (Cs) and controls (Cc) included.
ANY_CHARACTER = st.characters(categories=["L", "M", "N", "P", "S", "Z", "C"])

TRAVERSAL = [
    "..",
    ".",
    "../notes",
    "../../etc/passwd",
    "notes/../other",
    "notes/docs",
    "/etc",
    "/",
    "\\..\\x",
    "notes\\..\\..",
    "~",
    "~root",
    "$HOME",
    "%2e%2e%2f",
    "..%2F..%2Fetc",
    "file:///etc/passwd",
]
CONTROL = [
    "a\x00b",
    "notes\x00",
    "\x00",
    "a\nb",
    "notes\r\n",
    "a\tb",
    "\x1b[31mred",
    "a\x7fb",
    "a\x85b",
    "\ud800",
    "a\udfffb",
]
RESERVED = ["con", "CON", "nul", "aux", "prn", "com1", "lpt9", "con.txt", "nul.kb", "com1.notes", "aux."]
LOOK_ALIKES = [
    "\uff4e\uff4f\uff54\uff45\uff53",  # fullwidth "notes"
    "n\u043etes",  # Cyrillic o
    "notes\u0301",  # combining acute accent
    "no\u0308tes",  # combining diaeresis (NFD)
    "NOTES",
    "Notes",
    "notes\u200b",
    "\u202enotes",
    "\ufb01le",
    "notes\ufeff",
    "n\u00f6tes",
]
SHAPES = ["", " ", "-", "_", "notes.", ".hidden", "a.", "a" * 65, "a" * 10_000, "*", "notes,other", " notes "]
KB_NAMES = TRAVERSAL + CONTROL + RESERVED + LOOK_ALIKES + SHAPES

EXTENSIONS = [
    ".md",
    ".txt",
    ".csv",
    ".MD",
    ".Md",
    "",
    ".exe",
    ".pdf.md",
    ".md.exe",
    ".\uff4d\uff44",
    ".m\x00d",
    ". md",
    ".md.",
    ".md ",
    ".md\u200b",
]
FILENAMES = [
    "../../../../etc/passwd.md",
    "..\\..\\windows\\system32\\evil.md",
    "/etc/hosts.md",
    "C:\\boot.ini.md",
    "notes/../../x.md",
    "a\x00b.md",
    "\x00.md",
    "line\nbreak.md",
    "tab\there.md",
    "\x1b[2Jclear.md",
    "con.md",
    "nul.md",
    "com1.txt",
    "lpt1",
    "." + "md",
    "..md",
    "...",
    ".md",
    " .md",
    "x" * 10_000 + ".md",
    "\u202egnp.md",
    "caf\u00e9.md",
    "cafe\u0301.md",
    "\ud800.md",
    "\uff0e\uff0e\uff0fx.md",
    "%2e%2e%2fx.md",
]

QUERIES = [
    '"',
    '""',
    '"tides',
    'tides"',
    "AND",
    "OR",
    "NOT",
    "NEAR",
    "NEAR(tides herons)",
    "tides AND herons",
    "tides OR",
    "OR tides",
    "NOT tides",
    "(tides",
    "tides)",
    "()",
    "*",
    "tides*",
    "*tides",
    "^tides",
    "title:tides",
    "body:tides",
    "{tides herons}",
    "tides + herons",
    "-tides",
    "tides -herons",
    "'; DROP TABLE documents; --",
    "1' OR '1'='1",
    '" OR 1=1 --',
    "tides\x00herons",
    "\x00",
    "\ud800",
    "tides\udfffherons",
    ";",
    "\\",
    "%",
    "_",
    "tides" * 400,
    " ".join(["tides"] * 300),
    "近邻",
    "近",
    "\u200b",
    "a" * 2000,
    "a" * 2001,
]

# Regexes that make a backtracking engine run for ages on the seeded line of 5,000 a's and a "!",
# and cannot match any other line (each needs 30 a's in a row, or ends where that line cannot).
CATASTROPHIC_PATTERNS = [
    r"a{30}(a+)+$",
    r"a{30}(a|aa)+$",
    r"a{30}(a*)*b",
    r"^(a|aa?){30,}$",
    r"a{30}(?:a+){2,}$",
    r"a{30}(a|a)*\d$",
    r"(.*a){30}$",
    r"a{30}(\w+\s?)*!x",
    r"a{30}(a+)+\1$",
]


def kb_names() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(KB_NAMES),
        st.text(ANY_CHARACTER, max_size=80),
        st.text(st.sampled_from("abz09.-_/\\\x00 ~*"), max_size=24),
        st.builds(lambda a, b: a + b, st.sampled_from(KB_NAMES), st.text(ANY_CHARACTER, max_size=8)),
    )


def filenames() -> st.SearchStrategy[str]:
    stems = st.one_of(st.sampled_from(KB_NAMES + FILENAMES), st.text(ANY_CHARACTER, max_size=60))
    return st.one_of(st.sampled_from(FILENAMES), st.builds(lambda s, e: s + e, stems, st.sampled_from(EXTENSIONS)))


def queries() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(QUERIES),
        st.text(ANY_CHARACTER, max_size=200),
        st.text(st.sampled_from("tideshron\"*():^-+{}ANDORNT '\\;"), max_size=60),
    )


def patterns() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(CATASTROPHIC_PATTERNS),
        st.text(ANY_CHARACTER, max_size=60),
        st.text(st.sampled_from("a()[]{}*+?|^$\\.-,0123456789:=!<>PpLwsdbk"), max_size=40),
    )
