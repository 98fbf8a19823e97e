"""Hostile input on every ``/api/v1`` route: a 400 with ``{code, message, hint}``, never a 5xx."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import quote

import httpx
import pytest

from coffer_mcp import Coffer
from coffer_mcp.services.pages import MAX_OFFSET
from tests.web.support import Seeded, action_token

# Raw (already percent-encoded) query values. %FF and %ED%A0%80 are not UTF-8 at all.
BAD_INTEGERS = [
    "-1",
    "-9223372036854775809",
    str(2**63),
    str(2**64),
    str(10**30),
    "9" * 5000,
    "1e3",
    "1.5",
    "0x10",
    "1_000",
    "+5",
    "%205",
    "5%20",
    "5%00",
    "%00",
    "NaN",
    "inf",
    "true",
    "%FF",
    "%ED%A0%80",
    quote("١٢"),
    quote("𝟓"),
    quote("\u202e5"),
]
BAD_TEXTS = ["%00", "a%00b", "x" * 3000, "%FF", "%ED%A0%80", quote('" OR NEAR(( *'), "..%2F..", "*", quote("\u202e")]
BAD_SEGMENTS = [
    "%00",
    "%2e%2e",
    "%2E%2E%2F%2E%2E",
    "a" * 300,
    "%FF",
    "%ED%A0%80",
    "Notes",
    "notes%00",
    "con",
    "*",
    "%20",
    "%0A",
    "01ARZ3NDEKTSV4RRFFQ69G5FA",
    "01arz3ndektsv4rrffq69g5fav",
    "01ARZ3NDEKTSV4RRFFQ69G5FAVX",
]
INTEGER_PARAMS = {
    "/knowledge_bases/notes/documents": ["limit", "offset"],
    "/knowledge_bases/notes/documents/{alpha}": ["offset", "limit"],
    "/knowledge_bases/notes/search?q=alpha": ["top_k"],
    "/search?q=alpha": ["top_k"],
}
TEXT_PARAMS = {
    "/knowledge_bases/notes/documents": ["q"],
    "/knowledge_bases/notes/search": ["q"],
    "/search": ["q", "kb"],
    "/search?q=alpha": ["kb"],
}
GET_TEMPLATES = [
    "/knowledge_bases/{kb}",
    "/knowledge_bases/{kb}/documents",
    "/knowledge_bases/{kb}/search?q=alpha",
    "/knowledge_bases/{kb}/documents/{alpha}",
    "/knowledge_bases/notes/documents/{doc}",
]
POST_TEMPLATES = [
    "/knowledge_bases/{kb}/open",
    "/knowledge_bases/{kb}/reveal",
    "/knowledge_bases/{kb}/documents/{alpha}/open",
    "/knowledge_bases/notes/documents/{doc}/open",
    "/knowledge_bases/notes/documents/{doc}/reveal",
]


@pytest.fixture(scope="module")
def api(base_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=f"{base_url}/api/v1", timeout=30) as http:
        yield http


def with_param(path: str, name: str, raw: str) -> str:
    return f"{path}{'&' if '?' in path else '?'}{name}={raw}"


def assert_client_error(response: httpx.Response, *, status: int | None = None, code: str | None = None) -> None:
    where = f"{response.request.method} {str(response.request.url)[:160]}"
    assert response.status_code < 500, f"{where}: {response.status_code} {response.text[:300]}"
    assert response.status_code >= 400, f"{where} was accepted: {response.text[:200]}"
    body = response.json()
    assert set(body) == {"code", "message", "hint"}, (where, body)
    assert body["message"], (where, body)
    assert body["hint"], (where, body)
    assert status is None or response.status_code == status, (where, response.status_code, body)
    assert code is None or body["code"] == code, (where, body)


def test_every_integer_parameter_answers_400_to_every_malformed_or_out_of_range_value(
    api: httpx.Client, store: tuple[Coffer, Seeded]
) -> None:
    for template, names in INTEGER_PARAMS.items():
        path = template.format(alpha=store[1].alpha)
        for name in names:
            for raw in BAD_INTEGERS:
                assert_client_error(api.get(with_param(path, name, raw)), status=400, code="invalid_argument")


def test_every_text_parameter_survives_hostile_values_without_a_server_error(api: httpx.Client) -> None:
    for path, names in TEXT_PARAMS.items():
        for name in names:
            for raw in BAD_TEXTS:
                response = api.get(with_param(path, name, raw))
                if response.status_code != 200:  # a query of '*' or FTS syntax is data, and may well match
                    assert_client_error(response)


def test_every_path_parameter_answers_a_client_error_to_hostile_segments(
    api: httpx.Client, base_url: str, store: tuple[Coffer, Seeded]
) -> None:
    page = httpx.get(f"{base_url}/", timeout=30).text
    headers = {"Origin": base_url, "X-Coffer-Action-Token": action_token(page)}
    for segment in BAD_SEGMENTS:
        values = {"kb": segment, "doc": segment, "alpha": store[1].alpha}
        for template in GET_TEMPLATES:
            assert_client_error(api.get(template.format(**values)))
        for template in POST_TEMPLATES:  # with the action token, so the segment itself is what is judged
            assert_client_error(api.post(template.format(**values), headers=headers))


def test_a_huge_offset_on_the_document_list_is_a_400_naming_the_range(api: httpx.Client) -> None:
    response = api.get("/knowledge_bases/notes/documents", params={"offset": 2**63})
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "invalid_argument"
    assert "'offset' must be an integer from 0 to" in body["message"]


def test_a_malformed_document_id_is_bad_input_while_an_unknown_one_is_not_found(api: httpx.Client) -> None:
    malformed = api.get("/knowledge_bases/notes/documents/not-an-id")
    unknown = api.get("/knowledge_bases/notes/documents/01ARZ3NDEKTSV4RRFFQ69G5FAV")
    assert (malformed.status_code, malformed.json()["code"]) == (400, "invalid_argument")
    assert (unknown.status_code, unknown.json()["code"]) == (404, "unknown_document")


def test_valid_numbers_at_the_edges_of_their_ranges_are_served(api: httpx.Client, store: tuple[Coffer, Seeded]) -> None:
    page = api.get("/knowledge_bases/notes/documents", params={"limit": 1000, "offset": MAX_OFFSET})
    assert page.json()["documents"] == []
    doc = api.get(f"/knowledge_bases/notes/documents/{store[1].alpha}", params={"offset": 2, "limit": 5}).json()
    assert doc["markdown"] == "Alpha"
    assert doc["has_more"] is True
    assert api.get("/search", params={"q": "alpha", "top_k": 1000}).status_code == 200


def test_search_covers_the_knowledge_bases_named_by_repeated_kb_parameters(api: httpx.Client) -> None:
    both = api.get("/search", params=[("q", "alpha"), ("kb", "notes"), ("kb", "empty-kb")]).json()
    one = api.get("/search", params={"q": "alpha", "kb": "notes"}).json()
    assert sorted(both["knowledge_bases"]) == ["empty-kb", "notes"]
    assert one["knowledge_bases"] == ["notes"]


FILTERS = "tag, format, path_prefix, created_after, created_before, updated_after, updated_before"
ACCEPTED = {
    "/knowledge_bases": "This endpoint takes no query parameters.",
    "/knowledge_bases/notes": "This endpoint takes no query parameters.",
    "/knowledge_bases/notes/documents": f"Accepted here: q, limit, offset, {FILTERS}.",
    "/knowledge_bases/notes/documents/{alpha}": "Accepted here: offset, limit.",
    "/knowledge_bases/notes/search?q=alpha": f"Accepted here: q, top_k, {FILTERS}.",
    "/search?q=alpha": f"Accepted here: q, top_k, kb, {FILTERS}.",
}


@pytest.mark.parametrize("template", list(ACCEPTED))
def test_an_unknown_query_parameter_is_refused_naming_it_and_the_accepted_ones(
    api: httpx.Client, store: tuple[Coffer, Seeded], template: str
) -> None:
    path = template.format(alpha=store[1].alpha)
    assert api.get(path).status_code == 200
    response = api.get(with_param(path, "bogus", "1"))
    assert_client_error(response, status=400, code="invalid_argument")
    assert response.json()["message"] == "Unknown query parameter 'bogus'."
    assert response.json()["hint"] == ACCEPTED[template]


def test_misspelt_parameters_are_all_named_once(api: httpx.Client) -> None:
    response = api.get("/search", params=[("q", "alpha"), ("topk", "3"), ("tags", "a"), ("tags", "b")])
    assert response.status_code == 400
    assert response.json()["message"] == "Unknown query parameters 'topk', 'tags'."


def test_a_file_action_with_a_query_parameter_is_refused_before_anything_opens(api: httpx.Client) -> None:
    response = api.post("/knowledge_bases/notes/open?path=/etc/passwd")
    assert_client_error(response, status=400, code="invalid_argument")
    assert response.json()["hint"] == "This endpoint takes no query parameters."


def test_an_unknown_endpoint_stays_not_found_whatever_its_query(api: httpx.Client) -> None:
    response = api.get("/no-such-endpoint?bogus=1")
    assert_client_error(response, status=404, code="not_found")
