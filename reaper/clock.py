"""The reaper's clocks: injected, so that a replay runs at its ``--end`` and tests at a fixed time."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)
