"""The detectors: pure functions of a workload's numbers, the thresholds and ``now``.

Each returns a ``Finding`` or ``None``. ``classify`` runs them in order — ``unknown`` first, so a
verdict is never drawn from too little data, then ``idle_endpoint``, ``dataloader_starvation`` and
``low_utilization`` — and the first that fires names the finding. Missing data is never evidence
of idleness: a GPU that stopped reporting lowers coverage, it does not read as 0 %.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from analyzer.detection.controllers import STOPS
from analyzer.detection.mig import gpu_share
from analyzer.detection.units import memory as size
from analyzer.detection.views import DeviceView, NodeView, WorkloadView
from analyzer.sources.aggregates import UtilStats
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
# Stalls between batches last seconds; a scrape sees them as stalled samples interleaved with busy
# ones. Stretches longer than this, stalled or busy, are pauses between runs, evaluation or
# checkpoints: a different time scale, not a GPU waiting on its input pipeline.
MAX_BATCH_PHASE = timedelta(minutes=5)
# A mean this close above the low-utilization line is still reported, with lower confidence.
NEAR_MISS_MARGIN = 0.1
NEAR_MISS_CONFIDENCE = 0.5


def judged_enough(w: WorkloadView) -> bool:
    """At least half the window was judged (the union of its pods' spans past their warm-up).

    Less, and model loading, first traffic or a pod's last minutes would dominate the numbers:
    the workload is reported ``unknown`` (``too_young``) instead.
    """
    return w.judged is not None and w.judged_seconds >= w.window.duration.total_seconds() / 2


@dataclass(frozen=True)
class _Numbers:
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
_last_numbers: tuple[Sequence[DeviceView], float, int, _Numbers | None] | None = None


def _numbers(devices: Sequence[DeviceView], hours: float, missing: int = 0) -> _Numbers | None:
    global _last_numbers
    last = _last_numbers
    if last is not None and last[0] is devices and last[1] == hours and last[2] == missing:
        return last[3]
    n = _summed(devices, hours, missing)
    _last_numbers = (devices, hours, missing, n)
    return n


def _summed(devices: Sequence[DeviceView], hours: float, missing: int) -> _Numbers | None:
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
        weight = seconds if seconds > _EPSILON else _EPSILON
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
    return _Numbers(
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


def _r(value: float) -> float:
    return round(value, 4)


def _base_evidence(n: _Numbers, devices: Sequence[DeviceView], judged_from: datetime) -> dict[str, Any]:
    """The utilization fields every verdict carries, as keyword arguments of its evidence class."""
    evidence: dict[str, Any] = {
        "util_metric": ",".join(sorted({m for d in devices for m in d.info.metrics})),
        "mean_util_percent": _r(n.mean),
        "max_util_percent": _r(n.max),
        "quantiles": (
            UtilQuantile(level=n.q_level, percent=_r(n.q_low)),
            UtilQuantile(level=1.0 - n.q_level, percent=_r(n.q_high)),
        ),
        "coverage": _r(n.coverage),
        "samples": n.samples,
        "judged_from": judged_from,
        "judged_hours": _r(n.hours),
    }
    memory = [d.memory_used_mib for d in devices if d.memory_used_mib is not None]
    if memory:
        evidence["memory_used_mib"] = _r(sum(memory) / len(memory))
    shares = {d.key.device_id: gpu_share(d.info) for d in devices}
    if any(share < 1.0 for share in shares.values()):
        # Written only for MIG slices, so whole-GPU findings keep their JSON unchanged.
        evidence["gpu_equivalents"] = _r(sum(shares.values()))
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
        w.owner,
    )


def _child(w: WorkloadView) -> str:
    """What the owner controls, as the advice names it."""
    if w.owner is not None and w.owner.kind == "Rollout" and w.ref.kind != "ReplicaSet":
        # Named from a ReplicaSet's pod-template hash alone (kube_replicaset_owner not collected).
        return "its ReplicaSets"  # "the 2 GPU(s) of its ReplicaSets", "edits to its ReplicaSets"
    return f"{w.ref.kind} {w.ref.namespace}/{w.ref.name}"


def _change_in_owner(w: WorkloadView) -> str:
    """A sentence sending changes to the controller above the workload ("" where none is named)."""
    if w.owner is None:
        return ""
    o = w.owner
    where = f"{o.kind} {o.namespace}/{o.name}"
    return f" Make the change in {where}: its controller reverts edits to {_child(w)}."


def _judged(w: WorkloadView) -> TimeWindow | None:
    return w.judged if judged_enough(w) else None


def unknown(w: WorkloadView, t: Thresholds, now: datetime) -> Finding | None:
    """Too little data to judge: reported so people can act on collection, never acted on.

    Rule, either reason (``reason`` in the evidence):

    * ``too_young`` — less than half the window was judged: the union of its pods' spans past
      each pod's own warm-up grace (see ``judged_enough``). A workload that held GPUs in the window
      is never silently left out of the report.
    * ``ambiguous`` — its series cannot be one workload's: a pod name with two incarnations alive
      at once (two clusters' pods of one name, written without a label telling the clusters apart).
      Said with the pods and nodes in ``ambiguity``; never merged into one verdict.
    * ``low_coverage`` — some GPU it holds delivered fewer than ``min_coverage`` of the samples
      expected over its pod's judged span — an exporter gap, a GPU that fell off the bus, or GPUs
      its scheduled pods requested that never reported at all.

    Evidence: ``coverage``, ``min_coverage``, ``gpus_missing``, ``gpus_low_coverage``,
    ``judged_from``, ``judged_hours``, ``reason``.
    """
    del now  # the views already stop at `now`
    clashes = sorted({p.ambiguity for p in w.pods if p.ambiguity})
    if clashes:
        return _workload_finding(
            FindingKind.UNKNOWN,
            w,
            {"reason": "ambiguous", "ambiguity": "; ".join(clashes), "judged_hours": _r(w.judged_hours)},
            confidence=0.0,
            wasted=0.0,
            t=t,
            recommendation=(
                f"Its series cannot be one workload's: {clashes[0]}. Two clusters written into one TSDB "
                "without a label telling them apart? Label each cluster's series (an external "
                "`cluster` label, or --cluster-label); take no action on this workload until then."
            ),
        )
    judged = _judged(w)
    if judged is None:
        evidence: dict[str, Any] = {"judged_hours": _r(w.judged_hours), "reason": "too_young"}
        if w.judged is not None:
            evidence["judged_from"] = w.judged.start
        seconds = round(w.judged_seconds)
        judged_text = f"only {format_duration(timedelta(seconds=seconds))}" if seconds >= 1 else "none"
        return _workload_finding(
            FindingKind.UNKNOWN,
            w,
            evidence,
            confidence=0.0,
            wasted=0.0,
            t=t,
            recommendation=(
                f"Too young to judge: {judged_text} of the {format_duration(w.window.duration)} window "
                f"lies past its pods' {format_duration(t.warmup_grace)} warm-up, and half is needed. "
                "Take no action on it; judge it over a later or longer window."
            ),
        )
    n = _numbers(w.devices, w.judged_hours, w.missing_devices)
    coverage = 0.0 if n is None else n.coverage
    if coverage >= t.min_coverage:
        return None
    low = [d.key.device_id for d in w.devices if d.stats is None or d.coverage < t.min_coverage]
    evidence = {
        "coverage": _r(coverage),
        "min_coverage": t.min_coverage,
        "gpus_missing": w.missing_devices,
        "gpus_low_coverage": ",".join(sorted(low)),
        "judged_from": judged.start,
        "judged_hours": _r(w.judged_hours),
        "reason": "low_coverage",
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


def _judged_numbers(w: WorkloadView, t: Thresholds) -> tuple[TimeWindow, _Numbers] | None:
    """The judged span and numbers of a workload fit for a verdict (old enough, fully covered)."""
    judged = _judged(w)
    if judged is None or w.missing_devices:
        return None
    n = _numbers(w.devices, w.judged_hours)
    if n is None or n.coverage < t.min_coverage:
        return None
    return judged, n


def _idle_holding_memory(w: WorkloadView, t: Thresholds) -> tuple[TimeWindow, _Numbers, float | None] | None:
    """``idle_endpoint``'s rule but the request rate: the judged span, the numbers and the least
    memory a GPU held (None: no memory data), or None where the rule does not hold."""
    if w.ref.kind not in LONG_RUNNING_KINDS:
        return None
    judged_numbers = _judged_numbers(w, t)
    if judged_numbers is None:
        return None
    judged, n = judged_numbers
    if not stayed_idle(n.max, t):
        return None
    least_memory = _least_memory(w.devices)
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
    idle = _idle_holding_memory(w, t)
    if idle is None:
        return None
    judged, n, least_memory = idle
    if w.request_rate is not None and (w.request_rate.value is None or abs(w.request_rate.value) > _EPSILON):
        return None
    evidence = _base_evidence(n, w.devices, judged.start)
    evidence |= {
        "idle_threshold_percent": t.idle_percent,
        "idle_share": 1.0,
        "idle_min_memory_mib": t.idle_min_memory_mib,
    }
    if least_memory is not None:
        evidence["min_memory_used_mib"] = _r(least_memory)
    gpus = len({d.key.device_id for d in w.devices})
    memory = evidence.get("memory_used_mib")
    held = f", holding {size(memory)} each" if memory is not None else ""
    stayed = f"stayed at or below {t.idle_percent:g} % for {format_duration(judged.duration)}{held}"
    if w.owner is not None:
        o = w.owner
        lead = (
            f"Stop {o.kind} {o.namespace}/{o.name} ({STOPS.get(o.kind, 'with its own stop')}): the "
            f"{gpus} GPU(s) of {_child(w)} {stayed}, and its controller would undo a scale-down made there."
        )
    else:
        lead = (
            f"Scale {w.ref.kind} {w.ref.namespace}/{w.ref.name} to zero: its {gpus} GPU(s) {stayed}. "
            "If a controller owns it (a KServe InferenceService, a Kubeflow Notebook, a "
            "LeaderWorkerSet, an Argo Rollout…), stop that controller instead: the metrics name "
            "none, and gpu-reaper finds it through the Kubernetes API before it acts."
        )
    return _workload_finding(
        FindingKind.IDLE_ENDPOINT,
        w,
        evidence,
        confidence=n.coverage,
        wasted=n.wasted_gpu_hours,
        t=t,
        recommendation=f"{lead} If it must answer rare requests, serve them from {_smaller_share(w)}.",
    )


def _smaller_share(w: WorkloadView) -> str:
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
    return not peak > t.idle_percent + _EPSILON


def _least_memory(devices: Sequence[DeviceView]) -> float | None:
    """The lowest mean framebuffer use among the GPUs that report it (None: none does)."""
    return min((d.memory_used_mib for d in devices if d.memory_used_mib is not None), default=None)


@dataclass(frozen=True)
class _Cpu:
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
            (self.saturation or 0.0) / max(t.cpu_saturation_ratio, _EPSILON),
            (self.throttled or 0.0) / max(t.cpu_throttling_ratio, _EPSILON),
        )

    def evidence(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "cpu_saturation": None if self.saturation is None else _r(self.saturation),
            "cpu_throttled_ratio": None if self.throttled is None else _r(self.throttled),
        }
        if self.saturation_of is not None:
            out["cpu_saturation_of"] = self.saturation_of
        return out

    def text(self) -> str:
        bound = "CPU request (it has no limit)" if self.saturation_of == "request" else "CPU limit"
        used = f"uses {self.saturation:.0%} of its {bound}" if self.saturation is not None else "is CPU-bound"
        return used + (f" and is throttled in {self.throttled:.0%} of CFS periods" if self.throttled else "")


def _cpu(w: WorkloadView) -> _Cpu:
    busiest = max(
        (p.cpu for p in w.pods if p.cpu.saturation is not None),
        key=lambda c: c.saturation or 0.0,
        default=None,
    )
    throttled = max((r for p in w.pods if (r := p.cpu.throttled_ratio) is not None), default=None)
    return _Cpu(
        saturation=None if busiest is None else busiest.saturation,
        saturation_of=None if busiest is None else busiest.saturation_of,
        throttled=throttled,
    )


def dataloader_starvation(w: WorkloadView, t: Thresholds, now: datetime) -> Finding | None:
    """An active workload whose GPUs wait on its input pipeline.

    Rule (either pattern, with enough coverage, judged long enough):

    * ``bimodal`` — at least ``starvation_min_share`` of utilization samples at or below
      ``starvation_idle_percent`` AND at least as many above ``starvation_busy_percent``: the GPU
      alternates between computing and waiting for the next batch. Shares come from the exporter's
      sub-second sample histogram where every GPU has one (it sees stalls a 15-60 s scrape averages
      away), from the scraped samples (counted by the TSDB) otherwise; then stalled and busy
      stretches must both last under ``MAX_BATCH_PHASE`` (mean): long idle gaps between runs are not
      batch stalls.
    * ``cpu_bound`` — mean between ``starvation_middling_min_percent`` and ``..._max_percent``, flat
      (on every GPU the highest quantile lies within half of ``starvation_flat_spread_percent``
      points of the median, so start-up, checkpoint or evaluation zeros do not break it), while a
      pod uses at least ``cpu_saturation_ratio`` of its CPU limit (of its request when it has no
      limit) or is CFS-throttled in at least ``cpu_throttling_ratio`` of its periods.

    Evidence: ``pattern``, ``stalled_share``, ``busy_share``, ``shares_from``, ``stall_seconds``,
    ``busy_seconds``, ``cpu_saturation``, ``cpu_saturation_of``, ``cpu_throttled_ratio``, plus
    the utilization numbers and ``util_interval_seconds``, the scrape interval of the readings they
    come from. The recommendation says which sampling each number it quotes comes from: histogram
    shares count sub-second samples, which a scraped reading's peak need not reach.
    """
    del now
    if time_sliced(w):
        return None  # a pod's SM share on a time-sliced GPU also waits on its neighbours' kernels
    judged_numbers = _judged_numbers(w, t)
    if judged_numbers is None:
        return None
    judged, n = judged_numbers
    if n.max <= t.idle_percent:
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
    phases = [d.phases for d in w.devices if d.phases is not None]
    stall_s = max((p.stalled_s for p in phases), default=None)
    busy_s = max((p.busy_s for p in phases), default=None)
    batch_scale = pooled is not None and (
        pooled[2] == "histogram"
        or (
            stall_s is not None
            and busy_s is not None
            and max(stall_s, busy_s) <= MAX_BATCH_PHASE.total_seconds()
        )
    )
    bimodal = pooled is not None and min(pooled[0], pooled[1]) >= t.starvation_min_share and batch_scale

    cpu = _cpu(w)
    middling = t.starvation_middling_min_percent <= n.mean <= t.starvation_middling_max_percent
    flat = n.widest_upper_spread <= t.starvation_flat_spread_percent / 2
    cpu_bound = cpu.pressed(t) and middling and flat
    if not (bimodal or cpu_bound):
        return None

    evidence = _base_evidence(n, w.devices, judged.start)
    evidence["pattern"] = "bimodal" if bimodal else "cpu_bound"
    evidence["bimodal"] = bimodal
    evidence["cpu_bound"] = cpu_bound
    if pooled is not None:
        evidence |= {"stalled_share": _r(pooled[0]), "busy_share": _r(pooled[1]), "shares_from": pooled[2]}
    evidence |= cpu.evidence()
    if stall_s is not None and busy_s is not None:
        evidence |= {"stall_seconds": _r(stall_s), "busy_seconds": _r(busy_s)}
    interval = max((d.interval_s for d in w.devices if d.interval_s), default=None)
    if interval is not None:
        evidence["util_interval_seconds"] = _r(interval)
    # The readings the mean and peak come from, one per scrape: not the sub-second samples a
    # histogram counts, which see the stalls those readings fall between.
    readings = (
        f"the readings scraped every {format_duration(timedelta(seconds=round(interval)))}"
        if interval is not None
        else "the scraped readings"
    )

    if bimodal and pooled is not None:
        strength = min(1.0, min(pooled[0], pooled[1]) / 0.4)
        split = (
            f"its GPUs sit at or below {t.starvation_idle_percent:g} % in {pooled[0]:.0%} and above "
            f"{t.starvation_busy_percent:g} % in {pooled[1]:.0%} of "
        )
        if pooled[2] == "histogram":
            what = (
                f"{split}the exporter's sub-second utilization samples, while {readings} peak at "
                f"{n.max:.0f} %: they wait for data between batches"
            )
        else:
            what = f"{split}{readings}: they wait for data between batches"
    else:
        strength = min(1.0, cpu.pressure(t))
        what = f"its GPUs hold a flat {n.mean:.0f} % (mean of {readings}) while the pod {cpu.text()}"
    cpu_first = "" if bimodal else "give the pod more CPU (raise or remove its limit, raise its request), "
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
            f"dataset on node-local NVMe).{_change_in_owner(w)}"
        ),
    )


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
    judged_numbers = _judged_numbers(w, t)
    if judged_numbers is None:
        return None
    judged, n = judged_numbers
    if time_sliced(w) and not stayed_idle(n.max, t):
        # Time-slicing guarantees no share: a pod's percent of the GPU says how much it used, not
        # how much of what it holds. Only one that never used it is wasting it.
        return None
    line = t.low_utilization_percent
    near_miss = line <= n.mean < line * (1.0 + NEAR_MISS_MARGIN)
    if n.mean >= line and not near_miss:
        return None
    evidence = _base_evidence(n, w.devices, judged.start)
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
            f" Its GPUs stayed idle and at least one holds only {size(least_memory)}: nothing runs on "
            "it; release the GPU (or find out why the pod never started its work)."
        )
    cpu = _cpu(w)
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
            f". Right-size it: fewer GPUs, {_smaller_share(w)}, or more work per GPU (larger batches, "
            "more concurrent requests)."
        )
    return _workload_finding(
        FindingKind.LOW_UTILIZATION,
        w,
        evidence,
        confidence=confidence,
        wasted=n.wasted_gpu_hours,
        t=t,
        recommendation=subject + advice + unloaded + _change_in_owner(w),
    )


def idle_node(node: NodeView, t: Thresholds, now: datetime) -> Finding | None:
    """A node whose every GPU was unallocated for the whole window.

    Rule: no pod held any of its GPUs during the window. With every GPU at ``min_coverage`` or
    better and mean utilization below ``low_utilization_percent`` it is ``low_utilization`` with
    workload ``Node/<name>`` (the reaper may cordon it); with less coverage, ``unknown``.
    Evidence: ``mean_util_percent``, ``max_util_percent``, ``coverage``, ``unallocated`` (true).
    """
    del now  # the window is all that matters: no pod, no warm-up
    n = _numbers(node.devices, node.window.hours)
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
            UnknownEvidence(
                coverage=_r(coverage), min_coverage=t.min_coverage, unallocated=True, reason="low_coverage"
            ),
            0.0,
            0.0,
            t,
            f"No pod held a GPU on node {node.name}, but its exporter delivered only {coverage:.0%} of "
            "the expected samples: check it before acting on the node.",
        )
    if n.mean >= t.low_utilization_percent:
        return None
    evidence = LowUtilizationEvidence(**_base_evidence(n, node.devices, node.window.start), unallocated=True)
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
    """Would be an idle endpoint before the request-rate check (which costs a query per workload):
    the rule alone, no finding built."""
    del now
    return _idle_holding_memory(w, t) is not None


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
