"""The optional recording rules of ``alerts/gpu-analyzer.recording.yaml``, and how the snapshot reads them.

Every 5 minutes one rule per utilization metric records, per series (all its labels kept, plus
``rollup``), the count, sum and maximum of its samples over one 5-minute span, and the fleet's
total count. A rollup stamped t covers ``(t - 6m, t - 1m]``: the span's edges are "rollup edges".
Where the rollups cover a window ``(start, end]``, the snapshot's count, sum, max and series count
come from three parts per holder, all computed by the TSDB in one query per aggregate:

* the lead ``(start, a]``, ``a`` the first rollup edge after ``start``: raw samples, read with the
  raw query's own range selector, so ``start`` counts exactly as it does without rules;
* the interior ``(a, b]``, whole 5-minute spans: the rollups, ``b`` the last edge before ``end``;
* the trail ``(b, end]``: raw samples, as ``[b - 5m, end]`` minus ``[b - 5m, b]``, left-open
  whatever the TSDB's range semantics.

Counts and maxima are exact; sums are exact up to float rounding (they are added in another
order). Quantiles cannot be composed from rollups and stay on raw samples.

A metric's rollups are used only when the fleet series shows an evaluation for every span of the
interior: each evaluation records every series with samples in its span, or nothing. Anything
else — rules absent, added mid-window, an evaluation missed — and the metric is read raw for that
run, as without rules.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from analyzer.sources import dcgm, promql
from analyzer.sources.fleet_queries import FleetQueries
from analyzer.sources.promql import Matcher
from common.model import TimeWindow

log = logging.getLogger(__name__)

STEP = timedelta(minutes=5)  # the rule group's interval, the rollups' range and the names' suffix
# A rollup stamped t covers (t - LAG - 5m, t - LAG]: by t every sample of that span has been
# appended, even one scraped just before it from a slow target (the rules' ``offset 1m``).
LAG = timedelta(minutes=1)
KINDS = ("count", "sum", "max")
FLEET = "fleet_count"
ROLLUP_LABEL = "rollup"  # which number a rollup series holds
_PART = "analyzer_part"  # tags the parts of one aggregate so ``or`` keeps a series' every part
CHECK_LABEL = "analyzer_check"
METRIC_LABEL = "analyzer_metric"


def rule_name(metric: str) -> str:
    """The one recorded metric holding ``metric``'s rollups (one rule: all of an evaluation or none)."""
    return promql.check_metric_name(f"gpu_analyzer:{metric}:rollup_5m")


def selector(metric: str, kind: str, scope: Sequence[Matcher] = ()) -> str:
    """The rollup series of one kind: count, sum, max, or the fleet-wide count (within ``scope``)."""
    return promql.selector(rule_name(metric), [*scope, promql.eq(ROLLUP_LABEL, kind)])


# The metrics alerts/gpu-analyzer.recording.yaml rolls up: DCGM's, under both namings (one rule per
# name). A shared GPU's per-pod series are few and its holders young more often than not; they are
# read raw.
ROLLED_UP = tuple(name for name in dcgm.UTIL_METRICS if name != dcgm.POD_SM_UTIL)
ALL_NAMES = tuple(rule_name(metric) for metric in ROLLED_UP)


def recorded(present: Collection[str], util_metrics: Sequence[str]) -> tuple[str, ...]:
    """The utilization metrics whose rollups exist."""
    return tuple(m for m in util_metrics if m in ROLLED_UP and rule_name(m) in present)


@dataclass(frozen=True)
class Cover:
    """Where one metric's rollups cover a window ``(start, end]``, as lengths back from ``end``:
    the lead ``(start, a]``, the interior ``(a, b]`` (whole rollup steps) and the trail ``(b, end]``."""

    lead: timedelta
    interior: timedelta
    trail: timedelta

    @property
    def steps(self) -> int:
        return round(self.interior / STEP)


def cover(window: TimeWindow, latest: datetime) -> Cover | None:
    """The split of ``window`` around the rollups' spans, ``latest`` being the stamp of the last
    evaluation at or before its end; None when no whole step fits between the first span edge after
    ``start`` and the end of the last span."""
    b = latest - LAG
    if latest > window.end or b <= window.start:
        return None
    a = b - STEP * ((b - window.start) // STEP)
    if a <= window.start:
        a += STEP  # the lead is never empty: its left end must behave as the raw query's does
    if a >= b:
        return None
    return Cover(lead=a - window.start, interior=b - a, trail=window.end - b)


def missing(cover_: Cover, evaluations: float | None) -> str | None:
    """Why the rollups cannot stand in for raw samples over ``cover_``'s interior (None if they can).

    One rule records every series' rollups and the fleet count together, and each evaluation sees
    every series that had samples in its 5 minutes: an evaluation at every rollup instant of the
    interior is all that completeness takes."""
    found = round(evaluations or 0.0)
    if found != cover_.steps:
        return f"{found} of the {cover_.steps} evaluations in the window recorded"
    return None


def _ranged(metric: str, length: timedelta, back: timedelta) -> str:
    text = promql.ranged(metric, length)
    return f"{text} offset {promql.duration(back)}" if back > timedelta(0) else text


def _interior(cover_: Cover) -> timedelta:
    # Half a step short of (a, b]: the range holds the rollups a + 5m … b whether or not it includes
    # its left end, and a rollup stamped a few milliseconds late still falls inside.
    return cover_.interior - STEP / 2


def latest_query(metrics: Sequence[str], scope: Sequence[Matcher] = ()) -> str:
    """When each metric's rollups were last evaluated (``timestamp`` of the plain selector is the
    sample's own time)."""
    parts = [
        f"label_replace(timestamp({selector(m, FLEET, scope)}), "
        f'"{METRIC_LABEL}", "{promql.escape(m)}", "", "")'
        for m in metrics
    ]
    return " or ".join(parts)


def check_query(covers: Mapping[str, Cover], scope: Sequence[Matcher] = ()) -> str:
    """How many evaluations recorded each metric's rollups over its interior: one number per metric."""
    parts = [
        f"label_replace(count_over_time({_ranged(selector(m, FLEET, scope), _interior(c), c.trail - LAG)}), "
        f'"{METRIC_LABEL}", "{promql.escape(m)}", "", "")'
        for m, c in covers.items()
    ]
    return " or ".join(parts)


def _tag(expr: str, part: str) -> str:
    return f'label_replace({expr}, "{_PART}", "{part}", "", "")'


@dataclass(frozen=True)
class RolledUpQueries(FleetQueries):
    """``FleetQueries`` whose per-holder count, sum, max and series count read the rollups of the
    metrics in ``covers`` for the window's interior, and raw samples for its edges only."""

    covers: Mapping[str, Cover] = field(default_factory=dict)

    def _trail(self, func: str, metric: str, c: Cover) -> str:
        """``func`` over (b, end]: [b - 5m, end] minus [b - 5m, b], whatever the range semantics."""
        whole = f"{func}({_ranged(self._sel(metric), c.trail + STEP, timedelta(0))})"
        before = f"{func}({_ranged(self._sel(metric), STEP, c.trail)})"
        # A series without samples before b has no `before`: it subtracts nothing.
        difference = f"{whole} - ({before} or 0 * {whole})"
        # Series whose samples all lie before b come out at 0: no part of the trail for a count
        # (nor for the series count); a sum of 0 for a holder the counts do not list is never read.
        return f"({difference} > 0)" if func == "count_over_time" else f"({difference})"

    def _parts(self, metric: str, raw_func: str, kind: str, rollup_func: str) -> list[tuple[str, str]]:
        c = self.covers[metric]
        # Rollups are stamped LAG after the span they cover.
        rollup = (
            f"{rollup_func}({_ranged(selector(metric, kind, self.caps.scope), _interior(c), c.trail - LAG)})"
        )
        parts = [
            ("lead", f"{raw_func}({_ranged(self._sel(metric), c.lead, c.interior + c.trail)})"),
            # Without its ``rollup`` label a rollup series carries exactly its raw series' labels.
            ("rollups", f'label_replace({rollup}, "{ROLLUP_LABEL}", "", "", "")'),
        ]
        if c.trail > timedelta(0):  # always, LAG at least; kept for a LAG of 0
            if raw_func == "max_over_time":
                # A maximum may see b's sample twice: [b, end] is as good as (b, end].
                trail = f"max_over_time({_ranged(self._sel(metric), c.trail, timedelta(0))})"
            else:
                trail = self._trail(raw_func, metric, c)
            parts.append(("trail", trail))
        return parts

    def _composed(self, op: str, labels: Sequence[str], metric: str, raw: str, kind: str, rollup: str) -> str:
        union = " or ".join(_tag(expr, part) for part, expr in self._parts(metric, raw, kind, rollup))
        return promql.aggregate(op, labels, union)

    def device_count(self, metric: str) -> str:
        if metric not in self.covers:
            return super().device_count(metric)
        labels = self.caps.identity_labels()
        return self._composed("sum", labels, metric, "count_over_time", "count", "sum_over_time")

    def device_sum(self, metric: str) -> str:
        if metric not in self.covers:
            return super().device_sum(metric)
        labels = self.caps.device_labels()
        return self._composed("sum", labels, metric, "sum_over_time", "sum", "sum_over_time")

    def device_sum_and_series(self, metric: str, part: Matcher) -> str | None:
        return None if metric in self.covers else super().device_sum_and_series(metric, part)

    def device_max(self, metric: str) -> str:
        if metric not in self.covers:
            return super().device_max(metric)
        labels = self.caps.device_labels()
        return self._composed("max", labels, metric, "max_over_time", "max", "max_over_time")

    def max_from_samples(self, metric: str) -> bool:
        return metric not in self.covers

    def device_series_count(self, metric: str) -> str:
        if metric not in self.covers:
            return super().device_series_count(metric)
        # Untagged, ``or`` keeps one of a series' parts: the union counts each series once.
        union = " or ".join(
            expr for _, expr in self._parts(metric, "count_over_time", "count", "count_over_time")
        )
        return f"{promql.aggregate('count', self.caps.device_labels(), union)} > 1"
