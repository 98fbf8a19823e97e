"""The HTTP transport under load: the short version of ``bench/http_load.py``, with zero failed requests.

Eight MCP sessions over streamable HTTP (six searching, two adding and editing) against
``coffer serve --http`` for five seconds. The full benchmark (32 + 4 clients for 60 s) is
``python -m bench.http_load``; its numbers are in ``bench/results/http_load.json``.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from bench.http_load import http_server, run_load, seed_corpus
from tests.reliability.support import cli

pytestmark = pytest.mark.anyio


async def test_eight_clients_searching_and_writing_over_http_for_five_seconds_get_no_failed_request(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    seed_corpus(home, documents=60)
    with http_server(home) as server, anyio.fail_after(180):
        result = await run_load(server.mcp_url, searchers=6, writers=2, seconds=5, seed=3)
    assert result.failures == []
    assert all(result.latencies[kind] for kind in ("search", "add", "edit")), "every kind of request ran"
    assert not [line for line in server.stderr if "Traceback" in line or "database is locked" in line]
    verified = cli(home, "kb", "verify", "--all")
    assert verified.returncode == 0, verified.stdout + verified.stderr
