"""A team's servers on one PostgreSQL store, behind one address: the OAuth state is in the index, shared by all."""

from __future__ import annotations

from pathlib import Path

import anyio
import httpx
import pytest

from tests.web.oauth_support import PASSWORD, Owner, catching, connected, sdk_provider
from tests.web.support import make_coffer, seed
from tests.web.test_web_oauth import INITIALIZE, MCP_HEADERS

pytestmark = pytest.mark.anyio


def status(url: str, access_token: str) -> int:
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {access_token}"}
    return httpx.post(f"{url}/mcp", json=INITIALIZE, headers=headers, timeout=20).status_code


async def test_a_token_issued_through_one_server_works_on_another_until_revoked_through_either(
    tmp_path: Path, postgres_url: str
) -> None:
    from coffer_mcp.web import bind_http

    shared = {"index_backend": "postgres", "database_url": postgres_url}
    with make_coffer(tmp_path / "home", **shared) as first, make_coffer(tmp_path / "home", **shared) as second:
        seed(first)
        first.authorization.set_password(PASSWORD)
        one = bind_http(first, port=0, auth="oauth")
        # Behind one address (a load balancer), both servers name it: the issuer and the resource.
        two = bind_http(second, port=0, auth="oauth", public_url=one.url)
        one.start()
        two.start()
        try:
            with catching() as catcher, anyio.fail_after(120):
                session = sdk_provider(one.url, catcher, Owner())
                async with connected(one.url, session) as client:
                    await client.list_tools()
            tokens, info = session.storage.tokens, session.storage.client_info
            assert tokens is not None
            assert info is not None
            accepted = status(two.url, tokens.access_token)
            credentials = {"client_id": info.client_id, "client_secret": info.client_secret or ""}
            revoked = httpx.post(f"{two.url}/revoke", data={**credentials, "token": tokens.access_token}, timeout=20)
            after = (status(one.url, tokens.access_token), status(two.url, tokens.access_token))
        finally:
            one.stop(timeout=15)
            two.stop(timeout=15)
    assert accepted == 200
    assert revoked.status_code == 200
    assert after == (401, 401)
