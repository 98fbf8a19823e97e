"""The viewer's search with filters: the API's filter parameters, and the filter panel in Chromium."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from tests.web.cdp import Page
from tests.web.conftest import TOKEN
from tests.web.support import make_coffer, running
from tests.web.test_web_viewer import browser_page, count, text_of  # noqa: F401  (a fixture)

# Twelve notes all say "lock"; the untagged ones say it most, so they rank first unfiltered.
PLAIN = "# Plain {i}\n\nlock lock lock, the lock of plain note {i}.\n"
TAGGED = "# Tagged {i}\n\nOne lock among many other words in tagged note {i}.\n"


@pytest.fixture(scope="module")
def filtered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, list[str]]]]:
    """A server over a knowledge base of plain notes and tagged ones; its URL and the ids by kind."""
    with make_coffer(tmp_path_factory.mktemp("web-filters") / "home") as service:
        service.create_kb("notes", "Notes")
        ids: dict[str, list[str]] = {"plain": [], "tagged": [], "csv": []}
        for i in range(8):
            ids["plain"].append(service.add_document("notes", f"plain-{i}.md", PLAIN.format(i=i)).document_id)
        for i in range(4):
            doc = service.add_document("notes", f"tagged-{i}.md", TAGGED.format(i=i), tags=["Project-X", "draft"])
            ids["tagged"].append(doc.document_id)
        ids["csv"].append(service.add_document("notes", "locks.csv", "lock,count\nfront,1\n").document_id)
        with running(service, token=TOKEN) as url:
            yield url, ids


@pytest.fixture
def api(filtered: tuple[str, dict[str, list[str]]]) -> Iterator[httpx.Client]:
    headers = {"authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=f"{filtered[0]}/api/v1", timeout=10, headers=headers) as http:
        yield http


def found(result: dict) -> set[str]:
    return {passage["document_id"] for passage in result["passages"]}


def test_a_search_keeps_to_the_tagged_documents_though_others_rank_higher(
    api: httpx.Client, filtered: tuple[str, dict[str, list[str]]]
) -> None:
    ids = filtered[1]
    everything = api.get("/knowledge_bases/notes/search", params={"q": "lock", "top_k": 4}).json()
    assert found(everything) <= set(ids["plain"])
    result = api.get("/knowledge_bases/notes/search", params={"q": "lock", "top_k": 4, "tag": "project-x"}).json()
    assert found(result) == set(ids["tagged"])
    both = api.get("/search", params=[("q", "lock"), ("tag", "draft"), ("tag", "PROJECT-X"), ("top_k", "10")]).json()
    assert found(both) == set(ids["tagged"])
    csv = api.get("/search", params={"q": "lock", "format": "csv"}).json()
    assert found(csv) == set(ids["csv"])
    assert api.get("/search", params={"q": "lock", "created_before": "2000-01-01"}).json()["passages"] == []


def test_the_document_list_takes_the_same_filters(
    api: httpx.Client, filtered: tuple[str, dict[str, list[str]]]
) -> None:
    page = api.get("/knowledge_bases/notes/documents", params={"tag": "draft"}).json()
    assert {d["document_id"] for d in page["documents"]} == set(filtered[1]["tagged"])
    assert page["total"] == 4
    assert page["documents"][0]["tags"] == ["Project-X", "draft"]
    page = api.get("/knowledge_bases/notes/documents", params={"format": "md", "tag": "draft", "q": "3"}).json()
    assert [d["title"] for d in page["documents"]] == ["Tagged 3"]


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"created_after": "last week"}, "created_after"),
        ({"format": "p d f"}, "formats"),
        ({"created_after": "2025-02-01", "created_before": "2025-01-01"}, "created_after"),
        # An empty tag or format was dropped, so tag= searched everything; over MCP it is refused.
        ({"tag": ""}, "'tags': '' is not a tag"),
        ({"tag": ["draft", " "]}, "'tags': ' ' is not a tag"),
        ({"format": ""}, "'formats': '' is not a format"),
    ],
)
def test_a_bad_filter_is_a_400_with_the_filter_named_and_a_hint_in_the_viewers_words(
    api: httpx.Client, params: dict[str, str], named: str
) -> None:
    response = api.get("/search", params={"q": "lock", **params})
    assert response.status_code == 400
    error = response.json()
    assert error["code"] == "invalid_argument"
    assert named in error["message"]
    assert "tag (repeated: all of them)" in error["hint"]
    assert "--tag" not in error["hint"]


def test_a_person_narrows_a_search_with_the_filter_panel(
    browser_page: Page,  # noqa: F811  (the fixture)
    filtered: tuple[str, dict[str, list[str]]],
    tmp_path: Path,
) -> None:
    url = filtered[0]
    page = browser_page
    page.goto(f"{url}/?token={TOKEN}")
    page.wait_for(f"{count('#kb-list a')} === 1")
    page.evaluate("""(() => {
        document.querySelector('#search-filters').open = true;
        document.querySelector('#search-input').value = 'lock';
        document.querySelector('#filter-tag').value = 'project-x, draft';
        document.querySelector('#filter-format').value = 'md';
        document.querySelector('#search-form').requestSubmit();
    })()""")
    page.wait_for(f"!document.querySelector('#results').hidden && {count('#results .passage')} === 4")
    shown = page.evaluate("[...document.querySelectorAll('#results .passage .title')].map(t => t.textContent)")
    assert sorted(shown) == [f"Tagged {i}" for i in range(4)]
    assert "only tag project-x, draft · format md" in page.evaluate(text_of("#results .facts"))
    assert page.evaluate("location.hash") == "#/search/lock?tag=project-x&tag=draft&format=md"
    page.screenshot(tmp_path / "filtered-search.png")

    # A box left blank (or only commas) sends nothing, not an empty tag= the API refuses.
    page.evaluate("""(() => {
        document.querySelector('#filter-tag').value = ' , ';
        document.querySelector('#filter-format').value = 'csv';
        document.querySelector('#search-form').requestSubmit();
    })()""")
    page.wait_for(f"{count('#results .passage')} === 1 && {text_of('#results .passage .title')} === 'locks'")
    assert page.evaluate("location.hash") == "#/search/lock?format=csv"

    # A bookmarked filtered search fills the panel and runs with its filters.
    page.evaluate(f"location.hash = {json.dumps('#/kb/notes/search/lock?format=csv')}")
    page.wait_for(f"{count('#results .passage')} === 1 && {text_of('#results .passage .title')} === 'locks'")
    assert page.evaluate("document.querySelector('#filter-format').value") == "csv"
    assert page.evaluate("document.querySelector('#filter-tag').value") == ""
    assert page.evaluate("document.querySelector('#search-filters').classList.contains('active')")

    # A bad date says what is wrong, with the viewer's words for the filters.
    page.evaluate(f"location.hash = {json.dumps('#/search/lock?created_after=' + quote('not a date'))}")
    page.wait_for(f"!document.querySelector('#toast').hidden && {text_of('#toast strong')}.includes('created_after')")
    assert "tag (repeated" in page.evaluate(text_of("#toast .hint"))
    assert page.console == [], page.console
