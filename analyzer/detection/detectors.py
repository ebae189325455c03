"""The detectors, run in order: each a pure function of a workload's numbers, the thresholds and
``now``, in a module of its own with its rule, thresholds and advice.

``classify`` runs them in order — ``unknown`` first, so a verdict is never drawn from too little
data, then ``idle_endpoint``, ``stalled_job``, ``dataloader_starvation`` and ``low_utilization`` —
and the first that fires names the finding. ``stalled_job`` comes before the utilization detectors:
a job whose GPUs read busy while they wait is neither starved nor low for that time, and its waste
is counted once. Missing data is never evidence of idleness: a GPU that stopped reporting lowers
coverage, it does not read as 0 %.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from analyzer.detection.idle_endpoint import idle_endpoint
from analyzer.detection.idle_node import idle_node
from analyzer.detection.low_utilization import low_utilization
from analyzer.detection.stalled_job import stalled_job
from analyzer.detection.starvation import dataloader_starvation
from analyzer.detection.unknown import unknown
from analyzer.detection.views import NodeView, WorkloadView
from common.model import Finding, FindingKind
from common.thresholds import Thresholds

__all__ = ["DETECTORS", "classify", "detect"]

DETECTORS = (unknown, idle_endpoint, stalled_job, dataloader_starvation, low_utilization)


def classify(w: WorkloadView, t: Thresholds, now: datetime) -> Finding | None:
    """The first detector that fires, in order of precedence."""
    for detector in DETECTORS:
        finding = detector(w, t, now)
        if finding is not None:
            return finding
    return None


_ORDER = {
    FindingKind.IDLE_ENDPOINT: 0,
    FindingKind.STALLED_JOB: 1,
    FindingKind.DATALOADER_STARVATION: 2,
    FindingKind.LOW_UTILIZATION: 3,
    FindingKind.UNKNOWN: 4,
}


def detect(
    workloads: Iterable[WorkloadView], nodes: Iterable[NodeView], t: Thresholds, now: datetime
) -> list[Finding]:
    """Every finding, most actionable and most wasteful first."""
    found = [f for w in workloads if (f := classify(w, t, now)) is not None]
    found += [f for node in nodes if (f := idle_node(node, t, now)) is not None]
    return sorted(found, key=lambda f: (_ORDER[f.kind], -f.wasted_gpu_hours, f.workload.key()))
