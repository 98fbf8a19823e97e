"""``serve_http``: the blocking entry point ``coffer serve --http`` calls, run as a real process."""

from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.web.support import make_coffer, seed

SERVE = """
import signal
import sys
# A process started in the background by a shell inherits SIGINT ignored; Ctrl-C in a terminal is
# what this test is about, so Python's own handler is put back.
signal.signal(signal.SIGINT, signal.default_int_handler)
from coffer_mcp import Coffer, load_settings
from coffer_mcp.web import serve_http
with Coffer(load_settings(home=sys.argv[1], embedding_provider="none")) as service:
    try:
        serve_http(service, host="127.0.0.1", port=0)
    except KeyboardInterrupt:  # uvicorn re-raises Ctrl-C once it has shut down; the CLI maps it
        print("stopped", file=sys.stderr)
"""
BANNER = re.compile(r"MCP over streamable HTTP at (http://127\.0\.0\.1:\d+)/mcp, viewer at \S+/ \(no token")


def read_banner(process: subprocess.Popen[str], timeout: float = 30.0) -> str:
    """The first stderr line (waiting on the pipe with a deadline, not sleeping)."""
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        selector.register(process.stderr, selectors.EVENT_READ)  # type: ignore[arg-type]
        while (left := deadline - time.monotonic()) > 0:
            if selector.select(left):
                return process.stderr.readline()  # type: ignore[union-attr]
    raise AssertionError("serve_http printed nothing on stderr")


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT delivery differs on Windows")
def test_serve_http_prints_where_it_listens_serves_and_stops_cleanly_on_ctrl_c(tmp_path: Path) -> None:
    with make_coffer(tmp_path / "home") as service:
        seed(service)
    process = subprocess.Popen(
        [sys.executable, "-c", SERVE, str(tmp_path / "home")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        line = read_banner(process)
        match = BANNER.search(line)
        assert match, line
        with httpx.Client(base_url=match.group(1), timeout=10) as http:
            names = [kb["name"] for kb in http.get("/api/v1/knowledge_bases").json()["knowledge_bases"]]
        assert names == ["empty-kb", "notes"]
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, stderr
    assert stderr.strip().endswith("stopped")
    assert "Traceback" not in stderr
    assert stdout == ""  # logs and the banner go to stderr


# -- the token, through the real CLI -------------------------------------------------------------

STRONG = "Zq3-strong-test-token-8Kd"


def coffer_serve(home: Path, *args: str, token: str | None) -> tuple[list[str], dict[str, str]]:
    """The ``coffer serve --http`` command line and its environment (``COFFER_HTTP_TOKEN`` = ``token``)."""
    env = {k: v for k, v in os.environ.items() if k != "COFFER_HTTP_TOKEN"}
    env["COFFER_EMBEDDING_PROVIDER"] = "none"
    if token is not None:
        env["COFFER_HTTP_TOKEN"] = token
    return [sys.executable, "-m", "coffer_mcp", "--home", str(home), "serve", "--http", "--port", "0", *args], env


@pytest.mark.parametrize(
    ("args", "token", "problem"),
    [
        (["--host", "0.0.0.0"], " ", "blank"),
        (["--host", "0.0.0.0"], "x", "1 characters"),
        (["--host", "0.0.0.0"], f" {STRONG}", "whitespace"),
        (["--host", "0.0.0.0", "--token", "   "], None, "blank"),
        (["--host", "127.0.0.1"], "short-token", "11 characters"),
    ],
)
def test_coffer_serve_refuses_to_start_with_a_blank_or_weak_token_and_says_how_to_make_one(
    tmp_path: Path, args: list[str], token: str | None, problem: str
) -> None:
    argv, env = coffer_serve(tmp_path / "home", *args, token=token)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env, check=False)
    assert done.returncode == 1
    assert done.stdout == ""
    assert "The HTTP token is unusable" in done.stderr
    assert problem in done.stderr
    assert "secrets.token_urlsafe(32)" in done.stderr
    assert "openssl rand -hex 24" in done.stderr


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT delivery differs on Windows")
def test_coffer_serve_with_a_strong_token_admits_it_and_no_blank_one(tmp_path: Path) -> None:
    with make_coffer(tmp_path / "home") as service:
        seed(service)
    argv, env = coffer_serve(tmp_path / "home", "--host", "127.0.0.1", token=STRONG)
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = read_banner(process)
        match = re.search(r"at (http://127\.0\.0\.1:\d+)/mcp, .*token required", line)
        assert match, line
        with httpx.Client(base_url=match.group(1), timeout=10) as http:
            for blank in ("%20", "", "%09"):
                response = http.get(f"/?token={blank}")
                assert response.status_code == 401
                assert "set-cookie" not in response.headers
            assert http.get("/api/v1/knowledge_bases", headers={"Authorization": "Bearer"}).status_code == 401
            authorized = http.get("/api/v1/knowledge_bases", headers={"Authorization": f"Bearer {STRONG}"})
            assert authorized.status_code == 200
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0
