"""``coffer serve --http --auth oauth``: Coffer as its owner's OAuth 2.1 authorization server and protected resource.

The MCP Python SDK's own OAuth client does every flow against the real server on loopback: it
discovers the server from the 401, registers (or names itself by a metadata document), sends the
owner to the consent page, which the test answers through the real HTML form, and exchanges the
code with its PKCE verifier.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import json
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import anyio
import httpx
import pytest
from mcp.server.auth.provider import AccessToken

from coffer_mcp import Coffer
from coffer_mcp.errors import ConfigError
from coffer_mcp.mcp_server import READ_TOOLS, TOOL_NAMES, TOOL_SCOPES
from coffer_mcp.services.authorization import OWNER, AuthorizationService
from coffer_mcp.web import ExternalAuth, bind_http
from coffer_mcp.web._owner import MAX_FAILURES
from tests.web.conftest import TOKEN
from tests.web.oauth_support import (
    CLIENT_NAME,
    PASSWORD,
    OAuthSession,
    Owner,
    catching,
    connected,
    read_form,
    sdk_provider,
)
from tests.web.oidc_issuer import Issuer, SigningKey, serve
from tests.web.support import WEB_TESTS, Seeded, make_coffer, running, seed

pytestmark = pytest.mark.anyio

BEYOND_WRITE = {name for name, scope in TOOL_SCOPES.items() if scope.value == "coffer:admin"}
MCP_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
}


@pytest.fixture(scope="module")
def owned(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Coffer, Seeded]]:
    """A seeded store whose owner has set a password."""
    with make_coffer(tmp_path_factory.mktemp("oauth") / "home") as service:
        seeded = seed(service)
        service.authorization.set_password(PASSWORD)
        yield service, seeded


@pytest.fixture(scope="module")
def oauth_url(owned: tuple[Coffer, Seeded]) -> Iterator[str]:
    """The server with the built-in authorization server, and the HTTP token for scripts."""
    with running(owned[0], auth="oauth", token=TOKEN) as url:
        yield url


def call(name: str, arguments: dict[str, Any], request_id: int = 2) -> dict[str, Any]:
    params = {"name": name, "arguments": arguments}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


def challenge(response: httpx.Response) -> dict[str, str]:
    """The parameters of a ``WWW-Authenticate: Bearer k="v", ...`` header."""
    value = response.headers["www-authenticate"]
    assert value.startswith("Bearer ")
    return dict(re.findall(r'(\w+)="([^"]*)"', value))


# -- discovery and the whole flow ------------------------------------------------------------------


async def test_an_mcp_client_finds_the_server_from_the_401_signs_the_owner_in_and_calls_tools(
    oauth_url: str, owned: tuple[Coffer, Seeded]
) -> None:
    service, seeded = owned
    with catching() as catcher, anyio.fail_after(120):
        owner = Owner()
        session = sdk_provider(oauth_url, catcher, owner)
        async with connected(oauth_url, session) as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            found = await client.call_tool("coffer__search_knowledge", {"kb": "notes", "query": "retrieval"})
            added = await client.call_tool("coffer__add_document", {"kb": "notes", "filename": "o.md", "content": "#"})
    assert owner.seen == [["coffer:read", "coffer:write"]]  # what the 401 told the client to ask for
    assert names == set(TOOL_NAMES) - BEYOND_WRITE
    assert not found.is_error
    assert seeded.alpha in {p["document_id"] for p in found.structured_content["passages"]}  # type: ignore[index]
    assert not added.is_error, added.content
    actor = f"oauth:{OWNER} via {CLIENT_NAME}"
    assert service.index.audit_events("notes")[-1].actor == actor
    assert service.invocations()[-1].client == actor
    client_info = session.storage.client_info
    assert client_info is not None
    assert client_info.client_secret
    stored = service.index.oauth_client(client_info.client_id)
    assert stored is not None
    assert stored.secret_sha256 == hashlib.sha256(client_info.client_secret.encode()).hexdigest()
    assert client_info.client_secret not in json.dumps(stored.metadata)


def test_a_request_without_a_token_gets_401_naming_the_metadata_and_the_scopes_to_ask_for(oauth_url: str) -> None:
    with httpx.Client(base_url=oauth_url, timeout=20) as http:
        refused = http.post("/mcp", json=INITIALIZE, headers=MCP_HEADERS)
        resource = http.get("/.well-known/oauth-protected-resource/mcp").json()
        root = http.get("/.well-known/oauth-protected-resource").json()
        server = http.get("/.well-known/oauth-authorization-server").json()
        api = http.get("/api/v1/knowledge_bases")
    assert refused.status_code == 401
    assert challenge(refused) == {
        "resource_metadata": f"{oauth_url}/.well-known/oauth-protected-resource/mcp",
        "scope": "coffer:read coffer:write",
    }
    assert api.status_code == 401
    assert resource == root
    assert resource["resource"] == f"{oauth_url}/mcp"
    assert resource["authorization_servers"] == [oauth_url]
    assert resource["scopes_supported"] == ["coffer:read", "coffer:write", "coffer:admin"]
    assert server["issuer"] == oauth_url
    assert server["code_challenge_methods_supported"] == ["S256"]
    assert server["client_id_metadata_document_supported"] is True
    assert server["authorization_response_iss_parameter_supported"] is True
    assert server["registration_endpoint"] == f"{oauth_url}/register"
    assert server["revocation_endpoint"] == f"{oauth_url}/revoke"


def test_the_http_token_keeps_every_scope_for_scripts(oauth_url: str) -> None:
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=oauth_url, timeout=20, headers=headers) as http:
        opened = http.post("/mcp", json=INITIALIZE)
        assert opened.status_code == 200
        session = {"mcp-session-id": opened.headers["mcp-session-id"]}
        http.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
        listed = http.post("/mcp", json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, headers=session)
    assert {tool["name"] for tool in _result(listed)["tools"]} == set(TOOL_NAMES)


def _result(response: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC result of a response, JSON or one SSE event."""
    text = response.text
    if response.headers["content-type"].startswith("text/event-stream"):
        text = next(line[5:] for line in text.splitlines() if line.startswith("data:"))
    return json.loads(text)["result"]


# -- refresh, revocation ----------------------------------------------------------------------------


def token_request(url: str, session: OAuthSession, **form: str) -> httpx.Response:
    """A request to the token endpoint with the SDK client's own registration (client_secret_post)."""
    info = session.storage.client_info
    assert info is not None
    credentials = {"client_id": info.client_id, "client_secret": info.client_secret or ""}
    return httpx.post(f"{url}/token", data={**form, **credentials}, timeout=20)


def mcp_status(url: str, access_token: str) -> int:
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {access_token}"}
    return httpx.post(f"{url}/mcp", json=INITIALIZE, headers=headers, timeout=20).status_code


async def test_a_refresh_rotates_both_tokens_and_the_old_refresh_token_replayed_revokes_the_grant(
    oauth_url: str,
) -> None:
    with catching() as catcher, anyio.fail_after(120):
        owner = Owner()
        session = sdk_provider(oauth_url, catcher, owner)
        async with connected(oauth_url, session) as client:
            await client.list_tools()
            first = session.storage.tokens
            assert first is not None
            session.provider.context.token_expiry_time = time.time() - 1  # the client thinks it expired
            await client.list_tools()  # ...so it refreshes before this request
            second = session.storage.tokens
        assert second is not None
        assert (second.access_token, second.refresh_token) != (first.access_token, first.refresh_token)
        assert len(owner.seen) == 1  # the refresh asked nobody
        replay = token_request(oauth_url, session, grant_type="refresh_token", refresh_token=first.refresh_token or "")
    assert replay.status_code == 400
    assert replay.json()["error"] == "invalid_grant"
    assert mcp_status(oauth_url, second.access_token) == 401  # the whole grant went with it
    again = token_request(oauth_url, session, grant_type="refresh_token", refresh_token=second.refresh_token or "")
    assert again.status_code == 400


async def test_a_revoked_token_is_refused_and_its_refresh_token_with_it(oauth_url: str) -> None:
    with catching() as catcher, anyio.fail_after(120):
        session = sdk_provider(oauth_url, catcher, Owner())
        async with connected(oauth_url, session) as client:
            await client.list_tools()
    tokens, info = session.storage.tokens, session.storage.client_info
    assert tokens is not None
    assert info is not None
    assert mcp_status(oauth_url, tokens.access_token) == 200
    revoked = httpx.post(
        f"{oauth_url}/revoke",
        auth=(info.client_id, info.client_secret or ""),  # HTTP Basic works too
        data={"token": tokens.access_token},
        timeout=20,
    )
    assert revoked.status_code == 200
    assert mcp_status(oauth_url, tokens.access_token) == 401
    refreshed = token_request(oauth_url, session, grant_type="refresh_token", refresh_token=tokens.refresh_token or "")
    assert refreshed.json()["error"] == "invalid_grant"


# -- scopes -------------------------------------------------------------------------------------------


async def test_a_read_only_token_sees_only_the_read_tools_and_a_write_steps_up_through_the_owner(
    oauth_url: str, owned: tuple[Coffer, Seeded]
) -> None:
    with catching() as catcher, anyio.fail_after(180):
        owner = Owner(scopes=["coffer:read"])  # the owner unticks writing
        session = sdk_provider(oauth_url, catcher, owner)
        async with connected(oauth_url, session) as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            tokens = session.storage.tokens
            assert tokens is not None
            headers = {**MCP_HEADERS, "Authorization": f"Bearer {tokens.access_token}"}
            add = call("coffer__add_document", {"kb": "notes", "filename": "r.md", "content": "# R"})
            refused = httpx.post(f"{oauth_url}/mcp", json=add, headers=headers, timeout=20)
            owner.scopes = None  # asked again, the owner allows what the client asks for
            added = await client.call_tool("coffer__add_document", add["params"]["arguments"])
    assert names == set(READ_TOOLS)
    assert refused.status_code == 403
    assert challenge(refused)["error"] == "insufficient_scope"
    assert challenge(refused)["scope"] == "coffer:read coffer:write"
    assert challenge(refused)["resource_metadata"] == f"{oauth_url}/.well-known/oauth-protected-resource/mcp"
    assert refused.json()["code"] == "insufficient_scope"
    assert not added.is_error, added.content
    assert owner.seen == [["coffer:read", "coffer:write"], ["coffer:read", "coffer:write"]]
    assert session.storage.tokens is not None
    assert session.storage.tokens.scope == "coffer:read coffer:write"
    assert "r.md" in {d.original_filename for d in owned[0].list_documents("notes", limit=100).documents}


async def test_an_owner_who_denies_sends_the_client_access_denied(oauth_url: str) -> None:
    with catching() as catcher, anyio.fail_after(120):
        session = sdk_provider(oauth_url, catcher, Owner(deny=True))
        with pytest.raises(Exception):  # noqa: B017, PT011 - the SDK wraps the callback's error in task groups
            async with connected(oauth_url, session) as client:
                await client.list_tools()
    assert session.storage.tokens is None


# -- the authorization request refused --------------------------------------------------------------


def register(url: str, *redirects: str, **fields: Any) -> dict[str, Any]:
    body = {"client_name": "Raw client", "redirect_uris": list(redirects or ["http://127.0.0.1:9/cb"]), **fields}
    response = httpx.post(f"{url}/register", json=body, timeout=20)
    assert response.status_code == 201, response.text
    return response.json()


def authorize(url: str, client: dict[str, Any], **params: str) -> httpx.Response:
    query = {
        "response_type": "code",
        "client_id": client["client_id"],
        "redirect_uri": client["redirect_uris"][0],
        "code_challenge": "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM",
        "code_challenge_method": "S256",
        "state": "s1",
        "resource": f"{url}/mcp",
        **params,
    }
    return httpx.get(f"{url}/authorize", params=query, timeout=20)


def error_of_redirect(response: httpx.Response) -> str:
    assert response.status_code == 302, response.text
    query = parse_qs(urlsplit(response.headers["location"]).query)
    assert query["state"] == ["s1"]
    return query["error"][0]


def test_a_plain_pkce_challenge_is_refused(oauth_url: str) -> None:
    client = register(oauth_url)
    assert error_of_redirect(authorize(oauth_url, client, code_challenge_method="plain")) == "invalid_request"
    assert error_of_redirect(authorize(oauth_url, client, code_challenge="too-short")) == "invalid_request"


def test_a_redirect_uri_not_registered_is_refused_without_a_redirect(oauth_url: str) -> None:
    client = register(oauth_url, "http://127.0.0.1:9/cb")
    for other in ("http://127.0.0.1:9/elsewhere", "http://evil.example/cb", "http://localhost:9/cb"):
        refused = authorize(oauth_url, client, redirect_uri=other)
        assert refused.status_code == 400
        assert refused.json()["error"] == "invalid_request"
    # RFC 8252: a loopback redirect URI matches on any port (the client listens where it can).
    assert authorize(oauth_url, client, redirect_uri="http://127.0.0.1:50123/cb").status_code == 302


def test_a_registration_with_a_redirect_neither_https_nor_loopback_is_refused(oauth_url: str) -> None:
    response = httpx.post(f"{oauth_url}/register", json={"redirect_uris": ["http://evil.example/cb"]}, timeout=20)
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_redirect_uri"


def test_a_token_for_another_resource_is_neither_issued_nor_accepted(
    oauth_url: str, owned: tuple[Coffer, Seeded]
) -> None:
    client = register(oauth_url)
    assert error_of_redirect(authorize(oauth_url, client, resource="http://other.example/mcp")) == "invalid_target"
    asked = httpx.post(
        f"{oauth_url}/token",
        data={
            "grant_type": "authorization_code",
            "code": "x",
            "code_verifier": "v" * 43,
            "client_id": client["client_id"],
            "client_secret": client["client_secret"],
            "resource": "http://other.example/mcp",
        },
        timeout=20,
    )
    assert asked.json()["error"] == "invalid_target"
    elsewhere = issued(owned[0].authorization, client["client_id"], "http://other.example/mcp")
    refused = httpx.post(
        f"{oauth_url}/mcp", json=INITIALIZE, headers={**MCP_HEADERS, "Authorization": f"Bearer {elsewhere}"}, timeout=20
    )
    assert refused.status_code == 401
    assert challenge(refused)["error"] == "invalid_token"


def issued(auth: AuthorizationService, client_id: str, resource: str) -> str:
    """An access token minted by the core itself (as a consent would), for ``resource``."""
    request = auth.start_request(client_id, ["coffer:read"], resource, {})
    approved = auth.approve(request, OWNER, ["coffer:read"])
    assert approved is not None
    return auth.exchange_code(approved[1]).access_token


def test_an_expired_token_is_refused(oauth_url: str, owned: tuple[Coffer, Seeded]) -> None:
    client = register(oauth_url)
    service = owned[0]
    past = AuthorizationService(service.index, access_seconds=60, clock=lambda: time.time() - 3600)
    token = issued(past, client["client_id"], f"{oauth_url}/mcp")
    assert mcp_status(oauth_url, token) == 401
    fresh = issued(service.authorization, client["client_id"], f"{oauth_url}/mcp")
    assert mcp_status(oauth_url, fresh) == 200


# -- the owner's password -------------------------------------------------------------------------------


def consent_page(url: str, browser: httpx.Client) -> tuple[str, dict[str, str]]:
    """Start an authorization and open its consent page: the page's URL and its form's fields."""
    client = register(url)
    started = authorize(url, client)
    assert started.status_code == 302
    page_url = f"{url}{started.headers['location']}"
    page = browser.get(page_url)
    assert page.status_code == 200
    assert "Raw client" in page.text
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    assert "form-action 'self' http://127.0.0.1:9" in page.headers["content-security-policy"]
    return page_url, read_form(page.text).fields


def post_consent(browser: httpx.Client, url: str, fields: dict[str, str], secret: str) -> httpx.Response:
    """Answer the consent page as the owner: ``secret``, allow, reading only."""
    hidden = [(name, value) for name, value in fields.items() if name != "secret"]
    form = [*hidden, ("secret", secret), ("decision", "approve"), ("scope", "coffer:read")]
    headers = {"content-type": "application/x-www-form-urlencoded"}
    return browser.post(f"{url}/authorize/consent", content=urlencode(form), headers=headers)


def test_a_wrong_password_is_refused_and_after_a_few_the_owner_must_wait(tmp_path: Path) -> None:
    with make_coffer(tmp_path / "home") as service:
        service.authorization.set_password(PASSWORD)
        with running(service, auth="oauth") as url, httpx.Client(timeout=30) as browser:
            _, fields = consent_page(url, browser)
            for _ in range(MAX_FAILURES):
                wrong = post_consent(browser, url, fields, "guess")
                assert wrong.status_code == 401
                assert "not right" in wrong.text
                fields = read_form(wrong.text).fields  # the page again, with a new CSRF token
            throttled = post_consent(browser, url, fields, PASSWORD)
    assert throttled.status_code == 429
    assert "Too many wrong attempts" in throttled.text
    assert "location" not in throttled.headers


def test_the_right_password_sends_the_code_to_the_client_with_state_and_issuer(oauth_url: str) -> None:
    with httpx.Client(timeout=30) as browser:
        _, fields = consent_page(oauth_url, browser)
        answered = post_consent(browser, oauth_url, fields, PASSWORD)
        replayed = post_consent(browser, oauth_url, fields, PASSWORD)
    assert answered.status_code == 303
    query = parse_qs(urlsplit(answered.headers["location"]).query)
    assert answered.headers["location"].startswith("http://127.0.0.1:9/cb?")
    assert query["state"] == ["s1"]
    assert query["iss"] == [oauth_url]
    assert query["code"][0].startswith("coffer_ac_")
    assert replayed.status_code == 400  # a request is answered once


def test_the_consent_form_needs_its_csrf_cookie(oauth_url: str) -> None:
    with httpx.Client(timeout=30) as browser:
        _, fields = consent_page(oauth_url, browser)
    with httpx.Client(timeout=30) as other:  # the form's fields, without the page's cookie
        refused = post_consent(other, oauth_url, fields, PASSWORD)
    assert refused.status_code == 403
    assert "location" not in refused.headers


def test_oauth_without_a_password_or_a_token_refuses_to_start(tmp_path: Path) -> None:
    with make_coffer(tmp_path / "home") as service:
        with pytest.raises(ConfigError) as refused:
            bind_http(service, port=0, auth="oauth")
        assert "coffer auth set-password" in refused.value.hint
        bind_http(service, port=0, auth="oauth", token=TOKEN).sock.close()  # the HTTP token will do


def test_the_viewer_accepts_the_owners_password_for_a_session_that_never_opens_mcp(oauth_url: str) -> None:
    with httpx.Client(base_url=oauth_url, timeout=30) as browser:
        page = browser.get("/", headers={"Accept": "text/html"})
        wrong = browser.post("/", data={"token": "not the password"})
        signed_in = browser.post("/", data={"token": PASSWORD})
        api = browser.get("/api/v1/knowledge_bases")
        mcp = browser.post("/mcp", json=INITIALIZE, headers=MCP_HEADERS)
    assert "the owner's password" in page.text
    assert wrong.status_code == 401
    assert "token or password is not right" in wrong.text
    assert signed_in.status_code == 303
    cookie = signed_in.headers["set-cookie"]
    assert cookie.startswith("coffer_session=coffer_vs_")
    assert "HttpOnly" in cookie
    assert "SameSite=Strict" in cookie
    assert PASSWORD not in cookie
    assert api.status_code == 200
    assert mcp.status_code == 401


# -- client ID metadata documents ------------------------------------------------------------------------


class DocumentServer:
    """A loopback server publishing one client metadata document at ``/client.json``."""

    def __init__(self, redirect_uri: str, **overrides: Any) -> None:
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = json.dumps(owner.document).encode()
                owner.fetches += 1
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/client.json"
        self.fetches = 0
        self.document = {
            "client_id": self.url,
            "client_name": "Metadata client",
            "redirect_uris": [redirect_uri],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
            **overrides,
        }
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


async def test_a_client_named_by_its_metadata_document_signs_in_without_registering(tmp_path: Path) -> None:
    with make_coffer(tmp_path / "home", auth_client_metadata_hosts=["127.0.0.1"]) as service:
        seed(service)
        service.authorization.set_password(PASSWORD)
        with running(service, auth="oauth") as url, catching() as catcher, anyio.fail_after(120):
            documents = DocumentServer(catcher.redirect_uri)
            try:
                session = sdk_provider(url, catcher, Owner(), client_metadata_url=documents.url)
                async with connected(url, session) as client:
                    names = {tool.name for tool in (await client.list_tools()).tools}
                tokens = session.storage.tokens
                assert tokens is not None
                revoked = httpx.post(  # a public client revokes with its client_id alone
                    f"{url}/revoke", data={"client_id": documents.url, "token": tokens.access_token}, timeout=20
                )
            finally:
                documents.close()
            after = mcp_status(url, tokens.access_token)
        (client_row,) = service.authorization.clients()
    assert "coffer__search_knowledge" in names
    assert (client_row.client_id, client_row.name) == (documents.url, "Metadata client")
    assert client_row.kind == "metadata document"
    assert documents.fetches == 1  # kept for the rest of the flow
    assert revoked.status_code == 200
    assert after == 401


@pytest.mark.parametrize(
    ("allowed", "overrides"),
    [
        ([], {}),  # loopback http is refused without the test-only allowance
        (["127.0.0.1"], {"client_id": "https://elsewhere.example/client.json"}),  # not its own URL
        (["127.0.0.1"], {"client_secret": "s"}),  # a metadata-document client is public
        (["127.0.0.1"], {"redirect_uris": ["http://evil.example/cb"]}),
    ],
)
def test_a_metadata_document_that_is_not_trusted_names_no_client(
    tmp_path: Path, allowed: list[str], overrides: dict[str, Any]
) -> None:
    with make_coffer(tmp_path / "home", auth_client_metadata_hosts=allowed) as service:
        service.authorization.set_password(PASSWORD)
        documents = DocumentServer("http://127.0.0.1:9/cb", **overrides)
        try:
            with running(service, auth="oauth") as url:
                client = {"client_id": documents.url, "redirect_uris": ["http://127.0.0.1:9/cb"]}
                refused = authorize(url, client)
        finally:
            documents.close()
    assert refused.status_code == 400
    assert "not found" in refused.json()["error_description"]


def test_a_token_request_with_a_wrong_client_secret_is_refused(oauth_url: str) -> None:
    client = register(oauth_url)
    form = {"grant_type": "refresh_token", "refresh_token": "coffer_rt_x", "client_id": client["client_id"]}
    wrong = httpx.post(f"{oauth_url}/token", data={**form, "client_secret": "not-it"}, timeout=20)
    basic = httpx.post(f"{oauth_url}/token", data=form, auth=(client["client_id"], "not-it"), timeout=20)
    right = httpx.post(f"{oauth_url}/token", data={**form, "client_secret": client["client_secret"]}, timeout=20)
    assert (wrong.status_code, wrong.json()["error"]) == (401, "invalid_client")
    assert basic.status_code == 401
    assert (right.status_code, right.json()["error"]) == (400, "invalid_grant")  # authenticated; the token is unknown


# -- the TypeScript SDK ------------------------------------------------------------------------------


def test_the_typescript_sdk_client_signs_the_owner_in_by_discovery_and_searches(
    oauth_url: str, owned: tuple[Coffer, Seeded]
) -> None:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed (the TypeScript SDK test needs Node 18+)")
    if not (WEB_TESTS / "node_modules" / "@modelcontextprotocol" / "sdk").is_dir():
        pytest.skip("tests/web/node_modules is missing: run 'npm ci' in tests/web (.ci/run does)")
    done = subprocess.run(
        [node, str(WEB_TESTS / "mcp_oauth_client.mjs"), f"{oauth_url}/mcp", "notes", "retrieval"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COFFER_TEST_PASSWORD": PASSWORD},
        cwd=WEB_TESTS,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["registered"] is True
    assert out["scope"] == "coffer:read coffer:write"
    assert set(out["tools"]) == set(TOOL_NAMES) - BEYOND_WRITE
    assert out["isError"] is False
    assert owned[1].alpha in {p["document_id"] for p in out["structured"]["passages"]}


@pytest.mark.parametrize(
    ("host", "public_url", "problem"),
    [("0.0.0.0", None, "COFFER_PUBLIC_URL"), ("0.0.0.0", "http://coffer.example.com", "not https")],
)
def test_oauth_beyond_loopback_needs_its_https_public_address(
    owned: tuple[Coffer, Seeded], host: str, public_url: str | None, problem: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        bind_http(owned[0], host=host, port=0, auth="oauth", public_url=public_url)
    assert problem in f"{refused.value.message} {refused.value.hint}"


# -- an external identity provider (the seam) -------------------------------------------------------


class IdentityProviderTokens:
    """Stands for an external identity provider's JWT validator: the tokens it would accept, for ``resource``."""

    resource = ""

    async def verify_token(self, token: str) -> AccessToken | None:
        scopes = {"idp-reader": ["coffer:read"], "idp-writer": ["coffer:write"]}.get(token)
        if scopes is None:
            return None
        claims = {"iss": "https://idp.example", "client_name": "ci-bot"}
        return AccessToken(
            token=token, client_id="ci-bot", scopes=scopes, resource=self.resource, subject="alice", claims=claims
        )


def test_with_an_external_identity_provider_its_tokens_get_the_same_scopes_and_actor(
    owned: tuple[Coffer, Seeded],
) -> None:
    service = owned[0]
    tokens = IdentityProviderTokens()
    server = bind_http(service, port=0, auth="external", external=ExternalAuth("https://idp.example", tokens))
    tokens.resource = f"{server.url}/mcp"  # the audience the validator checks: this server's /mcp
    server.start()
    try:
        url = server.url
        with httpx.Client(base_url=url, timeout=20) as http:
            metadata = http.get("/.well-known/oauth-protected-resource/mcp").json()
            anonymous = http.post("/mcp", json=INITIALIZE, headers=MCP_HEADERS)
            no_server_here = http.get("/.well-known/oauth-authorization-server")
            reader = {**MCP_HEADERS, "Authorization": "Bearer idp-reader"}
            add = call("coffer__add_document", {"kb": "notes", "filename": "x.md", "content": "# X"})
            refused = http.post("/mcp", json=add, headers=reader)
            writer = {**MCP_HEADERS, "Authorization": "Bearer idp-writer"}
            opened = http.post("/mcp", json=INITIALIZE, headers=writer)
            session = {**writer, "mcp-session-id": opened.headers["mcp-session-id"]}
            http.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
            added = http.post("/mcp", json=call("coffer__add_document", add["params"]["arguments"]), headers=session)
    finally:
        server.stop(timeout=15)
    assert metadata["authorization_servers"] == ["https://idp.example"]
    assert anonymous.status_code == 401
    assert no_server_here.status_code == 401  # no built-in authorization server in this mode
    assert refused.status_code == 403
    assert challenge(refused)["scope"] == "coffer:read coffer:write"
    assert added.status_code == 200
    assert service.index.audit_events("notes")[-1].actor == "oauth:alice via ci-bot"


def test_with_auth_external_the_issuers_real_tokens_are_checked_for_this_server_end_to_end(tmp_path: Path) -> None:
    # The settings alone (auth external, auth_issuer) make the server a protected resource of a real
    # OIDC issuer on loopback: its JWTs are checked for this server's own /mcp (no seam, no stand-in).
    with contextlib.ExitStack() as stack:
        issuer = stack.enter_context(contextlib.contextmanager(serve)(Issuer(SigningKey.make("RS256"))))
        service = stack.enter_context(make_coffer(tmp_path / "home", auth="external", auth_issuer=issuer.url))
        seed(service)
        server = bind_http(service, port=0)
        server.start()
        stack.callback(server.stop, 15)
        resource = f"{server.url}/mcp"
        writer = {**MCP_HEADERS, "Authorization": f"Bearer {issuer.token(aud=resource)}"}
        reader = {**MCP_HEADERS, "Authorization": f"Bearer {issuer.token(aud=resource, scope='coffer:read')}"}
        elsewhere = {**MCP_HEADERS, "Authorization": f"Bearer {issuer.token()}"}  # for another server's /mcp
        add = call("coffer__add_document", {"kb": "notes", "filename": "x.md", "content": "# X\n\nfrom alice"})
        with httpx.Client(base_url=server.url, timeout=30) as http:
            metadata = http.get("/.well-known/oauth-protected-resource/mcp").json()
            other_audience = http.post("/mcp", json=INITIALIZE, headers=elsewhere)
            refused = http.post("/mcp", json=add, headers=reader)
            opened = http.post("/mcp", json=INITIALIZE, headers=writer)
            session = {**writer, "mcp-session-id": opened.headers["mcp-session-id"]}
            http.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
            added = http.post("/mcp", json=add, headers=session)
    assert metadata["resource"] == resource
    assert metadata["authorization_servers"] == [issuer.url]
    assert other_audience.status_code == 401
    assert refused.status_code == 403
    assert challenge(refused)["error"] == "insufficient_scope"
    assert added.status_code == 200, added.text
    assert service.index.audit_events("notes")[-1].actor == "oauth:alice via claude-desktop"


def test_auth_external_without_an_issuer_and_an_issuer_without_auth_external_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as no_issuer:
        make_coffer(tmp_path / "a", auth="external")
    assert "COFFER_AUTH_ISSUER" in no_issuer.value.hint
    with pytest.raises(ConfigError) as no_mode:
        make_coffer(tmp_path / "b", auth_issuer="https://sso.example.com/realms/team")
    assert "COFFER_AUTH=external" in no_mode.value.hint
