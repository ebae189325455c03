"""From per-device aggregates to per-workload views the detectors judge.

Two steps, both pure. ``plan`` groups devices by the workload holding them (pods alive at the window's
end, resolved to their controller), works out the span each workload is judged over, and lists the
devices that need a closer look at raw samples: those of workloads younger than the window, and
those whose quantiles make them starvation candidates without a sample histogram. ``finalize``
folds the raw samples in and returns the views.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from analyzer.detection.detectors import judged_span
from analyzer.detection.ownership import resolve_all
from analyzer.detection.views import DeviceView, NodeView, PodView, RequestRate, WorkloadView
from analyzer.sources.aggregates import (
    CpuUsage,
    DeviceAggregate,
    DeviceKey,
    DeviceSamples,
    FleetSnapshot,
    PodId,
    PodRecord,
    Shares,
    UtilStats,
    counter_increase,
    histogram_shares,
    quantile_levels,
    sample_shares,
    util_stats,
)
from analyzer.sources.aggregates import (
    coverage as device_coverage,
)
from common.model import TimeWindow, WorkloadRef
from common.thresholds import Thresholds

__all__ = ["DeviceView", "NodeView", "Plan", "PodView", "RequestRate", "WorkloadView", "finalize", "plan"]


@dataclass(frozen=True)
class WorkloadDraft:
    ref: WorkloadRef
    pods: tuple[PodRecord, ...]
    devices: tuple[DeviceAggregate, ...]
    span: TimeWindow | None  # None: too young to judge
    missing_devices: int


@dataclass(frozen=True)
class Plan:
    window: TimeWindow
    snapshot: FleetSnapshot
    workloads: tuple[WorkloadDraft, ...]
    nodes: Mapping[str, tuple[DeviceAggregate, ...]]
    sample_keys: tuple[DeviceKey, ...] = ()  # devices to pull raw samples for
    bucket_keys: tuple[DeviceKey, ...] = ()  # ... and their histogram counters
    young_keys: frozenset[DeviceKey] = field(default_factory=frozenset)


def plan(snapshot: FleetSnapshot, thresholds: Thresholds, now: datetime) -> Plan:
    window = snapshot.window
    owners = resolve_all(snapshot.pods, snapshot.replicasets)
    by_pod: dict[PodId, list[DeviceAggregate]] = defaultdict(list)
    by_node: dict[str, list[DeviceAggregate]] = defaultdict(list)
    allocated_nodes: set[str] = set()
    for dev in snapshot.devices.values():
        if dev.key.allocated:
            by_pod[dev.key.pod_id].append(dev)
            allocated_nodes.add(dev.info.node)
        else:
            by_node[dev.info.node].append(dev)

    alive = dict(snapshot.pods)
    if not snapshot.capabilities.kube_state_metrics:
        # Nothing says who owns these pods or when they started: each is its own bare Pod, and one
        # that ended during the window shows as low coverage, never as idle.
        alive = {pid: PodRecord(namespace=pid[0], name=pid[1]) for pid in by_pod}
        owners = resolve_all(alive, {})
    grouped: dict[WorkloadRef, list[PodRecord]] = defaultdict(list)
    for pid, pod in alive.items():
        if by_pod.get(pid) or (pod.gpu_requests or 0) > 0:
            grouped[owners[pid]].append(pod)

    drafts = []
    sample_keys: set[DeviceKey] = set()
    bucket_keys: set[DeviceKey] = set()
    young: set[DeviceKey] = set()
    for ref, pods in sorted(grouped.items(), key=lambda item: item[0].key()):
        devices = tuple(sorted((d for p in pods for d in by_pod.get((p.namespace, p.name), [])), key=_order))
        missing = sum(
            max(0, (p.gpu_requests or 0) - len(by_pod.get((p.namespace, p.name), []))) for p in pods
        )
        starts = [_utc(p.start) for p in pods]
        span = judged_span(window, starts, thresholds.warmup_grace, now)
        drafts.append(WorkloadDraft(ref, tuple(pods), devices, span, missing))
        if span is None:
            continue
        if span != window:
            keys = {d.key for d in devices}
            young |= keys
            sample_keys |= keys
            bucket_keys |= {d.key for d in devices if d.histogram is not None}
        else:
            sample_keys |= {d.key for d in devices if _bimodal_candidate(d, thresholds)}

    # A node counts as unallocated only if no pod held any of its GPUs during the window, and no
    # pod requesting GPUs runs there now (GPU series without pod labels must not empty a node).
    requesting = {p.node for p in alive.values() if p.node and (p.gpu_requests or 0) > 0}
    nodes = {
        name: tuple(sorted(devs, key=_order))
        for name, devs in sorted(by_node.items())
        if name not in allocated_nodes and name not in requesting
    }
    return Plan(
        window=window,
        snapshot=snapshot,
        workloads=tuple(drafts),
        nodes=nodes,
        sample_keys=tuple(sorted(sample_keys)),
        bucket_keys=tuple(sorted(bucket_keys)),
        young_keys=frozenset(young),
    )


def _bimodal_candidate(dev: DeviceAggregate, t: Thresholds) -> bool:
    """Quantiles say a share of samples is stalled and a share busy; only raw samples can confirm.

    If at least ``min_share`` of the samples are at or below the idle bound, the quantile at
    ``min_share / 2`` is too, and likewise for busy samples: the test never misses a bimodal device.
    """
    if dev.histogram is not None:
        return False
    s = dev.stats
    return s.q_low <= t.starvation_idle_percent and s.q_high > t.starvation_busy_percent


def finalize(
    planned: Plan,
    samples: Mapping[DeviceKey, DeviceSamples],
    thresholds: Thresholds,
) -> tuple[list[WorkloadView], list[NodeView]]:
    snap = planned.snapshot
    views = []
    for draft in planned.workloads:
        span = draft.span or planned.window
        devices = tuple(_device_view(d, span, samples.get(d.key), planned, thresholds) for d in draft.devices)
        pods = tuple(
            PodView(
                namespace=p.namespace,
                name=p.name,
                start=_utc(p.start),
                cpu=snap.cpu.get((p.namespace, p.name), CpuUsage()),
            )
            for p in draft.pods
        )
        views.append(
            WorkloadView(
                ref=draft.ref,
                pods=pods,
                devices=devices,
                window=planned.window,
                stats_span=span,
                missing_devices=draft.missing_devices,
            )
        )
    nodes = [
        NodeView(
            name=name,
            devices=tuple(_device_view(d, planned.window, None, planned, thresholds) for d in devs),
            window=planned.window,
        )
        for name, devs in planned.nodes.items()
    ]
    return views, nodes


def _device_view(
    dev: DeviceAggregate,
    span: TimeWindow,
    raw: DeviceSamples | None,
    planned: Plan,
    t: Thresholds,
) -> DeviceView:
    stats: UtilStats | None = dev.stats
    coverage = dev.coverage
    shares: Shares | None = dev.histogram
    if raw is not None:
        cut = raw.between(span)
        if dev.key in planned.young_keys:
            # Judged over a shorter span than the window: every number comes from the raw samples.
            stats = util_stats(cut.values, quantile_levels(t.starvation_min_share)[0])
            coverage = device_coverage(
                stats.samples if stats else 0, span.duration.total_seconds(), dev.interval_s
            )
            if dev.histogram is not None:
                shares = _bucket_shares(cut, planned)
        if shares is None or shares.source != "histogram":
            shares = sample_shares(cut.values, t.starvation_idle_percent, t.starvation_busy_percent)
    return DeviceView(
        key=dev.key,
        info=dev.info,
        stats=stats,
        coverage=coverage,
        shares=shares,
        memory_used_mib=dev.memory_used_mib,
    )


def _bucket_shares(cut: DeviceSamples, planned: Plan) -> Shares | None:
    bounds = planned.snapshot.capabilities.histogram_le
    if len(bounds) != 3 or not all(le in cut.buckets for le in bounds):
        return None
    idle_le, busy_le, total_le = bounds
    inc = {le: counter_increase(cut.buckets[le][1]) for le in bounds}
    return histogram_shares(inc[idle_le], inc[busy_le], inc[total_le])


def with_extras(
    view: WorkloadView,
    memory: Mapping[DeviceKey, float],
    request_rate: RequestRate | None,
) -> WorkloadView:
    devices = tuple(replace(d, memory_used_mib=memory[d.key]) if d.key in memory else d for d in view.devices)
    return replace(view, devices=devices, request_rate=request_rate)


def _order(dev: DeviceAggregate) -> tuple[str, str, str, str]:
    return (dev.info.node, dev.info.index or "", dev.key.mig_instance, dev.key.uuid)


def _utc(ts: float | None) -> datetime | None:
    return None if ts is None else datetime.fromtimestamp(ts, tz=UTC)
