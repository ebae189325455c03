"""From per-device aggregates to per-workload views the detectors judge.

Two steps, both pure. ``plan`` groups every device holder of the window by the workload whose pod
held it (every pod kube-state-metrics reported in the window, resolved to its controller, not only
those alive at the end) and works out each holder's judged span (its pod's life in the window, past
that pod's own warm-up). ``settle`` starts a Job's span at its first busy sample; ``closer_looks``
and then ``share_looks`` list the holders that need aggregates over their own span (those whose
pod's warm-up falls inside the window, and starvation candidates without a sample histogram), which
the source computes — in the TSDB for Prometheus, never from raw samples. ``finalize`` folds them
in and returns the views.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from analyzer.detection.controllers import owner_above
from analyzer.detection.ownership import resolve_all
from analyzer.detection.verdict import LONG_RUNNING_KINDS, stayed_idle
from analyzer.detection.views import DeviceView, NodeView, PodView, RequestRate, WorkloadView
from analyzer.sources.aggregates import (
    CloserLook,
    CpuUsage,
    DeviceAggregate,
    DeviceKey,
    FleetSnapshot,
    PodId,
    PodRecord,
    Shares,
    SpanNumbers,
    UtilStats,
)
from analyzer.sources.aggregates import (
    coverage as device_coverage,
)
from common.model import TimeWindow, WorkloadRef
from common.thresholds import Thresholds

__all__ = ["DeviceView", "Drafts", "NodeView", "PodView", "RequestRate", "WorkloadView", "draft", "finalize"]

# kube-state-metrics' last report of a pod alive at the window's end lies within one lookback of it.
_STILL_THERE = timedelta(minutes=5)


@dataclass(frozen=True)
class Holder:
    """One device aggregate and the span its pod is judged over (None: all of it warm-up)."""

    device: DeviceAggregate
    span: TimeWindow | None
    cut: bool  # the pod's warm-up lies inside the window: numbers are aggregates over `span` alone
    # A Job pod's warm-up ends at its first busy sample, at the latest after the grace: `span` then
    # starts at the incarnation's start, `born` is when it started and `search` is the part of its
    # life where that sample matters (built once for the pod's GPUs; None: all of `span`).
    # `settled`: `settle` has set the span (from that sample, or the grace's end).
    until_busy: bool = False
    born: datetime | None = None
    search: TimeWindow | None = None
    settled: bool = False


@dataclass(frozen=True)
class WorkloadDraft:
    ref: WorkloadRef
    pods: tuple[PodRecord, ...]
    holders: tuple[Holder, ...]
    spans: tuple[TimeWindow, ...]  # judged spans of pods that requested GPUs none of which reported
    missing_devices: int


@dataclass(frozen=True)
class Drafts:
    """Every workload (and unallocated node) drafted from a snapshot, before the closer looks settle
    their numbers (not the reaper's plan of actions: that is ``reaper.planner.Plan``)."""

    window: TimeWindow
    snapshot: FleetSnapshot
    workloads: tuple[WorkloadDraft, ...]
    nodes: Mapping[str, tuple[DeviceAggregate, ...]]


def incarnations(
    pod: PodRecord, window: TimeWindow, now: datetime
) -> list[tuple[datetime | None, TimeWindow]]:
    """Each incarnation of a pod: when it started (None: unknown) and its life inside the window.

    An incarnation runs from its start to the next one's start (a StatefulSet's pod recreated under
    the same name), the last to the earliest of the window's end, ``now`` and the pod's last report
    running (when it was gone or done before the end). A pod whose start time is unknown is taken
    to have started before the window.
    """
    end = min(window.end, now)
    if pod.last_seen is not None and _utc(pod.last_seen) < end - _STILL_THERE:
        end = _utc(pod.last_seen)
    starts = [_utc(s) for s in (pod.starts or ((pod.start,) if pod.start is not None else ()))]
    if not starts:
        return [(None, TimeWindow(start=window.start, end=end))] if end > window.start else []
    out: list[tuple[datetime | None, TimeWindow]] = []
    for i, born in enumerate(starts):
        until = min(end, starts[i + 1]) if i + 1 < len(starts) else end
        begin = max(window.start, born)
        if until > begin:
            out.append((born, TimeWindow(start=begin, end=until)))
    return out


def pod_lives(pod: PodRecord, window: TimeWindow, grace: timedelta, now: datetime) -> list[TimeWindow]:
    """The parts of the window a pod is judged over: each incarnation's life past its warm-up.

    Its first ``grace`` is model loading and never judged (see ``incarnations``).
    """
    lives = []
    for born, life in incarnations(pod, window, now):
        begin = life.start if born is None else max(life.start, born + grace)
        if life.end > begin:
            lives.append(TimeWindow(start=begin, end=life.end))
    return lives


def pod_span(pod: PodRecord, window: TimeWindow, grace: timedelta, now: datetime) -> TimeWindow | None:
    """The latest incarnation's judged span (None: none of it is past its warm-up)."""
    lives = pod_lives(pod, window, grace, now)
    return lives[-1] if lives else None


def union_seconds(spans: Iterable[TimeWindow]) -> float:
    """Length of the union of spans (replicas running side by side count once)."""
    total, reach = 0.0, None
    for span in sorted(spans, key=lambda s: s.start):
        if reach is None or span.start >= reach:
            total += span.duration.total_seconds()
            reach = span.end
        elif span.end > reach:
            total += (span.end - reach).total_seconds()
            reach = span.end
    return total


def draft(snapshot: FleetSnapshot, thresholds: Thresholds, now: datetime) -> Drafts:
    window = snapshot.window
    grace = thresholds.warmup_grace
    by_pod: dict[PodId, list[DeviceAggregate]] = defaultdict(list)
    by_node: dict[str, list[DeviceAggregate]] = defaultdict(list)
    allocated_nodes: set[str] = set()
    for dev in snapshot.devices.values():
        if dev.key.allocated:
            by_pod[dev.key.pod_id].append(dev)
            allocated_nodes.add(dev.info.node)
        else:
            by_node[dev.info.node].append(dev)

    pods = dict(snapshot.pods)
    if not snapshot.capabilities.kube_state_metrics:
        # Nothing says who owns these pods or when they started: each is its own bare Pod, and one
        # that ended during the window shows as low coverage, never as idle.
        pods = {}
    for pid in by_pod:
        # A pod that held a GPU but that kube-state-metrics did not report is still judged, as itself.
        pods.setdefault(pid, PodRecord(namespace=pid[0], name=pid[1]))
    owners = resolve_all(pods, snapshot.replicasets, snapshot.jobs)
    grouped: dict[WorkloadRef, list[PodRecord]] = defaultdict(list)
    for pid, pod in pods.items():
        # A pod the scheduler never placed holds no GPU: it can neither be judged nor be missing one.
        # Nor can one that finished before the window (a done Job's pod, still in the API).
        if by_pod.get(pid) or ((pod.gpu_requests or 0) > 0 and not pod.never_scheduled and not pod.finished):
            grouped[owners[pid]].append(pod)

    drafts = []
    for ref, members in sorted(grouped.items(), key=lambda item: item[0].key()):
        holders: list[Holder] = []
        spans: list[TimeWindow] = []
        missing = 0
        for pod in members:
            devices = sorted(by_pod.get((pod.namespace, pod.name), []), key=_order)
            lives = pod_lives(pod, window, grace, now)
            if lives and len(devices) < (pod.gpu_requests or 0):
                missing += (pod.gpu_requests or 0) - len(devices)
                if not devices:
                    spans += lives
            if devices and pod.owner_kind == "Job":
                # A Job computes as soon as its data is in: its warm-up ends at its first busy sample.
                for born, life in incarnations(pod, window, now):
                    early = born is not None and born + grace > life.start
                    search = _busy_search(life, born, grace) if early else None
                    holders += [
                        Holder(d, life, cut=early, until_busy=early, born=born, search=search)
                        for d in devices
                    ]
                continue
            # Some incarnation's warm-up lies inside the window: the aggregates include it.
            warm_in_window = any(_utc(s) + grace > window.start for s in pod.starts) or (
                pod.start is not None and _utc(pod.start) + grace > window.start
            )
            holders += [Holder(d, life, cut=warm_in_window) for d in devices for life in lives]
            holders += [Holder(d, None, cut=False) for d in devices if not lives]
        drafts.append(WorkloadDraft(ref, tuple(members), tuple(holders), tuple(spans), missing))

    # A node counts as unallocated only if no pod held any of its GPUs during the window, and no
    # pod requesting GPUs ran there (GPU series without pod labels must not empty a node).
    requesting = {p.node for p in pods.values() if p.node and (p.gpu_requests or 0) > 0 and not p.finished}
    nodes = {
        name: tuple(sorted(devs, key=_order))
        for name, devs in sorted(by_node.items())
        if name not in allocated_nodes and name not in requesting
    }
    return Drafts(
        window=window,
        snapshot=snapshot,
        workloads=tuple(drafts),
        nodes=nodes,
    )


def _bimodal_candidate(stats: UtilStats | None, histogram: Shares | None, t: Thresholds) -> bool:
    """Quantiles say a share of samples is stalled and a share busy; the shares themselves confirm.

    If at least ``min_share`` of the samples are at or below the idle bound, the quantile at
    ``min_share / 2`` is too, and likewise for busy samples: the test never misses a bimodal device.
    """
    if histogram is not None or stats is None:
        return False
    return stats.q_low <= t.starvation_idle_percent and stats.q_high > t.starvation_busy_percent


Judged = tuple[DeviceKey, TimeWindow]


def idle_suspects(planned: Drafts, t: Thresholds) -> list[DeviceKey]:
    """GPUs of the workloads likely to be idle endpoints: long-running kinds none of whose GPUs went
    above ``idle_percent`` over the whole window. Their memory is read while the closer looks are
    out; the idle endpoint detector's candidates, known after them, are mostly these (a young
    workload busy only during its warm-up is not, and is read then)."""
    out: dict[DeviceKey, None] = {}
    for draft in planned.workloads:
        if draft.ref.kind not in LONG_RUNNING_KINDS or not draft.holders:
            continue
        if all(stayed_idle(h.device.stats.max, t) for h in draft.holders):
            out.update((h.device.key, None) for h in draft.holders)
    return list(out)


def busy_starts(planned: Drafts) -> list[Judged]:
    """Job holders whose warm-up ends at their first busy sample, each with the part of its life
    where that sample matters: up to its grace's end (a later one leaves the span at the grace's
    end), which keeps the source's search short whatever the window's length (set by ``plan``,
    with its thresholds' grace)."""
    wanted = {
        (h.device.key, _search(h, h.span))
        for d in planned.workloads
        for h in d.holders
        if h.until_busy and h.span
    }
    return sorted(wanted, key=lambda w: (w[0], w[1].start))


def _busy_search(life: TimeWindow, born: datetime | None, grace: timedelta) -> TimeWindow:
    if born is None:
        return life
    return TimeWindow(start=life.start, end=max(life.start, min(life.end, born + grace)))


def _search(h: Holder, life: TimeWindow) -> TimeWindow:
    return h.search if h.search is not None else life


def settle(planned: Drafts, first_busy: Mapping[Judged, float], t: Thresholds) -> Drafts:
    """Each Job holder's span from its first busy sample (at the latest from its grace's end)."""
    drafts = []
    # Holders of one life with the same first busy sample (or none: the GPUs of one pod that never
    # got busy in time) share their span: each built once.
    settled: dict[tuple[TimeWindow, datetime | None, float | None], TimeWindow | None] = {}
    for draft in planned.workloads:
        if not any(h.until_busy for h in draft.holders):
            drafts.append(draft)
            continue
        holders = []
        for h in draft.holders:
            if h.until_busy and h.span is not None:
                first = first_busy.get((h.device.key, _search(h, h.span)))
                known = (h.span, h.born, first)
                if known not in settled:
                    settled[known] = _past_first_busy(h, h.span, first, t)
                # Built, not `replace`d (a tenth of the time): every field is passed on.
                h = Holder(h.device, settled[known], h.cut, False, h.born, h.search, settled=True)
            holders.append(h)
        drafts.append(replace(draft, holders=tuple(holders)))
    return replace(planned, workloads=tuple(drafts))


def closer_looks(planned: Drafts, t: Thresholds, settled_only: bool = False) -> list[CloserLook]:
    """The first round of aggregates over holders' own spans: young holders' statistics (and sample
    histogram), and the stalled/busy shares of starvation candidates judged over the whole window.
    ``settled_only``: those of the young Jobs' holders ``settle`` gave a span, alone.

    A young holder's shares wait for its statistics (``share_looks``): the shares' subqueries are the
    costly part, and most holders are no starvation candidate.
    """
    looks: dict[Judged, CloserLook] = {}
    for draft in planned.workloads:
        for h in draft.holders:
            if h.span is None or h.until_busy or (settled_only and not h.settled):
                continue  # a young Job's span is known once its first busy sample is (`settle`)
            dev, judged = h.device, (h.device.key, h.span)
            if h.cut:
                looks[judged] = CloserLook(dev.key, h.span, stats=True, histogram=dev.histogram is not None)
            elif judged not in looks and _bimodal_candidate(dev.stats, dev.histogram, t):
                looks[judged] = CloserLook(dev.key, h.span, shares=True)
    return [looks[w] for w in sorted(looks, key=lambda w: (w[0], w[1].start))]


def share_looks(planned: Drafts, numbers: Mapping[Judged, SpanNumbers], t: Thresholds) -> list[CloserLook]:
    """The second round: shares for young holders whose statistics over their span make them
    starvation candidates (holders with a sample histogram have their shares already)."""
    wanted: set[Judged] = set()
    for draft in planned.workloads:
        for h in draft.holders:
            if not h.cut or h.span is None or h.device.histogram is not None:
                continue
            found = numbers.get((h.device.key, h.span))
            if found is not None and _bimodal_candidate(found.stats, None, t):
                wanted.add((h.device.key, h.span))
    return [CloserLook(k, span, shares=True) for k, span in sorted(wanted, key=lambda w: (w[0], w[1].start))]


def with_shares(
    numbers: Mapping[Judged, SpanNumbers], shares: Mapping[Judged, SpanNumbers]
) -> dict[Judged, SpanNumbers]:
    """The first round's numbers with the second round's shares and phases folded in."""
    out = dict(numbers)
    for w, found in shares.items():
        out[w] = replace(out.get(w, SpanNumbers()), shares=found.shares, phases=found.phases)
    return out


def finalize(
    planned: Drafts,
    numbers: Mapping[Judged, SpanNumbers],
    thresholds: Thresholds,
) -> tuple[list[WorkloadView], list[NodeView]]:
    snap = planned.snapshot
    del thresholds
    views = []
    for draft in planned.workloads:
        devices = []
        spans = list(draft.spans)
        for h in draft.holders:
            span = h.span
            if span is None:
                continue
            devices.append(_device_view(h.device, span, numbers.get((h.device.key, span)), h.cut))
            spans.append(span)
        pods = tuple(
            PodView(
                namespace=p.namespace,
                name=p.name,
                start=None if p.start is None else _utc(p.start),
                cpu=snap.cpu.get((p.namespace, p.name), CpuUsage()),
                ambiguity=p.ambiguity,
            )
            for p in draft.pods
        )
        views.append(
            WorkloadView(
                ref=draft.ref,
                pods=pods,
                devices=tuple(devices),
                window=planned.window,
                judged=(
                    TimeWindow(start=min(s.start for s in spans), end=max(s.end for s in spans))
                    if spans
                    else None
                ),
                judged_seconds=union_seconds(spans),
                missing_devices=draft.missing_devices,
                owner=owner_above(draft.ref, draft.pods),
            )
        )
    nodes = [
        NodeView(
            name=name,
            devices=tuple(_device_view(d, planned.window, None, False) for d in devs),
            window=planned.window,
        )
        for name, devs in planned.nodes.items()
    ]
    return views, nodes


def _past_first_busy(h: Holder, life: TimeWindow, first: float | None, t: Thresholds) -> TimeWindow | None:
    """A Job's life from its first sample above ``idle_percent``, at the latest from its grace's end."""
    grace_end = life.start if h.born is None else h.born + t.warmup_grace
    begin = max(life.start, grace_end)
    if first is not None:
        # The span is (start, end]: start just before the first busy sample so that it counts (2 ms:
        # a TSDB's range reaches back to 1 ms after a span's start).
        begin = max(life.start, min(grace_end, _utc(first - 2e-3)))
    return TimeWindow(start=begin, end=life.end) if life.end > begin else None


def _device_view(
    dev: DeviceAggregate, span: TimeWindow, numbers: SpanNumbers | None, young: bool
) -> DeviceView:
    stats: UtilStats | None = dev.stats
    shares: Shares | None = dev.histogram
    phases = None
    if numbers is not None:
        if young:
            # The pod's warm-up lies inside the window: every number covers the span past it alone.
            stats = numbers.stats
            if dev.histogram is not None:
                shares = numbers.histogram
        if shares is None or shares.source != "histogram":
            shares, phases = numbers.shares, numbers.phases
    coverage = device_coverage(stats.samples if stats else 0, span.duration.total_seconds(), dev.interval_s)
    return DeviceView(
        key=dev.key,
        info=dev.info,
        stats=stats,
        coverage=coverage,
        span=span,
        shares=shares,
        memory_used_mib=dev.memory_used_mib,
        phases=phases,
        interval_s=dev.interval_s,
    )


def with_extras(
    view: WorkloadView,
    memory: Mapping[DeviceKey, float],
    request_rate: RequestRate | None,
) -> WorkloadView:
    devices = tuple(replace(d, memory_used_mib=memory[d.key]) if d.key in memory else d for d in view.devices)
    return replace(view, devices=devices, request_rate=request_rate)


def _order(dev: DeviceAggregate) -> tuple[str, str, str, str]:
    return (dev.info.node, dev.info.index or "", dev.key.mig_instance, dev.key.uuid)


def _utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=UTC)
