"""A team's identity provider (Keycloak, Entra ID, Auth0, Okta): Coffer as a resource server.

``ExternalTokenVerifier`` is the MCP SDK's ``TokenVerifier`` for access tokens an external issuer
issued. A JWT is checked here, with PyJWT, against the issuer's published keys (``_jwks``): its
signature (asymmetric algorithms of ``auth_algorithms`` only, the key's type matching the
algorithm), ``iss`` exactly, ``aud`` naming this server (or one of a list doing so), ``exp``,
``nbf`` and ``iat`` within ``clock_skew``, and a ``sub``. Any other token is asked about at the
issuer's introspection endpoint (RFC 7662), when one is configured; answers are kept a minute,
by the token's hash.

Its scopes are the names in ``scope`` (space-separated), ``scp`` (Okta, Entra ID) and ``roles``
(Entra ID app roles), each replaced by the coffer scopes ``scope_map`` gives it; its subject is
``sub``; its client ``azp``, ``client_id``, ``appid`` (Entra ID v1) or ``cid`` (Okta).

Whatever goes wrong, the token is refused (the SDK answers 401) and never an exception escapes:
the reason is logged (at most once a minute per kind of reason), the token never.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx2
import jwt
from mcp.server.auth.provider import AccessToken

from coffer_mcp.errors import ConfigError
from coffer_mcp.settings import AUTH_ALGORITHMS, Settings, check_identity_provider_url
from coffer_mcp.web._jwks import KEY_TYPES, FetchFailedError, KeySet, fetch_json

__all__ = ["ExternalTokenVerifier", "Introspection", "external_verifier"]

log = logging.getLogger(__name__)

MAX_TOKEN_CHARS = 16 * 1024  # an Entra ID token with many groups stays well below
KEYS_LIMIT = 512 * 1024  # bytes of a metadata document or JWK set
INTROSPECTION_LIMIT = 64 * 1024
# Each new opaque token costs the provider one request: a flood of made-up ones waits its turn.
INTROSPECTIONS_AT_ONCE = 8
LOG_EVERY_SECONDS = 60.0
CLIENT_CLAIMS = ("azp", "client_id", "appid", "cid")
SCOPE_CLAIMS = ("scope", "scp", "roles")


@dataclass(frozen=True)
class Introspection:
    """An RFC 7662 endpoint and the client Coffer authenticates to it as (HTTP Basic)."""

    url: str
    client_id: str
    client_secret: str = field(repr=False)


class _RefusedError(Exception):
    """Why a token is refused: a kind (one log line a minute per kind) and details, never the token."""

    def __init__(self, kind: str, detail: str, *, level: int = logging.WARNING) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind, self.detail, self.level = kind, detail, level


class ExternalTokenVerifier:
    """Checks the access tokens of one external issuer (a ``TokenVerifier`` of the MCP SDK).

    Args:
        issuer: The issuer URL, exactly as its tokens' ``iss`` says it (https, or http on loopback).
        resource_url: This server's MCP endpoint (``https://host/mcp``): the ``resource`` of every
            token accepted, and the audience a token must name unless ``audience`` says otherwise.
        audience: The ``aud`` a token must name, when the provider names this server otherwise.
        jwks_url: The issuer's JWK set; None discovers it from the issuer's metadata.
        algorithms: The signature algorithms accepted (a subset of ``AUTH_ALGORITHMS``).
        clock_skew: Seconds of clock difference tolerated on ``exp``, ``nbf`` and ``iat``.
        scope_map: The provider's scope or role names as space-separated coffer scopes.
        introspection: Where opaque tokens are checked; None refuses every token that is not a JWT.
        timeout: Seconds one request to the provider may take in all.
        min_refresh: Seconds between two fetches of the keys at the least (unknown key ids).
        keys_max_age: Seconds the keys are used before they are fetched again.
        cache_seconds: Seconds an introspection answer is kept (a revoked token lives this long).
        clock: Monotonic seconds, for the refresh, cache and log intervals (tests pass their own).

    Raises:
        ConfigError: an issuer, JWK set or introspection URL Coffer must not trust, or an
            algorithm outside ``AUTH_ALGORITHMS``.
    """

    def __init__(
        self,
        issuer: str,
        *,
        resource_url: str,
        audience: str | None = None,
        jwks_url: str | None = None,
        algorithms: Sequence[str] = AUTH_ALGORITHMS,
        clock_skew: float = 60.0,
        scope_map: Mapping[str, str] | None = None,
        introspection: Introspection | None = None,
        timeout: float = 5.0,
        min_refresh: float = 10.0,
        keys_max_age: float = 300.0,
        cache_seconds: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        _check_config(issuer, jwks_url, introspection, algorithms)
        self.issuer = issuer
        self.resource_url = resource_url
        self.audience = audience or resource_url
        self.algorithms = tuple(algorithms)
        self.clock_skew = clock_skew
        self.scope_map = dict(scope_map or {})
        self._introspection = introspection
        # One TLS context for every request: building one reads the system's trust store (~50 ms).
        fetch = functools.partial(fetch_json, ssl_context=httpx2.create_ssl_context(), time_limit=timeout)
        self._fetch_introspection = functools.partial(fetch, limit=INTROSPECTION_LIMIT)
        self._introspecting = anyio.CapacityLimiter(INTROSPECTIONS_AT_ONCE)
        self._timeout = timeout
        self._keys = KeySet(
            issuer,
            jwks_url=jwks_url,
            fetch=functools.partial(fetch, limit=KEYS_LIMIT),
            min_refresh=min_refresh,
            max_age=keys_max_age,
            clock=clock,
        )
        self._answers = _Cache(clock, cache_seconds)
        self._log = _RefusalLog(clock)

    def __repr__(self) -> str:
        return f"ExternalTokenVerifier({self.issuer!r}, audience={self.audience!r})"

    async def verify_token(self, token: str) -> AccessToken | None:
        """The token's grant if this issuer issued it for this server and it is valid now, else None."""
        try:
            return await self._verify(token)
        except _RefusedError as refusal:
            self._log.refused(refusal)
        except Exception:  # a defect here must be a 401 for the client, not a 500
            log.exception("Refused a bearer token: checking it failed unexpectedly")
        return None

    async def _verify(self, token: str) -> AccessToken:
        if len(token) > MAX_TOKEN_CHARS:
            raise _RefusedError("malformed", f"longer than {MAX_TOKEN_CHARS} characters")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.DecodeError:
            if self._introspection is None:
                raise _RefusedError(
                    "malformed", "not a JWT, and no introspection endpoint is configured (auth_introspection_url)"
                ) from None
            return await self._introspect(token, self._introspection)
        except jwt.InvalidTokenError as exc:
            raise _RefusedError("malformed", str(exc)) from None
        return await self._verify_jwt(token, header)

    # -- JWTs -----------------------------------------------------------------------------------

    async def _verify_jwt(self, token: str, header: dict[str, Any]) -> AccessToken:
        alg = header.get("alg")
        if alg not in self.algorithms:
            raise _RefusedError("algorithm not allowed", f"{_shown(alg)} is not among {', '.join(self.algorithms)}")
        kid = header.get("kid")
        try:
            jwk = await self._keys.find(kid)
        except FetchFailedError as exc:
            raise _RefusedError("signing keys unavailable", str(exc)) from None
        if jwk is None:
            raise _RefusedError("unknown key", f"key id {_shown(kid)} is not among the signing keys of {self.issuer}")
        try:
            claims = jwt.decode(
                token,
                _verification_key(jwk, alg),
                algorithms=[alg],
                audience=self.audience,
                issuer=self.issuer,
                leeway=self.clock_skew,
                options={"require": ["exp", "iss", "aud", "sub"], "enforce_minimum_key_length": True},
            )
        except jwt.PyJWTError as exc:
            raise self._claims_refusal(token, exc) from None
        return self._grant(token, claims, expires_at=claims["exp"])

    def _claims_refusal(self, token: str, exc: jwt.PyJWTError) -> _RefusedError:
        if isinstance(exc, jwt.ExpiredSignatureError):
            return _RefusedError("expired", str(exc), level=logging.INFO)  # routine: the client refreshes it
        if isinstance(exc, jwt.ImmatureSignatureError):
            return _RefusedError("not yet valid", f"{exc} (clock skew tolerated: {self.clock_skew:g} s)")
        # The signature was checked before these claims: what they say may be shown to the operator.
        said = jwt.decode(token, options={"verify_signature": False})
        if isinstance(exc, jwt.InvalidAudienceError):
            return _RefusedError("wrong audience", f"aud is {_shown(said.get('aud'))}, not {self.audience!r}")
        if isinstance(exc, jwt.InvalidIssuerError):
            return _RefusedError("wrong issuer", f"iss is {_shown(said.get('iss'))}, not {self.issuer!r}")
        if isinstance(exc, jwt.InvalidSignatureError):
            return _RefusedError("bad signature", str(exc))
        return _RefusedError("malformed", str(exc))

    # -- opaque tokens --------------------------------------------------------------------------

    async def _introspect(self, token: str, introspection: Introspection) -> AccessToken:
        digest = hashlib.sha256(token.encode("utf-8")).hexdigest()
        known = self._answers.get(digest)
        if isinstance(known, _RefusedError):
            raise _RefusedError(known.kind, known.detail, level=known.level)
        if known is not None:
            return known
        try:
            with anyio.fail_after(self._timeout):  # waiting for a turn included
                async with self._introspecting:
                    answer = await self._fetch_introspection(
                        introspection.url,
                        form={"token": token, "token_type_hint": "access_token"},
                        auth=(introspection.client_id, introspection.client_secret),
                    )
        except TimeoutError:
            raise _RefusedError("introspection failed", f"no answer within {self._timeout:g} s") from None
        except FetchFailedError as exc:
            raise _RefusedError("introspection failed", str(exc)) from None
        try:
            grant = self._introspected(token, answer)
        except _RefusedError as refusal:
            self._answers.put(digest, refusal)
            raise
        self._answers.put(digest, grant, until=grant.expires_at)
        return grant

    def _introspected(self, token: str, answer: dict[str, Any]) -> AccessToken:
        if answer.get("active") is not True:
            raise _RefusedError("inactive", "the introspection endpoint says it is not active", level=logging.INFO)
        if "iss" in answer and answer["iss"] != self.issuer:
            raise _RefusedError("wrong issuer", f"iss is {_shown(answer['iss'])}, not {self.issuer!r}")
        audiences = answer.get("aud")
        if self.audience not in (audiences if isinstance(audiences, list) else [audiences]):
            raise _RefusedError("wrong audience", f"aud is {_shown(audiences)}, not {self.audience!r}")
        now = time.time()
        exp, nbf = _number(answer.get("exp")), _number(answer.get("nbf"))
        if exp is not None and exp <= now - self.clock_skew:
            raise _RefusedError("expired", "the introspection answer's exp has passed", level=logging.INFO)
        if nbf is not None and nbf > now + self.clock_skew:
            raise _RefusedError("not yet valid", "the introspection answer's nbf is to come")
        return self._grant(token, {**answer, "sub": answer.get("sub") or answer.get("username")}, expires_at=exp)

    def _grant(self, token: str, claims: dict[str, Any], *, expires_at: float | None) -> AccessToken:
        subject = claims.get("sub")
        return AccessToken(
            token=token,
            client_id=next((claims[c] for c in CLIENT_CLAIMS if isinstance(claims.get(c), str)), ""),
            scopes=granted_scopes(claims, self.scope_map),
            expires_at=int(expires_at) if expires_at is not None else None,
            resource=self.resource_url,
            subject=subject if isinstance(subject, str) else None,
            claims=claims,
        )


def granted_scopes(claims: Mapping[str, Any], scope_map: Mapping[str, str]) -> list[str]:
    """The scopes a token grants: its ``scope``, ``scp`` and ``roles`` names, mapped by ``scope_map``."""
    names: list[str] = []
    for claim in SCOPE_CLAIMS:
        value = claims.get(claim)
        if isinstance(value, str):
            names += value.split()
        elif isinstance(value, list):
            names += [name for name in value if isinstance(name, str)]
    mapped = [scope for name in names for scope in (scope_map[name].split() if name in scope_map else [name])]
    return list(dict.fromkeys(mapped))


def external_verifier(settings: Settings, resource_url: str) -> ExternalTokenVerifier | None:
    """The verifier of ``settings.auth_issuer``'s tokens for the server at ``resource_url``; None without one.

    Args:
        settings: Loaded settings (``load_settings`` has resolved the introspection client's credentials).
        resource_url: This server's MCP endpoint as clients reach it, e.g. ``https://coffer.example.com/mcp``.
    """
    if not settings.auth_issuer:
        return None
    introspection = None
    if settings.auth_introspection_url and settings.auth_client_id and settings.auth_client_secret:
        introspection = Introspection(
            settings.auth_introspection_url, settings.auth_client_id, settings.auth_client_secret.get_secret_value()
        )
    return ExternalTokenVerifier(
        settings.auth_issuer,
        resource_url=resource_url,
        audience=settings.auth_audience,
        jwks_url=settings.auth_jwks_url,
        algorithms=settings.auth_algorithms,
        clock_skew=settings.auth_clock_skew,
        scope_map=settings.auth_scope_map,
        introspection=introspection,
    )


def _check_config(
    issuer: str, jwks_url: str | None, introspection: Introspection | None, algorithms: Sequence[str]
) -> None:
    urls = {"auth_issuer": issuer, "auth_jwks_url": jwks_url}
    if introspection is not None:
        urls["auth_introspection_url"] = introspection.url
    for name, url in urls.items():
        try:
            if url is not None:
                check_identity_provider_url(url)
        except ValueError as exc:
            raise ConfigError(f"{name} {url!r} {exc}.", hint=f"Fix {name}: the identity provider's URL.") from None
    refused = [name for name in algorithms if name not in AUTH_ALGORITHMS]
    if refused or not algorithms:
        raise ConfigError(
            f"auth_algorithms {list(algorithms)!r} is not a choice among {', '.join(AUTH_ALGORITHMS)}.",
            hint="Name the asymmetric algorithms your identity provider signs with (RS256 for most).",
        )


def _verification_key(jwk: dict[str, Any], alg: str) -> jwt.PyJWK:
    """The key ``jwk`` as a key for ``alg`` only: its type must be ``alg``'s, and its own ``alg`` (if any) too."""
    kty, curves = KEY_TYPES[alg]
    if jwk.get("kty") != kty or (curves is not None and jwk.get("crv") not in curves) or jwk.get("alg", alg) != alg:
        raise _RefusedError("algorithm not allowed", f"a {alg} token names a key for {_shown(jwk.get('alg') or kty)}")
    try:
        return jwt.PyJWK(jwk, algorithm=alg)
    except jwt.PyJWTError as exc:
        raise _RefusedError("unusable key", f"key id {_shown(jwk.get('kid'))}: {exc}") from None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _shown(value: Any) -> str:
    """A value a token sent, as a log shows it: quoted, and cut short (it is the sender's text)."""
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."


class _Cache:
    """Introspection answers by token hash, each kept ``seconds`` (or to the token's expiry, if sooner)."""

    MAX_ENTRIES = 4096

    def __init__(self, clock: Callable[[], float], seconds: float) -> None:
        self._clock, self._seconds = clock, seconds
        self._entries: dict[str, tuple[float, Any]] = {}

    def get(self, key: str) -> Any:
        entry = self._entries.get(key)
        if entry is None or entry[0] <= self._clock():
            self._entries.pop(key, None)
            return None
        return entry[1]

    def put(self, key: str, value: Any, *, until: float | None = None) -> None:
        seconds = self._seconds if until is None else min(self._seconds, until - time.time())
        self._entries[key] = (self._clock() + seconds, value)
        while len(self._entries) > self.MAX_ENTRIES:
            del self._entries[next(iter(self._entries))]  # the oldest


class _RefusalLog:
    """One log line per kind of refusal a minute at most, counting the ones it did not write."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._last: dict[str, tuple[float, int]] = {}

    def refused(self, refusal: _RefusedError) -> None:
        now = self._clock()
        logged_at, unlogged = self._last.get(refusal.kind, (-float("inf"), 0))
        if now - logged_at < LOG_EVERY_SECONDS:
            self._last[refusal.kind] = (logged_at, unlogged + 1)
            return
        self._last[refusal.kind] = (now, 0)
        more = f" (and {unlogged} more so since the last report)" if unlogged else ""
        log.log(refusal.level, "Refused a bearer token, %s: %s%s", refusal.kind, refusal.detail, more)
