"""Real GPU-utilization recordings turned into the series a Kubernetes cluster would hold.

A recording is a CSV of NVML utilization readings taken by the run itself (see each recording's
README in tests/fixtures/recordings). A cluster holds something else: what dcgm-exporter reported
when Prometheus scraped it. dcgm-exporter returns the latest value DCGM sampled from NVML, so each
scrape at time ``s`` reads the last recorded reading at or before ``s``; scrapes happen every
``scrape_interval`` from the pod's start to its end, on a grid aligned to the interval, as a
Prometheus scrape loop is. Around them, kube-state-metrics reports the pod (its Job, start time,
GPU request, phase, scheduling) every ``ksm_interval``. Nothing is invented: no sample stands for
a time the recording does not cover, and there is no CPU data because the recordings have none.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np

from simulation.fleet import Series

RECORDINGS = Path(__file__).resolve().parent.parent / "fixtures" / "recordings"


@dataclass(frozen=True)
class Readings:
    """NVML utilization readings of one GPU, as recorded: unix seconds and percent."""

    timestamps: np.ndarray
    percent: np.ndarray

    @property
    def start(self) -> float:
        return float(self.timestamps[0])

    @property
    def end(self) -> float:
        return float(self.timestamps[-1])

    def shifted(self, seconds: float) -> Readings:
        return Readings(self.timestamps + seconds, self.percent)


def read_readings(
    path: Path, time_column: str, value_column: str, gpu_column: str, gpu: str = "0"
) -> Readings:
    """One GPU's readings from a CSV recording, in time order."""
    with path.open(newline="", encoding="utf-8") as f:
        rows = [r for r in csv.DictReader(f) if r[gpu_column].strip() == gpu]
    t = np.array([float(r[time_column]) for r in rows])
    v = np.array([float(r[value_column]) for r in rows])
    order = np.argsort(t, kind="stable")
    return Readings(t[order], v[order])


def scraped(readings: Readings, interval: float) -> tuple[np.ndarray, np.ndarray]:
    """What a scrape every ``interval`` seconds stores: the latest reading at each scrape time."""
    first = np.ceil(readings.start / interval) * interval
    scrapes = np.arange(first, readings.end + 1e-9, interval)
    latest = np.searchsorted(readings.timestamps, scrapes, side="right") - 1
    return scrapes, readings.percent[latest]


@dataclass(frozen=True)
class JobPod:
    """The pod a recording ran in: a Job's single pod on one GPU of one node."""

    namespace: str
    job: str
    node: str = "gpu-node-1"
    gpu_uuid: str = "GPU-6a8f3c9e-recorded-0000-000000000000"
    model: str = "NVIDIA GPU"

    @property
    def pod(self) -> str:
        return f"{self.job}-x7k2p"


def cluster_series(
    readings: Readings, where: JobPod, scrape_interval: float = 15.0, ksm_interval: float = 30.0
) -> Iterator[Series]:
    """dcgm-exporter and kube-state-metrics series for a recording that ran as ``where``."""
    t, v = scraped(readings, scrape_interval)
    gpu_labels = {
        "__name__": "DCGM_FI_DEV_GPU_UTIL",
        "UUID": where.gpu_uuid,
        "gpu": "0",
        "Hostname": where.node,
        "modelName": where.model,
        "namespace": where.namespace,
        "pod": where.pod,
        "container": "main",
        "job": "dcgm-exporter",
        "instance": f"{where.node}:9400",
    }
    yield labelled_series(gpu_labels, t, v)

    first = np.ceil(readings.start / ksm_interval) * ksm_interval
    k = np.arange(first, readings.end + 1e-9, ksm_interval)
    ones, zeros = np.ones(k.size), np.zeros(k.size)
    pod = {"job": "kube-state-metrics", "namespace": where.namespace, "pod": where.pod, "uid": "recorded-0"}
    yield labelled_series(
        pod
        | {
            "__name__": "kube_pod_owner",
            "owner_kind": "Job",
            "owner_name": where.job,
            "owner_is_controller": "true",
        },
        k,
        ones,
    )
    yield labelled_series(
        pod | {"__name__": "kube_pod_start_time"}, k, np.full(k.size, np.floor(readings.start))
    )
    yield labelled_series(
        pod
        | {
            "__name__": "kube_pod_container_resource_requests",
            "container": "main",
            "node": where.node,
            "resource": "nvidia_com_gpu",
            "unit": "integer",
        },
        k,
        ones,
    )
    for phase in ("Pending", "Running", "Succeeded", "Failed", "Unknown"):
        yield labelled_series(
            pod | {"__name__": "kube_pod_status_phase", "phase": phase},
            k,
            ones if phase == "Running" else zeros,
        )
    for condition in ("true", "false", "unknown"):
        value = ones if condition == "true" else zeros
        yield labelled_series(
            pod | {"__name__": "kube_pod_status_scheduled", "condition": condition}, k, value
        )
    job = {
        "__name__": "kube_job_owner",
        "job": "kube-state-metrics",
        "namespace": where.namespace,
        "job_name": where.job,
        "owner_kind": "<none>",
        "owner_name": "<none>",
        "owner_is_controller": "<none>",
    }
    yield labelled_series(job, k, ones)


def labelled_series(labels: dict[str, str], t: np.ndarray, v: np.ndarray) -> Series:
    """A series from its labels, ``__name__`` included."""
    name = labels["__name__"]
    rest = tuple(sorted((k, val) for k, val in labels.items() if k != "__name__"))
    return Series(name, rest, t.astype(float), v.astype(float))


def ending_at(readings: Readings, end: datetime, before: float = 20.0) -> Readings:
    """The recording moved in time (whole seconds) so its last reading lies ``before`` s before ``end``."""
    return readings.shifted(float(np.round(end.timestamp() - before - readings.end)))
