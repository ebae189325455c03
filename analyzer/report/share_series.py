"""Stalled and busy shares over time, for the report's charts of a bimodal starvation.

The verdict rests on shares over the whole window; a chart shows the same shares bin by bin, from
the same signal: the exporter's sub-second sample histogram when the verdict used it, otherwise the
scraped samples. A bin with no samples is NaN (a gap in the line), never 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from analyzer.sources.aggregates import DeviceSamples
from common.model import TimeWindow

BINS = 48


@dataclass(frozen=True)
class ShareLine:
    """One GPU's stalled and busy shares (0-1) per bin of the window."""

    device_id: str
    node: str
    timestamps: np.ndarray  # bin middles, unix seconds
    stalled: np.ndarray
    busy: np.ndarray
    source: Literal["histogram", "samples"]


def _edges(window: TimeWindow, bins: int) -> np.ndarray:
    return np.linspace(window.start.timestamp(), window.end.timestamp(), bins + 1)


def _bin_of(timestamps: np.ndarray, edges: np.ndarray) -> np.ndarray:
    # A sample at a bin's right edge belongs to that bin, as a scrape ends the interval it covers.
    return np.clip(np.searchsorted(edges, timestamps, side="left") - 1, 0, len(edges) - 2)


def _binned_increase(timestamps: np.ndarray, counts: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Each bin's counter increase; a drop means the counter restarted from zero, as in PromQL."""
    bins = len(edges) - 1
    if counts.size < 2:
        return np.zeros(bins)
    steps = np.diff(counts)
    steps = np.where(steps >= 0, steps, counts[1:])
    return np.bincount(_bin_of(timestamps[1:], edges), weights=steps, minlength=bins)[:bins]


def _ratio(part: np.ndarray, whole: np.ndarray) -> np.ndarray:
    out = np.full(whole.shape, np.nan)
    np.divide(part, whole, out=out, where=whole > 0)
    return np.clip(out, 0.0, 1.0)


def from_histogram(
    raw: DeviceSamples, bounds: Sequence[str], window: TimeWindow, bins: int = BINS
) -> tuple[np.ndarray, np.ndarray] | None:
    """Stalled and busy shares per bin from the stalled, busy-bound and +Inf bucket counters."""
    if len(bounds) != 3 or not all(le in raw.buckets for le in bounds):
        return None
    edges = _edges(window, bins)
    stalled_le, busy_le, total_le = (_binned_increase(*raw.buckets[le], edges) for le in bounds)
    if not (total_le > 0).any():
        return None
    return _ratio(stalled_le, total_le), 1.0 - _ratio(busy_le, total_le)


def from_samples(
    raw: DeviceSamples, idle_percent: float, busy_percent: float, window: TimeWindow, bins: int = BINS
) -> tuple[np.ndarray, np.ndarray] | None:
    """Stalled and busy shares per bin from the scraped samples (the verdict's fallback signal)."""
    finite = np.isfinite(raw.values)
    if not finite.any():
        return None
    edges = _edges(window, bins)
    where = _bin_of(raw.timestamps[finite], edges)
    values = raw.values[finite]
    total = np.bincount(where, minlength=bins)[:bins].astype(float)
    stalled = np.bincount(where, weights=(values <= idle_percent).astype(float), minlength=bins)[:bins]
    busy = np.bincount(where, weights=(values > busy_percent).astype(float), minlength=bins)[:bins]
    return _ratio(stalled, total), _ratio(busy, total)


def bin_middles(window: TimeWindow, bins: int = BINS) -> np.ndarray:
    edges = _edges(window, bins)
    return (edges[:-1] + edges[1:]) / 2.0
