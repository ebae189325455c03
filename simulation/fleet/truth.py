"""Ground truth: what a correct analyzer must conclude about each workload of a simulated fleet.

The rules mirror the detectors' contract (docs/detectors.md), stated from what the simulator
*knows* (each workload's behaviour, where the data has holes) rather than from the series:

* A workload is judged only when at least half the window lies past its warm-up grace
  (youngest pod's start + grace); younger ones get no verdict (``None``).
* ``unknown`` when any of its GPU devices delivered fewer than ``min_coverage`` of the samples
  expected over the judged span (exporter gaps, lost GPUs).
* Otherwise by behaviour: ``idle`` → ``idle_endpoint`` for long-running kinds (Deployment,
  StatefulSet) that hold at least ``min_memory_mib`` of framebuffer per GPU once loaded, and
  ``low_utilization`` for the rest (Jobs, bare Pods, and endpoints with nothing loaded);
  ``low_utilization`` → ``low_utilization``; every starvation behaviour →
  ``dataloader_starvation``; training and serving → ``None``.
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
    """Expected verdict per workload (and idle node) alive at the window's end."""
    sc = fleet.scenario
    if window is None:
        window = TimeWindow.ending(sc.end, sc.analysis_window)
    ws, we = window.start.timestamp(), window.end.timestamp()
    by_workload: dict[WorkloadRef, list[Pod]] = {}
    for pod in fleet.pods:
        if pod.start < we <= pod.end:
            by_workload.setdefault(pod.workload, []).append(pod)

    out: dict[WorkloadRef, Expected] = {}
    for ref, pods in by_workload.items():
        judged_from = max(ws, max(p.start for p in pods) + grace.total_seconds())
        if we - judged_from < (we - ws) / 2:
            out[ref] = Expected(ref, None, "too young: less than half the window past warm-up grace")
            continue
        coverage = min(_coverage(fleet, p, judged_from, we) for p in pods)
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
        busy = any(p.node == node.name and p.start < we and p.end > ws for p in fleet.pods)
        if busy:
            continue
        ref = WorkloadRef(kind="Node", name=node.name, namespace="")
        masks = [present_mask(sc, node, g, fleet.times) for g in range(node.gpus)]
        cov = min(_span_coverage(fleet.times, m, ws, we) for m in masks)
        kind = FindingKind.LOW_UTILIZATION if cov >= min_coverage else FindingKind.UNKNOWN
        out[ref] = Expected(ref, kind, f"no GPU allocated on the node all window (coverage {cov:.2f})")
    return out


def _by_behaviour(ref: WorkloadRef, behaviour: Behaviour) -> FindingKind | None:
    if behaviour is Behaviour.IDLE:
        return FindingKind.IDLE_ENDPOINT if ref.kind in LONG_RUNNING else FindingKind.LOW_UTILIZATION
    if behaviour is Behaviour.LOW_UTILIZATION:
        return FindingKind.LOW_UTILIZATION
    if behaviour in _STARVATION:
        return FindingKind.DATALOADER_STARVATION
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
