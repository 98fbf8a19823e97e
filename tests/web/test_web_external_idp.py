"""A team's identity provider: tokens it issued are accepted, every other token is refused, cleanly.

The verifier runs against a real OpenID Connect issuer on loopback (``oidc_issuer``); its own
clock (key refreshes, the introspection cache, the log's pace) is a counter the tests move.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from cryptography.hazmat.primitives import serialization

from coffer_mcp import load_settings
from coffer_mcp.errors import ConfigError
from coffer_mcp.settings import AUTH_ALGORITHMS
from coffer_mcp.web import ExternalTokenVerifier, Introspection, external_verifier
from coffer_mcp.web._jwks import KEY_TYPES
from tests.web.oidc_issuer import (
    CLIENT_ID,
    CLIENT_SECRET,
    REALM,
    RESOURCE,
    Issuer,
    SigningKey,
    serve,
    signing_input,
    unsigned_token,
)

pytestmark = pytest.mark.anyio

CERTS = f"{REALM}/certs"
DISCOVERY = f"{REALM}/.well-known/openid-configuration"


class Clock:
    """Monotonic seconds the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def rsa_key() -> SigningKey:
    return SigningKey.make("RS256")


@pytest.fixture
def issuer(rsa_key: SigningKey) -> Iterator[Issuer]:
    yield from serve(Issuer(rsa_key))


@pytest.fixture
def clock() -> Clock:
    return Clock()


def verifier_for(issuer: Issuer, clock: Clock, **options: Any) -> ExternalTokenVerifier:
    options.setdefault("timeout", 10.0)
    return ExternalTokenVerifier(issuer.url, resource_url=RESOURCE, clock=clock, **options)


async def verify(verifier: ExternalTokenVerifier, token: str) -> Any:
    with anyio.fail_after(30):
        return await verifier.verify_token(token)


# -- accepted -------------------------------------------------------------------------------------


async def test_a_token_the_issuer_signed_for_this_server_is_accepted_with_its_scopes_subject_and_client(
    issuer: Issuer, clock: Clock
) -> None:
    token = issuer.token()
    grant = await verify(verifier_for(issuer, clock), token)
    assert grant is not None
    assert grant.token == token
    assert grant.scopes == ["openid", "coffer:read", "coffer:write"]
    assert (grant.subject, grant.client_id, grant.resource) == ("alice", "claude-desktop", RESOURCE)
    assert grant.expires_at is not None
    assert grant.expires_at > time.time()
    assert grant.claims is not None
    assert grant.claims["iss"] == issuer.url
    assert issuer.requests[DISCOVERY] == 1  # the keys were found through the issuer's metadata


async def test_the_keys_are_fetched_once_for_many_tokens(issuer: Issuer, clock: Clock) -> None:
    verifier = verifier_for(issuer, clock)
    for subject in ("alice", "bob", "carol"):
        assert await verify(verifier, issuer.token(sub=subject)) is not None
    assert issuer.requests[CERTS] == 1


async def test_an_issuer_publishing_only_rfc_8414_metadata_is_found_too(issuer: Issuer, clock: Clock) -> None:
    issuer.openid_configuration = False
    assert await verify(verifier_for(issuer, clock), issuer.token()) is not None
    assert issuer.requests[f"/.well-known/oauth-authorization-server{REALM}"] == 1


async def test_a_configured_jwks_url_is_used_without_asking_for_metadata(issuer: Issuer, clock: Clock) -> None:
    assert await verify(verifier_for(issuer, clock, jwks_url=issuer.jwks_url), issuer.token()) is not None
    assert issuer.requests[DISCOVERY] == 0


@pytest.mark.parametrize(
    ("alg", "publish_alg"), [("RS256", False), ("PS256", True), ("PS256", False), ("ES256", True), ("EdDSA", True)]
)
async def test_tokens_signed_with_rsa_pss_ec_and_ed25519_keys_are_accepted(
    issuer: Issuer, clock: Clock, alg: str, publish_alg: bool
) -> None:
    key = SigningKey.make(alg, publish_alg=publish_alg)
    issuer.keys = [key]
    assert await verify(verifier_for(issuer, clock), issuer.token(key)) is not None


async def test_a_token_expired_less_than_the_clock_skew_ago_is_still_accepted(issuer: Issuer, clock: Clock) -> None:
    token = issuer.token(exp=int(time.time()) - 20)
    assert await verify(verifier_for(issuer, clock, clock_skew=60), token) is not None


async def test_an_audience_list_naming_this_server_is_accepted(issuer: Issuer, clock: Clock) -> None:
    token = issuer.token(aud=["account", RESOURCE])
    assert await verify(verifier_for(issuer, clock), token) is not None


async def test_a_configured_audience_replaces_the_servers_url(issuer: Issuer, clock: Clock) -> None:
    verifier = verifier_for(issuer, clock, audience="api://coffer")
    grant = await verify(verifier, issuer.token(aud="api://coffer"))
    assert grant is not None
    assert grant.resource == RESOURCE  # the token is for this server, whatever the provider calls it
    assert await verify(verifier, issuer.token()) is None


async def test_entra_scp_and_app_roles_become_coffer_scopes_through_the_scope_map(issuer: Issuer, clock: Clock) -> None:
    scope_map = {"Coffer.Read": "coffer:read", "Coffer.Admin": "coffer:admin coffer:write coffer:read"}
    token = issuer.token(scope=None, scp="Coffer.Read", roles=["Coffer.Admin"], azp=None, appid="entra-app")
    grant = await verify(verifier_for(issuer, clock, scope_map=scope_map), token)
    assert grant is not None
    assert grant.scopes == ["coffer:read", "coffer:admin", "coffer:write"]
    assert grant.client_id == "entra-app"


async def test_okta_scp_as_a_list_and_cid_are_read(issuer: Issuer, clock: Clock) -> None:
    token = issuer.token(scope=None, scp=["coffer:read"], azp=None, cid="okta-client")
    grant = await verify(verifier_for(issuer, clock), token)
    assert grant is not None
    assert (grant.scopes, grant.client_id) == (["coffer:read"], "okta-client")


# -- refused --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("claims", "reason"),
    [
        ({"exp": -3600}, "expired"),  # times: seconds from now, read when the test runs
        ({"nbf": 3600}, "not yet valid"),
        ({"iat": 3600}, "not yet valid"),
        ({"aud": "https://other.example.com/mcp"}, "wrong audience"),
        ({"aud": ["account"]}, "wrong audience"),
        ({"aud": None}, "malformed"),
        ({"iss": "https://evil.example.com/realms/team"}, "wrong issuer"),
        ({"exp": None}, "malformed"),
        ({"sub": None}, "malformed"),
    ],
    ids=[
        "expired",
        "nbf-ahead",
        "iat-ahead",
        "other-audience",
        "audience-list-without-us",
        "no-aud",
        "other-issuer",
        "no-exp",
        "no-sub",
    ],
)
async def test_a_token_that_is_out_of_date_or_for_someone_else_is_refused(
    issuer: Issuer, clock: Clock, caplog: pytest.LogCaptureFixture, claims: dict[str, Any], reason: str
) -> None:
    # Not from the clock at collection: a long run (an hour under load) made "an hour ahead" the past.
    now = int(time.time())
    token = issuer.token(
        **{k: now + v if k in ("exp", "nbf", "iat") and v is not None else v for k, v in claims.items()}
    )
    with caplog.at_level(logging.INFO, logger="coffer_mcp.web._external"):
        assert await verify(verifier_for(issuer, clock), token) is None
    assert f"Refused a bearer token, {reason}:" in caplog.text
    assert token not in caplog.text


async def test_a_wrong_audience_is_logged_with_the_audience_the_token_named(
    issuer: Issuer, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    # Keycloak without an audience mapper names "account": the log says so, and what was expected.
    with caplog.at_level(logging.WARNING, logger="coffer_mcp.web._external"):
        assert await verify(verifier_for(issuer, clock), issuer.token(aud="account")) is None
    assert f"aud is 'account', not '{RESOURCE}'" in caplog.text


async def test_a_token_with_alg_none_is_refused(issuer: Issuer, clock: Clock) -> None:
    header = {"alg": "none", "typ": "JWT", "kid": issuer.keys[0].kid}
    payload = {"iss": issuer.url, "aud": RESOURCE, "sub": "mallory", "exp": int(time.time()) + 300}
    assert await verify(verifier_for(issuer, clock), unsigned_token(header, payload)) is None
    assert await verify(verifier_for(issuer, clock), unsigned_token({**header, "alg": "None"}, payload)) is None


async def test_an_hs256_token_signed_with_the_issuers_public_key_as_secret_is_refused(
    issuer: Issuer, clock: Clock
) -> None:
    # The classic algorithm confusion: the public key is public, so anyone can make this HMAC.
    public_pem = (
        issuer.keys[0]
        .private.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    header = {"alg": "HS256", "typ": "JWT", "kid": issuer.keys[0].kid}
    payload = {"iss": issuer.url, "aud": RESOURCE, "sub": "mallory", "scope": "coffer:admin"}
    payload["exp"] = int(time.time()) + 300
    signature = hmac.new(public_pem, signing_input(header, payload), hashlib.sha256).digest()
    forged = unsigned_token(header, payload, signature)
    verifier = verifier_for(issuer, clock)
    assert await verify(verifier, forged) is None
    # Allowing HS256 is not even possible: only asymmetric algorithms are accepted.
    with pytest.raises(ConfigError, match="auth_algorithms"):
        verifier_for(issuer, clock, algorithms=["RS256", "HS256"])


async def test_a_token_whose_algorithm_does_not_fit_its_key_is_refused(issuer: Issuer, clock: Clock) -> None:
    ec_key = SigningKey.make("ES256")
    ec_key.kid = issuer.keys[0].kid  # an ES256 signature naming the issuer's RSA key
    assert await verify(verifier_for(issuer, clock), issuer.token(ec_key)) is None


async def test_a_token_signed_by_another_key_under_a_published_key_id_is_refused(issuer: Issuer, clock: Clock) -> None:
    impostor = SigningKey.make("RS256")
    impostor.kid = issuer.keys[0].kid
    assert await verify(verifier_for(issuer, clock), issuer.token(impostor)) is None


async def test_a_token_only_an_algorithm_left_out_of_auth_algorithms_could_check_is_refused(
    issuer: Issuer, clock: Clock
) -> None:
    assert await verify(verifier_for(issuer, clock, algorithms=["ES256"]), issuer.token()) is None


async def test_garbage_is_refused_and_an_opaque_token_without_introspection_too(issuer: Issuer, clock: Clock) -> None:
    verifier = verifier_for(issuer, clock)
    for token in ("", "not-a-jwt", "a.b.c", "x" * 100_000, issuer.token() + "x", "Ω.Ω.Ω"):
        assert await verify(verifier, token) is None


# -- keys: unknown ids, rotation, a provider that is down -----------------------------------------


async def test_an_unknown_key_id_fetches_the_keys_once_and_a_flood_of_them_not_again(
    issuer: Issuer, clock: Clock
) -> None:
    verifier = verifier_for(issuer, clock, min_refresh=10)
    assert await verify(verifier, issuer.token()) is not None
    assert issuer.requests[CERTS] == 1
    clock.now += 30
    stranger = SigningKey.make("RS256")  # never published
    assert await verify(verifier, issuer.token(stranger)) is None
    assert issuer.requests[CERTS] == 2  # refreshed once: the provider might have rotated its keys
    for _ in range(20):
        assert await verify(verifier, issuer.token(SigningKey(f"random-{_}", "RS256", stranger.private))) is None
    assert issuer.requests[CERTS] == 2  # an attacker's random key ids do not reach the provider
    assert await verify(verifier, issuer.token()) is not None  # and known keys keep working


async def test_a_rotated_key_is_accepted_after_the_refresh_and_the_old_one_while_it_is_published(
    issuer: Issuer, clock: Clock
) -> None:
    verifier = verifier_for(issuer, clock, min_refresh=10, keys_max_age=300)
    old = issuer.keys[0]
    assert await verify(verifier, issuer.token(old)) is not None
    new = SigningKey.make("RS256")
    issuer.keys = [new, old]  # the provider publishes its next key beside the current one
    clock.now += 11
    assert await verify(verifier, issuer.token(new)) is not None
    assert issuer.requests[CERTS] == 2
    assert await verify(verifier, issuer.token(old)) is not None
    issuer.keys = [new]  # ... and withdraws the old one
    clock.now += 301
    assert await verify(verifier, issuer.token(old)) is None
    assert await verify(verifier, issuer.token(new)) is not None


async def test_a_jwks_endpoint_that_is_down_refuses_tokens_cleanly_and_is_tried_again_later(
    issuer: Issuer, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    issuer.jwks_status = 503
    verifier = verifier_for(issuer, clock, min_refresh=10)
    with caplog.at_level(logging.WARNING, logger="coffer_mcp.web._external"):
        assert await verify(verifier, issuer.token()) is None
        assert await verify(verifier, issuer.token()) is None
    assert issuer.requests[CERTS] == 1  # not hammered while it is down
    assert "signing keys unavailable" in caplog.text
    assert "HTTP 503" in caplog.text
    issuer.jwks_status = 200
    clock.now += 11
    assert await verify(verifier, issuer.token()) is not None


async def test_keys_known_before_the_provider_went_down_keep_working(issuer: Issuer, clock: Clock) -> None:
    verifier = verifier_for(issuer, clock, keys_max_age=300)
    assert await verify(verifier, issuer.token()) is not None
    issuer.jwks_status = 500
    clock.now += 301
    assert await verify(verifier, issuer.token()) is not None
    assert issuer.requests[CERTS] == 2


async def test_a_jwks_url_nobody_listens_on_refuses_tokens_cleanly(issuer: Issuer, clock: Clock) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}/certs"
    assert await verify(verifier_for(issuer, clock, jwks_url=closed), issuer.token()) is None


async def test_a_jwks_endpoint_that_hangs_is_given_up_on(issuer: Issuer, clock: Clock) -> None:
    issuer.hang.set()
    assert await verify(verifier_for(issuer, clock, timeout=0.5), issuer.token()) is None


async def test_an_oversized_jwk_set_is_refused(issuer: Issuer, clock: Clock) -> None:
    issuer.jwks_padding = 2 * 1024 * 1024
    assert await verify(verifier_for(issuer, clock), issuer.token()) is None


async def test_metadata_naming_another_issuer_is_not_trusted(issuer: Issuer, clock: Clock) -> None:
    # The metadata of a mixed-up or spoofed issuer may name keys that are not this issuer's.
    issuer.metadata = lambda: {"issuer": "https://evil.example.com", "jwks_uri": issuer.jwks_url}  # type: ignore[method-assign]
    assert await verify(verifier_for(issuer, clock), issuer.token()) is None
    assert issuer.requests[CERTS] == 0


# -- opaque tokens: introspection -----------------------------------------------------------------


def introspecting(issuer: Issuer, clock: Clock, secret: str = CLIENT_SECRET) -> ExternalTokenVerifier:
    return verifier_for(issuer, clock, introspection=Introspection(f"{issuer.url}/introspect", CLIENT_ID, secret))


async def test_an_active_opaque_token_is_accepted_through_introspection_and_its_answer_kept_a_while(
    issuer: Issuer, clock: Clock
) -> None:
    issuer.introspection["opaque-1"] = {
        "active": True,
        "iss": issuer.url,
        "aud": [RESOURCE],
        "sub": "bob",
        "client_id": "cursor",
        "scope": "coffer:read",
        "exp": int(time.time()) + 600,
    }
    verifier = introspecting(issuer, clock)
    grant = await verify(verifier, "opaque-1")
    assert grant is not None
    assert (grant.subject, grant.client_id, grant.scopes) == ("bob", "cursor", ["coffer:read"])
    assert grant.resource == RESOURCE
    assert await verify(verifier, "opaque-1") is not None
    assert issuer.requests[f"{REALM}/introspect"] == 1
    clock.now += 61
    del issuer.introspection["opaque-1"]  # revoked: the next question after the cache says so
    assert await verify(verifier, "opaque-1") is None
    assert issuer.requests[f"{REALM}/introspect"] == 2


@pytest.mark.parametrize(
    "answer",
    [
        {"active": False},
        {"active": "true", "aud": RESOURCE},
        {"active": True, "sub": "bob"},  # no audience: maybe another server's token
        {"active": True, "aud": "https://other.example.com/mcp"},
        {"active": True, "aud": RESOURCE, "iss": "https://evil.example.com"},
        {"active": True, "aud": RESOURCE, "exp": int(time.time()) - 3600},
    ],
    ids=["inactive", "active-not-boolean", "no-audience", "other-audience", "other-issuer", "expired"],
)
async def test_an_opaque_token_the_introspection_does_not_vouch_for_is_refused(
    issuer: Issuer, clock: Clock, answer: dict[str, Any]
) -> None:
    issuer.introspection["opaque-2"] = answer
    assert await verify(introspecting(issuer, clock), "opaque-2") is None


async def test_introspection_with_wrong_client_credentials_refuses_tokens_and_says_why(
    issuer: Issuer, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    issuer.introspection["opaque-3"] = {"active": True, "aud": RESOURCE, "sub": "bob"}
    with caplog.at_level(logging.WARNING, logger="coffer_mcp.web._external"):
        assert await verify(introspecting(issuer, clock, secret="wrong"), "opaque-3") is None
    assert "introspection failed" in caplog.text
    assert "HTTP 401" in caplog.text
    assert "wrong" not in caplog.text.replace("wrong issuer", "")


async def test_a_flood_of_made_up_opaque_tokens_reaches_the_provider_only_a_few_at_a_time(
    issuer: Issuer, clock: Clock
) -> None:
    issuer.hang_introspection.set()
    verifier = introspecting(issuer, clock)
    answers: list[Any] = []

    async def present(token: str) -> None:
        answers.append(await verifier.verify_token(token))

    with anyio.fail_after(30):
        async with anyio.create_task_group() as group:
            for i in range(20):
                group.start_soon(present, f"made-up-{i}")
            # The provider holds 8 requests; the other 12 tokens wait for a turn, not at the provider.
            while issuer.introspecting < 8 or verifier._introspecting.statistics().tasks_waiting < 12:  # noqa: ASYNC110 - a server thread counts
                await anyio.sleep(0.01)
            issuer.release.set()
    assert answers == [None] * 20
    assert issuer.most_introspecting == 8
    assert issuer.requests[f"{REALM}/introspect"] == 20


# -- logs -----------------------------------------------------------------------------------------


async def test_refusals_are_logged_once_a_minute_per_reason_with_a_count_and_never_the_token(
    issuer: Issuer, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    verifier = verifier_for(issuer, clock)
    tokens = [issuer.token(aud=f"https://other{i}.example.com/mcp") for i in range(5)]
    with caplog.at_level(logging.WARNING, logger="coffer_mcp.web._external"):
        for token in tokens[:4]:
            assert await verify(verifier, token) is None
        clock.now += 61
        assert await verify(verifier, tokens[4]) is None
    lines = [r.getMessage() for r in caplog.records if r.name == "coffer_mcp.web._external"]
    assert len(lines) == 2
    assert "(and 3 more so since the last report)" in lines[1]
    assert not any(token in caplog.text for token in tokens)


# -- settings and the seam the HTTP server uses ---------------------------------------------------


def test_key_types_cover_every_algorithm_the_settings_accept() -> None:
    assert set(KEY_TYPES) == set(AUTH_ALGORITHMS)


def test_without_an_issuer_there_is_no_external_verifier(tmp_path: Path) -> None:
    assert external_verifier(load_settings({"COFFER_HOME": str(tmp_path)}), RESOURCE) is None


@pytest.fixture
def verifier_from_environment(issuer: Issuer, tmp_path: Path) -> ExternalTokenVerifier:
    """Built as ``coffer serve`` builds it: from the environment, before the event loop runs."""
    environ = {
        "COFFER_HOME": str(tmp_path),
        "COFFER_AUTH": "external",
        "COFFER_AUTH_ISSUER": issuer.url,
        "COFFER_AUTH_ALGORITHMS": "RS256, ES256",
        "COFFER_AUTH_CLOCK_SKEW": "30",
        "COFFER_AUTH_SCOPE_MAP": "coffer-admins=coffer:admin coffer:read",
        "COFFER_AUTH_INTROSPECTION_URL": f"{issuer.url}/introspect",
        "COFFER_AUTH_CLIENT_SECRET_ENV": "KEYCLOAK_SECRET",
        "COFFER_AUTH_CLIENT_ID": CLIENT_ID,
        "KEYCLOAK_SECRET": CLIENT_SECRET,
    }
    settings = load_settings(environ)
    assert settings.auth_algorithms == ["RS256", "ES256"]
    assert CLIENT_SECRET not in repr(settings)
    verifier = external_verifier(settings, RESOURCE)
    assert verifier is not None
    return verifier


async def test_settings_from_the_environment_build_a_verifier_that_accepts_the_issuers_tokens(
    issuer: Issuer, verifier_from_environment: ExternalTokenVerifier
) -> None:
    grant = await verify(verifier_from_environment, issuer.token(scope="coffer-admins"))
    assert grant is not None
    assert grant.scopes == ["coffer:admin", "coffer:read"]
    issuer.introspection["opaque-4"] = {"active": True, "aud": RESOURCE, "username": "carol"}
    grant = await verify(verifier_from_environment, "opaque-4")
    assert grant is not None
    assert grant.subject == "carol"


SSO = {"COFFER_AUTH": "external", "COFFER_AUTH_ISSUER": "https://sso.example.com"}


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"COFFER_AUTH_ISSUER": "http://sso.example.com/realms/team"}, "must be an https:// URL"),
        ({"COFFER_AUTH_ISSUER": "https://sso.example.com/realms/team?x=1"}, "without credentials, query or fragment"),
        ({"COFFER_AUTH_ISSUER": "sso.example.com"}, "must be an https:// URL"),
        ({**SSO, "COFFER_AUTH_JWKS_URL": "http://10.0.0.5/certs"}, "https"),
        ({**SSO, "COFFER_AUTH_ALGORITHMS": "RS256,HS256"}, "HS256 refused"),
        ({**SSO, "COFFER_AUTH_ALGORITHMS": "none"}, "none refused"),
        ({**SSO, "COFFER_AUTH_SCOPE_MAP": "Admins=coffer:root"}, "coffer:root"),
        ({**SSO, "COFFER_AUTH_SCOPE_MAP": "coffer:read"}, "IdpName="),
        ({"COFFER_AUTH_AUDIENCE": "api://coffer"}, "auth_issuer is not"),
        (
            {**SSO, "COFFER_AUTH_INTROSPECTION_URL": "https://sso.example.com/introspect"},
            "COFFER_AUTH_CLIENT_ID or COFFER_AUTH_CLIENT_SECRET is not set",
        ),
    ],
    ids=[
        "http-issuer",
        "query",
        "no-scheme",
        "http-jwks",
        "hs256",
        "none",
        "unknown-scope",
        "map-syntax",
        "audience-alone",
        "introspection-without-credentials",
    ],
)
def test_settings_coffer_cannot_trust_are_refused_with_a_hint(
    tmp_path: Path, environ: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings({"COFFER_HOME": str(tmp_path), **environ})
    assert message in str(caught.value)
    assert caught.value.hint


def test_an_http_issuer_on_loopback_is_allowed_for_tests(tmp_path: Path) -> None:
    for url in ("http://127.0.0.1:8080/realms/team", "http://localhost:8080", "http://[::1]:9000/"):
        assert load_settings({"COFFER_HOME": str(tmp_path), **SSO, "COFFER_AUTH_ISSUER": url}).auth_issuer == url


def test_config_yaml_may_not_hold_the_introspection_clients_secret(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text(
        "auth_issuer: https://sso.example.com\nauth_client_secret: hunter2\n", encoding="utf-8"
    )
    with pytest.raises(ConfigError, match="holds auth_client_secret") as caught:
        load_settings({"COFFER_HOME": str(home)})
    assert "hunter2" not in str(caught.value)
    assert "environment" in caught.value.hint
