"""Run the HTTP app with uvicorn: refuse an unprotected public bind, listen, say where, serve.

The socket is bound here rather than by uvicorn so the real port (``--port 0`` picks a free one)
is known before the app is built: the Host rule pins it, and the banner prints it. uvicorn runs
with the guards of ``_connections`` (request deadlines, a connection ceiling) on asyncio's own
loop and h11, the parts those guards are written against.
"""

from __future__ import annotations

import copy
import socket
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

import uvicorn
from uvicorn.config import LOGGING_CONFIG

from coffer_mcp import __version__
from coffer_mcp.errors import ConfigError
from coffer_mcp.services import Coffer
from coffer_mcp.web._app import AuthMode, build_app
from coffer_mcp.web._connections import ConnectionBook, ConnectionLimits, GuardedListener, GuardedServer
from coffer_mcp.web._resource import ExternalAuth
from coffer_mcp.web._security import TOKEN_RECIPE, check_token, is_loopback

__all__ = ["HttpServer", "bind_http", "check_bind", "check_owner", "serve_http"]

_GRACEFUL_SECONDS = 5  # open SSE streams would otherwise hold a Ctrl-C forever


def check_bind(host: str, token: str | None, auth: AuthMode = "token") -> None:
    """Refuse a weak token on any bind, and no authentication beyond loopback.

    An empty token means none; any other token must pass ``check_token`` (at least 16 visible
    characters, no padding), on loopback too: other local users and programs reach loopback.
    With OAuth on (``auth`` other than ``token``) every request needs a token anyway.

    Raises:
        ConfigError: (``invalid_config``) a weak token, or none for a non-loopback ``host``.
    """
    if token:
        check_token(token)
        return
    if is_loopback(host) or auth != "token":
        return
    shown = host or "all interfaces"
    raise ConfigError(
        f"Refusing to listen on {shown} without a token: anyone who can reach it could read and change "
        "your knowledge bases.",
        hint="Set COFFER_HTTP_TOKEN or pass --token, or serve OAuth (--auth oauth), or keep --host 127.0.0.1. "
        f"Make a token with: {TOKEN_RECIPE}",
    )


def check_owner(service: Coffer, token: str | None, auth: AuthMode) -> None:
    """The built-in authorization server needs a way for the owner to sign in: never a default password.

    Raises:
        ConfigError: ``auth`` is ``oauth`` and neither the HTTP token nor the owner's password is set.
    """
    if auth != "oauth" or token or service.authorization.has_password():
        return
    raise ConfigError(
        "The built-in authorization server has no way for you to sign in: no owner password and no HTTP token.",
        hint="Set a password with 'coffer auth set-password' (stored as a salted hash in the index), or set "
        f"COFFER_HTTP_TOKEN (make one with: {TOKEN_RECIPE}).",
    )


@dataclass
class HttpServer:
    """A bound, not yet serving, uvicorn server over the Coffer app."""

    server: uvicorn.Server
    sock: socket.socket
    host: str
    port: int
    token_required: bool
    auth: AuthMode = "token"
    _thread: threading.Thread | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        """The base URL (a wildcard bind is reached through loopback)."""
        host = self.host.strip("[]")
        host = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
        return f"http://[{host}]:{self.port}" if ":" in host else f"http://{host}:{self.port}"

    def run(self) -> None:
        """Serve until interrupted (blocking; Ctrl-C stops it when run on the main thread)."""
        try:
            self.server.run(sockets=[self.sock])
        finally:
            self.sock.close()

    def start(self) -> None:
        """Serve on a background thread (tests, embedding); ``stop()`` ends it."""
        self._thread = threading.Thread(target=self.run, name="coffer-http", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Ask the server to exit and wait for its thread.

        Raises:
            TimeoutError: the server did not stop within ``timeout`` seconds.
        """
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise TimeoutError(f"the HTTP server did not stop within {timeout} s")

    def banner(self) -> str:
        """The one line saying where the server listens and how to connect."""
        if self.auth == "oauth":
            how = "OAuth: MCP clients sign you in by themselves; scripts send the HTTP token"
        elif self.auth == "external":
            how = "OAuth with the external identity provider; scripts send the HTTP token"
        elif self.token_required:
            how = "token required: send 'Authorization: Bearer <token>'; the viewer asks for it once"
        else:
            how = "no token (loopback only)"
        return f"coffer-mcp {__version__}: MCP over streamable HTTP at {self.url}/mcp, viewer at {self.url}/ ({how})"


def bind_http(
    service: Coffer,
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    token: str | None = None,
    json_response: bool = False,
    allowed_hosts: Sequence[str] = (),
    curation: bool | None = None,
    read_only: bool | None = None,
    auth: AuthMode | None = None,
    public_url: str | None = None,
    external: ExternalAuth | None = None,
) -> HttpServer:
    """Check the bind, listen on ``host:port`` and prepare the server (call ``run`` or ``start``).

    ``auth`` and ``public_url`` default to the settings' (see ``build_app``).

    Raises:
        ConfigError: a weak token, an unprotected public bind, an unusable address or port, a bad
            allowed host, OAuth without a way for the owner to sign in or without a public address.
    """
    auth = service.settings.auth if auth is None else auth
    public_url = public_url or service.settings.public_url
    check_bind(host, token, auth)
    check_owner(service, token, auth)
    book = ConnectionBook(ConnectionLimits.from_settings(service.settings))
    sock = _listen(host, port)
    sock.book = book
    bound_port = sock.getsockname()[1]
    try:
        app = build_app(
            service,
            token=token,
            json_response=json_response,
            allowed_hosts=allowed_hosts,
            curation=curation,
            read_only=read_only,
            host=host,
            port=bound_port,
            auth=auth,
            public_url=public_url,
            external=external,
        )
    except ValueError as exc:
        sock.close()
        raise ConfigError(f"Invalid allowed host: {exc}.", hint="Use a host name or host:port.") from exc
    except ConfigError:
        sock.close()
        raise
    config = uvicorn.Config(
        app,
        http=book.protocol_class(),
        loop="asyncio",
        ws="none",
        log_config=_stderr_logging(),
        log_level=service.settings.log_level.lower(),
        lifespan="on",
        timeout_graceful_shutdown=_GRACEFUL_SECONDS,
    )
    return HttpServer(GuardedServer(config, book), sock, host, bound_port, token_required=bool(token), auth=auth)


def serve_http(
    service: Coffer,
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    token: str | None = None,
    json_response: bool = False,
    allowed_hosts: Sequence[str] = (),
    curation: bool | None = None,
    read_only: bool | None = None,
    auth: AuthMode | None = None,
    public_url: str | None = None,
    external: ExternalAuth | None = None,
) -> None:
    """Serve MCP, the JSON API and the viewer over HTTP until interrupted (blocking).

    Logs go to stderr; one line on stderr says where it listens and how to connect.

    Raises:
        ConfigError: see ``bind_http``.
    """
    server = bind_http(
        service,
        host=host,
        port=port,
        token=token,
        json_response=json_response,
        allowed_hosts=allowed_hosts,
        curation=curation,
        read_only=read_only,
        auth=auth,
        public_url=public_url,
        external=external,
    )
    print(server.banner(), file=sys.stderr, flush=True)
    server.run()


def _listen(host: str, port: int) -> GuardedListener:
    address = host.strip("[]")
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = GuardedListener(family, socket.SOCK_STREAM)
    try:
        if sys.platform != "win32":
            # Restarting right after a stop must not fail on TIME_WAIT (Windows' flag means "steal").
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise ConfigError(
            f"Cannot listen on {host}:{port}: {exc.strerror or exc}.",
            hint="Pick another --port, or stop the program using it.",
        ) from exc
    return sock


def _stderr_logging() -> dict:
    """uvicorn's logging, with the access log on stderr too (its default is stdout)."""
    config = copy.deepcopy(LOGGING_CONFIG)
    config["handlers"]["access"]["stream"] = "ext://sys.stderr"
    return config
