"""``idle_endpoint``: a serving workload holding GPUs, with its model loaded, that it does not use."""

from __future__ import annotations

from datetime import datetime

from analyzer.detection.controllers import STOPS
from analyzer.detection.units import memory as size
from analyzer.detection.verdict import (
    EPSILON,
    LONG_RUNNING_KINDS,
    Numbers,
    base_evidence,
    child,
    judged_numbers,
    least_memory_held,
    rounded,
    smaller_share,
    stayed_idle,
    workload_finding,
)
from analyzer.detection.views import WorkloadView
from common.model import Finding, FindingKind, TimeWindow
from common.thresholds import Thresholds
from common.timeutil import format_duration


def idle_holding_memory(w: WorkloadView, t: Thresholds) -> tuple[TimeWindow, Numbers, float | None] | None:
    """``idle_endpoint``'s rule but the request rate: the judged span, the numbers and the least
    memory a GPU held (None: no memory data), or None where the rule does not hold."""
    if w.ref.kind not in LONG_RUNNING_KINDS:
        return None
    found = judged_numbers(w, t)
    if found is None:
        return None
    judged, n = found
    if not stayed_idle(n.max, t):
        return None
    least_memory = least_memory_held(w.devices)
    if least_memory is not None and least_memory < t.idle_min_memory_mib:
        return None
    return judged, n, least_memory


def idle_endpoint(w: WorkloadView, t: Thresholds, now: datetime) -> Finding | None:
    """A serving workload holding GPUs it does not use.

    Rule: a long-running kind (Deployment, StatefulSet) judged long enough, with enough coverage,
    whose every GPU stayed at or below ``idle_percent`` in every sample of its judged span, with memory
    held: every GPU that reports framebuffer use averaged at least ``idle_min_memory_mib`` over the
    window (a GPU without memory data does not block the verdict; one holding less has nothing
    loaded and is left to ``low_utilization``). When the policy has a request-rate query, it must
    also have returned exactly 0 (no data is not zero).
    Evidence: ``max_util_percent``, ``mean_util_percent``, ``idle_share`` (1.0), ``coverage``,
    ``memory_used_mib`` (mean held per GPU) and ``min_memory_used_mib`` when reported,
    ``idle_min_memory_mib``, ``request_rate``.
    Wasted GPU-hours: ``Σ over GPU holders (1 - mean) × judged hours × share`` (a MIG slice's share).
    """
    del now
    idle = idle_holding_memory(w, t)
    if idle is None:
        return None
    judged, n, least_memory = idle
    if w.request_rate is not None and (w.request_rate.value is None or abs(w.request_rate.value) > EPSILON):
        return None
    evidence = base_evidence(n, w.devices, judged.start)
    evidence |= {
        "idle_threshold_percent": t.idle_percent,
        "idle_share": 1.0,
        "idle_min_memory_mib": t.idle_min_memory_mib,
    }
    if least_memory is not None:
        evidence["min_memory_used_mib"] = rounded(least_memory)
    gpus = len({d.key.device_id for d in w.devices})
    memory = evidence.get("memory_used_mib")
    held = f", holding {size(memory)} each" if memory is not None else ""
    stayed = f"stayed at or below {t.idle_percent:g} % for {format_duration(judged.duration)}{held}"
    if w.owner is not None:
        o = w.owner
        lead = (
            f"Stop {o.kind} {o.namespace}/{o.name} ({STOPS.get(o.kind, 'with its own stop')}): the "
            f"{gpus} GPU(s) of {child(w)} {stayed}, and its controller would undo a scale-down made there."
        )
    else:
        lead = (
            f"Scale {w.ref.kind} {w.ref.namespace}/{w.ref.name} to zero: its {gpus} GPU(s) {stayed}. "
            "If a controller owns it (a KServe InferenceService, a Kubeflow Notebook, a "
            "LeaderWorkerSet, an Argo Rollout…), stop that controller instead: the metrics name "
            "none, and gpu-reaper finds it through the Kubernetes API before it acts."
        )
    return workload_finding(
        FindingKind.IDLE_ENDPOINT,
        w,
        evidence,
        confidence=n.coverage,
        wasted=n.wasted_gpu_hours,
        t=t,
        recommendation=f"{lead} If it must answer rare requests, serve them from {smaller_share(w)}.",
    )


def idle_endpoint_candidate(w: WorkloadView, t: Thresholds, now: datetime) -> bool:
    """Would be an idle endpoint before the request-rate check (which costs a query per workload):
    the rule alone, no finding built."""
    del now
    return idle_holding_memory(w, t) is not None
