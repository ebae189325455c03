"""Right-sizing: the smallest GPU share that would carry a long-running workload of low utilization.

Scaling to zero suits an endpoint nobody calls; a replica serving real traffic at 5 % of an 80 GB GPU
needs a smaller share instead. For a ``low_utilization`` finding of a long-running workload this
module picks, from numbers the analysis already has plus each GPU's framebuffer peak:

* a MIG profile of the GPU model it runs on (analyzer.detection.mig_profiles) — the fewest compute
  slices, then the least memory, that hold the framebuffer peak (a high quantile of the window) plus
  the policy's headroom, and on which its activity quantile, scaled to the slice, stays under the
  policy's ceiling;
* or, where the model offers no MIG or its pods use several GPUs each (a process sees one MIG
  device: no peer-to-peer across instances), a time-sliced share: ``1/r`` of a GPU for the largest
  ``r`` (up to the policy's replicas) whose memory and activity bounds hold.

No recommendation, with the reason, where nothing smaller fits, where memory was not reported
(missing data is never evidence), or where the workload stayed idle (that is for the reaper).
Pure: numbers in, a :class:`~common.evidence.RightSizing` out.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from analyzer.detection.mig import gpu_share
from analyzer.detection.mig_profiles import MigGpu, mig_gpu, named_memory_mib, profile_named
from analyzer.detection.units import memory as size
from analyzer.detection.views import WorkloadView
from analyzer.sources.aggregates import DeviceKey, MemoryPeak
from common.evidence import LowUtilizationEvidence, RightSizing
from common.model import Finding, FindingKind, WorkloadRef
from common.thresholds import Thresholds

# Controllers that keep pods running until told otherwise: what a smaller share is for. Jobs end on
# their own and bare Pods have no template to change.
LONG_RUNNING_KINDS = frozenset(
    {
        "Deployment",
        "StatefulSet",
        "ReplicaSet",
        "Rollout",
        "InferenceService",
        "LeaderWorkerSet",
        "RayService",
    }
)
TIME_SLICED_RESOURCE = "nvidia.com/gpu.shared"  # the device plugin's name with renameByDefault
_EPSILON = 1e-9


def sized_kind(workload: WorkloadRef, owner: WorkloadRef | None) -> bool:
    """Whether a workload of this kind (under this owner) is sized: a long-running one."""
    kind = owner.kind if owner is not None else workload.kind
    return kind in LONG_RUNNING_KINDS or workload.kind in LONG_RUNNING_KINDS


def wanted(finding: Finding, t: Thresholds) -> bool:
    """Whether ``finding`` gets a right-size recommendation (or the reason it has none)."""
    if not t.right_size.enabled or finding.kind is not FindingKind.LOW_UTILIZATION:
        return False
    evidence = finding.evidence
    if not isinstance(evidence, LowUtilizationEvidence) or evidence.unallocated:
        return False
    return sized_kind(finding.workload, finding.owner)


@dataclass(frozen=True)
class _Need:
    peak_mib: float
    memory_mib: float  # peak × (1 + headroom)
    compute: float  # the activity quantile, as a fraction of a whole GPU


def right_size(
    finding: Finding, view: WorkloadView, peaks: Mapping[DeviceKey, MemoryPeak], t: Thresholds
) -> RightSizing:
    """The recommendation for ``finding`` (one :func:`wanted` accepts) of workload ``view``."""
    settings = t.right_size
    evidence = finding.evidence
    assert isinstance(evidence, LowUtilizationEvidence)
    base = RightSizing(
        share=None, memory_quantile=settings.memory_quantile, memory_headroom=settings.memory_headroom
    )
    if (evidence.max_util_percent or 0.0) <= t.idle_percent + _EPSILON:
        return _none(base, "it stayed idle over the window: reclaim it rather than resize")
    devices = view.devices
    missing = [d for d in devices if d.key not in peaks]
    if not devices or missing:
        return _none(
            base,
            f"framebuffer memory was not reported for {len(missing) or 'any'} of its GPUs: "
            "no share can be sized without it",
        )
    high = evidence.high_quantile
    if high is None:
        return _none(base, "no activity quantile to size its compute from")
    shares = {d.key: gpu_share(d.info) for d in devices}
    peak = max(peaks[d.key].peak_mib for d in devices)
    need = _Need(
        peak_mib=peak,
        memory_mib=peak * (1.0 + settings.memory_headroom),
        # A MIG instance's activity is of the instance: of the whole GPU it is that times its share.
        compute=high.percent / 100.0 * max(shares.values()),
    )
    model = Counter(d.info.model for d in devices if d.info.model).most_common(1)
    model_name = model[0][0] if model else None
    base = base.model_copy(
        update={
            "memory_peak_mib": round(peak, 1),
            "compute_percent": round(high.percent, 2),
            "compute_quantile": high.level,
            "gpu_model": model_name,
        }
    )
    capacities = [c for d in devices if (c := peaks[d.key].capacity_mib) is not None]
    capacity = max(capacities) if capacities else None
    gpu = mig_gpu(model_name, capacity)
    per_pod = Counter(d.key.pod_id for d in devices)
    several = max(per_pod.values()) > 1
    if gpu is not None and not several:
        return _mig(gpu, need, view, shares, t, base)
    memory = capacity or (gpu.memory_mib if gpu is not None else None) or named_memory_mib(model_name)
    base = base.model_copy(update={"gpu_memory_mib": memory})
    why = (
        f"its pods use {max(per_pod.values())} GPUs each, and a process sees one MIG device"
        if several
        else f"{model_name or 'this GPU'} offers no MIG"
    )
    return _time_sliced(need, memory, why, view, shares, t, base)


def _mig(
    gpu: MigGpu,
    need: _Need,
    view: WorkloadView,
    shares: Mapping[DeviceKey, float],
    t: Thresholds,
    base: RightSizing,
) -> RightSizing:
    settings = t.right_size
    base = base.model_copy(update={"gpu_memory_mib": gpu.memory_mib, "replaces": "nvidia.com/gpu"})
    ceiling = settings.compute_ceiling_percent / 100.0
    slices = max(1, math.ceil(need.compute * gpu.slices / ceiling - _EPSILON))
    fitting = [p for p in gpu.profiles if p.slices >= slices and p.memory_mib >= need.memory_mib]
    current = max(shares.values())
    held = {d.info.mig_profile for d in view.devices if d.info.mig_profile}
    now_on = profile_named(gpu, next(iter(held))) if len(held) == 1 else None
    if now_on is not None:
        base = base.model_copy(update={"replaces": now_on.resource})
    if not fitting:
        what = "memory" if all(p.memory_mib < need.memory_mib for p in gpu.profiles) else "activity"
        return _none(
            base,
            f"its {what} needs the whole {gpu.family} GPU: no MIG profile holds "
            f"{size(need.memory_mib)} with {need.compute:.0%} of its compute",
        )
    chosen = min(fitting, key=lambda p: (p.slices, p.memory_mib))
    share = gpu.share(chosen)
    if share >= current - _EPSILON:
        where = f"already on {now_on.name}, " if now_on is not None else ""
        whole = f" (only {chosen.name}, the whole GPU, does)" if chosen.slices == gpu.slices else ""
        return _none(
            base,
            f"{where}no smaller MIG profile of the {gpu.family} holds its framebuffer peak "
            f"{size(need.peak_mib)} plus {settings.memory_headroom:.0%} and its activity{whole}",
        )
    return _recommended(
        base,
        view,
        shares,
        t,
        share_kind="mig",
        profile=chosen.name,
        resource=chosen.resource,
        share=share,
        reason=f"{chosen.name} ({chosen.slices}/{gpu.slices} of the compute, "
        f"{size(chosen.memory_mib)}) is the smallest {gpu.family} profile holding "
        f"{size(need.memory_mib)} and {need.compute:.1%} of the GPU's compute at "
        f"≤ {settings.compute_ceiling_percent:g} % of the slice",
    )


def _time_sliced(
    need: _Need,
    memory: float | None,
    why: str,
    view: WorkloadView,
    shares: Mapping[DeviceKey, float],
    t: Thresholds,
    base: RightSizing,
) -> RightSizing:
    settings = t.right_size
    if memory is None or memory <= 0:
        return _none(
            base,
            f"{why}, and the GPU's memory size is unknown (no DCGM_FI_DEV_FB_FREE, no size in "
            "its model name): a time-sliced share cannot be sized",
        )
    fraction = max(need.memory_mib / memory, need.compute / (settings.compute_ceiling_percent / 100.0))
    most = settings.max_time_slice_replicas
    replicas = most if fraction <= 0 else min(most, math.floor(1.0 / fraction + _EPSILON))
    share = 1.0 / replicas if replicas >= 2 else 1.0
    if replicas < 2 or share >= max(shares.values()) - _EPSILON:
        return _none(
            base,
            f"{why}, and it needs {fraction:.0%} of a GPU ({size(need.memory_mib)} of "
            f"{size(memory)}, {need.compute:.1%} of its compute): no smaller time-sliced share",
        )
    return _recommended(
        base.model_copy(update={"replaces": "nvidia.com/gpu"}),
        view,
        shares,
        t,
        share_kind="time_slice",
        profile=f"1/{replicas}",
        resource=TIME_SLICED_RESOURCE,
        share=share,
        reason=f"{why}; it needs {fraction:.0%} of a GPU ({size(need.memory_mib)} of {size(memory)}, "
        f"{need.compute:.1%} of its compute), so {replicas} such pods fit one time-sliced GPU — which "
        "isolates neither memory nor faults",
    )


def _recommended(
    base: RightSizing,
    view: WorkloadView,
    shares: Mapping[DeviceKey, float],
    t: Thresholds,
    *,
    share_kind: Literal["mig", "time_slice"],
    profile: str,
    resource: str,
    share: float,
    reason: str,
) -> RightSizing:
    saved_hours, equivalents, cost = _saving(view, shares, share, t)
    return base.model_copy(
        update={
            "share": share_kind,
            "profile": profile,
            "resource": resource,
            "share_of_gpu": round(share, 4),
            "gpu_equivalents_saved": equivalents,
            "saved_gpu_hours": saved_hours,
            "saved_cost": cost,
            "reason": reason,
        }
    )


def _none(base: RightSizing, reason: str) -> RightSizing:
    return base.model_copy(update={"share": None, "reason": reason})


def _saving(
    view: WorkloadView, shares: Mapping[DeviceKey, float], share: float, t: Thresholds
) -> tuple[float, float, float | None]:
    """GPU-hours freed over the judged spans, the GPU-equivalents that is on average, and its cost."""
    hours = sum(
        max(0.0, shares[d.key] - share) * d.span.duration.total_seconds() / 3600.0 for d in view.devices
    )
    equivalents = hours / view.judged_hours if view.judged_hours > 0 else 0.0
    cost = None if t.price_per_gpu_hour is None else round(hours * t.price_per_gpu_hour, 2)
    return round(hours, 3), round(equivalents, 3), cost
