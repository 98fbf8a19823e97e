"""docs/reliability.md stays true: each test it cites exists, and each reliability test is cited."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TEST_DEFINITION = re.compile(r"^(?:async )?def (test_\w+)", re.MULTILINE)


def defined_tests(folder: Path) -> set[str]:
    return {name for path in folder.rglob("test_*.py") for name in TEST_DEFINITION.findall(path.read_text("utf-8"))}


def test_every_test_the_reliability_guide_cites_exists_and_every_reliability_test_is_cited() -> None:
    guide = (REPO / "docs" / "reliability.md").read_text(encoding="utf-8")
    cited = set(re.findall(r"\b(test_[a-z0-9_]+)", guide))
    modules = {path.stem for path in (REPO / "tests").rglob("test_*.py")}
    assert cited - defined_tests(REPO / "tests") - modules == set(), "the guide cites tests that do not exist"
    assert defined_tests(REPO / "tests" / "reliability") - cited == set(), "reliability tests the guide does not cite"
