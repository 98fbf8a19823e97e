"""The two-servers benchmark: a short run over one PostgreSQL database loses no acknowledged write."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.two_servers import main


def test_clients_spread_over_two_servers_sharing_one_store_lose_no_write(
    tmp_path: Path, postgres_server: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "two.json"
    argv = ["--servers", "2", "--searchers", "3", "--writers", "2", "--seconds", "3", "--documents", "10"]

    status = main([*argv, "--postgres-url", postgres_server.get_uri(), "--out", str(out)])

    (run,) = json.loads(out.read_text(encoding="utf-8"))["runs"]
    assert status == 0, run["failures"]
    assert run["servers"] == 2
    assert run["kinds"]["search"]["requests"] > 0
    assert run["kinds"]["add"]["requests"] > 0
    check = run["writes_check"]
    assert check["ok"]
    assert check["documents"] == check["files"] >= 10 + run["kinds"]["add"]["requests"]
    assert "| 2 |" in capsys.readouterr().out
