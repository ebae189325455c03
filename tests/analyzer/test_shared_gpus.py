"""Pods sharing a time-sliced GPU, judged from our exporter's per-pod share series.

On a time-sliced GPU our exporter keeps the GPU's DCGM series whole (no pod labels) and gives each
holding pod its share: ``gpu_pod_sm_utilization_percent`` and ``gpu_pod_memory_used_bytes``. Three
Deployments share one GPU here: one holds memory and never computes (an idle endpoint worth a third
of the GPU), one serves, one computes a little (time-slicing guarantees no share, so little use of
one is not a verdict). A second GPU is time-sliced too, held by one pod alone for the first half of
the window (our exporter then names that pod on the GPU's DCGM series as well, as dcgm-exporter does)
and by two after: both pods are judged from their share series, over the whole window. Read through
real Prometheus and VictoriaMetrics.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from analyzer.pipeline import Analysis, analyze_in_detail
from analyzer.sources.prometheus.source import PrometheusSource
from analyzer.sources.prometheus_api import PrometheusConfig
from common.evidence import UnknownEvidence
from common.model import FindingKind, IdleEndpointEvidence, TimeWindow
from common.thresholds import Thresholds
from harness.servers import PrometheusServer, VictoriaMetricsServer, backfill_blocks
from simulation.fleet import Series

pytestmark = pytest.mark.slow

END = datetime(2026, 1, 5, tzinfo=UTC)
WINDOW = TimeWindow(start=END - timedelta(hours=6), end=END)
NODE = "gpu-shared"
SHARED_UUID = "GPU-5a1ced00-0000-4000-8000-000000000001"
JOINED_UUID = "GPU-5a1ced00-0000-4000-8000-000000000002"
SOLO, JOINER = "solo-chat", "late-chat"
STEP = 60.0
GIB = float(1 << 30)
# Deployment → (its pod's mean share of the GPU's SM time in percent, bytes it holds)
SHARERS = {"idle-chat": (0.0, 8 * GIB), "busy-chat": (35.0, 10 * GIB), "light-notebook": (8.0, 6 * GIB)}


def _series(name: str, labels: dict[str, str], t: np.ndarray, v: np.ndarray) -> Series:
    return Series(name, tuple(sorted(labels.items())), t, v)


def _fleet() -> Iterator[Series]:
    rng = np.random.default_rng(11)
    t = np.arange(END.timestamp() - 7 * 3600 + STEP, END.timestamp() + 1, STEP)
    gpu = {
        "UUID": SHARED_UUID,
        "gpu": "0",
        "modelName": "NVIDIA L40S",
        "Hostname": NODE,
        "job": "gpu-exporter",
        "instance": f"{NODE}:9400",
    }
    total = np.zeros(t.size)
    for i, (name, (percent, held)) in enumerate(SHARERS.items()):
        pod = f"{name}-7d9f8b6c5-q{i}x2z"
        noise = rng.normal(0.0, 3.0, t.size) if percent else np.zeros(t.size)
        share = np.clip(percent + noise, 0.0, 100.0)
        total += share
        holder = gpu | {"namespace": "serving", "pod": pod, "container": "main", "vgpu": str(i)}
        yield _series("gpu_pod_sm_utilization_percent", holder, t, share)
        yield _series("gpu_pod_memory_used_bytes", holder, t, np.full(t.size, held))
        yield from _deployment_pod(name, pod, t, started=END.timestamp() - 2 * 86400)
    # The GPU's own series: the whole device, no pod.
    yield _series("DCGM_FI_DEV_GPU_UTIL", gpu, t, np.round(np.clip(total, 0.0, 100.0)))
    yield _series("DCGM_FI_DEV_FB_USED", gpu, t, np.full(t.size, 24 * 1024.0))
    yield from _joined_gpu(t)


def _joined_gpu(t: np.ndarray) -> Iterator[Series]:
    """GPU 1: ``SOLO`` holds one replica alone and computes nothing; at the window's middle ``JOINER``
    takes another replica and serves. While ``SOLO`` is alone the GPU's DCGM series carry its pod."""
    gpu = {
        "UUID": JOINED_UUID,
        "gpu": "1",
        "modelName": "NVIDIA L40S",
        "Hostname": NODE,
        "job": "gpu-exporter",
        "instance": f"{NODE}:9400",
    }
    joined = END.timestamp() - 3 * 3600
    alone, after = t < joined, t >= joined
    solo_pod, joiner_pod = f"{SOLO}-5c8d7f9b4-a1b2c", f"{JOINER}-6b7c8d9f5-d3e4f"
    solo = gpu | {"namespace": "serving", "pod": solo_pod, "container": "main", "vgpu": "0"}
    joiner = gpu | {"namespace": "serving", "pod": joiner_pod, "container": "main", "vgpu": "1"}
    yield _series("gpu_pod_sm_utilization_percent", solo, t, np.zeros(t.size))
    yield _series("gpu_pod_memory_used_bytes", solo, t, np.full(t.size, 12 * GIB))
    yield _series("gpu_pod_sm_utilization_percent", joiner, t[after], np.full(after.sum(), 40.0))
    yield _series("gpu_pod_memory_used_bytes", joiner, t[after], np.full(after.sum(), 9 * GIB))
    for labels, when, util, mib in ((solo, alone, 0.0, 12 * 1024.0), (gpu, after, 40.0, 21 * 1024.0)):
        yield _series("DCGM_FI_DEV_GPU_UTIL", labels, t[when], np.full(when.sum(), util))
        yield _series("DCGM_FI_DEV_FB_USED", labels, t[when], np.full(when.sum(), mib))
    yield from _deployment_pod(SOLO, solo_pod, t, started=END.timestamp() - 2 * 86400)
    yield from _deployment_pod(JOINER, joiner_pod, t[after], started=joined - STEP)


def _deployment_pod(name: str, pod: str, t: np.ndarray, *, started: float) -> Iterator[Series]:
    """kube-state-metrics' series of a Deployment's running pod requesting one GPU on ``NODE``."""
    ksm = {"job": "kube-state-metrics", "instance": "kube-state-metrics:8080"}
    rs = pod.rsplit("-", 1)[0]
    who = ksm | {"namespace": "serving", "pod": pod, "uid": f"uid-{name}"}
    owner = {"owner_kind": "ReplicaSet", "owner_name": rs, "owner_is_controller": "true"}
    yield _series("kube_pod_owner", who | owner, t, np.ones(t.size))
    yield _series("kube_pod_start_time", who, t, np.full(t.size, started))
    request = who | {"container": "main", "node": NODE, "resource": "nvidia_com_gpu", "unit": "integer"}
    yield _series("kube_pod_container_resource_requests", request, t, np.ones(t.size))
    for phase in ("Pending", "Running", "Succeeded", "Failed", "Unknown"):
        value = 1.0 if phase == "Running" else 0.0
        yield _series("kube_pod_status_phase", who | {"phase": phase}, t, np.full(t.size, value))
    rs_owner = {"owner_kind": "Deployment", "owner_name": name, "owner_is_controller": "true"}
    yield _series(
        "kube_replicaset_owner",
        ksm | {"namespace": "serving", "replicaset": rs} | rs_owner,
        t,
        np.ones(t.size),
    )


def _check(analysis: Analysis) -> None:
    found = {f.workload.name: f for f in analysis.report.findings}
    idle = found.pop("idle-chat")
    assert idle.kind is FindingKind.IDLE_ENDPOINT
    assert isinstance(idle.evidence, IdleEndpointEvidence)
    # One GPU shared by three pods: the idle one wastes a third of it, not a whole GPU.
    assert idle.evidence.gpu_equivalents == pytest.approx(1 / 3, abs=0.01)
    assert idle.wasted_gpu_hours == pytest.approx(6.0 / 3, rel=0.05)
    assert idle.evidence.memory_used_mib == pytest.approx(8 * 1024, rel=0.01)
    assert idle.gpus == (SHARED_UUID,)
    # Alone on its time-sliced GPU for half the window, then beside a busy pod: judged from its
    # share over all six hours, as one of the GPU's two holders.
    solo = found.pop(SOLO)
    assert solo.kind is FindingKind.IDLE_ENDPOINT
    assert isinstance(solo.evidence, IdleEndpointEvidence)
    assert solo.evidence.gpu_equivalents == pytest.approx(1 / 2, abs=0.01)
    assert solo.wasted_gpu_hours == pytest.approx(6.0 / 2, rel=0.05)
    assert solo.gpus == (JOINED_UUID,)
    # The pod that joined three hours ago is too young to judge in this window.
    late = found.pop(JOINER)
    assert late.kind is FindingKind.UNKNOWN
    assert isinstance(late.evidence, UnknownEvidence)
    assert late.evidence.reason == "too_young"
    # Serving, and using a little of a share nobody guarantees: no verdict. The node is in use.
    assert found == {}, sorted(found)


@pytest.mark.victoriametrics
def test_victoriametrics_judges_pods_sharing_a_gpu_from_their_share_series(tmp_path: Path) -> None:
    with VictoriaMetricsServer(tmp_path) as server:
        server.import_series(_fleet())
        source = PrometheusSource(PrometheusConfig(server.url))
        _check(analyze_in_detail(source, WINDOW, Thresholds(), now=END))


@pytest.mark.prometheus
def test_prometheus_judges_pods_sharing_a_gpu_from_their_share_series(tmp_path: Path) -> None:
    blocks = backfill_blocks(_fleet(), tmp_path / "backfill")
    with PrometheusServer(tmp_path / "prometheus", blocks=blocks) as server:
        source = PrometheusSource(PrometheusConfig(server.url))
        _check(analyze_in_detail(source, WINDOW, Thresholds(), now=END))
