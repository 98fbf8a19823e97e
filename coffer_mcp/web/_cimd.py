"""Client ID Metadata Documents: a client whose client_id is the URL of its own metadata (MCP 2025-11-25).

A client with no prior relationship to this server names itself by an https URL; the document
there (JSON: ``client_id``, ``client_name``, ``redirect_uris``...) is fetched through the
project's SSRF-guarded fetcher (``coffer_mcp.fetch``: public addresses only, bounded size and
time), without following redirects, and must name that very URL as its ``client_id``. Such a
client is public (no secret: PKCE binds its code). A fetched document is kept in the index for an
hour, so a flow's several look-ups fetch it once and every server of a team shares it.

``auth_client_metadata_hosts`` lets tests (and an intranet) serve documents from hosts that are
not public, over plain http too; it is empty by default.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

import anyio.to_thread
from pydantic import ValidationError

from coffer_mcp.errors import CofferError
from coffer_mcp.fetch import fetch_url
from coffer_mcp.services.authorization import AuthorizationService
from coffer_mcp.web._clients import CofferClient, usable_redirect

__all__ = ["ClientDocuments", "is_metadata_url"]

log = logging.getLogger(__name__)

MAX_DOCUMENT_BYTES = 5 * 1024  # the draft's advice: a metadata document is small
FETCH_SECONDS = 5.0
CACHE_SECONDS = 3600.0


def is_metadata_url(client_id: str) -> bool:
    """Whether ``client_id`` names a metadata document (an http(s) URL with a path), not a registration."""
    parts = urlsplit(client_id)
    return parts.scheme in ("https", "http") and bool(parts.netloc) and parts.path not in ("", "/")


class ClientDocuments:
    """Fetches, checks and caches client metadata documents.

    Args:
        auth: Where fetched documents are kept (as clients without a secret).
        allow: Hosts or networks that may serve documents although not public, over http too.
    """

    def __init__(self, auth: AuthorizationService, allow: Sequence[str] = ()) -> None:
        self.auth = auth
        self.allow = tuple(allow)

    async def client(self, url: str) -> CofferClient | None:
        """The client ``url`` describes, or None (unreachable, refused, or not a valid document)."""
        row = await anyio.to_thread.run_sync(self.auth.client, url)
        now = time.time()
        if row is not None and row.fetched_at is not None and now - row.fetched_at < CACHE_SECONDS:
            return _client(url, row.metadata)
        try:
            metadata = await anyio.to_thread.run_sync(self._fetch, url)
            client = _client(url, metadata)
        except (CofferError, ValueError, ValidationError) as exc:
            log.warning("client metadata document %s refused: %s", url[:200], exc)
            return None
        name = (client.client_name or "")[:200]
        dumped = client.model_dump(mode="json", exclude={"client_secret"}, exclude_none=True)
        await anyio.to_thread.run_sync(lambda: self.auth.save_client(url, name, dumped, None, fetched_at=now))
        return client

    def _fetch(self, url: str) -> dict[str, Any]:
        parts = urlsplit(url)
        if parts.scheme != "https" and not self._allowed(parts.hostname or ""):
            raise ValueError("a client_id URL must be https")
        fetched = fetch_url(url, max_bytes=MAX_DOCUMENT_BYTES, timeout=FETCH_SECONDS, allow=self.allow)
        if fetched.url.rstrip("/") != url.rstrip("/"):
            raise ValueError(f"the document redirects to {fetched.url[:200]} (redirects are not followed)")
        document = json.loads(fetched.content.decode("utf-8"))
        if not isinstance(document, dict):
            raise ValueError("the document is not a JSON object")  # noqa: TRY004 - caught with the others
        if document.get("client_id") != url:
            raise ValueError("its client_id is not the URL it was fetched from")
        if "client_secret" in document or document.get("token_endpoint_auth_method", "none") != "none":
            raise ValueError("a metadata-document client is public: no client_secret, token_endpoint_auth_method none")
        return document

    def _allowed(self, host: str) -> bool:
        bare = host.strip("[]").lower()
        for entry in self.allow:
            try:
                if ipaddress.ip_address(bare) in ipaddress.ip_network(entry.strip("[]"), strict=False):
                    return True
            except ValueError:
                if entry.strip("[]").lower().rstrip(".") == bare.rstrip("."):
                    return True
        return False


def _client(url: str, document: dict[str, Any]) -> CofferClient:
    """The document as a client record (its redirect URIs checked as a registration's are).

    Raises:
        ValueError: no redirect URI, or one neither https nor loopback http.
        ValidationError: a field of the wrong type.
    """
    client = CofferClient.model_validate({**document, "client_id": url, "token_endpoint_auth_method": "none"})
    uris = [str(uri) for uri in client.redirect_uris or ()]
    if not uris or not all(usable_redirect(uri) for uri in uris):
        raise ValueError("redirect_uris must be https, or http to loopback")
    return client
