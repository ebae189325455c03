"""Real GPU-utilization recordings turned into the series a Kubernetes cluster would hold.

A recording is a CSV of NVML utilization readings taken by the run itself (see each recording's
README in tests/fixtures/recordings). A cluster holds something else: what dcgm-exporter reported
when Prometheus scraped it. dcgm-exporter returns the latest value DCGM sampled from NVML, so each
scrape at time ``s`` reads the last recorded reading at or before ``s``; scrapes happen every
``scrape_interval`` from the pod's start to its end, on a grid aligned to the interval, as a
Prometheus scrape loop is. Around them, kube-state-metrics reports the pod (its Job, start time,
GPU request, phase, scheduling) every ``ksm_interval``. Nothing is invented: no sample stands for
a time the recording does not cover, and there is no CPU data because the recordings have none.
Where a recording holds the framebuffer in use (nvidia-smi's ``memory.used``, MiB), each scrape
also stores ``DCGM_FI_DEV_FB_USED`` (MiB too) from the same reading; where it does not, there is no
memory series, as from an exporter that does not report it.

Recordings come in two shapes, each with its reader: a CSV with a header row naming its columns
(``read_readings``: unix seconds, one GPU picked by its id column where there is one), and
nvidia-smi's header-less ``--format=csv,noheader`` log (``read_nvidia_smi_log``), whose columns are
the ``--query-gpu`` fields the run asked for, in order.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from simulation.fleet import Series

RECORDINGS = Path(__file__).resolve().parent.parent / "fixtures" / "recordings"


@dataclass(frozen=True)
class Readings:
    """NVML readings of one GPU, as recorded: unix seconds, utilization percent and, where the
    recording holds it, framebuffer in use (MiB)."""

    timestamps: np.ndarray
    percent: np.ndarray
    memory_mib: np.ndarray | None = None

    @property
    def start(self) -> float:
        return float(self.timestamps[0])

    @property
    def end(self) -> float:
        return float(self.timestamps[-1])

    def shifted(self, seconds: float) -> Readings:
        return Readings(self.timestamps + seconds, self.percent, self.memory_mib)

    def at(self, index: np.ndarray) -> Readings:
        """The readings at ``index`` (in that order)."""
        memory = None if self.memory_mib is None else self.memory_mib[index]
        return Readings(self.timestamps[index], self.percent[index], memory)


def _in_time_order(t: list[float], percent: list[float], memory: list[float] | None) -> Readings:
    readings = Readings(np.array(t), np.array(percent), None if memory is None else np.array(memory))
    return readings.at(np.argsort(readings.timestamps, kind="stable"))


def read_readings(
    path: Path,
    time_column: str,
    value_column: str,
    gpu_column: str | None = None,
    gpu: str = "0",
    memory_column: str | None = None,
) -> Readings:
    """One GPU's readings from a CSV recording with a header row (times in unix seconds), in time
    order: the rows of GPU ``gpu`` where a ``gpu_column`` tells GPUs apart, every row otherwise."""
    with path.open(newline="", encoding="utf-8") as f:
        rows = [r for r in csv.DictReader(f) if gpu_column is None or r[gpu_column].strip() == gpu]
    memory = None if memory_column is None else [float(r[memory_column]) for r in rows]
    return _in_time_order(
        [float(r[time_column]) for r in rows], [float(r[value_column]) for r in rows], memory
    )


NVIDIA_SMI_TIME = "%Y/%m/%d %H:%M:%S.%f"


def read_nvidia_smi_log(path: Path, fields: Sequence[str]) -> Readings:
    """The readings of a header-less ``nvidia-smi --query-gpu=... --format=csv,noheader`` log of one
    GPU, whose columns are ``fields`` in order (``timestamp`` and ``utilization.gpu`` among them,
    ``memory.used`` where recorded). Values keep nvidia-smi's units (``45 %``, ``2 MiB``): the number
    is read, the unit dropped. nvidia-smi writes local time without a zone; it is read as UTC, which
    moves no reading relative to another."""
    column = {name: i for i, name in enumerate(fields)}
    with path.open(newline="", encoding="utf-8") as f:
        rows = [r for r in csv.reader(f, skipinitialspace=True) if r]
    if any(len(r) != len(fields) for r in rows):
        raise ValueError(f"{path.name}: a row without the {len(fields)} columns {', '.join(fields)}")

    def numbers(name: str) -> list[float]:
        return [float(r[column[name]].split()[0]) for r in rows]

    t = [
        datetime.strptime(r[column["timestamp"]], NVIDIA_SMI_TIME).replace(tzinfo=UTC).timestamp()
        for r in rows
    ]
    memory = numbers("memory.used") if "memory.used" in column else None
    return _in_time_order(t, numbers("utilization.gpu"), memory)


def scraped_readings(readings: Readings, interval: float) -> Readings:
    """What a scrape every ``interval`` seconds stores: at each scrape time (on the interval's grid,
    within the recording) the latest reading at or before it."""
    first = np.ceil(readings.start / interval) * interval
    scrapes = np.arange(first, readings.end + 1e-9, interval)
    latest = np.searchsorted(readings.timestamps, scrapes, side="right") - 1
    stored = readings.at(latest)
    return Readings(scrapes, stored.percent, stored.memory_mib)


def scraped(readings: Readings, interval: float) -> tuple[np.ndarray, np.ndarray]:
    """What a scrape every ``interval`` seconds stores: the latest reading at each scrape time."""
    s = scraped_readings(readings, interval)
    return s.timestamps, s.percent


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
    s = scraped_readings(readings, scrape_interval)
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
    yield labelled_series(gpu_labels, s.timestamps, s.percent)
    if s.memory_mib is not None:
        yield labelled_series(gpu_labels | {"__name__": "DCGM_FI_DEV_FB_USED"}, s.timestamps, s.memory_mib)

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
