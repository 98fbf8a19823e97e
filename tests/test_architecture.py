"""Import boundaries: one direction of imports, each third-party adapter in one place, lazy heavy imports."""

from __future__ import annotations

import ast
import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "coffer_mcp"
TOOL_NAME = re.compile(r"coffer__[a-z_]+")

# Layers, lowest first: a module may import its own layer and lower ones only.
LAYERS = [
    {"errors", "models", "timeutil", "settings", "audit"},
    {"store", "convert", "index", "embed", "rerank", "fetch", "access"},
    {"indexing", "retrieval"},
    {"services", "portability"},
    {"mcp_server", "web", "cli", "__main__", "__init__"},
]
# Third-party packages each confined to one place.
OWNERS = {
    "mcp": ("mcp_server", "web"),
    "sqlite_vec": ("index",),
    "sqlean": ("index",),
    "sqlite3": ("index",),
    "psycopg": ("index",),
    "usearch": ("index",),
    "markitdown": ("convert",),
    "pypdfium2": ("convert",),
    "trafilatura": ("convert",),
    "mammoth": ("convert",),
    "openpyxl": ("convert",),
    "xlrd": ("convert",),
    "pptx": ("convert",),
    "bs4": ("convert",),
    "lxml": ("convert",),
    "fastembed": ("embed", "rerank"),
    "openai": ("embed",),
    "starlette": ("web",),
    "uvicorn": ("web", "cli"),
    "httpcore": ("fetch",),
    "httpx": ("fetch", "web", "rerank"),
    "httpx2": ("web",),
    # PyJWT (+ cryptography), checking an external identity provider's tokens (web/_external.py).
    "jwt": ("web",),
    "watchfiles": ("services",),
}


def modules() -> list[tuple[str, Path]]:
    return [(p.relative_to(PACKAGE).parts[0].removesuffix(".py"), p) for p in sorted(PACKAGE.rglob("*.py"))]


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path) -> set[str]:
    """Every module ``path`` imports (relative imports resolved), ``TYPE_CHECKING`` ones included."""
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
            module = node.module if node.level == 0 else ".".join(p for p in (base, node.module) if p)
            if module:
                names.add(module)
                # ``from coffer_mcp.x import y`` may import the submodule coffer_mcp.x.y
                names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def layer_of(unit: str) -> int:
    return next((i for i, layer in enumerate(LAYERS) if unit in layer), 0)  # names like __version__: the base


@pytest.mark.parametrize(("unit", "path"), modules(), ids=str)
def test_imports_only_point_down_the_layers(unit: str, path: Path) -> None:
    for name in imported(path):
        if name.startswith("coffer_mcp.") and name != "coffer_mcp":
            target = name.split(".")[1]
            assert layer_of(target) <= layer_of(unit), f"{path.relative_to(PACKAGE)} imports {name} from a higher layer"


@pytest.mark.parametrize(("unit", "path"), modules(), ids=str)
def test_each_third_party_package_is_imported_in_one_place(unit: str, path: Path) -> None:
    for name in imported(path):
        top = name.split(".")[0]
        if top in OWNERS:
            assert unit in OWNERS[top], f"{path.relative_to(PACKAGE)} imports {top}"


def test_importing_the_core_loads_no_heavy_library() -> None:
    code = (
        "import sys, coffer_mcp, coffer_mcp.services, coffer_mcp.cli;"
        "heavy = {'markitdown', 'fastembed', 'onnxruntime', 'openai', 'mcp', 'starlette', 'uvicorn', 'httpcore',"
        " 'numpy', 'sqlite_vec', 'usearch'};"
        "print(sorted(heavy & {m.split('.')[0] for m in sys.modules}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def modules_after_coffer(*argv: str, home: Path | None = None) -> set[str]:
    """The modules a fresh interpreter holds once ``coffer ARGV`` has run (through ``cli.main``, as the script does)."""
    code = (
        "import sys\n"
        "from coffer_mcp.cli import main\n"
        "try:\n    main(sys.argv[1:])\n"
        "except SystemExit:\n    pass\n"
        "sys.stdout.write('\\n' + ' '.join(sorted(sys.modules)) + '\\n')\n"
    )
    env = {**os.environ, **({"COFFER_HOME": str(home)} if home else {})}
    out = subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, check=True, env=env, timeout=120
    ).stdout
    return set(out.splitlines()[-1].split())


def loaded_of(loaded: set[str], *packages: str) -> list[str]:
    return sorted(m for m in loaded if any(m == p or m.startswith(f"{p}.") for p in packages))


@pytest.mark.parametrize(
    "argv", [["--version"], ["--help"], ["kb", "--help"], ["kb", "search", "--help"], ["serve", "--help"]], ids=" ".join
)
def test_version_and_help_load_no_pydantic_no_service_no_index_no_converter(argv: list[str]) -> None:
    loaded = modules_after_coffer(*argv)
    assert "coffer_mcp.cli" in loaded
    heavy = ("pydantic", "pydantic_core", "mcp", "yaml", "sqlite3", "sqlean")
    core = ("coffer_mcp.settings", "coffer_mcp.models", "coffer_mcp.services", "coffer_mcp.index")
    assert loaded_of(loaded, *heavy, *core, "coffer_mcp.convert", "coffer_mcp.portability") == []


def test_a_search_from_the_command_line_loads_no_converter_no_pack_format_no_ingest_and_no_server(
    tmp_path: Path,
) -> None:
    from coffer_mcp.cli import main

    assert main(["--home", str(tmp_path), "kb", "create", "notes"]) == 0
    (tmp_path / "a.md").write_text("# A\n\nthe moon and its tides\n", encoding="utf-8")
    assert main(["--home", str(tmp_path), "kb", "ingest", "notes", str(tmp_path / "a.md")]) == 0
    loaded = modules_after_coffer("kb", "search", "notes", "tides", home=tmp_path)
    assert "coffer_mcp.retrieval.search" in loaded  # it did search
    converters = ("coffer_mcp.convert._registry", "markitdown", "pypdfium2", "trafilatura")
    packs = ("coffer_mcp.portability._format", "coffer_mcp.portability._export", "coffer_mcp.portability._import")
    servers = ("mcp", "coffer_mcp.mcp_server", "coffer_mcp.web", "starlette", "uvicorn")
    # The services a search does not use are made, and their modules loaded, on their first use.
    services = ("documents", "ingest", "folder_ingest", "follow", "watcher", "sources", "portability", "authorization")
    unused = tuple(f"coffer_mcp.services.{name}" for name in services)
    assert loaded_of(loaded, *converters, *packs, *servers, *unused, "coffer_mcp.retrieval.grep") == []


def test_the_mcp_server_loads_no_converter_and_no_grep_engine_until_a_tool_needs_one() -> None:
    code = "import sys, coffer_mcp.mcp_server; print(' '.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120).stdout
    loaded = set(out.split())
    assert "mcp" in loaded
    assert loaded_of(loaded, "coffer_mcp.convert._registry", "markitdown", "coffer_mcp.retrieval.grep") == []


@pytest.mark.parametrize("package", ["coffer_mcp.convert", "coffer_mcp.portability"])
def test_every_name_a_lazy_package_exports_resolves(package: str) -> None:
    module = importlib.import_module(package)
    missing = [name for name in module.__all__ if getattr(module, name, None) is None]
    assert missing == []
    with pytest.raises(AttributeError, match="has no attribute 'nothing_here'"):
        _ = module.nothing_here


def test_each_tool_name_is_written_once_in_the_mcp_server_in_its_registry() -> None:
    # A string that is exactly a tool name declares or refers to that tool by name; descriptions
    # and docstrings that mention a tool in a sentence are not names.
    places: dict[str, list[str]] = {}
    for path in sorted((PACKAGE / "mcp_server").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and TOOL_NAME.fullmatch(node.value):
                places.setdefault(node.value, []).append(f"{path.name}:{node.lineno}")
    from coffer_mcp.mcp_server import TOOL_NAMES

    assert set(places) == set(TOOL_NAMES)
    for name, where in places.items():
        assert where == [where[0]], f"{name} is written in {where}"
        assert where[0].startswith("_registry.py:"), f"{name} is written in {where}"


MCP_SERVER_FILES = sorted((PACKAGE / "mcp_server").rglob("*.py"))
# The service's collaborators and its index: the MCP layer asks the service, never these.
BEHIND_THE_SERVICE = {"index", "registry", "catalogue", "locks", "freshness", "providers"}


@pytest.mark.parametrize("path", MCP_SERVER_FILES, ids=lambda p: p.name)
def test_the_mcp_server_imports_nothing_from_the_index(path: Path) -> None:
    # The MCP layer speaks to the Coffer facade only: a row type or a backend of the index in a
    # tool would tie the protocol to how documents are stored.
    assert sorted(n for n in imported(path) if n == "coffer_mcp.index" or n.startswith("coffer_mcp.index.")) == []


def _service_reaches(path: Path) -> list[str]:
    """Where ``path`` reads the service's index, one of its collaborators, or a private member.

    The service is a name annotated ``Coffer`` (or a factory of one), a name assigned from it, any
    ``<x>.service``, and a call of a factory: ``service.index``, ``job.service.registry``,
    ``svc._private`` are all found.
    """
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.annotation is not None and "Coffer" in ast.unparse(node.annotation):
            names.add(node.arg)
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and "Coffer" in ast.unparse(node.annotation)
        ):
            names.add(node.target.id)

    def is_service(node: ast.expr) -> bool:
        if isinstance(node, ast.Name):
            return node.id in names
        if isinstance(node, ast.Attribute):
            return node.attr == "service"
        return isinstance(node, ast.Call) and is_service(node.func)

    for node in ast.walk(tree):  # aliases: svc = job.service; core = service()
        if isinstance(node, ast.Assign) and is_service(node.value):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return [
        f"{path.name}:{node.lineno}: {ast.unparse(node)}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and is_service(node.value)
        and (node.attr in BEHIND_THE_SERVICE or node.attr.startswith("_"))
    ]


@pytest.mark.parametrize("path", MCP_SERVER_FILES, ids=lambda p: p.name)
def test_the_mcp_server_asks_the_service_and_never_reaches_behind_it(path: Path) -> None:
    # ``coffer.document_counts()``, not ``coffer.index.document_counts()``: what a tool may know
    # is the service's public methods, so the service can change how it keeps what it knows.
    assert _service_reaches(path) == []


def test_a_reach_behind_the_service_is_found(tmp_path: Path) -> None:
    # The check above must see each way the MCP layer names the service.
    sample = tmp_path / "sample.py"
    code = (
        "def f(service: Coffer, job, make: Callable[[], Coffer]):\n"
        "    service.index.document_counts()\n"
        "    job.service.registry.kb_folders()\n"
        "    svc = job.service\n"
        "    svc._documents\n"
        "    core = make()\n"
        "    core.catalogue.kb_names()\n"
        "    service.document_counts()\n"
    )
    sample.write_text(code, encoding="utf-8")
    found = [line.split(": ", 1)[1] for line in _service_reaches(sample)]
    assert sorted(found) == ["core.catalogue", "job.service.registry", "service.index", "svc._documents"]


def test_every_error_class_is_defined_in_errors_py() -> None:
    # One documented tree (errors.py's docstring and ERROR_CODES): a surface or subsystem that
    # needs a new error adds it there, not beside its own code.
    import importlib
    import pkgutil

    import coffer_mcp
    from coffer_mcp.errors import CofferError

    for module in pkgutil.walk_packages(coffer_mcp.__path__, "coffer_mcp."):
        if module.name.endswith("__main__"):
            continue
        importlib.import_module(module.name)

    def subclasses(cls: type) -> list[type]:
        return [c for sub in cls.__subclasses__() for c in (sub, *subclasses(sub))]

    ours = [c for c in subclasses(CofferError) if c.__module__.startswith("coffer_mcp.")]  # not tests' own
    assert len(ours) > 20, "too few error classes found to be looking in the right place"
    assert {f"{c.__module__}.{c.__qualname__}" for c in ours if c.__module__ != "coffer_mcp.errors"} == set()


def _own_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def test_no_import_circle_between_modules() -> None:
    own = _own_modules()
    graph = {name: {m for m in imported(path) if m in own and m != name} for name, path in own.items()}
    # A package's __init__ re-exporting its modules is not a circle: ``a/__init__ -> a.b -> a`` is
    # how Python loads ``a.b`` at all. Edges from a module to its own package's __init__ are dropped.
    for name, targets in graph.items():
        targets -= {t for t in targets if name.startswith(f"{t}.")}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                cycle = [*stack[stack.index(target) :], target]
                raise AssertionError(f"import circle: {' -> '.join(cycle)}")
            if target not in state:
                visit(target)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)


@pytest.mark.parametrize(("unit", "path"), modules(), ids=str)
def test_no_sql_outside_the_index(unit: str, path: Path) -> None:
    # The index port (index/port.py) is the only way to the index: no service, surface or
    # algorithm knows it is SQLite, so a second backend plugs in behind the port alone.
    if unit == "index":
        return
    text = path.read_text(encoding="utf-8")
    assert "execute(" not in text, f"{path.relative_to(PACKAGE)} runs SQL outside index/"
    assert "vec_chunks" not in text, f"{path.relative_to(PACKAGE)} names a vector table outside index/"
    for name in imported(path):
        assert not name.startswith("coffer_mcp.index.sqlite"), f"{path.relative_to(PACKAGE)} imports {name}"


# Test folders that are no package of the code: suites across the whole program.
ACROSS = {"bench", "reliability", "packaging"}


def test_the_tests_mirror_the_code() -> None:
    # A function's tests are found by its module's path: tests/<package>/ for coffer_mcp/<package>/.
    tests = Path(__file__).resolve().parent
    folders = {p.name for p in tests.iterdir() if p.is_dir() and p.name not in {"__pycache__", ".pytest_cache"}}
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert folders - ACROSS <= packages, f"test folders naming no package of coffer_mcp: {folders - ACROSS - packages}"
    at_root = sorted(p.name for p in tests.glob("*.py"))
    assert len(at_root) <= 10, f"tests/ holds {len(at_root)} files at its root; move them to the folder of their code"
