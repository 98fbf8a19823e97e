"""Web pages convert like their source: documentation pages and Wikipedia articles.

The fixtures are trimmed copies of real pages (fixtures/README.md): a Node.js API page, a Python
library page (Sphinx) and an MkDocs Material page. Tests that read the Node.js documentation
Debian installs (/usr/share/doc/nodejs/api) or the shared corpus (../shared) skip when absent.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench import _convmetrics as m
from bench import _docpages
from coffer_mcp.convert import Conversion, convert

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
NODE_API = Path("/usr/share/doc/nodejs/api")
CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "eval" / "docs-multiformat"


def convert_fixture(name: str) -> Conversion:
    return convert(name, (FIXTURES / name).read_bytes())


def convert_page(html: str, name: str = "page.html") -> Conversion:
    return convert(name, html.encode("utf-8"))


def fenced_blocks(markdown: str) -> list[tuple[str, str]]:
    """(info string, body) of each fenced code block."""
    return re.findall(r"^```(\S*)\n(.*?)\n```$", markdown, re.MULTILINE | re.DOTALL)


def heading_lines(markdown: str) -> list[str]:
    return [line for line in markdown.split("\n") if re.match(r"#{1,6} ", line)]


def test_inline_code_in_a_node_page_stays_inline_and_a_link_around_code_stays_one_link() -> None:
    markdown = convert_fixture("docs_node.html").markdown

    assert "The `node:child_process` module provides the ability to spawn subprocesses in" in markdown
    assert "[`popen(3)`](http://man7.org/linux/man-pages/man3/popen.3.html)" in markdown
    assert "By default, pipes for `stdin`, `stdout`, and `stderr` are established between" in markdown
    assert _docpages.inline_fences(markdown, (FIXTURES / "docs_node.html").read_text(encoding="utf-8")) == 0


def test_each_variant_of_a_node_example_is_one_fenced_block_in_its_language() -> None:
    blocks = fenced_blocks(convert_fixture("docs_node.html").markdown)

    assert [info for info, _ in blocks] == ["cjs", "mjs"]
    assert blocks[0][1].startswith("const { spawn } = require('node:child_process');")
    assert blocks[1][1].startswith("import { spawn } from 'node:child_process';")
    assert not any("```" in body for _, body in blocks)  # no fence inside a fence


def test_a_node_page_is_titled_by_its_module_and_its_headings_keep_no_permalink_mark() -> None:
    conversion = convert_fixture("docs_node.html")

    assert conversion.title == "Child process"  # not the site's "Node.js v20.20.2 documentation"
    assert heading_lines(conversion.markdown) == [
        "# Child process",
        "## Asynchronous process creation",
        "### `child_process.exec(command[, options][, callback])`",
    ]
    assert "Node.js v20.20.2 documentation" not in conversion.markdown
    assert "Usage and example" not in conversion.markdown  # the sidebar of every page


def test_a_node_page_keeps_its_history_table_and_its_type_names() -> None:
    markdown = convert_fixture("docs_node.html").markdown

    assert "| Version | Changes |\n| --- | --- |\n| v15.4.0 | AbortSignal support was added. |" in markdown
    # "<string>" would be an HTML tag to a Markdown renderer: escaped, it shows as written.
    assert "[\\<string>](https://developer.mozilla.org/" in markdown


def test_a_sphinx_page_keeps_its_definition_lists_tables_and_code_languages_without_pilcrows() -> None:
    conversion = convert_fixture("docs_sphinx.html")
    markdown = conversion.markdown

    assert conversion.title == "fnmatch — Unix filename pattern matching"
    assert "¶" not in markdown
    assert "| Pattern | Meaning |\n| --- | --- |\n| `*` | matches everything |" in markdown
    assert "\nfnmatch.fnmatch(*filename*, *pattern*)\n:   Test whether the *filename* string matches" in markdown
    assert "\n    ```python3\n    import fnmatch\n    import os\n" in markdown  # inside its definition
    assert "Python 3.11.2 documentation" not in markdown
    assert "Previous topic" not in markdown  # the sidebar


def test_a_mkdocs_material_page_drops_its_edit_button_and_heading_marks() -> None:
    markdown = convert_fixture("docs_mkdocs.html").markdown

    assert heading_lines(markdown) == ["# mkdocs-literate-nav", "## Usage"]
    assert "Edit this page" not in markdown
    assert "Made with" not in markdown
    assert fenced_blocks(markdown)[0][1] == "pip install mkdocs-literate-nav"


@pytest.mark.parametrize(
    ("title", "heading", "expected"),
    [
        ("Child process | Node.js v20.20.2 Documentation", "Child process", "Child process"),
        ("Index | Node.js v20.20.2 Documentation", "", "Index"),
        ("About this documentation | Node.js v20.20.2 Documentation", "About this documentation", None),
        (
            "os — Miscellaneous operating system interfaces — Python 3.11.2 documentation",
            "os — Miscellaneous operating system interfaces¶",
            "os — Miscellaneous operating system interfaces",
        ),
        ("Writing Your Docs - MkDocs", "Writing your docs", "Writing your docs"),  # the heading, made the h1
        ("Vec in std::vec - Rust", "Struct std::vec::Vec", "Vec in std::vec"),
        (
            "What is Ownership? - The Rust Programming Language",
            "What Is Ownership?",
            "What Is Ownership?",
        ),
        (
            "FileUploadBase (Apache Commons FileUpload 1.4 API)",
            "Class FileUploadBase",
            "FileUploadBase",
        ),
        ("Microsoft - Wikipedia", "History", "Microsoft"),
        ("Array - JavaScript | MDN", "Array", "Array"),
        ("Array - JavaScript | MDN", "Description", "Array - JavaScript"),
        ("GitHub - nodejs/node: Node.js JavaScript runtime", "Node.js", "nodejs/node: Node.js JavaScript runtime"),
        (
            "Does Model and Inference Parameter Matter in LLM Applications? - A Case Study for MATH | AutoGen",
            "Does Model and Inference Parameter Matter in LLM Applications? - A Case Study for MATH",
            "Does Model and Inference Parameter Matter in LLM Applications? - A Case Study for MATH",
        ),
    ],
)
def test_a_page_is_titled_by_its_title_without_the_site_name(title: str, heading: str, expected: str | None) -> None:
    """The content below has no h1, so the title comes from ``<title>``; ``heading`` is the
    content's first heading, which tells the page's words from the site's (a heading that is the
    title becomes the page's h1, as written)."""
    page = (
        f"<html><head><title>{title}</title></head><body><header><h1>Site banner</h1></header>"
        f"<main><article><h2>{heading}</h2><p>{'Some words of the page itself. ' * 8}</p></article></main>"
        "</body></html>"
    )
    conversion = convert_page(page)

    assert conversion.title == (expected or title.split(" | ", maxsplit=1)[0])


def test_a_page_whose_title_only_names_the_site_is_titled_by_its_heading() -> None:
    page = (
        '<html><head><title>Acme Documentation</title><meta property="og:site_name" content="Acme Documentation">'
        "</head><body><main><article><h2>Installing the widget</h2>"
        f"<p>{'Unpack the widget and plug it in. ' * 8}</p></article></main></body></html>"
    )

    assert convert_page(page).title == "Installing the widget"


def test_an_ordinary_page_keeps_inline_code_inline_and_one_fence_per_code_block() -> None:
    """No generator named: trafilatura finds the content, and its rewriting of every <code> as
    <pre> (one word in a sentence became a code block, blocks were nested) is undone."""
    prose = (
        "<p>Run <code>make check</code> before each commit, and "
        "<a href='https://example.org/ci'>read <code>ci.yml</code></a> first. "
    )
    page = (
        "<html><head><title>Working on the kiln firmware</title></head><body>"
        "<nav><a href='/'>Home</a> <a href='/blog'>Blog</a></nav><article><h1>Working on the kiln firmware</h1>"
        + prose
        * 3
        + "</p><pre><code class='language-bash'>make check\nmake flash</code></pre>"
        "<p>The kiln controller reads its thermocouple every second and logs the curve.</p>"
        "</article><footer>Copyright the kiln people</footer></body></html>"
    )
    markdown = convert_page(page).markdown

    assert "Run `make check` before each commit, and [read `ci.yml`](https://example.org/ci) first." in markdown
    assert [body for _, body in fenced_blocks(markdown)] == ["make check\nmake flash"]
    assert markdown.count("```") == 2


def test_links_relative_to_the_page_keep_their_text_and_absolute_links_stay() -> None:
    page = (
        "<html><head><title>Kiln notes</title><meta name='generator' content='Sphinx 7.2'></head><body>"
        "<div class='body' role='main'><h1>Kiln notes</h1><p>See <a href='firing.html#cone'>the cone chart</a>, "
        "the <a href='#glaze'>glaze section</a> and <a href='https://example.org/kilns'>the kiln makers</a>. "
        f"{'The kiln is fired slowly. ' * 6}</p></div></body></html>"
    )
    markdown = convert_page(page).markdown

    assert "See the cone chart, the glaze section and [the kiln makers](https://example.org/kilns)." in markdown


@pytest.mark.skipif(not NODE_API.is_dir(), reason=f"{NODE_API} is absent (apt-get install nodejs)")
def test_node_api_pages_convert_like_their_markdown_source() -> None:
    pages = ["path", "os", "querystring", "string_decoder", "punycode"]
    titles = []
    for page in pages:
        html = (NODE_API / f"{page}.html").read_text(encoding="utf-8")
        conversion = convert_page(html, f"{page}.html")
        source = _docpages.source_words((NODE_API / f"{page}.md").read_text(encoding="utf-8"), "markdown")
        titles.append(conversion.title)

        assert m.word_precision_recall(m.tokens(conversion.markdown), source)[1] >= 0.97, page
        assert _docpages.inline_fences(conversion.markdown, html) == 0, page
        assert _docpages.heading_marks(conversion.markdown) == 0, page
    assert len(set(titles)) == len(pages)


@pytest.mark.skipif(not CORPUS.is_dir(), reason=f"shared corpus not present at {CORPUS}")
def test_a_wikipedia_article_converts_to_its_body_without_boxes_or_reference_lists() -> None:
    html = (CORPUS / "test_wikipedia.html").read_text(encoding="utf-8")
    conversion = convert_page(html, "test_wikipedia.html")
    markdown = conversion.markdown
    body = m.body_tokens(html)
    assert body is not None

    assert conversion.title == "Microsoft"
    assert len(markdown.encode("utf-8")) <= 63_000
    assert m.word_precision_recall(m.tokens(markdown), body)[1] >= 0.99
    assert "## History" in markdown
    assert "## See also" in markdown
    assert "## References" not in markdown
    assert "## External links" not in markdown
    assert "Retrieved" not in markdown  # citations
    assert "Authority control" not in markdown  # navigation boxes
    assert "](/wiki/" not in markdown
