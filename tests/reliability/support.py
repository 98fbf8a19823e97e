"""Helpers of the reliability tests: Coffer processes over one home, journals, checks from outside.

Everything here looks at the store the way a user's tools would — the files under
``COFFER_HOME`` and the rows of ``coffer.db`` — never through the service's reconcile-on-read,
which would repair (and so hide) whatever a test is looking for.
"""

from __future__ import annotations

import hashlib
import json
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.http_load import server_env
from coffer_mcp import Coffer
from coffer_mcp.convert import clean_markdown
from coffer_mcp.index.sqlite.db import Connection, connect
from coffer_mcp.store import body_sha256, is_document_id, parse_document

__all__ = [
    "BACKTRACK_LINE",
    "DB_FILES",
    "GREP_TIMEOUT",
    "PYTHON",
    "Journal",
    "LineReader",
    "Store",
    "TruthFile",
    "cli",
    "coffer_env",
    "expected_sha",
    "fingerprint_changes",
    "index_rows",
    "open_index",
    "processes_with_env",
    "rpc",
    "store_fingerprint",
    "temp_files",
    "tool_error_code",
    "truth_files",
]

PYTHON = sys.executable
DB_FILES = ("coffer.db", "coffer.db-wal", "coffer.db-shm")
TEMP_MARKER = ".tmp-"
# Tables whose rows are the index (history tables — audit_log, mcp_invocations — grow on purpose).
INDEX_TABLES = ("knowledge_bases", "documents", "chunks", "embedding_models")

coffer_env = server_env


def cli(
    home: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m coffer_mcp ARGS`` over ``home`` and return what it did (never raises on exit code).

    A command still running after ``timeout`` fails the test with where each of its threads was
    (faulthandler's dump on SIGABRT), not a bare kill: a hang under load must say what it waited on.
    """
    command = [PYTHON, "-X", "faulthandler", "-m", "coffer_mcp", *args]
    with subprocess.Popen(
        command, env=env or coffer_env(home), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)
            try:
                out, err = proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
            ran = " ".join(args)
            raise AssertionError(f"`coffer {ran}` ran over {timeout} s; its threads:\n{err}\n{out}") from None
    return subprocess.CompletedProcess(command, proc.returncode, out, err)


def expected_sha(content: str) -> str:
    """The ``content_sha256`` Coffer records for a Markdown upload (or an edit) of ``content``."""
    return body_sha256(clean_markdown(content))


# -- journals ------------------------------------------------------------------------------------


class Journal:
    """One writer's append-only JSON-lines log: each acknowledged write, each error it saw."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._handle = path.open("a", encoding="utf-8")

    def record(self, **entry: Any) -> None:
        self._handle.write(json.dumps(entry, ensure_ascii=False) + "\n")
        self._handle.flush()

    def close(self) -> None:
        self._handle.close()

    @staticmethod
    def read(path: Path) -> list[dict[str, Any]]:
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


# -- the store, seen from outside ----------------------------------------------------------------


@dataclass(frozen=True)
class TruthFile:
    """One ``knowledge/<kb>/docs/<id>.md`` as it is on disk."""

    kb: str
    doc_id: str
    path: Path
    meta: dict[str, Any] | None
    body: str

    @property
    def sha(self) -> str:
        return body_sha256(self.body)

    @property
    def intact(self) -> bool:
        """Frontmatter parsed, and the body is the one the frontmatter's hash was taken of."""
        meta = self.meta or {}
        return self.meta is not None and meta.get("id") == self.doc_id and meta.get("content_sha256") == self.sha


def truth_files(home: Path) -> list[TruthFile]:
    """Every visible document file of every knowledge base (folders renamed aside are not ones)."""
    found = []
    for docs in sorted((home / "knowledge").glob("[!.]*/docs")):
        for path in sorted(docs.glob("*.md")):
            if path.name.startswith(".") or not is_document_id(path.stem):
                continue
            meta, body = parse_document(path.read_bytes().decode("utf-8", errors="replace"))
            found.append(TruthFile(docs.parent.name, path.stem, path, meta, body))
    return found


def temp_files(home: Path) -> list[Path]:
    """Temp files of interrupted atomic writes (``.<name>.tmp-<hex>``) anywhere under ``knowledge/``."""
    return sorted(p for p in (home / "knowledge").rglob(f".*{TEMP_MARKER}*"))


def open_index(home: Path) -> Connection:
    """A plain connection to ``coffer.db`` (no migration, no reconcile)."""
    return connect(home / "coffer.db")


def index_rows(home: Path) -> dict[str, dict[str, Any]]:
    """The ``documents`` rows by id, with their chunk counts."""
    conn = open_index(home)
    try:
        rows = conn.execute(
            "SELECT d.id, d.kb, d.content_sha256, (SELECT count(*) FROM chunks c WHERE c.document_id = d.id) AS chunks "
            "FROM documents d"
        ).fetchall()
        return {row["id"]: dict(row) for row in rows}
    finally:
        conn.close()


def store_fingerprint(home: Path) -> dict[str, Any]:
    """Every file under ``home`` (but the database) with its hash, plus the index's row counts and digest.

    Equal fingerprints before and after an operation mean it changed nothing in the store.
    """
    files: dict[str, str] = {}
    for path in sorted(home.rglob("*")):
        relative = path.relative_to(home).as_posix()
        if relative in DB_FILES:
            continue
        files[relative] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "dir"
    counts: dict[str, int] = {}
    digest = ""
    if (home / "coffer.db").exists():
        conn = open_index(home)
        try:
            counts = {table: conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] for table in INDEX_TABLES}
            rows = conn.execute("SELECT id, kb, content_sha256, file_stamp, title FROM documents ORDER BY id")
            digest = hashlib.sha256(json.dumps([list(r) for r in rows]).encode()).hexdigest()
        finally:
            conn.close()
    return {"files": files, "rows": counts, "documents_digest": digest}


# -- a seeded store for hostile input -------------------------------------------------------------

GREP_TIMEOUT = 1.0
# A line that makes backtracking regex engines explode: many a's, then no match at the end.
BACKTRACK_LINE = "a" * 5_000 + "!"


class Store:
    """A service over a small seeded store, and what its files and rows looked like when seeded."""

    def __init__(self, coffer: Coffer) -> None:
        self.coffer = coffer
        self.home = coffer.paths.home
        coffer.create_kb("notes", "hostile input lands here")
        coffer.create_kb("other")
        harbour = "# Harbour\n\nTides, herons and lighthouses.\n"
        self.doc = coffer.add_document("notes", "harbour.md", harbour).document_id
        coffer.add_document("notes", "backtrack.md", f"# Backtracking\n\n{BACKTRACK_LINE}\n")
        coffer.add_document("other", "other.md", "# Other\n\nA second knowledge base.\n")
        self.seeded = store_fingerprint(self.home)

    def changed(self) -> list[str]:
        """What differs from the seeded store: files (added, removed, changed) and index rows."""
        return fingerprint_changes(self.seeded, store_fingerprint(self.home))


def fingerprint_changes(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """The differences between two store fingerprints, one line each (empty: unchanged)."""
    files_before, files_after = before["files"], after["files"]
    changes = [f"added {p}" for p in sorted(files_after.keys() - files_before.keys())]
    changes += [f"removed {p}" for p in sorted(files_before.keys() - files_after.keys())]
    changes += [
        f"changed {p}" for p in sorted(files_before.keys() & files_after.keys()) if files_before[p] != files_after[p]
    ]
    if before["rows"] != after["rows"] or before["documents_digest"] != after["documents_digest"]:
        changes.append(f"index rows {before['rows']} -> {after['rows']}")
    return changes


def tool_error_code(result: Any) -> str:
    """The ``code`` of an MCP tool error (schema refusals included: ``invalid_argument``)."""
    assert result.is_error, result
    return json.loads(result.content[0].text)["code"]


# -- raw JSON-RPC over a stdio server's pipes ----------------------------------------------------


def rpc(message_id: int | None, method: str, params: dict[str, Any] | None = None) -> bytes:
    """One newline-delimited JSON-RPC message."""
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        message["params"] = params
    if message_id is not None:
        message["id"] = message_id
    return (json.dumps(message) + "\n").encode()


class LineReader:
    """Lines from a process's stdout, each waited for at most a given time (no blocking forever)."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.fd = proc.stdout.fileno()
        self.buffer = b""

    def line(self, timeout: float) -> bytes:
        """The next line (b"" once the process closed stdout).

        Raises:
            TimeoutError: no complete line within ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as selector:
            selector.register(self.fd, selectors.EVENT_READ)
            while b"\n" not in self.buffer:
                if not selector.select(max(0.0, deadline - time.monotonic())):
                    raise TimeoutError(f"no line on stdout within {timeout} s")
                chunk = os.read(self.fd, 65536)
                if not chunk:
                    return b""
                self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line + b"\n"


def processes_with_env(marker: str) -> Iterator[int]:
    """PIDs of live processes whose environment contains ``marker`` (Linux ``/proc``)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if marker.encode() in environ:
            yield int(entry.name)
