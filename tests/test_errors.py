"""Errors and their hints: each surface names tools and arguments in its own words."""

from __future__ import annotations

import argparse
import ast
import inspect
import re
from pathlib import Path

import pytest

from coffer_mcp import Coffer
from coffer_mcp.cli._commands import COMMANDS
from coffer_mcp.cli._parser import build_parser
from coffer_mcp.errors import (
    ARG_WORDS,
    SURFACES,
    TOOL_WORDS,
    CofferError,
    DocumentNotFoundError,
    render_hint,
)
from coffer_mcp.mcp_server._registry import TOOLS
from tests.conftest import REPO

PACKAGE = REPO / "coffer_mcp"
ANY_PLACEHOLDER = re.compile(r"\{(tool|arg):([^{}]*)\}")
# What a hint must not say outside a placeholder: an MCP tool name, an MCP argument with its value,
# or a JSON/Python list (the command line takes words and flags: 'TAG TAG', '--clear').
MCP_WORDS = re.compile(r"coffer__\w+|\b[a-z_]+=(?:true|false)\b|\[\]|\['")


def string_constants(path: Path) -> list[str]:
    """Every string literal of a module, f-string parts included, docstrings (which explain the
    placeholders with made-up names) left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def hint_texts(path: Path) -> list[str]:
    """The literal text of every ``hint=...`` argument and ``*_HINT`` constant of a module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    values = [node.value for node in ast.walk(tree) if isinstance(node, ast.keyword) and node.arg == "hint"]
    values += [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id.upper().endswith("HINT") for t in node.targets)
    ]
    return [c.value for v in values for c in ast.walk(v) if isinstance(c, ast.Constant) and isinstance(c.value, str)]


def test_every_placeholder_in_the_package_has_a_wording_for_every_surface() -> None:
    used = {
        (kind, name): path.relative_to(REPO)
        for path in PACKAGE.rglob("*.py")
        for text in string_constants(path)
        for kind, name in ANY_PLACEHOLDER.findall(text)
    }
    assert len(used) >= 5, "the scan found too few placeholders to be looking in the right place"
    for (kind, name), where in used.items():
        table = TOOL_WORDS if kind == "tool" else ARG_WORDS
        assert name in table, f"{where}: {{{kind}:{name}}} has no wording"
        for surface in SURFACES:
            wording = table[name].get(surface, "")
            assert wording.strip(), f"{where}: {{{kind}:{name}}} has no wording for {surface}"
            assert not ANY_PLACEHOLDER.search(render_hint(f"{{{kind}:{name}}}", surface))


def test_no_hint_names_an_mcp_tool_or_argument_except_through_a_placeholder() -> None:
    # mcp_server/ speaks only to MCP clients, so its hints may use MCP words as they are.
    offenders = [
        f"{path.relative_to(REPO)}: {text!r}"
        for path in PACKAGE.rglob("*.py")
        if "mcp_server" not in path.parts
        for text in hint_texts(path)
        if MCP_WORDS.search(ANY_PLACEHOLDER.sub("", text))
    ]
    assert offenders == []


def test_an_error_hint_reads_in_mcp_words_unless_a_surface_asks_for_its_own(coffer: Coffer, notes: str) -> None:
    with pytest.raises(DocumentNotFoundError) as caught:
        coffer.read_document(notes, "01ARZ3NDEKTSV4RRFFQ69G5FAV")
    error = caught.value
    assert "find them with coffer__search_knowledge or coffer__list_documents." in error.hint
    assert error.to_dict()["hint"] == error.hint
    assert error.hint in str(error)
    assert "find them with coffer kb search or coffer kb documents." in error.hint_for("cli")
    assert "find them with the search box or the document list." in error.hint_for("web")
    assert error.hint_for("mcp") == error.hint


def test_arguments_are_said_as_flags_on_the_command_line() -> None:
    error = CofferError("duplicate", hint="Pass {arg:replace=true}, or {arg:fixed_strings=true}.")
    assert error.hint == "Pass replace=true, or fixed_strings=true."
    assert error.hint_for("cli") == "Pass --replace, or -F (--fixed-strings)."


def test_tags_are_asked_for_as_a_list_over_mcp_and_as_words_and_flags_on_the_command_line() -> None:
    from coffer_mcp.models import check_tags

    with pytest.raises(CofferError) as caught:
        check_tags(["x" * 101])
    assert (
        caught.value.hint
        == "Give up to 100 short words or phrases, as a list, e.g. ['project-x', 'draft']; [] removes them."
    )
    assert caught.value.hint_for("cli") == (
        "Give up to 100 short words or phrases, e.g. coffer kb tag NAME DOC_ID project-x draft (--clear removes them; "
        "coffer kb ingest takes --tag TAG, repeated)."
    )


def _command_line_words() -> tuple[set[str], set[str]]:
    """Every command a user can type after ``coffer`` and every option any command takes."""
    options = {flag for action in build_parser([])._actions for flag in action.option_strings}
    for command in COMMANDS:
        parser = argparse.ArgumentParser()
        command.arguments(parser)
        options |= {flag for action in parser._actions for flag in action.option_strings}
    return {command.name for command in COMMANDS}, options


def test_each_tool_a_hint_names_is_a_real_tool_and_a_real_command() -> None:
    # A hint that sends the reader to a tool or command that does not exist is a dead end.
    tools = {entry.name: entry for entry in TOOLS}
    commands, _ = _command_line_words()
    for name, words in TOOL_WORDS.items():
        assert words["mcp"] == f"coffer__{name}", name
        assert words["mcp"] in tools, name
        for text in (words["cli"], words["web"]):
            for said in re.findall(r"\bcoffer ([a-z-]+(?: [a-z-]+)?)", text):
                assert said in commands or said.split()[0] in commands, f"{name}: 'coffer {said}' is no command"


def test_each_argument_a_hint_names_is_a_real_argument_and_a_real_option() -> None:
    parameters = {p for entry in TOOLS for p in inspect.signature(entry.body).parameters}
    _, options = _command_line_words()
    for name, words in ARG_WORDS.items():
        argument = name.split("=")[0]
        if argument not in ("overwrite", "filters", "tags"):  # said in a sentence over MCP, not by name
            assert argument in parameters or argument in words["mcp"], name
        for flag in re.findall(r"(?<![\w-])--[a-z][a-z-]*", words["cli"] + " " + words["web"]):
            assert flag in options, f"{name}: {flag} is no option of any command"
