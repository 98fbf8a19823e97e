"""kill -9 at random moments: every truth file is old or new, never truncated; one reindex repairs the rest.

A real ``coffer serve`` is killed after seeded random delays while it ingests a folder and applies
edits, many times over one store; and once while its converter process works. The same
guarantees at each file commit point in turn are in ``test_crash_points.py``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import random
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from coffer_mcp import Coffer, load_settings
from coffer_mcp.convert import convert
from coffer_mcp.store import body_sha256
from tests.reliability.nasty_files import docx
from tests.reliability.support import (
    PYTHON,
    LineReader,
    cli,
    coffer_env,
    expected_sha,
    processes_with_env,
    rpc,
    temp_files,
    truth_files,
)

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="kill -9, fork, pidfd and /proc as on Linux")

# Random moments: the distinct commit points are each hit by test_crash_points.py; more rounds are a soak
# (docs/reliability.md).
KILLS = int(os.environ.get("COFFER_RELIABILITY_KILLS", "8"))
INGEST_KB, EDIT_KB = "ingested", "edited"
EDITED_DOCS = 6


def markdown_sha(name: str, data: bytes) -> str:
    """The body hash Coffer stores for a file of this name and content (text formats: no sandbox)."""
    return body_sha256(convert(name, data).markdown)


def bytes_sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# -- a real server, killed at random -------------------------------------------------------------


class Sources:
    """The folder a server ingests, rewritten between kills; remembers every version of every file."""

    TEXT = ("md", "md", "md", "txt", "csv", "json")

    def __init__(self, folder: Path, rng: random.Random) -> None:
        self.folder = folder
        self.rng = rng
        self.bodies: dict[str, set[str]] = {}  # source path -> body hashes of its versions
        self.raws: dict[str, set[str]] = {}  # source path -> sha256 of its versions' bytes
        folder.mkdir(parents=True)
        self.files = [folder / f"{i:02d}-note.{ext}" for i, ext in enumerate(self.TEXT * 5)]
        self.rewrite(version=0, share=1.0)

    def rewrite(self, version: int, share: float) -> None:
        """Give a random ``share`` of the files a new version (some large: slow to convert and index)."""
        for path in self.files:
            if self.rng.random() < share:
                self._write(path, version)

    def _write(self, path: Path, version: int) -> None:
        paragraphs = self.rng.choice([1, 5, 50, 500, 2000])
        text = "\n\n".join(
            f"Version {version} of {path.stem}, paragraph {i}: tides, harbours, lighthouses." for i in range(paragraphs)
        )
        if path.suffix == ".csv":
            text = "version,paragraph\n" + "\n".join(f"{version},{i}" for i in range(paragraphs))
        elif path.suffix == ".json":
            text = json.dumps({"version": version, "paragraphs": paragraphs})
        data = text.encode("utf-8")
        path.write_bytes(data)
        self.bodies.setdefault(str(path), set()).add(markdown_sha(path.name, data))
        self.raws.setdefault(str(path), set()).add(bytes_sha(data))


class Server:
    """``coffer serve`` on stdio, spoken to in raw JSON-RPC so it can be killed at any moment."""

    def __init__(self, env: dict[str, str], errlog: Path) -> None:
        with errlog.open("ab") as handle:
            self.proc = subprocess.Popen(
                [PYTHON, "-m", "coffer_mcp", "serve"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=handle,
                env=env,
            )
        self.lines = LineReader(self.proc)
        self.sent = 0
        self.answered = 0

    def initialize(self) -> None:
        params = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "killer", "version": "1"}}
        self._send(rpc(0, "initialize", params))
        reply = json.loads(self.lines.line(timeout=60))
        assert "result" in reply, reply
        self._send(rpc(None, "notifications/initialized"))

    def call(self, tool: str, arguments: dict[str, Any]) -> None:
        """Send a tool call without waiting: the server runs the calls it has concurrently."""
        self.sent += 1
        self._send(rpc(self.sent, "tools/call", {"name": tool, "arguments": arguments}))

    def kill(self) -> bool:
        """kill -9; True if some call was still unanswered (the kill interrupted work)."""
        try:
            while self.answered < self.sent and self.lines.line(timeout=0):
                self.answered += 1
        except TimeoutError:
            pass
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.proc.stdin.close()
        self.proc.stdout.close()
        return self.answered < self.sent

    def _send(self, message: bytes) -> None:
        self.proc.stdin.write(message)
        self.proc.stdin.flush()


def prepare_edited(home: Path, env: dict[str, str]) -> dict[str, set[str]]:
    """The knowledge bases, and documents to edit; returns each document's body hashes so far."""
    with Coffer(load_settings(env, home=home)) as coffer:
        coffer.create_kb(INGEST_KB)
        coffer.create_kb(EDIT_KB)
        docs = [
            coffer.add_document(EDIT_KB, f"doc-{i}.md", f"# Doc {i}\n\nThe first version.\n").document_id
            for i in range(EDITED_DOCS)
        ]
    return {doc_id: {expected_sha(f"# Doc {i}\n\nThe first version.\n")} for i, doc_id in enumerate(docs)}


def edit_body(doc_id: str, round_: int, rng: random.Random) -> str:
    size = rng.choice([10, 500, 5_000])
    paragraphs = (f"Round {round_}, paragraph {i}: edits in flight." for i in range(size))
    return f"# Doc {doc_id[-4:]}\n\n" + "\n\n".join(paragraphs)


def damage(home: Path, sources: Sources, edited: dict[str, set[str]]) -> list[str]:
    """Every truth file that is not a complete version that was written (an empty list if none)."""
    problems = []
    for truth in truth_files(home):
        if not truth.intact:
            problems.append(f"{truth.path}: frontmatter and body do not belong together (truncated or torn)")
        elif truth.kb == EDIT_KB and truth.sha not in edited.get(truth.doc_id, set()):
            problems.append(f"{truth.path}: holds no version that was written")
        elif (
            truth.kb == INGEST_KB
            and truth.meta.get("source_path") in sources.bodies
            and truth.sha not in sources.bodies[truth.meta["source_path"]]
        ):
            problems.append(f"{truth.path}: holds no version of {truth.meta['source_path']}")
    for raw in (home / "knowledge" / INGEST_KB / "raw").glob("[!.]*"):
        if raw.name.endswith(".map.json"):  # a source map: written whole, or not at all
            try:
                json.loads(raw.read_bytes())
            except ValueError:
                problems.append(f"{raw}: a source map that is not whole JSON (truncated?)")
            continue
        digest = bytes_sha(raw.read_bytes())
        if not any(digest in versions for versions in sources.raws.values()):
            problems.append(f"{raw}: an original that is no version of any source (truncated?)")
    return problems


def wait_gone(pids: list[int], timeout: float) -> list[int]:
    """Wait, at most ``timeout`` seconds in all, for processes to exit; returns the ones still alive."""
    deadline = time.monotonic() + timeout
    alive = []
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)  # readable once the process has exited
        except ProcessLookupError:
            continue
        try:
            if not select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
                alive.append(pid)
        finally:
            os.close(fd)
    return alive


def test_kill_9_during_folder_ingests_and_edits_leaves_complete_files_and_one_reindex_repairs_the_index(
    tmp_path: Path,
) -> None:
    rng = random.Random(20261130)
    home = tmp_path / "home"
    sources = Sources(tmp_path / "sources", rng)
    env = coffer_env(home, {"COFFER_ALLOWED_DIRS": str(sources.folder)})
    edited = prepare_edited(home, env)
    interrupted = 0
    for round_ in range(1, KILLS + 1):
        sources.rewrite(version=round_, share=0.5)
        server = Server(env, tmp_path / "server.stderr")
        server.initialize()
        server.call("coffer__ingest_path", {"kb": INGEST_KB, "path": str(sources.folder), "replace": True})
        for doc_id in rng.sample(sorted(edited), 5):
            body = edit_body(doc_id, round_, rng)
            edited[doc_id].add(expected_sha(body))
            server.call("coffer__edit_document", {"kb": EDIT_KB, "doc_id": doc_id, "content": body})
        time.sleep(rng.uniform(0.0, 1.5))  # the random moment of the kill
        interrupted += server.kill()
        assert damage(home, sources, edited) == [], f"after kill {round_}"
    assert interrupted > 0, "no kill landed while the server was working"

    # One reindex: no temp file left, and files, rows, full-text index and vectors agree.
    reindexed = cli(home, "kb", "reindex", "--all", env=env)
    assert reindexed.returncode == 0, reindexed.stderr
    assert temp_files(home) == []
    assert damage(home, sources, edited) == []
    verified = cli(home, "kb", "verify", "--all", env=env)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "database is locked" not in (tmp_path / "server.stderr").read_text(encoding="utf-8")


def test_a_server_killed_while_it_converts_leaves_no_converter_process_running_for_long(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = coffer_env(home)
    with Coffer(load_settings(env, home=home)) as coffer:
        coffer.create_kb("docs")
    # A genuine DOCX that takes about a minute to convert stands in for one that hangs the converter.
    slow = docx([f"Paragraph {i} about herons, tides and lighthouses." for i in range(150_000)])
    server = Server(env, tmp_path / "server.stderr")
    server.initialize()
    server.call(
        "coffer__add_document",
        {
            "kb": "docs",
            "filename": "slow.docx",
            "content_encoding": "base64",
            "content": base64.b64encode(slow).decode(),
        },
    )
    time.sleep(random.Random(11).uniform(1.0, 2.0))  # the random moment of the kill
    converters = [pid for pid in processes_with_env(str(home)) if pid != server.proc.pid]
    try:
        assert converters, "the conversion had not started"
        server.kill()
        assert truth_files(home) == []
        assert list((home / "knowledge" / "docs" / "raw").iterdir()) == []
        assert wait_gone(converters, timeout=10) == [], "the converter outlived its server"
    finally:
        for pid in wait_gone(converters, timeout=0):  # the test's own leftovers, by pid
            os.kill(pid, signal.SIGKILL)
