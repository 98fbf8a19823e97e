"""The converter worker process: ``python -m coffer_mcp.convert._worker MEMORY_BYTES``.

Reads ``(filename, bytes)`` requests and answers ``("ok", markdown)`` (a ``Mapped`` when the
converter knows where its lines come from) or
``("rejected", reason, message, hint)``; exits when its stdin closes (the parent is gone).
"""

from __future__ import annotations

import math
import os
import signal
import sys
import threading
import time
from typing import IO


def _private_stdout() -> IO[bytes]:
    """Keep the real stdout for replies and send fd 1 — anything a library prints — to stderr."""
    channel = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return channel


def _cap_memory(limit: int) -> None:
    try:
        import resource
    except ImportError:  # Windows: no address-space limit
        return
    if limit > 0:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _die_with_parent() -> None:
    """Exit when the server that started us is gone (its conversions have no one to wait for them)."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def _deadline(seconds: float) -> None:
    """Kill this process if one conversion outlives ``seconds`` — even with no parent to do it."""
    if hasattr(signal, "SIGALRM"):
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        signal.alarm(max(1, math.ceil(seconds)) if seconds > 0 else 0)


def main() -> None:
    channel = _private_stdout()
    _cap_memory(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
    _die_with_parent()
    from coffer_mcp.convert._documents import DocumentConverter
    from coffer_mcp.convert._sandbox import read_message, write_message
    from coffer_mcp.errors import IngestRejectedError

    converter = DocumentConverter()
    requests = sys.stdin.buffer
    while True:
        try:
            name, data, timeout, options = read_message(requests)
        except EOFError:
            return
        _deadline(timeout + 5)  # the parent normally stops us first, at `timeout`
        reply: tuple[object, ...]
        try:
            reply = ("ok", converter.convert(data, name, **options))
        except IngestRejectedError as exc:
            reply = ("rejected", exc.code, exc.message, exc.hint)
        except MemoryError:
            reply = (
                "rejected",
                "conversion_failed",
                f"Converting {name!r} needed too much memory.",
                "The file may be a decompression bomb; if it is genuine, raise conversion_memory_mb.",
            )
        except Exception as exc:  # noqa: BLE001 - anything the engine throws is this file's failure
            reply = (
                "rejected",
                "conversion_failed",
                f"Could not convert {name!r}: {str(exc)[:300]}",
                "The file is probably malformed; re-export it and try again.",
            )
        _deadline(0)
        write_message(channel, reply)


if __name__ == "__main__":
    main()
