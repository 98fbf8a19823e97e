"""kill -9 at each file commit point of each write: old or new files, served on restart, repaired by reindex.

A worker (``crash_points.py``) forks once per commit point of an operation and kills itself with
SIGKILL just before or just after it, so the rare moments — between a temp file's fsync and its
rename, between a rename and the index commit — are hit every time, not by luck.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from coffer_mcp import Coffer, load_settings
from coffer_mcp.convert import convert
from coffer_mcp.errors import DocumentNotFoundError
from coffer_mcp.index import open_index as open_index_of
from coffer_mcp.indexing.copies import copy_id
from coffer_mcp.store import body_sha256
from tests.reliability import batch_crash, rebuild_crash
from tests.reliability import crash_points as cp
from tests.reliability.support import PYTHON, TruthFile, temp_files, truth_files

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="fork and SIGKILL as on Linux")

HERE = Path(__file__).resolve().parent


def markdown_sha(name: str, data: bytes) -> str:
    """The body hash Coffer stores for a file of this name and content (text formats: no sandbox)."""
    return body_sha256(convert(name, data).markdown)


SOURCE_SHAS = {
    name: (None if old is None else markdown_sha(name, old.encode()), markdown_sha(name, new.encode()))
    for name, (old, new) in cp.SOURCES.items()
}


def allowed_states(scenario: str) -> dict[tuple[str, str], set[str | None]]:
    """(kb, original filename) -> the body hashes the document may hold after the crash (None: absent)."""
    sha = markdown_sha
    allowed: dict[tuple[str, str], set[str | None]] = {
        (cp.KB, "a.md"): {sha("a.md", cp.ALPHA.encode())},
        (cp.KB, "b.md"): {sha("b.md", cp.BETA.encode())},
        (cp.KB, "known.md"): {SOURCE_SHAS["known.md"][0]},
    }
    changes: dict[str, dict[tuple[str, str], set[str | None]]] = {
        "add": {(cp.KB, "new.md"): {None, sha("new.md", cp.NEW.encode())}},
        "replace": {(cp.KB, "a.md"): {sha("a.md", cp.ALPHA.encode()), sha("a.md", cp.ALPHA_V2.encode())}},
        "edit": {(cp.KB, "b.md"): {sha("b.md", cp.BETA.encode()), sha("b.md", cp.BETA_V2.encode())}},
        "delete": {(cp.KB, "a.md"): {sha("a.md", cp.ALPHA.encode()), None}},
        "ingest_dir": {(cp.KB, name): set(shas) for name, shas in SOURCE_SHAS.items()},
        "delete_kb": {key: {*shas, None} for key, shas in allowed.items()},
        "copy_kb": {(cp.COPY, name): shas for (_, name), shas in allowed.items()},
    }
    return {**allowed, **changes.get(scenario, {})}


def state_problems(home: Path, scenario: str) -> list[str]:
    """How the documents on disk differ from what a crash of ``scenario`` may leave."""
    allowed = allowed_states(scenario)
    seen: dict[tuple[str, str], list[str]] = {}
    problems = []
    for truth in truth_files(home):
        if not (truth.intact or being_renumbered(truth)):
            problems.append(f"{truth.path}: torn or truncated")
            continue
        seen.setdefault((truth.kb, truth.meta["original_filename"]), []).append(truth.sha)
    for key, shas in seen.items():
        if key not in allowed or len(shas) > 1 or shas[0] not in allowed[key]:
            problems.append(f"{key}: holds {shas}, expected one of {allowed.get(key)}")
    problems += [f"{key}: missing" for key, shas in allowed.items() if None not in shas and key not in seen]
    return problems


def being_renumbered(truth: TruthFile) -> bool:
    """A copy's document cut short between its two renumbering steps: its new id already in its
    frontmatter, its file not yet renamed (the next read finishes it with that id)."""
    meta = truth.meta or {}
    new_id = copy_id(cp.COPY, truth.doc_id)
    return truth.kb == cp.COPY and meta.get("id") == new_id and meta.get("content_sha256") == truth.sha


def final_state(scenario: str) -> dict[tuple[str, str], str | None]:
    """What the documents hold once the operation has run to the end (None: absent)."""
    sha = markdown_sha
    final = {
        (cp.KB, "a.md"): sha("a.md", cp.ALPHA.encode()),
        (cp.KB, "b.md"): sha("b.md", cp.BETA.encode()),
        (cp.KB, "known.md"): SOURCE_SHAS["known.md"][0],
    }
    changes = {
        "add": {(cp.KB, "new.md"): sha("new.md", cp.NEW.encode())},
        "replace": {(cp.KB, "a.md"): sha("a.md", cp.ALPHA_V2.encode())},
        "edit": {(cp.KB, "b.md"): sha("b.md", cp.BETA_V2.encode())},
        "delete": {(cp.KB, "a.md"): None},
        "ingest_dir": {(cp.KB, name): shas[1] for name, shas in SOURCE_SHAS.items()},
        "copy_kb": {(cp.COPY, name): sha for (_, name), sha in final.items()},
    }
    return {key: value for key, value in {**final, **changes[scenario]}.items() if value is not None}


def documents_on_disk(home: Path) -> dict[tuple[str, str], list[str]]:
    seen: dict[tuple[str, str], list[str]] = {}
    for truth in truth_files(home):
        seen.setdefault((truth.kb, (truth.meta or {}).get("original_filename", "?")), []).append(truth.sha)
    return seen


@pytest.fixture(scope="module")
def crashes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every scenario crashed at each of its commit points, by scenario (and the ingested folder)."""
    root = tmp_path_factory.mktemp("crash-points")
    base, sources = root / "base", root / "sources"
    cp.build_base(base, sources)
    done = subprocess.run(
        [PYTHON, str(HERE / "crash_points.py"), str(base), str(sources), str(root / "out"), *cp.SCENARIOS],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    by_scenario: dict[str, Any] = {name: [] for name in cp.SCENARIOS}
    for line in done.stdout.splitlines():
        crash = json.loads(line)
        by_scenario[crash["scenario"]].append(crash)
    by_scenario["sources"] = sources
    by_scenario["ids"] = cp.document_ids(base)
    return by_scenario


COMMIT_POINT_SCENARIOS = [pytest.param(name) for name in cp.SCENARIOS]


@pytest.mark.parametrize("scenario", COMMIT_POINT_SCENARIOS)
def test_a_kill_at_each_file_commit_point_leaves_old_or_new_files_that_the_next_start_serves_and_reindex_repairs(
    scenario: str, crashes: dict[str, Any], tmp_path: Path
) -> None:
    assert crashes[scenario], "the operation has no commit point"
    for crash in crashes[scenario]:
        where = f"{scenario}, killed {crash['phase']} commit point {crash['k']}"
        assert crash["outcome"] == "killed", where
        home = tmp_path / f"{crash['k']:02d}-{crash['phase']}"  # a copy: the crashed stores serve every test
        shutil.copytree(crash["home"], home)
        assert state_problems(home, scenario) == [], where
        with Coffer(load_settings(home=home, embedding_provider="none")) as coffer:
            # The next start serves every read, whatever the crash left.
            names = [kb.name for kb in coffer.list_kbs()]
            for name in names:
                coffer.list_documents(name)
                coffer.grep(name, "a")
            if names:
                coffer.search("*", "alpha beta")
            check_scenario(coffer, scenario, names, where)
            coffer.reindex_all()
            assert temp_files(home) == [], where
            assert [p for name in names for p in coffer.verify(name).problems] == [], where
        assert state_problems(home, scenario) == [], where


@pytest.mark.parametrize("scenario", ["add", "replace", "edit", "delete", "ingest_dir", "copy_kb"])
def test_running_the_operation_again_after_a_kill_at_any_commit_point_gives_the_same_documents_as_no_kill(
    scenario: str, crashes: dict[str, Any], tmp_path: Path
) -> None:
    wanted = {key: [sha] for key, sha in final_state(scenario).items()}
    for crash in crashes[scenario]:
        home = tmp_path / f"{crash['k']:02d}-{crash['phase']}"
        shutil.copytree(crash["home"], home)
        with (
            Coffer(load_settings(home=home, embedding_provider="none")) as coffer,
            contextlib.suppress(DocumentNotFoundError),  # a delete that had removed the file already
        ):
            cp.SCENARIOS[scenario](coffer, crashes["ids"], crashes["sources"])
        assert documents_on_disk(home) == wanted, f"{scenario}, killed {crash['phase']} commit point {crash['k']}"


def check_scenario(coffer: Coffer, scenario: str, names: list[str], where: str) -> None:
    """What is all-or-nothing stays so: a knowledge base created or deleted, a re-chunking."""
    if scenario == "create_kb" and "fresh" in names:
        assert coffer.describe_kb("fresh").description == cp.FRESH_KB_DESCRIPTION, where
    if scenario == "delete_kb":
        assert not list((coffer.paths.knowledge).glob(".deleting-*")), where
        if cp.KB in names:
            assert coffer.list_documents(cp.KB).total == 3, where
    if scenario == "copy_kb":  # the copy never takes the base's ids, nor holds a document twice
        base = {doc.document_id for doc in coffer.list_documents(cp.KB).documents}
        copy = {doc.document_id for doc in coffer.list_documents(cp.COPY).documents}
        assert (len(base), len(copy), base & copy) == (3, 3, set()), where
    if scenario == "update_kb":
        details = coffer.describe_kb(cp.KB)
        defaults = (coffer.settings.chunk_size, coffer.settings.chunk_overlap)
        assert (details.chunk_size, details.chunk_overlap) in (defaults, (128, 16)), where


# -- a kill inside a folder ingest's batch (group commit), on both index backends -----------------

BATCH_KILL_POINT = 28
"""The rename after which the batch worker dies: the 14th of the fourth batch (documents 8-15: 16
renames, 15-30), after the first three batches (7 documents) were committed."""


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_kill_inside_a_folder_ingests_batch_loses_only_its_rows_which_the_next_start_restores_from_the_files(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue("postgres_url") if backend == "postgres" else None
    home, sources, progress = tmp_path / "home", tmp_path / "papers", tmp_path / "progress.txt"
    batch_crash.write_sources(sources)
    done = subprocess.run(
        [PYTHON, str(HERE / "batch_crash.py"), str(home), str(sources), str(progress), str(BATCH_KILL_POINT)]
        + ([url] if url else []),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == -9, done.stderr
    on_disk = {truth.meta["source_path"]: truth for truth in truth_files(home)}
    assert all(truth.intact for truth in on_disk.values()), "a document file is torn"
    reported = {str(sources / name) for name in progress.read_text(encoding="utf-8").split()}
    settings = batch_crash.settings(home, url)
    index = open_index_of(settings)  # the rows as the kill left them: no reconcile has run
    try:
        committed = {row.source_path for row in index.documents(batch_crash.KB, with_source_path=True)}
    finally:
        index.close()
    # Progress never ran ahead of the commits, and the kill landed inside a batch: files written
    # and synced whose rows were not committed yet.
    assert reported, "no batch was committed before the kill"
    assert reported <= committed, "a file was reported done before its batch committed"
    assert committed <= set(on_disk), "a row points at no file"
    assert set(on_disk) - committed, "the kill landed outside a batch"
    with Coffer(settings) as coffer:
        # The next start restores every document whose file was written, from the file.
        listed = coffer.list_documents(batch_crash.KB, limit=100).documents
        assert {doc.source_path for doc in listed} == set(on_disk)
        assert coffer.search(batch_crash.KB, "zebrafish").passages
        coffer.reindex_all()
        assert temp_files(home) == []
        assert coffer.verify(batch_crash.KB).problems == []
        # And the ingest run again finishes the folder: each file once.
        again = coffer.ingest_path(batch_crash.KB, sources)
        assert (again.created, again.unchanged) == (batch_crash.FILES - len(on_disk), len(on_disk))
        assert coffer.list_documents(batch_crash.KB, limit=100).total == batch_crash.FILES


REBUILD_KILL_POINT = 20
"""The document row write the rebuild worker dies at: the 4th of the third batch of 8 (documents
17-24), after two batches (16 documents) were committed."""


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_kill_inside_a_rebuilds_batch_leaves_its_documents_old_rows_which_the_next_start_rebuilds(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue("postgres_url") if backend == "postgres" else None
    home, sources, progress = tmp_path / "home", tmp_path / "papers", tmp_path / "progress.txt"
    batch_crash.write_sources(sources)
    settings = batch_crash.settings(home, url)
    with Coffer(settings) as coffer:
        coffer.create_kb(batch_crash.KB)
        assert coffer.ingest_path(batch_crash.KB, sources).created == batch_crash.FILES
    before = {truth.path: (truth.meta, truth.body) for truth in truth_files(home)}
    done = subprocess.run(
        [PYTHON, "-m", "tests.reliability.rebuild_crash", str(home), str(progress), str(REBUILD_KILL_POINT)]
        + ([url] if url else []),
        cwd=HERE.parents[1],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == -9, done.stderr
    assert {truth.path: (truth.meta, truth.body) for truth in truth_files(home)} == before  # a rebuild writes no file
    index = open_index_of(settings)  # the rows as the kill left them: no reconcile has run
    try:
        params = [chunking for _, chunking in index.doc_stamps(batch_crash.KB).values()]
    finally:
        index.close()
    rebuilt = sum(chunking.startswith(f"{rebuild_crash.CHUNK_SIZE}:") for chunking in params)
    reported = [int(line) for line in progress.read_text(encoding="utf-8").split()]
    # Two batches committed and reported; the third's rows rolled back, the old ones kept whole.
    assert len(params) == batch_crash.FILES
    assert reported == [rebuild_crash.BATCH, 2 * rebuild_crash.BATCH]
    assert rebuilt == 2 * rebuild_crash.BATCH
    with Coffer(settings) as coffer:
        # The next start rechunks the documents the kill left behind, from their files.
        listed = coffer.list_documents(batch_crash.KB, limit=100)
        assert listed.total == batch_crash.FILES
        assert coffer.describe_kb(batch_crash.KB).chunk_size == rebuild_crash.CHUNK_SIZE
        params = [chunking for _, chunking in coffer.index.doc_stamps(batch_crash.KB).values()]
        assert all(chunking.startswith(f"{rebuild_crash.CHUNK_SIZE}:") for chunking in params)
        assert coffer.search(batch_crash.KB, "zebrafish").passages
        assert coffer.verify(batch_crash.KB).problems == []
