"""Keep converter libraries off stdout, which belongs to the MCP protocol in stdio mode."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["stdout_to_stderr"]


class _Redirect:
    # contextlib.redirect_stdout is not safe across threads: two overlapping conversions could
    # leave sys.stdout pointing at stderr for good. A depth count under a lock is.
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.depth = 0
        self.saved = sys.stdout

    def enter(self) -> None:
        with self.lock:
            if self.depth == 0:
                self.saved = sys.stdout
                sys.stdout = sys.stderr
            self.depth += 1

    def exit(self) -> None:
        with self.lock:
            self.depth -= 1
            if self.depth == 0:
                sys.stdout = self.saved


_REDIRECT = _Redirect()


@contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Send anything printed inside the block to stderr; safe to nest and to use from threads."""
    _REDIRECT.enter()
    try:
        yield
    finally:
        _REDIRECT.exit()
