"""One analysis: source → aggregates → workload views → detectors → findings report.

The number of queries barely depends on the fleet's size: discovery (four label calls side by
side), one snapshot (a fixed set of fleet-wide queries side by side), the closer looks (range
aggregates over young holders' own spans, the young Jobs' first busy samples found alongside,
then the stalled/busy shares of starvation candidates only) with the likely idle endpoints'
memory read beside them (200 GPUs a query), and the policy's request-rate query per idle
candidate; the stalled-job round counts each busy workload's waits in the TSDB (one subquery per
GPU at the step of its data), and reads raw samples (utilization, power, limit, clock-event
reasons) only for the jobs whose counts come near the rule's thresholds; plots read them too."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from analyzer.analysis import Analysis, ClusterAnalysis
from analyzer.clusters import CLUSTERS_AT_ONCE, choose_clusters
from analyzer.detection import detectors, right_size, stalled_job, workloads
from analyzer.detection.idle_endpoint import idle_endpoint_candidate
from analyzer.detection.sources_needed import missing_sources
from analyzer.detection.views import NodeView, RequestRate, WorkloadView
from analyzer.scope import scope_snapshot
from analyzer.sources.aggregates import CloserLook, DeviceKey, FleetSnapshot, SpanNumbers
from analyzer.sources.metrics_source import MetricsSource
from analyzer.sources.promql import duration, render_template
from analyzer.sources.source_errors import NoDataError
from common.errors import BadInputError
from common.memory import collector_paused
from common.model import Finding, FindingsReport, MissingSource, TimeWindow
from common.thresholds import Thresholds

__all__ = [
    "Analysis",
    "ClusterAnalysis",
    "EmptyScopeError",
    "MetricsSource",
    "analyze",
    "analyze_in_detail",
]

log = logging.getLogger(__name__)

# Clocks drift: a window ending a little after our `now` is still this minute's analysis.
_CLOCK_SKEW = timedelta(minutes=2)


class EmptyScopeError(BadInputError):
    """A namespace scope in which no pod held a GPU in the window: most often a mistyped name.

    Never reported as "no findings": no GPU was judged, so nothing can be called busy enough."""


def analyze(
    source: MetricsSource,
    window: TimeWindow,
    thresholds: Thresholds,
    now: datetime | None = None,
    progress: Callable[[str], None] | None = None,
    namespaces: Collection[str] = (),
    clusters: Collection[str] = (),
) -> FindingsReport:
    """Findings for ``window``; raises DataUnavailableError subclasses rather than report on bad data.

    Of a source holding several clusters, only each cluster's findings outlive its analysis."""
    with collector_paused():
        return _by_cluster(source, window, thresholds, now, progress, namespaces, clusters, keep=False).report


def analyze_in_detail(
    source: MetricsSource,
    window: TimeWindow,
    thresholds: Thresholds,
    now: datetime | None = None,
    progress: Callable[[str], None] | None = None,
    namespaces: Collection[str] = (),
    clusters: Collection[str] = (),
) -> Analysis:
    """The analysis of ``window``; ``namespaces`` (when given) scopes it (see ``analyzer.scope``),
    ``clusters`` (when given) restricts it to those clusters (see ``analyzer.clusters``)."""
    with collector_paused():  # what the run builds lives to its end (see common.memory)
        return _by_cluster(source, window, thresholds, now, progress, namespaces, clusters, keep=True)


def _by_cluster(
    source: MetricsSource,
    window: TimeWindow,
    thresholds: Thresholds,
    now: datetime | None,
    progress: Callable[[str], None] | None,
    namespaces: Collection[str],
    wanted: Collection[str],
    keep: bool,
) -> Analysis:
    """One analysis per cluster the source holds (one in all where its series name none), side by
    side, each through a source restricted to its cluster: a cluster's workloads, pods and nodes are
    never mixed with another's of the same name. ``keep``: each cluster's whole analysis is kept
    (for plots); otherwise only its findings, so memory is bounded by the clusters in flight."""
    chosen = choose_clusters(source.clusters(window, thresholds), wanted, source.cluster_label)
    if not chosen:
        return _in_scope(_analysis(source, window, thresholds, now, progress, namespaces), namespaces)

    def one(cluster: str) -> ClusterAnalysis:
        def step(message: str) -> None:
            if progress is not None:
                progress(f"[{cluster}] {message}")

        scoped = source.for_cluster(cluster)
        found = _analysis(scoped, window, thresholds, now, step if progress else None, namespaces, cluster)
        stamped = tuple(f.model_copy(update={"cluster": cluster}) for f in found.report.findings)
        report = found.report.model_copy(update={"findings": stamped})
        if keep:
            return ClusterAnalysis(cluster, replace(found, report=report), scoped)
        kept = Analysis(report, _empty_snapshot(found.snapshot), (), (), held=found.held)
        return ClusterAnalysis(cluster, kept, scoped)

    log.info("analysing %d clusters (%s) apart", len(chosen), ", ".join(chosen))
    with ThreadPoolExecutor(max_workers=min(CLUSTERS_AT_ONCE, len(chosen))) as pool:
        parts = tuple(pool.map(one, chosen))
    first = parts[0].analysis
    findings = tuple(f for p in parts for f in p.analysis.report.findings)
    report = FindingsReport(
        window=window,
        generated_at=first.report.generated_at,
        source=source.description,
        gpus_judged=sum(p.analysis.gpu_count for p in parts),
        missing_sources=_merged_missing(parts),
        findings=findings,
    )
    held = frozenset(ns for p in parts for ns in p.analysis.held)
    return _in_scope(Analysis(report, first.snapshot, first.workloads, first.nodes, parts, held), namespaces)


def _in_scope(analysis: Analysis, namespaces: Collection[str]) -> Analysis:
    """``analysis``, unless its namespace scope held no GPU: then no GPU was judged, and "no
    findings" would read as "all busy". Said with the namespaces that did hold GPUs, as an unknown
    ``--cluster`` is said with the clusters there are."""
    if not namespaces:
        return analysis
    asked = sorted(set(namespaces))
    if analysis.gpu_count == 0:
        held = ", ".join(sorted(analysis.held)) or "none: no pod held a GPU"
        which = "namespace" if len(asked) == 1 else "namespaces"
        raise EmptyScopeError(
            f"no pod in {which} {', '.join(asked)} held a GPU in the window (namespaces holding GPUs: {held})"
        )
    idle = [ns for ns in asked if ns not in analysis.held]
    if idle:
        log.warning("no pod in namespace(s) %s held a GPU in the window: left out", ", ".join(idle))
    return analysis


def _merged_missing(parts: Sequence[ClusterAnalysis]) -> tuple[MissingSource, ...]:
    """Each source some cluster lacks, once, naming the clusters that lack it unless all do."""
    lacking: dict[str, list[str]] = {}
    first: dict[str, MissingSource] = {}
    for p in parts:
        for m in p.analysis.report.missing_sources:
            lacking.setdefault(m.source, []).append(p.cluster)
            first.setdefault(m.source, m)
    return tuple(
        first[name].model_copy(update={"clusters": () if len(names) == len(parts) else tuple(names)})
        for name, names in lacking.items()
    )


def _empty_snapshot(snapshot: FleetSnapshot) -> FleetSnapshot:
    """What is kept of a cluster's snapshot when only its findings are wanted: its capabilities."""
    return FleetSnapshot(window=snapshot.window, capabilities=snapshot.capabilities, devices={})


def _analysis(
    source: MetricsSource,
    window: TimeWindow,
    thresholds: Thresholds,
    now: datetime | None,
    progress: Callable[[str], None] | None,
    namespaces: Collection[str],
    cluster: str | None = None,
) -> Analysis:
    """One cluster's analysis, as its rounds: discover and snapshot → closer looks → judge → report."""
    now = datetime.now(UTC) if now is None else now
    if now.tzinfo is None:
        raise BadInputError("now must carry a timezone")
    if window.end > now + _CLOCK_SKEW:
        raise BadInputError(f"the window ends at {window.end.isoformat()}, after now ({now.isoformat()})")

    def step(message: str) -> None:
        log.info("%s", message)
        if progress is not None:
            progress(message)

    rounds = _Rounds(source, thresholds, now, step, cluster)
    snapshot, held = rounds.snapshot(window, namespaces)
    views, nodes = rounds.closer_looks(snapshot)
    found = rounds.judge(snapshot, views, nodes)
    report = FindingsReport(
        window=window,
        generated_at=now,
        source=source.description,
        gpus_judged=len({(k.uuid, k.mig_instance) for k in snapshot.devices}),
        missing_sources=missing_sources(snapshot.capabilities),
        findings=tuple(found),
    )
    return Analysis(report=report, snapshot=snapshot, workloads=tuple(views), nodes=tuple(nodes), held=held)


@dataclass(frozen=True)
class _Rounds:
    """The rounds of one cluster's analysis. Each takes what the rounds before it returned and asks
    the source for what the detectors need next; detection code decides, the source only answers."""

    source: MetricsSource
    thresholds: Thresholds
    now: datetime
    step: Callable[[str], None]
    cluster: str | None

    def snapshot(
        self, window: TimeWindow, namespaces: Collection[str]
    ) -> tuple[FleetSnapshot, frozenset[str]]:
        """Discovery and the fleet-wide aggregates: every GPU holder of the window (in the namespace
        scope) and its numbers; and the namespaces whose pods held GPUs, scope or not."""
        self.step("discovering series and querying fleet-wide aggregates")
        snapshot = self.source.snapshot(window, self.thresholds)
        if not snapshot.devices:
            raise NoDataError(f"{self.source.description}: no GPU series in the window")
        held = frozenset(k.namespace for k in snapshot.devices if k.allocated)
        snapshot = scope_snapshot(snapshot, namespaces)
        log.info("source capabilities: %s", snapshot.capabilities.describe())
        return snapshot, held

    def closer_looks(self, snapshot: FleetSnapshot) -> tuple[list[WorkloadView], list[NodeView]]:
        """Each holder over its own judged span (past its pod's warm-up; a young Job's from its first
        busy sample), the shares of young starvation candidates, and the idle endpoint candidates'
        memory and request rate: the workload views the detectors judge."""
        source, thresholds, step = self.source, self.thresholds, self.step
        planned = workloads.draft(snapshot, thresholds, self.now)
        starts = workloads.busy_starts(planned)
        # Spans known now (every holder but young Jobs') are aggregated while the young Jobs' first
        # busy samples are found: the two rounds overlap.
        looks = workloads.closer_looks(planned, thresholds)
        # Kept until the idle endpoints' memory is read: the early read is waited for only there.
        side = ThreadPoolExecutor(max_workers=2)
        try:
            # The likely idle endpoints' memory is read beside the closer looks: one round less.
            suspects = workloads.idle_suspects(planned, thresholds) if snapshot.capabilities.memory else []
            early = None
            if suspects:
                step(f"reading the memory of {len(suspects)} GPU(s) of likely idle endpoints")
                early = side.submit(source.memory_used, snapshot, suspects)
            busy = None
            if starts:
                step(f"finding the first busy sample of {len(starts)} Job GPU(s) that started in the window")
                busy = side.submit(source.first_busy, snapshot, starts, thresholds.idle_percent)
            numbers = _span_numbers(source, snapshot, looks, thresholds, step)
            if busy is not None:
                planned = workloads.settle(planned, busy.result(), thresholds)
                # Only the holders `settle` gave a span: every other look went out above.
                rest = workloads.closer_looks(planned, thresholds, settled_only=True)
                numbers |= _span_numbers(source, snapshot, rest, thresholds, step)
            more = workloads.share_looks(planned, numbers, thresholds)
            if more:
                step(f"measuring stalled and busy shares of {len(more)} young starvation candidate GPU(s)")
                numbers = workloads.with_shares(numbers, source.span_numbers(snapshot, more, thresholds))
            views, nodes = workloads.finalize(planned, numbers, thresholds)
            views = _with_idle_extras(
                source, snapshot, views, thresholds, self.now, suspects, early, step, self.cluster
            )
        finally:
            side.shutdown(wait=True)
        return views, nodes

    def judge(
        self, snapshot: FleetSnapshot, views: list[WorkloadView], nodes: list[NodeView]
    ) -> list[Finding]:
        """The detectors' verdicts, then the smaller shares long-running workloads would fit (one more
        round, for their framebuffer peaks)."""
        views = _with_readings(self.source, snapshot, views, self.thresholds, self.step)
        self.step("running detectors")
        found: list[Finding] = detectors.detect(views, nodes, self.thresholds, self.now)
        return _right_sized(self.source, snapshot, views, found, self.thresholds, self.step)


def _with_readings(
    source: MetricsSource,
    snapshot: FleetSnapshot,
    views: list[WorkloadView],
    thresholds: Thresholds,
    step: Callable[[str], None],
) -> list[WorkloadView]:
    """Views with the raw utilization, power, limit and clock-event reasons of the GPUs of the
    stalled-job candidates (busy on average: only they can be waiting while they read busy) whose
    waits, counted by the TSDB first, come near the rule's thresholds."""
    candidates = [v for v in views if stalled_job.candidate(v, thresholds)]
    if not candidates:
        return views
    looks = [w for v in candidates for w in stalled_job.first_look(v, thresholds)]
    step(f"counting waits of {len(looks) // 2} GPU(s) of {len(candidates)} busy workload(s)")
    counts = source.waiting_counts(snapshot, looks, stalled_job.wait_rule(candidates, thresholds))
    chosen = [v for v in candidates if stalled_job.worth_reading(v, counts, thresholds)]
    if not chosen:
        return views
    keys = [d.key for v in chosen for d in v.devices]
    step(f"reading power of {len(keys)} GPU(s) of {len(chosen)} busy workload(s)")
    readings = source.gpu_readings(snapshot, keys)
    picked = {v.ref for v in chosen}
    return [
        replace(v, devices=tuple(replace(d, readings=readings.get(d.key)) for d in v.devices))
        if v.ref in picked
        else v
        for v in views
    ]


def _with_idle_extras(
    source: MetricsSource,
    snapshot: FleetSnapshot,
    views: list[WorkloadView],
    thresholds: Thresholds,
    now: datetime,
    suspects: list[DeviceKey],
    early: Future[dict[DeviceKey, float]] | None,
    step: Callable[[str], None],
    cluster: str | None = None,
) -> list[WorkloadView]:
    """Views with the idle endpoint candidates' memory and request rate.

    ``early`` is the memory read of the ``suspects`` (the likely idle endpoints), sent beside the
    closer looks: waited for only when it holds a candidate (had it failed, the run fails then, as
    a read of the candidates would have; otherwise its failure is only logged). Candidates it did
    not cover (an endpoint busy only during a warm-up inside the window) are read now.
    """
    idle = [v for v in views if idle_endpoint_candidate(v, thresholds, now)]
    keys = [d.key for v in idle for d in v.devices]
    read = set(suspects)
    memory: dict[DeviceKey, float] = {}
    if early is not None:
        if not read.isdisjoint(keys):
            memory = dict(early.result())
        else:
            early.add_done_callback(_log_unneeded_failure)
    if not idle:
        return views
    step(f"checking {len(idle)} idle endpoint candidate(s)")
    unread = [k for k in keys if k not in read]
    if unread and snapshot.capabilities.memory:
        memory |= source.memory_used(snapshot, unread)
    by_ref = {v.ref: v for v in idle}
    return [
        workloads.with_extras(v, memory, _request_rate(source, v, thresholds, cluster))
        if v.ref in by_ref
        else v
        for v in views
    ]


def _right_sized(
    source: MetricsSource,
    snapshot: FleetSnapshot,
    views: Sequence[WorkloadView],
    found: list[Finding],
    thresholds: Thresholds,
    step: Callable[[str], None],
) -> list[Finding]:
    """Findings with the smaller GPU share their long-running workloads would fit (or why none):
    one more round, reading the framebuffer peaks of those workloads' GPUs."""
    by_ref = {v.ref: v for v in views}
    chosen = [i for i, f in enumerate(found) if right_size.wanted(f, thresholds) and f.workload in by_ref]
    if not chosen:
        return found
    step(f"sizing smaller GPU shares for {len(chosen)} long-running workload(s)")
    keys = [d.key for i in chosen for d in by_ref[found[i].workload].devices]
    peaks = (
        source.memory_peaks(snapshot, keys, thresholds.right_size.memory_quantile)
        if snapshot.capabilities.memory
        else {}
    )
    out = list(found)
    for i in chosen:
        f = found[i]
        sized = right_size.right_size(f, by_ref[f.workload], peaks, thresholds)
        out[i] = f.model_copy(update={"evidence": f.evidence.model_copy(update={"right_size": sized})})
    return out


def _log_unneeded_failure(read: Future[dict[DeviceKey, float]]) -> None:
    error = read.exception()
    if error is not None:
        log.info("the early memory read failed (%s); no idle endpoint candidate needed it", error)


def _span_numbers(
    source: MetricsSource,
    snapshot: FleetSnapshot,
    looks: Sequence[CloserLook],
    thresholds: Thresholds,
    step: Callable[[str], None],
) -> dict[tuple[DeviceKey, TimeWindow], SpanNumbers]:
    if not looks:
        return {}
    step(f"aggregating {len(looks)} GPU(s) over their own judged span")
    return source.span_numbers(snapshot, looks, thresholds)


def _request_rate(
    source: MetricsSource, view: WorkloadView, t: Thresholds, cluster: str | None = None
) -> RequestRate | None:
    if t.request_rate_query is None:
        return None
    query = render_template(
        t.request_rate_query,
        {
            "namespace": view.ref.namespace,
            "kind": view.ref.kind,
            "workload": view.ref.name,
            "window": duration(view.window.duration),
            "cluster": cluster or "",
        },
        {"pods": [p.name for p in view.pods]},
    )
    return RequestRate(query=query, value=source.instant_value(query, view.window.end))
