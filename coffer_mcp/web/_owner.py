"""The store's owner signing in: with the admin token or the owner's password, wrong guesses throttled.

The consent page and the viewer's login form both ask for the owner's secret: the HTTP token
(``COFFER_HTTP_TOKEN``) or the password set with ``coffer auth set-password`` (checked with
scrypt, on a worker thread). After ``MAX_FAILURES`` wrong secrets within ``WINDOW_SECONDS`` this
process answers every sign-in with "too many attempts" until the window has passed, the right
secret included, so a guesser gets a handful of tries per window instead of thousands. The count
is per process (several servers of a team each keep their own).
"""

from __future__ import annotations

import collections
import enum
import hmac
import threading
import time
from collections.abc import Callable

import anyio.to_thread

from coffer_mcp.services.authorization import AuthorizationService

__all__ = ["MAX_FAILURES", "WINDOW_SECONDS", "OwnerSignIn", "SignIn"]

MAX_FAILURES = 5
WINDOW_SECONDS = 300.0


class SignIn(enum.Enum):
    """What a presented secret is."""

    TOKEN = "token"
    """The HTTP token."""
    PASSWORD = "password"
    """The owner's password."""
    WRONG = "wrong"
    THROTTLED = "throttled"
    """Not checked: too many wrong secrets lately (``retry_after`` says for how long)."""


class OwnerSignIn:
    """Checks the owner's secret, throttling wrong guesses.

    Args:
        auth: Holds the owner's password hash.
        token: The HTTP token, if one is configured.
        clock: Monotonic seconds (tests pass their own).
    """

    def __init__(
        self, auth: AuthorizationService, token: str | None, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.auth = auth
        self.token = token
        self.clock = clock
        self._failures: collections.deque[float] = collections.deque()
        self._lock = threading.Lock()

    async def check(self, secret: str | None) -> SignIn:
        """What ``secret`` is; a wrong one counts towards the throttle."""
        if self.retry_after() > 0:
            return SignIn.THROTTLED
        given = secret or ""
        if self.token and _same(given, self.token):
            return SignIn.TOKEN
        matches: bool = bool(given) and await anyio.to_thread.run_sync(self.auth.check_password, given)
        if matches:
            return SignIn.PASSWORD
        with self._lock:
            self._failures.append(self.clock())
        return SignIn.WRONG

    def retry_after(self) -> float:
        """Seconds until a secret is checked again (0: now)."""
        now = self.clock()
        with self._lock:
            while self._failures and self._failures[0] <= now - WINDOW_SECONDS:
                self._failures.popleft()
            if len(self._failures) < MAX_FAILURES:
                return 0.0
            return self._failures[0] + WINDOW_SECONDS - now


def _same(given: str, expected: str) -> bool:
    """``_security.tokens_equal``'s rule (constant time, blank never matches), kept here so that the
    guard may use this module without a circle."""
    return bool(given.strip()) and hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8"))
