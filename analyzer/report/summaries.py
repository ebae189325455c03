"""Short human summaries of findings, shared by the table and the HTML report."""

from __future__ import annotations

from collections import Counter

from common.model import Finding, FindingKind, FindingsReport


def mean_text(f: Finding) -> str:
    value = f.evidence.get("mean_util_percent")
    return f"{value:.1f}" if isinstance(value, int | float) else "–"


def detail(f: Finding) -> str:
    """The one number that explains the verdict."""
    e = f.evidence
    if f.kind is FindingKind.DATALOADER_STARVATION:
        if e.get("pattern") == "bimodal":
            return (
                f"bimodal: {e.get('stalled_share', 0):.0%} stalled / {e.get('busy_share', 0):.0%} busy "
                f"({e.get('shares_from', 'samples')})"
            )
        sat, thr = e.get("cpu_saturation"), e.get("cpu_throttled_ratio")
        parts = []
        if isinstance(sat, float):
            parts.append(f"CPU {sat:.0%} of limit")
        if isinstance(thr, float):
            parts.append(f"throttled {thr:.0%}")
        return "cpu-bound: " + ", ".join(parts)
    if f.kind is FindingKind.UNKNOWN:
        return f"coverage {e.get('coverage', 0):.0%}"
    return f"max {e.get('max_util_percent', 0):.1f} %"


def summary_line(report: FindingsReport) -> str:
    counts = Counter(f.kind for f in report.findings)
    wasted = sum(f.wasted_gpu_hours for f in report.findings)
    costs = [f.estimated_cost for f in report.findings if f.estimated_cost is not None]
    parts = [f"{counts.get(kind, 0)} {kind.value}" for kind in FindingKind]
    text = f"{len(report.findings)} findings ({', '.join(parts)}); {wasted:,.1f} GPU-hours wasted"
    if costs:
        text += f", {sum(costs):,.2f} at the configured price"
    return text
