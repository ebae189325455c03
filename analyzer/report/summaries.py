"""Short human summaries of findings, shared by the table and the HTML report."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from analyzer.report.units import mebibytes, percent, share
from common.model import (
    DataloaderStarvationEvidence,
    Finding,
    FindingKind,
    FindingsReport,
    IdleEndpointEvidence,
    LowUtilizationEvidence,
    StalledJobEvidence,
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
    if isinstance(e, StalledJobEvidence):
        return stalled_detail(e)
    if isinstance(e, LowUtilizationEvidence) and e.near_miss:
        return f"near miss: mean {percent(e.mean_util_percent or 0)}" + _right_size(e)
    if isinstance(e, UnknownEvidence):
        return e.why  # the same words as the reaper's plan and messages
    text = f"max {percent(e.max_util_percent or 0)}"
    if isinstance(e, IdleEndpointEvidence) and e.memory_used_mib is not None:
        text += f", {mebibytes(e.memory_used_mib)} held per GPU"
    if isinstance(e, LowUtilizationEvidence):
        text += _right_size(e)
    return text


def _right_size(e: LowUtilizationEvidence) -> str:
    """The smaller share a long-running workload would fit, briefly (the whole sentence is in HTML)."""
    sized = e.right_size
    if sized is None:
        return ""
    if sized.share is None:
        return ", no smaller share"
    what = f"MIG {sized.profile}" if sized.share == "mig" else f"{sized.profile} time-sliced"
    return f", fits {what} (saves {sized.gpu_equivalents_saved:.2g} GPU)"


def stalled_detail(e: StalledJobEvidence) -> str:
    """``hung 45m, waits on GPU-… at 150 W of 700 W`` / ``one rank: 32 % waiting, 12 waits…``."""
    watts = (
        f" at {e.power_waiting_watts:.0f} W of {e.power_limit_watts or 0:.0f} W"
        if e.power_waiting_watts
        else ""
    )
    if e.hung:
        return f"hung {e.last_episode_minutes or 0:.0f} min{watts}"
    what = (e.pattern or "").replace("_", " ")
    odd = f", odd one out {e.odd_one_out_pod or e.odd_one_out}" if e.odd_one_out else ""
    return f"{what}: {share(e.waiting_share or 0)} waiting, {e.episodes or 0} waits{watts}{odd}"


# Kinds added after the summary line's wording was set: counted only where some finding has them,
# so a report without one reads as it always did.
_COUNTED_WHEN_PRESENT = frozenset({FindingKind.STALLED_JOB})


def findings_line(findings: Sequence[Finding], currency: str = "USD") -> str:
    """Counts per kind, wasted GPU-hours and (where priced) their cost, in one line."""
    counts = Counter(f.kind for f in findings)
    wasted = sum(f.wasted_gpu_hours for f in findings)
    costs = [f.estimated_cost for f in findings if f.estimated_cost is not None]
    parts = [
        f"{counts.get(kind, 0)} {kind.value}"
        for kind in FindingKind
        if kind not in _COUNTED_WHEN_PRESENT or counts.get(kind)
    ]
    text = f"{len(findings)} findings ({', '.join(parts)}); {wasted:,.1f} GPU-hours wasted"
    if costs:
        text += f", {sum(costs):,.2f} {currency} at the configured price"
    return text


def no_findings_line(report: FindingsReport) -> str:
    """What an empty report means, with how many GPUs it rests on where the report says."""
    n = report.gpus_judged
    judged = "every judged GPU was" if n is None else f"all {n} judged GPU{'s were' if n != 1 else ' was'}"
    return f"No findings: {judged} busy enough, with enough data to say so."


def summary_line(report: FindingsReport, currency: str = "USD") -> str:
    return findings_line(report.findings, currency)


# --- many clusters in one report ---------------------------------------------------------------------
#
# One query view may hold many clusters, and the same GitOps repository gives the same namespaces and
# workload names in each: a report over several clusters shows every finding under its cluster and
# never adds two clusters' numbers together. With one cluster (or none named) it reads as it always did.

NO_CLUSTER = "(no cluster label)"


def clusters_of(findings: Sequence[Finding]) -> list[str]:
    """The distinct cluster names the findings carry, sorted."""
    return sorted({f.cluster for f in findings if f.cluster is not None})


def spans_clusters(findings: Sequence[Finding]) -> bool:
    """Whether the findings come from more than one named cluster, so the reports group them."""
    return len(clusters_of(findings)) > 1


def cluster_name(cluster: str | None) -> str:
    return NO_CLUSTER if cluster is None else cluster


@dataclass(frozen=True)
class ClusterGroup:
    """One cluster's findings (``cluster`` None: those whose series carried no cluster label)."""

    cluster: str | None
    findings: tuple[Finding, ...]

    @property
    def name(self) -> str:
        return cluster_name(self.cluster)

    @property
    def wasted(self) -> float:
        return sum(f.wasted_gpu_hours for f in self.findings)

    @property
    def cost(self) -> float | None:
        costs = [f.estimated_cost for f in self.findings if f.estimated_cost is not None]
        return sum(costs) if costs else None


def by_cluster(findings: Sequence[Finding]) -> list[ClusterGroup]:
    """The findings per cluster, clusters sorted by name, unlabelled ones last; each keeps its order."""
    groups = [
        ClusterGroup(name, tuple(f for f in findings if f.cluster == name)) for name in clusters_of(findings)
    ]
    unlabelled = tuple(f for f in findings if f.cluster is None)
    if unlabelled:
        groups.append(ClusterGroup(None, unlabelled))
    return groups


def cluster_prefix(f: Finding, grouped: bool) -> str:
    """``[prod-eu] `` before a workload's name where the report spans clusters, else nothing."""
    return f"[{cluster_name(f.cluster)}] " if grouped else ""
