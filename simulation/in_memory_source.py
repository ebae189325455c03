"""A metrics source over series held in memory: the simulator's fleet, or raw series pulled elsewhere.

It answers the same questions as the Prometheus-backed source with numpy and the same definitions,
including Prometheus's 5-minute lookback for "alive at the window's end" and counter-reset handling.
``gpu-reaper demo`` runs the whole pipeline on it without a TSDB. Its window is ``(start, end]``,
like VictoriaMetrics; Prometheus 2.x also counts a sample sitting exactly on ``start``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Container, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

import numpy as np

from analyzer.sources import dcgm, vocabulary
from analyzer.sources.aggregates import (
    CloserLook,
    CpuUsage,
    DeviceAggregate,
    DeviceInfo,
    DeviceKey,
    DeviceSamples,
    FleetSnapshot,
    GpuReadings,
    KsmRow,
    MemoryPeak,
    PodId,
    PodRecord,
    SpanNumbers,
    histogram_shares,
    pod_records,
    quantile_levels,
    readings_of,
    with_sharers,
)
from analyzer.sources.dcgm import Capabilities
from analyzer.sources.sample_math import (
    counter_increase,
    counter_rate,
    first_busy_from_samples,
    span_numbers_from_samples,
    util_stats,
)
from analyzer.sources.source_errors import NoDataError
from analyzer.sources.waits import WaitCounts, WaitRule, counted_waits
from common.model import TimeWindow
from common.thresholds import Thresholds
from simulation.fleet import Fleet, Series

# One series' samples in a window: the series, its timestamps, its values (in percent, once scaled).
Piece = tuple[Series, np.ndarray, np.ndarray]
LOOKBACK = timedelta(minutes=5)  # Prometheus's default staleness lookback for instant queries
_GPU_RESOURCE = ("nvidia_com_gpu", "nvidia_com_mig_")


class InMemorySource:
    """``MetricsSource`` over ``Series`` objects (name, labels, timestamps, values)."""

    def __init__(
        self, series: Iterable[Series], description: str, cluster_label: str = dcgm.CLUSTER_LABEL
    ) -> None:
        self._by_name: dict[str, list[Series]] = defaultdict(list)
        for s in series:
            self._by_name[s.name].append(s)
        self._description = description
        self.cluster_label = cluster_label

    @property
    def description(self) -> str:
        return self._description

    def clusters(self, window: TimeWindow, thresholds: Thresholds) -> list[str]:
        del thresholds
        found = {
            value
            for metric in dcgm.UTIL_METRICS
            for s, _, _ in self._in_window(metric, window)
            if (value := s.label(self.cluster_label))
        }
        return sorted(found)

    def for_cluster(self, cluster: str) -> InMemorySource:
        mine = (
            s for group in self._by_name.values() for s in group if s.label(self.cluster_label) == cluster
        )
        return InMemorySource(mine, self._description, self.cluster_label)

    # --- series access --------------------------------------------------------------------------

    def _in_window(self, name: str, window: TimeWindow) -> Iterator[tuple[Series, np.ndarray, np.ndarray]]:
        lo, hi = window.start.timestamp(), window.end.timestamp()
        for s in self._by_name.get(name, ()):
            mask = (s.timestamps > lo) & (s.timestamps <= hi)
            if mask.any():
                yield s, s.timestamps[mask], s.values[mask]

    def _at_end(self, name: str, at: datetime) -> Iterator[tuple[Series, float]]:
        """Latest value within the lookback, as an instant query at ``at`` returns it."""
        hi = at.timestamp()
        lo = hi - LOOKBACK.total_seconds()
        for s in self._by_name.get(name, ()):
            mask = (s.timestamps >= lo) & (s.timestamps <= hi)
            if mask.any():
                yield s, float(s.values[mask][-1])

    # --- discovery ------------------------------------------------------------------------------

    def _discover(self, window: TimeWindow, t: Thresholds) -> Capabilities:
        """What the series hold, decided as the Prometheus source decides it (``vocabulary``'s names,
        ``Capabilities.discovered``); the unit of a name whose values tell it, from its values."""
        present = {name for name in dcgm.KNOWN_METRICS if any(True for _ in self._in_window(name, window))}
        util = tuple(m for m in dcgm.UTIL_METRICS if m in present)
        if not util:
            raise NoDataError(
                f"{self.description}: no GPU utilization series ({', '.join(dcgm.UTIL_METRICS)}) "
                "in the window: nothing can be concluded from silence"
            )
        gpu_labels = {k for m in util for s, _, _ in self._in_window(m, window) for k, _ in s.labels}
        ksm_labels = {k for s, _, _ in self._in_window(dcgm.KUBE_POD_OWNER, window) for k, _ in s.labels}
        histogram_le: tuple[str, ...] = ()
        if dcgm.SAMPLE_HISTOGRAM_BUCKET in present:
            bounds = {
                le: v
                for s, _, _ in self._in_window(dcgm.SAMPLE_HISTOGRAM_BUCKET, window)
                if (le := s.label(dcgm.LE)) is not None and (v := dcgm.parse_le(le)) is not None
            }
            try:
                histogram_le = dcgm.pick_buckets(bounds, t.starvation_idle_percent, t.starvation_busy_percent)
            except ValueError:
                histogram_le = ()
        caps = Capabilities.discovered(present, util, gpu_labels, ksm_labels, histogram_le)
        return replace(
            caps,
            dev_to_percent=self._dev_to_percent(
                window, [name for name in util if vocabulary.by_values(name)]
            ),
            interval_s=self._intervals(window, caps, t),
        )

    def _dev_to_percent(self, window: TimeWindow, names: Sequence[str]) -> dict[str, float]:
        """Per scrape job, the multiplier into percent of the names whose values tell their unit (the
        legacy device gauge)."""
        if not names:
            return {}
        maxima: dict[str, list[float]] = defaultdict(list)
        sums: dict[str, float] = defaultdict(float)
        counts: dict[str, int] = defaultdict(int)
        for s, _, v in (found for name in names for found in self._in_window(name, window)):
            job = s.label(dcgm.JOB) or ""
            finite = v[np.isfinite(v)]
            maxima[job].append(float(finite.max()) if finite.size else 0.0)
            sums[job] += float(finite.sum())
            counts[job] += int(finite.size)
        return dcgm.dev_to_percent_by_job(
            maxima, {job: sums[job] / counts[job] for job in counts if counts[job]}
        )

    def _intervals(self, window: TimeWindow, caps: Capabilities, t: Thresholds) -> dict[str, float]:
        longest: dict[str, np.ndarray] = {}
        for metric in caps.util_metrics:
            for s, ts, _ in self._in_window(metric, window):
                job = s.label(dcgm.JOB) or ""
                if ts.size > longest.get(job, np.empty(0)).size:
                    longest[job] = ts
        out = {}
        for job, ts in longest.items():
            if t.scrape_interval is not None:
                out[job] = t.scrape_interval.total_seconds()
            elif (interval := dcgm.median_interval([ts.tolist()])) is not None:
                out[job] = interval
        return out

    # --- the snapshot ---------------------------------------------------------------------------

    def _key(self, s: Series, caps: Capabilities) -> DeviceKey | None:
        uuid = s.label(dcgm.UUID)
        if not uuid:
            return None
        return DeviceKey(
            uuid=uuid,
            mig_instance=(s.label(dcgm.MIG_INSTANCE) or "") if caps.mig else "",
            namespace=(s.label(caps.gpu_pod.namespace) or "") if s.label(caps.gpu_pod.pod) else "",
            pod=s.label(caps.gpu_pod.pod) or "",
        )

    def snapshot(self, window: TimeWindow, thresholds: Thresholds) -> FleetSnapshot:
        caps = self._discover(window, thresholds)
        q_level = quantile_levels(thresholds.starvation_min_share)[0]
        span_s = window.duration.total_seconds()
        devices: dict[DeviceKey, DeviceAggregate] = {}
        for names in caps.signals():
            # A device with a preferred field keeps it; within one, every name it was read under.
            held = self._held(window, caps, names, skip=devices)
            for key, by_name in held.items():
                metric = max(by_name, key=lambda name: sum(t.size for _, t, _ in by_name[name]))
                s = by_name[metric][0][0]
                job = s.label(dcgm.JOB) or ""
                _, values = _one_history(by_name, caps.interval_s.get(job, 0.0))
                stats = util_stats(values, q_level)
                if stats is None:
                    continue
                also = tuple(name for name in by_name if name != metric)
                devices[key] = DeviceAggregate(
                    key=key,
                    info=_info(s, metric, caps, also),
                    stats=stats,
                    span_s=span_s,
                    interval_s=caps.interval_s.get(job, 0.0),
                )
        if not devices:
            raise NoDataError(f"{self.description}: no GPU utilization samples in the window")
        devices = with_sharers(devices, dcgm.POD_SM_UTIL)
        if caps.histogram:
            devices = self._with_histograms(devices, window, caps)
        pods = self._pods(window, caps) if caps.kube_state_metrics else {}
        return FleetSnapshot(
            window=window,
            capabilities=caps,
            devices=devices,
            pods=pods,
            replicasets=self._replicasets(window) if caps.replicaset_owner else {},
            jobs=self._jobs(window) if caps.job_owner else {},
            cpu=self._cpu(window, caps),
        )

    def _held(
        self, window: TimeWindow, caps: Capabilities, names: Sequence[str], skip: Container[DeviceKey] = ()
    ) -> dict[DeviceKey, dict[str, list[Piece]]]:
        """Per holder, by name (in ``names``' order), its series in the window with their
        timestamps and values in percent."""
        held: dict[DeviceKey, dict[str, list[Piece]]] = defaultdict(dict)
        for name in names:
            for s, t, v in self._in_window(name, window):
                key = self._key(s, caps)
                if key is None or key in skip:
                    continue
                scaled = v * caps.to_percent(name, s.label(dcgm.JOB) or "")
                held[key].setdefault(name, []).append((s, t, scaled))
        return held

    def _with_histograms(
        self, devices: dict[DeviceKey, DeviceAggregate], window: TimeWindow, caps: Capabilities
    ) -> dict[DeviceKey, DeviceAggregate]:
        increases: dict[DeviceKey, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        for s, _, v in self._in_window(dcgm.SAMPLE_HISTOGRAM_BUCKET, window):
            key, le = self._key(s, caps), s.label(dcgm.LE)
            if key is not None and le in caps.histogram_le:
                increases[key][le] += counter_increase(v)
        idle_le, busy_le, total_le = caps.histogram_le
        out = dict(devices)
        for key, inc in increases.items():
            if key in out:
                shares = histogram_shares(inc[idle_le], inc[busy_le], inc[total_le])
                out[key] = replace(out[key], histogram=shares)
        return out

    def _pods(self, window: TimeWindow, caps: Capabilities) -> dict[PodId, PodRecord]:
        """Every pod reported in the window, as last reported (``last_over_time`` over the window)."""
        ns_label, pod_label = caps.ksm_pod.namespace, caps.ksm_pod.pod

        def rows(name: str, value: str = "last") -> list[KsmRow]:
            out: list[KsmRow] = []
            for s, t, v in self._in_window(name, window):
                pid = (s.label(ns_label) or "", s.label(pod_label) or "")
                picked = {"last": v[-1], "max": v.max(), "seen": t[-1]}[value]
                out.append((pid, dict(s.labels), float(picked)))
            return out

        gpu_requests = [
            r for r in rows(dcgm.KUBE_POD_REQUESTS) if r[1].get("resource", "").startswith(_GPU_RESOURCE)
        ]
        requesting = {pid for pid, _, v in gpu_requests if v > 0}
        scheduled = [
            r for r in rows(dcgm.KUBE_POD_STATUS_SCHEDULED, "max") if r[1].get("condition") == "true"
        ]
        pending = [r for r in rows(dcgm.KUBE_POD_STATUS_PHASE) if r[1].get("phase") == "Pending"]
        held = self._held_at_end(window, caps)
        owners = [r for r in rows(dcgm.KUBE_POD_OWNER) if r[0] in requesting or r[0] in held]
        return pod_records(
            owners,
            rows(dcgm.KUBE_POD_START_TIME),
            gpu_requests,
            last_seen=_latest(
                self._last_running(window, caps) if caps.pod_phase else rows(dcgm.KUBE_POD_OWNER, "seen"),
                by_uid=True,
            ),
            scheduled=scheduled,
            pending=pending,
            phases_known=caps.pod_phase,
            groups=[r for r in rows(dcgm.KUBE_POD_LABELS) if any(r[1].get(n) for n in dcgm.POD_LABELS_READ)],
        )

    def _last_running(self, window: TimeWindow, caps: Capabilities) -> list[KsmRow]:
        """When each pod was last reported ``Running`` (a finished Job's pod stays, ``Succeeded``)."""
        out: list[KsmRow] = []
        for s, t, v in self._in_window(dcgm.KUBE_POD_STATUS_PHASE, window):
            running = t[v >= 1]
            if s.label("phase") == "Running" and running.size:
                pid = (s.label(caps.ksm_pod.namespace) or "", s.label(caps.ksm_pod.pod) or "")
                out.append((pid, dict(s.labels), float(running[-1])))
        return out

    def _held_at_end(self, window: TimeWindow, caps: Capabilities) -> set[PodId]:
        """Pods a GPU series names at the window's end (the Prometheus source's instant join)."""
        held = set()
        for metric in caps.util_metrics:
            for s, _ in self._at_end(metric, window.end):
                if pod := s.label(caps.gpu_pod.pod):
                    held.add((s.label(caps.gpu_pod.namespace) or "", pod))
        return held

    def _jobs(self, window: TimeWindow) -> dict[PodId, tuple[str, str]]:
        out: dict[PodId, tuple[str, str]] = {}
        for s, _, _ in self._in_window(dcgm.KUBE_JOB_OWNER, window):
            if s.label("owner_kind") in (None, "", "<none>"):
                continue
            job = (s.label("namespace") or "", s.label("job_name") or "")
            if s.label("owner_is_controller") == "true" or job not in out:
                out[job] = (s.label("owner_kind") or "", s.label("owner_name") or "")
        return out

    def _replicasets(self, window: TimeWindow) -> dict[PodId, tuple[str, str]]:
        out: dict[PodId, tuple[str, str]] = {}
        for s, _, _ in self._in_window(dcgm.KUBE_REPLICASET_OWNER, window):
            rs = (s.label("namespace") or "", s.label("replicaset") or "")
            if s.label("owner_is_controller") == "true" or rs not in out:
                out[rs] = (s.label("owner_kind") or "", s.label("owner_name") or "")
        return out

    def _cpu(self, window: TimeWindow, caps: Capabilities) -> dict[PodId, CpuUsage]:
        usage: dict[PodId, float] = defaultdict(float)
        limit: dict[PodId, float] = defaultdict(float)
        request: dict[PodId, float] = defaultdict(float)
        periods: dict[PodId, float] = defaultdict(float)
        throttled: dict[PodId, float] = defaultdict(float)

        def pid(s: Series) -> PodId | None:
            container = s.label("container")
            if not container or container == "POD":
                return None  # pod-level cgroup and pause container would double count
            return (s.label("namespace") or "", s.label("pod") or "")

        for s, t, v in self._in_window(dcgm.CPU_USAGE, window):
            if (p := pid(s)) is not None and (rate := counter_rate(t, v)) is not None:
                usage[p] += rate
        for s, _, v in self._in_window(dcgm.KUBE_POD_LIMITS, window):
            if s.label("resource") == "cpu":
                limit[(s.label(caps.ksm_pod.namespace) or "", s.label(caps.ksm_pod.pod) or "")] += float(
                    v.max()
                )
        for s, _, v in self._in_window(dcgm.KUBE_POD_REQUESTS, window):
            if s.label("resource") == "cpu":
                request[(s.label(caps.ksm_pod.namespace) or "", s.label(caps.ksm_pod.pod) or "")] += float(
                    v.max()
                )
        for s, _, v in self._in_window(dcgm.CPU_PERIODS, window):
            if (p := pid(s)) is not None:
                periods[p] += counter_increase(v)
        for s, _, v in self._in_window(dcgm.CPU_THROTTLED, window):
            if (p := pid(s)) is not None:
                throttled[p] += counter_increase(v)
        pods = set(usage) | set(limit) | set(periods) | set(request)
        return {
            p: CpuUsage(
                usage_cores=usage.get(p),
                limit_cores=limit.get(p),
                request_cores=request.get(p),
                throttled_ratio=throttled.get(p, 0.0) / periods[p] if periods.get(p) else None,
            )
            for p in pods
        }

    # --- closer looks ---------------------------------------------------------------------------

    def first_busy(
        self, snapshot: FleetSnapshot, wanted: Sequence[tuple[DeviceKey, TimeWindow]], idle_percent: float
    ) -> dict[tuple[DeviceKey, TimeWindow], float]:
        samples = self.device_samples(snapshot, sorted({k for k, _ in wanted}))
        out = {}
        for key, span in wanted:
            if (
                key in samples
                and (first := first_busy_from_samples(samples[key], span, idle_percent)) is not None
            ):
                out[(key, span)] = first
        return out

    def span_numbers(
        self, snapshot: FleetSnapshot, looks: Sequence[CloserLook], t: Thresholds
    ) -> dict[tuple[DeviceKey, TimeWindow], SpanNumbers]:
        keys = sorted({look.key for look in looks})
        buckets = sorted({look.key for look in looks if look.histogram})
        samples = self.device_samples(snapshot, keys, buckets)
        level = quantile_levels(t.starvation_min_share)[0]
        return {
            (look.key, look.span): span_numbers_from_samples(
                look,
                samples[look.key],
                snapshot.capabilities.histogram_le,
                t.starvation_idle_percent,
                t.starvation_busy_percent,
                level,
            )
            for look in looks
            if look.key in samples
        }

    def device_samples(
        self, snapshot: FleetSnapshot, keys: Sequence[DeviceKey], bucket_keys: Sequence[DeviceKey] = ()
    ) -> dict[DeviceKey, DeviceSamples]:
        caps, window = snapshot.capabilities, snapshot.window
        wanted = set(keys) | set(bucket_keys)
        util: dict[DeviceKey, tuple[np.ndarray, np.ndarray]] = {}
        for key in wanted:
            dev = snapshot.devices.get(key)
            if dev is None:
                continue
            by_name = self._held(window, caps, dev.info.metrics).get(key, {})
            if by_name:
                util[key] = _one_history(by_name, dev.interval_s)
        buckets: dict[DeviceKey, dict[str, tuple[np.ndarray, np.ndarray]]] = defaultdict(dict)
        if bucket_keys and caps.histogram:
            wanted_buckets = set(bucket_keys)
            for s, t, v in self._in_window(dcgm.SAMPLE_HISTOGRAM_BUCKET, window):
                holder, le = self._key(s, caps), s.label(dcgm.LE)
                if holder in wanted_buckets and le in caps.histogram_le:
                    buckets[holder][le] = (t, v)
        out = {}
        for key in wanted:
            t, v = util.get(key, (np.empty(0), np.empty(0)))
            order = np.argsort(t, kind="stable")
            out[key] = DeviceSamples(key, t[order], v[order], dict(buckets.get(key, {})))
        return out

    def _memory_mib(self, snapshot: FleetSnapshot, keys: Sequence[DeviceKey]) -> dict[DeviceKey, np.ndarray]:
        """Framebuffer held per holder over the window (MiB): the GPU's own, under either DCGM
        naming (a scrape served under both once), and on shared GPUs each pod's (our exporter's
        per-pod series, in bytes)."""
        wanted = set(keys)
        own: dict[DeviceKey, dict[str, list[Piece]]] = defaultdict(dict)
        pods: dict[DeviceKey, list[np.ndarray]] = defaultdict(list)
        for metric in (*vocabulary.MEMORY_USED, dcgm.POD_MEMORY_USED):
            to_mib = vocabulary.to_unit(metric) or 1.0
            for s, t, v in self._in_window(metric, snapshot.window):
                key = self._key(s, snapshot.capabilities)
                if key is None or key not in wanted:
                    continue
                if metric == dcgm.POD_MEMORY_USED:
                    pods[key].append(v * to_mib)
                else:
                    own[key].setdefault(metric, []).append((s, t, v * to_mib))
        out = {}
        for key in own.keys() | pods.keys():
            dev = snapshot.devices.get(key)
            held = [_one_history(own[key], dev.interval_s if dev else 0.0)[1]] if key in own else []
            out[key] = np.concatenate([*held, *pods.get(key, [])])
        return out

    def gpu_readings(
        self, snapshot: FleetSnapshot, keys: Sequence[DeviceKey]
    ) -> dict[DeviceKey, GpuReadings]:
        window, caps = snapshot.window, snapshot.capabilities
        wanted = [k for k in dict.fromkeys(keys) if k in snapshot.devices]
        uuids = {k.uuid for k in wanted}
        board: dict[str, dict[str, list[tuple[Sequence[float], Sequence[float]]]]] = defaultdict(
            lambda: defaultdict(list)
        )
        for name in (*vocabulary.POWER, *vocabulary.POWER_LIMIT, *vocabulary.CLOCK_EVENTS):
            for s, t, v in self._in_window(name, window):
                if (uuid := s.label(dcgm.UUID)) in uuids:
                    board[uuid][name].append((t.tolist(), v.tolist()))
        out = {}
        for key in wanted:
            held = self._held(window, caps, snapshot.devices[key].info.metrics).get(key, {})
            t, v = (
                _one_history(held, snapshot.devices[key].interval_s) if held else (np.empty(0), np.empty(0))
            )
            util = tuple(zip(t.tolist(), v.tolist(), strict=True))
            out[key] = readings_of(tuple(sorted(util)), board.get(key.uuid, {}))
        return out

    def waiting_counts(
        self, snapshot: FleetSnapshot, wanted: Sequence[tuple[DeviceKey, TimeWindow]], rule: WaitRule
    ) -> dict[tuple[DeviceKey, TimeWindow], WaitCounts]:
        readings = self.gpu_readings(snapshot, [key for key, _ in wanted])
        out = {}
        for key, span in wanted:
            if (r := readings.get(key)) is not None:
                counts = counted_waits(r, span.start.timestamp(), span.end.timestamp(), rule, key.uuid)
                if counts.samples:
                    out[(key, span)] = counts
        return out

    def memory_used(self, snapshot: FleetSnapshot, keys: Sequence[DeviceKey]) -> dict[DeviceKey, float]:
        return {k: float(v.mean()) for k, v in self._memory_mib(snapshot, keys).items()}

    def memory_peaks(
        self, snapshot: FleetSnapshot, keys: Sequence[DeviceKey], quantile: float
    ) -> dict[DeviceKey, MemoryPeak]:
        wanted = set(keys)
        capacity: dict[str, float] = {}  # by UUID: used + free at the last sample of each (MiB)
        last: dict[tuple[str, str], float] = {}
        uuids = {k.uuid for k in wanted}
        pairs = vocabulary.FREE_BESIDE.items()
        for metric in (name for pair in pairs for name in pair):
            to_mib = vocabulary.to_unit(metric) or 1.0
            for s, _, v in self._in_window(metric, snapshot.window):
                key = self._key(s, snapshot.capabilities)
                if key is not None and key.uuid in uuids:
                    last[(key.uuid, metric)] = float(v[-1]) * to_mib
        for uuid in uuids:
            for used, free in pairs:  # in either naming: the largest, as the Prometheus source reads it
                if (uuid, used) in last and (uuid, free) in last:
                    total = last[(uuid, used)] + last[(uuid, free)]
                    capacity[uuid] = max(capacity.get(uuid, total), total)
        return {
            k: MemoryPeak(float(np.quantile(v, quantile)), capacity.get(k.uuid))
            for k, v in self._memory_mib(snapshot, keys).items()
        }

    def instant_value(self, promql: str, at: datetime) -> float | None:
        """In-memory series cannot evaluate PromQL: the answer is always "no data"."""
        del promql, at
        return None


class SimulatedSource(InMemorySource):
    """The simulator's fleet, analyzed without a TSDB (``gpu-reaper demo``, ``--simulate``)."""

    def __init__(self, fleet: Fleet) -> None:
        super().__init__(fleet.series, f"simulated:{fleet.scenario.name}")
        self.fleet = fleet


def _latest(rows: list[KsmRow], by_uid: bool = False) -> list[KsmRow]:
    """One row per pod (per incarnation, ``by_uid``): the latest value (a pod has one owner series
    per owner reference)."""
    best: dict[tuple[PodId, str], KsmRow] = {}
    for row in rows:
        key = (row[0], row[1].get("uid", "") if by_uid else "")
        if key not in best or row[2] > best[key][2]:
            best[key] = row
    return list(best.values())


def _one_history(by_name: Mapping[str, Sequence[Piece]], interval_s: float) -> tuple[np.ndarray, np.ndarray]:
    """One holder's samples (timestamps, percent) under every name it was read under, in names'
    order: a later name's sample within half a scrape interval of an earlier name's is the same
    scrape served under both names while an upgrade rolled out, and counts once. Series of one name
    are taken whole, as each source reads them."""
    times: list[np.ndarray] = []
    values: list[np.ndarray] = []
    for pieces in by_name.values():
        t = np.concatenate([p[1] for p in pieces])
        v = np.concatenate([p[2] for p in pieces])
        if times:
            earlier = np.sort(np.concatenate(times))
            fresh = _far_from(t, earlier, max(interval_s / 2, 1e-3))
            t, v = t[fresh], v[fresh]
        times.append(t)
        values.append(v)
    return np.concatenate(times), np.concatenate(values)


def _far_from(t: np.ndarray, sorted_times: np.ndarray, tolerance: float) -> np.ndarray:
    """Which of ``t`` lie farther than ``tolerance`` from every one of ``sorted_times``."""
    at = np.searchsorted(sorted_times, t)
    before = np.abs(t - sorted_times[np.clip(at - 1, 0, sorted_times.size - 1)])
    after = np.abs(sorted_times[np.clip(at, 0, sorted_times.size - 1)] - t)
    return np.minimum(before, after) > tolerance


def _info(s: Series, metric: str, caps: Capabilities, also: tuple[str, ...] = ()) -> DeviceInfo:
    return DeviceInfo(
        node=caps.node_of(dict(s.labels)),
        also=also,
        metric=metric,
        job=s.label(dcgm.JOB) or "",
        index=s.label(dcgm.GPU_INDEX),
        model=s.label(dcgm.MODEL),
        mig_profile=s.label(dcgm.MIG_PROFILE),
    )
