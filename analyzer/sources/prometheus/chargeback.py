"""The chargeback round: what the TSDB holds for the window, then every part of the bill per day.

Queries, all built by ``analyzer.sources.chargeback_queries``: the names present (one label call),
the legacy gauge's unit per job (one query over the window's last hour), the hourly rollups'
evaluations (their raw samples: one per hour), where GPU data begins (an hourly range query of a
count, only over the part of the window before the first rollup: says what the TSDB holds when the
window reaches past it), then per region of the window — the rollups' interior (per part and per
week), the raw lead and trail — range queries of whole days and an instant query for the rest, and
the owners of the idlest pods over the last day each was seen. Answers come back per pod, per model
and per day: never a raw sample, and with rollups covering the window no query reads raw samples
under them.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from analyzer.sources import dcgm, promql, vocabulary
from analyzer.sources.chargeback_queries import PART, ROLLUP_STEP, SPAN, SpanQueries
from analyzer.sources.dcgm import PodLabels, choose_pod_labels
from analyzer.sources.prometheus_api import PrometheusClient
from analyzer.sources.source_errors import NoDataError
from common import metric_names as m
from common.errors import BadInputError
from common.model import TimeWindow

log = logging.getLogger(__name__)


def from_unix(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=UTC)


DAY = timedelta(days=1)
_WEEK_DAYS = 7
# Every part the rollups hold but the evaluations, read one at a time.
ROLLUP_PARTS = tuple(p for p in m.CHARGEBACK_PARTS if p != "evaluations")
Labels = tuple[tuple[str, str], ...]


@dataclass
class Chunk:
    """One stretch of the window and each part's rows over it: (part, labels) → value."""

    start: datetime
    end: datetime
    rows: dict[tuple[str, Labels], float] = field(default_factory=dict)
    rollup: bool = False


@dataclass
class ChargebackData:
    window: TimeWindow  # aligned to 5-minute spans, clipped to where GPU data begins
    chunks: list[Chunk]
    namespace_groups: dict[tuple[str, str], str] | None  # (cluster, namespace) → label value; None: not asked
    first_data: datetime | None
    rollup_hours: float
    raw_hours: float
    rollup_reason: str
    owners: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)
    replicasets: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)


def align(window: TimeWindow) -> TimeWindow:
    """The window on the 5-minute span grid: its end floored, its start raised."""
    step = SPAN.total_seconds()
    end = from_unix(window.end.timestamp() // step * step)
    start_s = window.start.timestamp()
    start = from_unix(-(-start_s // step) * step)
    return TimeWindow(start=start, end=end)


class ChargebackReads:
    """The chargeback's queries against one TSDB (one cluster's series where ``scope`` says so)."""

    def __init__(
        self,
        client: PrometheusClient,
        cluster_label: str = dcgm.CLUSTER_LABEL,
        scope: tuple[promql.Matcher, ...] = (),
        gpu_util_unit: str = "auto",
        recording_rules: bool = True,
    ) -> None:
        self.client = client
        self.cluster_label = promql.check_label_name(cluster_label)
        self.scope = scope
        self.gpu_util_unit = gpu_util_unit
        self.recording_rules = recording_rules

    # --- discovery ------------------------------------------------------------------------------

    def _names(self, window: TimeWindow) -> set[str]:
        extra = (vocabulary.KUBE_POD_STATUS_PHASE, "kube_namespace_labels", m.CHARGEBACK_ROLLUP)
        match = promql.selector("", [promql.one_of("__name__", (*vocabulary.ALL_NAMES, *extra)), *self.scope])
        return set(self.client.label_values("__name__", match, window.start, window.end))

    def _dev_to_percent(self, window: TimeWindow, present: set[str]) -> dict[str, float]:
        if dcgm.DEV_GPU_UTIL not in present or self.gpu_util_unit == "percent":
            return {}
        sel = promql.selector(dcgm.DEV_GPU_UTIL, self.scope)
        if self.gpu_util_unit == "ratio":
            jobs = self.client.label_values("job", sel, window.start, window.end)
            return dict.fromkeys(jobs, vocabulary.RATIO_TO_PERCENT)
        reach = promql.duration(min(window.duration, timedelta(hours=1)))
        tops = self.client.vector(f"max by (job) (max_over_time({sel}[{reach}]))", window.end)
        below = self.client.vector(f"count by (job) (({sel} > 0) < 1)", window.end)
        fractional = {s.labels.get("job", "") for s in below}
        return {
            s.labels.get("job", ""): dcgm.dev_unit_to_percent(s.value, s.labels.get("job", "") in fractional)
            for s in tops
        }

    def _first_data(
        self, window: TimeWindow, util: Sequence[str], stamps: Sequence[float]
    ) -> datetime | None:
        """The first hour of the window with any GPU utilization series (None: none at all).

        An hourly evaluation of the rollups is recorded only where a span it sums held GPU data, so
        the first one in the window says data existed by its last span: raw samples are probed only
        before it (up to that span, so that data beginning in its hour is found as a raw probe finds
        it), never under the rollups.
        """
        span = SPAN.total_seconds()
        first_rolled = next((t for t in stamps if t - span > window.start.timestamp()), None)
        probe_end = window.end
        if first_rolled is not None:
            probe_end = min(window.end, from_unix((first_rolled - span) // span * span))
        sel = promql.selector("", [promql.one_of("__name__", util), *self.scope])
        series = self.client.query_range(
            f"count(group by ({dcgm.UUID}) ({sel}))", window.start, probe_end, 3600
        )
        stamps_raw = [t for s in series for t, v in zip(s.timestamps, s.values, strict=True) if v > 0]
        if stamps_raw:
            return from_unix(min(stamps_raw))
        return probe_end if first_rolled is not None else None

    def namespace_label_names(self, window: TimeWindow) -> list[str]:
        sel = promql.selector("kube_namespace_labels", self.scope)
        names = self.client.label_names(sel, window.start, window.end)
        return sorted(n.removeprefix("label_") for n in names if n.startswith("label_"))

    # --- the round ------------------------------------------------------------------------------

    def read(self, requested: TimeWindow, idle_percent: float, group_label: str | None) -> ChargebackData:
        window = align(requested)
        present = self._names(window)
        util = tuple(n for n in vocabulary.UTILIZATION if n in present)
        if not util:
            raise NoDataError(
                f"{self.client.config.display_url}: no GPU utilization series "
                f"({', '.join(vocabulary.UTILIZATION)}) "
                f"between {window.start.isoformat()} and {window.end.isoformat()}: no bill can be made"
            )
        if group_label:
            self._check_group_label(window, group_label, present)
        gpu_labels = set(
            self.client.label_names(
                promql.selector("", [promql.one_of("__name__", util), *self.scope]), window.start, window.end
            )
        )
        ksm_labels = set(
            self.client.label_names(
                promql.selector(vocabulary.KUBE_POD_REQUESTS, self.scope), window.start, window.end
            )
        )
        queries = SpanQueries(
            util_metrics=util,
            idle_percent=idle_percent,
            cluster_label=self.cluster_label,
            gpu_pod=choose_pod_labels(gpu_labels),
            ksm_pod=choose_pod_labels(ksm_labels) if ksm_labels else PodLabels(),
            dev_to_percent=self._dev_to_percent(window, present),
            scope=self.scope,
            running_phase=vocabulary.KUBE_POD_STATUS_PHASE in present,
        )
        stamps = (
            self._stamps(window, queries) if self.recording_rules and m.CHARGEBACK_ROLLUP in present else []
        )
        first = self._first_data(window, util, stamps)
        if first is None:
            raise NoDataError(
                f"{self.client.config.display_url}: no GPU utilization sample between "
                f"{window.start.isoformat()} and {window.end.isoformat()}: no bill can be made"
            )
        # The hourly probe sees a series within its lookback: data began at most an hour before.
        begins = max(window.start, first - timedelta(hours=1))
        if begins > window.start + timedelta(hours=1):
            window = align(TimeWindow(start=begins, end=window.end))
        else:
            first = None
        chunks, rollup_hours, reason = self._chunks(window, queries, present, stamps)
        groups = self._namespace_groups(window, group_label, chunks) if group_label else None
        raw_hours = window.hours - rollup_hours
        return ChargebackData(window, chunks, groups, first, rollup_hours, raw_hours, reason)

    def _check_group_label(self, window: TimeWindow, label: str, present: set[str]) -> None:
        if "kube_namespace_labels" not in present:
            raise BadInputError(
                f"--by label:{label}: no kube_namespace_labels series in the window; kube-state-metrics "
                f"exports namespace labels only when allowed (--metric-labels-allowlist=namespaces=[{label}])"
            )
        known = self.namespace_label_names(window)
        if label not in known:
            raise BadInputError(
                f"--by label:{label}: no namespace carries the label {label!r} in kube_namespace_labels; "
                f"labels exported: {', '.join(known) or 'none'}"
            )

    def _namespace_groups(
        self, window: TimeWindow, label: str, chunks: Sequence[Chunk]
    ) -> dict[tuple[str, str], str]:
        """Each namespace's value of ``label``: as the window's last day reads it, and for a
        namespace gone by then, as its own series last read in the window (a month costs a day)."""
        seen = {
            (lab.get(self.cluster_label, ""), lab["namespace"])
            for chunk in chunks
            for _, labels in chunk.rows
            for lab in (dict(labels),)
            if lab.get("namespace")
        }
        found, out = self._label_values(label, window.end, min(window.duration, DAY), ())
        missing = sorted({ns for _, ns in seen - found})
        if missing:
            _, older = self._label_values(
                label, window.end, window.duration, (promql.one_of("namespace", missing),)
            )
            out = {**older, **out}
        return out

    def _label_values(
        self, label: str, at: datetime, reach: timedelta, matchers: tuple[promql.Matcher, ...]
    ) -> tuple[set[tuple[str, str]], dict[tuple[str, str], str]]:
        exported = f"label_{label}"
        sel = promql.selector("kube_namespace_labels", [*self.scope, *matchers])
        expr = promql.aggregate(
            "max", (self.cluster_label, "namespace", exported), f"last_over_time({promql.ranged(sel, reach)})"
        )
        found: set[tuple[str, str]] = set()
        out: dict[tuple[str, str], str] = {}
        for s in self.client.vector(expr, at):
            key = (s.labels.get(self.cluster_label, ""), s.labels.get("namespace", ""))
            found.add(key)
            value = s.labels.get(exported, "")
            if value:
                out[key] = value
        return found, out

    def _stamps(self, window: TimeWindow, queries: SpanQueries) -> list[float]:
        series = self.client.matrix(
            promql.ranged(queries.evaluations(), window.duration + SPAN), window.end + SPAN
        )
        return sorted({t for s in series for t in s.timestamps})

    def _chunks(
        self, window: TimeWindow, q: SpanQueries, present: set[str], stamps: Sequence[float]
    ) -> tuple[list[Chunk], float, str]:
        cover = None
        reason = "recording rules not read" if not self.recording_rules else ""
        if self.recording_rules and m.CHARGEBACK_ROLLUP not in present:
            reason = f"no {m.CHARGEBACK_ROLLUP} series in the window"
        elif self.recording_rules and q.idle_percent != m.CHARGEBACK_IDLE_PERCENT:
            reason = (
                f"the rollups' idle part was recorded at {m.CHARGEBACK_IDLE_PERCENT:g} %, the policy's "
                f"idlePercent is {q.idle_percent:g} %"
            )
        elif self.recording_rules:
            cover = _cover(list(stamps), window)
            if cover is None:
                reason = "no whole run of hourly evaluations inside the window"
        if cover is None:
            return self._raw(q, window.start, window.end), 0.0, reason
        stamps, begin, finish = cover
        chunks = self._raw(q, window.start, begin) if begin > window.start else []
        chunks += self._rolled(q, stamps)
        if finish < window.end:
            chunks += self._raw(q, finish, window.end)
        return chunks, (finish - begin).total_seconds() / 3600.0, reason

    def _raw(self, q: SpanQueries, start: datetime, end: datetime) -> list[Chunk]:
        """Raw spans over ``(start, end]``: whole days back from the end in one range query, the rest
        in one instant query."""
        days = int((end - start) // DAY)
        rest = (end - start) - days * DAY
        chunks: list[Chunk] = []
        if rest > timedelta(0):
            chunks.append(self._instant(q.window_sum(rest), start, start + rest))
        if days:
            chunks += self._ranged(q.window_sum(DAY), start + rest + DAY, end, rollup=False)
        return chunks

    def _rolled(self, q: SpanQueries, stamps: list[float]) -> list[Chunk]:
        """The rollups stamped ``stamps`` (regular, hourly): 24 a day back from the last.

        One query per part and per week at most: a month of a large fleet holds more pod series
        than a TSDB lets one query touch (VictoriaMetrics' -search.maxUniqueTimeseries, 300,000 by
        default), a part over a week about a fortieth of them.
        """
        per_day = round(DAY / ROLLUP_STEP)
        days, rest = divmod(len(stamps), per_day)
        last = from_unix(math.ceil(stamps[-1]))  # range queries go out in whole seconds
        merged: dict[tuple[datetime, datetime], Chunk] = {}
        slack = ROLLUP_STEP / 2
        for part in ROLLUP_PARTS:
            found: list[Chunk] = []
            if rest:
                at = from_unix(stamps[rest - 1])
                reach = ROLLUP_STEP * (rest - 1) + slack
                found.append(self._instant(q.rollup_sum(reach, part), at - ROLLUP_STEP * rest, at))
            expr = q.rollup_sum(DAY - timedelta(milliseconds=1), part)
            for first in range(0, days, _WEEK_DAYS):
                block_last = last - DAY * (days - 1 - min(days - 1, first + _WEEK_DAYS - 1))
                block_first = last - DAY * (days - 1 - first)
                found += self._ranged(expr, block_first, block_last, rollup=True)
            for chunk in found:
                into = merged.setdefault((chunk.start, chunk.end), Chunk(chunk.start, chunk.end, rollup=True))
                into.rows.update(chunk.rows)
        return [_shifted(merged[k], rollup=True) for k in sorted(merged)]

    def _instant(self, expr: str, start: datetime, end: datetime) -> Chunk:
        chunk = Chunk(start, end)
        for s in self.client.vector(expr, end):
            chunk.rows[_row_key(s.labels)] = s.value
        return chunk

    def _ranged(self, expr: str, first_end: datetime, last_end: datetime, rollup: bool) -> list[Chunk]:
        ends = {
            first_end.timestamp() + i * DAY.total_seconds()
            for i in range(round((last_end - first_end) / DAY) + 1)
        }
        chunks = {t: Chunk(from_unix(t) - DAY, from_unix(t), rollup=rollup) for t in sorted(ends)}
        for s in self.client.query_range(expr, first_end, last_end, DAY.total_seconds()):
            key = _row_key(s.labels)
            for t, v in zip(s.timestamps, s.values, strict=True):
                chunk = chunks.get(round(t)) or chunks.get(t)
                if chunk is not None:
                    chunk.rows[key] = v
        return list(chunks.values())

    # --- owners of the idlest pods --------------------------------------------------------------

    def owners(
        self, window: TimeWindow, pods: Sequence[tuple[str, str]], chunks: Sequence[Chunk] = ()
    ) -> tuple[dict[tuple[str, str], tuple[str, str]], dict[tuple[str, str], tuple[str, str]]]:
        """kube_pod_owner of ``pods`` (namespace, pod) and kube_replicaset_owner of their ReplicaSets.

        Read over the last chunk (a day at most) each pod has rows in, where kube-state-metrics
        reported it too: a month's window costs what a day's does. Pods not found there (or not in
        any chunk) are read over the window, where only their own series are searched.
        """
        if not pods:
            return {}, {}
        last = _last_chunks(pods, chunks)
        owners: dict[tuple[str, str], tuple[str, str]] = {}
        replicasets: dict[tuple[str, str], tuple[str, str]] = {}
        by_stretch: dict[tuple[datetime, datetime], list[tuple[str, str]]] = {}
        for pid in pods:
            stretch = last.get(pid, (window.start, window.end))
            by_stretch.setdefault(stretch, []).append(pid)
        missing: list[tuple[str, str]] = []
        for (start, end), batch in sorted(by_stretch.items()):
            found, sets = self._owners_over(batch, start, end)
            owners.update(found)
            replicasets.update(sets)
            if (start, end) != (window.start, window.end):
                missing += [pid for pid in batch if pid not in found]
        if missing:
            found, sets = self._owners_over(missing, window.start, window.end)
            owners.update(found)
            replicasets.update(sets)
        return owners, replicasets

    def _owners_over(
        self, pods: Sequence[tuple[str, str]], start: datetime, end: datetime
    ) -> tuple[dict[tuple[str, str], tuple[str, str]], dict[tuple[str, str], tuple[str, str]]]:
        reach = max(end - start, SPAN)
        namespaces = sorted({ns for ns, _ in pods})
        names = sorted({p for _, p in pods})
        sel = promql.selector(
            vocabulary.KUBE_POD_OWNER,
            [*self.scope, promql.one_of("namespace", namespaces), promql.one_of("pod", names)],
        )
        labels = ("namespace", "pod", "owner_kind", "owner_name")
        expr = promql.aggregate("max", labels, f"last_over_time({promql.ranged(sel, reach)})")
        wanted = set(pods)
        owners = {}
        for s in self.client.vector(expr, end):
            pid = (s.labels.get("namespace", ""), s.labels.get("pod", ""))
            if pid in wanted:
                owners[pid] = (s.labels.get("owner_kind", ""), s.labels.get("owner_name", ""))
        sets = sorted({name for k, name in owners.values() if k == "ReplicaSet"})
        replicasets: dict[tuple[str, str], tuple[str, str]] = {}
        if sets:
            rs_sel = promql.selector(
                vocabulary.KUBE_REPLICASET_OWNER,
                [*self.scope, promql.one_of("namespace", namespaces), promql.one_of("replicaset", sets)],
            )
            rs_expr = promql.aggregate(
                "max",
                ("namespace", "replicaset", "owner_kind", "owner_name"),
                f"last_over_time({promql.ranged(rs_sel, reach)})",
            )
            for s in self.client.vector(rs_expr, end):
                key = (s.labels.get("namespace", ""), s.labels.get("replicaset", ""))
                replicasets[key] = (s.labels.get("owner_kind", ""), s.labels.get("owner_name", ""))
        return owners, replicasets


def _last_chunks(
    pods: Sequence[tuple[str, str]], chunks: Sequence[Chunk]
) -> dict[tuple[str, str], tuple[datetime, datetime]]:
    """Each pod's last chunk with a row of it: (start, end) of the data it covers."""
    wanted = set(pods)
    last: dict[tuple[str, str], tuple[datetime, datetime]] = {}
    for chunk in chunks:
        for _, labels in chunk.rows:
            lab = dict(labels)
            pid = (lab.get("namespace", ""), lab.get("pod", ""))
            if pid in wanted and (pid not in last or last[pid][1] < chunk.end):
                last[pid] = (chunk.start, chunk.end)
    return last


def _row_key(labels: Mapping[str, str]) -> tuple[str, Labels]:
    part = labels.get(PART, "")
    rest = tuple(sorted((k, v) for k, v in labels.items() if k not in (PART, "__name__") and v))
    return part, rest


def _shifted(chunk: Chunk, rollup: bool) -> Chunk:
    """A rollup chunk's stamps cover data 5 minutes earlier (the rule's offset)."""
    return Chunk(chunk.start - SPAN, chunk.end - SPAN, chunk.rows, rollup)


def _cover(stamps: list[float], window: TimeWindow) -> tuple[list[float], datetime, datetime] | None:
    """The latest run of hourly evaluations whose hours lie inside the window: the stamps, and the
    data they cover, ``(first - 65m, last - 5m]`` on the span grid."""
    hour, span = ROLLUP_STEP.total_seconds(), SPAN.total_seconds()
    lo, hi = window.start.timestamp() + hour + span, window.end.timestamp() + span
    inside = [t for t in stamps if lo <= t <= hi]
    run: list[float] = []
    for t in reversed(inside):
        if run and abs((run[-1] - t) - hour) > span / 2:
            break
        run.append(t)
    run.reverse()
    if not run:
        return None
    # The spans a stamp covers end at the 5-minute marks in (t - 65m, t - 5m].
    finish = (run[-1] - span) // span * span
    begin = finish - hour * len(run)
    return run, from_unix(begin), from_unix(finish)
