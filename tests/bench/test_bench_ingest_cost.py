"""The ingest-cost benchmark: both backends ingest the same documents, PostgreSQL's statements are timed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest

from bench.ingest_cost import main


def test_ingest_cost_reports_both_backends_and_where_postgresql_spends_its_time(
    tmp_path: Path, postgres_server: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    execute = psycopg.Connection.execute
    out = tmp_path / "ingest.json"

    main(
        [
            "--documents",
            "12",
            "--postgres-url",
            postgres_server.get_uri(),
            "--workdir",
            str(tmp_path),
            "--out",
            str(out),
        ]
    )

    data = json.loads(out.read_text(encoding="utf-8"))
    sqlite, postgres = data["backends"]["sqlite"], data["backends"]["postgres"]
    assert sqlite["documents"] == postgres["documents"] == 12
    assert "statements_ms_per_doc" not in sqlite
    statements = postgres["statements_ms_per_doc"]
    commits = statements["(COMMIT)"]["calls"]
    assert 1 <= commits < postgres["documents"]  # a commit per batch, not per document
    # and per batch one statement for its chunks with their postings, one for its documents, one for
    # its audit records: not one of each per document
    for start in ("WITH new AS MATERIALIZED ( SELECT nextval('chunk_ids')", "WITH doc AS", "INSERT INTO audit_log"):
        assert [value["calls"] for key, value in statements.items() if key.startswith(start)] == [commits], start
    # and one query matching the batch's files to their documents (a file whose batch's lease ran
    # out is ingested on its own, with its own match and transaction)
    matches = sum(value["calls"] for key, value in statements.items() if key.startswith(("SELECT p.asked", "SELECT *")))
    assert matches <= commits
    assert set(postgres["cpu_ms_per_doc"]) == {"client", "server"}
    assert postgres["cpu_ms_per_doc"]["server"] > 0
    assert len(postgres["load_average"]) == 2
    assert 0 < postgres["in_statements_ms_per_doc"] < postgres["total_ms_per_doc"]
    assert psycopg.Connection.execute is execute  # the timing is undone
    assert "| postgres |" in capsys.readouterr().out


def test_ingest_cost_can_follow_the_folder_instead(tmp_path: Path) -> None:
    out = tmp_path / "follow.json"
    args = ["--documents", "6", "--backend", "sqlite", "--via", "follow", "--workdir", str(tmp_path), "--out", str(out)]
    main(args)
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["via"] == "follow"
    assert data["backends"]["sqlite"]["documents"] == 6
