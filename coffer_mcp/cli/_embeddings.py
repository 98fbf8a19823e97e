"""``coffer embeddings show|use``: the store's embedding model, and its explicit change."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from coffer_mcp.cli._output import EXIT_ERROR, emit, progress
from coffer_mcp.cli._service import service
from coffer_mcp.limits import EMBEDDING_PROVIDERS

if TYPE_CHECKING:
    from coffer_mcp.settings import Settings

__all__ = ["add_show", "add_use", "embeddings_show", "embeddings_use"]

USE_DESCRIPTION = (
    "Make MODEL (default: the model the settings name) the store's embedding model: every process of the store "
    "uses it from then on, every document of a vector knowledge base is embedded with it, and the old model's "
    "vectors are removed at the end. Run again after an interruption, it continues."
)


def add_show(p: argparse.ArgumentParser) -> None:
    p.add_argument("--check", action="store_true", help="also make a test embedding")


def add_use(p: argparse.ArgumentParser) -> None:
    providers = [name for name in EMBEDDING_PROVIDERS if name != "none"]  # "none" is no model to use
    p.add_argument("model", nargs="?", help="the model's name, e.g. sentence-transformers/all-MiniLM-L6-v2")
    p.add_argument("--provider", choices=providers, help="default: the configured provider")
    p.add_argument("--model-path", metavar="DIR", help="fastembed: a local folder holding the model")
    p.add_argument("--base-url", metavar="URL", help="openai: the /v1/embeddings server")
    p.add_argument("--api-key-env", metavar="NAME", help="openai: the environment variable holding the key")
    p.add_argument("--dimensions", type=int, metavar="N", help="openai: the vectors' length to ask for")
    p.add_argument("--confirm", action="store_true", help="replace the store's model (documents are embedded again)")


def embeddings_show(args: argparse.Namespace, settings: Settings) -> None:
    with service(settings, args) as coffer:
        status = coffer.embedding_status(check=args.check)
    emit(args, status, _render_embedding)


def _render_embedding(e) -> str:
    doing = {
        "unrecorded": "uses its own (recorded with the first vectors)",
        "same": "uses it",
        "store": "uses it, not the one its settings name",
        "refused": "cannot build it: no vector work here (keyword search works)",
        "off": "does no vector work (embedding provider none)",
    }[e.use]
    lines = [
        f"store model:   {e.store_model or 'none yet'}",
        f"own model:     {e.configured or 'none (provider none)'}",
        f"this process:  {doing}" + (f", {e.dimensions} dims, {e.seconds}s" if e.reachable else ""),
    ]
    lines += [f"error: {e.error}"] if e.error else []
    return "\n".join(lines + ([f"note: {e.note}"] if e.note else []))


def embeddings_use(args: argparse.Namespace, settings: Settings) -> int:
    from coffer_mcp.settings import load_settings

    given = {
        "embedding_provider": args.provider,
        "embedding_model": args.model,
        "embedding_model_path": args.model_path,
        "embedding_base_url": args.base_url,
        "embedding_api_key_env": args.api_key_env,
        "embedding_dimensions": args.dimensions,
    }
    if any(value is not None for value in given.values()):
        named = settings.embedding_model
        settings = load_settings(os.environ, home=args.home, index_backend=args.index_backend, **given)
        if args.model and not args.model_path and args.model != named:  # the configured folder holds another model
            settings = settings.model_copy(update={"embedding_model_path": None})
    with service(settings, args) as coffer:
        change = coffer.use_embedding_model(confirm=args.confirm, progress=progress(args))
    emit(args, change, _render_change)
    if change.warning and not args.json:
        print(f"coffer: warning: {change.warning}", file=sys.stderr)
    return EXIT_ERROR if change.warning else 0


def _render_change(c) -> str:
    was = f" (was {c.previous})" if c.previous and c.previous != c.model else ""
    lines = [f"the store's embedding model: {c.model}, {c.dimensions} dimensions{was}"]
    left = {k.kb: f", {k.remaining} left" if k.remaining else "" for k in c.knowledge_bases}
    lines += [f"  {k.kb}: {k.embedded} embedded{left[k.kb]}" for k in c.knowledge_bases]
    lines += [f"removed the vectors of {model}" for model in c.removed_models]
    return "\n".join(lines)
