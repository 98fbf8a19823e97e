"""A small Chrome DevTools Protocol client over a hand-written WebSocket (RFC 6455), for the viewer test.

Headless Chromium is started with ``--remote-debugging-port=0``; it prints its browser WebSocket
URL on stderr, which we read (no polling for a port file). Every socket read has a timeout, so
a stuck browser fails the test instead of hanging it. Waiting for the page is done *in the page*
(a promise polling a condition), never with sleeps here.
"""

from __future__ import annotations

import base64
import json
import os
import re
import selectors
import socket
import struct
import subprocess
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-dev-shm-usage",
    "--remote-debugging-port=0",
    "--window-size=1280,860",
]
_DEVTOOLS = re.compile(rb"DevTools listening on (ws://\S+)")


class CDPError(RuntimeError):
    """The browser answered a command with an error, or the connection broke."""


def launch(binary: str, profile: Path, timeout: float = 30.0) -> tuple[subprocess.Popen[bytes], str]:
    """Start headless Chromium and return it with its browser WebSocket URL."""
    process = subprocess.Popen(
        [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "about:blank"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        url = _read_devtools_url(process, timeout)
    except BaseException:
        stop(process)
        raise
    # Keep draining stderr: a full pipe would block the browser.
    threading.Thread(target=process.stderr.read, daemon=True).start()  # type: ignore[union-attr]
    return process, url


def _read_devtools_url(process: subprocess.Popen[bytes], timeout: float) -> str:
    deadline = time.monotonic() + timeout
    seen = b""
    with selectors.DefaultSelector() as selector:
        selector.register(process.stderr, selectors.EVENT_READ)  # type: ignore[arg-type]
        while (left := deadline - time.monotonic()) > 0:
            if not selector.select(left):
                break
            chunk = os.read(process.stderr.fileno(), 65536)  # type: ignore[union-attr]
            if not chunk:
                break
            seen += chunk
            if match := _DEVTOOLS.search(seen):
                return match.group(1).decode()
    raise CDPError(f"Chromium did not report its DevTools URL; stderr: {seen[-2000:].decode(errors='replace')}")


def stop(process: subprocess.Popen[bytes]) -> None:
    """Terminate the browser and reap it."""
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)
    if process.stderr is not None:
        process.stderr.close()


class WebSocket:
    """Just enough of a WebSocket client: text frames out (masked), text frames in, ping/pong."""

    def __init__(self, url: str, timeout: float = 30.0) -> None:
        parts = urlsplit(url)
        self.sock = socket.create_connection((parts.hostname, parts.port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        request = (
            f"GET {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        self.sock.sendall(request.encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise CDPError("the DevTools socket closed during the handshake")
            head += chunk
        status, _, self.buffer = head.partition(b"\r\n\r\n")
        if b" 101 " not in status.split(b"\r\n")[0] + b" ":
            raise CDPError(f"WebSocket handshake refused: {status[:200]!r}")

    def send(self, text: str) -> None:
        payload = text.encode()
        mask = os.urandom(4)
        size = len(payload)
        if size < 126:
            header = struct.pack("!BB", 0x81, 0x80 | size)
        elif size < 65536:
            header = struct.pack("!BBH", 0x81, 0x80 | 126, size)
        else:
            header = struct.pack("!BBQ", 0x81, 0x80 | 127, size)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(header + mask + masked)

    def receive(self) -> str:
        message = b""
        while True:
            first, second = self._exact(2)
            opcode, size = first & 0x0F, second & 0x7F
            if size == 126:
                size = struct.unpack("!H", self._exact(2))[0]
            elif size == 127:
                size = struct.unpack("!Q", self._exact(8))[0]
            payload = self._exact(size)  # servers never mask
            if opcode == 0x9:  # ping
                self.sock.sendall(struct.pack("!BB", 0x8A, 0x80 | len(payload)) + b"\0\0\0\0" + payload)
                continue
            if opcode == 0x8:
                raise CDPError("the browser closed the DevTools connection")
            message += payload
            if first & 0x80:
                return message.decode()

    def _exact(self, size: int) -> bytes:
        while len(self.buffer) < size:
            chunk = self.sock.recv(max(65536, size - len(self.buffer)))
            if not chunk:
                raise CDPError("the DevTools connection closed")
            self.buffer += chunk
        out, self.buffer = self.buffer[:size], self.buffer[size:]
        return out

    def close(self) -> None:
        self.sock.close()


class Page:
    """One browser tab driven over a flattened CDP session."""

    def __init__(self, ws: WebSocket) -> None:
        self.ws = ws
        self._next = 0
        target = self._call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self._call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.send("Page.enable")
        self.send("Runtime.enable")
        self.resize(1280, 860)
        self.console: list[str] = []

    def _call(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict[str, Any]:
        self._next += 1
        message: dict[str, Any] = {"id": self._next, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        self.ws.send(json.dumps(message))
        while True:
            reply = json.loads(self.ws.receive())
            if reply.get("method") == "Runtime.exceptionThrown":
                self.console.append(json.dumps(reply["params"]["exceptionDetails"])[:500])
            if reply.get("id") == self._next:
                if "error" in reply:
                    raise CDPError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def send(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """A command to this tab."""
        return self._call(method, params, self.session)

    def evaluate(self, expression: str) -> Any:
        """Evaluate JavaScript in the page (awaiting a promise) and return its JSON value."""
        result = self.send(
            "Runtime.evaluate",
            {"expression": expression, "awaitPromise": True, "returnByValue": True, "userGesture": True},
        )
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            raise CDPError(details.get("exception", {}).get("description") or details.get("text"))
        return result["result"].get("value")

    def wait_for(self, condition: str, timeout_ms: int = 15000) -> Any:
        """Wait, inside the page, until the JavaScript ``condition`` is truthy; return its value."""
        script = f"""new Promise((resolve, reject) => {{
            const started = performance.now();
            const poll = () => {{
                let value;
                try {{ value = ({condition}); }} catch (error) {{ value = undefined; }}
                if (value) return resolve(value);
                if (performance.now() - started > {timeout_ms})
                    return reject(new Error("timed out waiting for: " + {json.dumps(condition)}));
                setTimeout(poll, 25);
            }};
            poll();
        }})"""
        return self.evaluate(script)

    def resize(self, width: int, height: int) -> None:
        """Make the tab's window ``width`` x ``height`` CSS pixels (a desktop window, not a phone's)."""
        self.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )

    def goto(self, url: str) -> None:
        self.send("Page.navigate", {"url": url})
        self.wait_for("document.readyState === 'complete' && location.href !== 'about:blank'")

    def screenshot(self, path: Path) -> Path:
        data = self.send("Page.captureScreenshot", {"format": "png"})["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path
