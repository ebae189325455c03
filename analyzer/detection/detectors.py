"""The detectors: pure functions of a workload's numbers, the thresholds and ``now``.

Each returns a ``Finding`` or ``None``. ``classify`` runs them in order — ``unknown`` first, so a
verdict is never drawn from too little data, then ``idle_endpoint``, ``dataloader_starvation`` and
``low_utilization`` — and the first that fires names the finding. Missing data is never evidence
of idleness: a GPU that stopped reporting lowers coverage, it does not read as 0 %.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from analyzer.detection.views import DeviceView, NodeView, WorkloadView
from common.model import (
    EVIDENCE_BY_KIND,
    AnyEvidence,
    Finding,
    FindingKind,
    LowUtilizationEvidence,
    TimeWindow,
    UnknownEvidence,
    UtilQuantile,
    WorkloadRef,
)
from common.thresholds import Thresholds
from common.timeutil import format_duration

LONG_RUNNING_KINDS = frozenset({"Deployment", "StatefulSet"})
_EPSILON = 1e-9


def judged_span(
    window: TimeWindow, pod_starts: Sequence[datetime | None], grace: timedelta, now: datetime
) -> TimeWindow | None:
    """The part of the window a workload is judged on, or None when it is too young to judge.

    Rule: from the later of the window's start and the youngest pod's start plus the warm-up
    grace, to the earlier of the window's end and ``now``. Less than half the window left means no
    verdict at all: model loading and first traffic would dominate the numbers. A pod whose start
    time is unknown is taken to have started before the window.
    """
    end = min(window.end, now)
    begin = window.start
    known = [s for s in pod_starts if s is not None]
    if known:
        begin = max(begin, max(known) + grace)
    if end - begin < window.duration / 2:
        return None
    if begin == window.start and end == window.end:
        return window
    return TimeWindow(start=begin, end=end)


@dataclass(frozen=True)
class _Numbers:
    """A workload's devices summed up."""

    mean: float
    max: float
    coverage: float
    samples: int
    hours: float
    wasted_gpu_hours: float
    q_low: float
    q_high: float
    q_level: float
    widest_spread: float


def _numbers(devices: Sequence[DeviceView], span: TimeWindow, missing: int = 0) -> _Numbers | None:
    judged = [d for d in devices if d.stats is not None]
    if not judged:
        return None
    stats = [d.stats for d in judged if d.stats is not None]
    coverage = 0.0 if missing or len(judged) < len(devices) else min(d.coverage for d in judged)
    hours = span.hours
    return _Numbers(
        mean=sum(s.mean for s in stats) / len(stats),
        max=max(s.max for s in stats),
        coverage=coverage,
        samples=sum(s.samples for s in stats),
        hours=hours,
        wasted_gpu_hours=sum(max(0.0, 1.0 - s.mean / 100.0) * hours for s in stats),
        q_low=min(s.q_low for s in stats),
        q_high=max(s.q_high for s in stats),
        q_level=stats[0].q_level,
        widest_spread=max(s.spread for s in stats),
    )


def _r(value: float) -> float:
    return round(value, 4)


def _base_evidence(n: _Numbers, devices: Sequence[DeviceView], span: TimeWindow) -> dict[str, Any]:
    """The utilization fields every verdict carries, as keyword arguments of its evidence class."""
    evidence: dict[str, Any] = {
        "util_metric": ",".join(sorted({d.info.metric for d in devices})),
        "mean_util_percent": _r(n.mean),
        "max_util_percent": _r(n.max),
        "quantiles": (
            UtilQuantile(level=n.q_level, percent=_r(n.q_low)),
            UtilQuantile(level=1.0 - n.q_level, percent=_r(n.q_high)),
        ),
        "coverage": _r(n.coverage),
        "samples": n.samples,
        "judged_from": span.start,
        "judged_hours": _r(n.hours),
    }
    memory = [d.memory_used_mib for d in devices if d.memory_used_mib is not None]
    if memory:
        evidence["memory_used_mib"] = _r(sum(memory) / len(memory))
    return evidence


def _make(
    kind: FindingKind,
    ref: WorkloadRef,
    view_pods: Iterable[str],
    nodes: Iterable[str],
    gpus: Iterable[str],
    window: TimeWindow,
    evidence: AnyEvidence,
    confidence: float,
    wasted: float,
    t: Thresholds,
    recommendation: str,
) -> Finding:
    cost = None if t.price_per_gpu_hour is None else round(wasted * t.price_per_gpu_hour, 2)
    return Finding(
        kind=kind,
        workload=ref,
        pods=tuple(sorted(view_pods)),
        nodes=tuple(sorted(nodes)),
        gpus=tuple(sorted(gpus)),
        window=window,
        evidence=evidence,
        confidence=round(min(1.0, max(0.0, confidence)), 3),
        wasted_gpu_hours=round(wasted, 3),
        estimated_cost=cost,
        recommendation=recommendation,
    )


def _workload_finding(
    kind: FindingKind,
    w: WorkloadView,
    evidence: dict[str, Any],
    confidence: float,
    wasted: float,
    t: Thresholds,
    recommendation: str,
) -> Finding:
    if w.request_rate is not None:
        evidence["request_rate"] = None if w.request_rate.value is None else _r(w.request_rate.value)
        evidence["request_rate_query"] = w.request_rate.query
    return _make(
        kind,
        w.ref,
        (p.name for p in w.pods),
        w.nodes,
        w.gpu_ids,
        w.window,
        EVIDENCE_BY_KIND[kind](**evidence),
        confidence,
        wasted,
        t,
        recommendation,
    )


def _span(w: WorkloadView, t: Thresholds, now: datetime) -> TimeWindow | None:
    return judged_span(w.window, [p.start for p in w.pods], t.warmup_grace, now)


def unknown(w: WorkloadView, t: Thresholds, now: datetime) -> Finding | None:
    """Too little data to judge: reported so people can fix collection, never acted on.

    Rule: the workload is old enough to judge (see ``judged_span``) and some GPU it holds delivered
    fewer than ``min_coverage`` of the samples expected over the judged span — an exporter gap, a
    GPU that fell off the bus, or GPUs the pods requested that never reported at all.
    Evidence: ``coverage``, ``min_coverage``, ``gpus_missing``, ``gpus_low_coverage``.
    """
    span = _span(w, t, now)
    if span is None:
        return None
    n = _numbers(w.devices, span, w.missing_devices)
    coverage = 0.0 if n is None else n.coverage
    if coverage >= t.min_coverage:
        return None
    low = [d.key.device_id for d in w.devices if d.stats is None or d.coverage < t.min_coverage]
    evidence: dict[str, Any] = {
        "coverage": _r(coverage),
        "min_coverage": t.min_coverage,
        "gpus_missing": w.missing_devices,
        "gpus_low_coverage": ",".join(sorted(low)),
        "judged_from": span.start,
        "judged_hours": _r(span.hours),
    }
    where = ", ".join(w.nodes) or "its node"
    return _workload_finding(
        FindingKind.UNKNOWN,
        w,
        evidence,
        confidence=0.0,  # no verdict, so no confidence in one
        wasted=0.0,
        t=t,
        recommendation=(
            f"Not enough data to judge ({coverage:.0%} of expected samples, {t.min_coverage:.0%} needed). "
            f"Check the GPU exporter and scraping on {where}; "
            "take no action on this workload until it reports."
        ),
    )


def idle_endpoint(w: WorkloadView, t: Thresholds, now: datetime) -> Finding | None:
    """A serving workload holding GPUs it does not use.

    Rule: a long-running kind (Deployment, StatefulSet) past its warm-up grace, with enough coverage,
    whose every GPU stayed at or below ``idle_percent`` in every sample of the judged span, with memory
    held: every GPU that reports framebuffer use averaged at least ``idle_min_memory_mib`` over the
    window (a GPU without memory data does not block the verdict; one holding less has nothing
    loaded and is left to ``low_utilization``). When the policy has a request-rate query, it must
    also have returned exactly 0 (no data is not zero).
    Evidence: ``max_util_percent``, ``mean_util_percent``, ``idle_share`` (1.0), ``coverage``,
    ``memory_used_mib`` (mean held per GPU) and ``min_memory_used_mib`` when reported,
    ``idle_min_memory_mib``, ``request_rate``.
    Wasted GPU-hours: ``(1 - mean) × GPUs × judged hours``.
    """
    if w.ref.kind not in LONG_RUNNING_KINDS:
        return None
    span = _span(w, t, now)
    if span is None or w.missing_devices:
        return None
    n = _numbers(w.devices, span)
    if n is None or n.coverage < t.min_coverage or n.max > t.idle_percent + _EPSILON:
        return None
    least_memory = _least_memory(w.devices)
    if least_memory is not None and least_memory < t.idle_min_memory_mib:
        return None
    if w.request_rate is not None and (w.request_rate.value is None or abs(w.request_rate.value) > _EPSILON):
        return None
    evidence = _base_evidence(n, w.devices, span)
    evidence |= {
        "idle_threshold_percent": t.idle_percent,
        "idle_share": 1.0,
        "idle_min_memory_mib": t.idle_min_memory_mib,
    }
    if least_memory is not None:
        evidence["min_memory_used_mib"] = _r(least_memory)
    gpus = len(w.devices)
    memory = evidence.get("memory_used_mib")
    held = f", holding {memory:,.0f} MiB each" if memory is not None else ""
    return _workload_finding(
        FindingKind.IDLE_ENDPOINT,
        w,
        evidence,
        confidence=n.coverage,
        wasted=n.wasted_gpu_hours,
        t=t,
        recommendation=(
            f"Scale {w.ref.kind} {w.ref.namespace}/{w.ref.name} to zero: its {gpus} GPU(s) stayed at or "
            f"below {t.idle_percent:g} % for {format_duration(span.duration)}{held}. If it must answer "
            "rare requests, serve them from a shared or smaller GPU (MIG slice, time-slicing)."
        ),
    )


def _least_memory(devices: Sequence[DeviceView]) -> float | None:
    """The lowest mean framebuffer use among the GPUs that report it (None: none does)."""
    return min((d.memory_used_mib for d in devices if d.memory_used_mib is not None), default=None)


def dataloader_starvation(w: WorkloadView, t: Thresholds, now: datetime) -> Finding | None:
    """An active workload whose GPUs wait on its input pipeline.

    Rule (either pattern, with enough coverage, past warm-up grace):

    * ``bimodal`` — at least ``starvation_min_share`` of utilization samples at or below
      ``starvation_idle_percent`` AND at least as many above ``starvation_busy_percent``: the GPU
      alternates between computing and waiting for the next batch. Shares come from the exporter's
      sub-second sample histogram where every GPU has one (it sees stalls a 15-60 s scrape averages
      away), from the raw scraped samples otherwise.
    * ``cpu_bound`` — mean between ``starvation_middling_min_percent`` and ``..._max_percent``, flat
      (every GPU's central samples within ``starvation_flat_spread_percent`` points), while a pod uses
      at least ``cpu_saturation_ratio`` of its CPU limit or is CFS-throttled in at least
      ``cpu_throttling_ratio`` of its periods.

    Evidence: ``pattern``, ``stalled_share``, ``busy_share``, ``shares_from``, ``cpu_saturation``,
    ``cpu_throttled_ratio``, plus the utilization numbers.
    """
    span = _span(w, t, now)
    if span is None or w.missing_devices:
        return None
    n = _numbers(w.devices, span)
    if n is None or n.coverage < t.min_coverage or n.max <= t.idle_percent:
        return None

    shares = [d.shares for d in w.devices if d.shares is not None]
    pooled = None
    if len(shares) == len(w.devices):
        source = "histogram" if all(s.source == "histogram" for s in shares) else "samples"
        picked = [s for s in shares if s.source == source]
        if len(picked) == len(shares):
            weight = sum(s.weight for s in picked)
            if weight > 0:
                pooled = (
                    sum(s.stalled * s.weight for s in picked) / weight,
                    sum(s.busy * s.weight for s in picked) / weight,
                    source,
                )
    bimodal = pooled is not None and min(pooled[0], pooled[1]) >= t.starvation_min_share

    saturation = max((s for p in w.pods if (s := p.cpu.saturation) is not None), default=None)
    throttled = max((r for p in w.pods if (r := p.cpu.throttled_ratio) is not None), default=None)
    cpu_pressed = (saturation is not None and saturation >= t.cpu_saturation_ratio) or (
        throttled is not None and throttled >= t.cpu_throttling_ratio
    )
    middling = t.starvation_middling_min_percent <= n.mean <= t.starvation_middling_max_percent
    flat = n.widest_spread <= t.starvation_flat_spread_percent
    cpu_bound = cpu_pressed and middling and flat
    if not (bimodal or cpu_bound):
        return None

    evidence = _base_evidence(n, w.devices, span)
    evidence["pattern"] = "bimodal" if bimodal else "cpu_bound"
    evidence["bimodal"] = bimodal
    evidence["cpu_bound"] = cpu_bound
    if pooled is not None:
        evidence |= {"stalled_share": _r(pooled[0]), "busy_share": _r(pooled[1]), "shares_from": pooled[2]}
    evidence["cpu_saturation"] = None if saturation is None else _r(saturation)
    evidence["cpu_throttled_ratio"] = None if throttled is None else _r(throttled)

    if bimodal and pooled is not None:
        strength = min(1.0, min(pooled[0], pooled[1]) / 0.4)
        what = (
            f"its GPUs sit at or below {t.starvation_idle_percent:g} % for {pooled[0]:.0%} of samples and "
            f"above {t.starvation_busy_percent:g} % for {pooled[1]:.0%}: they wait for data between batches"
        )
    else:
        pressure = max(
            (saturation or 0.0) / max(t.cpu_saturation_ratio, _EPSILON),
            (throttled or 0.0) / max(t.cpu_throttling_ratio, _EPSILON),
        )
        strength = min(1.0, pressure)
        cpu = f"{saturation:.0%} of its CPU limit" if saturation is not None else "its CPU"
        what = f"its GPUs hold a flat {n.mean:.0f} % while the pod uses {cpu}" + (
            f" and is throttled in {throttled:.0%} of CFS periods" if throttled is not None else ""
        )
    cpu_first = "" if bimodal else "raise the pod's CPU limit (or remove it), "
    return _workload_finding(
        FindingKind.DATALOADER_STARVATION,
        w,
        evidence,
        confidence=n.coverage * (0.5 + 0.5 * strength),
        wasted=n.wasted_gpu_hours,
        t=t,
        recommendation=(
            f"The input pipeline sets the pace of {w.ref.kind} {w.ref.namespace}/{w.ref.name}: {what}. "
            f"Usual fixes: {cpu_first}more DataLoader workers (num_workers), pin_memory=True, a larger "
            "prefetch_factor, decoding/augmenting on the GPU, and faster or local storage (cache the "
            "dataset on node-local NVMe)."
        ),
    )


def low_utilization(w: WorkloadView, t: Thresholds, now: datetime) -> Finding | None:
    """GPUs held but mostly unused.

    Rule: enough coverage, past warm-up grace, and the mean utilization of the workload's GPUs over
    the judged span below ``low_utilization_percent``. (Idle Jobs and bare Pods land here too: they
    are not endpoints to scale to zero; so do idle Deployments whose GPUs hold no memory.)
    Evidence: ``mean_util_percent``, ``max_util_percent``, quantiles, ``coverage``;
    ``memory_used_mib`` / ``min_memory_used_mib`` for an idle workload whose memory was read.
    Wasted GPU-hours: ``(1 - mean) × GPUs × judged hours``; cost when a price per GPU-hour is set.
    """
    span = _span(w, t, now)
    if span is None or w.missing_devices:
        return None
    n = _numbers(w.devices, span)
    if n is None or n.coverage < t.min_coverage or n.mean >= t.low_utilization_percent:
        return None
    evidence = _base_evidence(n, w.devices, span)
    evidence["low_utilization_threshold_percent"] = t.low_utilization_percent
    margin = (t.low_utilization_percent - n.mean) / t.low_utilization_percent
    gpus = len(w.devices)
    least_memory = _least_memory(w.devices)
    unloaded = ""
    if (
        n.max <= t.idle_percent + _EPSILON
        and least_memory is not None
        and least_memory < t.idle_min_memory_mib
    ):
        # Idle and (some of) its GPUs hold almost no memory: allocated, but nothing was ever loaded.
        evidence["min_memory_used_mib"] = _r(least_memory)
        unloaded = (
            f" Its GPUs stayed idle and at least one holds only {least_memory:,.0f} MiB: nothing runs on "
            "it; release the GPU (or find out why the pod never started its work)."
        )
    return _workload_finding(
        FindingKind.LOW_UTILIZATION,
        w,
        evidence,
        confidence=n.coverage * (0.5 + 0.5 * margin),
        wasted=n.wasted_gpu_hours,
        t=t,
        recommendation=(
            f"{w.ref.kind} {w.ref.namespace}/{w.ref.name} averages {n.mean:.1f} % on {gpus} GPU(s). "
            "Right-size it: fewer GPUs, a smaller GPU or MIG slice, sharing (time-slicing, MPS), or "
            "more work per GPU (larger batches, more concurrent requests)." + unloaded
        ),
    )


def idle_node(node: NodeView, t: Thresholds, now: datetime) -> Finding | None:
    """A node whose every GPU was unallocated for the whole window.

    Rule: no pod held any of its GPUs during the window. With every GPU at ``min_coverage`` or
    better and mean utilization below ``low_utilization_percent`` it is ``low_utilization`` with
    workload ``Node/<name>`` (the reaper may cordon it); with less coverage, ``unknown``.
    Evidence: ``mean_util_percent``, ``max_util_percent``, ``coverage``, ``unallocated`` (true).
    """
    del now  # the window is all that matters: no pod, no warm-up
    n = _numbers(node.devices, node.window)
    ref = WorkloadRef(kind="Node", name=node.name, namespace="")
    coverage = 0.0 if n is None else n.coverage
    gpus = node.gpu_ids
    if n is None or coverage < t.min_coverage:
        return _make(
            FindingKind.UNKNOWN,
            ref,
            (),
            (node.name,),
            gpus,
            node.window,
            UnknownEvidence(coverage=_r(coverage), min_coverage=t.min_coverage, unallocated=True),
            0.0,
            0.0,
            t,
            f"No pod held a GPU on node {node.name}, but its exporter delivered only {coverage:.0%} of "
            "the expected samples: check it before acting on the node.",
        )
    if n.mean >= t.low_utilization_percent:
        return None
    evidence = LowUtilizationEvidence(**_base_evidence(n, node.devices, node.window), unallocated=True)
    return _make(
        FindingKind.LOW_UTILIZATION,
        ref,
        (),
        (node.name,),
        gpus,
        node.window,
        evidence,
        n.coverage,
        n.wasted_gpu_hours,
        t,
        f"No pod held any of the {len(gpus)} GPU(s) on node {node.name} for "
        f"{format_duration(node.window.duration)}. Cordon and drain it, or let the cluster autoscaler "
        "scale the GPU node pool down.",
    )


DETECTORS = (unknown, idle_endpoint, dataloader_starvation, low_utilization)


def classify(w: WorkloadView, t: Thresholds, now: datetime) -> Finding | None:
    """The first detector that fires, in order of precedence."""
    for detector in DETECTORS:
        finding = detector(w, t, now)
        if finding is not None:
            return finding
    return None


def idle_endpoint_candidate(w: WorkloadView, t: Thresholds, now: datetime) -> bool:
    """Would be an idle endpoint before the request-rate check (which costs a query per workload)."""
    return idle_endpoint(replace(w, request_rate=None), t, now) is not None


_ORDER = {
    FindingKind.IDLE_ENDPOINT: 0,
    FindingKind.DATALOADER_STARVATION: 1,
    FindingKind.LOW_UTILIZATION: 2,
    FindingKind.UNKNOWN: 3,
}


def detect(
    workloads: Iterable[WorkloadView], nodes: Iterable[NodeView], t: Thresholds, now: datetime
) -> list[Finding]:
    """Every finding, most actionable and most wasteful first."""
    found = [f for w in workloads if (f := classify(w, t, now)) is not None]
    found += [f for node in nodes if (f := idle_node(node, t, now)) is not None]
    return sorted(found, key=lambda f: (_ORDER[f.kind], -f.wasted_gpu_hours, f.workload.key()))
