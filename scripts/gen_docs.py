"""The lists in the docs, generated from the code: tools, prompts, error codes, audit events, settings.

A Markdown file marks each generated list as a region::

    <!-- generated: NAME -->
    ...the list, rewritten by this script...
    <!-- end generated -->

``python -m scripts.gen_docs`` rewrites every region of ``README.md`` and ``docs/*.md`` from the
code, and the environment variables ``server.json`` lists; ``python -m scripts.gen_docs --check``
changes nothing and exits 1 naming each region that differs (``tests/test_generated_docs.py`` runs
it). The text around the regions stays hand-written.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

REPO = Path(__file__).resolve().parents[1]
REGION = re.compile(r"(<!-- generated: ([\w-]+) -->\n)(.*?)(<!-- end generated -->)", re.DOTALL)

# Where the docs say more about a setting: a link the reference adds after its description (links
# stay out of the descriptions, which README and server.json show too).
SEE_ALSO: dict[str, str] = {
    "index_backend": "[deploy.md](deploy.md)",
    "http_token": "[http.md](http.md#security)",
    "rerank_provider": "[Reranking](#reranking)",
    "watch": "[guide.md](guide.md#following-a-folder)",
}
SERVER_JSON = "server.json"
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z`])")


@dataclass(frozen=True)
class Drift:
    """A generated region whose text is not what the code gives (``path`` relative to the repository)."""

    path: Path
    region: str
    problem: str = "out of date"

    def __str__(self) -> str:
        return f"{self.path}: region '{self.region}' is {self.problem}"


# -- tables ------------------------------------------------------------------------------------


def table(header: Iterable[str], rows: Iterable[Iterable[str]]) -> str:
    """A Markdown table; ``|`` inside a cell is escaped."""
    head = list(header)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def code_table(codes: Mapping[str, str], title: str = "code") -> str:
    return table([title, "meaning"], ([f"`{code}`", meaning] for code, meaning in codes.items()))


def error_codes() -> str:
    from coffer_mcp.errors import ERROR_CODES

    return code_table(ERROR_CODES)


def viewer_error_codes() -> str:
    from coffer_mcp.errors import VIEWER_ERROR_CODES

    return code_table(VIEWER_ERROR_CODES)


def audit_events() -> str:
    from coffer_mcp.audit import AuditEvent

    return code_table({event.value: event.meaning for event in AuditEvent}, "event")


# -- settings ----------------------------------------------------------------------------------
# Every setting's default, range and description come from its pydantic ``Field`` (settings/_model.py
# and, for kb.yaml, store/kbconfig.py); nothing here restates one.


def settings() -> str:
    """docs/configuration.md's reference: every setting with its key, variable, default, range and meaning."""
    from coffer_mcp.settings import Settings

    env = _environment_variables()
    rows = []
    for name, field in _settings():
        see = f" See {SEE_ALSO[name]}." if name in SEE_ALSO else ""
        variable = f"`{env[name]}`" if name in env else "—"
        rows.append([_config_key(name), variable, _default(name, field), _range(field), _meaning(name, field) + see])
    if not set(SEE_ALSO) <= set(Settings.model_fields):
        raise LookupError(f"SEE_ALSO names settings that do not exist: {set(SEE_ALSO) - set(Settings.model_fields)}")
    return table(["setting (`config.yaml` key)", "environment variable", "default", "range", "meaning"], rows)


def settings_summary() -> str:
    """README's table: the settings an environment variable sets, each with its description's first sentence."""
    env = _environment_variables()
    rows = [
        [f"`{env[name]}`", _config_key(name), _default(name, field), summary(_meaning(name, field))]
        for name, field in _settings()
        if name in env
    ]
    return table(["environment variable", "`config.yaml` key", "default", "what it does"], rows)


def kb_settings() -> str:
    """The settings of a knowledge base's ``kb.yaml``."""
    from coffer_mcp.store.kbconfig import KbConfig

    rows = [
        [f"`{name}`", _default(name, field), _range(field), _meaning(name, field)]
        for name, field in KbConfig.model_fields.items()
    ]
    return table(["`kb.yaml` key", "default", "range", "meaning"], rows)


def kb_yaml() -> str:
    """A new knowledge base's ``kb.yaml``, as ``write_kb_config`` writes it with the defaults."""
    import yaml

    from coffer_mcp.store.kbconfig import config_mapping, make_kb_config

    stamp = "2026-11-30T07:36:33.795Z"
    config = make_kb_config(description="Design notes and ADRs", created_at=stamp, updated_at=stamp)
    text = yaml.safe_dump(config_mapping(config), sort_keys=False, allow_unicode=True, width=10_000)
    return f"```yaml\n{text}```\n"


def summary(description: str) -> str:
    """A description's first sentence, without its full stop."""
    return _SENTENCE_END.split(description, maxsplit=1)[0].rstrip(".")


def _settings() -> list[tuple[str, Any]]:
    """The settings a user sets (those derived from another one left out)."""
    from coffer_mcp.settings import Settings

    return [(name, field) for name, field in Settings.model_fields.items() if not field.exclude]


def _environment_variables() -> dict[str, str]:
    from coffer_mcp.settings import ENV_VARS

    return {field: var for var, field in ENV_VARS.items()}


def _meaning(name: str, field: Any) -> str:
    if not field.description:
        raise LookupError(f"setting '{name}' has no meaning: give its Field a description")
    return str(field.description)


def _config_key(name: str) -> str:
    from coffer_mcp.settings import CONFIG_GROUPS

    if name == "home":
        return "—"  # config.yaml lives in the home, so it cannot move it
    for group, keys in CONFIG_GROUPS.items():
        key = name.removeprefix(f"{group}_")
        if key != name and key in keys:
            return f"`{group}.{key}`"
    return f"`{name}`"


def _default(name: str, field: Any) -> str:
    from coffer_mcp.settings import DEFAULT_HOME

    if name == "home":
        return f"`{DEFAULT_HOME}`"  # a default_factory that resolves it on this machine
    if name in _PROVIDER_DEFAULTS:
        return _PROVIDER_DEFAULTS[name]()
    if field.is_required():
        return "—"
    value = field.get_default(call_default_factory=True)
    if value is None:
        return "unset"
    if value == "":
        return "empty"
    if value in ([], (), {}):
        return "none"
    if isinstance(value, list):
        return f"`{', '.join(map(str, value))}`"
    if name.endswith("_bytes"):
        return f"`{value}` ({value // 1024**2} MiB)"
    if isinstance(value, float):
        return f"`{value:g}`"
    return _literal(value).replace('"', "")


def _provider_models(providers: dict[str, str]) -> Callable[[], str]:
    """The default column of a model setting whose unset value means each provider's own model."""

    def render() -> str:
        import importlib

        models = [
            f"`{importlib.import_module(module).DEFAULT_MODEL}` ({provider})" for provider, module in providers.items()
        ]
        return "unset: " + ", ".join(models)

    return render


_PROVIDER_DEFAULTS: dict[str, Callable[[], str]] = {
    "embedding_model": _provider_models(
        {"fastembed": "coffer_mcp.embed._fastembed", "openai": "coffer_mcp.embed._openai"}
    ),
    "rerank_model": _provider_models({"fastembed": "coffer_mcp.rerank._fastembed"}),
}


def _range(field: Any) -> str:
    """What values a setting takes, from its type and its declared bounds."""
    choices = _choices(field.annotation)
    if choices:
        *first, last = [f"`{choice}`" for choice in choices]
        return f"{', '.join(first)} or {last}"
    if field.annotation is bool:
        return "`true` or `false`"
    bounds = {
        kind: _number(getattr(m, kind))
        for m in field.metadata
        for kind in ("ge", "gt", "le", "max_length")
        if getattr(m, kind, None) is not None
    }
    if "max_length" in bounds:
        return f"≤ {bounds['max_length']} characters"
    if "ge" in bounds and "le" in bounds:
        return f"{bounds['ge']}–{bounds['le']}"
    signs = {"ge": "≥", "gt": ">", "le": "≤"}
    return ", ".join(f"{signs[kind]} {value}" for kind, value in bounds.items()) or "—"


def _sentence(text: str | None) -> str:
    return (text or "").strip().rstrip(".")


def _choices(annotation: Any) -> tuple[Any, ...]:
    from typing import Literal, get_args, get_origin

    if get_origin(annotation) is Literal:
        return get_args(annotation)
    return ()


# -- server.json -----------------------------------------------------------------------------------


def server_environment() -> list[dict[str, Any]]:
    """server.json's ``environmentVariables``: every ``COFFER_*`` variable, described from its setting."""
    from pydantic import SecretStr

    from coffer_mcp.settings import ENV_VARS, Settings

    variables = []
    for var, name in ENV_VARS.items():
        field = Settings.model_fields[name]
        kinds = set(get_args(field.annotation)) | {field.annotation}
        entry: dict[str, Any] = {
            "name": var,
            "description": _meaning(name, field).replace("`", ""),
            "isRequired": False,
            "format": _format(kinds),
        }
        default = _default(name, field)
        if default.startswith("`") and name not in _PROVIDER_DEFAULTS:
            entry["default"] = default.split("`")[1]
        if _choices(field.annotation):
            entry["choices"] = list(_choices(field.annotation))
        if SecretStr in kinds:
            entry["isSecret"] = True
        variables.append(entry)
    return variables


def _format(kinds: set[Any]) -> str:
    if bool in kinds:
        return "boolean"
    if kinds & {int, float}:
        return "number"
    return "filepath" if Path in kinds else "string"


def server_json_drifts(root: Path, *, check: bool) -> list[Drift]:
    """Rewrite (or, with ``check``, compare) the PyPI package's environment variables in server.json.

    The Claude Desktop bundle (``mcpb``) is configured through its manifest's ``user_config``, not by
    the user's environment: it lists none.
    """
    import json

    path = root / SERVER_JSON
    text = path.read_text(encoding="utf-8")
    server = json.loads(text)
    for package in server["packages"]:
        if package.get("registryType") == "pypi":
            package["environmentVariables"] = server_environment()
    new = json.dumps(server, indent=2, ensure_ascii=False) + "\n"
    if new == text:
        return []
    if not check:
        path.write_text(new, encoding="utf-8")
    return [Drift(Path(SERVER_JSON), "environmentVariables")]


# -- tools -------------------------------------------------------------------------------------


def tools_of(toolset: str) -> Callable[[], str]:
    def generate() -> str:
        from coffer_mcp.mcp_server._registry import TOOLS

        published = _published_tools()
        rows = [_tool_row(published[entry.name]) for entry in TOOLS if entry.toolset.value == toolset]
        return table(["tool", "what it does", "parameters", "returns"], rows)

    return generate


def _published_tools() -> dict[str, Any]:
    """Every tool as ``tools/list`` publishes it (a server that needs no home lists them all)."""
    import anyio

    from coffer_mcp.errors import ConfigError
    from coffer_mcp.mcp_server import build_unconfigured_server

    server = build_unconfigured_server(ConfigError("documentation"))
    return {tool.name: tool for tool in anyio.run(server.list_tools)}


def _tool_row(tool: Any) -> list[str]:
    schema = tool.input_schema
    required = set(schema.get("required", ()))
    params = [_parameter(name, prop, name in required) for name, prop in schema["properties"].items()]
    summary = tool.description.split("\n", 1)[0]  # the first paragraph: one line each
    return [f"`{tool.name}`", summary, ", ".join(params) or "—", _returns(tool.output_schema)]


def _parameter(name: str, prop: Mapping[str, Any], required: bool) -> str:
    notes = [note for note in (_bounds(prop),) if note]
    if not required:
        default = prop.get("default")
        notes.append("optional" if default is None else f"default {_literal(default)}")
    return f"`{name}`" + (f" ({', '.join(notes)})" if notes else "")


def _bounds(prop: Mapping[str, Any]) -> str:
    if "anyOf" in prop:
        kinds = [option for option in prop["anyOf"] if option.get("type") != "null"]
        if any(option.get("type") == "array" for option in kinds):
            return "one or a list" if len(kinds) > 1 else "a list"
        if any("$ref" in option for option in kinds):
            return "an object"
        return " or ".join(filter(None, (_bounds(option) for option in kinds)))
    if "enum" in prop:
        return " or ".join(_literal(value) for value in prop["enum"])
    if prop.get("type") in ("integer", "number") and ("minimum" in prop or "maximum" in prop):
        return f"{_number(prop.get('minimum', '…'))}–{_number(prop.get('maximum', '…'))}"
    if prop.get("type") == "string" and "maxLength" in prop:
        return f"≤ {_number(prop['maxLength'])} characters"
    return ""


def _returns(schema: Mapping[str, Any] | None) -> str:
    if not schema:
        return "—"
    return f"`{_object(schema, schema.get('$defs', {}))}`"


def _object(schema: Mapping[str, Any], defs: Mapping[str, Any]) -> str:
    fields = []
    for name, prop in schema.get("properties", {}).items():
        inner = _referenced(prop.get("items", {}), defs) if prop.get("type") == "array" else None
        fields.append(f"{name}: [{_object(inner, defs)}]" if inner else name)
    return "{" + ", ".join(fields) + "}"


def _referenced(prop: Mapping[str, Any], defs: Mapping[str, Any]) -> Mapping[str, Any] | None:
    ref = prop.get("$ref", "")
    return defs.get(ref.rsplit("/", 1)[-1]) if ref.startswith("#/$defs/") else None


def _literal(value: Any) -> str:
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f'`"{value}"`' if isinstance(value, str) else f"`{value}`"


def _number(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) else str(value)


# -- prompts -----------------------------------------------------------------------------------


def prompts() -> str:
    from coffer_mcp.mcp_server._prompts import PROMPTS, sdk_prompt

    rows = []
    for entry in PROMPTS:
        prompt = sdk_prompt(entry, None)
        arguments = [
            f"`{a.name}`"
            + ("" if a.required else " (optional)")
            + (f": {_sentence(a.description)}" if a.description else "")
            for a in prompt.arguments or []
        ]
        writes = " Not on a read-only server." if entry.writes else ""
        rows.append([f"`{entry.name}`", entry.title, (prompt.description or "") + writes, "; ".join(arguments)])
    return table(["prompt", "title", "what it does", "arguments"], rows)


# -- regions -----------------------------------------------------------------------------------

GENERATORS: dict[str, Callable[[], str]] = {
    "tools-core": tools_of("core"),
    "tools-curation": tools_of("curation"),
    "tools-portability": tools_of("portability"),
    "prompts": prompts,
    "error-codes": error_codes,
    "viewer-error-codes": viewer_error_codes,
    "audit-events": audit_events,
    "settings": settings,
    "settings-summary": settings_summary,
    "kb-settings": kb_settings,
    "kb-yaml": kb_yaml,
}


def documents(root: Path) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def regenerate(text: str, path: Path, made: dict[str, str]) -> tuple[str, list[Drift]]:
    """``text`` with each region rewritten, and the regions whose name no generator has."""
    unknown: list[Drift] = []

    def rewrite(match: re.Match[str]) -> str:
        start, name, _, end = match.groups()
        if name not in GENERATORS:
            unknown.append(Drift(path, name, "unknown (no generator has that name)"))
            return match.group(0)
        if name not in made:
            made[name] = GENERATORS[name]()
        return start + "\n" + made[name] + "\n" + end

    return REGION.sub(rewrite, text), unknown


def run(*, check: bool, root: Path = REPO) -> list[Drift]:
    """Rewrite (or, with ``check``, compare) every region under ``root``; returns what differed or is wrong."""
    made: dict[str, str] = {}
    drifts: list[Drift] = []
    used: set[str] = set()
    for path in documents(root):
        text = path.read_text(encoding="utf-8")
        new, unknown = regenerate(text, path.relative_to(root), made)
        drifts += unknown
        for (name, old), (_, fresh) in zip(_regions(text), _regions(new), strict=False):
            used.add(name)
            if old != fresh:
                drifts.append(Drift(path.relative_to(root), name))
        if new != text and not check:
            path.write_text(new, encoding="utf-8")
    drifts += [Drift(Path("docs"), name, "missing: no document has it") for name in GENERATORS if name not in used]
    return drifts + server_json_drifts(root, check=check)


def _regions(text: str) -> list[tuple[str, str]]:
    return [(match.group(2), match.group(3)) for match in REGION.finditer(text)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.gen_docs", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a region is out of date")
    args = parser.parse_args(argv)
    drifts = run(check=args.check)
    stale = [drift for drift in drifts if drift.problem == "out of date"]
    broken = [drift for drift in drifts if drift.problem != "out of date"]
    for drift in broken if not args.check else drifts:
        print(drift, file=sys.stderr)
    if args.check and stale:
        print("Run: python -m scripts.gen_docs", file=sys.stderr)
    if not args.check:
        for drift in stale:
            print(f"rewrote {drift.path}: region '{drift.region}'")
    return 1 if broken or (args.check and stale) else 0


if __name__ == "__main__":
    sys.exit(main())
