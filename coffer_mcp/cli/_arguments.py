"""Argument shapes several commands share: a knowledge base's name, a document, filters, a switch."""

from __future__ import annotations

import argparse

__all__ = ["add_doc", "add_filters", "add_name", "add_switch"]


def add_name(p: argparse.ArgumentParser) -> None:
    p.add_argument("name")


def add_doc(p: argparse.ArgumentParser) -> None:
    p.add_argument("name")
    p.add_argument("doc_id")


def add_switch(p: argparse.ArgumentParser, name: str, on: str, off: str) -> None:
    """``--NAME`` / ``--no-NAME``: either, or neither (None: unchanged); both is a usage error.

    Not ``BooleanOptionalAction``: its two flags are one action, which argparse lets repeat, so
    ``--vector --no-vector`` would pass with the last one winning.
    """
    dest = name.replace("-", "_")
    pair = p.add_mutually_exclusive_group()
    pair.add_argument(f"--{name}", dest=dest, action="store_true", help=on)
    pair.add_argument(f"--no-{name}", dest=dest, action="store_false", help=off)
    p.set_defaults(**{dest: None})


def add_filters(p: argparse.ArgumentParser) -> None:
    """The filter options of ``search``, ``grep`` and ``documents``: the MCP tools' ``filters``, one flag per key."""
    group = p.add_argument_group("filters", "only documents matching all of these")
    group.add_argument(
        "--tag", dest="tags", action="append", metavar="TAG", help="carrying this tag (repeat: all of them)"
    )
    group.add_argument(
        "--path-prefix",
        metavar="PATH",
        help="ingested from this path or from under it as a folder (~/papers is not ~/papers-old)",
    )
    group.add_argument(
        "--format",
        dest="formats",
        action="append",
        metavar="EXT",
        help="of this original format, e.g. pdf (repeat: any of them)",
    )
    for field in ("created", "updated"):
        group.add_argument(f"--{field}-after", metavar="TIME", help=f"{field} at or after this ISO 8601 date or time")
        group.add_argument(f"--{field}-before", metavar="TIME", help=f"{field} before this ISO 8601 date or time")
