"""UTC ISO-8601 timestamps, the only time format Coffer writes."""

from __future__ import annotations

import datetime as dt

__all__ = ["from_epoch_ns", "utc_now"]


def utc_now() -> str:
    """Now, e.g. ``2026-11-30T07:27:36.123Z``."""
    return _iso(dt.datetime.now(dt.timezone.utc))


def from_epoch_ns(ns: int) -> str:
    """A file's ``st_mtime_ns`` as a timestamp (the fallback when frontmatter has none)."""
    return _iso(dt.datetime.fromtimestamp(ns / 1e9, dt.timezone.utc))


def _iso(moment: dt.datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
