"""Web-page HTML made ready for Markdown: code kept as the page shows it, marks and media dropped.

- A ``<pre>`` becomes one plain-text block tagged with its language (``class="language-js"``,
  ``data-lang``, Sphinx's ``highlight-python3`` wrapper, GitHub's ``highlight-source-python``…),
  line-number gutters dropped; a ``<pre>`` holding several ``<code>`` variants (Node.js's CommonJS
  and ES module examples) becomes one block each. Inline ``<code>`` is left alone.
- trafilatura writes every ``<code>`` as ``<pre>``, even one word inside a sentence, and nests a
  code block in another: those are put back (``repair_extracted_code``).
- Heading permalinks (``#``, ``¶``, ``§``, ``🔗``, "Permalink", ``aria-hidden`` anchors) go; a
  link that is the whole heading is unwrapped.
- In main-content mode, images and other media go, and so do footnote marks and the links that
  cannot be followed from a Markdown file (relative ones: ``#section``, ``/wiki/Duck``,
  ``other.html``); their text stays.
"""

from __future__ import annotations

import re
from typing import Any

from coffer_mcp.store.markdown import split_fences

from ._htmltitle import text_of

__all__ = [
    "drop_empty_sections",
    "drop_footnote_marks",
    "drop_media",
    "drop_permalinks",
    "escape_tag_like_text",
    "fence_code",
    "repair_extracted_code",
    "title_heading",
    "unlink_relative",
]

HEADINGS = ["h1", "h2", "h3", "h4", "h5", "h6"]
_MARKS = frozenset({"", "#", "¶", "§", "🔗", "⚓", "link", "permalink", "anchor"})
_ANCHOR_CLASSES = frozenset(
    {"headerlink", "anchor", "hash-link", "mark", "permalink", "anchorjs-link", "header-anchor", "heading-anchor"}
)
_MARK_TITLES = ("permalink", "permanent link", "direct link", "link to this")
_LANGUAGE_CLASS = re.compile(r"^(?:language|lang|highlight-source|highlight)-([\w+#.-]+)$", re.IGNORECASE)
_FLAVOURS = frozenset({"cjs", "mjs"})  # Node.js: the CommonJS and ES-module variants of an example
_NO_LANGUAGE = frozenset({"default", "none", "text", "plain", "plaintext", "nohighlight", "notranslate"})
_GUTTERS = "pre .linenos, pre .lineno, pre .line-numbers, .linenodiv, td.gutter"
_MEDIA = ["img", "svg", "picture", "video", "audio", "iframe", "canvas", "object", "embed", "map"]
_FOOTNOTE_MARK = re.compile(r"^\[?(\d{1,4}|[a-z]|note \d{1,4})\]?$")
_ABSOLUTE = re.compile(r"^(?:[a-z][a-z0-9+.-]*:|//)", re.IGNORECASE)
_INLINE_PARENTS = frozenset({"p", "a", "span", "em", "strong", "b", "i", "code", "td", "th", "dt", *HEADINGS})
_TAG_LIKE = re.compile(r"<(?=[A-Za-z/!?])")
_HEADING_LINE = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]|$)")


def drop_permalinks(root: Any) -> None:
    """Remove heading and definition permalinks; unwrap a link that is a whole heading's text."""
    for link in root.find_all("a"):
        if link.decomposed:
            continue
        text = text_of(link).casefold()
        href = link.get("href")
        in_page = not isinstance(href, str) or not href or href.startswith("#")
        holder = link.find_parent([*HEADINGS, "dt"])
        title = str(link.get("title") or "").casefold()
        mark = text in _MARKS or text.startswith("permalink") or title.startswith(_MARK_TITLES)
        anchor = set(link.get("class") or []) & _ANCHOR_CLASSES or (holder is not None and in_page)
        if anchor and (mark or link.get("aria-hidden") == "true"):
            link.decompose()
        elif holder is not None and in_page and text == text_of(holder).casefold():
            link.unwrap()


def fence_code(soup: Any, root: Any) -> None:
    """Make each ``<pre>`` one plain-text block with its language in ``data-lang``."""
    for table in root.select("table.highlighttable"):  # Sphinx/Pygments line numbers beside the code
        code = table.select_one("td.code")
        if code is not None:
            table.replace_with(*code.contents)
    for gutter in root.select(_GUTTERS):
        gutter.decompose()
    for pre in root.find_all("pre"):
        if pre.decomposed or pre.find_parent("pre") is not None:
            continue
        codes = pre.find_all("code", recursive=False)
        blocks = codes if len(codes) > 1 else [pre]
        pre.replace_with(*[_plain_block(soup, block, pre) for block in blocks])


def _plain_block(soup: Any, block: Any, pre: Any) -> Any:
    for br in block.find_all("br"):
        br.replace_with("\n")
    new = soup.new_tag("pre")
    new.string = block.get_text()
    if language := _language(block, pre):
        new["data-lang"] = language
    return new


def _language(block: Any, pre: Any) -> str:
    places = [block, pre, pre.find("code"), *list(pre.parents)[:3]]
    for element in places:
        if element is None or not hasattr(element, "get"):
            continue
        for attribute in ("data-lang", "data-language"):
            value = element.get(attribute)
            if isinstance(value, str) and value.strip().lower() not in _NO_LANGUAGE:
                return value.strip().lower()
        classes = element.get("class") or []
        for name in classes:
            match = _LANGUAGE_CLASS.match(name)
            if match and match.group(1).lower() not in _NO_LANGUAGE:
                return next((flavour for flavour in classes if flavour in _FLAVOURS), match.group(1).lower())
    return "rust" if "rust" in (pre.get("class") or []) else ""  # rustdoc: <pre class="rust">


def escape_tag_like_text(root: Any) -> None:
    """Escape a ``<`` that would open an HTML tag in Markdown: prose such as "returns <string>"
    (Node.js's type names) would otherwise vanish when the Markdown is rendered."""
    from bs4.element import PreformattedString  # comments, CDATA, doctypes

    for text in root.find_all(string=_TAG_LIKE):
        if not isinstance(text, PreformattedString) and text.find_parent(["code", "pre"]) is None:
            text.replace_with(_TAG_LIKE.sub(r"\\<", text))


def repair_extracted_code(root: Any) -> None:
    """Undo trafilatura's code output: a ``<pre>`` holding only ``<pre>`` blocks is unwrapped, a
    one-line ``<pre>`` inside a sentence becomes inline ``<code>`` again."""
    for pre in root.find_all("pre"):
        children = [child for child in pre.contents if not isinstance(child, str) or child.strip()]
        if children and all(getattr(child, "name", None) == "pre" for child in children):
            pre.unwrap()
    for pre in root.find_all("pre"):
        if "\n" in pre.get_text().strip():
            continue
        parent = pre.parent
        beside = [c for c in parent.contents if c is not pre and (not isinstance(c, str) or c.strip())]
        if parent.name in _INLINE_PARENTS or (beside and parent.name != "body"):
            pre.name = "code"


def drop_media(root: Any) -> None:
    """Remove images and other embedded media (main content keeps text only)."""
    for element in root.find_all(_MEDIA):
        if not element.decomposed:
            element.decompose()


def drop_footnote_marks(root: Any) -> None:
    """Remove in-page links that are only a footnote number (Wikipedia's ``[12]``): noise in a
    passage, and the notes they point to are not kept."""
    for link in root.find_all("a", href=True):
        href = link["href"]
        if isinstance(href, str) and href.startswith("#") and _FOOTNOTE_MARK.match(link.get_text(strip=True)):
            link.decompose()


def unlink_relative(root: Any) -> None:
    """Keep only the text of links whose target is relative to the page (dead in a Markdown file)."""
    for link in root.find_all("a"):
        href = link.get("href")
        if not isinstance(href, str) or not _ABSOLUTE.match(href.strip()):
            link.unwrap()


def title_heading(soup: Any, root: Any, title: str) -> None:
    """Give ``root`` an ``h1`` naming the page when it has none.

    A first heading that is the title and the only one at its level becomes the ``h1``, every
    heading moving up as many levels (Node.js writes its module title as ``h2``); else the
    title is put first.
    """
    headings = root.find_all(HEADINGS)
    if any(heading.name == "h1" for heading in headings):
        return
    if headings and text_of(headings[0]).casefold() == title.casefold():
        top = int(headings[0].name[1])
        if all(int(heading.name[1]) > top for heading in headings[1:]):
            for heading in headings:
                heading.name = f"h{int(heading.name[1]) - top + 1}"
            return
    if title:
        h1 = soup.new_tag("h1")
        h1.string = title
        root.insert(0, h1)


def drop_empty_sections(markdown: str) -> str:
    """Remove headings left with nothing under them (a "References" whose list was dropped)."""
    lines: list[tuple[str, int]] = []  # (line, heading level; 0 blank, 7 content)
    for is_code, segment in split_fences(markdown):
        if is_code:
            lines.append((segment, 7))
            continue
        for line in segment.splitlines(keepends=True):
            match = _HEADING_LINE.match(line)
            lines.append((line, len(match.group(1)) if match else 7 if line.strip() else 0))
    kept: list[str] = []
    after = 0  # what follows: the level of the next heading kept, 7 for content, 0 for the end
    for line, level in reversed(lines):
        if level == 0:
            kept.append(line)
        elif level in (1, 7) or after > level:  # the title stays, even alone
            kept.append(line)
            after = level
    return "".join(reversed(kept))
