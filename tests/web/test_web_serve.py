"""``serve_http``: the blocking entry point ``coffer serve --http`` calls, run as a real process."""

from __future__ import annotations

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
import sys
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
    process = subprocess.Popen([sys.executable, "-c", SERVE, str(tmp_path / "home")], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)  # fmt: skip
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
    assert stderr.strip().endswith("stopped") and "Traceback" not in stderr
    assert stdout == ""  # logs and the banner go to stderr
