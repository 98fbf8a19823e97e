"""Build ``coffer-<version>.mcpb``, the Claude Desktop extension: one file, installed with a double click.

``python -m scripts.build_mcpb`` (the test extra brings ``build``) builds Coffer's wheel, stages a
bundle beside it and zips it into ``dist/``; ``--check`` also runs the official ``@anthropic-ai/mcpb``
CLI on it (``mcpb validate``, ``mcpb info``), installed with npm into a cache folder
(``COFFER_MCPB_CACHE``, default ``~/.cache/coffer-mcpb``). Exit status 2: that CLI could not be
installed (no npm, no network).

The bundle is of server type ``uv`` (manifest 0.4, the MCP Bundle specification's runtime for Python
with native dependencies): it carries Coffer's pure-Python wheel and a ``pyproject.toml`` naming it,
and the host's uv installs it with the wheels of the user's own platform and Python. The other
types cannot carry Coffer: ``python`` bundles ship their packages in ``server/lib`` for one platform
(onnxruntime, usearch and sqlite-vec are native) and run on whatever ``python`` the user has
(macOS's is 3.9); ``binary`` would freeze a 500 MB interpreter per platform. The manifest's command
is ``uv run --project ${__dirname} coffer serve``, which a host without the uv runtime can run too
when uv is on its PATH. What the user chooses (``user_config``) reaches Coffer as the environment
variables and flags ``coffer serve`` reads (docs/install.md, "Claude Desktop").
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from coffer_mcp import __version__

REPO = Path(__file__).resolve().parents[1]
MCPB_VERSION = "2.1.2"  # @anthropic-ai/mcpb, the official CLI (validate, pack, info)
MANIFEST_VERSION = "0.4"  # the first with server type "uv"
ZIP_TIME = (2026, 1, 1, 0, 0, 0)  # every member's timestamp: the same wheel gives the same bundle

__all__ = ["MANIFEST_VERSION", "build_bundle", "manifest", "mcpb_cli", "stage"]


class SetupError(RuntimeError):
    """The official mcpb CLI could not be installed or run (exit status 2)."""


def manifest(version: str = __version__) -> dict[str, Any]:
    """The bundle's ``manifest.json``."""
    return {
        "manifest_version": MANIFEST_VERSION,
        "name": "coffer",
        "display_name": "Coffer",
        "version": version,
        "description": "Local-first knowledge base: any document becomes Markdown on disk; search, grep and curate it.",
        "long_description": (
            "Coffer turns documents of any format (PDF, Word, PowerPoint, Excel, HTML, EPUB, Markdown, code...) "
            "into Markdown files in a folder of yours, indexes them in SQLite, and lets Claude search, grep, "
            "read, add, edit and delete them. Nothing leaves your machine unless you choose an embedding "
            "service. The first start installs Coffer's Python packages, which takes a minute."
        ),
        "author": {"name": "Coffer MCP contributors"},
        "license": "Apache-2.0",
        "keywords": ["knowledge base", "documents", "search", "markdown", "rag"],
        "server": {
            "type": "uv",
            "entry_point": "server/main.py",
            "mcp_config": {
                "command": "uv",
                "args": [
                    "run",
                    "--project",
                    "${__dirname}",
                    "--quiet",
                    "coffer",
                    "serve",
                    "--allowed-dirs",
                    "${user_config.allowed_dirs}",
                ],
                "env": {
                    "COFFER_HOME": "${user_config.home}",
                    "COFFER_EMBEDDING_PROVIDER": "${user_config.embedding_provider}",
                    "COFFER_EMBEDDING_MODEL": "${user_config.embedding_model}",
                    "COFFER_EMBEDDING_BASE_URL": "${user_config.embedding_base_url}",
                    # The key itself travels in a variable of its own, named by api_key_env.
                    "COFFER_EMBEDDING_API_KEY_ENV": "COFFER_EMBEDDING_API_KEY",
                    "COFFER_EMBEDDING_API_KEY": "${user_config.embedding_api_key}",
                },
            },
        },
        "tools_generated": True,
        "prompts_generated": True,
        "compatibility": {"platforms": ["darwin", "win32", "linux"], "runtimes": {"python": ">=3.10"}},
        # Every option has a default: a value left unset would reach Coffer as the literal "${user_config.x}".
        "user_config": {
            "home": {
                "type": "directory",
                "title": "Coffer folder",
                "description": "Where the knowledge bases (Markdown files) and the index live.",
                "default": "${HOME}/.coffer",
                "required": True,
            },
            "allowed_dirs": {
                "type": "directory",
                "title": "Folders Coffer may ingest from",
                "description": "Claude may add files from these folders (and their subfolders) to a knowledge base. "
                "None: only documents Claude writes or pastes.",
                "multiple": True,
                "default": [],
            },
            "embedding_provider": {
                "type": "string",
                "title": "Embedding provider",
                "description": "fastembed: a local model, downloaded once (about 70 MB); openai: any OpenAI-compatible "
                "/v1/embeddings server (OpenAI, Ollama, LM Studio...); none: keyword search only.",
                "default": "fastembed",
            },
            "embedding_model": {
                "type": "string",
                "title": "Embedding model",
                "description": "Empty: the provider's default (BAAI/bge-small-en-v1.5, or text-embedding-3-small).",
                "default": "",
            },
            "embedding_base_url": {
                "type": "string",
                "title": "Embedding server URL (openai)",
                "description": "Empty: OpenAI. E.g. http://localhost:11434/v1 for Ollama.",
                "default": "",
            },
            "embedding_api_key": {
                "type": "string",
                "title": "Embedding API key (openai)",
                "description": "The key of the embedding server, if it needs one.",
                "sensitive": True,
                "default": "",
            },
        },
    }


def bundle_pyproject(wheel: str, version: str = __version__) -> str:
    """The bundle's ``pyproject.toml``: one dependency, Coffer, from the wheel inside the bundle."""
    return f"""\
# The environment of the Coffer extension, made by uv (docs/install.md, "Claude Desktop").
[project]
name = "coffer-extension"
version = "{version}"
# Below 3.14: onnxruntime (local embeddings, Word and PowerPoint) has no wheel for Python 3.14 on
# Intel Macs; uv picks (or fetches) an interpreter in this range.
requires-python = ">=3.10,<3.14"
dependencies = ["coffer-mcp=={version}"]

[tool.uv]
package = false  # nothing to build here: coffer-mcp comes from the wheel below

[tool.uv.sources]
coffer-mcp = {{ path = "wheels/{wheel}" }}
"""


def build_wheel(out: Path) -> Path:
    """Coffer's wheel, built offline from this checkout (the build backend must be installed)."""
    command = [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), str(REPO)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"building the wheel failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return next(out.glob(f"coffer_mcp-{__version__}-py3-none-any.whl"))


ENTRY_POINT = '''\
"""The Coffer extension's server: ``coffer serve`` with these arguments, in the environment uv made."""

import sys

from coffer_mcp.cli import main

sys.exit(main(["serve", *sys.argv[1:]]))
'''


def stage(wheel: Path, folder: Path) -> Path:
    """Lay the bundle's files out in ``folder``: manifest.json, pyproject.toml, server/main.py, wheels/<wheel>."""
    (folder / "wheels").mkdir(parents=True)
    (folder / "server").mkdir()
    (folder / "server" / "main.py").write_text(ENTRY_POINT, encoding="utf-8")
    shutil.copy2(wheel, folder / "wheels" / wheel.name)
    (folder / "pyproject.toml").write_text(bundle_pyproject(wheel.name), encoding="utf-8")
    text = json.dumps(manifest(), indent=2, ensure_ascii=False) + "\n"
    (folder / "manifest.json").write_text(text, encoding="utf-8")
    return folder


def pack(folder: Path, target: Path) -> Path:
    """Zip ``folder`` into ``target`` (a .mcpb is a zip with manifest.json at its root)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            member = zipfile.ZipInfo(path.relative_to(folder).as_posix(), date_time=ZIP_TIME)
            member.external_attr = 0o644 << 16
            archive.writestr(member, path.read_bytes(), compress_type=zipfile.ZIP_DEFLATED)
    return target


def build_bundle(out: Path, wheel: Path | None = None) -> Path:
    """Build ``out/coffer-<version>.mcpb`` (from ``wheel``, else from a wheel built now)."""
    with tempfile.TemporaryDirectory(prefix="coffer-mcpb-") as scratch:
        work = Path(scratch)
        staged = stage(wheel or build_wheel(work / "wheel"), work / "bundle")
        return pack(staged, out / f"coffer-{__version__}.mcpb")


RELEASES = "https://github.com/coffer-mcp/coffer-mcp/releases/download"


def record(bundle: Path, server_json: Path = REPO / "server.json") -> None:
    """Point server.json's mcpb package at this release's bundle: its download URL and SHA-256."""
    server = json.loads(server_json.read_text(encoding="utf-8"))
    entry = next(p for p in server["packages"] if p["registryType"] == "mcpb")
    entry["identifier"] = f"{RELEASES}/v{__version__}/{bundle.name}"
    entry["version"] = __version__
    entry["fileSha256"] = hashlib.sha256(bundle.read_bytes()).hexdigest()
    server_json.write_text(json.dumps(server, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def cache_dir() -> Path:
    if os.environ.get("COFFER_MCPB_CACHE"):
        return Path(os.environ["COFFER_MCPB_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "coffer-mcpb"


def mcpb_cli(cache: Path | None = None) -> list[str]:
    """The command that runs the official mcpb CLI, installed into ``cache`` when missing."""
    cache = cache or cache_dir()
    script = cache / "node_modules" / "@anthropic-ai" / "mcpb" / "dist" / "cli" / "cli.js"
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        raise SetupError("node and npm are not installed")
    package = cache / "package.json"
    wanted = {"private": True, "dependencies": {"@anthropic-ai/mcpb": MCPB_VERSION}}
    if not script.is_file() or json.loads(package.read_text(encoding="utf-8")) != wanted:
        cache.mkdir(parents=True, exist_ok=True)
        package.write_text(json.dumps(wanted), encoding="utf-8")
        done = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=cache,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        if done.returncode != 0 or not script.is_file():
            raise SetupError(f"npm install @anthropic-ai/mcpb@{MCPB_VERSION} failed: {done.stderr.strip()[-2000:]}")
    return [node, str(script)]


def check(bundle: Path, cli: list[str]) -> None:
    """Run ``mcpb validate`` on the bundle's manifest and ``mcpb info`` on the bundle itself."""
    with tempfile.TemporaryDirectory(prefix="coffer-mcpb-check-") as scratch:
        with zipfile.ZipFile(bundle) as archive:
            archive.extractall(scratch)
        for args in (["validate", str(Path(scratch) / "manifest.json")], ["info", str(bundle)]):
            done = subprocess.run([*cli, *args], capture_output=True, text=True, timeout=120, check=False)
            print(done.stdout.strip())
            if done.returncode != 0:
                raise SystemExit(f"mcpb {args[0]} failed:\n{done.stdout}{done.stderr}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.build_mcpb", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "dist", help="folder for the .mcpb (default dist/)")
    parser.add_argument("--wheel", type=Path, help="bundle this wheel instead of building one")
    parser.add_argument("--check", action="store_true", help="also run the official mcpb validate and info on it")
    parser.add_argument("--record", action="store_true", help="write the bundle's URL and SHA-256 into server.json")
    args = parser.parse_args(argv)
    bundle = build_bundle(args.out, args.wheel)
    print(bundle)
    if args.record:
        record(bundle)
    if args.check:
        try:
            cli = mcpb_cli()
        except (SetupError, OSError, subprocess.SubprocessError) as exc:
            print(f"the official mcpb CLI could not be installed: {exc}", file=sys.stderr)
            return 2
        check(bundle, cli)
    return 0


if __name__ == "__main__":
    sys.exit(main())
