"""Parsing and printing of the times and durations users type (``6h``, ``2026-01-01T00:00:00Z``)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Annotated

from pydantic import AfterValidator

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> timedelta:
    """Parse a Prometheus-style duration (``90s``, ``1h30m``, ``7d``); raises ValueError naming the text."""
    cleaned = text.strip()
    pos, total = 0, 0.0
    for match in _DURATION.finditer(cleaned):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    if not cleaned or pos != len(cleaned):
        raise ValueError(f"invalid duration {text!r}: use a number and a unit such as 30s, 15m, 6h, 7d")
    if total <= 0:
        raise ValueError(f"invalid duration {text!r}: must be positive")
    try:
        return timedelta(seconds=total)
    except OverflowError:
        raise ValueError(f"invalid duration {text!r}: longer than any date can hold") from None


def format_duration(value: timedelta) -> str:
    """The shortest Prometheus-style spelling of a whole-second duration (``6h``, ``1h30m``)."""
    seconds = int(value.total_seconds())
    if seconds <= 0:
        raise ValueError(f"duration must be positive, got {value}")
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)


def parse_time(text: str) -> datetime:
    """Parse an RFC 3339 timestamp or unix seconds into an aware UTC datetime.

    Every way the text can be wrong raises ValueError, out-of-range values included (``inf``, ``1e20``,
    ``0001-01-01T00:00:00+01:00``, which the datetime library reports as OverflowError or OSError): the
    text often comes from an annotation a tenant wrote, and callers skip that one object on ValueError.
    """
    cleaned = text.strip()
    try:
        seconds = float(cleaned)
    except ValueError:
        pass
    else:
        try:
            return datetime.fromtimestamp(seconds, tz=UTC)
        except (ValueError, OverflowError, OSError):
            raise ValueError(f"invalid time {text!r}: unix seconds out of range") from None
    try:
        parsed = datetime.fromisoformat(cleaned.replace("Z", "+00:00"))
    except ValueError as e:
        raise ValueError(f"invalid time {text!r}: use RFC 3339 (2026-01-01T00:00:00Z) or unix seconds") from e
    if parsed.tzinfo is None:
        raise ValueError(f"invalid time {text!r}: add a timezone, e.g. a trailing Z for UTC")
    try:
        return parsed.astimezone(UTC)
    except OverflowError:
        raise ValueError(f"invalid time {text!r}: out of range once in UTC") from None


def rfc3339(value: datetime) -> str:
    """UTC, second precision or finer, with a Z suffix."""
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def to_the_second(value: datetime) -> str:
    """For people: UTC to the second (``2026-01-01 12:00:05 UTC``); fractions only clutter a report."""
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _require_aware_utc(value: datetime) -> datetime:
    if value.tzinfo is UTC:
        return value  # the common case, checked first: every span a run builds is UTC already
    # Naive datetimes are the classic source of off-by-hours bugs in cron tools: refuse them.
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError("timestamp must carry a timezone (RFC 3339, e.g. 2026-01-01T00:00:00Z)")
    return value.astimezone(UTC)


AwareDatetime = Annotated[datetime, AfterValidator(_require_aware_utc)]
