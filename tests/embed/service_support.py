"""Helpers for the shared model service tests: a short private folder, its service processes, waits."""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

from coffer_mcp.embed import CooldownEmbedder, EmbeddingConfig, SharedEmbedder, make_embedder
from tests.embed.conftest import MODEL_NAME

SERVICE_MODULE = "coffer_mcp.embed._service"
# A model folder that need not exist: requests that never load the model (status) work with it.
NO_MODEL = Path("/nonexistent/coffer-test-model")
WAIT_SECONDS = 120.0  # generous: a loaded 2-core machine starts Python slowly


def temporary_folder() -> Iterator[Path]:
    """A fresh folder under /tmp (short enough for socket paths); its services are stopped after."""
    folder = Path(tempfile.mkdtemp(prefix="cf-", dir="/tmp"))
    try:
        yield folder
    finally:
        for pid in service_pids(folder):
            os.kill(pid, signal.SIGKILL)
            wait_gone(pid)
        shutil.rmtree(folder, ignore_errors=True)


def service_pids(folder: Path) -> list[int]:
    """The live service processes whose run folder is under ``folder`` (Linux /proc)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().decode("utf-8", "replace")
        except OSError:
            continue
        if SERVICE_MODULE in cmdline and str(folder) in cmdline:
            pids.append(int(entry.name))
    return sorted(pids)


def wait_gone(pid: int, timeout: float = WAIT_SECONDS) -> None:
    """Wait until process ``pid`` has exited (a pidfd: no polling)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        ready, _, _ = select.select([fd], [], [], timeout)
        assert ready, f"process {pid} still runs after {timeout} s"
    finally:
        os.close(fd)


def shared(folder: Path, model_dir: Path = NO_MODEL, **options: object) -> CooldownEmbedder:
    """A fastembed embedder that goes through the service in ``folder``."""
    config = EmbeddingConfig(
        model=MODEL_NAME,
        model_path=model_dir,
        service="auto",
        service_folder=folder,
        **options,  # type: ignore[arg-type]
    )
    embedder = make_embedder(config)
    assert embedder is not None
    return embedder


def in_process(model_dir: Path) -> CooldownEmbedder:
    embedder = make_embedder(EmbeddingConfig(model=MODEL_NAME, model_path=model_dir, service="off"))
    assert embedder is not None
    return embedder


def client(embedder: CooldownEmbedder) -> SharedEmbedder:
    provider = embedder.provider
    assert isinstance(provider, SharedEmbedder)
    return provider


def run_python(code: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter; its output must arrive even though it starts a service."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=WAIT_SECONDS,
        check=False,
    )


def assert_close(a: list[float], b: list[float], tolerance: float = 1e-6) -> None:
    assert len(a) == len(b)
    assert max(abs(x - y) for x, y in zip(a, b, strict=True)) <= tolerance
