"""One GPU's sub-second utilization samples: what was taken from the driver's buffer, and how often it
must be read so that none is lost.

The driver keeps the samples in a ring (``nvmlDeviceGetSamples``; nvml.h: asked with samples NULL it
answers "the number of samples that can be queried", and asked from timestamp 0 it returns "all the
samples maintained by the underlying buffer"). A read that comes after the ring wrapped has lost the
overwritten samples, and the histogram would no longer be exact. So the ring's depth is measured
here, from the driver's own answers: a read from timestamp 0 returns all it holds, and the most
samples one answer held is the depth (a ring not yet full under-reports it, which only makes reads
more frequent). Reads are then spaced by at most the ring's span (depth × sample period) less half a
collection interval; a read that still finds the ring rolled past the newest sample taken counts
the loss.
"""

from __future__ import annotations

import math
from typing import Final

from exporter.readings import UtilizationSamples

#: NVML's GPU-utilization sample period is 1/6 s to 1 s by product; until a device's own samples have
#: shown it, the shortest is assumed (most idle time is then counted, never less than was seen).
DEFAULT_PERIOD_US: Final = 1_000_000 // 6
#: While the measured depth holds reads below their cadence, the whole ring is asked for this often, so
#: a ring that was not yet full when first measured is measured again.
PROBE_EVERY_S: Final = 60.0
#: A gap this many sample periods long between the newest sample taken and the oldest still held, in a
#: full ring, means the ring wrapped in between.
_WRAP_GAP: Final = 1.5


class SampleBuffer:
    """The reading state of one GPU's sample ring (kept across NVML sessions: the driver's ring is)."""

    __slots__ = ("_probed_at", "continuous", "depth", "lost_reads", "period_us", "since_us")

    def __init__(self) -> None:
        self.since_us = 0  # the newest sample taken (0: none yet)
        self.period_us: int | None = None
        self.depth = 0  # the most samples one answer held
        # The previous read of this ring succeeded and nothing since went unseen (no outage, no failed
        # read or collection): only then is time without samples known to be idle.
        self.continuous = False
        self.lost_reads = 0
        self._probed_at: float | None = None

    def ask_from(self, now: float, wanted: int, interval_s: float) -> int:
        """The timestamp to ask the driver from: 0 (the whole ring) on the first read, and once a
        minute while the measured depth keeps reads more frequent than ``wanted``; else the newest
        sample taken (the driver then answers only newer ones)."""
        if self.since_us == 0:
            return 0
        limited = self.collections(wanted, interval_s) < wanted
        if limited and (self._probed_at is None or now - self._probed_at >= PROBE_EVERY_S):
            return 0
        return self.since_us

    def collections(self, wanted: int, interval_s: float) -> int:
        """Collection intervals between two reads: ``wanted``, or fewer so the ring cannot wrap in
        between (every collection while its depth is unknown)."""
        if self.depth < 2:
            return 1
        span_s = self.depth * (self.period_us or DEFAULT_PERIOD_US) / 1e6
        fits = math.floor((span_s - 0.5 * interval_s) / interval_s)
        return max(1, min(wanted, fits))

    def took(
        self, samples: UtilizationSamples, asked_from: int, now: float, now_us: int, gauge: float | None
    ) -> tuple[int, ...]:
        """The percents to count from a read that answered ``samples`` (only those newer than the newest
        taken before). With none new, the time since the newest sample counts as idle samples at the
        ring's period when the utilization gauge confirms 0 % (the driver records no samples while some
        GPUs sit idle); otherwise it stays "nothing new", never invented activity."""
        if asked_from == 0:
            self._probed_at = now
        period = self.period_us or DEFAULT_PERIOD_US
        full = self.depth >= 2 and samples.buffered >= self.depth
        if (
            self.continuous
            and self.since_us
            and full
            and samples.oldest_us - self.since_us > _WRAP_GAP * period
        ):
            self.lost_reads += 1
        self.depth = max(self.depth, samples.buffered)
        continuous, self.continuous = self.continuous, True
        percents = samples.percents
        if percents:
            if len(percents) > 1 and samples.last_us > samples.first_us:  # the driver samples on a grid
                self.period_us = (samples.last_us - samples.first_us) // (len(percents) - 1)
            self.since_us = max(self.since_us, samples.last_us)
            return percents
        since = self.since_us
        if since == 0 or not continuous:  # only time a previous read saw counts: start from now
            self.since_us = max(since, now_us)
            return ()
        if gauge != 0:
            return ()
        count = max(0, (now_us - since) // period)
        if count:
            self.since_us = since + count * period
        return (0,) * count

    def unread(self) -> None:
        """A read failed, or the GPU or NVML was away: the time until the next read is not known idle."""
        self.continuous = False
