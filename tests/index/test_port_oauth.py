"""The index port's authorization-server part (``index.oauth``), one suite over both backends.

What one server stores, another index object on the same database reads (a team's servers share
one PostgreSQL); a code or refresh token is exchanged once even when two writers race for it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from coffer_mcp.index.oauth import OAuthClientRow, OAuthTokenRow
from coffer_mcp.index.port import Index
from tests.index.test_port import BACKENDS, open_backend

NOW = 1_900_000_000.0


@pytest.fixture(params=BACKENDS)
def pair(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Index, Index]]:
    """Two index objects on one database, as two servers of a team have."""
    first = open_backend(request.param, tmp_path, request)
    url = getattr(first, "url", None)
    second = open_backend(request.param, tmp_path, request) if url is None else type(first)(url)  # type: ignore[call-arg]
    yield first, second
    first.close()
    second.close()


def client(client_id: str = "c1", **fields: object) -> OAuthClientRow:
    values: dict[str, object] = {
        "client_id": client_id,
        "name": f"Client {client_id}",
        "metadata": {"redirect_uris": ["http://127.0.0.1/cb"], "client_name": f"Client {client_id}"},
        "secret_sha256": "ab" * 32,
        "created_at": "2030-01-01T00:00:00.000Z",
    }
    values.update(fields)
    return OAuthClientRow(**values)  # type: ignore[arg-type]


def token(
    digest: str, kind: str = "access", grant: str = "g1", client_id: str = "c1", **fields: object
) -> OAuthTokenRow:
    values: dict[str, object] = {
        "token_sha256": digest,
        "kind": kind,
        "grant_id": grant,
        "client_id": client_id,
        "subject": "owner",
        "scopes": ("coffer:read", "coffer:write"),
        "resource": "http://127.0.0.1:8765/mcp",
        "expires_at": NOW + 3600,
        "created_at": "2030-01-01T00:00:01.000Z",
        "details": {"code_challenge": "x" * 43},
    }
    values.update(fields)
    return OAuthTokenRow(**values)  # type: ignore[arg-type]


def test_a_client_stored_by_one_server_is_read_by_another(pair: tuple[Index, Index]) -> None:
    first, second = pair
    with first.transaction():
        first.save_oauth_client(client("c1"))
        first.save_oauth_client(client("c2", secret_sha256=None, fetched_at=NOW, created_at="2030-01-02T00:00:00.000Z"))
    found = second.oauth_client("c1")
    assert found == client("c1")
    assert [c.client_id for c in second.oauth_clients()] == ["c1", "c2"]
    assert second.oauth_client("c2").fetched_at == NOW  # type: ignore[union-attr]
    assert second.oauth_client("nobody") is None


def test_saving_a_client_again_replaces_it_but_keeps_its_first_approval(pair: tuple[Index, Index]) -> None:
    index, _ = pair
    with index.transaction():
        index.save_oauth_client(client("c1"))
        index.approve_oauth_client("c1", "2030-01-05T00:00:00.000Z")
        index.approve_oauth_client("c1", "2030-01-06T00:00:00.000Z")
        index.save_oauth_client(client("c1", name="Renamed", approved_at=None))
    found = index.oauth_client("c1")
    assert found is not None
    assert (found.name, found.approved_at) == ("Renamed", "2030-01-05T00:00:00.000Z")


def test_a_token_is_found_by_its_hash_with_its_clients_name(pair: tuple[Index, Index]) -> None:
    first, second = pair
    with first.transaction():
        first.save_oauth_client(client("c1"))
        first.add_oauth_token(token("a" * 64))
    found = second.oauth_token("a" * 64)
    assert found == token("a" * 64, client_name="Client c1")
    assert second.oauth_token("b" * 64) is None


def test_a_code_is_used_once(pair: tuple[Index, Index]) -> None:
    first, second = pair
    with first.transaction():
        first.add_oauth_token(token("c" * 64, kind="code"))
    with second.transaction():
        used = second.use_oauth_token("c" * 64, "2030-01-01T00:00:02.000Z")
    assert used is not None
    assert (used.kind, used.used_at) == ("code", None)
    with first.transaction():
        assert first.use_oauth_token("c" * 64, "2030-01-01T00:00:03.000Z") is None
    assert first.oauth_token("c" * 64).used_at == "2030-01-01T00:00:02.000Z"  # type: ignore[union-attr]
    with first.transaction():
        assert first.use_oauth_token("unknown", "2030-01-01T00:00:03.000Z") is None


def test_of_two_servers_racing_to_use_one_refresh_token_exactly_one_wins(pair: tuple[Index, Index]) -> None:
    first, second = pair
    with first.transaction():
        first.add_oauth_token(token("r" * 64, kind="refresh"))
    barrier = threading.Barrier(2)
    won: list[bool] = []

    def race(index: Index) -> None:
        barrier.wait(timeout=30)
        with index.transaction():
            won.append(index.use_oauth_token("r" * 64, "2030-01-01T00:00:02.000Z") is not None)

    threads = [threading.Thread(target=race, args=(index,)) for index in (first, second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(won) == [False, True]


def test_revoking_a_grant_deletes_its_tokens_and_no_others(pair: tuple[Index, Index]) -> None:
    first, second = pair
    with first.transaction():
        first.add_oauth_token(token("1" * 64, kind="access", grant="g1"))
        first.add_oauth_token(token("2" * 64, kind="refresh", grant="g1", used_at="2030-01-01T00:00:05.000Z"))
        first.add_oauth_token(token("3" * 64, kind="access", grant="g2"))
    with second.transaction():
        assert second.revoke_oauth_grant("g1") == 2
    assert first.oauth_token("1" * 64) is None
    assert first.oauth_token("2" * 64) is None
    assert [t.grant_id for t in first.oauth_tokens()] == ["g2"]


def test_deleting_a_client_deletes_every_token_issued_to_it(pair: tuple[Index, Index]) -> None:
    index, _ = pair
    with index.transaction():
        index.save_oauth_client(client("c1"))
        index.save_oauth_client(client("c2"))
        index.add_oauth_token(token("1" * 64, client_id="c1"))
        index.add_oauth_token(token("2" * 64, client_id="c2", grant="g2"))
    with index.transaction():
        assert index.delete_oauth_client("c1") is True
        assert index.delete_oauth_client("c1") is False
    assert [c.client_id for c in index.oauth_clients()] == ["c2"]
    assert [t.client_id for t in index.oauth_tokens()] == ["c2"]


def test_purging_drops_expired_tokens_and_old_clients_never_approved(pair: tuple[Index, Index]) -> None:
    index, _ = pair
    old, recent = "2030-01-01T00:00:00.000Z", "2030-02-01T00:00:00.000Z"
    with index.transaction():
        index.save_oauth_client(client("stale", created_at=old))
        index.save_oauth_client(client("new", created_at=recent))
        index.save_oauth_client(client("approved", created_at=old, approved_at=old))
        index.save_oauth_client(client("https://app.example/client.json", created_at=old, fetched_at=NOW))
        index.save_oauth_client(client("waiting", created_at=old))
        index.add_oauth_token(token("1" * 64, kind="request", client_id="waiting", expires_at=NOW + 60))
        index.add_oauth_token(token("2" * 64, client_id="approved", expires_at=NOW - 1))
    with index.transaction():
        assert index.purge_oauth(NOW, "2030-01-15T00:00:00.000Z") == 2
    assert {c.client_id for c in index.oauth_clients()} == {
        "new",
        "approved",
        "https://app.example/client.json",
        "waiting",
    }
    assert [t.token_sha256 for t in index.oauth_tokens()] == ["1" * 64]


def test_the_owners_password_hash_is_set_replaced_and_removed(pair: tuple[Index, Index]) -> None:
    first, second = pair
    assert first.owner_secret() is None
    with first.transaction():
        first.set_owner_secret("scrypt$one", "2030-01-01T00:00:00.000Z")
    with first.transaction():
        first.set_owner_secret("scrypt$two", "2030-01-02T00:00:00.000Z")
    assert second.owner_secret() == "scrypt$two"
    with second.transaction():
        second.set_owner_secret(None, "2030-01-03T00:00:00.000Z")
    assert first.owner_secret() is None


def test_text_with_a_nul_character_is_stored_and_looked_up_without_an_error(pair: tuple[Index, Index]) -> None:
    # A registration is untrusted input: PostgreSQL's text cannot hold NUL, SQLite's can.
    index, _ = pair
    with index.transaction():
        index.save_oauth_client(client("c\x00", name="Bad\x00name"))
    assert index.oauth_client("c\x00") is not None
    assert index.oauth_token("a\x00") is None
