"""The viewer in a real headless Chromium.

Token login (URL and login page), KBs, title filter, a document, search, open in editor.

Screenshots go to ``tmp_path/screenshots`` and, when ``COFFER_TEST_ARTIFACTS`` is set, to
``$COFFER_TEST_ARTIFACTS/web-viewer`` as well.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coffer_mcp import Coffer, load_settings
from tests.conftest import FIXTURES
from tests.fakes import HashEmbedder
from tests.web.cdp import CDPError, Page, WebSocket, launch, stop
from tests.web.conftest import TOKEN
from tests.web.support import Recorder, Seeded, make_coffer, running, seed

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="the recording opener is a POSIX script")


def find_browser() -> str:
    for name in BROWSERS:
        if found := shutil.which(name):
            return found
    pytest.skip("Chromium is not installed (Debian: apt-get install chromium; .ci/run does it)")


class Shots:
    """Screenshots, kept under tmp_path and copied to $COFFER_TEST_ARTIFACTS when set."""

    def __init__(self, page: Page, folder: Path) -> None:
        self.page = page
        self.folder = folder
        extra = os.environ.get("COFFER_TEST_ARTIFACTS")
        self.artifacts = Path(extra) / "web-viewer" if extra else None

    def take(self, name: str) -> Path:
        path = self.page.screenshot(self.folder / f"{name}.png")
        assert path.stat().st_size > 1000
        if self.artifacts is not None:
            self.artifacts.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, self.artifacts / path.name)
        return path


@pytest.fixture
def browser_page(tmp_path: Path) -> Iterator[Page]:
    process, url = launch(find_browser(), tmp_path / "chromium-profile")
    ws = WebSocket(url)
    try:
        yield Page(ws)
    finally:
        ws.close()
        stop(process)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Seeded, Recorder, Path]]:
    recorder = Recorder(tmp_path / "recorder")
    with make_coffer(tmp_path / "home", editor=recorder.command) as service:
        seeded = seed(service, extra_docs=10)
        with running(service, token=TOKEN) as url:
            yield url, seeded, recorder, service.paths.kb("notes").docs
    recorder.close()


def click(page: Page, selector: str) -> None:
    page.evaluate(f"document.querySelector({json.dumps(selector)}).click()")


def type_into(page: Page, selector: str, text: str) -> None:
    page.evaluate(f"""(() => {{
        const input = document.querySelector({json.dumps(selector)});
        input.focus();
        input.value = {json.dumps(text)};
        input.dispatchEvent(new Event("input", {{ bubbles: true }}));
    }})()""")


def count(selector: str) -> str:
    return f"document.querySelectorAll({json.dumps(selector)}).length"


def text_of(selector: str) -> str:
    return f"((document.querySelector({json.dumps(selector)}) || {{}}).textContent || '')"


def shown(selector: str) -> str:
    """JavaScript: whether the element is on the page and laid out (not hidden, not display: none)."""
    return f"((el) => !!el && el.getClientRects().length > 0)(document.querySelector({json.dumps(selector)}))"


def open_viewer(page: Page, url: str, kbs: int) -> None:
    page.goto(f"{url}/?token={TOKEN}")
    page.wait_for(f"{count('#kb-list a')} === {kbs}")


def search_in_viewer(page: Page, kb: str, query: str) -> None:
    page.evaluate(f"location.hash = {json.dumps(f'#/kb/{kb}/search/{query}')}")
    page.wait_for(f"!document.querySelector('#results').hidden && {text_of('#results h1')}.endsWith('“{query}”')")


def test_a_person_browses_filters_reads_searches_and_opens_a_document_in_the_viewer(
    browser_page: Page, served: tuple[str, Seeded, Recorder, Path], tmp_path: Path
) -> None:
    url, seeded, recorder, docs = served
    page = browser_page
    shots = Shots(page, tmp_path / "screenshots")

    # The token once in the address: the server swaps it for a cookie and drops it from the URL.
    page.goto(f"{url}/?token={TOKEN}")
    assert page.evaluate("location.search") == ""
    page.wait_for(f"{count('#kb-list a')} === 2")
    shots.take("01-knowledge-bases")

    click(page, '#kb-list a[data-kb="notes"]')
    page.wait_for(f"{count('#doc-list a')} === 13 && !document.querySelector('#kb-meta').hidden")
    assert "13 documents" in page.evaluate(text_of("#kb-meta"))

    type_into(page, "#doc-filter", "alpha")
    page.wait_for(f"{count('#doc-list a')} === 1")
    assert "Alpha guide" in page.evaluate(text_of("#doc-list"))
    shots.take("02-filtered")

    click(page, "#doc-list a")
    page.wait_for(f"{text_of('#doc-title')} === 'Alpha guide' && {count('#doc-body table')} === 1")
    body = page.evaluate("""(() => ({
        h2: [...document.querySelectorAll('#doc-body h2')].map(h => h.textContent),
        strong: document.querySelector('#doc-body strong').textContent,
        items: document.querySelectorAll('#doc-body ol > li').length,
        nested: document.querySelectorAll('#doc-body ol ul li').length,
        link: document.querySelector('#doc-body a').href,
        code: document.querySelector('#doc-body pre code').textContent,
        fencedTags: document.querySelectorAll('#doc-body pre b').length,
        right: document.querySelector('#doc-body td.align-right').textContent,
        quote: document.querySelector('#doc-body blockquote').textContent.trim(),
        path: document.querySelector('#doc-path').textContent,
    }))()""")
    assert body["h2"] == ["Install"]
    assert body["strong"] == "Markdown"
    assert body["items"] == 2
    assert body["nested"] == 1
    assert body["link"] == "https://example.org/docs"
    assert body["code"] == 'print("hello <b>fenced</b>")'
    assert body["fencedTags"] == 0
    assert body["right"] == "fast"
    assert body["quote"] == "A quoted line about retrieval."
    assert body["path"] == str(docs / f"{seeded.alpha}.md")
    shots.take("03-document")

    # A hostile document: its HTML shows as text, its script links are dead.
    page.evaluate(f"location.hash = '#/kb/notes/doc/{seeded.hostile}'")
    page.wait_for(f"{text_of('#doc-title')} === 'Hostile page' && {text_of('#doc-body')}.includes('bold tag')")
    hostile = page.evaluate("""(() => ({
        pwned: window.__pwned === undefined ? null : window.__pwned,
        live: document.querySelectorAll('#doc-body script, #doc-body img, #doc-body b').length,
        links: [...document.querySelectorAll('#doc-body a')].map(a => a.getAttribute('href')),
        text: document.querySelector('#doc-body').textContent,
    }))()""")
    assert hostile["pwned"] is None
    assert hostile["live"] == 0
    assert hostile["links"] == []
    assert '<img src=x onerror="window.__pwned = 2">' in hostile["text"]
    assert "<b>bold tag</b>" in hostile["text"]
    shots.take("04-hostile-document-as-text")

    page.evaluate("document.querySelector('#search-scope').value = 'notes'")
    type_into(page, "#search-input", "hybrid vector")
    page.evaluate("document.querySelector('#search-form').requestSubmit()")
    page.wait_for(f"!document.querySelector('#results').hidden && {count('#results .passage')} >= 1")
    assert "Beta notes on vector search" in page.evaluate(text_of("#results"))
    assert page.evaluate(count("#results mark")) >= 1
    shots.take("05-search")

    click(page, "#results .passage a")
    page.wait_for(f"{text_of('#doc-title')} === 'Beta notes on vector search'")

    click(page, "#open-doc")
    argv = recorder.wait_call()
    assert argv == [os.path.realpath(docs / f"{seeded.beta}.md")]
    page.wait_for(f"!document.querySelector('#toast').hidden && {text_of('#toast')}.includes('Opened')")
    shots.take("06-opened-in-editor")

    assert page.console == [], page.console


def test_a_search_result_says_where_the_documents_other_matches_are(browser_page: Page, tmp_path: Path) -> None:
    # More matching documents than the viewer's ten results: one passage per document, the other
    # matches of a document folded into its best passage, and the viewer says where they are.
    tuning = "Hybrid weights decide how much the vector side counts against the keyword side. " * 14
    long_doc = f"# Tuning hybrid vector search\n\nHybrid vector search, first words.\n\n## Weights\n\n{tuning}\n"
    page = browser_page
    with make_coffer(tmp_path / "home") as service:
        service.create_kb("notes", "Notes")
        service.add_document("notes", "tuning.md", long_doc)
        for i in range(10):
            service.add_document("notes", f"note-{i}.md", f"# Note {i}\n\nA hybrid vector search note, number {i}.\n")
        with running(service, token=TOKEN) as url:
            page.goto(f"{url}/?token={TOKEN}")
            page.wait_for(f"{count('#kb-list a')} === 1")
            page.evaluate("location.hash = '#/kb/notes/search/hybrid vector'")
            page.wait_for(f"!document.querySelector('#results').hidden && {count('#results .passage')} === 10")
            folded = page.evaluate(
                "[...document.querySelectorAll('#results .passage')]"
                ".filter(li => li.querySelector('.more'))"
                ".map(li => [li.querySelector('.title').textContent, li.querySelector('.more').textContent])"
            )
    ((title, more),) = folded
    assert title == "Tuning hybrid vector search"
    assert re.fullmatch(r"2 more matching passages in this document \(#\d+, #\d+\)", more), more
    assert page.console == [], page.console


PASSAGE_DOCS = {
    # A passage that opens with a fence: code, with "process" marked and "subprocess" not.
    "runner.md": "# Runner\n\n```sh\nprocess --all\nsubprocess start\n```\n",
    # A table and a list: formatted, every form of the word marked whatever its case.
    "tools.md": "# Tools\n\n| tool | use |\n|---|---|\n| Process | counts the runs |\n\n"
    "The **processes** we keep:\n\n- one process\n- another\n",
    # A fence left open at the passage's end: code to the end, the text before it a paragraph.
    "open.md": "# Open\n\nA process starts here.\n\n```python\nprint('process')\n",
    # Markup and script links in a passage: shown as text, never live.
    "hostile.md": '# Hostile\n\n<script>window.__pwned = 1</script>\n<img src=x onerror="window.__pwned = 2">\n\n'
    "The process of [bad](javascript:window.__pwned=3) and <b>bold</b>.\n",
}

PASSAGES = """(() => {
    const byTitle = {};
    for (const li of document.querySelectorAll('#results .passage')) {
        const body = li.querySelector('.text');
        byTitle[li.querySelector('.title').textContent] = {
            text: body.textContent,
            marks: [...body.querySelectorAll('mark')].map((m) => m.textContent),
            code: [...body.querySelectorAll('pre code')].map((c) => c.textContent),
            codeMarks: [...body.querySelectorAll('pre code mark')].map((m) => m.textContent),
            paragraphs: [...body.querySelectorAll('p')].map((p) => p.textContent),
            cells: [...body.querySelectorAll('table td')].map((c) => c.textContent),
            items: [...body.querySelectorAll('ul > li')].map((c) => c.textContent),
            strong: [...body.querySelectorAll('strong')].map((c) => c.textContent),
        };
    }
    return {
        byTitle,
        live: document.querySelectorAll('#results :is(script, img, b, a[href^="javascript"])').length,
        pwned: window.__pwned === undefined ? null : window.__pwned,
    };
})()"""


def test_search_passages_show_as_formatted_markdown_with_the_querys_words_marked_whole(
    browser_page: Page, tmp_path: Path
) -> None:
    page = browser_page
    shots = Shots(page, tmp_path / "screenshots")
    with make_coffer(tmp_path / "home") as service:
        service.create_kb("notes", "Notes")
        for name, body in PASSAGE_DOCS.items():
            service.add_document("notes", name, body)
        with running(service, token=TOKEN) as url:
            open_viewer(page, url, kbs=1)
            search_in_viewer(page, "notes", "the Process")
            page.wait_for(f"{count('#results .passage')} === 4")
            shots.take("10-passages-as-markdown")
            found = page.evaluate(PASSAGES)
            api = page.evaluate("fetch('/api/v1/knowledge_bases/notes/search?q=the%20Process').then((r) => r.json())")
    # The server says which words match as its index analysed the query: stemmed, without "the".
    assert sorted(api["highlight"]) == ["process", "processes"]
    passages = found["byTitle"]
    assert not any("```" in p["text"] for p in passages.values())
    assert passages["Runner"]["code"] == ["process --all\nsubprocess start"]
    assert passages["Runner"]["marks"] == ["process"]  # not inside "subprocess"
    assert passages["Tools"]["cells"] == ["Process", "counts the runs"]
    assert passages["Tools"]["items"] == ["one process", "another"]
    assert passages["Tools"]["strong"] == ["processes"]
    assert passages["Tools"]["marks"] == ["Process", "processes", "process"]  # "The" is a stopword
    assert passages["Open"]["paragraphs"] == ["A process starts here."]
    assert passages["Open"]["code"] == ["print('process')"]
    assert passages["Open"]["codeMarks"] == ["process"]
    assert passages["Hostile"]["paragraphs"] == [
        '<img src=x onerror="window.__pwned = 2">',
        "The process of bad and <b>bold</b>.",
    ]
    assert passages["Hostile"]["marks"] == ["process"]
    assert (found["live"], found["pwned"]) == (0, None)
    assert page.console == [], page.console


def test_a_search_says_why_it_ran_as_keyword_or_found_nothing_to_rank(browser_page: Page, tmp_path: Path) -> None:
    page = browser_page
    shots = Shots(page, tmp_path / "screenshots")
    embedder = HashEmbedder()
    embedder.failing = True  # the provider is down: a hybrid search runs as keyword
    with Coffer(load_settings(home=tmp_path / "home"), embedder=embedder) as service:
        service.create_kb("notes", "Notes", vector=True)
        service.add_document("notes", "bread.md", "# Bread\n\nSourdough needs a starter.\n")
        with running(service, token=TOKEN) as url:
            open_viewer(page, url, kbs=1)
            search_in_viewer(page, "notes", "sourdough")
            page.wait_for(shown("#results .search-hint"))
            shots.take("11-ran-as-keyword")
            degraded = page.evaluate(f"[{text_of('#results .facts')}, {text_of('#results .search-hint')}]")
            api = page.evaluate("fetch('/api/v1/knowledge_bases/notes/search?q=sourdough').then((r) => r.json())")
            search_in_viewer(page, "notes", "the")
            page.wait_for(shown("#results .search-hint"))
            common = page.evaluate(f"[{text_of('#results h1')}, {text_of('#results .search-hint')}]")
    assert api["strategy"] == "keyword"
    assert api["hint"].startswith("The query could not be embedded, so keyword search ran instead of hybrid")
    assert degraded == ["in notes · keyword search", api["hint"]]
    assert common[0] == "0 passages for “the”"
    assert "'the' is a common word found in most passages" in common[1]
    assert page.console == [], page.console


TOP_BAR_PARTS = ".brand, #search-scope, #search-input, #search-form > button, #search-filters > summary"
FITS = f"""(() => {{
    const root = document.documentElement;
    const bar = document.querySelector('.topbar');
    const parts = [...document.querySelectorAll({json.dumps(TOP_BAR_PARTS)})].map((el) => {{
        const box = el.getBoundingClientRect();
        return {{ name: el.id || el.className || el.tagName, left: box.left, right: box.right, width: box.width }};
    }});
    return {{
        viewport: root.clientWidth,
        pageScroll: root.scrollWidth - root.clientWidth,
        barScroll: bar.scrollWidth - bar.clientWidth,
        parts,
    }};
}})()"""


def fits(page: Page, width: int) -> dict[str, Any]:
    """The layout facts at ``width``, asserted: nothing scrolls sideways, every control of the bar shows whole."""
    layout = page.evaluate(FITS)
    assert layout["viewport"] == width
    assert (layout["pageScroll"], layout["barScroll"]) == (0, 0), layout
    cut = [part for part in layout["parts"] if part["left"] < 0 or part["right"] > width or part["width"] == 0]
    assert cut == [], layout
    return {part["name"]: part for part in layout["parts"]}


LONG_KB = "a-knowledge-base-whose-name-is-as-long-as-the-naming-rule-allows"  # 64 characters


def test_the_top_bar_fits_a_420_pixel_window_in_every_view(browser_page: Page, tmp_path: Path) -> None:
    page = browser_page
    shots = Shots(page, tmp_path / "screenshots")
    page.resize(420, 860)
    with make_coffer(tmp_path / "home") as service:
        seeded = seed(service, extra_docs=10)
        service.create_kb(LONG_KB, "Its name is the widest choice of the scope menu")
        with running(service, token=TOKEN) as url:
            open_viewer(page, url, kbs=3)
            parts = fits(page, 420)
            shots.take("12-narrow-home")

            page.evaluate("document.querySelector('#search-filters').open = true")
            panel = page.evaluate(
                "(() => { const b = document.querySelector('.filter-panel').getBoundingClientRect();"
                " return [b.left, b.right]; })()"
            )
            fits(page, 420)
            shots.take("13-narrow-filters")
            page.evaluate("document.querySelector('#search-filters').open = false")

            search_in_viewer(page, "notes", "hybrid vector")
            fits(page, 420)
            shots.take("14-narrow-search")

            page.evaluate(f"location.hash = '#/kb/notes/doc/{seeded.alpha}'")
            page.wait_for(f"{text_of('#doc-title')} === 'Alpha guide'")
            fits(page, 420)
            shots.take("15-narrow-document")
    assert parts["search-input"]["width"] >= 180  # room to type a query
    assert panel[0] >= 0, panel
    assert panel[1] <= 420, panel
    assert page.console == [], page.console


def test_the_title_filter_and_pager_show_only_when_there_is_something_to_filter_or_page(
    browser_page: Page, tmp_path: Path
) -> None:
    page = browser_page
    shots = Shots(page, tmp_path / "screenshots")
    controls = f"[{shown('#doc-filter')}, {shown('#pager')}]"
    with make_coffer(tmp_path / "home") as service:
        service.create_kb("few", "Three documents")
        service.create_kb("many", "More than a page")
        for i in range(3):
            service.add_document("few", f"few-{i}.md", f"# Few {i}\n\nShort.\n")
        for i in range(55):
            service.add_document("many", f"many-{i:02d}.md", f"# Many {i:02d}\n\nFiller.\n")
        with running(service, token=TOKEN) as url:
            open_viewer(page, url, kbs=2)
            home = page.evaluate(controls)
            shots.take("16-home-without-list-controls")

            page.evaluate("location.hash = '#/kb/few'")
            page.wait_for(f"{count('#doc-list a')} === 3")
            few = page.evaluate(controls)

            page.evaluate("location.hash = '#/kb/many'")
            page.wait_for(f"{count('#doc-list a')} === 50")
            many = page.evaluate(f"[...{controls}, {text_of('#page-info')}]")
            shots.take("17-a-page-of-many")
            click(page, "#next-page")
            page.wait_for(f"{count('#doc-list a')} === 5")
            last_page = page.evaluate(f"[...{controls}, {text_of('#page-info')}]")

            type_into(page, "#doc-filter", "Many 1")
            page.wait_for(f"{count('#doc-list a')} === 10")
            filtered = page.evaluate(controls)
    assert home == [False, False]
    assert few == [False, False]
    assert many == [True, True, "1–50 of 55"]
    assert last_page == [True, True, "51–55 of 55"]
    assert filtered == [True, False]  # the box stays while it holds a filter; one page needs no pager
    assert page.console == [], page.console


def wait_across_navigation(page: Page, condition: str, attempts: int = 20) -> Any:
    """``page.wait_for`` while the page may be replaced: a wait cut short by the navigation is retried."""
    for _ in range(attempts):
        try:
            return page.wait_for(condition)
        except CDPError as exc:
            if "timed out waiting" in str(exc):
                raise
            last = exc  # "Execution context was destroyed" and its kin: ask the new document
    raise AssertionError(f"never true across navigations: {condition} ({last})")


def submit_token(page: Page, token: str) -> None:
    # Submitted from a timer so this evaluation returns before the page is replaced.
    page.evaluate(f"""(() => {{
        document.querySelector('#token').value = {json.dumps(token)};
        setTimeout(() => document.querySelector('#login-form').requestSubmit(), 0);
    }})()""")


def test_a_browser_without_the_token_gets_a_login_page_that_leads_back_to_the_view_it_asked_for(
    browser_page: Page, served: tuple[str, Seeded, Recorder, Path], tmp_path: Path
) -> None:
    url, seeded, _, _ = served
    page = browser_page
    shots = Shots(page, tmp_path / "screenshots")
    page.goto(f"{url}/#/kb/notes/doc/{seeded.alpha}")
    page.wait_for("document.querySelector('#login-form') !== null")
    assert "unauthorized" not in page.evaluate("document.body.textContent")
    # Its stylesheet is served without the token, so the page is styled, not raw HTML.
    assert page.evaluate("getComputedStyle(document.querySelector('.login')).borderTopLeftRadius") == "10px"
    shots.take("07-login")

    submit_token(page, "not-the-right-token-1")
    wait_across_navigation(page, f"{text_of('#login-error')}.includes('not right')")
    shots.take("08-login-wrong-token")

    submit_token(page, TOKEN)
    wait_across_navigation(page, f"{text_of('#doc-title')} === 'Alpha guide'")
    assert page.evaluate("location.hash") == f"#/kb/notes/doc/{seeded.alpha}"

    # The login goes stale (here: the cookie is gone): the next API call brings the login page back.
    page.send("Network.clearBrowserCookies")
    page.evaluate("location.hash = '#/search/vector'")
    wait_across_navigation(page, "document.querySelector('#login-form') !== null")
    assert page.console == [], page.console


@pytest.mark.parametrize("doc_id", ["01ARZ3NDEKTSV4RRFFQ69G5FAV", "not-an-id"])
def test_an_api_error_is_shown_with_the_apis_own_message_and_hint(
    browser_page: Page, served: tuple[str, Seeded, Recorder, Path], doc_id: str
) -> None:
    page = browser_page
    page.goto(f"{served[0]}/?token={TOKEN}")
    page.wait_for(f"{count('#kb-list a')} === 2")
    page.evaluate(f"location.hash = '#/kb/notes/doc/{doc_id}'")
    page.wait_for(f"!document.querySelector('#toast').hidden && {text_of('#toast strong')} !== ''")
    shown = page.evaluate(
        "({message: document.querySelector('#toast strong').textContent, "
        "hint: (document.querySelector('#toast .hint') || {}).textContent})"
    )
    api = page.evaluate(f"fetch('/api/v1/knowledge_bases/notes/documents/{doc_id}').then(r => r.json())")
    assert shown == {"message": api["message"], "hint": api["hint"]}
    assert api["hint"]


RENDER_CASES = {
    "inline": (
        "**bold** _em_ ~~gone~~ `a < b`",
        "<p><strong>bold</strong> <em>em</em> <del>gone</del> <code>a &lt; b</code></p>",
    ),
    "snake_case": ("call snake_case_name and 2*3*4", "<p>call snake_case_name and 2*3*4</p>"),
    "script_link": ("[x](javascript:alert(1))", '<p><span class="dead-link" title="javascript:alert(1)">x</span></p>'),
    "autolink": (
        "<https://a.example/p?q=1>",
        (
            '<p><a href="https://a.example/p?q=1" target="_blank" '
            'rel="noopener noreferrer nofollow" title="https://a.example/p?q=1">https://a.example/p?q=1</a></p>'
        ),
    ),
    "image": (
        "![chart](https://img.example/c.png)",
        (
            '<p><a href="https://img.example/c.png" target="_blank" '
            'rel="noopener noreferrer nofollow" title="https://img.example/c.png">[image: chart]</a></p>'
        ),
    ),
    "raw_html": ('<div onclick="x()">hi</div>', '<p>&lt;div onclick="x()"&gt;hi&lt;/div&gt;</p>'),
    "ordered_start": ("3. three\n4. four", '<ol start="3"><li>three</li><li>four</li></ol>'),
    "nested": ("- a\n  - b\n- c", "<ul><li>a<ul><li>b</li></ul></li><li>c</li></ul>"),
    "setext": ("Title\n=====\n\nSub\n---", "<h1>Title</h1><h2>Sub</h2>"),
    "hard_break": ("one  \ntwo", "<p>one<br>two</p>"),
    "tilde_fence": ("~~~\n<b>x</b>\n~~~", "<pre><code>&lt;b&gt;x&lt;/b&gt;</code></pre>"),
    "table": (
        "| a | b |\n|:-:|--|\n| 1 | 2 |",
        (
            '<div class="table-wrap"><table><thead><tr><th class="align-center">a</th>'
            '<th>b</th></tr></thead><tbody><tr><td class="align-center">1</td><td>2</td></tr></tbody></table></div>'
        ),
    ),
    "rule_and_quote": ("> q\n\n***", "<blockquote><p>q</p></blockquote><hr>"),
    "task": ("- [x] done\n- [ ] todo", '<ul><li class="task">\u2611 done</li><li class="task">\u2610 todo</li></ul>'),
}


def test_the_markdown_renderer_builds_safe_elements_for_each_construct(
    browser_page: Page, served: tuple[str, Seeded, Recorder, Path]
) -> None:
    browser_page.goto(f"{served[0]}/?token={TOKEN}")
    sources = {name: source for name, (source, _) in RENDER_CASES.items()}
    rendered = browser_page.evaluate(f"""import('/static/markdown.js').then(({{ renderMarkdown }}) => {{
        const out = {{}};
        for (const [name, source] of Object.entries({json.dumps(sources)})) {{
            const box = document.createElement('div');
            box.append(renderMarkdown(source));
            out[name] = box.innerHTML;
        }}
        return out;
    }})""")
    wrong = {name: rendered[name] for name, (_, expected) in RENDER_CASES.items() if rendered[name] != expected}
    assert wrong == {}


LOG_LINES = 50_000
RENDER_GUARD_MS = 20_000
RENDER_LOG = f"""(() => {{
    const lines = Array.from({{ length: {LOG_LINES} }}, (_, i) =>
        `2026-01-01T00:00:${{String(i % 60).padStart(2, "0")}}Z GET https://example.com/api/items/${{i}} 200 ok`);
    const box = document.createElement("div");
    box.append(window.markdown.renderMarkdown(lines.join("\\n") + "\\n"));
    const links = box.querySelectorAll("p > a");
    return {{
        paragraphs: box.children.length,
        complete: box.textContent === lines.join("\\n"),
        links: links.length,
        last: links[links.length - 1].href,
    }};
}})()"""


def test_a_long_log_file_renders_as_one_complete_paragraph_without_freezing_the_tab(
    browser_page: Page, served: tuple[str, Seeded, Recorder, Path]
) -> None:
    # A .log file is ingested as-is and its lines form one paragraph. The renderer once searched
    # every inline pattern over the rest of the paragraph after each element it found: quadratic,
    # 10,000 lines with a URL each took 13 s and 20,000 took 54 s in Node, so this 50,000-line
    # paragraph (3.4 MB) froze the tab for minutes. Now it takes well under a second; the guard is
    # a hang detector (Chromium terminates the script when it runs out), not a speed target.
    browser_page.goto(f"{served[0]}/?token={TOKEN}")
    browser_page.evaluate("import('/static/markdown.js').then((module) => { window.markdown = module; })")
    try:
        result = browser_page.send(
            "Runtime.evaluate", {"expression": RENDER_LOG, "returnByValue": True, "timeout": RENDER_GUARD_MS}
        )
    except CDPError as exc:
        pytest.fail(f"{LOG_LINES} log lines were not rendered within {RENDER_GUARD_MS} ms: {exc}")
    assert "exceptionDetails" not in result, result["exceptionDetails"]
    assert result["result"]["value"] == {
        "paragraphs": 1,
        "complete": True,
        "links": LOG_LINES,
        "last": f"https://example.com/api/items/{LOG_LINES - 1}",
    }


def test_a_passage_says_where_it_is_in_the_original_and_links_a_pdf_at_its_page(
    browser_page: Page, tmp_path: Path
) -> None:
    page = browser_page
    shots = Shots(page, tmp_path / "screenshots")
    with make_coffer(tmp_path / "home") as service:
        service.create_kb("papers", "Papers", chunk_size=64, chunk_overlap=0)
        pdf = service.add_document("papers", "sample.pdf", (FIXTURES / "sample.pdf").read_bytes()).document_id
        service.add_document("papers", "sample.xlsx", (FIXTURES / "sample.xlsx").read_bytes())
        with running(service, token=TOKEN) as url:
            open_viewer(page, url, kbs=1)
            search_in_viewer(page, "papers", "granite weather station")
            page.wait_for(shown("#results .passage .source"))
            shots.take("15-source-location")
            source = page.evaluate(
                "(() => { const a = document.querySelector('#results .passage .source a');"
                " return [a.parentElement.textContent, a.getAttribute('href'), a.target]; })()"
            )
            opened = page.evaluate(
                "fetch(document.querySelector('#results .passage .source a').href)"
                ".then((r) => [r.status, r.headers.get('content-type'), r.headers.get('content-disposition')])"
            )
            search_in_viewer(page, "papers", "Marigold Traders")
            page.wait_for(shown("#results .passage .source"))
            sheet = page.evaluate(text_of("#results .passage .source"))
    assert source == ["sample.pdf · p. 2", f"/api/v1/knowledge_bases/papers/documents/{pdf}/original#page=2", "_blank"]
    assert opened == [200, "application/pdf", "inline; filename=\"sample.pdf\"; filename*=UTF-8''sample.pdf"]
    assert sheet == "sample.xlsx · sheet Suppliers, rows 1–2"
    assert page.console == [], page.console
