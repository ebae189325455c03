"""``idle_node``: a node none of whose GPUs any pod held for the whole window."""

from __future__ import annotations

from datetime import datetime

from analyzer.detection.verdict import base_evidence, make, numbers, rounded
from analyzer.detection.views import NodeView
from common.model import Finding, FindingKind, LowUtilizationEvidence, UnknownEvidence, WorkloadRef
from common.thresholds import Thresholds
from common.timeutil import format_duration


def idle_node(node: NodeView, t: Thresholds, now: datetime) -> Finding | None:
    """A node whose every GPU was unallocated for the whole window.

    Rule: no pod held any of its GPUs during the window. With every GPU at ``min_coverage`` or
    better and mean utilization below ``low_utilization_percent`` it is ``low_utilization`` with
    workload ``Node/<name>`` (the reaper may cordon it); with less coverage, ``unknown``.
    Evidence: ``mean_util_percent``, ``max_util_percent``, ``coverage``, ``unallocated`` (true).
    """
    del now  # the window is all that matters: no pod, no warm-up
    n = numbers(node.devices, node.window.hours)
    ref = WorkloadRef(kind="Node", name=node.name, namespace="")
    coverage = 0.0 if n is None else n.coverage
    gpus = node.gpu_ids
    if n is None or coverage < t.min_coverage:
        return make(
            FindingKind.UNKNOWN,
            ref,
            (),
            (node.name,),
            gpus,
            node.window,
            UnknownEvidence(
                coverage=rounded(coverage),
                min_coverage=t.min_coverage,
                unallocated=True,
                reason="low_coverage",
            ),
            0.0,
            0.0,
            t,
            f"No pod held a GPU on node {node.name}, but its exporter delivered only {coverage:.0%} of "
            "the expected samples: check it before acting on the node.",
        )
    if n.mean >= t.low_utilization_percent:
        return None
    evidence = LowUtilizationEvidence(**base_evidence(n, node.devices, node.window.start), unallocated=True)
    return make(
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
