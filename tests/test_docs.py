"""The documentation stays true: set-up commands, settings, commands and tools are all documented."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from coffer_mcp.cli import _KB_COMMANDS
from coffer_mcp.mcp_server import TOOL_NAMES
from coffer_mcp.settings import ENV_VARS

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")


def setup_commands() -> list[str]:
    section = README.split("## Set up", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.+?)\n```", section, flags=re.DOTALL)


def test_the_readme_has_exactly_two_set_up_commands_and_ci_runs_the_test_one() -> None:
    run, test = setup_commands()
    assert "pip install -e ." in run
    assert run.endswith("coffer serve")
    assert "pytest" in test
    assert "[test]" in test
    # A bare pip install fails on PEP 668 systems (Debian, Ubuntu, Homebrew): both use a venv.
    assert run.startswith("python3 -m venv .venv")
    assert test.startswith("python3 -m venv .venv")
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert test in ci.splitlines()


@pytest.mark.parametrize("variable", sorted(ENV_VARS))
def test_every_environment_variable_is_documented(variable: str) -> None:
    assert variable in README
    assert variable in (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    server = json.loads((REPO / "server.json").read_text(encoding="utf-8"))
    for package in server["packages"]:  # the bundle (mcpb) sets them itself from what the user chose
        if package["registryType"] == "pypi":
            assert variable in {v["name"] for v in package["environmentVariables"]}


@pytest.mark.parametrize("command", [name for name, _, _ in _KB_COMMANDS])
def test_every_cli_command_is_documented(command: str) -> None:
    assert f"coffer kb {command}" in (REPO / "docs" / "cli.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("tool", TOOL_NAMES)
def test_every_tool_is_documented(tool: str) -> None:
    assert f"`{tool}" in README
    assert f"`{tool}`" in (REPO / "docs" / "mcp.md").read_text(encoding="utf-8")


def test_the_tools_docs_mcp_md_names_as_open_world_are_those_annotated_so() -> None:
    from coffer_mcp.mcp_server._registry import TOOLS

    text = (REPO / "docs" / "mcp.md").read_text(encoding="utf-8")
    paragraph = next(part for part in text.split("\n\n") if "openWorldHint" in part)
    named = set(re.findall(r"coffer__[a-z_]+", paragraph))
    assert named == {entry.name for entry in TOOLS if entry.annotations.open_world_hint}
    assert all(entry.annotations.open_world_hint is not None for entry in TOOLS)


def test_server_json_describes_the_pypi_package_on_stdio_and_streamable_http() -> None:
    server = json.loads((REPO / "server.json").read_text(encoding="utf-8"))
    from coffer_mcp import __version__

    stdio, http = (p for p in server["packages"] if p["registryType"] == "pypi")
    assert (stdio["registryType"], stdio["identifier"], stdio["transport"]) == ("pypi", "coffer-mcp", {"type": "stdio"})
    assert (http["transport"]["type"], http["transport"]["url"]) == ("streamable-http", "http://127.0.0.1:8765/mcp")
    assert "--http" in {a["name"] for a in http["packageArguments"]}
    assert server["version"] == stdio["version"] == http["version"] == __version__
    assert len(server["description"]) <= 100
    assert f"mcp-name: {server['name']}" in README


def test_every_docs_link_in_the_readme_exists() -> None:
    for link in re.findall(r"\]\((docs/[^)]+)\)", README):
        path, _, anchor = link.partition("#")
        assert (REPO / path).exists(), link
        if anchor:
            headings = re.findall(r"^#+ (.+)$", (REPO / path).read_text(encoding="utf-8"), flags=re.MULTILINE)
            slugs = {re.sub(r"[^\w\- ]", "", h.lower()).strip().replace(" ", "-") for h in headings}
            assert anchor in slugs, link
