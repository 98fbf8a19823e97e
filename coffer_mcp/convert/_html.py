"""Web pages to Markdown: the main content by default (trafilatura), or the whole page.

A saved Wikipedia page is two thirds menus, language lists, navigation boxes and footers; all of
it would be indexed and returned as passages. trafilatura (Apache-2.0, no models) finds the main
content; it is handed back as HTML so headings, lists, links and tables convert the same way as
a whole page does (``html_to_markdown``). Pages where it finds nothing convert whole.
"""

from __future__ import annotations

import re

from ._base import engine_missing

__all__ = ["HtmlConverter"]

_MIN_MAIN_CHARS = 80
_H1 = re.compile(r"^# ", re.MULTILINE)


class HtmlConverter:
    """``main_content`` (default): trafilatura's main content; else the whole page."""

    extensions = frozenset({"html", "htm"})

    def __init__(self, *, main_content: bool = True) -> None:
        self.main_content = main_content
        self.name = "trafilatura/1" if main_content else "html-page/1"

    def can_handle(self, ext: str) -> bool:
        return ext in self.extensions

    def convert(self, data: bytes, filename: str) -> str:
        from ._htmltables import html_to_markdown

        html = _decode(data)
        if self.main_content:
            main, title = _main_content(html)
            if main:
                markdown = html_to_markdown(main, drop_footnote_marks=True)
                if title and not _H1.search(markdown):
                    markdown = f"# {title}\n\n{markdown}"
                return markdown
        return html_to_markdown(html)


def _decode(data: bytes) -> str:
    """The page's text: its BOM, ``<meta charset>`` or a guess, as a browser would read it."""
    from bs4.dammit import UnicodeDammit

    return UnicodeDammit(data, is_html=True).unicode_markup or data.decode("utf-8", errors="replace")


def _main_content(html: str) -> tuple[str, str]:
    """The page's main content as HTML and its title; ("", "") when too little is found."""
    try:
        import trafilatura
    except ImportError as exc:
        raise engine_missing("web-page extractor (trafilatura)", "html", "trafilatura") from exc
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
        return "", ""
    metadata = trafilatura.extract_metadata(html)
    return main, (metadata.title or "").strip() if metadata is not None else ""
