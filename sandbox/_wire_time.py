"""Timestamps as the engines write them (the Docker Engine API, the Kubernetes API): RFC 3339
text or Unix seconds, read leniently into aware datetimes, once for every backend."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any, Final

__all__ = ["engine_time"]

#: RFC 3339 as Go writes it (time.RFC3339Nano): up to nine fraction digits, "Z" or an offset.
_RFC3339: Final = re.compile(
    r"(?P<date>\d{4}-\d{2}-\d{2})[Tt ](?P<time>\d{2}:\d{2}:\d{2})"
    r"(?:\.(?P<frac>\d+))?(?P<offset>[Zz]|[+-]\d{2}:\d{2})?"
)


def engine_time(value: Any) -> datetime | None:
    """An engine time: RFC 3339 text (inspect, stats) or Unix seconds (list answers).

    Returns an aware datetime (UTC when the text has no offset), or None for Go's zero time,
    a missing value or one that is not a time. Digits past microseconds are dropped.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value, UTC) if value > 0 else None
    if not isinstance(value, str):
        return None
    match = _RFC3339.fullmatch(value.strip())
    if match is None or match["date"].startswith("0001-"):
        return None
    frac = f".{match['frac'][:6]}" if match["frac"] else ""
    offset = match["offset"] or "Z"
    offset = "+00:00" if offset in "Zz" else offset
    try:
        return datetime.fromisoformat(f"{match['date']}T{match['time']}{frac}{offset}")
    except ValueError:
        return None
