"""``coffer serve`` (and ``coffer-mcp``): the MCP server on stdio, or over streamable HTTP with ``--http``.

Nothing of the server is imported before the command runs: the MCP SDK, the web app and the
core load in ``serve`` itself, so that ``coffer --help`` does not pay for them.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from coffer_mcp import __version__
from coffer_mcp.cli._output import EXIT_ERROR, print_error
from coffer_mcp.limits import AUTH_MODES

if TYPE_CHECKING:
    from coffer_mcp.errors import ConfigError
    from coffer_mcp.services import Coffer
    from coffer_mcp.settings import Settings

__all__ = ["add_serve", "check_serve", "serve", "serve_unconfigured"]

DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 8765  # coffer serve --http


def add_serve(p: argparse.ArgumentParser) -> None:
    p.add_argument("--http", action="store_true", help="serve MCP over streamable HTTP at /mcp, plus the viewer")
    # The HTTP options default to None so that one given without --http can be refused (check_serve).
    p.add_argument("--host", help=f"HTTP address to bind (default {DEFAULT_HOST})")
    p.add_argument("--port", type=_port, help=f"HTTP port (default {DEFAULT_PORT}; 0 picks a free one)")
    p.add_argument("--token", help="bearer token every HTTP request must carry (or COFFER_HTTP_TOKEN)")
    p.add_argument(
        "--auth",
        choices=AUTH_MODES,
        help="token: the HTTP token only; oauth: also be an OAuth 2.1 authorization server for the owner; external: "
        "also accept an identity provider's tokens (default: $COFFER_AUTH or token)",
    )
    p.add_argument(
        "--public-url", metavar="URL", help="the address clients reach the server at, behind a TLS proxy (OAuth issuer)"
    )
    p.add_argument("--json-response", action="store_true", help="answer HTTP requests with JSON, not SSE")
    p.add_argument(
        "--allowed-host",
        action="append",
        metavar="HOST[:PORT]",
        help="also accept this Host header (behind a reverse proxy); repeatable",
    )
    p.add_argument("--no-curation", action="store_true", help="expose only the seven core tools")
    p.add_argument("--read-only", action="store_true", help="expose no tool that writes")
    p.add_argument(
        "--allowed-dirs",
        nargs="*",
        metavar="DIR",
        help="folders coffer__ingest_path may read, instead of allowed_dirs (COFFER_ALLOWED_DIRS)",
    )


def _port(value: str) -> int:
    """``--port``: a TCP port number, 0 for a free one."""
    try:
        port = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a port number") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port: use 0-65535 (0 picks a free one)")
    return port


_HTTP_OPTIONS = {
    "host": "--host",
    "port": "--port",
    "token": "--token",
    "auth": "--auth",
    "public_url": "--public-url",
    "json_response": "--json-response",
    "allowed_host": "--allowed-host",
}


def check_serve(args: argparse.Namespace) -> None:
    """Refuse HTTP options without ``--http`` (exit 2): stdio would ignore them, a token above all."""
    if args.http:
        return
    given = [flag for name, flag in _HTTP_OPTIONS.items() if getattr(args, name) not in (None, False)]
    if given:
        verb = "is an option" if len(given) == 1 else "are options"
        args.command_parser.error(
            f"{', '.join(given)} {verb} of the HTTP server: add --http (without it, coffer serve speaks MCP on "
            "stdio and would ignore them)"
        )


def serve(args: argparse.Namespace, settings: Settings) -> int | None:
    if args.http:
        return _serve_http(args, settings)
    from coffer_mcp.mcp_server import build_server
    from coffer_mcp.services import Coffer

    coffer = Coffer(settings)
    server = build_server(coffer, curation=False if args.no_curation else None, read_only=args.read_only or None)
    _announce(f"COFFER_HOME={settings.home}")
    try:
        with _watching(coffer):
            server.run("stdio")
    finally:
        coffer.close()
    return None


def _watching(coffer: Coffer) -> contextlib.AbstractContextManager[object]:
    """The watcher a server runs while it serves (unless ``watch`` is off)."""
    return coffer.watching() if coffer.settings.watch else contextlib.nullcontext()


def serve_unconfigured(args: argparse.Namespace, error: ConfigError) -> int:
    """Serve stdio although the configuration does not load: every tool call answers with ``error``.

    A stdio server that exits before the handshake shows in an MCP client only as "connection
    closed", with the reason in a log the user rarely finds. Serving lets the agent read the
    problem, and its fix, in every tool result. Nothing touches COFFER_HOME meanwhile.
    """
    import logging

    from coffer_mcp.mcp_server import build_unconfigured_server

    print_error(error)
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    server = build_unconfigured_server(error, curation=not args.no_curation, read_only=args.read_only)
    _announce("the configuration is invalid, so every tool answers invalid_config until it is fixed")
    server.run("stdio")
    return EXIT_ERROR


def _serve_http(args: argparse.Namespace, settings: Settings) -> int:
    from coffer_mcp.services import Coffer
    from coffer_mcp.web import check_bind, serve_http

    token = args.token or (settings.http_token.get_secret_value() if settings.http_token else None)
    host = DEFAULT_HOST if args.host is None else args.host
    check_bind(host, token, settings.auth)  # before anything else: refuse to listen beyond loopback unprotected
    coffer = Coffer(settings)
    try:
        with _watching(coffer):
            serve_http(
                coffer,
                host=host,
                port=DEFAULT_PORT if args.port is None else args.port,
                token=token,
                json_response=args.json_response,
                allowed_hosts=args.allowed_host or [],
                curation=False if args.no_curation else None,
                read_only=args.read_only or None,
            )
    except KeyboardInterrupt:
        pass  # Ctrl-C is how an HTTP server is stopped
    finally:
        coffer.close()
    return 0


def _announce(state: str) -> None:
    """Say on stderr what this is, so a server started by hand in a terminal is not silent."""
    print(f"coffer-mcp {__version__}: MCP server on stdio; {state}", file=sys.stderr)
    if sys.stdin.isatty():
        import json
        import shlex

        command, *args = _own_command()
        config = {"mcpServers": {"coffer": {"command": command, "args": args}}}
        print(
            "  This process speaks the Model Context Protocol on stdin/stdout and waits for a client.\n"
            "  Connect one instead of typing here, e.g.:\n"
            f"    npx @modelcontextprotocol/inspector {shlex.join([command, *args])}\n"
            "  or add to Claude Desktop's claude_desktop_config.json:\n"
            f"    {json.dumps(config, ensure_ascii=False)}\n"
            "  Press Ctrl-C to stop.",
            file=sys.stderr,
        )


def _own_command() -> list[str]:
    """The command line that starts this server, from any folder: what a client should run.

    Right after the README's set-up ``coffer`` is not on PATH (it runs as ``.venv/bin/coffer``), so
    the banner names the running script by its absolute path, resolved as the README's ``realpath``
    (``..`` after a symlink is not its parent). Started as ``python -m coffer_mcp`` there is no
    script: this Python runs the package. ``stem``: on Windows the script is ``coffer.exe``.
    """
    script = Path(sys.argv[0])
    if script.stem in ("coffer", "coffer-mcp") and script.is_file():
        return [str(script.resolve()), *(["serve"] if script.stem == "coffer" else [])]
    return [sys.executable, "-m", "coffer_mcp", "serve"]
