"""Where a page's main content is, for the sites and generators documentation comes from.

A documentation page says where its content is: Sphinx's ``div.body[role=main]``, MkDocs
Material's ``article.md-content__inner``, Node.js's ``#apicontent``, rustdoc's
``section#main-content``… Taking that element keeps the page as its author wrote it (code spans,
code blocks with their language, definition lists, tables), where a general extractor
(trafilatura, for every other page) guesses and rewrites. Each site also names the furniture
inside its content: Wikipedia's navigation boxes, infobox, thumbnails and reference lists,
rustdoc's "source" links and "Run" buttons, MkDocs' edit button.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["SITES", "Site", "main_content"]


@dataclass(frozen=True, slots=True)
class Site:
    """A site or generator: the CSS selector of its main content and of the furniture inside it."""

    name: str
    main: str
    markers: tuple[str, ...]
    """Strings the page's HTML holds when it can be this site: a quick test before the selector."""
    furniture: str = ""
    appendices: frozenset[str] = frozenset()
    """Headings of sections that are not content (Wikipedia's "References", "External links")."""
    rewrite: Callable[[Any], None] | None = None
    """Rewrites the site's own markup in place into what converts well (Javadoc's grids)."""


_COLUMNS = {"two-column-summary": 2, "three-column-summary": 3, "four-column-summary": 4}


def _javadoc(main: Any) -> None:
    """Javadoc (9 and later) lays its summaries out as grids of ``div`` cells: made tables again;
    and its sections sit in one-item lists (``* ## Field Summary``): unwrapped."""
    from bs4 import BeautifulSoup

    for grid in main.select("div.summary-table"):
        columns = next((_COLUMNS[name] for name in grid.get("class") or [] if name in _COLUMNS), 0)
        cells = [cell.decode_contents().strip() for cell in grid.find_all("div", recursive=False)]
        if not columns or not cells:
            continue
        rows = ["".join(f"<td>{cell}</td>" for cell in cells[i : i + columns]) for i in range(0, len(cells), columns)]
        table = BeautifulSoup("<table>" + "".join(f"<tr>{row}</tr>" for row in rows) + "</table>", "html.parser")
        grid.replace_with(table.table)
    for listing in main.select("ul.summary-list, ul.details-list, ul.member-list, ul.block-list"):
        for item in listing.find_all("li", recursive=False):
            item.unwrap()
        listing.unwrap()


# Wikipedia's article is #mw-content-text less what sits beside or after the prose: boxes
# (infobox, sidebars, navigation boxes, maintenance notices), thumbnails and galleries (images
# are not kept), hatnotes ("Main article: …"), the table of contents, citation marks and the
# reference lists they point to.
_MEDIAWIKI_FURNITURE = (
    ".mw-editsection, sup.reference, .mw-cite-backlink, .reflist, .refbegin, ol.references, "
    ".mw-references-wrap, .navbox, .navbox-styles, .vertical-navbox, .sidebar, .infobox, .side-box, "
    ".portalbox, .authority-control, .ambox, .ombox, .tmbox, .hatnote, .metadata, .noprint, "
    ".shortdescription, .mw-empty-elt, #toc, .toc, figure, .thumb, .gallery, .catlinks, .printfooter, #coordinates"
)
# The standard appendices that follow an article's body, "See also" (related articles) aside.
_MEDIAWIKI_APPENDICES = frozenset(
    {
        "notes",
        "footnotes",
        "references",
        "citations",
        "sources",
        "bibliography",
        "works cited",
        "further reading",
        "external links",
    }
)
SITES = (
    Site(
        "mediawiki",
        "#mw-content-text > .mw-parser-output, #mw-content-text",
        ("mw-content-text",),
        _MEDIAWIKI_FURNITURE,
        _MEDIAWIKI_APPENDICES,
    ),
    Site("node", "#apicontent", ("apicontent",)),
    Site("mdn", "article.main-page-content", ("main-page-content",), "aside.metadata"),
    Site(
        "mkdocs-material", "article.md-content__inner", ("md-content__inner",), ".md-content__button, .md-source-file"
    ),
    Site("github", "article.markdown-body", ("markdown-body",)),
    Site("docusaurus", ".theme-doc-markdown, article[itemprop=blogPost]", ("theme-doc-markdown", "blogPost")),
    Site(
        "rustdoc",
        "section#main-content",
        ("main-content",),
        "a.test-arrow, .tooltip, .out-of-band, .rightside, .since, .srclink, summary.hideme, .notable-traits, "
        "#copy-path",
    ),
    Site(
        "sphinx",
        "div.body[role=main], div[itemprop=articleBody], article[role=main], article.bd-article",
        ("main", "articleBody", "bd-article"),
    ),
    Site("mkdocs", "div.col-md-9[role=main]", ("col-md-9",)),
    Site("javadoc", "main[role=main]", ("javadoc",), rewrite=_javadoc),
    Site("mdbook", "div#content > main", ("<main",)),
)
# Pages whose generator is a documentation tool, found by the general landmarks.
_DOC_GENERATOR = re.compile(
    r"sphinx|docutils|mkdocs|docusaurus|rustdoc|javadoc|mdbook|vitepress|vuepress|gitbook|doxygen|pkgdown|"
    r"jsdoc|typedoc|antora|starlight|nextra|mediawiki",
    re.IGNORECASE,
)
_LANDMARKS = Site("documentation", "[role=main], main", ("main",))
# Never content, on any site.
_FURNITURE = (
    "script, style, noscript, template, link, meta, button, nav, [role=navigation], form, input, select, "
    "textarea, footer"
)
_MIN_CHARS = 80
_HEADINGS = ["h1", "h2", "h3", "h4", "h5", "h6"]


def main_content(soup: Any, html: str) -> tuple[Any, Site] | None:
    """The main-content element of a page (``soup``, parsed from ``html``) from a known site or
    generator, furniture removed.

    None when the page is not one (or its content element is nearly empty): the caller falls
    back to a general extractor.
    """
    for site in SITES:
        if any(marker in html for marker in site.markers) and (found := _found(soup, site)) is not None:
            return found, site
    if _doc_generator(soup) and (found := _found(soup, _LANDMARKS)) is not None:
        return found, _LANDMARKS
    articles = soup.find_all("article")
    if _doc_generator(soup) and len(articles) == 1 and _enough(articles[0]):
        return articles[0], _LANDMARKS
    return None


def _found(soup: Any, site: Site) -> Any:
    element = soup.select_one(site.main)
    if element is None:
        return None
    for junk in element.select(", ".join(filter(None, (_FURNITURE, site.furniture)))):
        junk.decompose()
    if site.appendices:
        _drop_sections(element, site.appendices)
    if site.rewrite is not None:
        site.rewrite(element)
    return element if _enough(element) else None


def _drop_sections(element: Any, names: frozenset[str]) -> None:
    """Remove each section whose heading is one of ``names``: the heading (or the block wrapping
    it) and its siblings up to the next heading of the same or a higher level."""
    for heading in element.find_all(_HEADINGS):
        if heading.decomposed or _text(heading).casefold() not in names:
            continue
        level = int(heading.name[1])
        start = heading.parent if heading.parent is not element and _level(heading.parent) else heading
        doomed = [start]
        for sibling in start.next_siblings:
            found = _level(sibling)
            if found and found <= level:
                break
            doomed.append(sibling)
        for node in doomed:
            node.extract()


def _level(node: Any) -> int:
    """The level of the heading ``node`` is or wraps alone (MediaWiki's ``div.mw-heading``), else 0."""
    if getattr(node, "name", None) in _HEADINGS:
        return int(node.name[1])
    headings = node.find_all(_HEADINGS, recursive=False) if hasattr(node, "find_all") else []
    return int(headings[0].name[1]) if len(headings) == 1 else 0


def _text(element: Any) -> str:
    return " ".join(element.get_text(" ").split())


def _enough(element: Any) -> bool:
    return sum(ch.isalnum() for ch in element.get_text()) >= _MIN_CHARS


def _doc_generator(soup: Any) -> bool:
    for meta in soup.find_all("meta", attrs={"name": "generator"}):
        content = meta.get("content")
        if isinstance(content, str) and _DOC_GENERATOR.search(content):
            return True
    return False
