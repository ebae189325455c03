"""Ground truth: what a correct analyzer must conclude about each workload of a simulated fleet.

The rules mirror the detectors' contract (docs/detectors.md), stated from what the simulator
*knows* (each workload's behaviour, where the data has holes) rather than from the series:

* Every workload with a scheduled pod in the window is judged, over the union of its pods' lives
  in the window past each pod's own warm-up grace (a pod's start + grace). Less than half the
  window judged is ``unknown`` (too young); a Pending pod the scheduler never placed holds no GPU
  and counts for nothing. A Job's warm-up ends at its first busy sample (its own ``warmup``),
  at the latest after the grace; an idle Job's never does before the grace. Jobs with an owner
  (``job_owner``: a CronJob, a JobSet) are judged as that owner.
* ``unknown`` when any of its GPU devices delivered fewer than ``min_coverage`` of the samples
  expected over its pod's judged span (exporter gaps, lost GPUs).
* Otherwise by behaviour: ``idle`` → ``idle_endpoint`` for long-running kinds (Deployment,
  StatefulSet) that hold at least ``min_memory_mib`` of framebuffer per GPU once loaded, and
  ``low_utilization`` for the rest (Jobs, bare Pods, and endpoints with nothing loaded);
  ``low_utilization`` → ``low_utilization``; every starvation behaviour →
  ``dataloader_starvation``; a data-parallel job that checkpoints synchronously every few steps,
  has a straggler or hangs, and a server spin-polling at idle power → ``stalled_job``; training,
  a job checkpointing every few hundred steps, power-capped training and serving → ``None``.
* A node whose every GPU was unallocated for the whole window is ``low_utilization`` with the
  workload ``Node/<name>`` (namespace empty): the reaper may cordon it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np

from common.model import FindingKind, TimeWindow, WorkloadRef
from simulation.fleet.scenario import Behaviour, WorkloadKind
from simulation.fleet.simulator import Fleet, Pod, present_mask

LONG_RUNNING = frozenset({WorkloadKind.DEPLOYMENT.value, WorkloadKind.STATEFULSET.value})
_STARVATION = frozenset(
    {Behaviour.STARVATION_CPU, Behaviour.STARVATION_SAWTOOTH, Behaviour.STARVATION_SUBSECOND}
)


# Busy-looking GPUs that wait (at idle power) a large share of the time (docs/detectors.md).
_STALLED = frozenset(
    {Behaviour.DDP_CHECKPOINT_OFTEN, Behaviour.DDP_STRAGGLER, Behaviour.DDP_HUNG, Behaviour.SPIN_POLL}
)


@dataclass(frozen=True)
class Expected:
    workload: WorkloadRef
    kind: FindingKind | None
    why: str


def expected_findings(
    fleet: Fleet,
    window: TimeWindow | None = None,
    grace: timedelta = timedelta(minutes=30),
    min_coverage: float = 0.9,
    min_memory_mib: float = 256.0,
) -> dict[WorkloadRef, Expected]:
    """Expected verdict per workload (and idle node) that held GPUs at some time in the window."""
    sc = fleet.scenario
    if window is None:
        window = TimeWindow.ending(sc.end, sc.analysis_window)
    ws, we = window.start.timestamp(), window.end.timestamp()
    by_workload: dict[WorkloadRef, list[Pod]] = {}
    for pod in fleet.pods:
        if pod.start < we and pod.end > ws and not pod.pending:
            by_workload.setdefault(pod.workload, []).append(pod)

    out: dict[WorkloadRef, Expected] = {}
    for ref, pods in by_workload.items():
        spans = {
            p.uid: (max(ws, p.start + _warmup_s(p, grace)), min(we, p.end))
            for p in pods
            if min(we, p.end) > max(ws, p.start + _warmup_s(p, grace))
        }
        judged = _union(list(spans.values()))
        if judged < (we - ws) / 2:
            out[ref] = Expected(
                ref, FindingKind.UNKNOWN, f"too young: {judged / 3600:.2f} h judged, half the window needed"
            )
            continue
        coverage = min(_coverage(fleet, p, *spans[p.uid]) for p in pods if p.uid in spans)
        if coverage < min_coverage:
            out[ref] = Expected(ref, FindingKind.UNKNOWN, f"coverage {coverage:.2f} < {min_coverage}")
            continue
        kind = _by_behaviour(ref, pods[0].spec.behaviour)
        why = pods[0].spec.behaviour.value
        held = min(_memory_held(fleet, p) for p in pods)
        if kind is FindingKind.IDLE_ENDPOINT and held < min_memory_mib:
            kind, why = FindingKind.LOW_UTILIZATION, f"idle, but holds only {held:.0f} MiB per GPU"
        out[ref] = Expected(ref, kind, why)

    for node in sc.nodes:
        busy = any(p.node == node.name and p.start < we and p.end > ws and not p.pending for p in fleet.pods)
        if busy:
            continue
        ref = WorkloadRef(kind="Node", name=node.name, namespace="")
        masks = [present_mask(sc, node, g, fleet.times) for g in range(node.gpus)]
        cov = min(_span_coverage(fleet.times, m, ws, we) for m in masks)
        kind = FindingKind.LOW_UTILIZATION if cov >= min_coverage else FindingKind.UNKNOWN
        out[ref] = Expected(ref, kind, f"no GPU allocated on the node all window (coverage {cov:.2f})")
    return out


def _warmup_s(pod: Pod, grace: timedelta) -> float:
    """A pod's unjudged start: the grace, or for a Job that computes, until its first busy sample."""
    if pod.spec.kind is WorkloadKind.JOB and pod.spec.behaviour is not Behaviour.IDLE:
        return min(grace, pod.spec.warmup).total_seconds()
    return grace.total_seconds()


def _union(spans: list[tuple[float, float]]) -> float:
    total, reach = 0.0, float("-inf")
    for a, b in sorted(spans):
        if a >= reach:
            total += b - a
        elif b > reach:
            total += b - reach
        reach = max(reach, b)
    return total


def _by_behaviour(ref: WorkloadRef, behaviour: Behaviour) -> FindingKind | None:
    if behaviour is Behaviour.IDLE:
        return FindingKind.IDLE_ENDPOINT if ref.kind in LONG_RUNNING else FindingKind.LOW_UTILIZATION
    if behaviour is Behaviour.LOW_UTILIZATION:
        return FindingKind.LOW_UTILIZATION
    if behaviour in _STARVATION:
        return FindingKind.DATALOADER_STARVATION
    if behaviour in _STALLED:
        return FindingKind.STALLED_JOB
    return None


def _memory_held(fleet: Fleet, pod: Pod) -> float:
    """Framebuffer (MiB) the pod holds on each of its GPUs or MIG instances once its model is loaded."""
    nodes = {n.name: n for n in fleet.scenario.nodes}
    node = nodes[pod.node]
    per_device = node.memory_mib / (node.mig_instances if node.mig_profile else 1)
    return per_device * pod.spec.memory_fraction


def _span_coverage(times: np.ndarray, present: np.ndarray, start: float, end: float) -> float:
    in_span = (times > start) & (times <= end)
    expected = int(in_span.sum())
    return float((present & in_span).sum()) / expected if expected else 0.0


def _coverage(fleet: Fleet, pod: Pod, start: float, end: float) -> float:
    nodes = {n.name: n for n in fleet.scenario.nodes}
    return min(
        _span_coverage(
            fleet.times, present_mask(fleet.scenario, nodes[s.node], s.gpu, fleet.times), start, end
        )
        for s in pod.slots
    )


def score(
    expected: dict[WorkloadRef, Expected], found: dict[WorkloadRef, FindingKind]
) -> dict[FindingKind, tuple[float, float, int, int, int]]:
    """Precision, recall, true positives, false positives and false negatives per kind."""
    result = {}
    for kind in FindingKind:
        truth = {ref for ref, e in expected.items() if e.kind is kind}
        got = {ref for ref, k in found.items() if k is kind}
        tp, fp, fn = len(truth & got), len(got - truth), len(truth - got)
        precision = tp / (tp + fp) if tp + fp else 1.0
        recall = tp / (tp + fn) if tp + fn else 1.0
        result[kind] = (precision, recall, tp, fp, fn)
    return result


def window_of(fleet: Fleet, end: datetime | None = None) -> TimeWindow:
    sc = fleet.scenario
    return TimeWindow.ending(end or sc.end, sc.analysis_window)
