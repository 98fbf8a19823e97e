"""An identity provider's signing keys, fetched, cached and refreshed; its JSON answers, bounded.

Keys come from the JWK set at ``jwks_url``, or at the ``jwks_uri`` of the issuer's metadata
(OpenID Connect discovery, else RFC 8414). They are kept for ``max_age`` seconds, then fetched
again, so a key the provider withdrew stops being accepted; a token naming a key id not in the set
fetches it at once (the provider rotated its keys), but never sooner than ``min_refresh`` seconds
after the last fetch, so tokens with made-up key ids cannot make Coffer hammer the provider. A
failed refresh keeps the keys already known.

Every request has a deadline and a size cap, follows no redirect, and fails as ``FetchFailedError``.
"""

from __future__ import annotations

import json
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import anyio
import httpx2

from coffer_mcp.settings import check_identity_provider_url

__all__ = ["KEY_TYPES", "FetchFailedError", "KeySet", "fetch_json"]

# What each algorithm's key is: its JWK "kty" and the curves it may have (None: any).
KEY_TYPES: dict[str, tuple[str, tuple[str, ...] | None]] = {
    **{f"{family}{bits}": ("RSA", None) for family in ("RS", "PS") for bits in (256, 384, 512)},
    "ES256": ("EC", ("P-256",)),
    "ES384": ("EC", ("P-384",)),
    "ES512": ("EC", ("P-521",)),
    "EdDSA": ("OKP", ("Ed25519", "Ed448")),
}
USER_AGENT = "coffer-mcp"


class FetchFailedError(Exception):
    """The identity provider could not be asked, or answered something unusable (the reason, no secret)."""


async def fetch_json(
    url: str,
    *,
    ssl_context: ssl.SSLContext,
    time_limit: float,
    limit: int,
    form: Mapping[str, str] | None = None,
    auth: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """GET ``url`` (POST ``form``, when given) and return the JSON object it answers with.

    Raises:
        FetchFailedError: no answer within ``time_limit`` seconds, a status other than 200, more than
            ``limit`` bytes, or a body that is not a JSON object.
    """
    headers = {"accept": "application/json", "user-agent": USER_AGENT}
    try:
        with anyio.fail_after(time_limit):
            async with httpx2.AsyncClient(verify=ssl_context, timeout=time_limit, headers=headers) as client:
                request = client.build_request("POST" if form is not None else "GET", url, data=form)
                response = await client.send(request, stream=True, auth=auth, follow_redirects=False)
                try:
                    body = await _bounded_body(response, url, limit)
                finally:
                    await response.aclose()
    except TimeoutError:
        raise FetchFailedError(f"{url} did not answer within {time_limit:g} s") from None
    except httpx2.HTTPError as exc:
        raise FetchFailedError(f"{url} could not be reached: {type(exc).__name__}: {exc}") from None
    try:
        answer = json.loads(body)
    except ValueError:
        raise FetchFailedError(f"{url} did not answer with JSON") from None
    if not isinstance(answer, dict):
        raise FetchFailedError(f"{url} did not answer with a JSON object")
    return answer


async def _bounded_body(response: httpx2.Response, url: str, limit: int) -> bytes:
    if response.status_code != 200:
        raise FetchFailedError(f"{url} answered HTTP {response.status_code}")
    body = bytearray()
    async for chunk in response.aiter_bytes():  # decoded: a compressed bomb stops at the cap too
        body += chunk
        if len(body) > limit:
            raise FetchFailedError(f"{url} answered with more than {limit} bytes")
    return bytes(body)


def metadata_urls(issuer: str) -> list[str]:
    """Where an issuer publishes its metadata: OpenID Connect discovery, then RFC 8414."""
    parts = urlsplit(issuer)
    path = parts.path.rstrip("/")
    return [
        f"{issuer.rstrip('/')}/.well-known/openid-configuration",
        urlunsplit((parts.scheme, parts.netloc, f"/.well-known/oauth-authorization-server{path}", "", "")),
    ]


class KeySet:
    """The signing keys of one issuer, as JWK dictionaries by key id.

    Args:
        issuer: The issuer URL; its metadata must name it exactly (RFC 8414 3.3).
        jwks_url: The JWK set's URL; None discovers it from the issuer's metadata.
        fetch: ``fetch_json`` with its connection settings bound.
        min_refresh: Seconds between two fetches at the least, whatever tokens arrive.
        max_age: Seconds the keys are used before they are fetched again.
        clock: Monotonic seconds (tests pass their own).
    """

    def __init__(
        self,
        issuer: str,
        *,
        jwks_url: str | None,
        fetch: Callable[[str], Awaitable[dict[str, Any]]],
        min_refresh: float,
        max_age: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.issuer = issuer
        self.jwks_url = jwks_url
        self._fetch = fetch
        self._min_refresh = min_refresh
        self._max_age = max_age
        self._clock = clock
        self._keys: dict[str | None, dict[str, Any]] | None = None
        self._fetched_at = -float("inf")  # the last fetch that succeeded
        self._tried_at = -float("inf")  # the last fetch, whatever its outcome
        self._lock = anyio.Lock()

    async def find(self, kid: str | None) -> dict[str, Any] | None:
        """The key ``kid`` names (with no ``kid``: the set's only key), or None if the set has none.

        Raises:
            FetchFailedError: no keys are known and they cannot be fetched now.
        """
        if self._clock() - self._fetched_at >= self._max_age:
            await self._refresh(stale=self._keys is not None)
        key = self._lookup(kid)
        if key is None:
            await self._refresh(stale=True)
            key = self._lookup(kid)
        return key

    def _lookup(self, kid: str | None) -> dict[str, Any] | None:
        keys = self._keys or {}
        if kid is None and len(keys) == 1:
            return next(iter(keys.values()))
        return keys.get(kid) if kid is not None else None

    async def _refresh(self, *, stale: bool) -> None:
        """Fetch the set, unless it was tried less than ``min_refresh`` ago (by this task or another).

        With ``stale``, a failure keeps the keys known (and is raised only when none are).
        """
        async with self._lock:
            if self._clock() - self._tried_at < self._min_refresh:
                if self._keys is None:
                    raise FetchFailedError(f"the signing keys of {self.issuer} could not be fetched a moment ago")
                return
            self._tried_at = self._clock()
            try:
                self._keys = _signing_keys(await self._fetch(await self._jwks_url()))
            except FetchFailedError:
                if not stale or self._keys is None:
                    raise
                return
            self._fetched_at = self._clock()

    async def _jwks_url(self) -> str:
        if self.jwks_url is None:
            self.jwks_url = await self._discover()
        return self.jwks_url

    async def _discover(self) -> str:
        failures = []
        for url in metadata_urls(self.issuer):
            try:
                metadata = await self._fetch(url)
            except FetchFailedError as exc:
                failures.append(str(exc))
                continue
            if metadata.get("issuer") != self.issuer:
                raise FetchFailedError(f"{url} names another issuer: {metadata.get('issuer')!r}")
            jwks_uri = metadata.get("jwks_uri")
            if not isinstance(jwks_uri, str):
                raise FetchFailedError(f"{url} names no jwks_uri")
            try:
                check_identity_provider_url(jwks_uri)
            except ValueError as exc:
                raise FetchFailedError(f"the jwks_uri {jwks_uri} of {url} {exc}") from None
            return jwks_uri
        raise FetchFailedError("; ".join(failures))


def _signing_keys(jwk_set: dict[str, Any]) -> dict[str | None, dict[str, Any]]:
    """The set's public signing keys by ``kid``: symmetric keys and encryption keys are left out."""
    keys = jwk_set.get("keys")
    if not isinstance(keys, list):
        raise FetchFailedError("the JWK set has no 'keys' list")
    usable_types = {kty for kty, _ in KEY_TYPES.values()}
    return {
        key.get("kid"): key
        for key in keys
        if isinstance(key, dict)
        and isinstance(key.get("kid", ""), str)
        and key.get("kty") in usable_types
        and key.get("use", "sig") == "sig"
    }
