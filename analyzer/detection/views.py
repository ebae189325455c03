"""What the detectors see: one workload (or one unallocated node) and the numbers about its devices."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from analyzer.sources.aggregates import CpuUsage, DeviceInfo, DeviceKey, Shares, UtilStats
from common.model import TimeWindow, WorkloadRef


@dataclass(frozen=True)
class DeviceView:
    key: DeviceKey
    info: DeviceInfo
    stats: UtilStats | None  # None: not one sample in the judged span
    coverage: float
    shares: Shares | None = None  # stalled / busy shares, when known
    memory_used_mib: float | None = None


@dataclass(frozen=True)
class PodView:
    namespace: str
    name: str
    start: datetime | None  # None when kube-state-metrics does not say
    cpu: CpuUsage = field(default_factory=CpuUsage)


@dataclass(frozen=True)
class RequestRate:
    """The policy's request-rate query for one workload and what it returned (None: no data)."""

    query: str
    value: float | None


@dataclass(frozen=True)
class WorkloadView:
    ref: WorkloadRef
    pods: tuple[PodView, ...]
    devices: tuple[DeviceView, ...]
    window: TimeWindow
    stats_span: TimeWindow  # the span the device numbers cover
    missing_devices: int = 0  # GPUs the pods requested that never reported
    request_rate: RequestRate | None = None  # None: no request-rate query configured

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
