"""Helpers for the web tests: a seeded Coffer, the real server on a loopback thread, a recording opener."""

from __future__ import annotations

import contextlib
import json
import re
import shlex
import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coffer_mcp import Coffer, load_settings
from coffer_mcp.web import bind_http

WEB_TESTS = Path(__file__).resolve().parent

ALPHA = """# Alpha guide

Coffer keeps every document as **Markdown** on disk. Retrieval uses *BM25* over chunks.

## Install

1. Install the package
2. Run `coffer serve --http`
   - nested point with a [link](https://example.org/docs "Docs")

| engine | speed |
|:-------|------:|
| ripgrep | fast |
| python | slower |

```python
print("hello <b>fenced</b>")
```

> A quoted line about retrieval.
"""

BETA = """# Beta notes on vector search

Vector retrieval embeds each chunk; hybrid search fuses keyword and vector ranks.
"""

# Raw HTML and script URLs in a document must never become live markup in the viewer.
HOSTILE = """# Hostile page

<script>window.__pwned = 1</script>
<img src=x onerror="window.__pwned = 2">

A [bad link](javascript:window.__pwned=3) and [another](  JaVa\tScRiPt:alert(1)) and <b>bold tag</b>.
"""


@dataclass(frozen=True)
class Seeded:
    """What the seeded store holds."""

    alpha: str
    beta: str
    hostile: str
    extra: list[str]


def make_coffer(home: Path, **settings: Any) -> Coffer:
    """A real service under ``home`` (no embedder: keyword search, nothing to download)."""
    return Coffer(load_settings(home=home, embedding_provider="none", **settings))


def seed(service: Coffer, *, extra_docs: int = 0) -> Seeded:
    """Two knowledge bases and a few documents, created through the service."""
    service.create_kb("notes", "Notes about Coffer")
    service.create_kb("empty-kb", "Nothing here yet")
    alpha = service.add_document("notes", "alpha.md", ALPHA).document_id
    beta = service.add_document("notes", "beta.md", BETA).document_id
    hostile = service.add_document("notes", "hostile.md", HOSTILE).document_id
    extra = [
        service.add_document("notes", f"extra-{i:02d}.md", f"# Extra page {i:02d}\n\nFiller {i}.\n").document_id
        for i in range(extra_docs)
    ]
    return Seeded(alpha, beta, hostile, extra)


@contextlib.contextmanager
def running(service: Coffer, **options: Any) -> Iterator[str]:
    """The real HTTP server (uvicorn on 127.0.0.1, a free port) on a thread; yields its base URL.

    The socket is listening before the thread starts, so no wait is needed: early connections
    queue until uvicorn accepts them.
    """
    server = bind_http(service, host="127.0.0.1", port=0, **options)
    server.start()
    try:
        yield server.url
    finally:
        server.stop(timeout=15)


def action_token(page: str) -> str:
    """The action token the viewer page carries."""
    match = re.search(r'<meta name="coffer-action-token" content="([^"]+)">', page)
    assert match, "the viewer page carries no action token"
    return match.group(1)


RECORDER = """\
import json, socket, sys
log, port = sys.argv[1], int(sys.argv[2])
with open(log, "a", encoding="utf-8") as handle:
    handle.write(json.dumps(sys.argv[3:]) + "\\n")
with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
    conn.sendall(b"called")
"""


class Recorder:
    """A recording opener: a script that logs its argv to a file, then pings a loopback socket.

    The ping lets a test wait for the (detached) opener without sleeping.
    """

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.script = folder / "recorder.py"
        self.script.write_text(RECORDER, encoding="utf-8")
        self.log = folder / "calls.jsonl"
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(15)

    @property
    def command(self) -> str:
        """The editor command line (an argument string, as COFFER_EDITOR holds it)."""
        port = self.listener.getsockname()[1]
        return shlex.join([sys.executable, str(self.script), str(self.log), str(port)])

    def wait_call(self) -> list[str]:
        """Block until the opener ran (socket timeout: 15 s) and return its last argv."""
        conn, _ = self.listener.accept()
        with conn:
            conn.recv(16)
        return self.calls()[-1]

    def calls(self) -> list[list[str]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text(encoding="utf-8").splitlines()]

    def close(self) -> None:
        self.listener.close()
