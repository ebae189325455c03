"""PromQL for the closer looks: per-holder aggregates over each holder's own judged span.

Where the snapshot's aggregates cover the whole window, some holders are judged over less (their
pod's warm-up lies inside the window, a Job's life starts at its first busy sample), and a
starvation candidate needs the shares of stalled and busy samples and how long each state lasts.
All of it is computed by the TSDB, so the bytes per GPU do not grow with the window:

* a span is a range selector ending at the span's end (``@``) and reaching back to just after its
  start, so that ``(start, end]`` holds the same samples as the raw cut did;
* the shares and run counts go through a subquery stepping at the scrape interval that keeps each
  raw sample once: an evaluation counts a sample only if it is fresher than one step (the
  ``time() - timestamp(x) < step`` guard), so a lookback never repeats a value after a series ends;
* a run of a state is counted as ``resets`` of its 0/1 series plus the series' last value (samples
  at or before the span's start are filtered out, so no point before the range takes part);
* the first busy sample is the smallest ``timestamp()`` of a sample above the idle bound.

Spans of many holders go out together: one ``or`` of per-span terms per query, each term for one
span and the GPUs judged over it, at most one term per device holder in a query.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from analyzer.sources import dcgm, promql
from analyzer.sources.aggregates import DeviceKey
from analyzer.sources.dcgm import Capabilities
from analyzer.sources.promql import one_of
from common.model import TimeWindow

AGGREGATE = "gpu_analyzer_aggregate"  # the label naming each aggregate in a joined answer
# Per-span terms joined in one query: keeps the PromQL text (POSTed) well under servers' limits.
TERMS_PER_QUERY = 40
# Device holders one term names (a run count repeats its selector six times: 15 holders keep one
# aggregate near 7,000 characters), and the longest PromQL text sent (VictoriaMetrics' default limit
# is 16,384 characters): a query over more is split between aggregates.
HOLDERS_PER_TERM = 15
MAX_QUERY_CHARS = 15_000


def _at(moment: datetime) -> str:
    return f"{round(moment.timestamp() * 1000) / 1000:.3f}"


def _reach(span: TimeWindow) -> timedelta:
    """From the span's end back to 1 ms after its start: the left edge belongs to the span before."""
    return max(span.duration - timedelta(milliseconds=1), timedelta(milliseconds=1))


class SpanTerm:
    """One span and the GPUs of one utilization metric and scrape job judged over it."""

    def __init__(
        self,
        caps: Capabilities,
        metric: str,
        keys: Sequence[DeviceKey],
        span: TimeWindow,
        step_s: float,
        scale: float,
    ) -> None:
        self.caps, self.span, self.step_s, self.scale = caps, span, step_s, scale
        self.keys = tuple(keys)
        self.uuids = frozenset(k.uuid for k in keys)
        self.pods = frozenset(k.pod for k in keys)
        holders = [one_of(dcgm.UUID, sorted(self.uuids))]
        if all(self.pods):
            holders.append(one_of(caps.gpu_pod.pod, sorted(self.pods)))
        self.holders = holders
        self.selector = promql.selector(metric, holders)

    def selects(self, key: DeviceKey) -> bool:
        """Whether this term's selector also matches ``key`` (any pairing of its GPUs and pods)."""
        return key.uuid in self.uuids and (key.pod in self.pods or not all(self.pods))

    def _range(self, expr: str) -> str:
        return f"{expr}[{promql.duration(_reach(self.span))}] @ {_at(self.span.end)}"

    def _sub(self, expr: str) -> str:
        step = promql.duration(timedelta(seconds=self.step_s))
        return f"({expr})[{promql.duration(_reach(self.span))}:{step}] @ {_at(self.span.end)}"

    def _fresh(self, expr: str) -> str:
        # Fresh: each sample counted once. After the span's start: VictoriaMetrics' `resets` also
        # compares with the point before the range, which must not exist.
        ts = f"timestamp({self.selector})"
        fresh = f"(time() - {ts} < {promql.number(self.step_s)})"
        after = f"({ts} > {promql.number(self.span.start.timestamp())})"
        return f"(({expr}) and {fresh} and {after})"

    def _state(self, op: str, percent: float) -> str:
        return self._fresh(f"{self.selector} {op} bool {promql.number(percent / self.scale)}")

    def stats(self, name: str, q: float | None = None) -> str:
        labels = self.caps.device_labels()
        if name == "count":
            return promql.aggregate("sum", labels, f"count_over_time({self._range(self.selector)})")
        if name == "sum":
            return promql.aggregate("sum", labels, f"sum_over_time({self._range(self.selector)})")
        if name == "max":
            return promql.aggregate("max", labels, f"max_over_time({self._range(self.selector)})")
        assert q is not None
        inner = f"quantile_over_time({promql.number(q)}, {self._range(self.selector)})"
        return promql.aggregate("max", labels, inner)

    def samples(self) -> str:
        """Samples the subquery keeps (each raw sample once): the shares' denominator."""
        fresh = self._fresh(f"{self.selector} >= bool 0")
        return promql.aggregate("sum", self.caps.device_labels(), f"count_over_time({self._sub(fresh)})")

    def state_count(self, stalled: bool, percent: float) -> str:
        state = self._state("<=" if stalled else ">", percent)
        return promql.aggregate("sum", self.caps.device_labels(), f"sum_over_time({self._sub(state)})")

    def state_runs(self, stalled: bool, percent: float) -> str:
        state = self._sub(self._state("<=" if stalled else ">", percent))
        return promql.aggregate(
            "sum", self.caps.device_labels(), f"resets({state}) + last_over_time({state})"
        )

    def histogram(self) -> str:
        labels = (*self.caps.device_labels(), dcgm.LE)
        buckets = promql.selector(
            dcgm.SAMPLE_HISTOGRAM_BUCKET, [*self.holders, one_of(dcgm.LE, self.caps.histogram_le)]
        )
        return promql.aggregate("sum", labels, f"increase({self._range(buckets)})")

    def first_busy(self, percent: float) -> str:
        after = f"timestamp({self.selector}) > {promql.number(self.span.start.timestamp())}"
        busy = f"{self.selector} > {promql.number(percent / self.scale)}"
        inner = f"min_over_time({self._sub(f'({after}) and ({busy})')})"
        return promql.aggregate("min", self.caps.device_labels(), inner)


def tagged(name: str, expr: str) -> str:
    """``expr`` with an ``aggregate`` label naming it, so several aggregates share one answer."""
    return f'label_replace({expr}, "{AGGREGATE}", "{name}", "", "")'


def joined(terms: Sequence[str]) -> str:
    """Terms as one query: no term's selector matches another's holders, so none shadows another."""
    return " or ".join(f"({t})" for t in terms)
