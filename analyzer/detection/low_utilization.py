"""``low_utilization``: GPUs held but mostly unused."""

from __future__ import annotations

from datetime import datetime

from analyzer.detection.units import memory as size
from analyzer.detection.verdict import (
    EPSILON,
    base_evidence,
    change_in_owner,
    cpu_of,
    judged_numbers,
    least_memory_held,
    rounded,
    smaller_share,
    stayed_idle,
    time_sliced,
    workload_finding,
)
from analyzer.detection.views import WorkloadView
from common.model import Finding, FindingKind
from common.thresholds import Thresholds

# A mean this close above the low-utilization line is still reported, with lower confidence.
NEAR_MISS_MARGIN = 0.1
NEAR_MISS_CONFIDENCE = 0.5


def low_utilization(w: WorkloadView, t: Thresholds, now: datetime) -> Finding | None:
    """GPUs held but mostly unused.

    Rule: enough coverage, judged long enough, and the mean utilization of the workload's GPUs over
    the judged span below ``low_utilization_percent``. A mean less than ``NEAR_MISS_MARGIN`` (10 %)
    above the line is reported too, as a near miss (``near_miss``), with at most
    ``NEAR_MISS_CONFIDENCE``: runs hovering at the line are worth a look, not an action. (Idle Jobs
    and bare Pods land here too: they are not endpoints to scale to zero; so do idle Deployments
    whose GPUs hold no memory.) When a pod is CPU-pressed (as in ``dataloader_starvation``) the
    CPU numbers are attached and the recommendation starts with CPU: a GPU starved of CPU looks
    underused, and fewer GPUs would not help it.
    Evidence: ``mean_util_percent``, ``max_util_percent``, quantiles, ``coverage``;
    ``memory_used_mib`` / ``min_memory_used_mib`` for an idle workload whose memory was read;
    ``near_miss``; ``cpu_saturation``, ``cpu_saturation_of``, ``cpu_throttled_ratio``, ``cpu_pressed``.
    Wasted GPU-hours: ``Σ over GPU holders (1 - mean) × judged hours × share`` (a MIG slice's share);
    cost when a price per GPU-hour is set.
    """
    del now
    found = judged_numbers(w, t)
    if found is None:
        return None
    judged, n = found
    if time_sliced(w) and not stayed_idle(n.max, t):
        # Time-slicing guarantees no share: a pod's percent of the GPU says how much it used, not
        # how much of what it holds. Only one that never used it is wasting it.
        return None
    line = t.low_utilization_percent
    near_miss = line <= n.mean < line * (1.0 + NEAR_MISS_MARGIN)
    if n.mean >= line and not near_miss:
        return None
    evidence = base_evidence(n, w.devices, judged.start)
    evidence["low_utilization_threshold_percent"] = line
    margin = max(0.0, (line - n.mean) / line)
    confidence = n.coverage * (0.5 + 0.5 * margin)
    if near_miss:
        evidence["near_miss"] = True
        confidence = min(
            NEAR_MISS_CONFIDENCE,
            n.coverage * NEAR_MISS_CONFIDENCE * (1.0 - (n.mean - line) / (line * NEAR_MISS_MARGIN)),
        )
    gpus = len({d.key.device_id for d in w.devices})
    least_memory = least_memory_held(w.devices)
    unloaded = ""
    if (
        n.max <= t.idle_percent + EPSILON
        and least_memory is not None
        and least_memory < t.idle_min_memory_mib
    ):
        # Idle and (some of) its GPUs hold almost no memory: allocated, but nothing was ever loaded.
        evidence["min_memory_used_mib"] = rounded(least_memory)
        unloaded = (
            f" Its GPUs stayed idle and at least one holds only {size(least_memory)}: nothing runs on "
            "it; release the GPU (or find out why the pod never started its work)."
        )
    cpu = cpu_of(w)
    pressed = cpu.pressed(t)
    if cpu.saturation is not None or cpu.throttled is not None:
        evidence |= cpu.evidence()
        evidence["cpu_pressed"] = pressed
    subject = f"{w.ref.kind} {w.ref.namespace}/{w.ref.name} averages {n.mean:.1f} % on {gpus} GPU(s)"
    if near_miss:
        subject += f", just above the {line:g} % line"
    if pressed:
        advice = (
            f" while the pod {cpu.text()}: the GPU waits on the CPU. Give the pod more CPU first "
            "(raise or remove its limit, raise its request, more DataLoader workers), then look again "
            "before right-sizing its GPUs."
        )
    elif t.right_size.enabled:
        # Long-running kinds get the smaller share they would fit sized beside this (or are told none
        # does); the others were not sized, and no share is suggested blind (right_size.wanted).
        advice = (
            ". Right-size it: fewer GPUs, or more work per GPU (larger batches, more concurrent requests)."
        )
    else:
        advice = (
            f". Right-size it: fewer GPUs, {smaller_share(w)}, or more work per GPU (larger batches, "
            "more concurrent requests)."
        )
    return workload_finding(
        FindingKind.LOW_UTILIZATION,
        w,
        evidence,
        confidence=confidence,
        wasted=n.wasted_gpu_hours,
        t=t,
        recommendation=subject + advice + unloaded + change_in_owner(w),
    )
