"""Run the official MCP conformance suite's generic server scenarios against ``coffer serve --http``.

``python -m scripts.conformance`` installs Node 22 and ``@modelcontextprotocol/conformance`` with
npm into a cache folder (once; ``COFFER_CONFORMANCE_CACHE``, default
``~/.cache/coffer-conformance``), starts ``coffer serve --http`` on a free loopback port over a
fresh ``COFFER_HOME``, runs each generic scenario and stops the server. ``--url`` tests a server
that is already running instead; ``--all`` also runs the scenarios that need the suite's own
fixture tools and prompts (``test_simple_text``…), for information only.

Exit status: 0 every generic scenario passed, 1 one failed, 2 the suite could not be set up
(no npm, no network): CI treats 2 as a skip with a warning.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

NODE_VERSION = "22.23.3"  # the suite needs Node 22; npm's ``node`` package brings it
SUITE_VERSION = "0.1.16"
# The scenarios any MCP server can pass: the others call the suite's fixture tools and prompts.
GENERIC = (
    "server-initialize",
    "ping",
    "logging-set-level",
    "completion-complete",
    "tools-list",
    "resources-list",
    "prompts-list",
    "server-sse-multiple-streams",
    "dns-rebinding-protection",
)
SCENARIO_TIMEOUT = 300  # seconds; a scenario takes about one
SERVER_START_TIMEOUT = 120
SETUP_FAILED = 2


class SetupError(Exception):
    """The suite or the server could not be made ready."""


def cache_dir() -> Path:
    if configured := os.environ.get("COFFER_CONFORMANCE_CACHE"):
        return Path(configured)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "coffer-conformance"


def install(cache: Path) -> tuple[Path, Path]:
    """Node 22 and the suite under ``cache`` (installed when missing or another version): (node, suite script)."""
    manifest = {
        "private": True,
        "dependencies": {"node": NODE_VERSION, "@modelcontextprotocol/conformance": SUITE_VERSION},
        # npm 11 runs install scripts of approved packages only; ``node``'s fetches the binary.
        "allowScripts": {"node": True},
    }
    node = cache / "node_modules" / ".bin" / ("node.cmd" if os.name == "nt" else "node")
    suite = cache / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
    wanted = json.dumps(manifest, indent=2) + "\n"
    package = cache / "package.json"
    current = package.read_text(encoding="utf-8") if package.exists() else ""
    if current != wanted or not node.exists() or not suite.exists():
        npm = shutil.which("npm")
        if npm is None:
            raise SetupError("npm is not installed")
        cache.mkdir(parents=True, exist_ok=True)
        package.write_text(wanted, encoding="utf-8")
        print(f"installing node@{NODE_VERSION} and the conformance suite {SUITE_VERSION} into {cache}", flush=True)
        done = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=cache,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        if done.returncode != 0:
            package.unlink(missing_ok=True)  # try again next time
            raise SetupError(f"npm install failed: {done.stderr.strip()[-2000:]}")
    version = subprocess.run([node, "--version"], capture_output=True, text=True, check=False).stdout.strip()
    if not version.startswith("v22."):
        raise SetupError(f"{node} is {version or 'not runnable'}, not Node 22 (were npm install scripts blocked?)")
    return node, suite


@contextmanager
def coffer_http(log: Path) -> Iterator[str]:
    """``coffer serve --http`` on a free loopback port over an empty home; yields its MCP URL."""
    with tempfile.TemporaryDirectory(prefix="coffer-conformance-") as home:
        env = {**os.environ, "COFFER_HOME": home, "COFFER_EMBEDDING_PROVIDER": "none", "COFFER_HTTP_TOKEN": ""}
        command = [sys.executable, "-m", "coffer_mcp", "serve", "--http", "--host", "127.0.0.1", "--port", "0"]
        with log.open("w", encoding="utf-8") as stderr:
            server = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
            try:
                yield _wait_for_url(server, log)
            finally:
                server.terminate()
                try:
                    server.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    server.kill()
                    server.wait()


def _wait_for_url(server: subprocess.Popen[bytes], log: Path) -> str:
    deadline = time.monotonic() + SERVER_START_TIMEOUT
    while time.monotonic() < deadline:
        found = re.search(r"MCP over streamable HTTP at (http://\S+/mcp)", log.read_text(encoding="utf-8"))
        if found:
            return found.group(1)
        if server.poll() is not None:
            raise SetupError(f"coffer serve --http exited: {log.read_text(encoding='utf-8')[-2000:]}")
        time.sleep(0.2)
    raise SetupError(f"coffer serve --http did not start within {SERVER_START_TIMEOUT} s")


def run_scenario(node: Path, suite: Path, url: str, scenario: str, results: Path, *, details: bool = True) -> bool:
    command = [node, suite, "server", "--url", url, "--scenario", scenario, "-o", results]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=SCENARIO_TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
        print(f"FAIL {scenario} (no answer within {SCENARIO_TIMEOUT} s)", flush=True)
        return False
    passed = done.returncode == 0
    print(f"{'pass' if passed else 'FAIL'} {scenario}", flush=True)
    if not passed and details:
        print(_indent(done.stdout[-4000:] + done.stderr[-2000:]), flush=True)
    return passed


def all_scenarios(node: Path, suite: Path) -> list[str]:
    listed = subprocess.run([node, suite, "list", "--server"], capture_output=True, text=True, check=True).stdout
    return re.findall(r"^\s+- ([\w-]+)", listed, flags=re.MULTILINE)


def _indent(text: str) -> str:
    return "\n".join(f"    {line}" for line in text.strip().splitlines())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.conformance", description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="test this running server instead of starting coffer serve --http")
    parser.add_argument("--all", action="store_true", help="also run the fixture scenarios (informational)")
    args = parser.parse_args(argv)
    cache = cache_dir()
    results = cache / "results" / time.strftime("%Y%m%dT%H%M%S")
    results.mkdir(parents=True, exist_ok=True)
    try:
        node, suite = install(cache)
        with _server(args.url, results / "coffer-serve.log") as url:
            print(f"conformance suite {SUITE_VERSION} against {url}", flush=True)
            failed = [s for s in GENERIC if not run_scenario(node, suite, url, s, results)]
            if args.all:
                print("scenarios that need the suite's fixture tools (informational):", flush=True)
                for scenario in all_scenarios(node, suite):
                    if scenario not in GENERIC:
                        run_scenario(node, suite, url, scenario, results, details=False)
    except SetupError as exc:
        print(f"conformance: cannot run the suite: {exc}", file=sys.stderr)
        return SETUP_FAILED
    print(f"{len(GENERIC) - len(failed)}/{len(GENERIC)} generic server scenarios passed; details in {results}")
    return 1 if failed else 0


@contextmanager
def _server(url: str | None, log: Path) -> Iterator[str]:
    if url:
        yield url
    else:
        with coffer_http(log) as started:
            yield started


if __name__ == "__main__":
    sys.exit(main())
