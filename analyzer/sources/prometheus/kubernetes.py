"""The snapshot's Kubernetes side: who holds each GPU and what runs around it.

kube-state-metrics answers each GPU pod's owners, start, last sight, scheduling, pending phase,
groups and CPU limits and requests, and the owners of its ReplicaSets and Jobs; cAdvisor its CPU
usage and throttling. Every query is kept to pods holding a GPU (``FleetQueries.gpu_pods``); it is
asked side by side with the GPU aggregates, as it depends on discovery alone. The text is
``FleetQueries``'; this module lists which go out and reads their answers."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from math import isfinite
from operator import methodcaller

from analyzer.sources.aggregates import CpuUsage, DeviceKey, KsmRow, PodId, PodRecord, pod_records
from analyzer.sources.dcgm import Capabilities
from analyzer.sources.fleet_queries import FleetQueries
from analyzer.sources.prometheus.batch import Batch, labels_of, value_of
from analyzer.sources.prometheus_api import VectorSample

_namespace, _pod = methodcaller("get", "namespace", ""), methodcaller("get", "pod", "")


def queries(caps: Capabilities, q: FleetQueries) -> list[str]:
    """The Kubernetes-side queries kept for GPU pods (all but the GPU requests themselves)."""
    out = []
    if caps.kube_state_metrics:
        out += [q.pod_owners(), q.pod_start_times(), q.pod_last_seen()]
        out += [q.pod_scheduled()] if caps.pod_scheduled else []
        out += [q.pod_pending()] if caps.pod_phase else []
        out += [q.pod_groups()] if caps.pod_labels else []
        out += [q.cpu_limits()] if caps.cpu_limits else []
        out += [q.cpu_requests()] if caps.cpu_requests else []
    out += [q.replicaset_owners()] if caps.replicaset_owner else []
    out += [q.job_owners()] if caps.job_owner else []
    out += [q.cpu_usage()] if caps.cpu_usage else []
    out += [q.cpu_throttled_ratio()] if caps.cpu_throttling else []
    return out


def unrequested(counts: Mapping[DeviceKey, object], gpu_requests: Sequence[VectorSample]) -> bool:
    """Whether a pod holds a GPU in the window without a GPU request kube-state-metrics reports."""
    requested = {pid for pid, s in zip(pids(gpu_requests), gpu_requests, strict=True) if s.value > 0}
    return any(key.pod and key.pod_id not in requested for key in counts)


def pods(
    batch: Batch, q: FleetQueries, caps: Capabilities, gpu_requests: list[VectorSample], at: datetime
) -> dict[PodId, PodRecord]:
    def rows(query: str) -> list[KsmRow]:
        return answer_rows(batch.vector(query, at))

    def answer_rows(answer: list[VectorSample]) -> list[KsmRow]:
        return list(zip(pids(answer), map(labels_of, answer), map(value_of, answer), strict=True))

    return pod_records(
        rows(q.pod_owners()),
        rows(q.pod_start_times()),
        answer_rows(gpu_requests),
        last_seen=rows(q.pod_last_seen()),
        scheduled=rows(q.pod_scheduled()) if caps.pod_scheduled else (),
        pending=rows(q.pod_pending()) if caps.pod_phase else (),
        phases_known=caps.pod_phase,
        groups=rows(q.pod_groups()) if caps.pod_labels else (),
    )


def replicasets(batch: Batch, q: FleetQueries, at: datetime) -> dict[PodId, tuple[str, str]]:
    return _owners(batch, q.replicaset_owners(), "replicaset", at)


def jobs(batch: Batch, q: FleetQueries, at: datetime) -> dict[PodId, tuple[str, str]]:
    return _owners(batch, q.job_owners(), "job_name", at)


def _owners(batch: Batch, query: str, name_label: str, at: datetime) -> dict[PodId, tuple[str, str]]:
    """(namespace, name) → (owner kind, owner name): the controlling owner where one is marked so."""
    out: dict[PodId, tuple[str, str]] = {}
    for s in batch.vector(query, at):
        owned = (s.labels.get("namespace", ""), s.labels.get(name_label, ""))
        if s.labels.get("owner_is_controller") == "true" or owned not in out:
            out[owned] = (s.labels.get("owner_kind", ""), s.labels.get("owner_name", ""))
    return out


def cpu(batch: Batch, q: FleetQueries, caps: Capabilities, at: datetime) -> dict[PodId, CpuUsage]:
    def values(enabled: bool, query: Callable[[], str]) -> dict[PodId, float]:
        if not enabled:
            return {}
        answer = batch.vector(query(), at)
        pairs = zip(pids(answer), map(value_of, answer), strict=True)
        return {pid: v for pid, v in pairs if isfinite(v)}

    usage = values(caps.cpu_usage, q.cpu_usage)
    limits = values(caps.cpu_limits and caps.kube_state_metrics, q.cpu_limits)
    throttled = values(caps.cpu_throttling, q.cpu_throttled_ratio)
    requests = values(caps.cpu_requests, q.cpu_requests)
    return {
        pid: CpuUsage(
            usage_cores=usage.get(pid),
            limit_cores=limits.get(pid),
            throttled_ratio=throttled.get(pid),
            request_cores=requests.get(pid),
        )
        for pid in set(usage) | set(limits) | set(throttled) | set(requests)
    }


def pids(answer: Sequence[VectorSample]) -> Iterator[PodId]:
    """Each sample's (namespace, pod), looked up in C rather than by a Python call per sample."""
    labels = list(map(labels_of, answer))
    return zip(map(_namespace, labels), map(_pod, labels), strict=True)
