"""``unknown``: too little data to judge a workload, said with the reason; never acted on."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from analyzer.detection.verdict import judged_span, numbers, rounded, workload_finding
from analyzer.detection.views import WorkloadView
from common.model import Finding, FindingKind
from common.thresholds import Thresholds
from common.timeutil import format_duration


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
        return workload_finding(
            FindingKind.UNKNOWN,
            w,
            {"reason": "ambiguous", "ambiguity": "; ".join(clashes), "judged_hours": rounded(w.judged_hours)},
            confidence=0.0,
            wasted=0.0,
            t=t,
            recommendation=(
                f"Its series cannot be one workload's: {clashes[0]}. Two clusters written into one TSDB "
                "without a label telling them apart? Label each cluster's series (an external "
                "`cluster` label, or --cluster-label); take no action on this workload until then."
            ),
        )
    judged = judged_span(w)
    if judged is None:
        evidence: dict[str, Any] = {"judged_hours": rounded(w.judged_hours), "reason": "too_young"}
        if w.judged is not None:
            evidence["judged_from"] = w.judged.start
        seconds = round(w.judged_seconds)
        judged_text = f"only {format_duration(timedelta(seconds=seconds))}" if seconds >= 1 else "none"
        return workload_finding(
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
    n = numbers(w.devices, w.judged_hours, w.missing_devices)
    coverage = 0.0 if n is None else n.coverage
    if coverage >= t.min_coverage:
        return None
    low = [d.key.device_id for d in w.devices if d.stats is None or d.coverage < t.min_coverage]
    evidence = {
        "coverage": rounded(coverage),
        "min_coverage": t.min_coverage,
        "gpus_missing": w.missing_devices,
        "gpus_low_coverage": ",".join(sorted(low)),
        "judged_from": judged.start,
        "judged_hours": rounded(w.judged_hours),
        "reason": "low_coverage",
    }
    where = ", ".join(w.nodes) or "its node"
    return workload_finding(
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
