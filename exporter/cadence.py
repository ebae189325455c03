"""How often each costly reading is taken: a cadence per reading, counted on the monotonic clock.

Most readings cost the driver microseconds and are taken every collection. A few cost milliseconds
per GPU (an H200 with driver 580, docs/exporter.md "Driver time"), and none of them loses anything by
being read less often: GPM ratios and per-process utilization are averages over the time between two
reads, the sample buffer keeps every sample until it is read (as long as it is read before it wraps),
and the costly counters are read through ``rate()`` over minutes. Counting on the monotonic clock, a
wall clock stepped back (NTP, a VM resumed) delays nothing.
"""

from __future__ import annotations

from typing import Final, NamedTuple


class Cadences(NamedTuple):
    """Collection intervals between two reads of each costly reading (1: every collection). At the
    default 5 s interval: GPM, the sample buffer and per-process utilization every 15 s, the costly
    counters every 30 s (as often as dcgm-exporter collects every field by default), and the MIG
    layout every 30 s only where the driver reports no MIG reconfiguration events."""

    gpm: int = 3
    #: At most; fewer where the sample buffer would wrap in between (:mod:`exporter.sample_buffer`).
    samples: int = 3
    process_utilization: int = 3
    slow_fields: int = 6
    mig_fallback: int = 6


DEFAULT_CADENCES: Final = Cadences()


class Cadence:
    """When one reading of one device is next due.

    Due once ``every_s`` has passed since the last read, less half a collection interval (``slack_s``):
    collections run on a fixed grid, so a read a few milliseconds short of its time is taken on its
    slot rather than a whole interval late. A clock that went backwards (only a test's can) makes the
    reading due rather than frozen."""

    __slots__ = ("_last", "every_s", "slack_s")

    def __init__(self, every_s: float, slack_s: float) -> None:
        self.every_s = every_s
        self.slack_s = slack_s
        self._last: float | None = None

    def due(self, now: float) -> bool:
        if self._last is None:
            return True
        elapsed = now - self._last
        return elapsed < 0 or elapsed >= self.every_s - self.slack_s

    def done(self, now: float) -> None:
        self._last = now

    def reset(self) -> None:
        """Due at the next collection."""
        self._last = None


def cadence(collections: int, interval_s: float) -> Cadence:
    """A cadence of ``collections`` collection intervals (at least one)."""
    return Cadence(max(collections, 1) * interval_s, 0.5 * interval_s)
