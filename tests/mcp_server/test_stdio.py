"""``coffer serve`` as a real subprocess speaking MCP over stdio."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.types import Implementation

from coffer_mcp import Coffer, load_settings
from tests.conftest import installed_script
from tests.mcp_clients import UNPARSABLE
from tests.reliability.support import LineReader

pytestmark = pytest.mark.anyio


def server_env(home: Path) -> dict[str, str]:
    return {**os.environ, "COFFER_HOME": str(home), "PYTHONUNBUFFERED": "1"}


def rpc(message_id: int | None, method: str, params: dict | None = None) -> bytes:
    message = {"jsonrpc": "2.0", "method": method, **({"params": params} if params is not None else {})}
    if message_id is not None:
        message["id"] = message_id
    return (json.dumps(message) + "\n").encode()


async def test_a_client_searches_through_the_stdio_server(home: Path) -> None:
    with Coffer(load_settings(home=home)) as coffer:
        coffer.create_kb("notes")
        coffer.add_document("notes", "ann.md", "# Graphs\n\nHNSW graphs answer nearest neighbour queries.")
    params = StdioServerParameters(command=sys.executable, args=["-m", "coffer_mcp", "serve"], env=server_env(home))
    with anyio.fail_after(60):
        async with Client(params, client_info=Implementation(name="stdio-test", version="1")) as client:
            tools = {tool.name for tool in (await client.list_tools()).tools}
            result = await client.call_tool("coffer__search_knowledge", {"kb": "notes", "query": "HNSW"})
    assert "coffer__search_knowledge" in tools
    assert not result.is_error
    assert result.structured_content["passages"][0]["title"] == "Graphs"


@pytest.mark.parametrize(
    ("config", "problem"),
    [("chunk_size: [\n", "is not valid YAML"), ("chunk_size: 5\n", "chunk_size: Input should be greater than")],
    ids=["bad-yaml", "bad-value"],
)
async def test_a_broken_config_file_still_connects_and_every_tool_says_what_to_fix(
    home: Path, tmp_path: Path, config: str, problem: str
) -> None:
    """Before: the server exited before the handshake, and the client saw only "connection closed"."""
    home.mkdir()
    config_file = home / "config.yaml"
    config_file.write_text(config, encoding="utf-8")
    params = StdioServerParameters(command=sys.executable, args=["-m", "coffer_mcp", "serve"], env=server_env(home))
    client_info = Implementation(name="config-test", version="1")
    with (tmp_path / "stderr.txt").open("w", encoding="utf-8") as errlog, anyio.fail_after(60):
        async with Client(stdio_client(params, errlog=errlog), client_info=client_info) as client:
            tools = [tool.name for tool in (await client.list_tools()).tools]
            errors = [json.loads((await client.call_tool(name, {})).content[0].text) for name in tools]
    assert "coffer__search_knowledge" in tools
    assert "coffer__ingest_path" in tools
    assert {error["code"] for error in errors} == {"invalid_config"}
    assert all(problem in error["message"] and str(config_file) in error["hint"] for error in errors), errors[0]
    stderr = (tmp_path / "stderr.txt").read_text(encoding="utf-8")
    assert problem in stderr
    assert "hint:" in stderr
    assert not (home / "coffer.db").exists()  # nothing ran against a home it cannot configure


def test_stdout_carries_nothing_but_json_rpc(home: Path) -> None:
    """Even a server started with no home yet writes only protocol messages to stdout."""
    # One request at a time: the server handles requests concurrently, as MCP allows.
    messages = [
        rpc(
            1,
            "initialize",
            {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
        ),
        rpc(None, "notifications/initialized") + rpc(2, "tools/list"),
        rpc(3, "tools/call", {"name": "coffer__create_knowledge_base", "arguments": {"name": "kb"}}),
        rpc(
            4,
            "tools/call",
            {
                "name": "coffer__add_document",
                "arguments": {"kb": "kb", "filename": "d.html", "content": "<h1>T</h1><p>body</p>"},
            },
        ),
    ]
    proc = subprocess.Popen(
        [sys.executable, "-m", "coffer_mcp", "serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=server_env(home),
    )
    try:
        lines = []
        for message in messages:
            proc.stdin.write(message)
            proc.stdin.flush()
            lines.append(proc.stdout.readline())
        rest, stderr = proc.communicate(timeout=60)  # closes stdin: the server exits
    finally:
        proc.kill()
    replies = [json.loads(line) for line in lines]
    assert rest == b""
    assert all(reply["jsonrpc"] == "2.0" for reply in replies)
    assert [reply["id"] for reply in replies] == [1, 2, 3, 4]
    assert not replies[2]["result"].get("isError"), replies[2]
    assert not replies[3]["result"].get("isError"), replies[3]
    assert b"coffer-mcp" in stderr  # the banner goes to stderr


def banner(home: Path, *argv: str, cwd: Path | None = None) -> str:
    """What ``ARGV`` started by hand in a terminal (stdin a pseudo-terminal) says on stderr."""
    import pty

    primary, secondary = pty.openpty()
    with subprocess.Popen(
        list(argv), stdin=secondary, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=server_env(home), cwd=cwd
    ) as proc:
        os.close(secondary)
        try:
            lines: list[bytes] = []
            for _ in range(12):  # up to the banner's last line: then the server waits for a client
                lines.append(proc.stderr.readline())
                if b"Ctrl-C" in lines[-1] or not lines[-1]:
                    break
        finally:
            proc.kill()
            proc.wait()
            os.close(primary)
        assert proc.stdout.read() == b""
    return b"".join(lines).decode()


def suggested_commands(text: str) -> tuple[list[str], list[str]]:
    """The command lines the banner suggests: for the MCP Inspector, and Claude Desktop's config."""
    inspector = next(line for line in text.splitlines() if "npx @modelcontextprotocol/inspector" in line)
    config = next(line for line in text.splitlines() if '"mcpServers"' in line)
    server = json.loads(config)["mcpServers"]["coffer"]
    return shlex.split(inspector)[2:], [server["command"], *server["args"]]


@pytest.mark.skipif(sys.platform == "win32", reason="needs a pseudo-terminal")
def test_started_by_hand_in_a_terminal_it_explains_itself_on_stderr(home: Path) -> None:
    text = banner(home, sys.executable, "-m", "coffer_mcp", "serve")
    assert "MCP server on stdio" in text
    assert "waits for a client" in text
    # No coffer script started it: the suggestions start this Python on the package.
    assert suggested_commands(text) == ([sys.executable, "-m", "coffer_mcp", "serve"],) * 2


@pytest.mark.skipif(sys.platform == "win32", reason="needs a pseudo-terminal")
@pytest.mark.parametrize(("script", "args"), [("coffer", ["serve"]), ("coffer-mcp", [])])
def test_the_banner_suggests_the_absolute_path_of_the_coffer_that_runs(
    home: Path, tmp_path: Path, script: str, args: list[str]
) -> None:
    # Right after the README's set-up coffer is not on PATH, and is started by a relative path
    # (.venv/bin/coffer serve): a client needs the absolute path of that script.
    installed = installed_script(script)
    assert installed, f"{script} is not installed; run pip install -e ."
    text = banner(home, os.path.relpath(installed, tmp_path), *args, cwd=tmp_path)
    inspector, desktop = suggested_commands(text)
    assert inspector == desktop == [str(Path(installed).resolve()), *args]
    assert Path(inspector[0]).is_absolute()
    assert Path(inspector[0]).is_file()


# -- requests that do not parse: raw JSON-RPC lines, each answer waited for at most REPLY_WAIT -----

REPLY_WAIT = 30  # seconds: generous on a loaded machine; the answer itself takes milliseconds


class RawSession:
    """A ``coffer serve`` subprocess spoken to in raw JSON-RPC lines, past its handshake."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.lines = LineReader(proc)

    def send(self, line: bytes) -> None:
        self.proc.stdin.write(line)
        self.proc.stdin.flush()

    def reply(self) -> dict:
        """The next message on stdout (TimeoutError after REPLY_WAIT: the server never answered)."""
        line = self.lines.line(REPLY_WAIT)
        assert line, "the server closed stdout"
        return json.loads(line)

    def request(self, message_id: int, method: str, params: dict | None = None) -> dict:
        self.send(rpc(message_id, method, params))
        return self.reply()


@pytest.fixture(scope="module")
def raw_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RawSession]:
    """One server for these tests: each checks that the session still serves after its refusal."""
    home = tmp_path_factory.mktemp("raw") / "coffer-home"
    with Coffer(load_settings(home=home, embedding_provider="none")) as coffer:
        coffer.create_kb("notes")
        coffer.add_document("notes", "ann.md", "# Graphs\n\nHNSW graphs answer nearest neighbour queries.")
    env = {**server_env(home), "COFFER_EMBEDDING_PROVIDER": "none"}
    command = [sys.executable, "-m", "coffer_mcp", "serve"]
    with subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
    ) as proc:
        session = RawSession(proc)
        try:
            client = {"name": "raw", "version": "1"}
            session.request(
                1, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": client}
            )
            session.send(rpc(None, "notifications/initialized"))
            yield session
        finally:
            proc.kill()


def assert_still_serves(session: RawSession) -> None:
    """The session answers a ping and a real search after the refusal."""
    assert session.request(90, "ping") == {"jsonrpc": "2.0", "id": 90, "result": {}}
    found = session.request(
        91, "tools/call", {"name": "coffer__search_knowledge", "arguments": {"kb": "notes", "query": "HNSW"}}
    )
    assert found["id"] == 91
    assert found["result"]["structuredContent"]["passages"][0]["title"] == "Graphs"


@pytest.mark.parametrize("where", UNPARSABLE)
def test_a_request_holding_a_lone_surrogate_gets_a_parse_error_with_a_hint(raw_session: RawSession, where: str) -> None:
    """Before: the SDK dropped the line it could not parse, and the client waited forever."""
    method, params = UNPARSABLE[where]
    answer = raw_session.request(7, method, params)
    assert answer["id"] == 7
    error = answer["error"]
    assert error["code"] == -32700
    assert error["data"]["code"] == "invalid_request"
    assert "lone UTF-16 surrogate (\\udcff)" in error["data"]["message"]
    assert "valid UTF-8" in error["data"]["hint"]
    assert error["message"] == f"{error['data']['message']} {error['data']['hint']}"
    assert_still_serves(raw_session)


def test_the_parse_error_says_where_the_lone_surrogate_is(raw_session: RawSession) -> None:
    method, params = UNPARSABLE["tool argument"]
    message = raw_session.request(8, method, params)["error"]["data"]["message"]
    assert "in params.arguments.query" in message


def test_a_line_that_is_not_json_gets_a_parse_error_with_a_null_id(raw_session: RawSession) -> None:
    raw_session.send(b'{"jsonrpc": "2.0", "id": 9, "method": "ping"\n')  # the closing brace is missing
    answer = raw_session.reply()
    assert answer["id"] is None
    assert answer["error"]["code"] == -32700
    assert answer["error"]["data"]["code"] == "invalid_request"
    assert "one line of UTF-8 JSON" in answer["error"]["data"]["hint"]
    assert_still_serves(raw_session)
