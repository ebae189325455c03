"""Short human summaries of findings, shared by the table and the HTML report."""

from __future__ import annotations

from collections import Counter

from analyzer.report.units import hours, mebibytes, percent, share
from common.model import (
    DataloaderStarvationEvidence,
    Finding,
    FindingKind,
    FindingsReport,
    IdleEndpointEvidence,
    LowUtilizationEvidence,
    UnknownEvidence,
    UtilizationEvidence,
)


def mean_util(f: Finding) -> float | None:
    """The workload's mean utilization, for verdicts that rest on it (not ``unknown``)."""
    return f.evidence.mean_util_percent if isinstance(f.evidence, UtilizationEvidence) else None


def mean_text(f: Finding) -> str:
    value = mean_util(f)
    return percent(value) if value is not None else "–"


def detail(f: Finding) -> str:
    """The one number that explains the verdict."""
    e = f.evidence
    if isinstance(e, DataloaderStarvationEvidence):
        if e.pattern == "bimodal":
            return (
                f"bimodal: {share(e.stalled_share or 0)} stalled / {share(e.busy_share or 0)} busy "
                f"({e.shares_from or 'samples'})"
            )
        parts = []
        if e.cpu_saturation is not None:
            parts.append(f"CPU {share(e.cpu_saturation)} of {e.cpu_saturation_of or 'limit'}")
        if e.cpu_throttled_ratio is not None:
            parts.append(f"throttled {share(e.cpu_throttled_ratio)}")
        return "cpu-bound: " + ", ".join(parts)
    if isinstance(e, LowUtilizationEvidence) and e.near_miss:
        return f"near miss: mean {percent(e.mean_util_percent or 0)}"
    if isinstance(e, UnknownEvidence):
        if e.reason == "too_young":
            return f"too young: {hours(e.judged_hours or 0)} judged"
        return f"coverage {share(e.coverage or 0)}"
    text = f"max {percent(e.max_util_percent or 0)}"
    if isinstance(e, IdleEndpointEvidence) and e.memory_used_mib is not None:
        text += f", {mebibytes(e.memory_used_mib)} held per GPU"
    return text


def summary_line(report: FindingsReport, currency: str = "USD") -> str:
    counts = Counter(f.kind for f in report.findings)
    wasted = sum(f.wasted_gpu_hours for f in report.findings)
    costs = [f.estimated_cost for f in report.findings if f.estimated_cost is not None]
    parts = [f"{counts.get(kind, 0)} {kind.value}" for kind in FindingKind]
    text = f"{len(report.findings)} findings ({', '.join(parts)}); {wasted:,.1f} GPU-hours wasted"
    if costs:
        text += f", {sum(costs):,.2f} {currency} at the configured price"
    return text
