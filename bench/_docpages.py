"""Documentation pages whose source is known: the HTML a generator wrote, beside what it read.

Debian ships such pages: ``nodejs`` has the Node.js API reference as HTML next to the Markdown it
was generated from, ``python3.11-doc`` the Python library reference (Sphinx) with each page's
reStructuredText under ``_sources/``, ``mkdocs-doc`` and ``mkdocs-literate-nav-doc`` sites built
by MkDocs (its own theme, and Material) without their sources. A fixed sample of 17 pages per
site is converted in this process, and each output is measured against its source where there is
one, and on its own: code spans turned into code blocks in the middle of a sentence, headings
ending in a permalink mark, titles shared between pages.
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from statistics import fmean
from typing import Any

from bench import _convmetrics as m

__all__ = ["DOC_SETS", "DocSet", "doc_tables", "heading_marks", "inline_fences", "run_docs", "source_words"]


@dataclass(frozen=True, slots=True)
class DocSet:
    """Pages of one site: where they are, and where each page's source is (None: not shipped)."""

    name: str
    generator: str
    package: str
    root: Path
    pages: tuple[str, ...]
    source: Callable[[Path, str], Path | None] = lambda root, page: None
    source_format: str = ""


_NODE_PAGES = (
    "addons assert child_process console dns documentation events globals modules os path punycode "
    "querystring readline string_decoder timers url"
).split()
_PYTHON_PAGES = (
    "base64 bisect collections csv fnmatch functools glob hashlib heapq itertools json pathlib re secrets "
    "shutil tempfile textwrap"
).split()
_MKDOCS_PAGES = (
    "index getting-started user-guide/index user-guide/installation user-guide/writing-your-docs "
    "about/release-notes user-guide/choosing-your-theme user-guide/customizing-your-theme "
    "user-guide/localizing-your-theme user-guide/configuration user-guide/deploying-your-docs user-guide/cli "
    "dev-guide/api dev-guide/index dev-guide/themes dev-guide/plugins about/contributing"
).split()

DOC_SETS = {
    "node": DocSet(
        "node",
        "Node.js doc tool",
        "nodejs",
        Path("/usr/share/doc/nodejs/api"),
        tuple(f"{page}.html" for page in _NODE_PAGES),
        lambda root, page: root / page.replace(".html", ".md"),
        "markdown",
    ),
    "python": DocSet(
        "python",
        "Sphinx",
        "python3.11-doc",
        Path("/usr/share/doc/python3.11/html"),
        tuple(f"library/{page}.html" for page in _PYTHON_PAGES),
        lambda root, page: root / "_sources" / page.replace(".html", ".rst.txt"),
        "rest",
    ),
    "mkdocs": DocSet(
        "mkdocs", "MkDocs", "mkdocs-doc", Path("/usr/share/doc/mkdocs/html"), tuple(f"{p}.html" for p in _MKDOCS_PAGES)
    ),
    "mkdocs-material": DocSet(
        "mkdocs-material",
        "MkDocs Material",
        "mkdocs-literate-nav-doc",
        Path("/usr/share/doc/mkdocs-literate-nav-doc/html"),
        ("index.html", "reference.html"),
    ),
}

# -- measures ------------------------------------------------------------------------------------

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_HEADING_LINE = re.compile(r"^ {0,3}#{1,6}[ \t]+(.*?)[ \t]*$")
_MARK_END = re.compile(r"(?:[#¶§🔗]|\[[#¶§🔗]?\]\([^)]*\)|permalink)$", re.IGNORECASE)


def inline_fences(markdown: str, html: str) -> int:
    """Code spans of the page that came out as fenced blocks: one-line blocks holding the text of
    an inline ``<code>`` of ``html`` (and of no ``<pre>``), plus code fences opened inside a link
    (``[```popen(3)```](…)``). ``The `node:fs` module`` written as ``The\\n\\n```\\nnode:fs\\n```\\n\\nmodule``
    is one."""
    spans, blocks = _code_texts(html)
    lines = markdown.split("\n")
    count, index = 0, 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        end = next((j for j in range(index + 1, len(lines)) if lines[j].strip().startswith(opening.group(1))), None)
        if end is None:
            break
        body = [line.strip() for line in lines[index + 1 : end] if line.strip()]
        if len(body) == 1 and body[0] in spans and body[0] not in blocks:
            count += 1
        index = end + 1
    return count + markdown.count("[```")


def _code_texts(html: str) -> tuple[set[str], set[str]]:
    """The texts of a page's inline ``<code>`` elements, and of its ``<pre>`` blocks' lines."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(html, "lxml")
    blocks = {line.strip() for pre in soup.find_all("pre") for line in pre.get_text().split("\n")}
    spans = {code.get_text().strip() for code in soup.find_all("code") if code.find_parent("pre") is None}
    return spans, blocks


def heading_marks(markdown: str) -> int:
    """Headings whose text ends in a permalink mark (``#``, ``¶``, ``§``, ``🔗``, "Permalink")."""
    found, fenced = 0, False
    for line in markdown.split("\n"):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        heading = None if fenced else _HEADING_LINE.match(line)
        if heading and _MARK_END.search(heading.group(1)):
            found += 1
    return found


def fences(markdown: str) -> tuple[int, int]:
    """Fenced code blocks, and how many of them name a language."""
    opened = [match for line in markdown.split("\n") if (match := re.match(r"^ {0,3}(`{3,}|~{3,})(\S*)", line))]
    blocks = opened[::2]  # opening, closing, opening…
    return len(blocks), sum(1 for block in blocks if block.group(2))


# -- sources ---------------------------------------------------------------------------------------

_MD_REFERENCE = re.compile(r"^ {0,3}\[[^\]\n]+\]:\s*\S+.*$", re.MULTILINE)
_MD_REF_LINK = re.compile(r"\]\[[^\]\n]*\]")
_REST_EXPLICIT = re.compile(r"^(\s*)\.\.(?:\s+(?:([\w:-]+)::|(_[^:]*:|\|[^|]+\|)))?")
_REST_HIDDEN = frozenset({"index", "testsetup", "testcleanup", "include", "moduleauthor", "sectionauthor", "highlight"})
_REST_DIRECTIVE = re.compile(r"^\s*\.\. [\w:-]+::", re.MULTILINE)
_REST_OPTION = re.compile(r"^\s+:[\w-]+:(?: .*)?$", re.MULTILINE)
_REST_LINK = re.compile(r"`([^`<]*?)\s*<[^<>`]+>`_{1,2}")
_REST_ROLE = re.compile(r":[\w:.+-]+:`([^`]*)`")
_REST_TITLED = re.compile(r"^(.*?)\s*<[^<>]*>$", re.DOTALL)


def source_words(text: str, source_format: str) -> list[str]:
    """The words a reader sees of a page's source: Markdown without reference-link definitions,
    reStructuredText without directive names, options, index entries, comments and role names."""
    if source_format == "markdown":
        text = _MD_REF_LINK.sub("]", _MD_REFERENCE.sub("", text))
    elif source_format == "rest":
        text = _REST_OPTION.sub("", _rest_shown(text))
        text = _REST_LINK.sub(r"\1", _REST_DIRECTIVE.sub("", text))
        text = _REST_ROLE.sub(lambda match: _role_text(match.group(1)), text)
    return m.tokens(text)


def _rest_shown(text: str) -> str:
    """reST without the blocks a reader never sees: comments, labels, index entries, test set-up,
    hidden doctests (``:hide:``)."""
    lines = text.split("\n")
    shown: list[str] = []
    index = 0
    while index < len(lines):
        explicit = _REST_EXPLICIT.match(lines[index])
        if not explicit:
            shown.append(lines[index])
            index += 1
            continue
        indent = len(explicit.group(1))
        end = index + 1
        while end < len(lines) and (not lines[end].strip() or len(lines[end]) - len(lines[end].lstrip()) > indent):
            end += 1
        block = lines[index:end]
        name = explicit.group(2)
        hidden = (name is None) or name in _REST_HIDDEN or any(line.strip() == ":hide:" for line in block)
        if not hidden:
            shown.extend(block)
        index = end
    return "\n".join(shown)


def _role_text(content: str) -> str:
    """What Sphinx shows of a role: its title when it has one, the last part after ``~``."""
    titled = _REST_TITLED.match(content)
    if titled and titled.group(1):
        return titled.group(1)
    content = content.lstrip("!")
    return content.rsplit(".", 1)[-1] if content.startswith("~") else content


def source_headings(text: str, source_format: str) -> list[tuple[int, str]]:
    """Headings of the source: ATX headings of Markdown, underlined titles of reST."""
    if source_format == "markdown":
        return m.headings(text)
    lines = text.split("\n")
    found = []
    for above, line in itertools.pairwise(lines):
        underlined = re.fullmatch(r"([=\-~^\"'`#*+])\1{2,}", line) and len(line) >= len(above.strip())
        if underlined and above.strip() and not above[0].isspace():
            found.append((1, " ".join(source_words(above, "rest"))))
    return [(level, text) for level, text in found if text]


# -- the run ---------------------------------------------------------------------------------------


def run_docs(names: list[str], convert: Callable[[str, bytes], tuple[str, str]]) -> dict[str, Any]:
    """Convert each set's pages with ``convert(filename, data) -> (markdown, title)`` and measure them."""
    report: dict[str, Any] = {"sets": [], "pages": []}
    for name in names:
        doc_set = DOC_SETS[name]
        if not doc_set.root.is_dir():
            report["sets"].append(
                {"set": name, "skipped": f"{doc_set.root} is absent (apt-get install {doc_set.package})"}
            )
            continue
        rows = [_page(doc_set, page, convert) for page in doc_set.pages if (doc_set.root / page).is_file()]
        report["pages"].extend(rows)
        report["sets"].append(_summary(doc_set, rows))
    return report


def _page(doc_set: DocSet, page: str, convert: Callable[[str, bytes], tuple[str, str]]) -> dict[str, Any]:
    path = doc_set.root / page
    started = time.perf_counter()
    markdown, title = convert(path.name, path.read_bytes())
    fenced, with_language = fences(markdown)
    row: dict[str, Any] = {
        "set": doc_set.name,
        "page": page,
        "seconds": time.perf_counter() - started,
        "chars": len(markdown),
        "title": title,
        "inline_fences": inline_fences(markdown, path.read_text(encoding="utf-8", errors="replace")),
        "heading_marks": heading_marks(markdown),
        "headings": len(m.headings(markdown)),
        "fences": fenced,
        "fences_with_language": with_language,
    }
    source = doc_set.source(doc_set.root, page)
    if source is not None and source.is_file():
        text = source.read_text(encoding="utf-8", errors="replace")
        ref = source_words(text, doc_set.source_format)
        row["precision"], row["recall"] = m.word_precision_recall(m.tokens(markdown), ref)
        row["heading_recall"] = m.heading_recall(m.headings(markdown), source_headings(text, doc_set.source_format))
    return row


def _summary(doc_set: DocSet, rows: list[dict[str, Any]]) -> dict[str, Any]:
    titles = [row["title"] for row in rows]
    recalls = [row["recall"] for row in rows if row.get("recall") is not None]
    heading_recalls = [row["heading_recall"] for row in rows if row.get("heading_recall") is not None]
    fenced = sum(row["fences"] for row in rows)
    return {
        "set": doc_set.name,
        "generator": doc_set.generator,
        "pages": len(rows),
        "distinct_titles": len(set(titles)),
        "inline_fences": sum(row["inline_fences"] for row in rows),
        "heading_marks": sum(row["heading_marks"] for row in rows),
        "recall_mean": fmean(recalls) if recalls else None,
        "recall_min": min(recalls) if recalls else None,
        "heading_recall_mean": fmean(heading_recalls) if heading_recalls else None,
        "fences": fenced,
        "fences_with_language": sum(row["fences_with_language"] for row in rows),
        "seconds": sum(row["seconds"] for row in rows),
    }


def doc_tables(report: dict[str, Any]) -> str:
    """The report as Markdown: one row per set, then one per page."""

    def fmt(value: Any) -> str:
        return "–" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)

    lines = [
        "## Documentation pages",
        "",
        (
            "| set | generator | pages | distinct titles | inline fences | heading marks | recall mean (min) "
            "| heading recall | fences (with language) | s |"
        ),
        "|" + " --- |" * 10,
    ]
    for s in report["sets"]:
        if "skipped" in s:
            lines.append(f"| {s['set']} | skipped: {s['skipped']} |" + " |" * 8)
            continue
        lines.append(
            f"| {s['set']} | {s['generator']} | {s['pages']} | {s['distinct_titles']} | {s['inline_fences']} "
            f"| {s['heading_marks']} | {fmt(s['recall_mean'])} ({fmt(s['recall_min'])}) "
            f"| {fmt(s['heading_recall_mean'])} | {s['fences']} ({s['fences_with_language']}) | {fmt(s['seconds'])} |"
        )
    lines += ["", "| page | title | inline fences | heading marks | recall | heading recall | s |", "|" + " --- |" * 7]
    for r in report["pages"]:
        lines.append(
            f"| {r['set']}/{r['page']} | {r['title']} | {r['inline_fences']} | {r['heading_marks']} "
            f"| {fmt(r.get('recall'))} | {fmt(r.get('heading_recall'))} | {fmt(r['seconds'])} |"
        )
    return "\n".join(lines) + "\n"
