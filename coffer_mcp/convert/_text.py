"""Passthrough: Markdown and plain text as they are; source code and data as fenced code."""

from __future__ import annotations

import re

from ._clean import normalize_newlines
from ._decode import decode_text
from ._places import Mapped, line_places

__all__ = ["CODE_LANGUAGES", "MARKDOWN_EXTENSIONS", "TEXT_EXTENSIONS", "PassthroughConverter"]

MARKDOWN_EXTENSIONS = frozenset({"md", "markdown"})
TEXT_EXTENSIONS = frozenset({"txt", "text", "rst", "log"})
# extension -> fence language tag. JSON and XML are here too: MarkItDown only passes them
# through as plain text, and unfenced they would render as paragraphs or raw HTML.
CODE_LANGUAGES = {
    "py": "python",
    "pyi": "python",
    "js": "javascript",
    "mjs": "javascript",
    "cjs": "javascript",
    "ts": "typescript",
    "tsx": "tsx",
    "jsx": "jsx",
    "go": "go",
    "rs": "rust",
    "java": "java",
    "kt": "kotlin",
    "kts": "kotlin",
    "c": "c",
    "h": "c",
    "cpp": "cpp",
    "cc": "cpp",
    "hpp": "cpp",
    "cs": "csharp",
    "rb": "ruby",
    "php": "php",
    "swift": "swift",
    "sh": "bash",
    "bash": "bash",
    "zsh": "zsh",
    "ps1": "powershell",
    "sql": "sql",
    "yaml": "yaml",
    "yml": "yaml",
    "toml": "toml",
    "ini": "ini",
    "cfg": "ini",
    "css": "css",
    "scss": "scss",
    "lua": "lua",
    "r": "r",
    "scala": "scala",
    "m": "objectivec",
    "pl": "perl",
    "dart": "dart",
    "ex": "elixir",
    "exs": "elixir",
    "hs": "haskell",
    "jl": "julia",
    "vue": "vue",
    "svelte": "svelte",
    "proto": "protobuf",
    "graphql": "graphql",
    "tf": "hcl",
    "json": "json",
    "jsonl": "json",
    "xml": "xml",
}

_BACKTICK_RUNS = re.compile(r"`{3,}")


class PassthroughConverter:
    """Markdown and text pass through unchanged (cleaning comes later); code gets a fence."""

    name = "passthrough"
    extensions = MARKDOWN_EXTENSIONS | TEXT_EXTENSIONS | frozenset(CODE_LANGUAGES)

    def can_handle(self, ext: str) -> bool:
        return ext in self.extensions

    def convert(self, data: bytes, filename: str) -> Mapped:
        """The text, each line at its own line of the file; code fenced under its file name."""
        text = normalize_newlines(decode_text(data, filename))
        ext = filename.rpartition(".")[2].lower()
        if ext not in CODE_LANGUAGES:
            return Mapped(text, line_places(text.count("\n") + 1))
        fenced = fence_code(text, filename, CODE_LANGUAGES[ext])
        if not fenced:
            return Mapped("", ())
        code_lines = text.rstrip("\n").count("\n") + 1
        return Mapped(fenced, (None, None, None, *line_places(code_lines), None))


def fence_code(code: str, filename: str, language: str) -> str:
    """Wrap ``code`` in a fence longer than any backtick run inside, under a ``# filename`` H1.

    The filename goes in a code span so Markdown characters in it (``__init__.py``) stay literal.
    An empty file stays empty so the registry can reject it.
    """
    if not code.strip():
        return ""
    longest = max((len(run) for run in _BACKTICK_RUNS.findall(code)), default=2)
    fence = "`" * (longest + 1)
    return f"# {_code_span(filename)}\n\n{fence}{language}\n{code.rstrip(chr(10))}\n{fence}\n"


def _code_span(text: str) -> str:
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    ticks = "`" * (longest + 1)
    padding = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{padding}{text}{padding}{ticks}"
