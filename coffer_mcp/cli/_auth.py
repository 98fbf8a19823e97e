"""``coffer auth set-password|clients|tokens|revoke``: the HTTP server's OAuth, from the owner's terminal."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from coffer_mcp.cli._output import emit, table
from coffer_mcp.cli._service import service
from coffer_mcp.errors import InvalidArgumentError

if TYPE_CHECKING:
    from coffer_mcp.settings import Settings

__all__ = ["add_revoke", "auth_clients", "auth_revoke", "auth_set_password", "auth_tokens"]


def add_revoke(p: argparse.ArgumentParser) -> None:
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--client", metavar="CLIENT_ID", help="forget a client and every token issued to it")
    which.add_argument("--grant", "--token", metavar="GRANT_ID", help="revoke one grant's tokens (coffer auth tokens)")


def auth_set_password(args: argparse.Namespace, settings: Settings) -> None:
    password = _read_password()
    with service(settings, args) as coffer:
        coffer.authorization.set_password(password)
    emit(
        args,
        {"password_set": True},
        lambda _: "owner password set: the consent page and the viewer accept it (stored as a salted scrypt hash)",
    )


def _read_password() -> str:
    """The new password: asked twice on a terminal, else the first line of stdin (never an argument)."""
    if sys.stdin.isatty():
        import getpass

        first = getpass.getpass("New owner password: ")
        if getpass.getpass("Again: ") != first:
            raise InvalidArgumentError("The two passwords differ; nothing was changed.", hint="Type the same twice.")
        return first
    return sys.stdin.readline().rstrip("\r\n")


def auth_clients(args: argparse.Namespace, settings: Settings) -> None:
    with service(settings, args) as coffer:
        clients = coffer.authorization.clients()
    emit(
        args,
        clients,
        lambda items: (
            table(
                ["CLIENT_ID", "NAME", "KIND", "GRANTS", "APPROVED"],
                [[c.client_id, c.name or "—", c.kind, c.grants, c.approved_at or "never"] for c in items],
            )
            if items
            else "no OAuth clients yet (they register when they first connect to coffer serve --http --auth oauth)"
        ),
    )


def auth_tokens(args: argparse.Namespace, settings: Settings) -> None:
    with service(settings, args) as coffer:
        grants = coffer.authorization.grants()
    emit(
        args,
        grants,
        lambda items: (
            table(
                ["GRANT", "CLIENT", "SUBJECT", "SCOPES", "GRANTED", "EXPIRES"],
                [
                    [
                        g.grant_id,
                        g.client_name or g.client_id,
                        g.subject,
                        " ".join(g.scopes),
                        g.granted_at,
                        g.expires_at,
                    ]
                    for g in items
                ],
            )
            if items
            else "no live grants"
        ),
    )


def auth_revoke(args: argparse.Namespace, settings: Settings) -> None:
    with service(settings, args) as coffer:
        if args.client is not None:
            coffer.authorization.revoke_client(args.client)
        else:
            coffer.authorization.revoke_grant(args.grant)
    what = f"client '{args.client}'" if args.client is not None else f"grant '{args.grant}'"
    emit(args, {"revoked": args.client or args.grant}, lambda _: f"revoked {what}: its tokens no longer work")
