"""The guard on every route: Host and Origin (DNS rebinding), the bearer token, the viewer cookie, binds."""

from __future__ import annotations

import secrets
from collections.abc import Callable

import httpx
import pytest

from coffer_mcp import Coffer
from coffer_mcp.errors import ConfigError
from coffer_mcp.web import COOKIE_NAME, build_app, check_bind
from coffer_mcp.web._security import HostPolicy, same_origin, tokens_equal
from tests.web.conftest import TOKEN
from tests.web.support import Seeded

ROUTES = ["/mcp", "/api/v1/knowledge_bases", "/api/v1/knowledge_bases/notes/documents", "/", "/static/viewer.js"]


def client(base: str, **kwargs) -> httpx.Client:
    return httpx.Client(base_url=base, timeout=10, **kwargs)


# -- binding ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "", "192.168.1.20", "example.org"])
def test_listening_beyond_loopback_without_a_token_is_refused_with_a_hint(host: str) -> None:
    with pytest.raises(ConfigError) as caught:
        check_bind(host, None)
    assert "COFFER_HTTP_TOKEN" in caught.value.hint
    assert "--token" in caught.value.hint


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "[::1]", "127.0.0.2"])
def test_loopback_binds_need_no_token(host: str) -> None:
    check_bind(host, None)


@pytest.mark.parametrize(
    "make",
    [lambda: secrets.token_urlsafe(32), lambda: secrets.token_hex(24), lambda: TOKEN, lambda: "Abcdefgh-12345678"],
    ids=["token_urlsafe", "token_hex", "test-token", "mixed"],  # one id per run: parallel workers collect alike
)
def test_a_public_bind_with_a_strong_token_is_allowed(make: Callable[[], str]) -> None:
    token = make()
    check_bind("0.0.0.0", token)


WEAK_TOKENS = [
    " ",
    "   ",
    "\t",
    "\n",
    "x",
    "t0ken",
    "a" * 15,
    "a" * 40,
    "abababababababababab",
    " " + TOKEN,
    TOKEN + " ",
    TOKEN + "\n",
    "two words and more",
    "tokén-with-àccents-1",
    "nul\x00in-the-middle-1",
]


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "127.0.0.1", "localhost"])
@pytest.mark.parametrize("token", WEAK_TOKENS, ids=repr)
def test_a_blank_short_padded_or_repetitive_token_is_refused_on_any_bind_with_a_recipe(host: str, token: str) -> None:
    with pytest.raises(ConfigError) as caught:
        check_bind(host, token)
    assert caught.value.code == "invalid_config"
    assert "secrets.token_urlsafe(32)" in caught.value.hint
    assert "openssl rand -hex 24" in caught.value.hint


def test_the_app_itself_refuses_a_blank_token(store: tuple[Coffer, Seeded]) -> None:
    with pytest.raises(ConfigError, match="blank"):
        build_app(store[0], token=" ")


@pytest.mark.parametrize("blank", ["", " ", "\t"])
def test_a_blank_presented_token_never_matches_anything(blank: str) -> None:
    assert not tokens_equal(blank, blank)
    assert not tokens_equal(blank, TOKEN)
    assert not tokens_equal(TOKEN, blank)


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


def test_refusals_carry_the_hardening_headers_and_every_api_error_is_json(base_url: str, token_url: str) -> None:
    # The guard's 401/403 answers went out without CSP, nosniff and framing, and an OPTIONS or
    # TRACE on an API path got Starlette's text "Method Not Allowed".
    with client(token_url) as http:
        refusals = [
            http.get("/api/v1/knowledge_bases"),  # no token: 401
            http.get("/api/v1/knowledge_bases", headers={"Host": "evil.example"}),  # 403 forbidden_host
        ]
    for response in refusals:
        assert response.headers["x-content-type-options"] == "nosniff", response.status_code
        assert response.headers["x-frame-options"] == "DENY"
        assert "default-src 'self'" in response.headers["content-security-policy"]
    with client(base_url) as http:
        for method in ("OPTIONS", "TRACE"):
            response = http.request(method, "/api/v1/knowledge_bases")
            assert response.headers["content-type"] == "application/json", method
            assert set(response.json()) == {"code", "message", "hint"}


# -- the Host rule itself ------------------------------------------------------------------------


def test_the_host_rule_accepts_loopback_names_and_the_bound_port_only() -> None:
    policy = HostPolicy.build("127.0.0.1", 8765)
    assert policy.allows("127.0.0.1:8765")
    assert policy.allows("localhost:8765")
    assert policy.allows("[::1]:8765")
    assert not policy.allows("127.0.0.1:8766")
    assert not policy.allows("evil.example:8765")
    assert not policy.allows(None)
    assert not policy.allows("")
    assert not policy.allows("a@127.0.0.1:8765")


def test_a_wildcard_bind_accepts_ip_literals_but_no_unlisted_names() -> None:
    policy = HostPolicy.build("0.0.0.0", 8765, allowed_hosts=["kb.example.com", "pinned.example:9000"])
    assert policy.allows("192.168.1.20:8765")
    assert not policy.allows("192.168.1.20:9999")
    assert not policy.allows("rebind.example:8765")
    assert policy.allows("kb.example.com")
    assert policy.allows("kb.example.com:443")
    assert policy.allows("pinned.example:9000")
    assert not policy.allows("pinned.example:9001")


def test_a_host_pinned_to_a_default_port_matches_the_host_without_its_port() -> None:
    # Behind a TLS proxy a browser sends "Host: kb.example.com" for https://kb.example.com:443:
    # an entry pinned to :443 refused every such request (a port left out counted as 80 only).
    policy = HostPolicy.build("127.0.0.1", 8765, allowed_hosts=["tls.example:443", "plain.example:80"])
    assert policy.allows("tls.example")
    assert policy.allows("tls.example:443")
    assert policy.allows("plain.example")
    assert not policy.allows("tls.example:8443")
    assert not policy.allows("plain.example:8080")


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
        assert response.status_code == 303
        assert response.headers["location"] == "/"
        cookie = response.headers["set-cookie"]
        assert cookie.startswith(f"{COOKIE_NAME}=")
        assert "HttpOnly" in cookie
        assert "SameSite=Strict" in cookie
        assert TOKEN not in cookie  # the browser stores a derived value, never the token
        assert http.get("/").status_code == 200
        assert http.get("/api/v1/knowledge_bases").status_code == 200


@pytest.mark.parametrize(
    "other",
    ['prefs={"theme":"dark"}', "theme=dark mode", "k=é", 'x="', "_xsrf=2|d1a2|0123|1700000000"],
)
def test_other_local_apps_cookies_do_not_hide_the_viewers(token_url: str, other: str) -> None:
    # A browser sends every cookie of 127.0.0.1 to every port; one the stdlib's cookie parser could
    # not read (another app's) lost ours too, and the viewer answered its login page forever.
    with client(token_url) as http:
        viewer_cookie = http.get("/", params={"token": TOKEN}).cookies[COOKIE_NAME]
    for header in (f"{other}; {COOKIE_NAME}={viewer_cookie}", f"{COOKIE_NAME}={viewer_cookie}; {other}"):
        with client(token_url) as http:
            assert http.get("/api/v1/knowledge_bases", headers={"Cookie": header.encode()}).status_code == 200, header


def test_a_wrong_token_in_the_viewer_url_gets_401_and_no_cookie(token_url: str) -> None:
    with client(token_url) as http:
        response = http.get("/", params={"token": "guess"})
    assert response.status_code == 401
    assert "set-cookie" not in response.headers


def test_the_token_in_a_query_string_is_accepted_only_on_the_viewer_page(token_url: str) -> None:
    with client(token_url) as http:
        assert http.get("/api/v1/knowledge_bases", params={"token": TOKEN}).status_code == 401


def test_the_viewer_cookie_does_not_open_the_mcp_endpoint(token_url: str) -> None:
    with client(token_url) as http:
        http.get("/", params={"token": TOKEN})
        response = http.post(
            "/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
            headers={"Accept": "application/json, text/event-stream"},
        )
    assert response.status_code == 401


@pytest.mark.parametrize("blank", ["%20", "", "%09", "%20%20"])
def test_a_blank_token_in_the_viewer_url_logs_nobody_in(token_url: str, blank: str) -> None:
    with client(token_url) as http:
        for accept in ("*/*", "text/html"):
            response = http.get(f"/?token={blank}", headers={"Accept": accept})
            assert response.status_code == 401
            assert "set-cookie" not in response.headers
        assert http.get("/api/v1/knowledge_bases").status_code == 401


@pytest.mark.parametrize("authorization", ["Bearer", "bearer", 'Bearer ""', "Bearer%20"])
def test_a_blank_bearer_header_or_cookie_is_refused(token_url: str, authorization: str) -> None:
    with client(token_url) as http:
        assert http.get("/api/v1/knowledge_bases", headers={"Authorization": authorization}).status_code == 401
        assert http.get("/api/v1/knowledge_bases", headers={"Cookie": f"{COOKIE_NAME}="}).status_code == 401


# -- the login page --------------------------------------------------------------------------------

HTML = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}


def test_a_browser_opening_the_viewer_without_the_token_gets_a_login_page_not_json(token_url: str) -> None:
    with client(token_url) as http:
        response = http.get("/", headers=HTML)
    assert response.status_code == 401
    assert response.headers["content-type"].startswith("text/html")
    page = response.text
    assert '<form id="login-form" method="post"' in page
    assert 'name="token" type="password"' in page
    assert "<script" not in page
    assert "unauthorized" not in page
    assert "frame-ancestors 'none'" in response.headers["content-security-policy"]
    assert response.headers["cache-control"] == "no-store"
    # A form on a "no-referrer" page would post "Origin: null", which the Origin rule refuses.
    assert response.headers["referrer-policy"] == "same-origin"


@pytest.mark.parametrize("path", ["/mcp", "/api/v1/knowledge_bases", "/static/viewer.js"])
def test_scripts_and_mcp_clients_keep_getting_401_json_even_asking_for_html(token_url: str, path: str) -> None:
    with client(token_url) as http:
        response = http.get(path, headers=HTML)
    assert response.status_code == 401
    assert response.json()["code"] == "unauthorized"


def test_the_login_form_sets_the_viewer_cookie_and_returns_to_the_viewer(token_url: str) -> None:
    with client(token_url) as http:
        response = http.post("/", data={"token": TOKEN})
        assert response.status_code == 303
        assert response.headers["location"] == "/"
        assert response.headers["set-cookie"].startswith(f"{COOKIE_NAME}=")
        assert TOKEN not in response.headers["set-cookie"]
        assert http.get("/", headers=HTML).text.count('name="coffer-action-token"') == 1
        assert http.get("/api/v1/knowledge_bases").status_code == 200


@pytest.mark.parametrize(
    "form",
    [
        {"token": "guess-guess-guess-1"},
        {"token": " "},
        {"token": ""},
        {"other": TOKEN},
        {"token": TOKEN + " "},
        {"token": TOKEN, "pad": "x" * 5000},
    ],
)
def test_a_wrong_or_blank_token_in_the_login_form_shows_the_page_again_with_an_error(
    token_url: str, form: dict
) -> None:
    with client(token_url) as http:
        response = http.post("/", data=form)
    assert response.status_code == 401
    assert "set-cookie" not in response.headers
    assert "That token is not right" in response.text


def test_a_wrong_token_in_the_viewer_url_shows_the_login_page_with_an_error(token_url: str) -> None:
    with client(token_url) as http:
        response = http.get("/", params={"token": "guess-guess-guess-1"}, headers=HTML)
    assert response.status_code == 401
    assert "That token is not right" in response.text


def test_the_login_form_posted_from_another_site_is_refused(token_url: str) -> None:
    with client(token_url) as http:
        response = http.post("/", data={"token": TOKEN}, headers={"Origin": "http://evil.example"})
    assert response.status_code == 403
    assert "set-cookie" not in response.headers


def test_only_the_login_pages_stylesheet_and_icon_are_served_without_the_token(token_url: str) -> None:
    with client(token_url) as http:
        assert http.get("/static/login.css").status_code == 200
        assert http.get("/static/favicon.svg").status_code == 200
        assert http.get("/static/viewer.css").status_code == 401


@pytest.mark.parametrize("path", ["/api/v1/knowledge_bases/notes%0A", "/api/v1/knowledge_bases/%0A/documents", "/%00"])
def test_a_path_with_control_characters_is_bad_input(base_url: str, path: str) -> None:
    with client(base_url) as http:
        response = http.get(path)
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_argument"


def test_resubmitting_the_login_form_while_logged_in_logs_in_again_rather_than_failing(token_url: str) -> None:
    with client(token_url) as http:
        assert http.post("/", data={"token": TOKEN}).status_code == 303
        again = http.post("/", data={"token": TOKEN})
    assert again.status_code == 303
    assert again.headers["location"] == "/"
