"""server.json, the MCP registry's entry: valid against the registry's schema, and naming what we publish."""

from __future__ import annotations

import hashlib
import json
import re

import pytest
from jsonschema import Draft7Validator

from coffer_mcp import __version__
from tests.conftest import REPO

SCHEMA = REPO / "schemas" / "server.schema.json"
# https://static.modelcontextprotocol.io/schemas/2025-12-11/server.schema.json (schemas/README.md)
SCHEMA_SHA256 = "3fba09590c99f61735d234822279f4223fab9e300c0a81e81c91ab62a4114de0"


@pytest.fixture
def server() -> dict:
    return json.loads((REPO / "server.json").read_text(encoding="utf-8"))


def test_the_kept_schema_is_the_registrys_published_file_that_server_json_names(server: dict) -> None:
    assert hashlib.sha256(SCHEMA.read_bytes()).hexdigest() == SCHEMA_SHA256
    assert json.loads(SCHEMA.read_text(encoding="utf-8"))["$id"] == server["$schema"]


def test_server_json_is_valid_against_the_registrys_schema(server: dict) -> None:
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    validator = Draft7Validator(schema, format_checker=Draft7Validator.FORMAT_CHECKER)
    problems = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(server)]
    assert problems == []


def test_every_version_in_server_json_is_the_packages_version(server: dict) -> None:
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    project = dict(re.findall(r'^(name|version) = "([^"]+)"$', pyproject.split("[project]")[1], flags=re.MULTILINE))
    assert server["version"] == project["version"] == __version__
    for package in server["packages"]:
        assert package["version"] == __version__
        if package["registryType"] == "pypi":
            assert package["identifier"] == project["name"]


def test_the_bundle_entry_points_at_this_versions_release_asset(server: dict) -> None:
    (bundle,) = (p for p in server["packages"] if p["registryType"] == "mcpb")
    assert bundle["identifier"].endswith(f"/releases/download/v{__version__}/coffer-{__version__}.mcpb")
    assert re.fullmatch(r"[0-9a-f]{64}", bundle["fileSha256"])
    assert bundle["transport"] == {"type": "stdio"}
