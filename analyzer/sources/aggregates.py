"""Per-device and per-pod aggregates: what every metrics source hands to the detectors.

A Prometheus-backed source gets these numbers from PromQL the TSDB evaluates; the simulated source
and the closer look at raw samples compute them here with numpy, with the same definitions
(``quantile_over_time``'s linear interpolation, ``increase``'s counter-reset handling). Utilization
is always in percent (0-100) by the time it is stored here.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from analyzer.sources.dcgm import Capabilities
from common.model import TimeWindow

PodId = tuple[str, str]  # (namespace, pod)


@dataclass(frozen=True, order=True)
class DeviceKey:
    """One holder of one device: a GPU (or MIG instance) and the pod holding it, if any."""

    uuid: str
    mig_instance: str = ""
    namespace: str = ""
    pod: str = ""

    @property
    def allocated(self) -> bool:
        return bool(self.pod)

    @property
    def pod_id(self) -> PodId:
        return (self.namespace, self.pod)

    @property
    def device_id(self) -> str:
        """How findings list the device: the GPU UUID, or ``UUID/mig-N`` for a MIG instance."""
        return f"{self.uuid}/mig-{self.mig_instance}" if self.mig_instance else self.uuid


@dataclass(frozen=True)
class DeviceInfo:
    node: str
    metric: str  # the utilization series the numbers come from
    job: str = ""
    index: str | None = None
    model: str | None = None
    mig_profile: str | None = None


@dataclass(frozen=True)
class UtilStats:
    """Utilization samples of one device over a span, in percent."""

    samples: int
    mean: float
    max: float
    q_low: float  # quantile at `q_level`
    q_high: float  # quantile at 1 - `q_level`
    q_level: float

    @property
    def spread(self) -> float:
        """Width of the band holding the central (1 - 2·q_level) share of samples."""
        return self.q_high - self.q_low


@dataclass(frozen=True)
class Shares:
    """Share of utilization samples stalled (≤ the idle bound) and busy (> the busy bound)."""

    stalled: float
    busy: float
    weight: float  # how many samples the shares stand for (for pooling devices)
    source: Literal["histogram", "samples"]


@dataclass(frozen=True)
class DeviceAggregate:
    key: DeviceKey
    info: DeviceInfo
    stats: UtilStats
    span_s: float  # the span the stats cover, seconds
    interval_s: float  # the series' sample interval, seconds
    histogram: Shares | None = None
    memory_used_mib: float | None = None

    @property
    def expected_samples(self) -> float:
        return self.span_s / self.interval_s if self.interval_s > 0 else 0.0

    @property
    def coverage(self) -> float:
        return coverage(self.stats.samples, self.span_s, self.interval_s)


def coverage(samples: int, span_s: float, interval_s: float) -> float:
    """Delivered share of the samples a span should hold; capped at 1 (closed ranges hold one extra)."""
    expected = span_s / interval_s if interval_s > 0 else 0.0
    return min(1.0, samples / expected) if expected > 0 else 0.0


@dataclass(frozen=True)
class PodRecord:
    """A pod alive at the window's end, as kube-state-metrics describes it."""

    namespace: str
    name: str
    owner_kind: str | None = None
    owner_name: str | None = None
    start: float | None = None  # unix seconds
    gpu_requests: int | None = None
    node: str | None = None  # where kube-state-metrics says it runs


KsmRow = tuple[PodId, Mapping[str, str], float]  # one kube-state-metrics sample: pod, labels, value


def pod_records(
    owners: Iterable[KsmRow], starts: Iterable[KsmRow], gpu_requests: Iterable[KsmRow]
) -> dict[PodId, PodRecord]:
    """Pods from ``kube_pod_owner``, ``kube_pod_start_time`` and GPU ``resource_requests`` rows.

    A controller owner reference wins over any other; GPU requests are summed over containers.
    """
    owner_of: dict[PodId, tuple[str, str]] = {}
    for pid, labels, _ in owners:
        if labels.get("owner_is_controller") == "true" or pid not in owner_of:
            owner_of[pid] = (labels.get("owner_kind", ""), labels.get("owner_name", ""))
    start_of = {pid: value for pid, _, value in starts}
    requested: dict[PodId, float] = defaultdict(float)
    node_of: dict[PodId, str] = {}
    for pid, labels, value in gpu_requests:
        requested[pid] += value
        if labels.get("node"):
            node_of[pid] = labels["node"]
    return {
        pid: PodRecord(
            namespace=pid[0],
            name=pid[1],
            owner_kind=kind,
            owner_name=name,
            start=start_of.get(pid),
            gpu_requests=round(requested[pid]) if pid in requested else None,
            node=node_of.get(pid),
        )
        for pid, (kind, name) in owner_of.items()
    }


@dataclass(frozen=True)
class CpuUsage:
    usage_cores: float | None = None
    limit_cores: float | None = None
    throttled_ratio: float | None = None

    @property
    def saturation(self) -> float | None:
        if self.usage_cores is None or not self.limit_cores:
            return None
        return self.usage_cores / self.limit_cores


@dataclass(frozen=True)
class FleetSnapshot:
    """Everything one run learns from its source over the analysis window."""

    window: TimeWindow
    capabilities: Capabilities
    devices: Mapping[DeviceKey, DeviceAggregate]
    pods: Mapping[PodId, PodRecord] = field(default_factory=dict)
    replicasets: Mapping[PodId, tuple[str, str]] = field(default_factory=dict)  # (ns, rs) → (kind, name)
    cpu: Mapping[PodId, CpuUsage] = field(default_factory=dict)


@dataclass(frozen=True)
class DeviceSamples:
    """Raw samples of one device over the analysis window (the closer look)."""

    key: DeviceKey
    timestamps: np.ndarray
    values: np.ndarray  # percent
    # Cumulative histogram bucket counters by bound label value: (timestamps, counts).
    buckets: Mapping[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)

    def between(self, span: TimeWindow) -> DeviceSamples:
        """Samples in (start, end]: the left edge belongs to the previous span."""
        lo, hi = span.start.timestamp(), span.end.timestamp()

        def cut(t: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            mask = (t > lo) & (t <= hi)
            return t[mask], v[mask]

        t, v = cut(self.timestamps, self.values)
        return DeviceSamples(self.key, t, v, {le: cut(*tv) for le, tv in self.buckets.items()})


def quantile_levels(min_share: float) -> tuple[float, float]:
    """Quantile levels bracketing the starvation test: a bimodal device has its low quantile stalled."""
    low = min_share / 2
    return low, 1.0 - low


def util_stats(values: np.ndarray, q_level: float) -> UtilStats | None:
    """Mean, max and two quantiles with ``quantile_over_time``'s linear interpolation."""
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return None
    q_low, q_high = np.quantile(finite, [q_level, 1.0 - q_level])
    return UtilStats(
        samples=int(finite.size),
        mean=float(finite.mean()),
        max=float(finite.max()),
        q_low=float(q_low),
        q_high=float(q_high),
        q_level=q_level,
    )


def sample_shares(values: np.ndarray, idle_percent: float, busy_percent: float) -> Shares | None:
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return None
    return Shares(
        stalled=float((finite <= idle_percent).mean()),
        busy=float((finite > busy_percent).mean()),
        weight=float(finite.size),
        source="samples",
    )


def counter_increase(values: np.ndarray) -> float:
    """Increase of a counter over its samples; a drop means it restarted from zero, as in PromQL."""
    if values.size < 2:
        return 0.0
    steps = np.diff(values)
    # After a reset the counter counted from 0 to the new value.
    return float(np.where(steps >= 0, steps, values[1:]).sum())


def counter_rate(timestamps: np.ndarray, values: np.ndarray) -> float | None:
    """Per-second rate between the first and last sample (no extrapolation to the window edges)."""
    if values.size < 2 or timestamps[-1] <= timestamps[0]:
        return None
    return counter_increase(values) / float(timestamps[-1] - timestamps[0])


def histogram_shares(stalled_count: float, busy_bound_count: float, total: float) -> Shares | None:
    """Shares from bucket increases: ``le=idle`` are stalled, everything above ``le=busy`` is busy."""
    if total <= 0:
        return None
    stalled = min(1.0, max(0.0, stalled_count / total))
    busy = min(1.0, max(0.0, 1.0 - busy_bound_count / total))
    return Shares(stalled=stalled, busy=busy, weight=total, source="histogram")


def pooled_shares(shares: list[Shares]) -> Shares | None:
    """Sample-weighted shares over several devices; histogram only when every device has one."""
    if not shares:
        return None
    weight = sum(s.weight for s in shares)
    if weight <= 0:
        return None
    source: Literal["histogram", "samples"] = (
        "histogram" if all(s.source == "histogram" for s in shares) else "samples"
    )
    return Shares(
        stalled=sum(s.stalled * s.weight for s in shares) / weight,
        busy=sum(s.busy * s.weight for s in shares) / weight,
        weight=weight,
        source=source,
    )
