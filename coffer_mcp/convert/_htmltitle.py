"""A web page's own title: its ``<title>`` without the site's name, else its first heading.

Every page of a documentation site tends to share part of its ``<title>``: "Child process | Node.js
v20.20.2 Documentation", "os — … — Python 3.11.2 documentation", "Microsoft - Wikipedia", "Vec in
std::vec - Rust". The parts of the title split at separators (``|``, ``—``, `` - ``, ``·``…), and a
trailing ``(…)``, are dropped from either end while they name the site rather than the page:

1. a part equal to the page's ``og:site_name`` / ``application-name``;
2. a part with a word such as "documentation", "docs", "wiki", "API" that the page's first
   heading lacks;
3. a part beside which the rest of the title holds every word of the page's first heading;
4. a part that shares no word with the page's first heading while the rest of the title does.

What is left is the title; when nothing is (a ``<title>`` that only names the site), the page's
first heading is.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["first_heading_of", "page_title", "text_of"]

_HEADINGS = ["h1", "h2", "h3", "h4", "h5", "h6"]
_SEPARATOR = re.compile(r"(\s+(?:[|·•—–»]|-{1,2}|::)\s+)")
_PARENTHESIS = re.compile(r"^(.*\S)\s+\(([^()]+)\)$")
_WORD = re.compile(r"\w+")
_SITE_WORDS = frozenset(
    "documentation docs doc wiki wikipedia manual handbook reference api apis blog mdn github gitlab "
    "readthedocs devdocs".split()
)
_SPACES = re.compile(r"\s+")
_INVISIBLE = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u2060\ufeff"))


def text_of(element: Any) -> str:
    """The visible text of an element on one line (zero-width characters dropped)."""
    if element is None:
        return ""
    return _SPACES.sub(" ", element.get_text().translate(_INVISIBLE)).strip()


def first_heading_of(root: Any) -> Any:
    """The first ``h1``, else the first heading of any level, under ``root`` (None when none)."""
    return root.find("h1") or root.find(_HEADINGS)


def page_title(soup: Any, main: Any) -> str:
    """The page's own title ("" when it has none); ``main`` is its main content.

    ``<title>`` (else ``og:title``) without the site's name, else the first heading of ``main``,
    else the page's first ``h1``. Only ``main``'s heading is compared with the title: the page's
    first ``h1`` is often the site's banner.
    """
    lead = text_of(first_heading_of(main))  # a page's own heading, not a site banner's h1
    site = _meta(soup, "og:site_name") or _meta(soup, "application-name")
    for candidate in (text_of(soup.title), _meta(soup, "og:title")):
        if own := _without_site(candidate, site, lead):
            return own
    return lead or text_of(soup.find("h1"))


def _meta(soup: Any, name: str) -> str:
    tag = soup.find("meta", attrs={"property": name}) or soup.find("meta", attrs={"name": name})
    content = tag.get("content") if tag is not None else None
    return _SPACES.sub(" ", content).strip() if isinstance(content, str) else ""


def _without_site(title: str, site: str, lead: str) -> str:
    parts, separators = _parts(title)
    lead_words = _words(lead)
    while len(parts) > 1:
        if _names_site(parts[-1], parts[:-1], site, lead_words):
            parts.pop()
            separators.pop()
        elif _names_site(parts[0], parts[1:], site, lead_words):
            parts.pop(0)
            separators.pop(0)
        else:
            break
    rest = parts[0] + "".join(sep + part for sep, part in zip(separators, parts[1:], strict=True)) if parts else ""
    if _same(rest, site) or (_words(rest) & _SITE_WORDS and lead_words and not _words(rest) & lead_words):
        return ""  # the whole title names the site
    return rest


def _parts(title: str) -> tuple[list[str], list[str]]:
    pieces = _SEPARATOR.split(title)
    parts, separators = pieces[::2], pieces[1::2]
    if match := _PARENTHESIS.match(parts[-1]):  # "FileUploadBase (Apache Commons FileUpload 1.4 API)"
        parts[-1:] = [match.group(1), f"({match.group(2)})"]
        separators.append(" ")
    return [part.strip() for part in parts], separators


def _names_site(part: str, others: list[str], site: str, lead_words: set[str]) -> bool:
    words = _words(part)
    if _same(part, site) or (words & _SITE_WORDS) - lead_words:
        return True
    if not lead_words:
        return False
    if lead_words <= _words(" ".join(others)):  # the rest already names the page
        return True
    return not words & lead_words and any(_words(other) & lead_words for other in others)


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.casefold()))


def _same(a: str, b: str) -> bool:
    return bool(a) and a.casefold() == b.casefold()
