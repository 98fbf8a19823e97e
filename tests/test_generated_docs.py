"""The lists in the docs come from the code: tools, error codes, audit events and settings.

``python -m scripts.gen_docs`` writes them; these tests fail, naming the region, when the
checked-in docs drift from the code, and keep the code's declarations of codes and events complete.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
from pathlib import Path

import pytest

from coffer_mcp.audit import AuditEvent
from coffer_mcp.errors import ERROR_CODES, REJECTION_REASONS, VIEWER_ERROR_CODES
from coffer_mcp.mcp_server import TOOL_NAMES
from coffer_mcp.settings import Settings
from coffer_mcp.store.kbconfig import KbConfig
from scripts import gen_docs

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "coffer_mcp"
BASE_CODE = "coffer_error"  # CofferError's own: every error raised carries a more specific one


def test_the_generated_lists_in_the_docs_match_the_code() -> None:
    drifts = gen_docs.run(check=True)
    assert not drifts, "\n".join(map(str, drifts)) + "\nRun: python -m scripts.gen_docs"


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """The README, docs/ and server.json copied, to be changed without touching the checkout."""
    shutil.copy(REPO / "README.md", tmp_path / "README.md")
    shutil.copy(REPO / "server.json", tmp_path / "server.json")
    shutil.copytree(REPO / "docs", tmp_path / "docs")
    return tmp_path


def test_the_check_names_a_region_edited_by_hand_and_the_generator_puts_it_back(copy: Path) -> None:
    mcp = copy / "docs" / "mcp.md"
    original = mcp.read_text(encoding="utf-8")
    mcp.write_text(original.replace("| `unknown_snapshot` |", "| `unknown_snapshots` |"), encoding="utf-8")
    assert [str(d) for d in gen_docs.run(check=True, root=copy)] == ["docs/mcp.md: region 'error-codes' is out of date"]
    gen_docs.run(check=False, root=copy)
    assert mcp.read_text(encoding="utf-8") == original
    assert gen_docs.run(check=True, root=copy) == []


def test_the_check_names_a_region_whose_markers_were_deleted(copy: Path) -> None:
    config = copy / "docs" / "configuration.md"
    text = config.read_text(encoding="utf-8").replace("<!-- generated: settings -->\n", "")
    config.write_text(text, encoding="utf-8")
    assert [str(d) for d in gen_docs.run(check=True, root=copy)] == [
        "docs: region 'settings' is missing: no document has it"
    ]


def reference_row(name: str) -> list[str]:
    """The cells of a setting's row in docs/configuration.md's reference."""
    text = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    line = next(line for line in text.splitlines() if line.startswith(f"| `{name}` |"))
    return [cell.strip() for cell in line.strip("|").split(" | ")]


def test_the_reference_gives_each_setting_its_declared_default_range_and_description() -> None:
    assert reference_row("chunk_size") == [
        "`chunk_size`",
        "`COFFER_CHUNK_SIZE`",
        "`1024`",
        "64–8,192",
        Settings.model_fields["chunk_size"].description,
    ]
    assert reference_row("grep_timeout")[2:4] == ["`5`", "> 0, ≤ 120"]
    assert reference_row("embedding.provider")[2:4] == ["`fastembed`", "`fastembed`, `openai` or `none`"]
    server = json.loads((REPO / "server.json").read_text(encoding="utf-8"))
    chunk = next(v for v in server["packages"][0]["environmentVariables"] if v["name"] == "COFFER_CHUNK_SIZE")
    assert (chunk["default"], chunk["format"]) == ("1024", "number")


def test_a_knowledge_base_without_chunk_settings_is_documented_with_the_global_defaults() -> None:
    text = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    kb_table = text.split("<!-- generated: kb-settings -->", 1)[1]
    assert "| `chunk_size` | `1024` | 64–8,192 |" in kb_table
    assert "| `chunk_overlap` | `128` |" in kb_table
    assert "chunk_size: 1024\nchunk_overlap: 128\n" in text.split("<!-- generated: kb-yaml -->", 1)[1]


@pytest.mark.parametrize(("change", "value"), [("default", 2048), ("description", "Characters per chunk.")])
def test_the_check_fails_when_a_settings_default_or_description_changes_until_the_docs_are_regenerated(
    copy: Path, monkeypatch: pytest.MonkeyPatch, change: str, value: object
) -> None:
    monkeypatch.setattr(Settings.model_fields["chunk_size"], change, value)  # as an edit of settings/_model.py would
    assert [str(d) for d in gen_docs.run(check=True, root=copy)] == [
        "README.md: region 'settings-summary' is out of date",
        "docs/configuration.md: region 'settings' is out of date",
        "server.json: region 'environmentVariables' is out of date",
    ]
    gen_docs.run(check=False, root=copy)
    assert gen_docs.run(check=True, root=copy) == []
    written = (copy / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert f"| `chunk_size` | `COFFER_CHUNK_SIZE` | `{value if change == 'default' else 1024}` |" in written


def test_the_check_fails_when_a_kb_yaml_settings_description_changes(
    copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(KbConfig.model_fields["vector"], "description", "Embed documents.")
    assert [str(d) for d in gen_docs.run(check=True, root=copy)] == [
        "docs/configuration.md: region 'kb-settings' is out of date"
    ]


def test_every_setting_has_a_row_with_its_key_environment_variable_and_a_meaning() -> None:
    rows = {row.split(" | ")[0].strip("| `") for row in gen_docs.settings().splitlines()[2:]}
    fields = {name for name, field in Settings.model_fields.items() if not field.exclude}
    keys = {
        "—" if name == "home" else name.replace("embedding_", "embedding.", 1).replace("rerank_", "rerank.", 1)
        for name in fields
    }
    assert rows == keys
    assert "snapshot_retention" in rows


# -- error codes -----------------------------------------------------------------------------------


def codes_in_the_package() -> dict[str, str]:
    """Every error code written in the package: class ``code`` attributes and ``code=`` arguments."""
    found: dict[str, str] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        constants = {
            target.id: node.value.value
            for node in tree.body
            if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
            for target in node.targets
            if isinstance(target, ast.Name)
        }
        for node in ast.walk(tree):
            values: list[ast.expr] = []
            if isinstance(node, ast.ClassDef):
                values += [
                    s.value
                    for s in node.body
                    if isinstance(s, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "code" for t in s.targets)
                ]
            elif isinstance(node, ast.Call):
                values += [k.value for k in node.keywords if k.arg == "code"]
            for value in values:
                code = value.value if isinstance(value, ast.Constant) else None
                if isinstance(value, ast.Name):
                    code = constants.get(value.id)
                if isinstance(code, str):
                    found.setdefault(code, f"{path.relative_to(PACKAGE)}:{value.lineno}")
    return found


def test_every_error_code_the_package_raises_is_declared_with_a_meaning() -> None:
    used = codes_in_the_package()
    declared = {**ERROR_CODES, **VIEWER_ERROR_CODES}
    undeclared = {code: where for code, where in used.items() if code not in declared and code != BASE_CODE}
    assert not undeclared, f"add these to ERROR_CODES in errors.py: {undeclared}"
    assert set(ERROR_CODES) >= REJECTION_REASONS
    assert not set(ERROR_CODES) & set(VIEWER_ERROR_CODES)
    assert all(meaning and "\n" not in meaning for meaning in declared.values())


def test_no_declared_error_code_is_stale() -> None:
    used = set(codes_in_the_package()) | REJECTION_REASONS
    assert set(ERROR_CODES) | set(VIEWER_ERROR_CODES) <= used


def test_the_error_codes_the_issue_found_missing_are_documented() -> None:
    mcp = (REPO / "docs" / "mcp.md").read_text(encoding="utf-8")
    for code in (
        "invalid_pack",
        "unknown_snapshot",
        "embedding_unavailable",
        "embedding_cooling_down",
        "invalid_url",
        "unknown_tool",
        "internal_error",
        "invalid_snapshot",
    ):
        assert f"| `{code}` |" in mcp, code


# -- audit events ----------------------------------------------------------------------------------


def audit_calls() -> list[tuple[str, ast.Call]]:
    calls = []
    for path in sorted(PACKAGE.rglob("*.py")):
        calls.extend(
            (f"{path.relative_to(PACKAGE)}:{node.lineno}", node)
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "audit"
        )
    return calls


def test_every_audit_call_names_an_audit_event_not_a_string() -> None:
    calls = audit_calls()
    assert len(calls) >= 7
    for where, call in calls:
        assert not isinstance(call.args[1], ast.Constant), f"{where}: pass an AuditEvent"


def test_every_audit_event_is_recorded_somewhere_and_documented() -> None:
    source = "\n".join(p.read_text(encoding="utf-8") for p in PACKAGE.rglob("*.py") if p.name != "audit.py")
    mcp = (REPO / "docs" / "mcp.md").read_text(encoding="utf-8")
    for event in AuditEvent:
        assert f"AuditEvent.{event.name}" in source, event
        assert f"| `{event.value}` |" in mcp, event


@pytest.mark.sqlite_only  # SQLite's typeof(): the enum reaches the database as its name
def test_an_audit_event_is_stored_as_its_name(coffer) -> None:
    coffer.create_kb("kb")
    doc = coffer.add_document("kb", "a.md", "# A\n\ntext")
    coffer.delete_document("kb", doc.document_id)
    rows = coffer.index.conn.execute("SELECT event, typeof(event) FROM audit_log ORDER BY rowid").fetchall()
    assert [tuple(row) for row in rows] == [
        ("KB_CREATED", "text"),
        ("KB_DOCUMENT_INGESTED", "text"),
        ("KB_DOCUMENT_DELETED", "text"),
    ]


# -- README --------------------------------------------------------------------------------------


def test_the_readme_tool_table_gives_each_tool_its_parameters_in_order() -> None:
    """README's table is hand-written (a newcomer's summary); its signatures must match the tools."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    published = gen_docs._published_tools()
    for name in TOOL_NAMES:
        match = re.search(rf"`{name}\(([^)]*)\)`", readme)
        assert match, f"README's tool table has no row for {name}(…)"
        written = [re.split(r"[=?]", arg.strip())[0] for arg in match.group(1).split(",") if arg.strip()]
        assert written == list(published[name].input_schema["properties"]), name
