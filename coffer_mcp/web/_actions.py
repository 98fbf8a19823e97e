"""Filesystem actions for the viewer: open a document (or a KB folder) in the user's editor, reveal it.

Two rules keep this safe. The target is resolved from a validated KB name and document id and
must lie, after ``realpath``, inside ``COFFER_HOME/knowledge`` (a symlinked KB folder pointing
elsewhere is refused). The opener is started with an argument list, never a shell string,
detached from the server (own session, no stdio), and reaped by a daemon thread so it neither
becomes a zombie nor keeps the server waiting.

An opener that fails says so at once: ``xdg-open`` on a headless machine exits with status 3
("no method available") within 40 ms. So the action waits up to a second for an early exit and
reports a non-zero one rather than claiming success; an editor still running by then is taken
as opened.
"""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from coffer_mcp.errors import (
    DocumentNotFoundError,
    InvalidArgumentError,
    NoOpenerError,
    OpenerFailedError,
    OutsideStoreError,
)
from coffer_mcp.services import Coffer
from coffer_mcp.store import is_document_id

__all__ = [
    "Action",
    "Launch",
    "NoOpenerError",
    "OpenerFailedError",
    "OutsideStoreError",
    "document_target",
    "kb_target",
    "plan",
    "run_action",
]

log = logging.getLogger(__name__)

Action = Literal["open", "reveal"]
Which = Callable[[str], "str | None"]

# Editors that need a terminal: started detached with no terminal they would hang or exit at once,
# so a VISUAL/EDITOR naming one falls back to the desktop opener.
TERMINAL_EDITORS = frozenset(
    {"vi", "vim", "nvim", "nano", "pico", "ed", "ex", "micro", "hx", "helix", "kak", "joe", "mg", "ne", "jed"}
)
_EDITOR_HINT = "Set COFFER_EDITOR to a desktop editor command on PATH, e.g. COFFER_EDITOR='code' or 'gedit'."
_EARLY_EXIT_SECONDS = 1.0  # how long an opener has to fail before it counts as started
_XDG_NO_METHOD = 3  # xdg-open's status for "no program to open it with" (no desktop, no browser)


@dataclass(frozen=True)
class Launch:
    """How to open a target: an argument list, or (Windows, no editor) ``os.startfile``."""

    argv: tuple[str, ...] = ()
    startfile: str | None = None

    @property
    def opener(self) -> str:
        return self.argv[0] if self.argv else "startfile"


def kb_target(service: Coffer, kb: str) -> Path:
    """The real path of a knowledge base's folder.

    Raises:
        InvalidNameError: ``kb`` breaks the naming rule (so cannot traverse).
        KnowledgeBaseNotFoundError: no such knowledge base.
        OutsideStoreError: the folder resolves outside the store.
    """
    paths, _ = service.open_kb(kb)
    return _inside_store(service, paths.root)


def document_target(service: Coffer, kb: str, doc_id: str) -> Path:
    """The real path of a document's Markdown file (same errors as ``kb_target``, plus unknown ids)."""
    paths, _ = service.open_kb(kb)
    if not is_document_id(doc_id):
        raise InvalidArgumentError(
            f"Invalid document id {doc_id[:80]!r}.",
            hint="Document ids are 26-character ULIDs, as listed by the viewer.",
        )
    real = _inside_store(service, paths.doc(doc_id))
    if not real.is_file():
        raise DocumentNotFoundError(f"Document '{doc_id}' does not exist in '{kb}'.", hint="Reload the list.")
    return real


def _inside_store(service: Coffer, path: Path) -> Path:
    root = Path(os.path.realpath(service.paths.knowledge))
    real = Path(os.path.realpath(path))
    if real != root and not real.is_relative_to(root):
        raise OutsideStoreError(
            f"{path} resolves outside the Coffer store.",
            hint="Filesystem actions only act on files inside COFFER_HOME/knowledge.",
        )
    return real


def plan(
    action: Action, target: Path, *, editor: str | None, platform: str = sys.platform, which: Which = shutil.which
) -> Launch:
    """The command that opens or reveals ``target`` on ``platform`` (pure: nothing is started).

    ``open`` uses ``editor`` (a command with arguments, split like a shell would but never run
    by one) unless it is unset or a terminal editor, else the desktop opener. ``reveal`` shows
    the target in the file manager; on Linux, which has no standard "select this file", it opens
    the containing folder.

    Raises:
        NoOpenerError: nothing here can open it; the hint says how to configure an editor.
    """
    if action == "open" and editor and editor.strip():
        argv = _split_command(editor, platform)
        if argv and os.path.basename(argv[0]).lower().removesuffix(".exe") not in TERMINAL_EDITORS:
            return Launch(argv=(_require(argv[0], which), *argv[1:], str(target)))
        log.info("editor %r needs a terminal; using the desktop opener", editor)
    if platform == "darwin":
        return Launch(argv=("open", "-R", str(target)) if action == "reveal" else ("open", str(target)))
    if platform == "win32":
        if action == "reveal":
            return Launch(argv=("explorer", f"/select,{target}"))
        return Launch(startfile=str(target))
    folder = target.parent if action == "reveal" else target
    return Launch(argv=(_require("xdg-open", which), str(folder)))


def _split_command(command: str, platform: str) -> list[str]:
    if platform == "win32":
        # POSIX rules would eat the backslashes of a Windows path; drop the quotes ourselves.
        return [part.strip('"') for part in shlex.split(command, posix=False)]
    try:
        return shlex.split(command)
    except ValueError as exc:
        raise NoOpenerError(f"The editor command {command!r} cannot be parsed: {exc}.", hint=_EDITOR_HINT) from exc


def _require(program: str, which: Which) -> str:
    found = which(program)
    if found is None:
        raise NoOpenerError(f"'{program}' was not found, so nothing can open files on this machine.", hint=_EDITOR_HINT)
    return found


def run_action(service: Coffer, action: Action, target: Path) -> Launch:
    """Open or reveal ``target`` (already checked to be inside the store) and return what ran."""
    launch = plan(action, target, editor=service.settings.editor)
    if launch.startfile is not None:
        _startfile(launch.startfile)
    else:
        _spawn(launch.argv)
    return launch


def _spawn(argv: tuple[str, ...]) -> None:
    windows = os.name == "nt"
    detached = getattr(subprocess, "DETACHED_PROCESS", 0) | getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0)
    try:
        process = subprocess.Popen(  # an argument list, no shell
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            close_fds=True,
            creationflags=detached if windows else 0,
            start_new_session=not windows,  # Ctrl-C on the server must not close the user's editor
        )
    except OSError as exc:
        raise OpenerFailedError(f"Could not start {argv[0]}: {exc.strerror or exc}.", hint=_EDITOR_HINT) from exc
    try:
        status = process.wait(timeout=_EARLY_EXIT_SECONDS)
    except subprocess.TimeoutExpired:
        threading.Thread(target=process.wait, name=f"coffer-opener-{process.pid}", daemon=True).start()
        return
    if status != 0:
        raise _failed(argv[0], status)


def _failed(program: str, status: int) -> NoOpenerError | OpenerFailedError:
    """The error for an opener that exited with ``status`` (non-zero) before it opened anything."""
    name = os.path.basename(program)
    if name == "xdg-open" and status == _XDG_NO_METHOD:
        return NoOpenerError(
            "xdg-open found no program to open files with here (no desktop session or browser: a headless server?).",
            hint="Open the path the viewer shows on the machine running Coffer, or set COFFER_EDITOR to a command "
            "that can open files there.",
        )
    shown = f"signal {-status}" if status < 0 else f"status {status}"
    return OpenerFailedError(f"{name} exited with {shown} without opening anything.", hint=_EDITOR_HINT)


def _startfile(path: str) -> None:
    try:
        os.startfile(path)  # type: ignore[attr-defined]  # Windows only; plan() asks for it only there
    except OSError as exc:
        raise OpenerFailedError(f"Windows could not open {path}: {exc.strerror or exc}.", hint=_EDITOR_HINT) from exc
