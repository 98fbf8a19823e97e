"""The guard on every route: Host and Origin (DNS rebinding), the bearer token, the viewer cookie, binds."""

from __future__ import annotations

import httpx
import pytest

from coffer_mcp.errors import ConfigError
from coffer_mcp.web import COOKIE_NAME, check_bind
from coffer_mcp.web._security import HostPolicy, same_origin
from tests.web.conftest import TOKEN

ROUTES = ["/mcp", "/api/v1/knowledge_bases", "/api/v1/knowledge_bases/notes/documents", "/", "/static/viewer.js"]


def client(base: str, **kwargs) -> httpx.Client:
    return httpx.Client(base_url=base, timeout=10, **kwargs)


# -- binding ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "", "192.168.1.20", "example.org"])
def test_listening_beyond_loopback_without_a_token_is_refused_with_a_hint(host: str) -> None:
    with pytest.raises(ConfigError) as caught:
        check_bind(host, None)
    assert "COFFER_HTTP_TOKEN" in caught.value.hint and "--token" in caught.value.hint


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "[::1]", "127.0.0.2"])
def test_loopback_binds_need_no_token(host: str) -> None:
    check_bind(host, None)


def test_a_public_bind_with_a_token_is_allowed() -> None:
    check_bind("0.0.0.0", "t0ken")


# -- Host and Origin -----------------------------------------------------------------------------


@pytest.mark.parametrize("path", ROUTES)
def test_a_foreign_origin_gets_403_on_every_route(base_url: str, path: str) -> None:
    with client(base_url) as http:
        response = http.get(path, headers={"Origin": "http://evil.example"})
    assert response.status_code == 403
    assert response.json()["code"] == "forbidden_origin"


@pytest.mark.parametrize("path", ROUTES)
def test_a_foreign_host_gets_403_on_every_route(base_url: str, path: str) -> None:
    with client(base_url) as http:
        response = http.get(path, headers={"Host": "evil.example"})
    assert response.status_code == 403
    assert response.json()["code"] == "forbidden_host"


def test_a_post_to_mcp_from_a_foreign_origin_is_refused_before_the_session_manager(base_url: str) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
    with client(base_url) as http:
        response = http.post("/mcp", json=body, headers={"Origin": "http://evil.example"})
    assert response.status_code == 403


def test_a_rebound_name_on_the_right_port_is_still_refused(base_url: str) -> None:
    port = httpx.URL(base_url).port
    with client(base_url) as http:
        response = http.get("/api/v1/knowledge_bases", headers={"Host": f"attacker.example:{port}"})
    assert response.status_code == 403


def test_loopback_names_on_the_bound_port_and_same_origin_requests_are_served(base_url: str) -> None:
    port = httpx.URL(base_url).port
    with client(base_url) as http:
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"):
            origin = f"http://{host}"
            response = http.get("/api/v1/knowledge_bases", headers={"Host": host, "Origin": origin})
            assert response.status_code == 200, host


def test_a_loopback_name_on_another_port_is_refused(base_url: str) -> None:
    port = httpx.URL(base_url).port
    with client(base_url) as http:
        response = http.get("/api/v1/knowledge_bases", headers={"Host": f"localhost:{port + 1}"})
    assert response.status_code == 403


def test_an_origin_of_another_local_port_is_refused(base_url: str) -> None:
    port = httpx.URL(base_url).port
    with client(base_url) as http:
        response = http.get("/api/v1/knowledge_bases", headers={"Origin": f"http://127.0.0.1:{port + 1}"})
    assert response.status_code == 403


@pytest.mark.parametrize("origin", ["null", "file://", "http://127.0.0.1:1/x", "ftp://127.0.0.1"])
def test_opaque_or_odd_origins_are_refused(base_url: str, origin: str) -> None:
    with client(base_url) as http:
        assert http.get("/api/v1/knowledge_bases", headers={"Origin": origin}).status_code == 403


def test_the_viewer_page_and_its_assets_carry_browser_hardening_headers(base_url: str) -> None:
    with client(base_url) as http:
        for path in ("/", "/static/viewer.js", "/api/v1/knowledge_bases"):
            headers = http.get(path).headers
            assert "frame-ancestors 'none'" in headers["content-security-policy"]
            assert "script-src" not in headers["content-security-policy"]  # default-src 'self' covers scripts
            assert headers["x-content-type-options"] == "nosniff"


# -- the Host rule itself ------------------------------------------------------------------------


def test_the_host_rule_accepts_loopback_names_and_the_bound_port_only() -> None:
    policy = HostPolicy.build("127.0.0.1", 8765)
    assert policy.allows("127.0.0.1:8765") and policy.allows("localhost:8765") and policy.allows("[::1]:8765")
    assert not policy.allows("127.0.0.1:8766")
    assert not policy.allows("evil.example:8765")
    assert not policy.allows(None) and not policy.allows("") and not policy.allows("a@127.0.0.1:8765")


def test_a_wildcard_bind_accepts_ip_literals_but_no_unlisted_names() -> None:
    policy = HostPolicy.build("0.0.0.0", 8765, allowed_hosts=["kb.example.com", "pinned.example:9000"])
    assert policy.allows("192.168.1.20:8765")
    assert not policy.allows("192.168.1.20:9999")
    assert not policy.allows("rebind.example:8765")
    assert policy.allows("kb.example.com") and policy.allows("kb.example.com:443")
    assert policy.allows("pinned.example:9000") and not policy.allows("pinned.example:9001")


def test_a_specific_bind_accepts_its_own_address() -> None:
    policy = HostPolicy.build("10.1.2.3", 8000)
    assert policy.allows("10.1.2.3:8000")
    assert not policy.allows("10.9.9.9:8000")


def test_same_origin_compares_scheme_defaults_host_and_port() -> None:
    assert same_origin("http://127.0.0.1:8765", "127.0.0.1:8765")
    assert same_origin("https://kb.example.com", "kb.example.com")
    assert same_origin("http://kb.example.com", "kb.example.com:80")
    assert not same_origin("http://localhost:8765", "127.0.0.1:8765")
    assert not same_origin("null", "127.0.0.1:8765")


# -- the token -----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ROUTES)
def test_with_a_token_configured_every_route_without_it_gets_401(token_url: str, path: str) -> None:
    with client(token_url) as http:
        response = http.get(path)
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert "COFFER_HTTP_TOKEN" in response.json()["hint"]


@pytest.mark.parametrize("path", ["/api/v1/knowledge_bases", "/", "/static/viewer.css"])
def test_the_right_bearer_token_is_served(token_url: str, path: str) -> None:
    with client(token_url, headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        assert http.get(path).status_code == 200


def test_a_wrong_bearer_token_gets_401(token_url: str) -> None:
    with client(token_url, headers={"Authorization": f"Bearer {TOKEN}x"}) as http:
        assert http.get("/api/v1/knowledge_bases").status_code == 401


def test_a_foreign_origin_is_refused_even_with_the_token(token_url: str) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}", "Origin": "http://evil.example"}
    with client(token_url, headers=headers) as http:
        assert http.get("/api/v1/knowledge_bases").status_code == 403


def test_the_token_in_the_viewer_url_sets_a_strict_httponly_cookie_and_leaves_the_address_bar(
    token_url: str,
) -> None:
    with client(token_url) as http:
        response = http.get("/", params={"token": TOKEN})
        assert response.status_code == 303 and response.headers["location"] == "/"
        cookie = response.headers["set-cookie"]
        assert cookie.startswith(f"{COOKIE_NAME}=") and "HttpOnly" in cookie and "SameSite=Strict" in cookie
        assert TOKEN not in cookie  # the browser stores a derived value, never the token
        assert http.get("/").status_code == 200
        assert http.get("/api/v1/knowledge_bases").status_code == 200


def test_a_wrong_token_in_the_viewer_url_gets_401_and_no_cookie(token_url: str) -> None:
    with client(token_url) as http:
        response = http.get("/", params={"token": "guess"})
    assert response.status_code == 401 and "set-cookie" not in response.headers


def test_the_token_in_a_query_string_is_accepted_only_on_the_viewer_page(token_url: str) -> None:
    with client(token_url) as http:
        assert http.get("/api/v1/knowledge_bases", params={"token": TOKEN}).status_code == 401


def test_the_viewer_cookie_does_not_open_the_mcp_endpoint(token_url: str) -> None:
    with client(token_url) as http:
        http.get("/", params={"token": TOKEN})
        response = http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                             headers={"Accept": "application/json, text/event-stream"})  # fmt: skip
    assert response.status_code == 401
