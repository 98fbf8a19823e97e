"""UTC ISO-8601 timestamps, the only time format Coffer writes."""

from __future__ import annotations

import datetime as dt

__all__ = ["from_epoch_ns", "parse_time", "time_key", "utc_now"]


def utc_now() -> str:
    """Now, e.g. ``2026-11-30T07:27:36.123Z``."""
    return _iso(dt.datetime.now(dt.timezone.utc))


def from_epoch_ns(ns: int) -> str:
    """A file's ``st_mtime_ns`` as a timestamp (the fallback when frontmatter has none)."""
    return _iso(dt.datetime.fromtimestamp(ns / 1e9, dt.timezone.utc))


def parse_time(text: str) -> str:
    """An ISO 8601 date or time as Coffer writes times (UTC, milliseconds): ``2026-11-30T07:27:36.123Z``.

    A date is its midnight and a time without an offset is UTC, so every form compares by its text.

    Raises:
        ValueError: ``text`` is not an ISO 8601 date or date-time.
    """
    try:
        moment = dt.datetime.fromisoformat(text.strip())
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=dt.timezone.utc)
        return _iso(moment.astimezone(dt.timezone.utc))
    except (ValueError, TypeError, AttributeError, OverflowError):
        raise ValueError(f"{str(text)[:40]!r} is not an ISO 8601 date or time") from None


def time_key(text: str | None) -> str | None:
    """``parse_time(text)``, or None for a missing or unreadable time (a hand-written frontmatter's)."""
    try:
        return None if text is None else parse_time(text)
    except ValueError:
        return None


def _iso(moment: dt.datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
