"""Word review comments as Markdown footnotes: a mark where each was made, its text at the end.

mammoth (and so MarkItDown) leaves comments out unless asked; a comment's text is content ("check
this figure against the ledger") that a search should find and a reader should see next to the
words it is about. mammoth's HTML, with comment references styled as ``sup``, has a link where
each comment was made and a ``<dl>`` of the comments at the end; here the link becomes a footnote
mark ``[^comment-1]`` and the list becomes footnote definitions under a ``## Comments`` heading,
each with its author as Word shows it (read from ``word/comments.xml``: mammoth keeps only the
initials).
"""

from __future__ import annotations

import zipfile
from typing import Any, BinaryIO

__all__ = ["COMMENT_STYLE", "comment_authors", "comments_as_footnotes"]

COMMENT_STYLE = "comment-reference => sup"
"""The style-map line that makes mammoth write comments at all."""

_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_LINK = "#comment-"


def comment_authors(stream: BinaryIO) -> dict[str, str]:
    """Each comment's id -> its author, from the package's ``word/comments.xml`` ({} without)."""
    stream.seek(0)
    with zipfile.ZipFile(stream) as package:
        if "word/comments.xml" not in package.namelist():
            return {}
        xml = package.read("word/comments.xml")
    stream.seek(0)
    from lxml import etree

    root = etree.fromstring(xml, etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=True))
    return {
        str(comment.get(f"{_W}id")): " ".join(str(comment.get(f"{_W}author") or "").split())
        for comment in root.iter(f"{_W}comment")
    }


def comments_as_footnotes(html: str, authors: dict[str, str]) -> tuple[str, str]:
    """``html`` with each comment reference as a footnote mark, and the footnotes in Markdown.

    Returns ``(html, "")`` unchanged when the document has no comment.
    """
    if f'href="{_LINK}' not in html:
        return html, ""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(html, "html.parser")
    notes: dict[str, str] = {}  # comment id -> its footnote definition, in order of reference
    marks: dict[str, str] = {}
    for link in soup.select('a[id^="comment-ref-"]'):  # the references; their back links are a[href^="#comment-ref-"]
        comment_id = str(link["href"]).removeprefix(_LINK)
        if comment_id not in marks:
            marks[comment_id] = f"[^comment-{len(marks) + 1}]"
            notes[comment_id] = _definition(marks[comment_id], _text(soup, comment_id), authors.get(comment_id, ""))
        (link.parent if link.parent is not None and link.parent.name == "sup" else link).replace_with(marks[comment_id])
    for term in soup.select(f'dt[id^="{_LINK[1:]}"]'):
        if term.parent is not None and term.parent.name == "dl":
            term.parent.decompose()
    return str(soup), "## Comments\n\n" + "\n\n".join(notes.values())


def _text(soup: Any, comment_id: str) -> str:
    """The comment's text, its paragraphs joined; mammoth's back link left out."""
    term = soup.find("dt", id=f"{_LINK[1:]}{comment_id}")
    body = term.find_next_sibling("dd") if term is not None else None
    if body is None:
        return ""
    for back in body.select('a[href^="#comment-ref-"]'):
        back.decompose()
    return " ".join(body.get_text(" ").split())


def _definition(mark: str, text: str, author: str) -> str:
    return f"{mark}: " + ": ".join(part for part in (author, text) if part)
