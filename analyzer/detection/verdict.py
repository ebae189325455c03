"""What every detector shares: a workload's holders summed up, the judged span, the evidence every
verdict carries, the finding built from it, and the sentences that name a workload's owner.

Pure: the detectors (one module each: ``unknown``, ``idle_endpoint``, ``starvation``,
``low_utilization``, ``idle_node``, ``stalled_job``) build their findings from these, and
``detectors`` runs them in order.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from analyzer.detection.mig import gpu_share
from analyzer.detection.views import DeviceView, WorkloadView
from analyzer.sources.aggregates import UtilStats
from common.model import (
    EVIDENCE_BY_KIND,
    AnyEvidence,
    Finding,
    FindingKind,
    TimeWindow,
    UtilQuantile,
    WorkloadRef,
)
from common.thresholds import Thresholds

LONG_RUNNING_KINDS = frozenset({"Deployment", "StatefulSet"})
EPSILON = 1e-9


def judged_enough(w: WorkloadView) -> bool:
    """At least half the window was judged (the union of its pods' spans past their warm-up).

    Less, and model loading, first traffic or a pod's last minutes would dominate the numbers:
    the workload is reported ``unknown`` (``too_young``) instead.
    """
    return w.judged is not None and w.judged_seconds >= w.window.duration.total_seconds() / 2


@dataclass(frozen=True)
class Numbers:
    """A workload's device holders summed up."""

    mean: float
    max: float
    coverage: float
    samples: int
    hours: float
    wasted_gpu_hours: float
    q_low: float
    q_high: float
    q_level: float
    widest_upper_spread: float  # highest quantile minus median: start-up zeros do not move it


# The detectors of one workload each sum up the same holders: the last sum is kept, with the
# tuple it came from (so that tuple's id cannot be reused while it is remembered).
_last_numbers: tuple[Sequence[DeviceView], float, int, Numbers | None] | None = None


def numbers(devices: Sequence[DeviceView], hours: float, missing: int = 0) -> Numbers | None:
    global _last_numbers
    last = _last_numbers
    if last is not None and last[0] is devices and last[1] == hours and last[2] == missing:
        return last[3]
    n = _summed(devices, hours, missing)
    _last_numbers = (devices, hours, missing, n)
    return n


def _summed(devices: Sequence[DeviceView], hours: float, missing: int) -> Numbers | None:
    # One pass over the holders (a run sums every workload's, several times per workload's worth
    # of generator passes otherwise).
    first: UtilStats | None = None
    total = weighted = wasted = 0.0
    samples = 0
    top = q_high = upper = q_low = coverage = math.nan  # set from the first judged holder
    for d in devices:
        s = d.stats
        if s is None:
            continue
        # Holders count for the time they held their GPU: a pod replaced mid-window weighs its share.
        seconds = d.span.duration.total_seconds()
        weight = seconds if seconds > EPSILON else EPSILON
        total += weight
        weighted += s.mean * weight
        if s.mean < 100.0:
            # A MIG instance wastes its share of the GPU, not a whole one (analyzer.detection.mig).
            wasted += (1.0 - s.mean / 100.0) * (seconds / 3600.0) * gpu_share(d.info)
        samples += s.samples
        spread = s.q_high - (s.median if s.median is not None else s.q_low)
        if first is None:
            first = s
            coverage, top, q_low, q_high, upper = d.coverage, s.max, s.q_low, s.q_high, spread
            continue
        # Comparisons, not min()/max() calls (this runs for every holder of every workload), kept
        # as those would (the first holder's NaN stays).
        coverage = d.coverage if d.coverage < coverage else coverage
        top = s.max if s.max > top else top
        q_low = s.q_low if s.q_low < q_low else q_low
        q_high = s.q_high if s.q_high > q_high else q_high
        upper = spread if spread > upper else upper
    if first is None:
        return None
    judged_all = all(d.stats is not None for d in devices)
    return Numbers(
        mean=weighted / total,
        max=top,
        coverage=coverage if judged_all and not missing else 0.0,
        samples=samples,
        hours=hours,
        wasted_gpu_hours=wasted,
        q_low=q_low,
        q_high=q_high,
        q_level=first.q_level,
        widest_upper_spread=upper,
    )


def rounded(value: float) -> float:
    return round(value, 4)


def base_evidence(n: Numbers, devices: Sequence[DeviceView], judged_from: datetime) -> dict[str, Any]:
    """The utilization fields every verdict carries, as keyword arguments of its evidence class."""
    evidence: dict[str, Any] = {
        "util_metric": ",".join(sorted({m for d in devices for m in d.info.metrics})),
        "mean_util_percent": rounded(n.mean),
        "max_util_percent": rounded(n.max),
        "quantiles": (
            UtilQuantile(level=n.q_level, percent=rounded(n.q_low)),
            UtilQuantile(level=1.0 - n.q_level, percent=rounded(n.q_high)),
        ),
        "coverage": rounded(n.coverage),
        "samples": n.samples,
        "judged_from": judged_from,
        "judged_hours": rounded(n.hours),
    }
    memory = [d.memory_used_mib for d in devices if d.memory_used_mib is not None]
    if memory:
        evidence["memory_used_mib"] = rounded(sum(memory) / len(memory))
    shares = {d.key.device_id: gpu_share(d.info) for d in devices}
    if any(share < 1.0 for share in shares.values()):
        # Written only for MIG slices, so whole-GPU findings keep their JSON unchanged.
        evidence["gpu_equivalents"] = rounded(sum(shares.values()))
    return evidence


def make(
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
    owner: WorkloadRef | None = None,
) -> Finding:
    cost = None if t.price_per_gpu_hour is None else round(wasted * t.price_per_gpu_hour, 2)
    return Finding(
        kind=kind,
        workload=ref,
        owner=owner,
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


def workload_finding(
    kind: FindingKind,
    w: WorkloadView,
    evidence: dict[str, Any],
    confidence: float,
    wasted: float,
    t: Thresholds,
    recommendation: str,
) -> Finding:
    if w.request_rate is not None:
        evidence["request_rate"] = None if w.request_rate.value is None else rounded(w.request_rate.value)
        evidence["request_rate_query"] = w.request_rate.query
    return make(
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
        w.owner,
    )


def child(w: WorkloadView) -> str:
    """What the owner controls, as the advice names it."""
    if w.owner is not None and w.owner.kind == "Rollout" and w.ref.kind != "ReplicaSet":
        # Named from a ReplicaSet's pod-template hash alone (kube_replicaset_owner not collected).
        return "its ReplicaSets"  # "the 2 GPU(s) of its ReplicaSets", "edits to its ReplicaSets"
    return f"{w.ref.kind} {w.ref.namespace}/{w.ref.name}"


def change_in_owner(w: WorkloadView) -> str:
    """A sentence sending changes to the controller above the workload ("" where none is named)."""
    if w.owner is None:
        return ""
    o = w.owner
    where = f"{o.kind} {o.namespace}/{o.name}"
    return f" Make the change in {where}: its controller reverts edits to {child(w)}."


def judged_span(w: WorkloadView) -> TimeWindow | None:
    return w.judged if judged_enough(w) else None


def judged_numbers(w: WorkloadView, t: Thresholds) -> tuple[TimeWindow, Numbers] | None:
    """The judged span and numbers of a workload fit for a verdict (old enough, fully covered)."""
    judged = judged_span(w)
    if judged is None or w.missing_devices:
        return None
    n = numbers(w.devices, w.judged_hours)
    if n is None or n.coverage < t.min_coverage:
        return None
    return judged, n


def smaller_share(w: WorkloadView) -> str:
    """A smaller share than it holds: on a MIG instance already, a smaller profile, not "a MIG slice"."""
    if any(d.info.mig_profile for d in w.devices):
        return "a smaller MIG profile or a time-sliced GPU"
    return "a shared or smaller GPU (a MIG slice, time-slicing, MPS)"


def time_sliced(w: WorkloadView) -> bool:
    """Whether the workload held a share of a time-sliced GPU (judged from our exporter's per-pod
    series): idle is measurable there, low use of a share is not."""
    return any(d.info.sharers for d in w.devices)


def stayed_idle(peak: float, t: Thresholds) -> bool:
    """The idle endpoint rule's test of a peak: no sample above ``idle_percent``."""
    return not peak > t.idle_percent + EPSILON


def least_memory_held(devices: Sequence[DeviceView]) -> float | None:
    """The lowest mean framebuffer use among the GPUs that report it (None: none does)."""
    return min((d.memory_used_mib for d in devices if d.memory_used_mib is not None), default=None)


@dataclass(frozen=True)
class Cpu:
    """The most CPU-pressed pod of a workload."""

    saturation: float | None
    saturation_of: str | None  # "limit" or "request"
    throttled: float | None

    def pressed(self, t: Thresholds) -> bool:
        return (self.saturation is not None and self.saturation >= t.cpu_saturation_ratio) or (
            self.throttled is not None and self.throttled >= t.cpu_throttling_ratio
        )

    def pressure(self, t: Thresholds) -> float:
        return max(
            (self.saturation or 0.0) / max(t.cpu_saturation_ratio, EPSILON),
            (self.throttled or 0.0) / max(t.cpu_throttling_ratio, EPSILON),
        )

    def evidence(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "cpu_saturation": None if self.saturation is None else rounded(self.saturation),
            "cpu_throttled_ratio": None if self.throttled is None else rounded(self.throttled),
        }
        if self.saturation_of is not None:
            out["cpu_saturation_of"] = self.saturation_of
        return out

    def text(self) -> str:
        bound = "CPU request (it has no limit)" if self.saturation_of == "request" else "CPU limit"
        used = f"uses {self.saturation:.0%} of its {bound}" if self.saturation is not None else "is CPU-bound"
        return used + (f" and is throttled in {self.throttled:.0%} of CFS periods" if self.throttled else "")


def cpu_of(w: WorkloadView) -> Cpu:
    busiest = max(
        (p.cpu for p in w.pods if p.cpu.saturation is not None),
        key=lambda c: c.saturation or 0.0,
        default=None,
    )
    throttled = max((r for p in w.pods if (r := p.cpu.throttled_ratio) is not None), default=None)
    return Cpu(
        saturation=None if busiest is None else busiest.saturation,
        saturation_of=None if busiest is None else busiest.saturation_of,
        throttled=throttled,
    )
