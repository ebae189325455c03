"""Per-device and per-pod aggregates: what every metrics source hands to the detectors.

A Prometheus-backed source gets these numbers from PromQL the TSDB evaluates; a source that holds
raw samples computes them with ``analyzer.sources.sample_math`` (numpy, the same definitions).
This module is the data model alone and does not load numpy: an analysis of a TSDB's data never
needs it. Utilization is always in percent (0-100) by the time it is stored here.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from itertools import pairwise
from typing import TYPE_CHECKING, Literal, NamedTuple

from analyzer.sources import vocabulary
from analyzer.sources.dcgm import JOB_GROUP_LABEL, POD_LABELS_READ, Capabilities
from common.model import TimeWindow
from common.timeutil import format_duration

if TYPE_CHECKING:
    import numpy as np

PodId = tuple[str, str]  # (namespace, pod)


class DeviceKey(NamedTuple):
    """One holder of one device: a GPU (or MIG instance) and the pod holding it, if any.

    A named tuple, not a dataclass: keys are hashed and compared hundreds of thousands of times
    per run at 10,000 GPUs, and a tuple does both in C.
    """

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
    # Pods that held a share of this time-sliced GPU in the window (our exporter's per-pod series);
    # None for a GPU, or MIG instance, held whole.
    sharers: int | None = None
    # The other names of ``metric``'s field the numbers also come from: its exporter renamed its
    # series in the window (DCGM 4.7's naming), and its history lies under both.
    also: tuple[str, ...] = ()

    @property
    def metrics(self) -> tuple[str, ...]:
        """Every name the numbers come from: ``metric`` first."""
        return (self.metric, *self.also)


@dataclass(frozen=True)
class UtilStats:
    """Utilization samples of one device over a span, in percent."""

    samples: int
    mean: float
    max: float
    q_low: float  # quantile at `q_level`
    q_high: float  # quantile at 1 - `q_level`
    q_level: float
    median: float | None = None  # None where the source did not compute it

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
class MemoryPeak:
    """A device's framebuffer over the window: a high quantile of what was used, and what the GPU
    holds (used + free, where free is reported), MiB."""

    peak_mib: float
    capacity_mib: float | None = None


Points = tuple[tuple[float, float], ...]  # (unix seconds, value), oldest first


@dataclass(frozen=True)
class GpuReadings:
    """Raw samples over the window of one holder (its utilization, percent) and of its GPU (board
    power and limit, watts; clock-event reasons, NVML's bitmask): what the stalled-job rule reads.
    Plain tuples, no numpy: a few candidates' GPUs, and an analysis of a TSDB never loads numpy."""

    util: Points = ()
    power: Points = ()
    limit: Points = ()
    clock_events: Points = ()
    power_metric: str = ""  # the name(s) power was read under, comma-separated
    limit_metric: str = ""


def merged_points(pieces: Iterable[tuple[Iterable[float], Iterable[float]]], scale: float = 1.0) -> Points:
    """Samples of one reading from several series (a holder split by owner, two scrape jobs, both
    namings), one per timestamp, oldest first."""
    by_time: dict[float, float] = {}
    for times, values in pieces:
        for t, v in zip(times, values, strict=True):
            by_time.setdefault(float(t), float(v) * scale)
    return tuple(sorted(by_time.items()))


def readings_of(
    util: tuple[tuple[float, float], ...],
    by_name: Mapping[str, Sequence[tuple[Sequence[float], Sequence[float]]]],
) -> GpuReadings:
    """Power, limit and clock-event reasons from a GPU's series by name, each in its unit (both
    namings of a field one reading; a scrape served under both once). Shared by both sources."""

    def one(names: Sequence[str]) -> tuple[tuple[tuple[float, float], ...], str]:
        found = [n for n in names if by_name.get(n)]
        if not found:
            return (), ""
        # The limit's names are two fields (enforced, then set): the first found is read.
        first = [n for n in found if vocabulary.field_of(n) == vocabulary.field_of(found[0])]
        pieces = [(t, [x * (vocabulary.to_unit(n) or 1.0) for x in v]) for n in first for t, v in by_name[n]]
        return merged_points(pieces), ",".join(first)

    power, power_metric = one(vocabulary.POWER)
    limit, limit_metric = one(vocabulary.POWER_LIMIT)
    events, _ = one(vocabulary.CLOCK_EVENTS)
    return GpuReadings(util, power, limit, events, power_metric, limit_metric)


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
    """A pod kube-state-metrics reported at some time in the window, as it last described it."""

    namespace: str
    name: str
    owner_kind: str | None = None
    owner_name: str | None = None
    start: float | None = None  # unix seconds; None until the kubelet starts it (never, if unscheduled)
    # Every start in the window, oldest first: a StatefulSet's pod recreated under the same name
    # (a new uid) started again, and each incarnation warms up again.
    starts: tuple[float, ...] = ()
    gpu_requests: int | None = None
    node: str | None = None  # where kube-state-metrics says it runs
    last_seen: float | None = None  # unix seconds it was last reported running in the window; None: not known
    scheduled: bool | None = None  # PodScheduled was true at some time in the window; None: not reported
    pending: bool = False  # phase Pending at its last report
    finished: bool = False  # reported, but never Running in the window: ended before it (a done Job's pod)
    group: str | None = None  # its app.kubernetes.io/name label, where kube-state-metrics exports it
    # The other pod labels read (``dcgm.POD_LABELS_READ``) it carries, by their exported names
    # (``label_…``), sorted: the custom controller above its workload (analyzer.detection.controllers).
    labels: tuple[tuple[str, str], ...] = ()
    # Why its series cannot be one pod's (two incarnations of the name alive at once); None: they can.
    ambiguity: str | None = None

    @property
    def never_scheduled(self) -> bool:
        """The scheduler never placed it in the window: it holds no GPU, so none can be missing.

        ``kube_pod_status_scheduled{condition="true"}`` decides when kube-state-metrics reports it;
        otherwise a Pending pod whose requests carry no node is unscheduled.
        """
        if self.scheduled is not None:
            return not self.scheduled
        return self.pending and not self.node


KsmRow = tuple[PodId, Mapping[str, str], float]  # one kube-state-metrics sample: pod, labels, value


def pod_records(
    owners: Iterable[KsmRow],
    starts: Iterable[KsmRow],
    gpu_requests: Iterable[KsmRow],
    last_seen: Iterable[KsmRow] = (),
    scheduled: Iterable[KsmRow] = (),
    pending: Iterable[KsmRow] = (),
    phases_known: bool = False,
    groups: Iterable[KsmRow] = (),
) -> dict[PodId, PodRecord]:
    """Pods from ``kube_pod_owner``, ``kube_pod_start_time``, GPU ``resource_requests`` and status rows.

    A controller owner reference wins over any other; GPU requests are summed over containers. A pod
    scheduled during the window has request rows both without and with its node: the rows with the
    node win. A pod recreated under its name (a new ``uid``) requests what one incarnation does.
    With phases known, ``last_seen`` rows are the last ``Running`` reports: a pod without one, and
    not Pending, ran before the window only (a finished Job's pod stays in the API).
    """
    owner_of: dict[PodId, tuple[str, str]] = {}
    for pid, labels, _ in owners:
        if labels.get("owner_is_controller") == "true" or pid not in owner_of:
            owner_of[pid] = (labels.get("owner_kind", ""), labels.get("owner_name", ""))
    starts_of: dict[PodId, set[float]] = defaultdict(set)
    for pid, _, value in starts:
        starts_of[pid].add(value)
    # pod → incarnation (uid) → node label → GPUs summed over containers
    rows: dict[PodId, dict[str, dict[str, float]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(float))
    )
    for pid, labels, value in gpu_requests:
        rows[pid][labels.get("uid", "")][labels.get("node", "")] += value
    requested: dict[PodId, float] = {}
    node_of: dict[PodId, str] = {}
    node_of_uid: dict[PodId, dict[str, str]] = defaultdict(dict)
    for pid, incarnations in rows.items():
        per_uid = []
        for uid, nodes in incarnations.items():
            placed = {n: v for n, v in nodes.items() if n}
            if placed:
                node = max(placed)  # one node per incarnation; max() only makes the pick deterministic
                node_of[pid] = node
                node_of_uid[pid][uid] = node
                per_uid.append(placed[node])
            else:
                per_uid.append(nodes[""])
        requested[pid] = max(per_uid)
    seen_at: dict[PodId, float] = {}
    seen_of: dict[PodId, dict[str, float]] = defaultdict(dict)
    for pid, labels, value in last_seen:
        seen_at[pid] = max(value, seen_at.get(pid, value))
        uid = labels.get("uid", "")
        seen_of[pid][uid] = max(value, seen_of[pid].get(uid, value))
    started: dict[PodId, dict[str, float]] = defaultdict(dict)
    for pid, labels, value in starts:
        started[pid][labels.get("uid", "")] = value
    group_of: dict[PodId, str] = {}
    labels_of: dict[PodId, dict[str, str]] = defaultdict(dict)
    for pid, labels, _ in groups:
        # Several rows of one pod (kube-state-metrics rolled out with a new allowlist): every
        # label any of them exports.
        for name in POD_LABELS_READ:
            if found := labels.get(name):
                if name == JOB_GROUP_LABEL:
                    group_of[pid] = found
                else:
                    labels_of[pid][name] = found
    scheduled_of = {pid: value >= 1 for pid, _, value in scheduled}
    pending_of = {pid for pid, _, value in pending if value >= 1}
    return {
        pid: PodRecord(
            namespace=pid[0],
            name=pid[1],
            owner_kind=kind,
            owner_name=name,
            start=max(starts_of[pid]) if starts_of.get(pid) else None,
            starts=tuple(sorted(starts_of.get(pid, ()))),
            gpu_requests=round(requested[pid]) if pid in requested else None,
            node=node_of.get(pid),
            last_seen=seen_at.get(pid),
            scheduled=scheduled_of.get(pid),
            pending=pid in pending_of,
            finished=phases_known and pid not in seen_at and pid not in pending_of,
            group=group_of.get(pid),
            labels=tuple(sorted(labels_of[pid].items())) if pid in labels_of else (),
            ambiguity=overlapping_lives(
                pid, started.get(pid, {}), seen_of.get(pid, {}), node_of_uid.get(pid, {})
            ),
        )
        for pid, (kind, name) in owner_of.items()
    }


# How long one incarnation of a pod may still be reported running after the next one of its name
# started: a name is reused only once the old pod is gone, so a longer overlap is two pods.
OVERLAP_SLACK_S = 300.0


def overlapping_lives(
    pid: PodId, started: Mapping[str, float], seen: Mapping[str, float], nodes: Mapping[str, str]
) -> str | None:
    """Why a pod name's series are two pods', or None. Incarnations (uids) of one name follow each
    other; two alive at once are two pods, e.g. two clusters written into one TSDB without a label
    telling them apart, whose verdicts must not be merged."""
    lives = sorted((start, seen[uid], uid) for uid, start in started.items() if uid and uid in seen)
    for (_, first_seen, first), (second_start, _, second) in pairwise(lives):
        if first_seen > second_start + OVERLAP_SLACK_S:
            where = [
                f"uid {uid}" + (f" on {nodes[uid]}" if nodes.get(uid) else "") for uid in (first, second)
            ]
            return (
                f"pod {pid[0]}/{pid[1]} ran as two pods at once ({' and '.join(where)}, for "
                f"{format_duration(timedelta(seconds=round(first_seen - second_start)))})"
            )
    return None


@dataclass(frozen=True)
class CpuUsage:
    usage_cores: float | None = None
    limit_cores: float | None = None
    throttled_ratio: float | None = None
    request_cores: float | None = None

    @property
    def saturation(self) -> float | None:
        """CPU used ÷ the limit, or ÷ the request for a pod without a limit (it may burst past it)."""
        if self.usage_cores is None:
            return None
        bound = self.limit_cores or self.request_cores
        return self.usage_cores / bound if bound else None

    @property
    def saturation_of(self) -> Literal["limit", "request"] | None:
        if self.saturation is None:
            return None
        return "limit" if self.limit_cores else "request"


@dataclass(frozen=True)
class FleetSnapshot:
    """Everything one run learns from its source over the analysis window."""

    window: TimeWindow
    capabilities: Capabilities
    devices: Mapping[DeviceKey, DeviceAggregate]
    pods: Mapping[PodId, PodRecord] = field(default_factory=dict)
    replicasets: Mapping[PodId, tuple[str, str]] = field(default_factory=dict)  # (ns, rs) → (kind, name)
    jobs: Mapping[PodId, tuple[str, str]] = field(default_factory=dict)  # (ns, job) → its owner (kind, name)
    cpu: Mapping[PodId, CpuUsage] = field(default_factory=dict)
    # Holders reported by more than one series (a moved exporter, two scrape jobs, an HA pair
    # written twice): their samples are counted from the series merged (see FleetQueries).
    merged: frozenset[DeviceKey] = frozenset()


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


@dataclass(frozen=True)
class Phases:
    """Mean length (seconds) of the runs of consecutive stalled and of consecutive busy samples."""

    stalled_s: float
    busy_s: float


def phases_from_counts(
    stalled: float, stalled_runs: float, busy: float, busy_runs: float, interval_s: float
) -> Phases | None:
    """Mean run lengths from sample and run counts: each sample stands for one interval."""
    if stalled <= 0 or busy <= 0 or stalled_runs <= 0 or busy_runs <= 0 or interval_s <= 0:
        return None
    return Phases(stalled_s=stalled * interval_s / stalled_runs, busy_s=busy * interval_s / busy_runs)


@dataclass(frozen=True)
class CloserLook:
    """What one device holder needs computed over its own judged span, beyond the snapshot."""

    key: DeviceKey
    span: TimeWindow
    stats: bool = False  # utilization statistics over the span (its pod's warm-up lies in the window)
    histogram: bool = False  # sample-histogram shares over the span
    shares: bool = False  # stalled/busy shares and phase lengths from the scraped samples


@dataclass(frozen=True)
class SpanNumbers:
    """A closer look's answer: aggregates over the holder's span (None where nothing was there)."""

    stats: UtilStats | None = None
    histogram: Shares | None = None
    shares: Shares | None = None
    phases: Phases | None = None


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


def with_sharers(
    devices: Mapping[DeviceKey, DeviceAggregate], shared_metric: str
) -> dict[DeviceKey, DeviceAggregate]:
    """Devices whose numbers come from ``shared_metric`` (a pod's share of a time-sliced GPU) with
    the number of pods that shared their GPU in the window; the others unchanged."""
    pods: dict[str, set[PodId]] = defaultdict(set)
    for key, dev in devices.items():
        if dev.info.metric == shared_metric:
            pods[key.uuid].add(key.pod_id)
    return {
        key: replace(dev, info=replace(dev.info, sharers=len(pods[key.uuid])))
        if dev.info.metric == shared_metric
        else dev
        for key, dev in devices.items()
    }
