"""Web pages to Markdown: the main content by default, or the whole page.

A saved Wikipedia page is two thirds menus, language lists, navigation boxes and footers, and a
documentation page has a sidebar of every other page; all of it would be indexed and returned as
passages. Pages of the sites and generators documentation comes from (Sphinx, MkDocs, Docusaurus,
Node.js, rustdoc, mdBook, GitHub, MDN, Wikipedia…) say where their content is (``_htmlmain``);
for any other page trafilatura (Apache-2.0, no models) finds it. Either way the content is
tidied as HTML (``_htmltidy``: code blocks with their language, permalinks dropped) and converts
the way a whole page does (``html_to_markdown``), under the page's own title (``_htmltitle``).
Pages where nothing is found convert whole.
"""

from __future__ import annotations

from typing import Any

from ._base import engine_missing

__all__ = ["HtmlConverter"]

_MIN_MAIN_CHARS = 80


class HtmlConverter:
    """``main_content`` (default): the page's main content; else the whole page."""

    extensions = frozenset({"html", "htm"})

    def __init__(self, *, main_content: bool = True) -> None:
        self.main_content = main_content
        self.name = "html-main/2" if main_content else "html-page/2"

    def can_handle(self, ext: str) -> bool:
        return ext in self.extensions

    def convert(self, data: bytes, filename: str) -> str:
        from bs4 import BeautifulSoup

        from ._htmlmain import main_content

        html = _decode(data)
        page = BeautifulSoup(html, "lxml")
        if not self.main_content:
            return _markdown(page, page.body or page, main=False)
        found = main_content(page, html)
        if found is not None:
            return _markdown(page, found[0], main=True)
        if extracted := _extracted(html):
            return _markdown(page, extracted, main=True)
        return _markdown(page, page.body or page, main=False)


def _decode(data: bytes) -> str:
    """The page's text: its BOM, ``<meta charset>`` or a guess, as a browser would read it."""
    from bs4.dammit import UnicodeDammit

    return UnicodeDammit(data, is_html=True).unicode_markup or data.decode("utf-8", errors="replace")


def _markdown(page: Any, root: Any, *, main: bool) -> str:
    """Markdown of ``root`` (a part of ``page``, or trafilatura's extract of it)."""
    from ._htmltables import html_to_markdown
    from ._htmltidy import (
        drop_empty_sections,
        drop_footnote_marks,
        drop_media,
        drop_permalinks,
        escape_tag_like_text,
        fence_code,
        title_heading,
        unlink_relative,
    )
    from ._htmltitle import page_title

    drop_permalinks(root)
    fence_code(page, root)
    escape_tag_like_text(root)
    if main:
        drop_footnote_marks(root)
        drop_media(root)
        unlink_relative(root)
    title_heading(page, root, page_title(page, root))
    markdown = html_to_markdown(root)
    return drop_empty_sections(markdown) if main else markdown


def _extracted(html: str) -> Any:
    """trafilatura's main content of the page as a parsed ``<body>``; None when too little is found."""
    try:
        import trafilatura
    except ImportError as exc:
        raise engine_missing("web-page extractor (trafilatura)", "html", "trafilatura") from exc
    from bs4 import BeautifulSoup

    from ._htmltidy import repair_extracted_code

    main = (
        trafilatura.extract(
            html,
            output_format="html",
            include_links=True,
            include_tables=True,
            include_formatting=True,
            include_images=False,
            include_comments=False,
            favor_recall=True,
        )
        or ""
    )
    if sum(ch.isalnum() for ch in main) < _MIN_MAIN_CHARS:
        return None
    body = BeautifulSoup(main, "html.parser")  # as written: a <pre> inside a <p> stays there
    repair_extracted_code(body)
    return body.body or body
