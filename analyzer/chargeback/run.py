"""One chargeback against a TSDB: read the window's per-day sums, then compute the bill."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from analyzer.chargeback.compute import Grouping, Span, compute, idlest_pods
from analyzer.chargeback.model import ChargebackReport, Coverage
from analyzer.chargeback.prices import Prices
from analyzer.detection.ownership import resolve
from analyzer.sources.aggregates import PodRecord
from analyzer.sources.prometheus.chargeback import ChargebackReads
from analyzer.sources.prometheus_api import PrometheusClient
from analyzer.sources.prometheus_config import PrometheusConfig
from common.errors import BadInputError
from common.model import FindingKind, FindingsReport, TimeWindow, WorkloadRef
from common.thresholds import Pricing

BY_CHOICES = ("namespace", "cluster", "label:<name>")


def check_by(by: str) -> str:
    """``namespace``, ``cluster`` or ``label:<name>`` (a Kubernetes label key's exported form)."""
    if by in ("namespace", "cluster"):
        return by
    if by.startswith("label:") and by[6:]:
        key = by[6:]
        # kube-state-metrics exports a label key with every character outside [a-zA-Z0-9_] as "_".
        exported = "".join(c if c.isalnum() or c == "_" else "_" for c in key)
        return f"label:{exported}"
    raise BadInputError(f"--by {by!r}: expected one of {', '.join(BY_CHOICES)}")


def chargeback(
    reads: ChargebackReads,
    window: TimeWindow,
    by: str,
    prices: Prices,
    idle_percent: float,
    now: datetime,
    share_unallocated: bool = False,
    findings: Mapping[WorkloadRef, FindingKind] | None = None,
) -> ChargebackReport:
    by = check_by(by)
    label = by.removeprefix("label:") if by.startswith("label:") else None
    data = reads.read(window, idle_percent, label)
    spans = [Span(c.start, c.end, c.rows) for c in data.chunks]
    models = {
        dict(labels).get("modelName", "")
        for chunk in data.chunks
        for (part, labels) in chunk.rows
        if part == "reported"
    }
    prices.check(models)
    pods = idlest_pods(spans, reads.cluster_label)
    owner_rows, replicasets = reads.owners(data.window, pods, data.chunks)
    owners = {
        pid: resolve(PodRecord(namespace=pid[0], name=pid[1], owner_kind=k, owner_name=n), replicasets)
        for pid, (k, n) in owner_rows.items()
    }
    partial = None
    if data.first_data is not None:
        partial = (
            f"the TSDB holds GPU series from {data.first_data.isoformat()} on (about an hour's "
            f"precision), not from {window.start.isoformat()}: computed over "
            f"{data.window.start.isoformat()} to {data.window.end.isoformat()}"
        )
    return compute(
        spans,
        Grouping(by, reads.cluster_label, data.namespace_groups or {}),
        prices,
        idle_percent,
        window,
        data.window,
        reads.client.config.display_url,
        now,
        share_unallocated=share_unallocated,
        partial_reason=partial,
        owners=owners,
        findings=findings,
        coverage=Coverage(
            rollup_hours=data.rollup_hours, raw_hours=data.raw_hours, reason=data.rollup_reason
        ),
    )


def run_chargeback(
    config: PrometheusConfig,
    window: TimeWindow,
    by: str,
    pricing: Pricing,
    idle_percent: float,
    now: datetime,
    share_unallocated: bool = False,
    findings: FindingsReport | None = None,
    gpu_util_unit: str = "auto",
    cluster_label: str = "cluster",
    recording_rules: bool = True,
) -> ChargebackReport:
    """A chargeback from a TSDB (the command line's entry)."""
    by = check_by(by)
    reads = ChargebackReads(
        PrometheusClient(config), cluster_label, gpu_util_unit=gpu_util_unit, recording_rules=recording_rules
    )
    kinds = {f.workload: f.kind for f in findings.findings} if findings is not None else None
    return chargeback(reads, window, by, Prices.of(pricing), idle_percent, now, share_unallocated, kinds)
