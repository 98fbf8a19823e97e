"""Hostile names, filenames, ids and URLs: a typed error or a safe result, and nothing escapes.

Traversal, NUL and control characters, Windows reserved names, 10 KB names and Unicode look-alikes,
through the service (property-based), the MCP tools (in-memory client) and the HTTP JSON API; and
private addresses spelled every way the SSRF guard must still recognise. A refused call leaves
every file and index row as it was.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from pathlib import Path
from urllib.parse import quote

import anyio
import httpx
import pytest
from hypothesis import assume, given
from mcp import Client

from coffer_mcp.errors import CofferError
from coffer_mcp.mcp_server import build_server
from coffer_mcp.store import KB_NAME_RULE
from tests.reliability.hostile import FILENAMES, KB_NAMES, PROPERTY, filenames, kb_names
from tests.reliability.support import Store, fingerprint_changes, store_fingerprint, tool_error_code
from tests.web.support import running

EXISTING = {"notes", "other"}
VALID_NAME = re.compile(r"[a-z0-9_-][a-z0-9._-]{0,63}")
NAME_ERRORS = {"invalid_name", "unknown_kb"}
FILENAME_ERRORS = {"invalid_argument", "unsupported_type"}
# Loopback, private, metadata and unspecified addresses in disguise, and schemes that are not http(s).
DISGUISED_URLS = [
    "http://0x7f000001/",
    "http://2130706433/",
    "http://127.1/",
    "http://0177.0.0.1/",
    "http://[::ffff:7f00:1]/",
    "http://0.0.0.0/",
    "http://[::]/",
    "http://user:pw@127.0.0.1/",
    "http://100.64.0.1/",
    "http://[64:ff9b::7f00:1]/",
    "http://[2002:7f00:1::]/",
    "HTTP://LOCALHOST/",
    "http://169.254.169.254/latest/meta-data/",
    "http://127.0.0.1:0/",
    "http:/\\127.0.0.1/",
    "gopher://127.0.0.1/",
    "javascript:alert(1)",
    "data:text/html,hi",
    "file:///etc/passwd",
    "",
    "http://",
]
BAD_IDS = [
    "",
    "../../etc/passwd",
    "..",
    "0" * 26,
    "01ARZ3NDEKTSV4RRFFQ69G5FAV",
    "01arz3ndektsv4rrffq69g5fav",
    "a\x00b",
    "x" * 64,
    "\ud800",
    "01ARZ3NDEKTSV4RRFFQ69G5FAV.md",
    "*",
]


def calls_on(store: Store, name: str) -> dict[str, object]:
    """Every service operation that takes a knowledge-base name, aimed at ``name``."""
    c, doc = store.coffer, store.doc
    return {
        "describe": lambda: c.describe_kb(name),
        "list": lambda: c.list_documents(name),
        "read": lambda: c.read_document(name, doc),
        "search": lambda: c.search(name, "tides"),
        "grep": lambda: c.grep(name, "tides"),
        "add": lambda: c.add_document(name, "x.md", "# X\n\nbody"),
        "edit": lambda: c.edit_document(name, doc, "# X\n\nbody"),
        "delete": lambda: c.delete_document(name, doc),
        "update": lambda: c.update_kb(name, description="x"),
        "reindex": lambda: c.reindex(name),
        "verify": lambda: c.verify(name),
        "delete_kb": lambda: c.delete_kb(name),
    }


@PROPERTY
@given(name=kb_names())
def test_a_hostile_knowledge_base_name_gets_a_typed_error_from_every_operation_and_changes_nothing(
    store: Store, name: str
) -> None:
    assume(name not in EXISTING and name.strip() != "*")
    for operation, call in calls_on(store, name).items():
        with pytest.raises(CofferError) as refused:
            call()
        assert refused.value.code in NAME_ERRORS, operation
        assert refused.value.hint, operation
    assert store.changed() == []


@PROPERTY
@given(name=kb_names())
def test_creating_a_knowledge_base_refuses_a_hostile_name_or_makes_exactly_that_folder_inside_the_store(
    store: Store, name: str
) -> None:
    before = store_fingerprint(store.home)
    try:
        store.coffer.create_kb(name)
    except CofferError as exc:
        assert exc.code in {"invalid_name", "kb_exists"}
        assert store.changed() == []
        return
    assert VALID_NAME.fullmatch(name), f"accepted {name!r}, which breaks the rule: {KB_NAME_RULE}"
    folder = store.home / "knowledge" / name
    assert folder.is_dir()
    assert folder.resolve().parent == (store.home / "knowledge").resolve()
    made = fingerprint_changes(before, store_fingerprint(store.home))
    inside = (f"added knowledge/{name}", f"added locks/{name}.lock", "index rows")
    assert [change for change in made if not change.startswith(inside)] == []
    store.coffer.delete_kb(name)
    assert store.changed() == []


@PROPERTY
@given(filename=filenames())
def test_an_upload_with_a_hostile_filename_is_stored_by_id_inside_its_knowledge_base_or_refused(
    store: Store, filename: str
) -> None:
    before = store_fingerprint(store.home)
    try:
        added = store.coffer.add_document("notes", filename, f"# Upload\n\nA body for {filename!r}.\n")
    except CofferError as exc:
        assert exc.code in FILENAME_ERRORS, exc
        assert store.changed() == []
        return
    doc_id = added.document_id
    made = fingerprint_changes(before, store_fingerprint(store.home))
    files = sorted(change for change in made if not change.startswith("index rows"))
    assert files[0] == f"added knowledge/notes/docs/{doc_id}.md"
    # The original, and the source map of where the Markdown's lines are in it.
    assert f"added knowledge/notes/raw/{doc_id}.map.json" in files[1:]
    [original] = [name for name in files[1:] if not name.endswith(".map.json")]
    assert re.fullmatch(rf"added knowledge/notes/raw/{doc_id}\.[a-z0-9]+", original)
    assert len(files) == 3
    recorded = added.original_filename
    assert not re.search(r"[\x00-\x1f\x7f-\x9f/\\\ud800-\udfff]", recorded)
    assert 0 < len(recorded) <= 255
    assert unicodedata.is_normalized("NFC", recorded)
    store.coffer.delete_document("notes", doc_id)
    assert store.changed() == []


def test_hostile_document_ids_are_unknown_documents_and_change_nothing(store: Store) -> None:
    c = store.coffer
    for doc_id in BAD_IDS:
        for call in (
            functools.partial(c.read_document, "notes", doc_id),
            functools.partial(c.edit_document, "notes", doc_id, "# X\n\ny"),
            functools.partial(c.delete_document, "notes", doc_id),
        ):
            with pytest.raises(CofferError) as refused:
                call()
            assert refused.value.code == "unknown_document", doc_id
    assert store.changed() == []


@pytest.mark.parametrize("url", DISGUISED_URLS)
def test_a_private_address_in_disguise_is_refused_by_the_ssrf_guard_before_any_connection(
    store: Store, url: str
) -> None:
    with pytest.raises(CofferError) as refused:
        store.coffer.ingest_url("notes", url)
    assert refused.value.code == "url_refused"
    assert store.changed() == []


# -- the same through MCP and HTTP ---------------------------------------------------------------


@pytest.mark.anyio
async def test_hostile_names_filenames_and_ids_through_mcp_get_tool_errors_and_change_nothing(store: Store) -> None:
    refusals = {*NAME_ERRORS, "invalid_argument"}
    with anyio.fail_after(120):
        async with Client(build_server(store.coffer)) as client:
            for name in [n for n in KB_NAMES if n not in EXISTING and n.strip() != "*"]:
                for tool, args in (
                    ("coffer__search_knowledge", {"kb": name, "query": "tides"}),
                    ("coffer__list_documents", {"kb": name}),
                    ("coffer__grep_knowledge", {"kb": name, "pattern": "tides"}),
                    ("coffer__add_document", {"kb": name, "filename": "x.md", "content": "# X"}),
                ):
                    assert tool_error_code(await client.call_tool(tool, args)) in refusals, (tool, name)
                created = await client.call_tool("coffer__create_knowledge_base", {"name": name})
                if not created.is_error:  # a hostile-looking name that is valid ("-", "_")
                    assert VALID_NAME.fullmatch(name), name
                    assert (store.home / "knowledge" / name).is_dir(), name
                    deleted = await client.call_tool("coffer__delete_knowledge_base", {"name": name, "confirm": True})
                    assert not deleted.is_error
                else:
                    assert tool_error_code(created) in {"invalid_name", "invalid_argument"}, name
            for doc_id in BAD_IDS:
                read = await client.call_tool("coffer__read_document", {"kb": "notes", "doc_id": doc_id})
                assert tool_error_code(read) in {"unknown_document", "invalid_argument"}, doc_id
            for url in DISGUISED_URLS:
                fetched = await client.call_tool("coffer__ingest_url", {"kb": "notes", "url": url})
                assert tool_error_code(fetched) in {"url_refused", "invalid_argument"}, url
            assert store.changed() == []
            for filename in FILENAMES:
                added = await client.call_tool(
                    "coffer__add_document", {"kb": "notes", "filename": filename, "content": "# Upload\n\nbody"}
                )
                if added.is_error:
                    assert tool_error_code(added) in FILENAME_ERRORS | {"invalid_argument"}, filename
                    continue
                doc_id = added.structured_content["document_id"]
                assert Path(added.structured_content["path"]).parent == store.home / "knowledge" / "notes" / "docs"
                deleted = await client.call_tool("coffer__delete_document", {"kb": "notes", "doc_id": doc_id})
                assert not deleted.is_error
    assert store.changed() == []


def segment(text: str) -> str:
    """``text`` as one URL path segment, dots included, so no client can resolve ``..`` away."""
    return quote(text.encode("utf-8", "surrogatepass"), safe="").replace(".", "%2E")


def test_hostile_names_and_ids_in_http_api_paths_get_json_errors_never_a_server_error(store: Store) -> None:
    codes = {"invalid_name", "unknown_kb", "invalid_argument", "not_found"}
    with running(store.coffer) as url, httpx.Client(base_url=f"{url}/api/v1", timeout=30) as http:
        for name in KB_NAMES:
            for path in (f"/knowledge_bases/{segment(name)}/documents", f"/search?kb={segment(name)}&q=tides"):
                response = http.get(path)
                assert response.status_code < 500, (path, response.text)
                if response.status_code >= 400 and "json" in response.headers.get("content-type", ""):
                    assert response.json()["code"] in codes, path
        for doc_id in BAD_IDS:
            response = http.get(f"/knowledge_bases/notes/documents/{segment(doc_id)}")
            assert response.status_code in (404, 400), (doc_id, response.text)
        assert http.get("/knowledge_bases/notes/search", params={"q": "tides"}).json()["passages"]  # still serving
    assert store.changed() == []
