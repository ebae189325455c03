"""How a monitoring stack delivers a fleet's series: more than once, and from more than one cluster.

A cluster's Prometheus rarely holds each series once. kube-state-metrics is rescheduled (its series
go on under a new ``instance`` and ``pod``), rolled out (old and new pods overlap), run with two
replicas or sharded; dcgm-exporter is scraped by two jobs; an HA Prometheus pair remote-writes every
series twice, told apart by a replica label, each replica with gaps of its own; and many clusters
are read through one query view, told apart by an external label. ``deliver`` applies a scenario's
``delivery`` block to the series the simulator made, so the analyzer can be checked to give the
same verdicts with and without the duplicates.

Labels follow what the scrape path adds in kube-prometheus: a ServiceMonitor with ``honorLabels``
keeps kube-state-metrics' own ``namespace``/``pod`` and adds the target's ``pod`` only to series
without one (``kube_replicaset_owner``, ``kube_job_owner``), with ``container``, ``endpoint`` and
``service``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import replace

import numpy as np

from simulation.fleet.scenario import Delivery, Scenario
from simulation.fleet.series import Series

KSM_JOB = "kube-state-metrics"
GPU_JOBS = ("dcgm-exporter", "gpu-exporter")
# A copy's scrapes fall this much earlier than the original's: two scrapers never share a phase.
PHASE_SHIFT_S = 7.0


def deliver(scenario: Scenario, series: Iterable[Series]) -> list[Series]:
    """The series as the scenario's stack delivers them (unchanged without a ``delivery`` block)."""
    d = scenario.delivery
    out: Iterable[Series] = series
    out = _kube_state_metrics(scenario, d, out)
    if d.gpu_scrapes > 1:
        out = _scraped_again(out, d.gpu_scrapes)
    if d.ha_replicas > 1:
        out = _ha_pair(scenario, d, out)
    if d.cluster is not None:
        out = _labelled(out, d.cluster_label, d.cluster)
    return list(out)


def _is_ksm(s: Series) -> bool:
    return s.label("job") == KSM_JOB


def _with(s: Series, labels: dict[str, str], keep: np.ndarray | None = None, shift: float = 0.0) -> Series:
    merged = tuple(sorted((dict(s.labels) | labels).items()))
    t, v = (s.timestamps, s.values) if keep is None else (s.timestamps[keep], s.values[keep])
    return replace(s, labels=merged, timestamps=t - shift if shift else t, values=v)


def _ksm_target(series: Series, incarnation: int, replica: int) -> dict[str, str]:
    """The scrape target's labels of one kube-state-metrics pod (incarnation ``k``, replica ``r``)."""
    suffix = hashlib.sha256(f"ksm-{incarnation}-{replica}".encode()).hexdigest()[:5]
    labels = {
        "instance": f"10.42.{incarnation}.{10 + replica}:8080",
        "container": KSM_JOB,
        "endpoint": "http",
        "service": KSM_JOB,
    }
    if series.label("pod") is None:
        labels["pod"] = f"kube-state-metrics-6d4b9c7f8-{suffix}"
    return labels


def _object_of(s: Series) -> str:
    """The Kubernetes object a kube-state-metrics series describes: what a shard is chosen by."""
    name = s.label("pod") or s.label("replicaset") or s.label("job_name") or s.name
    return f"{s.label('namespace')}/{name}"


def _shard(s: Series, shards: int) -> int:
    return int(hashlib.sha256(_object_of(s).encode()).hexdigest()[:8], 16) % shards


def _kube_state_metrics(scenario: Scenario, d: Delivery, series: Iterable[Series]) -> Iterator[Series]:
    """kube-state-metrics' series cut at its moves (each piece under its new pod), overlapping by
    the rollout's overlap, once per replica, each object on its shard's pod."""
    ksm = d.kube_state_metrics
    if ksm is None:
        yield from series
        return
    moves = sorted(scenario.at(m).timestamp() for m in ksm.moves)
    overlap = ksm.rollout_overlap.total_seconds()
    starts, ends = [-np.inf, *moves], [*(m + overlap for m in moves), np.inf]
    for s in series:
        if not _is_ksm(s):
            yield s
            continue
        shard = _shard(s, ksm.shards) if ksm.shards > 1 else 0
        for k, (lo, hi) in enumerate(zip(starts, ends, strict=True)):
            keep = (s.timestamps > lo) & (s.timestamps <= hi)
            if not keep.any():
                continue
            for r in range(ksm.replicas):
                target = _ksm_target(s, k, r * ksm.shards + shard)
                yield _with(s, target, keep, shift=PHASE_SHIFT_S * r)


def _scraped_again(series: Iterable[Series], scrapes: int) -> Iterator[Series]:
    """Every GPU exporter series once per scrape job: a ServiceMonitor's job, then a PodMonitor's
    (``namespace/name``), each with its own scrape phase."""
    for s in series:
        yield s
        job = s.label("job")
        if job not in GPU_JOBS:
            continue
        for k in range(1, scrapes):
            yield _with(
                s, {"job": f"gpu-operator/{job}" + (f"-{k}" if k > 1 else "")}, shift=PHASE_SHIFT_S * k
            )


def _ha_pair(scenario: Scenario, d: Delivery, series: Iterable[Series]) -> Iterator[Series]:
    """Every series once per Prometheus replica, told apart by the replica label; each replica loses
    the samples of its own gaps."""
    gaps = [
        (g.replica, scenario.at(g.start).timestamp(), scenario.at(g.end).timestamp()) for g in d.replica_gaps
    ]
    for s in series:
        for r in range(d.ha_replicas):
            keep = np.ones(s.timestamps.size, dtype=bool)
            for replica, lo, hi in gaps:
                if replica == r:
                    keep &= ~((s.timestamps > lo) & (s.timestamps <= hi))
            if keep.any():
                yield _with(s, {d.replica_label: f"prometheus-k8s-{r}"}, keep, shift=PHASE_SHIFT_S * r)


def _labelled(series: Iterable[Series], label: str, value: str) -> Iterator[Series]:
    for s in series:
        yield _with(s, {label: value})
