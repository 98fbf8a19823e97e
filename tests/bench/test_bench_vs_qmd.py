"""The Coffer-against-qmd benchmark: each system ingests the same folder in every round, each first in turn.

qmd itself (Node 22 and native modules) is not installed where the tests run: a stand-in
executable, laid out as npm installs qmd, answers ``collection add`` as qmd does. Coffer is the
real one, a ``coffer serve`` over stdio driven by the MCP SDK's client.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from bench.vs_qmd import main

QMD_STAND_IN = """#!/bin/sh
# qmd collection add FOLDER --name NAME: counts the Markdown files, answers as qmd 2.8.3 does
count=$(ls "$3" | grep -c '\\.md$')
echo "Indexed: $count new, 0 updated, 0 unchanged, 0 removed"
"""


def install_qmd_stand_in(folder: Path) -> Path:
    package = folder / "node_modules" / "@tobilu" / "qmd"
    package.mkdir(parents=True)
    (package / "package.json").write_text(json.dumps({"version": "2.8.3"}), encoding="utf-8")
    binary = folder / "node_modules" / ".bin" / "qmd"
    binary.parent.mkdir(parents=True)
    binary.write_text(QMD_STAND_IN, encoding="utf-8")
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    return folder


def write_beir_corpus(folder: Path) -> Path:
    folder.mkdir()
    docs = [
        {"_id": "1", "title": "Zebrafish fins", "text": "Fins regrow after injury."},
        {"_id": "2", "title": "", "text": "Tides follow the moon."},
        {"_id": "3", "title": "Malaria", "text": "Mosquito nets reduce malaria."},
    ]
    (folder / "corpus.jsonl").write_text("".join(json.dumps(doc) + "\n" for doc in docs), encoding="utf-8")
    return folder


def test_coffer_ingests_the_whole_folder_over_mcp_beside_qmd_and_an_older_checkout_each_first_in_turn(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    qmd = install_qmd_stand_in(tmp_path / "qmd")
    data_folder = write_beir_corpus(tmp_path / "beir")
    out = tmp_path / "vs-qmd.json"
    checkout = Path(__file__).resolve().parents[2]  # this checkout again, as the "baseline"

    argv = ["--data", str(data_folder), "--qmd", str(qmd), "--runs", "3", "--baseline", str(checkout)]

    data = main([*argv, "--workdir", str(tmp_path), "--out", str(out)])

    assert json.loads(out.read_text(encoding="utf-8")) == data
    assert data["documents"] == 3
    assert data["qmd_version"] == "2.8.3"
    assert [row["order"][0] for row in data["rounds"]] == ["coffer", "qmd", "coffer-baseline"]
    for row in data["rounds"]:
        assert row["coffer"]["created"] == row["coffer-baseline"]["created"] == 3
        assert row["qmd"]["indexed"].startswith("Indexed: 3 new")
    assert data["summary"]["qmd"]["ratio_to_qmd"] == 1.0
    assert "Medians over 3 rounds" in capsys.readouterr().out
