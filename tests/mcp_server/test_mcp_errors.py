"""Every tool error has Coffer's shape: JSON ``{code, message, hint}``, whoever refused the call.

Arguments that break a tool's input schema are refused by the SDK before the tool body runs; a
bug in a tool body is caught by the runner. Both must read like Coffer's own errors, so an agent
can correct the call from the error alone. Driven by the published schemas, over a real session.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from mcp import Client
from mcp.types import CallToolResult, Implementation

from coffer_mcp import Coffer, load_settings
from coffer_mcp.mcp_server import TOOL_NAMES, build_server
from coffer_mcp.services.pages import MAX_PAGE_CHARS

pytestmark = pytest.mark.anyio

CLIENT = Implementation(name="error-test", version="1")
HUGE = 2**63


@pytest.fixture
def sources(tmp_path: Path) -> Path:
    folder = tmp_path / "sources"
    folder.mkdir()
    (folder / "note.md").write_text("# Note\n\nsource text", encoding="utf-8")
    return folder


@pytest.fixture
def service(home: Path, sources: Path):
    """A home with one knowledge base 'kb' holding one document, and ``sources`` allowed."""
    with Coffer(load_settings(home=home, allowed_dirs=[str(sources)])) as coffer:
        coffer.create_kb("kb")
        coffer.add_document("kb", "a.md", "# A\n\nsome text")
        yield coffer


def valid_arguments(service: Coffer, sources: Path) -> dict[str, object]:
    """A value each required argument accepts, so that one bad argument is the only fault in a call."""
    doc_id = service.list_documents("kb").documents[0].document_id
    return {
        "kb": "kb",
        "name": "kb",
        "doc_id": doc_id,
        "query": "text",
        "pattern": "text",
        "filename": "b.md",
        "content": "# B\n\nbody",
        "path": str(sources / "note.md"),
        "url": "http://example.invalid/",
        "snapshot_id": "01M8NP4MZTN0XVCZWDXQ46XW1Z",
        "confirm": False,
    }


def bad_values(prop: dict) -> list[object]:
    """Values the property's schema refuses: wrong types, out of range, too long, hostile."""
    options = prop.get("anyOf", [prop])
    kinds = {option.get("type") for option in options}
    values: list[object] = [{"nested": "object"}]
    if "integer" in kinds:
        bounds = next(option for option in options if option.get("type") == "integer")
        # true and "2" were taken for 1 and 2 by the SDK's lax validation
        values += [bounds["minimum"] - 1, bounds["maximum"] + 1, HUGE, -HUGE, "many", 1.5, True, str(bounds["minimum"])]
    if "string" in kinds and "array" not in kinds:
        values += [7, ["a", "list"]]
        string = next(option for option in options if option.get("type") == "string")
        if string.get("minLength"):
            values.append("")
        if string.get("maxLength"):
            values.append("x" * (string["maxLength"] + 1))
    if "boolean" in kinds:
        values += ["maybe", 2, 1, 0, "true", "yes"]  # 1, "true" and "yes" were taken for true
    if "enum" in prop:
        values.append("no-such-choice")
    return values


def assert_coffer_shape(result: CallToolResult) -> dict:
    """The error is JSON with a code, a message and a hint, and nothing of pydantic's report."""
    assert result.is_error
    text = result.content[0].text
    assert "pydantic" not in text.lower(), text
    assert "validation error" not in text.lower(), text
    error = json.loads(text)
    assert set(error) == {"code", "message", "hint"}, text
    assert all(isinstance(error[key], str) and error[key] for key in error), text
    return error


@pytest.mark.parametrize("tool", TOOL_NAMES)
async def test_every_argument_a_schema_refuses_gets_an_invalid_argument_error_naming_it(
    tool: str, service: Coffer, sources: Path
) -> None:
    valid = valid_arguments(service, sources)
    async with Client(build_server(service), client_info=CLIENT) as client:
        schema = next(t.input_schema for t in (await client.list_tools()).tools if t.name == tool)
        required = {name: valid[name] for name in schema.get("required", [])}
        calls = [({k: v for k, v in required.items() if k != name}, name) for name in required]  # one missing
        calls += [
            ({**required, name: bad}, name) for name, prop in schema["properties"].items() for bad in bad_values(prop)
        ]
        for arguments, culprit in calls:
            error = assert_coffer_shape(await client.call_tool(tool, arguments))
            assert error["code"] == "invalid_argument", (arguments, error)
            assert f"'{culprit}'" in error["message"], (arguments, error)
            assert culprit in error["hint"], (arguments, error)


async def test_an_integer_written_with_a_zero_fraction_is_an_integer(service: Coffer) -> None:
    # JSON Schema's "integer" is any number without a fraction: 2.0 is one, as a JSON encoder may write it.
    async with Client(build_server(service), client_info=CLIENT) as client:
        result = await client.call_tool("coffer__search_knowledge", {"kb": "kb", "query": "text", "top_k": 2.0})
    assert not result.is_error, result.content


@pytest.mark.parametrize("tool", TOOL_NAMES)
async def test_an_unknown_argument_is_refused_with_the_accepted_ones(tool: str, service: Coffer, sources: Path) -> None:
    valid = valid_arguments(service, sources)
    async with Client(build_server(service), client_info=CLIENT) as client:
        schema = next(t.input_schema for t in (await client.list_tools()).tools if t.name == tool)
        arguments = {name: valid[name] for name in schema.get("required", [])}
        error = assert_coffer_shape(await client.call_tool(tool, {**arguments, "colour": "blue"}))
    assert error["code"] == "invalid_argument"
    assert "'colour'" in error["message"]
    assert all(name in error["hint"] for name in schema["properties"])


@pytest.mark.parametrize("tool", TOOL_NAMES)
async def test_a_nul_character_in_any_text_argument_is_refused_in_our_shape(
    tool: str, service: Coffer, sources: Path
) -> None:
    """Text reaching the core with a NUL must not crash it (paths raise ValueError in the OS)."""
    valid = valid_arguments(service, sources)
    async with Client(build_server(service), client_info=CLIENT) as client:
        schema = next(t.input_schema for t in (await client.list_tools()).tools if t.name == tool)
        required = {name: valid[name] for name in schema.get("required", [])}
        for name, prop in schema["properties"].items():
            if "string" not in {option.get("type") for option in prop.get("anyOf", [prop])}:
                continue
            base = str(valid.get(name, "text"))
            result = await client.call_tool(tool, {**required, name: base[:3] + "\x00" + base[3:]})
            if result.is_error:
                assert assert_coffer_shape(result)["code"] != "internal_error", (name, result.content[0].text)


@pytest.mark.parametrize(
    ("tool", "arguments", "culprit"),
    [
        ("coffer__list_documents", {"kb": "kb", "offset": HUGE}, "offset"),
        ("coffer__read_document", {"kb": "kb", "around_position": HUGE}, "around_position"),
        ("coffer__read_document", {"kb": "kb", "offset": HUGE}, "offset"),
        ("coffer__ingest_path", {"kb": "kb", "path": "/tmp/a\x00b"}, "path"),
        ("coffer__export_knowledge_base", {"kb": "kb", "path": "/tmp/a\x00b.cofferpack"}, "path"),
    ],
)
async def test_hostile_numbers_and_paths_are_invalid_arguments_with_the_allowed_range(
    tool: str, arguments: dict, culprit: str, service: Coffer, sources: Path
) -> None:
    if tool == "coffer__read_document":
        arguments = {**arguments, "doc_id": valid_arguments(service, sources)["doc_id"]}
    async with Client(build_server(service), client_info=CLIENT) as client:
        error = assert_coffer_shape(await client.call_tool(tool, arguments))
    assert error["code"] == "invalid_argument"
    assert f"'{culprit}'" in error["message"]
    assert "from 0 to" in error["hint"] if culprit != "path" else "without NUL" in error["hint"]


async def test_every_numeric_argument_has_bounds_in_its_schema(service: Coffer) -> None:
    async with Client(build_server(service), client_info=CLIENT) as client:
        tools = (await client.list_tools()).tools
    numeric = [
        (tool.name, name, option)
        for tool in tools
        for name, prop in tool.input_schema["properties"].items()
        for option in prop.get("anyOf", [prop])
        if option.get("type") in ("integer", "number")
    ]
    assert len(numeric) >= 8
    for tool, name, option in numeric:
        assert "minimum" in option, (tool, name)
        assert "maximum" in option, (tool, name)
    read = next(t for t in tools if t.name == "coffer__read_document").input_schema["properties"]
    assert read["limit"]["maximum"] == MAX_PAGE_CHARS


async def test_a_refused_call_is_logged_like_any_other(service: Coffer) -> None:
    async with Client(build_server(service), client_info=CLIENT) as client:
        await client.call_tool("coffer__search_knowledge", {"kb": "kb", "query": "x", "top_k": 1000})
        await client.call_tool("coffer__serch_knowledge", {"kb": "kb", "query": "x"})
    calls = [(c.tool, c.client, c.outcome, c.error_code) for c in service.invocations()]
    assert calls == [
        ("coffer__search_knowledge", "error-test", "error", "invalid_argument"),
        ("coffer__serch_knowledge", "error-test", "error", "unknown_tool"),
    ]


async def test_an_unknown_tool_is_refused_with_the_tools_this_server_offers(service: Coffer) -> None:
    async with Client(build_server(service, read_only=True), client_info=CLIENT) as client:
        error = assert_coffer_shape(await client.call_tool("coffer__add_document", {"kb": "kb"}))
    assert error["code"] == "unknown_tool"
    assert "read-only" in error["message"]
    assert "coffer__search_knowledge" in error["hint"]
    assert "coffer__add_document" not in error["hint"]


async def test_a_failure_nobody_mapped_is_an_internal_error_with_its_traceback_on_the_log(
    service: Coffer, home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The core meets something it does not expect (a document's file replaced by a folder)."""
    doc_id = service.list_documents("kb").documents[0].document_id
    file = home / "knowledge" / "kb" / "docs" / f"{doc_id}.md"
    file.unlink()
    file.mkdir()
    with caplog.at_level(logging.ERROR, logger="coffer_mcp"):
        async with Client(build_server(service), client_info=CLIENT) as client:
            result = await client.call_tool("coffer__read_document", {"kb": "kb", "doc_id": doc_id})
    error = assert_coffer_shape(result)
    assert error["code"] == "internal_error"
    assert "coffer__read_document" in error["message"]
    assert "stderr" in error["hint"]
    assert str(file) not in result.content[0].text  # the details stay in the server's log
    crash = next(r for r in caplog.records if "failed unexpectedly" in r.getMessage())
    assert crash.exc_info is not None
    assert isinstance(crash.exc_info[1], OSError)
    assert [(c.outcome, c.error_code) for c in service.invocations()] == [("crash", "internal_error")]


async def test_a_refused_export_says_what_the_tool_can_do_and_that_it_writes(
    service: Coffer, sources: Path, tmp_path: Path
) -> None:
    taken = sources / "kb.cofferpack"
    taken.write_bytes(b"the user's own file")

    async def export(client: Client, path: Path) -> dict:
        return assert_coffer_shape(
            await client.call_tool("coffer__export_knowledge_base", {"kb": "kb", "path": str(path)})
        )

    async with Client(build_server(service), client_info=CLIENT) as client:
        existing, folder, outside = [await export(client, path) for path in (taken, sources, tmp_path / "k.cofferpack")]
    assert (existing["code"], existing["message"]) == ("invalid_argument", f"{taken} already exists.")
    assert "pass overwrite" not in existing["hint"]  # the tool has no such argument
    assert "Pick another file name" in existing["hint"]
    assert "never overwrites" in existing["hint"]
    assert (folder["code"], folder["message"]) == ("invalid_argument", f"{sources} is a folder.")
    assert str(sources / "kb.cofferpack") in folder["hint"]
    assert outside["code"] == "path_not_allowed"
    assert outside["hint"].endswith("Add a folder to allowed_dirs to write to it.")
    assert taken.read_bytes() == b"the user's own file"


async def test_an_export_with_no_folder_allowed_says_writing_is_switched_off(coffer: Coffer, tmp_path: Path) -> None:
    coffer.create_kb("kb")
    async with Client(build_server(coffer), client_info=CLIENT) as client:
        result = await client.call_tool("coffer__export_knowledge_base", {"kb": "kb", "path": str(tmp_path / "k.pack")})
    error = assert_coffer_shape(result)
    assert (error["code"], error["message"]) == (
        "path_not_allowed",
        "Writing paths is switched off: no folder is allowed.",
    )
