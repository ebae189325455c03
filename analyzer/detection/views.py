"""What the detectors see: one workload (or one unallocated node) and the numbers about its devices."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from analyzer.sources.aggregates import (
    CpuUsage,
    DeviceInfo,
    DeviceKey,
    GpuReadings,
    Phases,
    Shares,
    UtilStats,
)
from common.model import TimeWindow, WorkloadRef


@dataclass(frozen=True)
class DeviceView:
    """One holder of one device: a GPU (or MIG instance) and the pod that held it."""

    key: DeviceKey
    info: DeviceInfo
    stats: UtilStats | None  # None: not one sample in the judged span
    coverage: float  # of the samples expected over `span`
    span: TimeWindow  # the holder's judged span: its pod's life in the window, past warm-up
    shares: Shares | None = None  # stalled / busy shares, when known
    memory_used_mib: float | None = None
    phases: Phases | None = None  # how long stalls and busy stretches last, from raw samples
    interval_s: float | None = None  # the utilization series' sample interval (the scrape's), seconds
    # Raw utilization, power, limit and clock-event reasons: read for stalled-job candidates only.
    readings: GpuReadings | None = None


@dataclass(frozen=True)
class PodView:
    namespace: str
    name: str
    start: datetime | None  # None when kube-state-metrics does not say
    cpu: CpuUsage = field(default_factory=CpuUsage)
    ambiguity: str | None = None  # why its series are not one pod's (see PodRecord)


@dataclass(frozen=True)
class RequestRate:
    """The policy's request-rate query for one workload and what it returned (None: no data)."""

    query: str
    value: float | None


@dataclass(frozen=True)
class WorkloadView:
    """A workload and every holder of a GPU among its pods over the window, old and new."""

    ref: WorkloadRef
    pods: tuple[PodView, ...]
    devices: tuple[DeviceView, ...]  # judged holders; a holder still in its warm-up is left out
    window: TimeWindow
    judged: TimeWindow | None  # first to last judged moment; None: no pod got past its warm-up
    judged_seconds: float = 0.0  # length of the union of the holders' judged spans
    missing_devices: int = 0  # GPUs its scheduled pods requested that never reported
    request_rate: RequestRate | None = None  # None: no request-rate query configured
    # The controller above `ref` that its pods' labels name (analyzer.detection.controllers): what a
    # stop must act on. None: the metrics do not say (the reaper finds it through the API).
    owner: WorkloadRef | None = None

    @property
    def judged_hours(self) -> float:
        return self.judged_seconds / 3600.0

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(sorted({d.info.node for d in self.devices}))

    @property
    def gpu_ids(self) -> tuple[str, ...]:
        return tuple(sorted({d.key.device_id for d in self.devices}))


@dataclass(frozen=True)
class NodeView:
    """A node none of whose GPUs any pod held during the window."""

    name: str
    devices: tuple[DeviceView, ...]
    window: TimeWindow

    @property
    def gpu_ids(self) -> tuple[str, ...]:
        return tuple(sorted({d.key.device_id for d in self.devices}))
