"""Optional reranking of a search's best passages: ``make_reranker(config) -> BudgetedReranker | None``.

    from coffer_mcp.rerank import RerankConfig, make_reranker

    reranker = make_reranker(RerankConfig(provider="http", url="http://127.0.0.1:8080/v1/rerank"))
    passages, info = reranker.rerank("query", passages)  # info.applied, or info.reason

Off by default. fastembed and httpx are imported on first use, never by importing this package.
"""

from __future__ import annotations

from coffer_mcp.rerank._factory import make_reranker
from coffer_mcp.rerank._fastembed import FastEmbedReranker
from coffer_mcp.rerank._http import HttpReranker
from coffer_mcp.rerank.base import BudgetedReranker, RerankConfig, Reranker

__all__ = ["BudgetedReranker", "FastEmbedReranker", "HttpReranker", "RerankConfig", "Reranker", "make_reranker"]
