"""Aggregates computed from raw samples, with numpy: the twins of what a TSDB computes in PromQL.

Used by sources that hold raw samples (the simulated, in-memory source) with the same definitions
as the queries (``quantile_over_time``'s linear interpolation, ``increase``'s counter resets,
``resets`` for run counts), so that both kinds of source give the detectors the same numbers. Its
own module so that only those sources load numpy (``analyzer.sources.aggregates`` is the model).
"""

from __future__ import annotations

import numpy as np

from analyzer.sources.aggregates import (
    CloserLook,
    DeviceSamples,
    Phases,
    Shares,
    SpanNumbers,
    UtilStats,
    histogram_shares,
    phases_from_counts,
)
from common.model import TimeWindow


def util_stats(values: np.ndarray, q_level: float) -> UtilStats | None:
    """Mean, max and two quantiles with ``quantile_over_time``'s linear interpolation."""
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return None
    q_low, median, q_high = np.quantile(finite, [q_level, 0.5, 1.0 - q_level])
    return UtilStats(
        samples=int(finite.size),
        mean=float(finite.mean()),
        max=float(finite.max()),
        q_low=float(q_low),
        q_high=float(q_high),
        q_level=q_level,
        median=float(median),
    )


def sample_shares(values: np.ndarray, idle_percent: float, busy_percent: float) -> Shares | None:
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return None
    return Shares(
        stalled=float((finite <= idle_percent).mean()),
        busy=float((finite > busy_percent).mean()),
        weight=float(finite.size),
        source="samples",
    )


def run_count(state: np.ndarray) -> int:
    """Runs of True in a boolean sequence: each True followed by a False ends one, as does the end.

    The TSDB counts them the same way: ``resets`` of the 0/1 series plus its last value.
    """
    if state.size == 0:
        return 0
    return int(np.count_nonzero(state[:-1] & ~state[1:]) + bool(state[-1]))


def phase_lengths(
    timestamps: np.ndarray, values: np.ndarray, idle_percent: float, busy_percent: float
) -> Phases | None:
    """How long a GPU stays stalled, and busy, before switching: the time scale of its alternation.

    The mean run of each state, in sample intervals (the median gap between samples). Samples
    between the bounds end a run. None without both states. A TSDB computes the same from four
    aggregates (see ``analyzer.sources.span_queries``), so no raw samples are needed.
    """
    finite = np.isfinite(values)
    t, v = timestamps[finite], values[finite]
    if t.size < 2:
        return None
    stalled, busy = v <= idle_percent, v > busy_percent
    return phases_from_counts(
        float(stalled.sum()),
        run_count(stalled),
        float(busy.sum()),
        run_count(busy),
        float(np.median(np.diff(t))),
    )


def span_numbers_from_samples(
    look: CloserLook,
    samples: DeviceSamples,
    histogram_le: tuple[str, ...],
    idle: float,
    busy: float,
    q_level: float,
) -> SpanNumbers:
    """The numpy twin of the TSDB's span aggregates, for sources that hold raw samples."""
    cut = samples.between(look.span)
    stats = util_stats(cut.values, q_level) if look.stats else None
    histogram = None
    if look.histogram and len(histogram_le) == 3 and all(le in cut.buckets for le in histogram_le):
        inc = {le: counter_increase(cut.buckets[le][1]) for le in histogram_le}
        histogram = histogram_shares(inc[histogram_le[0]], inc[histogram_le[1]], inc[histogram_le[2]])
    shares = phases = None
    if look.shares:
        shares = sample_shares(cut.values, idle, busy)
        phases = phase_lengths(cut.timestamps, cut.values, idle, busy)
    return SpanNumbers(stats=stats, histogram=histogram, shares=shares, phases=phases)


def first_busy_from_samples(samples: DeviceSamples, span: TimeWindow, idle: float) -> float | None:
    """Time of the first sample above ``idle`` in (start, end] of ``span``."""
    cut = samples.between(span)
    busy = cut.timestamps[cut.values > idle]
    return float(busy[0]) if busy.size else None


def counter_increase(values: np.ndarray) -> float:
    """Increase of a counter over its samples; a drop means it restarted from zero, as in PromQL."""
    if values.size < 2:
        return 0.0
    steps = np.diff(values)
    # After a reset the counter counted from 0 to the new value.
    return float(np.where(steps >= 0, steps, values[1:]).sum())


def counter_rate(timestamps: np.ndarray, values: np.ndarray) -> float | None:
    """Per-second rate between the first and last sample (no extrapolation to the window edges)."""
    if values.size < 2 or timestamps[-1] <= timestamps[0]:
        return None
    return counter_increase(values) / float(timestamps[-1] - timestamps[0])
