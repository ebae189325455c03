"""The immutable result of a collection cycle, and the builder that turns readings into labelled series.

The builder owns the only state that outlives a cycle: the cumulative utilization-sample histograms
(counters must only grow). A snapshot is never changed once built; ``/metrics`` renders whichever
snapshot is newest, so a scrape costs no NVML call and never waits for one.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import NamedTuple

from exporter import fields as f
from exporter.attribution import Holder, PodName, PodView, holders_of, is_shared, pod_usage
from exporter.readings import DeviceIdentity, DeviceReading, NodeReading

Labels = dict[str, str]
_Add = Callable[[str, Labels, float], None]


class Series(NamedTuple):
    """One sample of a gauge or counter family. ``labels`` is never mutated once built."""

    labels: Labels
    value: float


class HistogramSeries(NamedTuple):
    """One histogram: cumulative counts at each bound of :data:`exporter.fields.SAMPLE_BUCKETS` and +Inf."""

    labels: Labels
    cumulative: tuple[int, ...]
    total: float


@dataclass(frozen=True)
class Snapshot:
    """Everything ``/metrics`` serves, as of ``taken_at`` (Unix seconds)."""

    taken_at: float
    ok: bool
    duration_s: float
    series: Mapping[str, tuple[Series, ...]] = field(default_factory=dict)
    histograms: tuple[HistogramSeries, ...] = ()
    error: str | None = None


@dataclass(frozen=True)
class Counters:
    """Counters kept outside the builder, as read at the end of a cycle."""

    xids: Mapping[tuple[str, int], int] = field(default_factory=dict)
    last_xid: Mapping[str, int] = field(default_factory=dict)
    nvml_errors: Mapping[tuple[str, str], int] = field(default_factory=dict)
    kubelet_errors: int = 0


class _Histogram:
    __slots__ = ("buckets", "total")

    def __init__(self) -> None:
        self.buckets = [0] * (len(f.SAMPLE_BUCKETS) + 1)
        self.total = 0.0

    def observe(self, values: tuple[int, ...]) -> None:
        for value in values:
            self.buckets[bisect.bisect_left(f.SAMPLE_BUCKETS, value)] += 1
            self.total += value

    def cumulative(self) -> tuple[int, ...]:
        running, out = 0, []
        for count in self.buckets:
            running += count
            out.append(running)
        return tuple(out)


def gpu_labels(gpu: DeviceIdentity, hostname: str, driver_version: str) -> Labels:
    """dcgm-exporter's identifying labels for a physical GPU."""
    return {
        "gpu": str(gpu.gpu_index),
        "UUID": gpu.uuid,
        "pci_bus_id": gpu.pci_bus_id,
        "device": f"nvidia{gpu.gpu_index}",
        "modelName": gpu.name,
        "Hostname": hostname,
        "DCGM_FI_DRIVER_VERSION": driver_version,
    }


def _with_holder(labels: Labels, holder: Holder) -> Labels:
    out = {**labels, "pod": holder.pod, "namespace": holder.namespace, "container": holder.container}
    if holder.vgpu is not None:
        out["vgpu"] = holder.vgpu
    return out


def device_holders(view: PodView, device: DeviceReading) -> tuple[Holder, ...]:
    gpu_instance = None if device.mig is None else device.mig.gpu_instance_id
    return holders_of(
        view.allocated,
        device.uuid,
        device.gpu.gpu_index,
        gpu_instance,
        None if device.mig is None else device.mig.slot,
    )


class SnapshotBuilder:
    """Builds :class:`Snapshot` objects; keeps cumulative histogram state between cycles."""

    def __init__(self, hostname: str, *, version: str) -> None:
        self._hostname = hostname
        self._version = version
        self._histograms: dict[tuple[str, tuple[str, ...]], _Histogram] = {}
        self._last_success_at: float | None = None

    def build(
        self,
        reading: NodeReading,
        view: PodView,
        pid_uids: Mapping[int, str],
        counters: Counters,
        *,
        taken_at: float,
        duration_s: float,
    ) -> Snapshot:
        series: defaultdict[str, list[Series]] = defaultdict(list)
        histograms: list[HistogramSeries] = []
        driver = reading.driver_version

        def add(name: str, labels: Labels, value: float) -> None:
            series[name].append(Series(labels, value))

        base_labels: dict[str, Labels] = {}
        for gpu, up in reading.gpus:
            base_labels[gpu.uuid] = labels = gpu_labels(gpu, self._hostname, driver)
            add(f.GPU_UP, labels, 1.0 if up else 0.0)

        kept_histograms: dict[tuple[str, tuple[str, ...]], _Histogram] = {}
        for device in reading.devices:
            labels = base_labels.get(device.gpu.uuid) or gpu_labels(device.gpu, self._hostname, driver)
            if device.mig is not None:
                mig = device.mig
                labels = {**labels, "GPU_I_PROFILE": mig.profile, "GPU_I_ID": str(mig.gpu_instance_id)}
            holders = device_holders(view, device)
            shared = is_shared(holders)
            device_labels = _with_holder(labels, holders[0]) if holders and not shared else labels

            for name, value in device.values.items():
                series[name].append(Series(device_labels, value))
            if device.mig is None:
                add(f.XID_ERRORS, device_labels, float(counters.last_xid.get(device.uuid, 0)))
            if shared:
                self._add_pod_usage(add, labels, holders, device, pid_uids, view.uid_names)
            if device.samples is not None:
                key = (
                    device.uuid,
                    tuple(device_labels.get(k, "") for k in ("namespace", "pod", "container")),
                )
                histogram = self._histograms.get(key) or _Histogram()
                histogram.observe(device.samples)
                kept_histograms[key] = histogram
                histograms.append(HistogramSeries(device_labels, histogram.cumulative(), histogram.total))

        # A GPU that is down keeps its histogram for when it returns; other stale keys (a pod that left) go.
        down = {gpu.uuid for gpu, up in reading.gpus if not up}
        for key, histogram in self._histograms.items():
            if key[0] in down and key not in kept_histograms:
                kept_histograms[key] = histogram
        self._histograms = kept_histograms

        identities = {gpu.uuid: gpu for gpu, _ in reading.gpus}
        for (uuid, xid), count in sorted(counters.xids.items()):
            identity = identities.get(uuid)
            if identity is not None:
                add(
                    f.XID_TOTAL,
                    {**gpu_labels(identity, self._hostname, driver), "xid": str(xid)},
                    float(count),
                )

        if reading.ok:
            self._last_success_at = taken_at
        self._add_self_metrics(add, counters, duration_s)
        return Snapshot(
            taken_at=taken_at,
            ok=reading.ok,
            duration_s=duration_s,
            series=MappingProxyType({name: tuple(items) for name, items in series.items()}),
            histograms=tuple(histograms),
            error=reading.error,
        )

    @staticmethod
    def _add_pod_usage(
        add: _Add,
        labels: Labels,
        holders: tuple[Holder, ...],
        device: DeviceReading,
        pid_uids: Mapping[int, str],
        uid_names: Mapping[str, PodName],
    ) -> None:
        for usage in pod_usage(holders, device.processes, device.process_utilization, pid_uids, uid_names):
            pod_labels = _with_holder(labels, usage.holder)
            # Own names, not DCGM's: the GPU's series already carry the whole device, so a per-pod
            # DCGM_FI_DEV_GPU_UTIL would make `sum by (gpu)` count the GPU twice.
            if usage.sm_percent is not None:
                add(f.POD_SM_UTILIZATION, pod_labels, usage.sm_percent)
            if usage.memory_bytes is not None:
                add(f.POD_MEMORY_USED, pod_labels, float(usage.memory_bytes))

    def _add_self_metrics(self, add: _Add, counters: Counters, duration_s: float) -> None:
        add(f.COLLECT_DURATION, {}, duration_s)
        if self._last_success_at is not None:
            add(f.LAST_COLLECT, {}, self._last_success_at)
        for (call, code), count in sorted(counters.nvml_errors.items()):
            add(f.NVML_ERRORS, {"call": call, "code": code}, float(count))
        add(f.KUBELET_ERRORS, {}, float(counters.kubelet_errors))
        add(f.BUILD_INFO, {"version": self._version}, 1.0)
