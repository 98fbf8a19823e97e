"""The Claude Desktop extension (``scripts/build_mcpb.py``): unpacked and started exactly as a host does."""

from __future__ import annotations

import json
import os
import re
import zipfile
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.types import Implementation

from coffer_mcp import __version__
from coffer_mcp.settings import ENV_VARS
from scripts import build_mcpb
from tests.conftest import installed_script
from tests.packaging.conftest import Dist

CLIENT = Implementation(name="claude-desktop-test", version="1")
_USER_CONFIG = re.compile(r"^\$\{user_config\.[^}]+\}$")


def host_config(manifest: dict[str, Any], folder: Path, chosen: dict[str, Any]) -> dict[str, Any]:
    """``mcp_config`` as a host fills it in: mcpb's getMcpConfigForManifest (src/shared/config.ts), in Python.

    Defaults first, then what the user chose; ``${__dirname}`` is the unpacked bundle, ``${HOME}``
    the home folder; a ``multiple`` value standing alone in ``args`` becomes one argument per item.
    """
    values = {key: option["default"] for key, option in manifest["user_config"].items() if "default" in option}
    values |= chosen
    variables: dict[str, str | list[str]] = {"__dirname": str(folder), "HOME": str(Path.home()), "/": os.sep}
    for key, value in values.items():
        text = value if isinstance(value, list) else ("true" if value is True else "false" if value is False else value)
        variables[f"user_config.{key}"] = [str(v) for v in text] if isinstance(text, list) else str(text)

    def fill(text: str) -> str:
        for name, value in variables.items():
            if isinstance(value, str):
                text = text.replace(f"${{{name}}}", value)
        return text

    def fill_args(args: list[str]) -> list[str]:
        out: list[str] = []
        for arg in args:
            value = variables.get(arg[2:-1]) if _USER_CONFIG.match(arg) else None
            out.extend(value if isinstance(value, list) else [fill(arg)])
        return out

    config = manifest["server"]["mcp_config"]
    return {
        "command": config["command"],
        "args": fill_args(config["args"]),
        "env": {name: fill(value) for name, value in config["env"].items()},
    }


@pytest.fixture(scope="session")
def bundle(dist: Dist, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_mcpb.build_bundle(tmp_path_factory.mktemp("mcpb"), dist.wheel)


def test_the_bundle_is_a_zip_with_its_manifest_the_wheel_and_the_environment_uv_makes(bundle: Path) -> None:
    names = set(zipfile.ZipFile(bundle).namelist())
    wheel = f"wheels/coffer_mcp-{__version__}-py3-none-any.whl"
    assert names == {"manifest.json", "pyproject.toml", "server/main.py", wheel}
    manifest = json.loads(zipfile.ZipFile(bundle).read("manifest.json"))
    assert (manifest["manifest_version"], manifest["server"]["type"]) == ("0.4", "uv")
    assert manifest["version"] == __version__
    assert manifest["server"]["entry_point"] in names


def test_every_choice_a_user_makes_reaches_a_setting_coffer_reads() -> None:
    manifest = build_mcpb.manifest()
    config = manifest["server"]["mcp_config"]
    used = " ".join([*config["args"], *config["env"].values()])
    for key, option in manifest["user_config"].items():
        assert f"${{user_config.{key}}}" in used, key
        assert "default" in option, f"{key}: unset, the host would pass the literal ${{user_config.{key}}}"
    key_env = config["env"]["COFFER_EMBEDDING_API_KEY_ENV"]
    assert set(config["env"]) <= set(ENV_VARS) | {key_env}


@pytest.mark.anyio
async def test_claude_desktop_starts_the_unpacked_bundle_and_its_tools_work(bundle: Path, tmp_path: Path) -> None:
    uv = installed_script("uv")
    if uv is None:
        pytest.skip("uv is not installed (it comes with the test extra)")
    folder = tmp_path / "Claude Extensions" / "coffer"  # a path with a space, as on macOS
    zipfile.ZipFile(bundle).extractall(folder)
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    sources = tmp_path / "Documents"
    sources.mkdir()
    (sources / "lantern.md").write_text("# Lantern\n\nA lantern lights the harbour.", encoding="utf-8")
    chosen = {"home": str(tmp_path / "coffer home"), "allowed_dirs": [str(sources)], "embedding_provider": "none"}
    config = host_config(manifest, folder, chosen)
    assert config["command"] == "uv"  # the host's own uv: here the one the test extra installed
    # A host passes its own environment (certificates, proxies) with the manifest's on top; not
    # this test run's virtual environment or Coffer settings.
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("COFFER_", "VIRTUAL_ENV", "PYTHON"))}
    env = inherited | {"PATH": os.pathsep.join([str(Path(uv).parent), os.environ.get("PATH", "")])} | config["env"]
    params = StdioServerParameters(command=uv, args=config["args"], env=env, cwd=tmp_path)
    with anyio.fail_after(600):  # the first start installs Coffer's requirements (from uv's cache once warm)
        async with Client(params, client_info=CLIENT) as client:
            await client.call_tool("coffer__create_knowledge_base", {"name": "harbour"})
            ingested = await client.call_tool(
                "coffer__ingest_path", {"kb": "harbour", "path": str(sources / "lantern.md")}
            )
            found = await client.call_tool("coffer__search_knowledge", {"kb": "harbour", "query": "lantern"})
    assert not ingested.is_error, ingested.content[0].text
    assert [p["title"] for p in found.structured_content["passages"]] == ["Lantern"]
    assert (tmp_path / "coffer home" / "knowledge" / "harbour").is_dir()


def test_the_official_mcpb_cli_validates_the_manifest_and_reads_the_bundle(bundle: Path) -> None:
    try:
        cli = build_mcpb.mcpb_cli()
    except (build_mcpb.SetupError, OSError) as exc:
        pytest.skip(f"the official mcpb CLI could not be installed: {exc}")
    build_mcpb.check(bundle, cli)  # raises SystemExit with mcpb's output when it refuses
