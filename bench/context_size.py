"""What Coffer's answers cost an agent's context, measured from outside through a real stdio client.

    python -m bench.context_size [--data ../shared/eval/scifact] [--out FILE]

Counts characters an agent reads: ``tools/list`` (names, descriptions and input schemas, as a
client forwards them to its model), the text content of a 5-passage ``search_knowledge`` result
(averaged over queries), ``list_documents`` of 20 documents, and a ``read_document`` page around a
passage. The corpus is the first 20 SciFact abstracts (or a built-in one without the data).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.types import Implementation

DOCUMENTS = 20
QUERIES = 20


def _corpus(data: Path | None) -> tuple[list[tuple[str, str]], list[str]]:
    if data is not None and (data / "corpus.jsonl").exists():
        with (data / "corpus.jsonl").open(encoding="utf-8") as corpus:
            docs = [json.loads(line) for _, line in zip(range(DOCUMENTS), corpus, strict=False)]
        queries = [" ".join(d["title"].split()[:4]) for d in docs][:QUERIES]
        return [(f"{d['_id']}.md", f"# {d['title']}\n\n{d['text']}\n") for d in docs], queries
    words = "cells protein brain cancer gene therapy immune response vitamin sleep".split()
    docs = [(f"d{i}.md", f"# Study {i} of {words[i % 10]}\n\n" + " ".join(words * 12) + "\n") for i in range(DOCUMENTS)]
    return docs, [f"{w} {words[(i + 3) % 10]}" for i, w in enumerate(words)]


def _text(result: Any) -> str:
    if result.is_error:
        raise RuntimeError(result.content)
    return "".join(block.text for block in result.content if block.type == "text")


async def _measure(home: Path, docs: list[tuple[str, str]], queries: list[str]) -> dict[str, Any]:
    env = {**os.environ, "COFFER_HOME": str(home), "COFFER_EMBEDDING_PROVIDER": "none"}
    params = StdioServerParameters(command=sys.executable, args=["-m", "coffer_mcp", "serve"], env=env)
    async with Client(params, client_info=Implementation(name="bench-context", version="1")) as client:
        tools = await client.list_tools()
        listing = [{"name": t.name, "description": t.description, "inputSchema": t.input_schema} for t in tools.tools]
        await client.call_tool("coffer__create_knowledge_base", {"name": "papers"})
        for name, content in docs:
            await client.call_tool("coffer__add_document", {"kb": "papers", "filename": name, "content": content})
        searches = [
            _text(await client.call_tool("coffer__search_knowledge", {"kb": "papers", "query": q, "top_k": 5}))
            for q in queries
        ]
        listed = _text(await client.call_tool("coffer__list_documents", {"kb": "papers", "limit": DOCUMENTS}))
        hit = json.loads(searches[0])["passages"][0]
        around = _text(
            await client.call_tool(
                "coffer__read_document",
                {"kb": "papers", "doc_id": hit["document_id"], "around_position": hit["position"], "window": 1},
            )
        )
    return {
        "tools_list_chars": len(json.dumps(listing, ensure_ascii=False, separators=(",", ":"))),
        "tools": len(listing),
        "search_top5_chars_mean": round(statistics.mean(len(s) for s in searches)),
        "list_documents_20_chars": len(listed),
        "read_around_position_chars": len(around),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("../shared/eval/scifact"))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    docs, queries = _corpus(args.data)
    with tempfile.TemporaryDirectory() as home:
        figures = anyio.run(_measure, Path(home), docs, queries)
    print("| measure | characters |\n|---|---:|")
    for key, value in figures.items():
        print(f"| {key} | {value:,} |")
    if args.out:
        args.out.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
