"""``coffer auth`` (the owner's password, OAuth clients and grants) and ``coffer serve --http --auth oauth``."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from coffer_mcp import Coffer, load_settings
from coffer_mcp.cli import main
from coffer_mcp.services.authorization import OWNER
from tests.web.test_web_serve import read_banner

PASSWORD = "a long owner passphrase"


@pytest.fixture
def run(home: Path, capsys: pytest.CaptureFixture[str]):
    def invoke(*argv: str, code: int = 0, stdin: str | None = None) -> str:
        if stdin is not None:
            sys.stdin = io.StringIO(stdin)  # restored by the fixture below
        status = main(["--home", str(home), *argv])
        out, err = capsys.readouterr()
        assert status == code, (out, err)
        return out if code == 0 else err

    saved = sys.stdin
    yield invoke
    sys.stdin = saved


def granted(home: Path) -> str:
    """A client registered and a grant given to it, through the core: the grant's id."""
    with Coffer(load_settings(home=home, embedding_provider="none")) as coffer:
        auth = coffer.authorization
        auth.save_client("client-1", "Claude", {"redirect_uris": ["http://127.0.0.1/cb"]}, secret="s3cret")
        request = auth.start_request("client-1", ["coffer:read"], "http://127.0.0.1:8765/mcp", {})
        approved = auth.approve(request, OWNER, ["coffer:read"])
        assert approved is not None
        auth.exchange_code(approved[1])
        return auth.grants()[0].grant_id


def test_set_password_reads_stdin_and_the_password_is_never_printed(run, home: Path) -> None:
    out = run("auth", "set-password", stdin=PASSWORD + "\n")
    assert "owner password set" in out
    assert PASSWORD not in out
    assert json.loads(run("auth", "set-password", "--json", stdin=PASSWORD + "\n")) == {"password_set": True}
    with Coffer(load_settings(home=home)) as coffer:
        assert coffer.authorization.check_password(PASSWORD)


def test_a_short_password_is_refused_with_a_hint_and_nothing_is_set(run, home: Path) -> None:
    err = run("auth", "set-password", code=1, stdin="short\n")
    assert "12 to 1024 characters" in err
    assert "hint:" in err
    with Coffer(load_settings(home=home)) as coffer:
        assert not coffer.authorization.has_password()


def test_clients_and_tokens_are_listed_without_secrets_and_revoked(run, home: Path) -> None:
    assert "no OAuth clients yet" in run("auth", "clients")
    grant = granted(home)
    clients = run("auth", "clients")
    assert re.search(r"client-1\s+Claude\s+registered\s+1\s+20", clients), clients
    assert "s3cret" not in clients
    (listed,) = json.loads(run("auth", "tokens", "--json"))
    assert (listed["grant_id"], listed["client_name"], listed["subject"]) == (grant, "Claude", OWNER)
    assert "coffer_" not in json.dumps(listed)  # never a token
    assert grant in run("auth", "tokens")
    assert f"revoked grant '{grant}'" in run("auth", "revoke", "--grant", grant)
    assert "no live grants" in run("auth", "tokens")
    assert json.loads(run("auth", "revoke", "--client", "client-1", "--json")) == {"revoked": "client-1"}
    err = run("auth", "revoke", "--client", "client-1", code=1)
    assert "no OAuth client 'client-1'" in err
    assert "coffer auth clients" in err


def test_revoke_needs_a_client_or_a_grant(run) -> None:
    with pytest.raises(SystemExit) as usage:
        run("auth", "revoke")
    assert usage.value.code == 2


def test_the_oauth_options_of_serve_need_http(run) -> None:
    with pytest.raises(SystemExit) as usage:
        run("serve", "--auth", "oauth")
    assert usage.value.code == 2


def serve(home: Path, *args: str) -> tuple[list[str], dict[str, str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COFFER_")}
    env["COFFER_EMBEDDING_PROVIDER"] = "none"
    return [sys.executable, "-m", "coffer_mcp", "--home", str(home), "serve", "--http", "--port", "0", *args], env


def test_coffer_serve_with_oauth_and_no_way_to_sign_in_refuses_to_start(home: Path) -> None:
    argv, env = serve(home, "--auth", "oauth")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, check=False)
    assert done.returncode == 1
    assert "no owner password and no HTTP token" in done.stderr
    assert "coffer auth set-password" in done.stderr


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT delivery differs on Windows")
def test_coffer_serve_with_oauth_publishes_its_metadata_and_challenges_an_anonymous_client(run, home: Path) -> None:
    run("auth", "set-password", stdin=PASSWORD + "\n")
    argv, env = serve(home, "--auth", "oauth")
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = read_banner(process, timeout=60)
        match = re.search(r"at (http://127\.0\.0\.1:\d+)/mcp, .*OAuth", line)
        assert match, line
        with httpx.Client(base_url=match.group(1), timeout=20) as http:
            resource = http.get("/.well-known/oauth-protected-resource/mcp").json()
            refused = http.get("/mcp")
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert resource["authorization_servers"] == [match.group(1)]
    assert refused.status_code == 401
    assert "resource_metadata=" in refused.headers["www-authenticate"]
