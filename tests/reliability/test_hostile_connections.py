"""Hostile connections against ``coffer serve --http``: slow headers, slow bodies, idle sessions.

An outside attack (no token needed) held every descriptor with 1,100 half-sent requests under
``ulimit -n 1024``: authenticated calls timed out, and the accept loop wrote 31 MB of tracebacks
in 25 s. Here the same attack, scaled down: a real server under a 256-descriptor limit, 300
half-sent requests. ``python -m bench.http_attack`` runs the full one (docs/benchmarks.md).
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest

from bench.http_attack import HalfOpen, authenticated_calls
from bench.http_load import ServerProcess, http_server, seed_corpus, server_env
from tests.web.support import make_coffer, running

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="descriptor limits (RLIMIT_NOFILE) are POSIX")

TOKEN = "Zq3-hostile-connections-8Kd"
OPEN_FILES = 256
ATTACKERS = 300  # more half-sent requests than the server has descriptors
STDERR_BOUND = 20_000  # bytes: a few rate-limited lines, where each failed accept used to write a traceback


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("connections") / "home"
    seed_corpus(home, documents=20)
    return home


@contextlib.contextmanager
def serving(home: Path, **settings: str) -> Iterator[ServerProcess]:
    """``coffer serve --http`` with the token, ``OPEN_FILES`` descriptors and ``settings`` (``COFFER_*``)."""
    env = server_env(home, {"COFFER_HTTP_TOKEN": TOKEN, **{f"COFFER_{k.upper()}": v for k, v in settings.items()}})
    with http_server(home, env, open_files=OPEN_FILES) as server:
        yield server


def port_of(server: ServerProcess) -> int:
    return int(server.url.rsplit(":", 1)[1])


def quiet(server: ServerProcess) -> str:
    """The server's stderr, checked to be a few log lines, no traceback."""
    stderr = "".join(server.stderr)
    assert "Traceback" not in stderr, stderr[-3000:]
    assert len(stderr.encode()) < STDERR_BOUND, stderr[-3000:]
    return stderr


@pytest.mark.anyio
async def test_half_sent_requests_beyond_the_descriptor_limit_leave_authenticated_calls_answered_and_stderr_quiet(
    home: Path,
) -> None:
    with serving(home, http_header_timeout="3") as server:
        attack = HalfOpen("127.0.0.1", port_of(server), reconnect=True)  # each one closed is opened again
        try:
            attack.open(ATTACKERS)
            calls = await authenticated_calls(server.mcp_url, TOKEN, searches=3, adds=1, limit=60)
            assert calls.failures == []
            assert [len(calls.latencies[kind]) for kind in ("session", "search", "add")] == [1, 3, 1]
            attack.stop_reconnecting()
            # Nothing new arrives now: the header timeout, not the connection ceiling, closes the rest.
            assert attack.wait_all_closed(timeout=60), f"{attack.held} half-sent requests still held"
        finally:
            attack.close()
        assert server.proc.poll() is None
    assert "at the connection limit (128)" in quiet(server)  # 256 descriptors less half of them kept for the rest


def test_accepts_failing_for_want_of_descriptors_log_one_counted_line_not_a_traceback_each(home: Path) -> None:
    # A connection ceiling above the descriptor limit, so that accepts do fail.
    with serving(home, http_max_connections="1000", http_header_timeout="3") as server:
        attack = HalfOpen("127.0.0.1", port_of(server))
        try:
            attack.open(ATTACKERS)
            assert server.wait_for_line("accept failed: too many open files (", timeout=60)
            assert attack.wait_all_closed(timeout=60), f"{attack.held} half-sent requests still held"
        finally:
            attack.close()
        calls = anyio.run(lambda: authenticated_calls(server.mcp_url, TOKEN, searches=1, adds=0, limit=60))
        assert calls.failures == []
    quiet(server)


def send_slowly(port: int, headers: dict[str, str], length: int, timeout: float = 60) -> tuple[int, bytes]:
    """POST /mcp announcing ``length`` body bytes and send one every 0.2 s until the server closes.

    Returns the body bytes sent and what the server answered before it closed.
    """
    head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    answer, sent = b"", 0
    deadline = time.monotonic() + timeout
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock, selectors.DefaultSelector() as selector:
        sock.sendall(f"POST /mcp HTTP/1.1\r\n{head}content-length: {length}\r\n\r\n".encode())
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ)
        while time.monotonic() < deadline and sent < length:
            if selector.select(0.2):  # readable: an answer, or the close
                try:
                    data = sock.recv(65536)
                except OSError:  # reset: closed with the body's last bytes unread
                    return sent, answer
                if not data:
                    return sent, answer
                answer += data
                continue
            try:
                sent += sock.send(b" ")
            except OSError:  # reset by the server
                return sent, answer
    raise AssertionError(f"the server still read the body after {sent} bytes; it answered {answer[:200]!r}")


def test_a_request_body_that_trickles_in_is_cut_off_after_the_body_timeout(home: Path) -> None:
    with serving(home, http_body_timeout="2") as server:
        port = port_of(server)
        headers = {
            "host": f"127.0.0.1:{port}",
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
        }
        sent, answer = send_slowly(port, {**headers, "authorization": f"Bearer {TOKEN}"}, length=100_000)
        assert (sent < 100_000, answer) == (True, b"")
        # Without the token the guard answers 401 at once, unread body and all; the trickle is cut off too.
        sent, answer = send_slowly(port, headers, length=100_000)
        assert sent < 100_000
        assert answer.startswith(b"HTTP/1.1 401")
        with httpx.Client(timeout=30) as http:  # a client that sends its request at once is served
            reply = http.get(f"{server.url}/api/v1/knowledge_bases", headers={"authorization": f"Bearer {TOKEN}"})
        assert reply.status_code == 200
    quiet(server)


def read_until(sock: socket.socket, marker: bytes, timeout: float = 30) -> bytes:
    """What ``sock`` receives until ``marker`` appears or the peer closes."""
    sock.settimeout(timeout)
    data = b""
    while marker not in data:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


def test_when_every_connection_is_busy_with_a_request_a_new_one_is_refused_at_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with make_coffer(tmp_path / "home", http_max_connections=2) as service, running(service) as url:
        port = int(url.rsplit(":", 1)[1])
        busy = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(2)]
        try:
            for sock in busy:  # each sends its headers; the server reads its body, which never comes
                sock.sendall(
                    f"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\n"
                    "accept: application/json, text/event-stream\r\ncontent-length: 100\r\n"
                    "expect: 100-continue\r\n\r\n".encode()
                )
                assert read_until(sock, b"\r\n\r\n").startswith(b"HTTP/1.1 100 ")  # the server is reading it
            with socket.create_connection(("127.0.0.1", port), timeout=30) as third:
                third.sendall(f"GET /api/v1/knowledge_bases HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n\r\n".encode())
                try:
                    answer = read_until(third, b"<never>")
                except ConnectionResetError:  # closed before the request had arrived: the 503 may be lost
                    answer = b""
            assert answer == b"" or answer.startswith(b"HTTP/1.1 503 "), answer
            assert "every connection busy: new ones refused with 503 (1 in the last 10 s)" in caplog.text
        finally:
            for sock in busy:
                sock.close()
        with httpx.Client(timeout=30) as http:  # room again once they are gone
            assert http.get(f"{url}/api/v1/knowledge_bases").status_code == 200


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "idle", "version": "1"}},
}


def idle_lines(server: ServerProcess) -> list[str]:
    return [line for line in server.stderr if "idle timeout" in line]


def test_an_idle_mcp_session_is_ended_and_answers_404_while_an_active_one_is_kept(home: Path) -> None:
    headers = {"authorization": f"Bearer {TOKEN}", "accept": "application/json, text/event-stream"}
    with (
        serving(home, http_session_idle_timeout="2", log_level="INFO") as server,
        httpx.Client(base_url=server.url, headers=headers, timeout=30) as http,
    ):
        idle, active = open_session(http), open_session(http)
        # The active session sends a request every 0.1 s while the idle one is left alone.
        deadline = time.monotonic() + 60
        while not server.wait_for_line("idle timeout", timeout=0.1):
            assert time.monotonic() < deadline, "no session was ended for being idle"
            assert ping(http, active).status_code == 200
        ended = [line for line in server.stderr if "idle timeout" in line]
        assert [idle["mcp-session-id"] in line for line in ended] == [True], ended
        assert ping(http, active).status_code == 200
        expired = ping(http, idle)
        assert expired.status_code == 404
        assert "session" in expired.text.lower()
    assert "Traceback" not in "".join(server.stderr)  # its access log makes it longer than the bound


def open_session(http: httpx.Client) -> dict[str, str]:
    """Initialize an MCP session by hand (no event stream left open); the headers naming it."""
    opened = http.post("/mcp", json=INITIALIZE)
    assert opened.status_code == 200, opened.text
    session = {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-06-18"}
    notified = http.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
    assert notified.status_code == 202, notified.text
    return session


def ping(http: httpx.Client, session: dict[str, str]) -> httpx.Response:
    return http.post("/mcp", json={"jsonrpc": "2.0", "id": 2, "method": "ping"}, headers=session)
