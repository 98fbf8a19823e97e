"""Helpers of the OAuth tests: the owner at the consent page, the client's loopback redirect, the SDK client.

The owner is played through the real HTML: the consent page is fetched, its form parsed, and the
form posted with the password and the owner's choices, as a browser would; the answer's redirect
is followed to the client's loopback redirect URI, where a small HTTP server catches the code.
"""

from __future__ import annotations

import contextlib
import html.parser
import http.server
import queue
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlencode, urljoin, urlsplit

import anyio
import httpx
import httpx2
from mcp import Client
from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

PASSWORD = "owner passphrase for tests"
CLIENT_NAME = "Test MCP client"


class FormReader(html.parser.HTMLParser):
    """The fields of the page's form: hidden and text inputs by name, checkboxes by value."""

    def __init__(self) -> None:
        super().__init__()
        self.action = ""
        self.fields: dict[str, str] = {}
        self.boxes: list[str] = []
        self.checked: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {name: value or "" for name, value in attrs}
        if tag == "form":
            self.action = found.get("action", "")
        elif tag == "input" and found.get("type") == "checkbox":
            self.boxes.append(found["value"])
            if "checked" in found:
                self.checked.append(found["value"])
        elif tag == "input" and "name" in found:
            self.fields[found["name"]] = found.get("value", "")


def read_form(page: str) -> FormReader:
    reader = FormReader()
    reader.feed(page)
    return reader


class RedirectCatcher:
    """A loopback HTTP server standing in for the client's redirect URI: it keeps the query it gets."""

    def __init__(self, path: str = "/callback") -> None:
        self.path = path
        self.queries: queue.Queue[dict[str, str]] = queue.Queue()
        catcher = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                query = {k: v[0] for k, v in parse_qs(urlsplit(self.path).query).items()}
                catcher.queries.put(query)
                self.send_response(200)
                self.send_header("content-type", "text/plain")
                self.end_headers()
                self.wfile.write(b"You may close this window.")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def redirect_uri(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{self.path}"

    def next(self) -> dict[str, str]:
        """The query of the next redirect to arrive (waits up to 30 s)."""
        try:
            return self.queries.get(timeout=30)
        except queue.Empty:
            raise AssertionError("the redirect never reached the client") from None

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass
class Owner:
    """The store's owner in a browser: answers consent pages.

    Attributes:
        secret: What the owner types (the password or the HTTP token).
        scopes: The scopes the owner keeps ticked (None: all that were asked for).
        deny: Deny instead of allowing.
        seen: The scopes each consent page asked for, in order.
    """

    secret: str = PASSWORD
    scopes: Sequence[str] | None = None
    deny: bool = False
    seen: list[list[str]] = field(default_factory=list)

    async def answer(self, authorization_url: str) -> httpx.Response:
        """Open the authorization URL, answer the consent page, follow the answer to the redirect URI."""
        async with httpx.AsyncClient(timeout=30) as browser:
            first = await browser.get(authorization_url)
            assert first.status_code == 302, first.text
            page_url = urljoin(authorization_url, first.headers["location"])
            page = await browser.get(page_url)
            assert page.status_code == 200, page.text
            form = read_form(page.text)
            self.seen.append(form.boxes)
            data: list[tuple[str, str]] = [(k, v) for k, v in form.fields.items() if k != "secret"]
            data.append(("secret", self.secret))
            data.append(("decision", "deny" if self.deny else "approve"))
            data += [("scope", s) for s in (form.checked if self.scopes is None else self.scopes)]
            answer = await browser.post(
                urljoin(page_url, form.action),
                content=urlencode(data),
                headers={"content-type": "application/x-www-form-urlencoded"},
            )
            if answer.status_code == 303:
                await browser.get(answer.headers["location"])  # the browser lands on the client's redirect URI
            return answer


class MemoryStorage:
    """The SDK client's token storage, in memory."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


@dataclass
class OAuthSession:
    """An SDK OAuth client's state across connections."""

    provider: OAuthClientProvider
    storage: MemoryStorage
    owner: Owner
    catcher: RedirectCatcher


def sdk_provider(
    base_url: str,
    catcher: RedirectCatcher,
    owner: Owner,
    *,
    client_metadata_url: str | None = None,
    scope: str | None = None,
) -> OAuthSession:
    """The MCP SDK's OAuth client provider for the server at ``base_url``, the owner answering for the user."""
    storage = MemoryStorage()

    async def redirect(url: str) -> None:
        await owner.answer(url)

    async def callback() -> AuthorizationCodeResult:
        query = await anyio.to_thread.run_sync(catcher.next)
        if "error" in query:
            raise PermissionError(f"authorization refused: {query['error']}")
        return AuthorizationCodeResult(code=query["code"], state=query.get("state"), iss=query.get("iss"))

    metadata = OAuthClientMetadata(
        client_name=CLIENT_NAME,
        redirect_uris=[catcher.redirect_uri],  # type: ignore[list-item]
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        scope=scope,
    )
    provider = OAuthClientProvider(f"{base_url}/mcp", metadata, storage, redirect, callback)
    if client_metadata_url is not None:
        # The SDK refuses a non-https client_metadata_url; the test serves the document on loopback http,
        # which the server allows only for the hosts named in auth_client_metadata_hosts.
        provider.context.client_metadata_url = client_metadata_url
    return OAuthSession(provider, storage, owner, catcher)


@contextlib.asynccontextmanager
async def connected(base_url: str, session: OAuthSession) -> AsyncIterator[Client]:
    """An MCP client of ``/mcp`` authenticating through ``session``'s provider."""
    async with (
        httpx2.AsyncClient(auth=session.provider, timeout=60) as http,
        Client(streamable_http_client(f"{base_url}/mcp", http_client=http)) as client,
    ):
        yield client


@contextlib.contextmanager
def catching() -> Iterator[RedirectCatcher]:
    catcher = RedirectCatcher()
    try:
        yield catcher
    finally:
        catcher.close()
