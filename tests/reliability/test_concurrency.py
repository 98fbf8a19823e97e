"""Several processes on one COFFER_HOME at once: nothing acknowledged is lost, nothing drifts.

Two ``coffer serve`` stdio servers (driven by the SDK client), one ``coffer serve --http``
(driven by the SDK's streamable-HTTP client) and two loops of ``python -m coffer_mcp kb ...``
commands add, edit, delete and search documents in a shared knowledge base (with vectors, from a
local fake embedding server) and in private ones, for ``COFFER_RELIABILITY_SECONDS`` (default
20). Every writer journals what was acknowledged; the journals are then replayed against the
files and the rows, as they are, before anything reconciles them.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.types import Implementation

from bench.http_load import http_server
from coffer_mcp import Coffer, load_settings
from coffer_mcp.errors import CofferError
from tests.embed.fake_openai_server import fake_openai_server
from tests.reliability.support import (
    PYTHON,
    Journal,
    cli,
    coffer_env,
    open_index,
    truth_files,
)
from tests.reliability.workload import CliWriter, McpWriter, Plan

pytestmark = pytest.mark.anyio

SECONDS = float(os.environ.get("COFFER_RELIABILITY_SECONDS", "20"))
MAX_OPS = 100_000  # the deadline ends the run; this only bounds a very fast machine
SHARED = "shared"
STDIO, HTTP, CLI = ("stdio-a", "stdio-b"), "http", ("cli-a", "cli-b")
WRITERS = (*STDIO, HTTP, *CLI)
TEAM = ("team-1a", "team-2b", "team-3a", "team-4b")  # writers on the first (a) and second (b) server


def prepare(home: Path, env: dict[str, str], writers: Sequence[str] = WRITERS) -> str:
    """The knowledge bases and the contested document; returns its id."""
    with Coffer(load_settings(env, home=home)) as coffer:
        coffer.create_kb(SHARED, "everyone writes here", vector=True)
        for name in writers:
            coffer.create_kb(f"own-{name}", f"only {name} writes here")
        return coffer.add_document(SHARED, "contested.md", "# Contested\n\nEvery writer edits this one.").document_id


def plan(name: str, contested: str, deadline: float, seed: int) -> Plan:
    return Plan(
        name=name,
        private=f"own-{name}",
        shared=SHARED,
        contested=contested,
        seed=seed,
        deadline=deadline,
        max_ops=MAX_OPS,
    )


async def drive_stdio(writer_plan: Plan, journal: Journal, env: dict[str, str], errlog: TextIO) -> None:
    params = StdioServerParameters(command=PYTHON, args=["-m", "coffer_mcp", "serve"], env=env)
    info = Implementation(name=writer_plan.name, version="1")
    async with Client(stdio_client(params, errlog=errlog), client_info=info) as client:
        await McpWriter(writer_plan, journal, client).run()


async def drive_http(writer_plan: Plan, journal: Journal, url: str) -> None:
    async with Client(url, client_info=Implementation(name=writer_plan.name, version="1")) as client:
        await McpWriter(writer_plan, journal, client).run()


def replay(journals: dict[str, list[dict[str, Any]]], contested: str) -> tuple[dict[str, tuple[str, str]], set[str]]:
    """From the journals: each live document's (kb, content hash), and the documents deleted."""
    live: dict[str, tuple[str, str]] = {}
    deleted: set[str] = set()
    for entries in journals.values():
        for entry in entries:
            if entry["op"] not in ("add", "edit", "delete") or entry["doc_id"] == contested:
                continue
            if entry["op"] == "delete":
                live.pop(entry["doc_id"])
                deleted.add(entry["doc_id"])
            else:
                live[entry["doc_id"]] = (entry["kb"], entry["sha"])
    return live, deleted


def index_rows(core: Coffer) -> dict[str, dict[str, Any]]:
    """Every document row, as the index holds it now (read through the port: any backend)."""
    index = core.index
    return {
        row.id: {
            "kb": row.kb,
            "content_sha256": row.content_sha256,
            "chunks": index.chunk_count(doc_id=row.id),
            "vectors_due": row.embed_pending or row.embedding_model is None,
        }
        for kb in index.kb_stamps()
        for row in index.documents(kb)
    }


def lost_writes(home: Path, core: Coffer, live: dict[str, tuple[str, str]], deleted: set[str]) -> list[str]:
    """Every way the files and rows differ from what the journals say was acknowledged."""
    files = {truth.doc_id: truth for truth in truth_files(home)}
    rows = index_rows(core)
    problems = []
    for doc_id, (kb, sha) in sorted(live.items()):
        truth, row = files.get(doc_id), rows.get(doc_id)
        if truth is None or truth.kb != kb or not truth.intact or truth.sha != sha:
            problems.append(f"{kb}/{doc_id}: the file does not hold the last acknowledged write")
        if row is None or row["kb"] != kb or row["content_sha256"] != sha or not row["chunks"]:
            problems.append(f"{kb}/{doc_id}: the index does not hold the last acknowledged write")
    for doc_id in sorted(deleted):
        knowledge = home / "knowledge"
        leftovers = [*knowledge.glob(f"*/docs/{doc_id}.md"), *knowledge.glob(f"*/raw/{doc_id}.*")]
        if leftovers or doc_id in rows:
            problems.append(f"{doc_id}: acknowledged deleted, but files {leftovers} or its row remain")
    return problems


def check_last_writer_wins(home: Path, core: Coffer, journals: dict[str, list[dict[str, Any]]], contested: str) -> None:
    """The contested document holds one acknowledged edit, and no edit began after that one returned."""
    edits = [e for entries in journals.values() for e in entries if e["op"] == "edit" and e["doc_id"] == contested]
    assert len({e["writer"] for e in edits}) >= 2, "the writers never contended for the document"
    final = next(t for t in truth_files(home) if t.doc_id == contested)
    assert final.intact
    assert index_rows(core)[contested]["content_sha256"] == final.sha
    winners = [e for e in edits if e["sha"] == final.sha]
    assert len(winners) == 1, "the final content is none of the acknowledged edits"
    overtaken_by = [e for e in edits if e["t0"] > winners[0]["t1"]]
    assert overtaken_by == [], "an edit made after the winning one was acknowledged got lost"
    applied = [
        e
        for e in core.index.audit_events(limit=10**9)
        if e.document_id == contested and e.event == "KB_DOCUMENT_UPDATED"
    ]
    assert len(applied) == len(edits), "every acknowledged edit was applied once, as its own version"


def failed_calls_recorded(core: Coffer) -> list[tuple[str, str, str, str | None]]:
    return [(c.tool, c.client, c.outcome, c.error_code) for c in core.invocations(limit=10**9) if c.outcome != "ok"]


def vectors_missing(core: Coffer) -> int:
    return sum(row["vectors_due"] for row in index_rows(core).values() if row["kb"] == SHARED)


def check_acknowledged(
    home: Path, env: dict[str, str], entries: dict[str, list[dict[str, Any]]], contested: str, writers: Sequence[str]
) -> None:
    """What every journal says was acknowledged is in the files and the rows, and they agree."""
    # Nothing failed, and every read saw the reader's own acknowledged writes.
    assert [e for log in entries.values() for e in log if e["op"] in ("error", "stale_read")] == []
    assert all(any(e["op"] == "add" for e in entries[name]) for name in writers), "a writer never wrote"
    # Read as the index is, before anything reconciles it (opening a Coffer reconciles nothing).
    with Coffer(load_settings(env, home=home)) as core:
        assert failed_calls_recorded(core) == []
        live, deleted = replay(entries, contested)
        assert lost_writes(home, core, live, deleted) == []
        check_last_writer_wins(home, core, entries, contested)
        assert vectors_missing(core) == 0
        # Files, rows, keyword index and vectors agree.
        names = [p.name for p in sorted((home / "knowledge").iterdir())]
        assert [problem for name in names for problem in core.verify(name).problems] == []
    verified = cli(home, "kb", "verify", "--all", env=env)
    assert verified.returncode == 0, verified.stdout + verified.stderr


async def test_stdio_http_and_cli_writers_at_once_lose_no_acknowledged_write_and_leave_no_drift(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    journals = {name: Journal(tmp_path / f"{name}.jsonl") for name in WRITERS}
    logs = {name: (tmp_path / f"{name}.stderr").open("w", encoding="utf-8") for name in STDIO}
    with fake_openai_server() as embeddings:
        env = coffer_env(
            home,
            {
                "COFFER_EMBEDDING_PROVIDER": "openai",
                "COFFER_EMBEDDING_BASE_URL": embeddings.base_url,
                "COFFER_EMBEDDING_MODEL": "fake-embed",
            },
        )
        contested = prepare(home, env)
        with http_server(home, env) as http:
            deadline = time.monotonic() + SECONDS
            plans = {name: plan(name, contested, deadline, seed) for seed, name in enumerate(WRITERS, 1)}
            with anyio.fail_after(SECONDS + 240):
                async with anyio.create_task_group() as group:
                    for name in STDIO:
                        group.start_soon(drive_stdio, plans[name], journals[name], env, logs[name])
                    group.start_soon(drive_http, plans[HTTP], journals[HTTP], http.mcp_url)
                    for name in CLI:
                        writer = CliWriter(plans[name], journals[name], env, tmp_path / f"{name}-sources")
                        group.start_soon(writer.run)
        for handle in [*journals.values(), *logs.values()]:
            handle.close()
        server_logs = "".join(http.stderr) + "".join(
            (tmp_path / f"{name}.stderr").read_text(encoding="utf-8") for name in STDIO
        )
        entries = {name: Journal.read(journal.path) for name, journal in journals.items()}

        assert "database is locked" not in server_logs
        assert "Traceback" not in server_logs
        check_acknowledged(home, env, entries, contested, WRITERS)
        conn = open_index(home)
        try:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        finally:
            conn.close()


async def test_two_http_servers_on_one_store_and_one_postgres_lose_no_write_and_leave_no_drift(
    tmp_path: Path, postgres_url: str
) -> None:
    # A team's deployment (docs/deploy.md): two servers share the knowledge/ folder and one
    # PostgreSQL database; writers on both add, edit and delete in shared and private knowledge
    # bases and contend for one document. Their locks are PostgreSQL advisory locks.
    home = tmp_path / "home"
    journals = {name: Journal(tmp_path / f"{name}.jsonl") for name in TEAM}
    with fake_openai_server() as embeddings:
        env = coffer_env(
            home,
            {
                "COFFER_EMBEDDING_PROVIDER": "openai",
                "COFFER_EMBEDDING_BASE_URL": embeddings.base_url,
                "COFFER_EMBEDDING_MODEL": "fake-embed",
                "COFFER_INDEX_BACKEND": "postgres",
                "COFFER_DATABASE_URL": postgres_url,
            },
        )
        contested = prepare(home, env, TEAM)
        with http_server(home, env) as first, http_server(home, env) as second:
            servers = {name: (first if name.endswith("a") else second) for name in TEAM}
            deadline = time.monotonic() + SECONDS
            plans = {name: plan(name, contested, deadline, seed) for seed, name in enumerate(TEAM, 1)}
            with anyio.fail_after(SECONDS + 240):
                async with anyio.create_task_group() as group:
                    for name in TEAM:
                        group.start_soon(drive_http, plans[name], journals[name], servers[name].mcp_url)
        for handle in journals.values():
            handle.close()
        server_logs = "".join(first.stderr) + "".join(second.stderr)
        entries = {name: Journal.read(journal.path) for name, journal in journals.items()}
        assert "Traceback" not in server_logs
        check_acknowledged(home, env, entries, contested, TEAM)


# -- knowledge bases created and deleted under other processes' feet ------------------------------


CHURN_CYCLES = 150
HERE = Path(__file__).resolve().parent


def churn(home: Path, name: str) -> subprocess.Popen[bytes]:
    """Another process creating and deleting knowledge base ``name``, ``CHURN_CYCLES`` times."""
    return subprocess.Popen(
        [PYTHON, str(HERE / "churn.py"), str(home), name, str(CHURN_CYCLES)],
        env=coffer_env(home),
        stdout=subprocess.DEVNULL,
    )


def while_running(proc: subprocess.Popen[bytes], call: Callable[[], object], limit: int = 200_000) -> list[str]:
    """Call ``call`` until ``proc`` exits; every exception that is not a ``CofferError``, and every code."""
    seen = []
    for _ in range(limit):
        if proc.poll() is not None:
            break
        try:
            call()
        except CofferError as exc:
            seen.append(exc.code)
        except Exception as exc:  # noqa: BLE001 - an untyped error is exactly what the test looks for
            seen.append(f"{type(exc).__name__}: {exc}")
    assert proc.wait(60) == 0
    return seen


def test_listing_and_searching_every_knowledge_base_never_fails_while_another_process_creates_and_deletes_one(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    with Coffer(load_settings(home=home, embedding_provider="none")) as coffer:
        for i in range(40):  # listed (and refreshed) before "scratch": a window as wide as real stores have
            coffer.create_kb(f"kb-{i:02d}")
            coffer.add_document(f"kb-{i:02d}", "a.md", "# Steady\n\nTides and herons.")
        proc = churn(home, "scratch")

        def read_everything() -> None:
            coffer.list_kbs()
            coffer.search("*", "tides")
            coffer.grep("*", "herons")

        assert while_running(proc, read_everything) == []


def test_adding_to_a_knowledge_base_another_process_deletes_gets_unknown_kb_and_leaves_no_ghost(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    with Coffer(load_settings(home=home, embedding_provider="none")) as coffer:
        coffer.list_kbs()  # the index exists before the other process starts
        proc = churn(home, "victim")
        added = itertools.count()
        codes = while_running(proc, lambda: coffer.add_document("victim", f"n{next(added)}.md", "# N\n\nbody"))
    assert set(codes) <= {"unknown_kb"}
    assert not (home / "knowledge" / "victim").exists()
    verified = cli(home, "kb", "verify", "--all")
    assert verified.returncode == 0, verified.stdout
