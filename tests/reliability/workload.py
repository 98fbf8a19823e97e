"""Seeded writers for the concurrency test: MCP clients (stdio or HTTP) and a CLI loop.

Each writer adds, edits, deletes and searches documents in a shared and a private knowledge
base until its deadline (or its operation budget), and journals every acknowledged write — kb,
document id, the content hash it must end up with, and when the call started and returned
(``time.monotonic``, one clock for every process of the machine) — plus every error and every
read that did not see the writer's own acknowledged write. The test then replays the journals
against the store.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import anyio
from mcp import Client

from coffer_mcp.store import body_sha256
from tests.reliability.support import PYTHON, Journal, expected_sha

__all__ = ["CliWriter", "McpWriter", "Plan"]

SHARED_WORDS = "coffer reliability note about locks, journals and concurrent writers"


@dataclass(frozen=True)
class Plan:
    """What one writer does: its name, its knowledge bases, its seed and its bounds."""

    name: str
    private: str
    shared: str
    contested: str
    seed: int
    deadline: float
    max_ops: int


@dataclass
class _Own:
    """A document this writer created: where it lives and what it must hold now."""

    kb: str
    sha: str
    token: str
    source: Path | None = None


@dataclass
class _Writer:
    WEIGHTS: ClassVar[dict[str, int]] = {}

    plan: Plan
    journal: Journal
    rng: random.Random = field(init=False)
    mine: dict[str, _Own] = field(default_factory=dict)
    n: int = 0

    def __post_init__(self) -> None:
        self.rng = random.Random(self.plan.seed)

    def more(self) -> bool:
        self.n += 1
        return self.n <= self.plan.max_ops and time.monotonic() < self.plan.deadline

    def content(self, what: str) -> tuple[str, str]:
        """A unique token and a Markdown body carrying it (every write's body is unique)."""
        token = f"tok{self.plan.name.replace('-', '')}n{self.n}"
        body = (
            f"# {self.plan.name} {what} {self.n}\n\n{self.plan.name} wrote this {what} as operation "
            f"{self.n}: {SHARED_WORDS}.\n\nUnique marker {token}.\n"
        )
        return token, body

    def next_op(self) -> str:
        """A seeded random operation, by the writer's weights; the first is always an add."""
        if self.n == 1:
            return "add"
        return self.rng.choices(list(self.WEIGHTS), list(self.WEIGHTS.values()))[0]

    def pick_kb(self) -> str:
        return self.rng.choice([self.plan.private, self.plan.shared])

    def acknowledged(self, op: str, kb: str, doc_id: str, sha: str | None, t0: float) -> None:
        self.journal.record(op=op, kb=kb, doc_id=doc_id, sha=sha, t0=t0, t1=time.monotonic(), writer=self.plan.name)


class McpWriter(_Writer):
    """A writer behind an MCP client session (stdio or streamable HTTP)."""

    WEIGHTS: ClassVar[dict[str, int]] = {
        "add": 24,
        "edit": 22,
        "delete": 8,
        "contest": 16,
        "search": 16,
        "grep": 5,
        "read": 5,
        "list": 4,
    }

    def __init__(self, plan: Plan, journal: Journal, client: Client) -> None:
        super().__init__(plan, journal)
        self.client = client

    async def run(self) -> None:
        while self.more():
            await getattr(self, f"_{self.next_op()}")()

    async def call(self, tool: str, **arguments: Any) -> dict[str, Any] | None:
        """The structured result, or None after journaling the error."""
        try:
            with anyio.fail_after(120):
                result = await self.client.call_tool(tool, arguments)
        except Exception as exc:  # noqa: BLE001 - any failure reaching the caller is what the test counts
            self.journal.record(op="error", tool=tool, error=f"{type(exc).__name__}: {exc}", writer=self.plan.name)
            return None
        if result.is_error:
            text = " ".join(getattr(part, "text", "") for part in result.content)
            self.journal.record(op="error", tool=tool, error=text, writer=self.plan.name)
            return None
        return result.structured_content

    async def _add(self) -> None:
        kb = self.pick_kb()
        token, body = self.content("note")
        t0 = time.monotonic()
        out = await self.call("coffer__add_document", kb=kb, filename=f"{self.plan.name}-{self.n}.md", content=body)
        if out is None:
            return
        doc_id = out["document_id"]
        self.mine[doc_id] = _Own(kb, expected_sha(body), token)
        self.acknowledged("add", kb, doc_id, expected_sha(body), t0)
        await self._find_own(doc_id)

    async def _edit(self) -> None:
        if not self.mine:
            await self._add()
            return
        doc_id = self.rng.choice(sorted(self.mine))
        own = self.mine[doc_id]
        token, body = self.content("edit")
        t0 = time.monotonic()
        if await self.call("coffer__edit_document", kb=own.kb, doc_id=doc_id, content=body) is not None:
            self.mine[doc_id] = _Own(own.kb, expected_sha(body), token)
            self.acknowledged("edit", own.kb, doc_id, expected_sha(body), t0)

    async def _delete(self) -> None:
        if not self.mine:
            return
        doc_id = self.rng.choice(sorted(self.mine))
        kb = self.mine[doc_id].kb
        t0 = time.monotonic()
        if await self.call("coffer__delete_document", kb=kb, doc_id=doc_id) is not None:
            del self.mine[doc_id]
            self.acknowledged("delete", kb, doc_id, None, t0)

    async def _contest(self) -> None:
        """Edit the one document every writer edits."""
        _, body = self.content("contested edit")
        t0 = time.monotonic()
        if await self.call("coffer__edit_document", kb=self.plan.shared, doc_id=self.plan.contested, content=body):
            self.acknowledged("edit", self.plan.shared, self.plan.contested, expected_sha(body), t0)

    async def _search(self) -> None:
        kb = self.rng.choice([self.plan.private, self.plan.shared, [self.plan.private, self.plan.shared], "*"])
        query = " ".join(self.rng.sample(SHARED_WORDS.replace(",", "").split(), 2))
        await self.call("coffer__search_knowledge", kb=kb, query=query, top_k=5)

    async def _grep(self) -> None:
        await self.call("coffer__grep_knowledge", kb=self.plan.shared, pattern=r"Unique marker tok\w+", max_matches=20)

    async def _read(self) -> None:
        """Read one of this writer's documents: it must hold exactly what was last acknowledged."""
        if not self.mine:
            return
        doc_id = self.rng.choice(sorted(self.mine))
        own = self.mine[doc_id]
        out = await self.call("coffer__read_document", kb=own.kb, doc_id=doc_id)
        if out is not None and body_sha256(out["markdown"]) != own.sha:
            self.journal.record(op="stale_read", tool="read", doc_id=doc_id, writer=self.plan.name)

    async def _list(self) -> None:
        await self.call("coffer__list_knowledge_bases")
        await self.call("coffer__list_documents", kb=self.plan.shared, limit=20)

    async def _find_own(self, doc_id: str) -> None:
        """Search for the write just acknowledged: its unique token must find it at once."""
        own = self.mine[doc_id]
        out = await self.call("coffer__search_knowledge", kb=own.kb, query=own.token, top_k=5)
        if out is not None and doc_id not in {p["document_id"] for p in out["passages"]}:
            self.journal.record(op="stale_read", tool="search", doc_id=doc_id, writer=self.plan.name)


class CliWriter(_Writer):
    """A loop of ``python -m coffer_mcp kb ...`` commands: ingest, re-ingest with --replace, rm, search."""

    WEIGHTS: ClassVar[dict[str, int]] = {
        "add": 30,
        "replace": 25,
        "delete": 10,
        "search": 20,
        "grep": 5,
        "documents": 10,
    }

    def __init__(self, plan: Plan, journal: Journal, env: dict[str, str], sources: Path) -> None:
        super().__init__(plan, journal)
        self.env = env
        self.sources = sources
        sources.mkdir(parents=True, exist_ok=True)

    async def run(self) -> None:
        while self.more():
            await getattr(self, f"_{self.next_op()}")()

    async def kb(self, *args: str) -> Any:
        """Run one ``coffer kb`` command with ``--json``; its parsed output, or None after journaling."""
        command = [PYTHON, "-m", "coffer_mcp", "kb", *args, "--json"]
        with anyio.fail_after(120):
            done = await anyio.run_process(command, env=self.env, check=False)
        stderr = done.stderr.decode("utf-8", errors="replace")
        if done.returncode != 0 or "Traceback" in stderr:
            self.journal.record(
                op="error",
                tool=f"kb {args[0]}",
                error=f"exit {done.returncode}: {stderr[-2000:]}",
                writer=self.plan.name,
            )
            return None
        return json.loads(done.stdout)

    async def _add(self) -> None:
        kb = self.pick_kb()
        token, body = self.content("file")
        source = self.sources / f"{self.plan.name}-{self.n}.md"
        source.write_text(body, encoding="utf-8")
        t0 = time.monotonic()
        out = await self.kb("ingest", kb, str(source))
        if out is None:
            return
        item = out["items"][0]
        if item["status"] != "created":
            self.journal.record(op="error", tool="kb ingest", error=json.dumps(item), writer=self.plan.name)
            return
        self.mine[item["document_id"]] = _Own(kb, expected_sha(body), token, source)
        self.acknowledged("add", kb, item["document_id"], expected_sha(body), t0)

    async def _replace(self) -> None:
        """Change a source file and ingest it again with --replace: the same document, new content."""
        if not self.mine:
            await self._add()
            return
        doc_id = self.rng.choice(sorted(self.mine))
        own = self.mine[doc_id]
        token, body = self.content("revised file")
        own.source.write_text(body, encoding="utf-8")
        t0 = time.monotonic()
        out = await self.kb("ingest", own.kb, str(own.source), "--replace")
        if out is None:
            return
        item = out["items"][0]
        if (item["status"], item["document_id"]) != ("updated", doc_id):
            self.journal.record(op="error", tool="kb ingest --replace", error=json.dumps(item), writer=self.plan.name)
            return
        self.mine[doc_id] = _Own(own.kb, expected_sha(body), token, own.source)
        self.acknowledged("edit", own.kb, doc_id, expected_sha(body), t0)

    async def _delete(self) -> None:
        if not self.mine:
            return
        doc_id = self.rng.choice(sorted(self.mine))
        kb = self.mine[doc_id].kb
        t0 = time.monotonic()
        if await self.kb("rm", kb, doc_id) is not None:
            del self.mine[doc_id]
            self.acknowledged("delete", kb, doc_id, None, t0)

    async def _search(self) -> None:
        if self.mine and self.rng.random() < 0.5:
            doc_id = self.rng.choice(sorted(self.mine))
            own = self.mine[doc_id]
            out = await self.kb("search", own.kb, own.token)
            if out is not None and doc_id not in {p["document_id"] for p in out["passages"]}:
                self.journal.record(op="stale_read", tool="kb search", doc_id=doc_id, writer=self.plan.name)
            return
        await self.kb("search", f"{self.plan.private},{self.plan.shared}", *SHARED_WORDS.split()[:2])

    async def _grep(self) -> None:
        await self.kb("grep", self.plan.shared, "concurrent writers", "--max-matches", "10")

    async def _documents(self) -> None:
        await self.kb("documents", self.plan.shared, "--limit", "20")
