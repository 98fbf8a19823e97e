"""The authorization server's core over a real index (both backends): the owner, grants, rotation, replay."""

from __future__ import annotations

import time

import pytest

from coffer_mcp import Coffer
from coffer_mcp.errors import InvalidArgumentError, NotFoundError
from coffer_mcp.services.authorization import (
    OWNER,
    AuthorizationService,
    GrantRefusedError,
    effective_scopes,
    sha256_hex,
)

RESOURCE = "http://127.0.0.1:8765/mcp"
PASSWORD = "correct horse battery staple"


def register(auth: AuthorizationService, client_id: str = "client-1") -> str:
    auth.save_client(client_id, "Test client", {"redirect_uris": ["http://127.0.0.1/cb"]}, secret="s3cret")
    return client_id


def grant(auth: AuthorizationService, scopes: tuple[str, ...] = ("coffer:read", "coffer:write")) -> str:
    """A consent given and its code: the code's value."""
    client_id = register(auth)
    request = auth.start_request(client_id, scopes, RESOURCE, {"redirect_uri": "http://127.0.0.1/cb"})
    approved = auth.approve(request, OWNER, scopes)
    assert approved is not None
    return approved[1]


def test_a_write_scope_reads_too_and_admin_does_everything() -> None:
    assert effective_scopes(["coffer:write"]) == {"coffer:read", "coffer:write"}
    assert effective_scopes(["coffer:admin"]) == {"coffer:read", "coffer:write", "coffer:admin"}
    assert effective_scopes(["coffer:read", "other"]) == {"coffer:read"}
    assert effective_scopes([]) == frozenset()


def test_the_owners_password_is_stored_as_a_salted_slow_hash_and_checked(coffer: Coffer) -> None:
    auth = coffer.authorization
    assert not auth.has_password()
    assert not auth.check_password(PASSWORD)  # no default password
    auth.set_password(PASSWORD)
    stored = coffer.index.owner_secret()
    assert stored is not None
    assert stored.startswith("scrypt$")
    assert PASSWORD not in stored
    assert auth.check_password(PASSWORD)
    assert not auth.check_password(PASSWORD + "!")
    assert not auth.check_password("")
    auth.set_password(PASSWORD)
    assert coffer.index.owner_secret() != stored  # a new salt each time


@pytest.mark.parametrize("password", ["short", " padded password ", "x" * 1025])
def test_a_weak_password_is_refused_and_nothing_is_stored(coffer: Coffer, password: str) -> None:
    with pytest.raises(InvalidArgumentError):
        coffer.authorization.set_password(password)
    assert not coffer.authorization.has_password()


def test_a_code_becomes_tokens_once_and_a_replay_revokes_its_grant(coffer: Coffer) -> None:
    auth = coffer.authorization
    code = grant(auth)
    loaded = auth.code(code)
    assert loaded is not None
    assert (loaded.subject, loaded.scopes, loaded.resource) == (OWNER, ("coffer:read", "coffer:write"), RESOURCE)
    issued = auth.exchange_code(code)
    assert issued.access_token.startswith("coffer_at_")
    assert auth.access_token(issued.access_token) is not None
    assert coffer.index.oauth_token(sha256_hex(issued.access_token)) is not None  # stored by its hash only
    assert auth.code(code) is None  # presented again: a replay
    assert auth.access_token(issued.access_token) is None  # ...which revoked what the code gave


def test_a_refresh_rotates_and_the_old_refresh_token_is_refused_and_revokes_the_family(coffer: Coffer) -> None:
    auth = coffer.authorization
    first = auth.exchange_code(grant(auth))
    assert auth.refresh_token(first.refresh_token) is not None
    second = auth.refresh(first.refresh_token, None)
    assert second.refresh_token != first.refresh_token
    assert auth.access_token(second.access_token) is not None
    with pytest.raises(GrantRefusedError) as refused:
        auth.refresh(first.refresh_token, None)
    assert refused.value.error == "invalid_grant"
    assert auth.access_token(second.access_token) is None
    assert auth.refresh_token(second.refresh_token) is None


def test_a_refresh_may_narrow_the_scopes_never_widen_them(coffer: Coffer) -> None:
    auth = coffer.authorization
    first = auth.exchange_code(grant(auth, ("coffer:read",)))
    narrowed = auth.refresh(first.refresh_token, ["coffer:read", "coffer:admin"])
    assert narrowed.scopes == ("coffer:read",)


def test_the_owner_may_grant_fewer_scopes_than_asked(coffer: Coffer) -> None:
    auth = coffer.authorization
    client_id = register(auth)
    request = auth.start_request(client_id, ("coffer:read", "coffer:write"), RESOURCE, {})
    approved = auth.approve(request, OWNER, ["coffer:read", "coffer:admin"])
    assert approved is not None
    assert auth.exchange_code(approved[1]).scopes == ("coffer:read",)


def test_a_request_is_answered_once(coffer: Coffer) -> None:
    auth = coffer.authorization
    client_id = register(auth)
    request = auth.start_request(client_id, ("coffer:read",), RESOURCE, {"state": "xyz"})
    pending = auth.pending_request(request)
    assert pending is not None
    assert pending.details == {"state": "xyz"}
    denied = auth.deny(request)
    assert denied is not None
    assert auth.pending_request(request) is None
    assert auth.approve(request, OWNER, ("coffer:read",)) is None


def test_a_token_minted_long_ago_has_expired(coffer: Coffer) -> None:
    past = AuthorizationService(coffer.index, access_seconds=60, clock=lambda: time.time() - 7200)
    issued = past.exchange_code(grant(past))
    assert past.access_token(issued.access_token) is not None  # by its own clock, two hours ago
    assert coffer.authorization.access_token(issued.access_token) is None
    assert coffer.authorization.refresh_token(issued.refresh_token) is not None  # 30 days


def test_revoking_a_token_revokes_its_grant_but_only_for_its_own_client(coffer: Coffer) -> None:
    auth = coffer.authorization
    issued = auth.exchange_code(grant(auth))
    auth.revoke(issued.access_token, "another-client")
    assert auth.access_token(issued.access_token) is not None
    auth.revoke(issued.access_token, "client-1")
    assert auth.access_token(issued.access_token) is None
    assert auth.refresh_token(issued.refresh_token) is None


def test_grants_and_clients_are_listed_and_revoked(coffer: Coffer) -> None:
    auth = coffer.authorization
    issued = auth.exchange_code(grant(auth))
    (listed,) = auth.grants()
    assert (listed.client_id, listed.client_name, listed.subject) == ("client-1", "Test client", OWNER)
    assert issued.access_token not in listed.model_dump_json()
    (client,) = auth.clients()
    assert (client.client_id, client.kind, client.grants) == ("client-1", "registered", 1)
    assert client.approved_at is not None
    assert "s3cret" not in client.model_dump_json()
    auth.revoke_grant(listed.grant_id)
    assert auth.grants() == []
    with pytest.raises(NotFoundError) as unknown:
        auth.revoke_grant(listed.grant_id)
    assert unknown.value.code == "unknown_grant"
    auth.exchange_code(grant(auth))
    auth.revoke_client("client-1")
    assert (auth.clients(), auth.grants()) == ([], [])
    with pytest.raises(NotFoundError) as gone:
        auth.revoke_client("client-1")
    assert gone.value.code == "unknown_client"
