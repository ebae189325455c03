"""Kubernetes-side answers name GPU pods only, through real Prometheus and VictoriaMetrics.

A cluster's CPU-only pods (and a pod whose GPU request is zero) must not reach the analyzer: their
owners, start times and CPU figures would cost bytes for nothing. A GPU pod that finished before the
window's end still counts: it held its GPU for part of the window.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from analyzer.pipeline import analyze_in_detail
from analyzer.sources.aggregates import FleetSnapshot
from analyzer.sources.prometheus.source import PrometheusSource
from analyzer.sources.prometheus_api import PrometheusConfig
from common.model import TimeWindow
from common.thresholds import Thresholds
from harness.recordings import JobPod, Readings, cluster_series, labelled_series
from harness.servers import serving
from simulation.fleet import Series

END = datetime(2026, 1, 5, tzinfo=UTC)
KSM = 30.0


def _cpu_only_pod(namespace: str, pod: str, replicaset: str, gpus: float | None) -> Iterator[Series]:
    """kube-state-metrics and cAdvisor series of a pod that holds no GPU (``gpus``: a GPU request
    of that many, as a pod spec may say ``nvidia.com/gpu: 0``)."""
    t = np.arange(END.timestamp() - 4 * 3600, END.timestamp() - 10, KSM)
    ones = np.ones(t.size)
    ksm = {"job": "kube-state-metrics", "namespace": namespace, "pod": pod, "uid": f"{pod}-uid"}
    yield labelled_series(
        ksm
        | {
            "__name__": "kube_pod_owner",
            "owner_kind": "ReplicaSet",
            "owner_name": replicaset,
            "owner_is_controller": "true",
        },
        t,
        ones,
    )
    yield labelled_series(ksm | {"__name__": "kube_pod_start_time"}, t, np.full(t.size, t[0]))
    yield labelled_series(ksm | {"__name__": "kube_pod_status_phase", "phase": "Running"}, t, ones)
    yield labelled_series(ksm | {"__name__": "kube_pod_status_phase", "phase": "Pending"}, t, 0 * ones)
    yield labelled_series(ksm | {"__name__": "kube_pod_status_scheduled", "condition": "true"}, t, ones)
    container = ksm | {"container": "app", "node": "cpu-node-1"}
    for kind in ("requests", "limits"):
        name = f"kube_pod_container_resource_{kind}"
        yield labelled_series(container | {"__name__": name, "resource": "cpu", "unit": "core"}, t, 2 * ones)
    if gpus is not None:
        yield labelled_series(
            container
            | {
                "__name__": "kube_pod_container_resource_requests",
                "resource": "nvidia_com_gpu",
                "unit": "integer",
            },
            t,
            gpus * ones,
        )
    yield labelled_series(
        {
            "__name__": "kube_replicaset_owner",
            "job": "kube-state-metrics",
            "namespace": namespace,
            "replicaset": replicaset,
            "owner_kind": "Deployment",
            "owner_name": replicaset.rsplit("-", 1)[0],
            "owner_is_controller": "true",
        },
        t,
        ones,
    )
    cadvisor = {"job": "kubelet", "namespace": namespace, "pod": pod, "container": "app"}
    yield labelled_series(
        cadvisor | {"__name__": "container_cpu_usage_seconds_total"}, t, np.cumsum(ones) * KSM
    )


def _gpu_pod(job: str, hours: float, ends_before: float) -> list[Series]:
    """A Job's pod on one GPU, busy half the time, for ``hours`` up to ``ends_before`` s before the end."""
    t = np.arange(END.timestamp() - ends_before - hours * 3600, END.timestamp() - ends_before, 15.0)
    where = JobPod(namespace="ml", job=job, gpu_uuid=f"GPU-{job}-0000-0000-000000000000")
    series = list(cluster_series(Readings(t, 50.0 * (np.arange(t.size) % 2)), where, 15.0, KSM))
    ksm = {"job": "kubelet", "namespace": "ml", "pod": where.pod, "container": "main"}
    usage = np.cumsum(np.ones(t.size)) * 15.0
    return [*series, labelled_series(ksm | {"__name__": "container_cpu_usage_seconds_total"}, t, usage)]


def _snapshot(tsdb: str, series: list[Series], workdir: Path) -> FleetSnapshot:
    """The snapshot of a run over the last 6 hours of ``series``, served by ``tsdb``."""
    window = TimeWindow.ending(END, timedelta(hours=6))
    with serving(tsdb, series, workdir) as server:
        return analyze_in_detail(
            PrometheusSource(PrometheusConfig(server.url)), window, Thresholds(), now=window.end
        ).snapshot


@pytest.mark.prometheus
@pytest.mark.victoriametrics
@pytest.mark.parametrize("tsdb", ["prometheus", "victoriametrics"])
def test_kubernetes_answers_name_gpu_pods_only(tsdb: str, tmp_path: Path) -> None:
    series = [
        *_gpu_pod("train", hours=4, ends_before=20),
        *_gpu_pod("finished", hours=2, ends_before=2 * 3600),  # gone two hours before the end
        *_cpu_only_pod("ml", "web-7d9f-abcde", "web-7d9f", gpus=None),
        *_cpu_only_pod("ml", "zero-5c4b-fghij", "zero-5c4b", gpus=0.0),
    ]
    snapshot = _snapshot(tsdb, series, tmp_path)
    gpu_pods = {("ml", "train-x7k2p"), ("ml", "finished-x7k2p")}
    assert set(snapshot.pods) == gpu_pods
    assert all(record.owner_kind == "Job" for record in snapshot.pods.values())
    assert set(snapshot.cpu) == gpu_pods
    assert all(usage.request_cores is None for usage in snapshot.cpu.values())
    assert snapshot.replicasets == {}
    assert set(snapshot.jobs) <= {("ml", "train"), ("ml", "finished")}


@pytest.mark.prometheus
@pytest.mark.victoriametrics
@pytest.mark.parametrize("tsdb", ["prometheus", "victoriametrics"])
def test_a_gpu_pod_without_a_reported_request_keeps_its_kubernetes_side(tsdb: str, tmp_path: Path) -> None:
    """The GPU-pod filter names pods by their GPU requests; where kube-state-metrics reports none for
    a pod that holds a GPU (its resource name filtered out, requests not exported), the pods
    holding a GPU at the end are named from the GPU series instead, and CPU-only pods stay out."""
    unreported = [
        s
        for s in _gpu_pod("bare", hours=4, ends_before=20)
        if not (s.name == "kube_pod_container_resource_requests" and "nvidia" in (s.label("resource") or ""))
    ]
    assert len(unreported) < len(_gpu_pod("bare", hours=4, ends_before=20))  # a request series left out
    series = [
        *_gpu_pod("train", hours=4, ends_before=20),
        *unreported,
        *_cpu_only_pod("ml", "web-7d9f-abcde", "web-7d9f", gpus=None),
    ]
    snapshot = _snapshot(tsdb, series, tmp_path)
    gpu_pods = {("ml", "train-x7k2p"), ("ml", "bare-x7k2p")}
    assert set(snapshot.pods) == gpu_pods
    assert all(record.owner_kind == "Job" for record in snapshot.pods.values())
    assert snapshot.pods[("ml", "bare-x7k2p")].start is not None
    assert set(snapshot.cpu) == gpu_pods
