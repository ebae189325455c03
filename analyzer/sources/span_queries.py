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
* the first busy sample is the smallest ``timestamp()`` of a sample above the idle bound;
* on VictoriaMetrics (MetricsQL), the samples and the stalled and busy ones are counted over the raw
  range by ``count_over_time``, ``count_le_over_time`` and ``count_gt_over_time``: the same
  samples, without a subquery; the runs still go through one, which ``aggr_over_time`` evaluates
  once for both ``resets`` and ``last_over_time``; a span's count and sum come from one
  ``aggr_over_time``, its quantiles and maximum from one ``quantiles_over_time`` (one sort), so
  each selector is written twice instead of six times.

Spans of many holders go out together: one ``or`` of per-span terms per query, each term for one
span and the GPUs judged over it, at most one term per device holder in a query.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from math import ceil

from analyzer.sources import dcgm, promql
from analyzer.sources.aggregates import DeviceKey
from analyzer.sources.dcgm import Capabilities
from analyzer.sources.promql import Matcher, one_of
from common.model import TimeWindow

AGGREGATE = "gpu_analyzer_aggregate"  # the label naming each aggregate in a joined answer
# Per-span terms joined in one query: keeps the PromQL text (POSTed) well under servers' limits.
TERMS_PER_QUERY = 40
# Names one term holds, GPUs or pods (a run count repeats its selector six times: 15 UUIDs or 40 pod
# names keep one aggregate near 7,000 characters, under promql.MAX_QUERY_CHARS): a query over more
# is split between aggregates.
HOLDERS_PER_TERM = 15
PODS_PER_TERM = 40
# Steps one subquery may take: VictoriaMetrics refuses more than 30,000 points per series by default
# (`-search.maxPointsPerTimeseries`), which a 7-day span at 15 s passes; longer spans are cut.
MAX_SUBQUERY_STEPS = 10_000
PIECE = "gpu_analyzer_piece"  # the label keeping a long span's pieces apart until they are folded
ADDITIVE = "additive"  # the tag of a span's count and sum asked together (MetricsQL)
RANKED = "ranked"  # the tag of a span's quantiles and max asked together (MetricsQL)
_ROLLUP_NAMES = {"count_over_time": "count", "sum_over_time": "sum"}


def _ms(moment: datetime) -> int:
    return round(moment.timestamp() * 1000)


def _utc_ms(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


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
        holders: Sequence[Matcher] = (),
    ) -> None:
        self.caps, self.span, self.step_s, self.scale = caps, span, step_s, scale
        self.keys = tuple(keys)
        self.uuids = frozenset(k.uuid for k in keys)
        self.pods = frozenset(k.pod for k in keys)
        # A pod's GPUs share its span: where every holder has a pod, naming the pods selects them,
        # in about a fifth of the text their UUIDs take (so a fifth of the queries).
        self.by_pod = bool(keys) and all(self.pods)
        if not holders:
            if self.by_pod:
                holders = [one_of(caps.gpu_pod.pod, sorted(self.pods))]
            else:
                holders = [one_of(dcgm.UUID, sorted(self.uuids))]
        self.holders = list(holders)
        self.selector = promql.selector(metric, [*caps.scope, *self.holders])

    @classmethod
    def pods_of_job(
        cls,
        caps: Capabilities,
        metric: str,
        job: str,
        pods: Sequence[str],
        span: TimeWindow,
        step_s: float,
        scale: float,
    ) -> SpanTerm:
        """Every GPU the pods held in one scrape job's series over ``span``: names pods, not GPUs."""
        holders = [promql.eq(dcgm.JOB, job), one_of(caps.gpu_pod.pod, sorted(pods))]
        return cls(caps, metric, (), span, step_s, scale, holders=holders)

    def selects(self, key: DeviceKey) -> bool:
        """Whether this term's selector also matches ``key``: any GPU of its pods (in any namespace),
        or any holder of its GPUs."""
        return key.pod in self.pods if self.by_pod else key.uuid in self.uuids

    def _range(self, expr: str) -> str:
        return f"{expr}[{promql.duration(_reach(self.span))}] @ {_at(self.span.end)}"

    def pieces(self) -> list[TimeWindow]:
        """The span cut where a subquery over it would pass ``MAX_SUBQUERY_STEPS``.

        Inner cuts fall on multiples of the step (subqueries evaluate there), so each sample is
        counted in exactly one piece.
        """
        step_ms = max(1, round(self.step_s * 1000))
        start_ms, end_ms = _ms(self.span.start), _ms(self.span.end)
        longest = MAX_SUBQUERY_STEPS * step_ms
        cuts = [start_ms]
        while end_ms - cuts[-1] > longest:
            cuts.append((cuts[-1] + longest) // step_ms * step_ms)
        cuts.append(end_ms)
        return [TimeWindow(start=_utc_ms(a), end=_utc_ms(b)) for a, b in pairwise(cuts)]

    def _sub(self, expr: str, piece: TimeWindow) -> str:
        step = promql.duration(timedelta(seconds=self.step_s))
        return f"({expr})[{promql.duration(_reach(piece))}:{step}] @ {_at(piece.end)}"

    def _fresh(self, expr: str, piece: TimeWindow) -> str:
        """``expr`` at the subquery's steps that hold a fresh sample of the piece (each sample once).

        A step at ``t`` keeps the sample of ``(t - step, t]``, and only one after the piece's start;
        steps before the first such sample hold nothing, so VictoriaMetrics' ``resets``, which also
        reads the point before the range, sees none. Two forms count the same samples:
        ``timestamp()`` filtered by scalars (one join a step), or, on Prometheus' own engine, which
        evaluates ``timestamp()`` step by step, ``count_over_time`` over the step.
        """
        if not self.caps.prometheus_engine:
            ts = f"timestamp({self.selector})"
            after = promql.number(piece.start.timestamp())
            return f"(({expr}) and (({ts} > {after}) - time() > -{promql.number(self.step_s)}))"
        # The first step after the piece's start, ``g``, looks back only to that start.
        step_ms = max(1, round(self.step_s * 1000))
        first = (_ms(piece.start) // step_ms + 1) * step_ms
        head = first - _ms(piece.start)
        g, half = promql.number(first / 1000), promql.number(step_ms / 2000)

        def seen(reach_ms: int) -> str:
            # 1 ms short: Prometheus 2 includes a range's left end, VictoriaMetrics and Prometheus 3
            # do not; with millisecond timestamps both then read (t - reach, t].
            reach = promql.duration(timedelta(milliseconds=max(1, reach_ms - 1)))
            return f"(count_over_time({self.selector}[{reach}]) > 0)"

        after = f"(({expr}) and {seen(step_ms)} and on () (vector(time()) > {g} + {half}))"
        at_first = f"(({expr}) and {seen(head)} and on () (abs(vector(time()) - {g}) < {half}))"
        return f"({after} or {at_first})"

    def _state(self, op: str, percent: float, piece: TimeWindow) -> str:
        return self._fresh(f"{self.selector} {op} bool {promql.number(percent / self.scale)}", piece)

    def _over_pieces(self, op: str, per_piece: Callable[[TimeWindow], str]) -> str:
        """``op by (device labels)`` over every piece's answer (one piece: no union needed)."""
        parts = self.pieces()
        if len(parts) == 1:
            inner = per_piece(parts[0])
        else:
            # Tagged apart, so that `or` keeps every piece's answer and the aggregation folds them.
            inner = " or ".join(
                f'label_replace({per_piece(p)}, "{PIECE}", "{i}", "", "")' for i, p in enumerate(parts)
            )
        return promql.aggregate(op, self.caps.device_labels(), inner)

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

    def merged_total(self, func: str) -> str:
        """``count_over_time`` or ``sum_over_time`` of the span's samples with each holder's series
        merged: every step of a subquery at the scrape interval takes the series that delivered most
        in it, so series side by side (two scrape jobs, an HA pair) count once, as in
        ``FleetQueries.device_union_total``. Asked only of terms holding such holders."""
        step = timedelta(seconds=self.step_s)
        per_step = promql.merged_step(func, self.selector, self.caps.device_labels(), step)
        return self._over_pieces("sum", lambda piece: f"sum_over_time({self._sub(per_step, piece)})")

    def additive(self) -> str:
        """MetricsQL: the span's sample count and sum from one pass over its samples, each row
        named by its ``rollup`` label."""
        inner = promql.aggr_over_time(list(_ROLLUP_NAMES), self._range(self.selector))
        return promql.aggregate("sum", (*self.caps.device_labels(), promql.ROLLUP), inner)

    def ranked(self, levels: Sequence[float]) -> str:
        """MetricsQL: quantiles at ``levels`` from one sort of the span's samples (level 1 is the
        maximum), each row named by its level; three quantiles apart sort them three times."""
        inner = promql.quantiles_over_time(levels, self._range(self.selector))
        return promql.aggregate("max", (*self.caps.device_labels(), promql.PHI), inner)

    def samples(self) -> str:
        """Samples the subquery keeps (each raw sample once): the shares' denominator. On MetricsQL,
        the raw samples of the span, counted as ``state_count`` counts them."""
        if self.caps.metricsql:
            return self.stats("count")

        def kept(piece: TimeWindow) -> str:
            return f"count_over_time({self._sub(self._fresh(f'{self.selector} >= bool 0', piece), piece)})"

        return self._over_pieces("sum", kept)

    def state_count(self, stalled: bool, percent: float) -> str:
        op = "<=" if stalled else ">"
        if self.caps.metricsql:
            # The raw samples at or below (above) the bound: no subquery, no step, no pieces.
            rollup = "count_le_over_time" if stalled else "count_gt_over_time"
            bound = promql.number(percent / self.scale)
            inner = f"{rollup}({self._range(self.selector)}, {bound})"
            return promql.aggregate("sum", self.caps.device_labels(), inner)
        return self._over_pieces(
            "sum", lambda piece: f"sum_over_time({self._sub(self._state(op, percent, piece), piece)})"
        )

    def state_runs(self, stalled: bool, percent: float) -> str:
        """Runs of the state: its 1 → 0 steps plus a run still open at the end. A run crossing an inner
        cut of a long span counts once per piece (at most one extra per cut)."""
        op = "<=" if stalled else ">"

        def runs(piece: TimeWindow) -> str:
            state = self._sub(self._state(op, percent, piece), piece)
            if self.caps.metricsql:
                # Both rollups over one evaluation of the subquery, summed by the aggregation.
                return f'aggr_over_time(("resets", "last_over_time"), {state})'
            return f"(resets({state}) + last_over_time({state}))"

        return self._over_pieces("sum", runs)

    def _busy(self, percent: float, piece: TimeWindow) -> str:
        """The piece's fresh samples at or above ``percent`` (a filter: the samples themselves)."""
        return self._fresh(f"{self.selector} >= {promql.number(percent / self.scale)}", piece)

    def waiting(self, percent: float, board: str) -> str:
        """Samples at or above ``percent`` whose GPU ``board`` (one row per ``UUID``: the boards
        waiting at the evaluation time, ``waits.board_waits``) holds at their step: the stalled-job
        rule's waits, counted as ``samples`` counts the span's samples."""

        def counted(piece: TimeWindow) -> str:
            joined_board = f"({self._busy(percent, piece)}) and on ({dcgm.UUID}) ({board})"
            return f"count_over_time({self._sub(joined_board, piece)})"

        return self._over_pieces("sum", counted)

    def histogram(self) -> str:
        labels = (*self.caps.device_labels(), dcgm.LE)
        buckets = promql.selector(
            dcgm.SAMPLE_HISTOGRAM_BUCKET,
            [*self.caps.scope, *self.holders, one_of(dcgm.LE, self.caps.histogram_le)],
        )
        return promql.aggregate("sum", labels, f"increase({self._range(buckets)})")

    def first_busy(self, percent: float) -> str:
        busy = f"{self.selector} > {promql.number(percent / self.scale)}"

        def first(piece: TimeWindow) -> str:
            after = f"timestamp({self.selector}) > {promql.number(piece.start.timestamp())}"
            return f"min_over_time({self._sub(f'({after}) and ({busy})', piece)})"

        return self._over_pieces("min", first)


class RenamedTerm(SpanTerm):
    """One span and the GPUs whose exporter renamed their utilization series in it (DCGM 4.7's
    naming): every name's samples read as one history, in the first name's unit.

    Each step of a subquery at the scrape interval takes the latest sample of the first name
    holding one (``promql.freshest_step``), so a scrape served under both names while the upgrade
    rolled out counts once; counts and sums take every sample of a step (``merged_total``). Spans
    longer than ``MAX_SUBQUERY_STEPS`` steps have their quantiles from a coarser step, as the
    snapshot's union does."""

    def __init__(
        self,
        caps: Capabilities,
        metric: str,
        others: Sequence[tuple[str, float]],
        keys: Sequence[DeviceKey],
        span: TimeWindow,
        step_s: float,
        scale: float,
        holders: Sequence[Matcher] = (),
    ) -> None:
        super().__init__(caps, metric, keys, span, step_s, scale, holders)
        scoped = [*caps.scope, *self.holders]
        # Each name's selector and the factor of its values into the first name's unit.
        self.names = ((metric, self.selector, 1.0), *((n, promql.selector(n, scoped), f) for n, f in others))

    def _union(self, piece: TimeWindow, step_s: float | None = None) -> str:
        selectors = [(text, factor) for _, text, factor in self.names]
        step = timedelta(seconds=step_s or self.step_s)
        return promql.freshest_step(selectors, self.caps.device_labels(), step, piece.start.timestamp())

    def _whole(self) -> tuple[str, float]:
        """The union over the whole span at a step that keeps it one piece: (subquery, step)."""
        step_s = self.step_s * max(
            1, ceil(self.span.duration.total_seconds() / self.step_s / MAX_SUBQUERY_STEPS)
        )
        ranged = f"{promql.duration(_reach(self.span))}:{promql.duration(timedelta(seconds=step_s))}"
        return f"({self._union(self.span, step_s)})[{ranged}] @ {_at(self.span.end)}", step_s

    def stats(self, name: str, q: float | None = None) -> str:
        labels = self.caps.device_labels()
        if name == "count":
            return self.merged_total("count_over_time")
        if name == "sum":
            return self.merged_total("sum_over_time")
        if name == "max":
            return self._over_pieces("max", lambda p: f"max_over_time({self._sub(self._union(p), p)})")
        assert q is not None
        return promql.aggregate("max", labels, f"quantile_over_time({promql.number(q)}, {self._whole()[0]})")

    def merged_total(self, func: str) -> str:
        step = timedelta(seconds=self.step_s)
        labels = self.caps.device_labels()
        parts = []
        for _, text, factor in self.names:
            part = promql.merged_step(func, text, labels, step)
            parts.append(
                part if factor == 1.0 or func != "sum_over_time" else f"({part}) * {promql.number(factor)}"
            )
        per_step = " or ".join(parts)
        return self._over_pieces("sum", lambda piece: f"sum_over_time({self._sub(per_step, piece)})")

    def additive(self) -> str:
        return " or ".join(
            promql.labelled(self.merged_total(func), promql.ROLLUP, func) for func in _ROLLUP_NAMES
        )

    def ranked(self, levels: Sequence[float]) -> str:
        inner = promql.quantiles_over_time(levels, self._whole()[0])
        return promql.aggregate("max", (*self.caps.device_labels(), promql.PHI), inner)

    def samples(self) -> str:
        return self.merged_total("count_over_time")

    def _state(self, op: str, percent: float, piece: TimeWindow) -> str:
        return f"({self._union(piece)}) {op} bool {promql.number(percent / self.scale)}"

    def state_count(self, stalled: bool, percent: float) -> str:
        op = "<=" if stalled else ">"
        return self._over_pieces(
            "sum", lambda piece: f"sum_over_time({self._sub(self._state(op, percent, piece), piece)})"
        )

    def _busy(self, percent: float, piece: TimeWindow) -> str:
        return f"({self._union(piece)}) >= {promql.number(percent / self.scale)}"

    def first_busy(self, percent: float) -> str:
        def first(piece: TimeWindow) -> str:
            after = promql.number(piece.start.timestamp())
            found = []
            for name, text, factor in self.names:
                busy = f"{text} > {promql.number(percent / self.scale / factor)}"
                earliest = f"min_over_time({self._sub(f'(timestamp({text}) > {after}) and ({busy})', piece)})"
                found.append(promql.labelled(earliest, promql.NAME_TAG, name))
            return " or ".join(found)

        return self._over_pieces("min", first)


def aggregate_names(labels: Mapping[str, str], levels: Mapping[str, float]) -> tuple[str, ...]:
    """The aggregates one answer row holds: its tag, or for rows of ``additive`` and ``ranked``
    the name their rollup or level stands for (a level may stand for more than one)."""
    tag = labels.get(AGGREGATE, "")
    if tag == ADDITIVE:
        name = _ROLLUP_NAMES.get(labels.get(promql.ROLLUP, ""))
        return (name,) if name else ()
    if tag == RANKED:
        try:
            phi = float(labels.get(promql.PHI, ""))
        except ValueError:
            return ()
        return tuple(name for name, level in levels.items() if level == phi)
    return (tag,)


def tagged(name: str, expr: str) -> str:
    """``expr`` with an ``aggregate`` label naming it, so several aggregates share one answer."""
    return f'label_replace({expr}, "{AGGREGATE}", "{name}", "", "")'


def joined(terms: Sequence[str]) -> str:
    """Terms as one query: no term's selector matches another's holders, so none shadows another."""
    return " or ".join(f"({t})" for t in terms)
