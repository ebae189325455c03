"""Durations as configuration fields: ``30m``, ``6h``, ``7d`` in YAML, ``timedelta`` in code.

Shared by the analyzer's detection thresholds and the reaper's policy so both halves of the policy
file accept, refuse and print durations the same way.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, PlainSerializer, WithJsonSchema

from common.timeutil import format_duration, parse_duration

_DURATION_PATTERN = r"^(0|0s|(\d+(\.\d+)?(ms|s|m|h|d|w))+)$"

# The shortest window the analyzer judges (``analyze --window``, the policy's ``window``): less holds
# too few samples at the usual 30-60 s scrape interval for coverage and quantiles to mean anything.
MIN_ANALYSIS_WINDOW = timedelta(minutes=10)


def _duration(value: Any) -> Any:
    # Durations are written with a unit ("30m", "6h"); a bare number is ambiguous (seconds? hours?).
    if isinstance(value, timedelta):
        return value
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"expected a duration such as 30m, 6h or 7d, got {type(value).__name__}")
    text = str(value).strip()
    if text.startswith("-"):
        raise ValueError(f"duration {text!r} is negative; durations are 0 or more")
    if text in ("0", "0s"):
        return timedelta(0)
    if isinstance(value, int | float):
        raise ValueError(f"duration {text!r} has no unit; write it as {text}s, {text}m or {text}h")
    return parse_duration(text)


def _positive(value: timedelta) -> timedelta:
    if value <= timedelta(0):
        raise ValueError("must be longer than 0")
    return value


def format_setting(value: timedelta) -> str:
    """How a duration setting is printed: ``0s`` for none, else the shortest spelling (``1h30m``)."""
    return format_duration(value) if value > timedelta(0) else "0s"


_DURATION_SCHEMA = {
    "type": "string",
    "pattern": _DURATION_PATTERN,
    "description": "A duration with a unit: 90s, 30m, 6h, 1h30m, 7d.",
}

Duration = Annotated[
    timedelta,
    BeforeValidator(_duration),
    PlainSerializer(format_setting, return_type=str),
    WithJsonSchema(_DURATION_SCHEMA),
]
PositiveDuration = Annotated[
    timedelta,
    BeforeValidator(_duration),
    AfterValidator(_positive),
    PlainSerializer(format_setting, return_type=str),
    WithJsonSchema(_DURATION_SCHEMA),
]
