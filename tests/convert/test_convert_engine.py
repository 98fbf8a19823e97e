"""The MarkItDown engine loads lazily, can be missing, and never writes to stdout."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from coffer_mcp.convert._stdout import stdout_to_stderr

REPO = Path(__file__).resolve().parents[2]


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=120,
        check=False,
    )


def test_importing_the_convert_package_does_not_import_markitdown() -> None:
    result = run_python(
        """
        import sys
        import coffer_mcp.convert
        heavy = {"markitdown", "magika", "pdfminer", "pdfplumber", "mammoth", "pandas", "pypdfium2"}
        print(sorted(name for name in sys.modules if name.split(".")[0] in heavy))
        """
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_missing_markitdown_is_engine_unavailable_while_markdown_keeps_working() -> None:
    result = run_python(
        """
        import sys
        sys.modules["markitdown"] = None  # makes "import markitdown" raise ImportError
        from coffer_mcp.convert import convert
        from coffer_mcp.errors import EngineUnavailableError
        try:
            convert("book.epub", b"PK\\x03\\x04 whatever")
        except EngineUnavailableError as exc:
            print(exc.reason, "|", exc.hint)
        print(convert("notes.md", b"# Still works\\n").title)
        """
    )

    assert result.returncode == 0, result.stderr
    first, second = result.stdout.splitlines()
    assert first.startswith("engine_unavailable |")
    assert "pip install markitdown" in first
    assert second == "Still works"


def test_a_missing_format_dependency_is_engine_unavailable_for_that_format_only() -> None:
    result = run_python(
        """
        import sys
        sys.modules["pypdfium2"] = None  # the PDF converter then lacks its engine
        from pathlib import Path
        from coffer_mcp.convert import convert
        from coffer_mcp.errors import EngineUnavailableError
        try:
            convert("sample.pdf", Path("fixtures/sample.pdf").read_bytes())
        except EngineUnavailableError as exc:
            print(exc.reason, "|", exc.hint)
        print(convert("sample.docx", Path("fixtures/sample.docx").read_bytes()).title)
        """
    )

    assert result.returncode == 0, result.stderr
    first, second = result.stdout.splitlines()
    assert first.startswith("engine_unavailable |")
    assert "pip install pypdfium2" in first
    assert second == "Quarterly Bramble Report"


def test_converting_every_fixture_prints_nothing_on_stdout() -> None:
    result = run_python(
        """
        import sys
        from pathlib import Path
        from coffer_mcp.convert import convert
        from coffer_mcp.errors import IngestRejectedError
        for path in sorted(Path("fixtures").iterdir()):
            if path.name in {"README.md", "make_fixtures.py"} or path.is_dir():
                continue
            try:
                convert(path.name, path.read_bytes())
                print("ok", path.name, file=sys.stderr)
            except IngestRejectedError as exc:
                print("rejected", path.name, exc.reason, file=sys.stderr)
        """
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert "ok sample.docx" in result.stderr
    assert "rejected scanned.pdf scanned_pdf" in result.stderr


def test_stdout_guard_sends_prints_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    with stdout_to_stderr():
        print("noise from a library")
        with stdout_to_stderr():
            print("nested noise")
    print("protocol")

    captured = capsys.readouterr()
    assert captured.out == "protocol\n"
    assert captured.err == "noise from a library\nnested noise\n"
