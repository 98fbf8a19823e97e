"""The holes an outside attacker found, each pinned through a real surface (MCP client, CLI).

Source paths from a pack, YAML alias bombs, a file swapped for a symlink while it is ingested,
a document file that is a symlink out of the store, absurd numbers and paths, an import killed
half-way, base64 sent as text, a filename without an extension, and an ANN graph file cut short
under a running server.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.types import Implementation

from coffer_mcp import Coffer, load_settings
from coffer_mcp.errors import CofferError
from coffer_mcp.mcp_server import build_server
from coffer_mcp.store import StorePaths
from tests.conftest import FIXTURES, REPO
from tests.embed.fake_openai_server import fake_openai_server
from tests.mcp_clients import open_client, structured
from tests.reliability.support import cli, processes_with_env

CLIENT = Implementation(name="attacker", version="1")
SECRET = "launch codes 7741"
BOMB = "a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 8)
)


def tool_error(result) -> dict:
    assert result.is_error
    return json.loads(result.content[0].text)


def service(home: Path, **settings) -> Coffer:
    return Coffer(load_settings(home=home, embedding_provider="none", **settings))


def rewrite_pack(pack: Path, edit_doc: Callable[[bytes], bytes]) -> Path:
    """Rewrite every ``docs/*.md`` member with ``edit_doc`` and recompute the manifest's hashes."""
    with tarfile.open(pack, "r:gz") as tar:
        members = [(m, tar.extractfile(m).read() if m.isreg() else None) for m in tar]
    manifest = json.loads(members[0][1])
    out = []
    for info, original in members[1:]:
        data = original
        if info.name.startswith("docs/") and info.name.endswith(".md"):
            data = edit_doc(original)
            manifest["files"][info.name] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
        out.append((info, data))
    crafted = pack.with_name(f"crafted-{pack.name}")
    with tarfile.open(crafted, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for member, data in [(members[0][0], json.dumps(manifest).encode()), *out]:
            info = copy.copy(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return crafted


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.md").write_text(f"# Secret\n\n{SECRET}\n", encoding="utf-8")
    return folder


@pytest.fixture
def allowed(tmp_path: Path) -> Path:
    folder = tmp_path / "allowed"
    folder.mkdir()
    (folder / "paper.md").write_text("# Paper\n\nA harmless paper about tides.\n", encoding="utf-8")
    return folder


# -- 1. a pack's source_path never reaches outside allowed_dirs -----------------------------------


@pytest.mark.anyio
async def test_a_packs_source_path_outside_allowed_dirs_is_never_read_by_check_or_update(
    tmp_path: Path, allowed: Path, outside: Path
) -> None:
    with service(tmp_path / "author") as author:
        author.create_kb("papers")
        author.update_kb("papers", auto_update_sources=True)
        author.ingest_path("papers", allowed / "paper.md")
        pack = Path(author.export_kb("papers", tmp_path / "papers.cofferpack").path)
    secret = str(outside / "secret.md")
    crafted = rewrite_pack(pack, lambda data: data.replace(str(allowed / "paper.md").encode(), secret.encode()))
    assert cli(tmp_path / "victim", "kb", "import", str(crafted)).returncode == 0
    with service(tmp_path / "victim", allowed_dirs=[allowed]) as victim, anyio.fail_after(60):
        [doc] = victim.list_documents("papers").documents
        assert doc.source_path == secret
        async with Client(build_server(victim), client_info=CLIENT) as client:
            checked = await client.call_tool("coffer__check_sources", {"kb": "papers"})
            updated = await client.call_tool("coffer__update_from_source", {"kb": "papers", "doc_id": doc.document_id})
            found = await client.call_tool("coffer__search_knowledge", {"kb": "papers", "query": "launch codes"})
            read = await client.call_tool("coffer__read_document", {"kb": "papers", "doc_id": doc.document_id})
    report = checked.structured_content
    assert (report["refused"], report["updated"], report["changed"]) == (1, 0, 0)
    assert report["documents"][0]["status"] == "refused"
    assert str(allowed) in report["documents"][0]["message"]
    assert tool_error(updated)["code"] == "path_not_allowed"
    assert found.structured_content["passages"] == []
    assert SECRET not in read.structured_content["markdown"]


# -- 2. YAML alias bombs -----------------------------------------------------------------------------


def test_a_pack_whose_frontmatter_is_an_alias_bomb_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    with service(tmp_path / "author") as author:
        author.create_kb("notes")
        author.add_document("notes", "a.md", "# A\n\nalpha")
        pack = Path(author.export_kb("notes", tmp_path / "notes.cofferpack").path)
    crafted = rewrite_pack(pack, lambda data: data.replace(b"---\n", f"---\n{BOMB}".encode(), 1))
    result = cli(tmp_path / "victim", "kb", "import", str(crafted))
    assert result.returncode != 0
    assert "unsafe" in result.stderr
    assert "aliases" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "victim" / "knowledge" / "notes").exists()


def test_an_alias_bomb_dropped_into_docs_is_kept_as_a_document_without_its_frontmatter(tmp_path: Path) -> None:
    with service(tmp_path / "home") as coffer:
        coffer.create_kb("notes")
        (coffer.paths.kb("notes").docs / "bomb.md").write_text(f"---\n{BOMB}---\n\n# Bomb\n\nfuse wire\n")
        [passage] = coffer.search("notes", "fuse wire").passages
        document = coffer.read_document("notes", passage.document_id)
    assert "lol" not in json.dumps(document.metadata)
    assert "a7" not in json.dumps(document.metadata)
    assert document.markdown.startswith("# Bomb")
    assert (tmp_path / "home" / "coffer.db").stat().st_size < 5 * 1024 * 1024


# -- 4. a file swapped for a symlink while ingest_path reads it -----------------------------------


_SWAPPER = """
import os, sys, time
from pathlib import Path
folder = Path(sys.argv[1])
end = time.monotonic() + 240
i = 0
while time.monotonic() < end and not (folder / ".stop").exists():
    # An atomic rename: swap.md is, in turn, an allowed file and a link to the outside one.
    os.link(folder / (".link" if i % 2 else ".decoy"), folder / f".tmp{i}", follow_symlinks=False)
    os.replace(folder / f".tmp{i}", folder / "swap.md")
    i += 1
"""


@pytest.mark.anyio
async def test_swapping_a_file_for_a_symlink_during_ingest_path_never_ingests_the_outside_file(
    tmp_path: Path, allowed: Path, outside: Path
) -> None:
    # Before the file was opened first and checked after, this ingested the secret within ~50 tries.
    (allowed / ".decoy").write_text("# Decoy\n\nan allowed file\n", encoding="utf-8")
    (allowed / ".link").symlink_to(outside / "secret.md")
    (allowed / "swap.md").write_text("# Decoy\n\nan allowed file\n", encoding="utf-8")
    # A try reads the file as the allowed one only when every check falls between two swaps: about
    # one try in 60-100 here. So the tries go on until a few did (400 fixed tries found none in
    # about one run of 50), and never past the cap: missing them 4,000 times in a row is ~1e-20.
    codes: set[str] = set()
    tries = read = 0
    with service(tmp_path / "home", allowed_dirs=[allowed]) as coffer:
        coffer.create_kb("kb")
        with subprocess.Popen([sys.executable, "-c", _SWAPPER, str(allowed)]) as swapper:
            try:
                with anyio.fail_after(240):
                    async with Client(build_server(coffer), client_info=CLIENT) as client:
                        while tries < 4000 and (tries < 400 or read < 3):
                            result = await client.call_tool(
                                "coffer__ingest_path", {"kb": "kb", "path": str(allowed / "swap.md"), "replace": True}
                            )
                            tries += 1
                            if result.is_error:
                                codes.add(tool_error(result)["code"])
                                continue
                            outcomes = [i.get("code") or i["status"] for i in result.structured_content["items"]]
                            codes.update(outcomes)
                            read += sum(outcome in ("created", "updated", "unchanged") for outcome in outcomes)
            finally:
                (allowed / ".stop").touch()
                swapper.wait(timeout=60)
        texts = [coffer.read_document("kb", d.document_id).markdown for d in coffer.list_documents("kb").documents]
    assert texts
    assert not any(SECRET in text for text in texts)
    assert "path_not_allowed" in codes, codes  # the swapper ran all along: some tries met the link
    assert codes <= {"created", "updated", "unchanged", "path_not_allowed", "invalid_argument", "unreadable"}, codes


# -- 5. a document file that is a symlink out of the store ----------------------------------------


@pytest.mark.anyio
async def test_a_document_file_replaced_by_a_symlink_out_of_the_store_is_not_served(
    tmp_path: Path, outside: Path
) -> None:
    with service(tmp_path / "home") as coffer:
        coffer.create_kb("kb")
        doc_id = coffer.add_document("kb", "note.md", "# Note\n\nplain words").document_id
        doc = coffer.paths.kb("kb").doc(doc_id)
        doc.unlink()
        doc.symlink_to(outside / "secret.md")
        with anyio.fail_after(60):
            async with Client(build_server(coffer), client_info=CLIENT) as client:
                read = await client.call_tool("coffer__read_document", {"kb": "kb", "doc_id": doc_id})
                searched = await client.call_tool("coffer__search_knowledge", {"kb": "kb", "query": "launch codes"})
                grepped = await client.call_tool("coffer__grep_knowledge", {"kb": "kb", "pattern": "launch"})
    assert tool_error(read)["code"] == "unknown_document"
    assert searched.structured_content["passages"] == []
    assert grepped.structured_content["hits"] == []


# -- 8. absurd numbers and paths reach the core as coded errors ----------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("kb", "documents", "notes", "--offset", str(2**63)),
        ("kb", "documents", "notes", "--limit", "0"),
    ],
    ids=["offset-2**63", "limit-0"],
)
def test_absurd_numbers_and_paths_on_the_cli_get_a_coded_error_not_a_traceback(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    home = tmp_path / "home"
    assert cli(home, "kb", "create", "notes").returncode == 0
    result = cli(home, *args)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert "offset" in result.stderr


@pytest.mark.anyio
async def test_a_nul_byte_in_an_ingest_path_is_an_invalid_argument(tmp_path: Path, allowed: Path) -> None:
    with service(tmp_path / "home", allowed_dirs=[allowed]) as coffer:
        coffer.create_kb("kb")
        with anyio.fail_after(60):
            async with Client(build_server(coffer), client_info=CLIENT) as client:
                result = await client.call_tool("coffer__ingest_path", {"kb": "kb", "path": f"{allowed}/a\x00b.md"})
    error = tool_error(result)
    assert error["code"] == "invalid_argument"
    assert "NUL" in error["hint"]


def test_reading_around_a_huge_position_is_an_invalid_argument(tmp_path: Path) -> None:
    with service(tmp_path / "home") as coffer:
        coffer.create_kb("kb")
        doc_id = coffer.add_document("kb", "a.md", "# A\n\nalpha").document_id
        with pytest.raises(CofferError) as raised:
            coffer.read_document("kb", doc_id, around_position=2**63)
    assert raised.value.code == "invalid_argument"


# -- 9. a killed import leaves no staging folder behind -------------------------------------------

_SLOW_IMPORT = """
import sys
from pathlib import Path
from coffer_mcp import Coffer, load_settings

def progress(done, total, message):
    if message == "verifying" and done == 2:
        print("staged", flush=True)
        sys.stdin.read()  # wait here, mid-import, until killed

with Coffer(load_settings(home=Path(sys.argv[1]), embedding_provider="none")) as coffer:
    coffer.import_pack(Path(sys.argv[2]), progress=progress)
"""


def test_the_staging_folder_of_a_killed_import_is_removed_when_the_store_next_opens(tmp_path: Path) -> None:
    with service(tmp_path / "author") as author:
        author.create_kb("notes")
        for i in range(4):
            author.add_document("notes", f"n{i}.md", f"# N{i}\n\nbody {i}")
        pack = Path(author.export_kb("notes", tmp_path / "notes.cofferpack").path)
    home = tmp_path / "home"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    knowledge = StorePaths(home).knowledge
    with subprocess.Popen(
        [sys.executable, "-c", _SLOW_IMPORT, str(home), str(pack)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    ) as proc:
        try:
            assert proc.stdout.readline().strip() == "staged"
            assert list(knowledge.glob(".importing-*"))
            with service(home) as live:  # its owner is alive: the folder stays
                live.list_kbs()
                assert list(knowledge.glob(".importing-*"))
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=60)
    with service(home) as after:
        after.list_kbs()
    assert not list(knowledge.glob(".importing-*"))
    assert not list(StorePaths(home).locks.glob(".importing-*"))


# -- errors in our shape: base64 sent as text, a filename without an extension --------------------


@pytest.mark.anyio
async def test_base64_of_a_pdf_sent_as_text_gets_a_hint_to_say_so_and_text_without_extension_is_markdown(
    tmp_path: Path,
) -> None:
    pdf = base64.b64encode((FIXTURES / "sample.pdf").read_bytes()).decode()
    with service(tmp_path / "home") as coffer:
        coffer.create_kb("kb")
        with anyio.fail_after(120):
            async with Client(build_server(coffer), client_info=CLIENT) as client:
                upload = {"kb": "kb", "filename": "x.pdf", "content": pdf}
                as_text = await client.call_tool("coffer__add_document", upload)
                as_b64 = await client.call_tool("coffer__add_document", {**upload, "content_encoding": "base64"})
                note = await client.call_tool(
                    "coffer__add_document",
                    {"kb": "kb", "filename": "Meeting notes", "content": "We agreed on the proxy."},
                )
    error = tool_error(as_text)
    assert error["code"] == "invalid_argument"
    assert 'content_encoding="base64"' in error["hint"]
    assert not as_b64.is_error
    assert as_b64.structured_content["status"] == "created"
    added = note.structured_content
    assert not note.is_error
    assert added["original_filename"] == "Meeting notes.md"
    assert "Markdown" in added["note"]
    assert added["title"] == "Meeting notes"


# -- what a new user trips over ---------------------------------------------------------------------


def test_downloaded_embedding_models_are_kept_under_coffer_home_unless_the_user_chose_a_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # fastembed's own default is the system temp dir, which a reboot may empty: a new download each time.
    from coffer_mcp.services import embedding_config

    monkeypatch.delenv("FASTEMBED_CACHE_PATH", raising=False)
    assert embedding_config(load_settings(home=tmp_path / "home")).cache_dir == tmp_path / "home" / "models"
    monkeypatch.setenv("FASTEMBED_CACHE_PATH", str(tmp_path / "mine"))
    assert embedding_config(load_settings(home=tmp_path / "home")).cache_dir is None


# -- an ANN graph file cut short under a running server ---------------------------------------------

_NOTES = "\n\n".join(
    f"## Section {i}\n\nTide table {i} lists herons, harbours and lighthouse {i * 7}." for i in range(300)
)


def mapped_graphs(home: Path) -> set[str]:
    """The graph files a process over ``home`` (the server, its graph viewer) has memory-mapped."""
    found = set()
    for pid in processes_with_env(str(home)):
        with contextlib.suppress(OSError):
            maps = Path(f"/proc/{pid}/maps").read_text(encoding="utf-8")
            found.update(line.rsplit("/", 1)[-1] for line in maps.splitlines() if line.endswith(".usearch"))
    return found


async def eventually(check: Callable[[], Awaitable[bool]], what: str) -> None:
    try:
        with anyio.fail_after(120):
            while not await check():  # noqa: ASYNC110 - polls what the server does in the background
                await anyio.sleep(0.1)
    except TimeoutError:
        pytest.fail(f"not seen within 120 s: {what}")


@pytest.mark.anyio
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc for the mapped files")
@pytest.mark.parametrize("cut", ["emptied", "halved"])
async def test_a_graph_file_cut_short_under_a_running_server_is_rebuilt_and_the_scan_answers_meanwhile(
    tmp_path: Path, cut: str
) -> None:
    # A backup tool truncating coffer.db-ann/*.usearch in place, then a vector search: the server
    # read the mapped graph past the file's new end and died of SIGBUS (exit -7, nothing on stderr;
    # the client saw the connection close).
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text("ann_min_chunks: 1\nchunk_size: 64\n", encoding="utf-8")
    graphs = home / "coffer.db-ann"
    with fake_openai_server() as embeddings, anyio.fail_after(300):
        env = {
            "COFFER_EMBEDDING_PROVIDER": "openai",
            "COFFER_EMBEDDING_BASE_URL": embeddings.base_url,
            "COFFER_EMBEDDING_MODEL": "fake-embed",
            "NO_PROXY": "127.0.0.1",
        }
        async with open_client("stdio", None, home, env=env) as client:
            structured(await client.call_tool("coffer__create_knowledge_base", {"name": "notes", "vector": True}))
            structured(
                await client.call_tool(
                    "coffer__add_document", {"kb": "notes", "filename": "tides.md", "content": _NOTES}
                )
            )

            async def search() -> list[tuple[str, int, float]]:
                found = structured(
                    await client.call_tool(
                        "coffer__search_knowledge", {"kb": "notes", "query": "heron lighthouse 77", "top_k": 10}
                    )
                )
                return [(p["document_id"], p["position"], p["score"]) for p in found["passages"]]

            async def graph_named(other_than: str = "") -> bool:
                names = [path.name for path in graphs.glob("*.usearch")]
                return bool(names) and other_than not in names

            expected = await search()  # starts the graph's build, in the background
            await eventually(graph_named, "the graph built")
            (file,) = graphs.glob("*.usearch")
            assert await search() == expected
            assert file.name in mapped_graphs(home)  # the search went through the graph
            size = file.stat().st_size
            with open(file, "r+b") as handle:  # in place: the same inode, as the mapping sees it
                handle.truncate(0 if cut == "emptied" else size // 2)
            assert await search() == expected  # the server lives; the scan answered
            await eventually(lambda: graph_named(other_than=file.name), "the graph rebuilt")
            assert await search() == expected
            (rebuilt,) = graphs.glob("*.usearch")
            assert rebuilt.name in mapped_graphs(home)  # searched through the new graph
            metrics = structured(await client.call_tool("coffer__knowledge_base_metrics", {"kb": "notes"}))
            assert [info["search"] for info in metrics["vector_index"].values()] == ["ann"]
