"""Hybrid search with real embedding providers, end to end.

fastembed runs the local all-MiniLM-L6-v2 export (skipped with a reason when ../shared is absent);
the OpenAI provider talks to a real HTTP server on loopback that the test starts and stops.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.types import Implementation

from coffer_mcp import Coffer, load_settings
from tests.conftest import installed_script
from tests.embed.conftest import MODEL_NAME, local_model_dir
from tests.embed.fake_openai_server import fake_openai_server

TARGET = (
    "# Account access\n\nIf you forgot your login credentials, open the sign-in page, choose "
    "'Forgot password' and follow the link we email you."
)
OTHERS = {
    "bread.md": "# Sourdough\n\nFeed the starter with flour and water, then proof the dough overnight.",
    "kayak.md": "# Sea kayaking\n\nPractise the roll in calm water before paddling in waves.",
    "garden.md": "# Tomatoes\n\nStake the plants and pinch out the side shoots every week.",
}
PARAPHRASE = "I cannot remember my passcode"  # no word in common with TARGET


def model_env() -> dict[str, str]:
    return {
        "COFFER_EMBEDDING_PROVIDER": "fastembed",
        "COFFER_EMBEDDING_MODEL": MODEL_NAME,
        "COFFER_EMBEDDING_MODEL_PATH": str(local_model_dir()),
    }


@pytest.mark.anyio
async def test_a_vector_knowledge_base_answers_a_paraphrase_that_keyword_misses(home: Path) -> None:
    env = {**os.environ, **model_env(), "COFFER_HOME": str(home)}
    command = installed_script("coffer")
    params = StdioServerParameters(
        command=command or sys.executable, args=["serve"] if command else ["-m", "coffer_mcp", "serve"], env=env
    )
    with anyio.fail_after(120):
        async with Client(params, client_info=Implementation(name="hybrid-test", version="1")) as client:
            await client.call_tool("coffer__create_knowledge_base", {"name": "help", "vector": True})
            target = await client.call_tool(
                "coffer__add_document", {"kb": "help", "filename": "access.md", "content": TARGET}
            )
            for name, text in OTHERS.items():
                await client.call_tool("coffer__add_document", {"kb": "help", "filename": name, "content": text})
            found = await client.call_tool("coffer__search_knowledge", {"kb": "help", "query": PARAPHRASE})
            metrics = await client.call_tool("coffer__knowledge_base_metrics", {"kb": "help"})
    result = found.structured_content
    assert result["strategy"] == "hybrid"
    assert result["passages"][0]["document_id"] == target.structured_content["document_id"]
    assert metrics.structured_content["embedding_model"] == f"fastembed:{MODEL_NAME}"
    assert metrics.structured_content["documents_degraded"] == 0
    with Coffer(load_settings(home=home)) as coffer:
        keyword = coffer.search("help", PARAPHRASE, strategy="keyword")
    assert target.structured_content["document_id"] not in {p.document_id for p in keyword.passages}


def test_doctor_reports_a_reachable_local_model(home: Path) -> None:
    with Coffer(load_settings(model_env(), home=home)) as coffer:
        coffer.create_kb("help", vector=True)
        report = coffer.doctor()
    assert report.embedder.reachable is True
    assert report.embedder.dimensions == 384
    assert report.sqlite_vec_version
    assert report.fts5


def chunk_rows(coffer: Coffer) -> list[tuple]:
    return [
        tuple(r) for r in coffer.index.conn.execute("SELECT id, document_id, position, text FROM chunks ORDER BY id")
    ]


def test_an_openai_server_killed_mid_ingest_leaves_keyword_search_and_recovers_without_rechunking(
    home: Path,
) -> None:
    with fake_openai_server() as server:
        env = {
            "COFFER_EMBEDDING_PROVIDER": "openai",
            "COFFER_EMBEDDING_BASE_URL": server.base_url,
            "COFFER_EMBEDDING_MODEL": "fake-embed",
        }
        settings = load_settings(env, home=home, embedding_cooldown_seconds=0)
        with Coffer(settings) as coffer:
            coffer.create_kb("kb", vector=True)
            coffer.add_document("kb", "first.md", "# First\n\nembedded while the server was up")
            server.stop()
            for i in range(3):
                coffer.add_document("kb", f"later{i}.md", f"# Later {i}\n\nwritten while the server was down")
            assert coffer.describe_kb("kb").documents_degraded == 3
            down = coffer.search("kb", "written while down")
            assert down.strategy == "keyword"
            assert {p.title for p in down.passages} == {"Later 0", "Later 1", "Later 2"}
            before = chunk_rows(coffer)
            server.start()
            assert coffer.describe_kb("kb").documents_degraded == 0
            assert chunk_rows(coffer) == before
            assert coffer.search("kb", "server down").strategy == "hybrid"
