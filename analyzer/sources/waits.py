"""Stalled-job waits counted where the samples are: the TSDB's side of the stalled-job rule.

A sample *waits* when its holder's utilization is at least a busy line while its board draws at
most a share of the board's power limit, and no clock-event reason says the board was capped or
throttled (its low power is then the cap's). Counting them for every busy GPU costs one subquery
per holder at the step of its data, so only the jobs whose counts pass the rule's threshold have
their raw samples read (``analyzer.detection.stalled_job`` reads those).

``board_waits`` is the PromQL of the board's side, one row per GPU (``UUID``) at each evaluation:
its power (either DCGM naming) at most ``power_ratio`` of its limit (the enforced one where it
serves one, else the one set, else its model's datasheet figure), less the GPUs whose reasons
name a cap. ``counted_waits`` is the same count over samples
in memory, for the in-memory source: each utilization sample paired with the newest power, limit
and reasons at or before it, as a TSDB's lookback pairs them.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import NamedTuple

from analyzer.sources import promql, vocabulary
from analyzer.sources.aggregates import GpuReadings, Points
from analyzer.sources.dcgm import UUID
from analyzer.sources.promql import Matcher, one_of

# NVML's clock-event reasons that lower the power a busy board may draw: SW power cap (0x4), HW
# slowdown (0x8), SW thermal (0x20), HW thermal (0x40), HW power brake (0x80). Idle (0x1),
# application clocks (0x2), sync boost (0x10) and display clocks (0x100) do not. PromQL has no
# bitwise AND: bits 2-3 are ``floor(x / 4) % 4``, bits 5-7 ``floor(x / 32) % 8``.
CAPPING_REASONS = 0x4 | 0x8 | 0x20 | 0x40 | 0x80
# How far back an evaluation finds a sample (Prometheus' default lookback).
LOOKBACK = timedelta(minutes=5)


def capped(reasons: float) -> bool:
    """Whether clock-event reasons (NVML's bitmask) name a cap or a throttle."""
    return bool(int(reasons) & CAPPING_REASONS)


@dataclass(frozen=True)
class WaitRule:
    """What makes a sample wait: utilization at least ``busy_percent`` at most ``power_ratio`` of
    the board's limit; ``datasheet`` holds the limit (watts) of GPUs whose exporter may serve none,
    by UUID (a GPU in neither has no limit: its samples never wait)."""

    busy_percent: float
    power_ratio: float
    datasheet: Mapping[str, float] = field(default_factory=dict)


class WaitCounts(NamedTuple):
    """A holder's samples over a span, and how many of them waited."""

    samples: float
    waiting: float


def _names(names: Sequence[str], scope: Sequence[Matcher], uuids: Sequence[str]) -> str:
    return promql.selector("", [*scope, one_of("__name__", names), one_of(UUID, uuids)])


def board_waits(scope: Sequence[Matcher], uuids: Sequence[str], rule: WaitRule) -> str:
    """The GPUs among ``uuids`` whose board, at the evaluation time, draws at most the rule's share
    of its limit and names no cap: one row per ``UUID``. Every name is in watts in both namings
    (``vocabulary``), so the names of a reading are one selector."""
    ordered = sorted(set(uuids))
    power = promql.aggregate("max", (UUID,), _names(vocabulary.POWER, scope, ordered))
    # The enforced limit where served, else the one set (``or`` keeps the first field's row).
    served = " or ".join(
        f"({promql.aggregate('max', (UUID,), f'{_names(names, scope, ordered)} > 0')})"
        for names in vocabulary.fields(vocabulary.POWER_LIMIT)
    )
    by_watts: dict[float, list[str]] = defaultdict(list)
    for uuid in ordered:
        if (watts := rule.datasheet.get(uuid)) is not None:
            by_watts[watts].append(uuid)
    sheets = [
        f"{promql.aggregate('group', (UUID,), _names(vocabulary.POWER, scope, held))} * {promql.number(w)}"
        for w, held in sorted(by_watts.items())
    ]
    limit = " or ".join(f"({part})" for part in (served, *sheets))
    reasons = _names(vocabulary.CLOCK_EVENTS, scope, ordered)
    caps = promql.aggregate("max", (UUID,), f"floor({reasons} / 4) % 4 + floor({reasons} / 32) % 8") + " > 0"
    ratio = promql.number(rule.power_ratio)
    return f"(({power}) <= {ratio} * ({limit})) unless on ({UUID}) ({caps})"


def counted_waits(readings: GpuReadings, start: float, end: float, rule: WaitRule, uuid: str) -> WaitCounts:
    """``board_waits`` over one holder's samples in ``(start, end]``, as a TSDB evaluates it at each
    utilization sample: the newest power, limits and reasons within the lookback."""
    util = [(t, v) for t, v in readings.util if start < t <= end]
    reach = LOOKBACK.total_seconds()
    limit_sheet = rule.datasheet.get(uuid)
    waiting = 0
    for at, percent in util:
        if percent < rule.busy_percent:
            continue
        watts = _newest(readings.power, at, reach)
        if watts is None:
            continue
        served = _newest(readings.limit, at, reach)
        limit = served if served is not None and served > 0 else limit_sheet
        if limit is None or watts > rule.power_ratio * limit:
            continue
        reasons = _newest(readings.clock_events, at, reach)
        if reasons is not None and capped(reasons):
            continue
        waiting += 1
    return WaitCounts(float(len(util)), float(waiting))


def _newest(points: Points, at: float, reach: float) -> float | None:
    """The value of the newest of ``points`` at or before ``at``, within ``reach`` seconds."""
    i = bisect_right(points, (at, float("inf")))
    if i == 0 or at - points[i - 1][0] > reach:
        return None
    return points[i - 1][1]
