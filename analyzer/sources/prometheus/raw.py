"""Reads beyond the aggregates: raw samples for the HTML report's plots, memory used and peaks
for right-sizing, and one instant value.

Raw samples are pulled only for the few devices plotted, in chunks of time and of GPUs that stay
under the server's per-series point limit and a per-query sample budget. Memory is asked 200 GPUs
a query, side by side. The text is ``FleetQueries``' (``device_raw``, ``bucket_raw``, ``memory``,
``memory_peak``, ``memory_capacity``)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from functools import partial
from math import ceil, isfinite
from typing import TYPE_CHECKING

from analyzer.sources import dcgm, promql, vocabulary
from analyzer.sources.aggregates import (
    DeviceAggregate,
    DeviceKey,
    DeviceSamples,
    FleetSnapshot,
    GpuReadings,
    MemoryPeak,
    merged_points,
    readings_of,
)
from analyzer.sources.fleet_queries import FleetQueries
from analyzer.sources.prometheus.batch import Batch, device_key
from analyzer.sources.prometheus_api import RangeSeries
from analyzer.sources.span_queries import MAX_SUBQUERY_STEPS

if TYPE_CHECKING:
    import numpy as np

# Prometheus refuses range queries over 11,000 points per series; stay under it for raw pulls too.
MAX_POINTS_PER_SERIES = 10_000
# Samples one raw pull may return (series × points): far below Prometheus' default 50 M query limit.
MAX_SAMPLES_PER_QUERY = 2_000_000
# GPUs one memory query names at most (a UUID takes about 45 characters of the text, and a query
# may name each twice: promql.fitting halves a run whose text is too long).
UUIDS_PER_MEMORY_QUERY = 200
# Holders, and the query asked of their GPUs (given their UUIDs).
Ask = tuple[Sequence[DeviceKey], Callable[[Sequence[str]], str]]


class RawReads:
    """Raw pulls bounded by points per series and samples per query."""

    def __init__(
        self,
        batch: Batch,
        max_points_per_series: int = MAX_POINTS_PER_SERIES,
        max_samples_per_query: int = MAX_SAMPLES_PER_QUERY,
    ) -> None:
        self.batch = batch
        self.client = batch.client
        self.max_points_per_series = max_points_per_series
        self.max_samples_per_query = max_samples_per_query

    def device_samples(
        self, snapshot: FleetSnapshot, keys: Sequence[DeviceKey], bucket_keys: Sequence[DeviceKey] = ()
    ) -> dict[DeviceKey, DeviceSamples]:
        """Raw utilization samples (percent) of ``keys``, and the histogram's buckets of ``bucket_keys``."""
        caps = snapshot.capabilities
        q = FleetQueries(caps, snapshot.window.duration)
        wanted = {k: snapshot.devices[k] for k in set(keys) | set(bucket_keys) if k in snapshot.devices}
        util: dict[DeviceKey, list[tuple[RangeSeries, float]]] = defaultdict(list)
        by_metric: dict[str, list[DeviceAggregate]] = defaultdict(list)
        for dev in wanted.values():
            # Every name it was read under (its exporter renamed them in the window), each in its
            # own unit: ``_merge`` keeps a scrape served under both once.
            for metric in dev.info.metrics:
                by_metric[metric].append(dev)
        for metric, devs in by_metric.items():
            for series in self._pull(snapshot, devs, partial(q.device_raw, metric)):
                key = device_key(series.labels, caps)
                if key in wanted:
                    scale = caps.to_percent(metric, series.labels.get(dcgm.JOB, ""))
                    util[key].append((series, scale))
        buckets: dict[DeviceKey, dict[str, list[tuple[RangeSeries, float]]]] = defaultdict(
            lambda: defaultdict(list)
        )
        bucket_devs = [snapshot.devices[k] for k in bucket_keys if k in snapshot.devices]
        if bucket_devs and caps.histogram:
            for series in self._pull(snapshot, bucket_devs, q.bucket_raw, per_series=len(caps.histogram_le)):
                key = device_key(series.labels, caps)
                le = series.labels.get(dcgm.LE)
                if key in wanted and le is not None:
                    buckets[key][le].append((series, 1.0))
        return {
            key: DeviceSamples(
                key,
                *_merge(util.get(key, [])),
                {le: _merge(parts) for le, parts in buckets.get(key, {}).items()},
            )
            for key in wanted
        }

    def _pull(
        self,
        snapshot: FleetSnapshot,
        devs: Sequence[DeviceAggregate],
        build: Callable[[Sequence[str], timedelta], str],
        per_series: int = 1,
    ) -> Iterator[RangeSeries]:
        """Raw series of ``devs`` over the window, in chunks of time and of devices."""
        window = snapshot.window
        interval = min((d.interval_s for d in devs if d.interval_s > 0), default=15.0)
        points = window.duration.total_seconds() / interval
        time_chunks = max(1, ceil(points / self.max_points_per_series))
        chunk = window.duration / time_chunks
        points_per_chunk = points / time_chunks
        # Several holders of one GPU share a UUID: count series generously per device.
        per_query = max(1, int(self.max_samples_per_query // (points_per_chunk * per_series * 2)))
        uuids = sorted({d.key.uuid for d in devs})
        for batch in promql.fitting(uuids, lambda run: build(run, chunk), per_query):
            text = build(batch, chunk)  # the same range for every time chunk: only its end moves
            for c in range(time_chunks):
                yield from self.client.matrix(text, window.start + chunk * (c + 1))

    def gpu_readings(
        self, snapshot: FleetSnapshot, keys: Sequence[DeviceKey]
    ) -> dict[DeviceKey, GpuReadings]:
        """Raw utilization of each holder, and raw power, limit and clock-event reasons of its GPU,
        read by name in both namings (not discovered: a GPU serving none reads empty)."""
        caps = snapshot.capabilities
        q = FleetQueries(caps, snapshot.window.duration)
        devs = [snapshot.devices[k] for k in dict.fromkeys(keys) if k in snapshot.devices]
        if not devs:
            return {}
        util: dict[DeviceKey, list[tuple[list[float], list[float]]]] = defaultdict(list)
        for metric in dict.fromkeys(m for d in devs for m in d.info.metrics):
            mine = [d for d in devs if metric in d.info.metrics]
            for series in self._pull(snapshot, mine, partial(q.device_raw, metric)):
                key = device_key(series.labels, caps)
                if key is not None and key in snapshot.devices:
                    factor = caps.to_percent(metric, series.labels.get(dcgm.JOB, ""))
                    util[key].append((series.timestamps, [v * factor for v in series.values]))
        names = (*vocabulary.POWER, *vocabulary.POWER_LIMIT, *vocabulary.CLOCK_EVENTS)

        def board(uuids: Sequence[str], window: timedelta) -> str:
            matchers = [*caps.scope, promql.one_of("__name__", names), promql.one_of(dcgm.UUID, uuids)]
            return promql.ranged(promql.selector("", matchers), window)

        gpu: dict[str, dict[str, list[tuple[list[float], list[float]]]]] = defaultdict(
            lambda: defaultdict(list)
        )
        for series in self._pull(snapshot, devs, board, per_series=3):
            name = series.labels.get("__name__", "")
            uuid = series.labels.get(dcgm.UUID, "")
            if name in vocabulary.BY_NAME:
                gpu[uuid][name].append((series.timestamps, series.values))
        return {d.key: _readings(util.get(d.key, []), gpu.get(d.key.uuid, {})) for d in devs}

    def memory_used(self, snapshot: FleetSnapshot, keys: Sequence[DeviceKey]) -> dict[DeviceKey, float]:
        """Mean framebuffer memory used (MiB) over the window, for devices that report it."""
        if not keys or not snapshot.capabilities.memory:
            return {}
        q = FleetQueries(snapshot.capabilities, snapshot.window.duration)
        plain, renamed, step = _by_naming(snapshot, keys)
        asks: list[Ask] = [(plain, q.memory)]
        if renamed:
            asks.append((renamed, lambda uuids: q.memory(uuids, step)))
        return dict(pair for found in self._per_holder(snapshot, asks) for pair in found)

    def memory_peaks(
        self, snapshot: FleetSnapshot, keys: Sequence[DeviceKey], quantile: float
    ) -> dict[DeviceKey, MemoryPeak]:
        """The ``quantile`` of memory used over the window and the GPU's memory (right-sizing)."""
        if not keys or not snapshot.capabilities.memory:
            return {}
        q = FleetQueries(snapshot.capabilities, snapshot.window.duration)
        plain, renamed, step = _by_naming(snapshot, keys)
        asks: list[Ask] = [(plain, lambda uuids: q.memory_peak(uuids, quantile)), (keys, q.memory_capacity)]
        if renamed:
            asks.append((renamed, lambda uuids: q.memory_peak(uuids, quantile, step)))
        peaks, totals, *again = self._per_holder(snapshot, asks)
        capacity: dict[str, float] = {}  # by UUID: every holder of a GPU shares its memory
        for key, value in totals:
            capacity[key.uuid] = max(capacity.get(key.uuid, 0.0), value)
        found = [*peaks, *(pair for rows in again for pair in rows)]
        return {key: MemoryPeak(value, capacity.get(key.uuid)) for key, value in found}

    def _per_holder(
        self,
        snapshot: FleetSnapshot,
        asks: Sequence[Ask],
    ) -> list[list[tuple[DeviceKey, float]]]:
        """Each query over its holders' GPUs (a few hundred UUIDs a query, fewer where the text
        would be too long), all side by side through the bounded pool: per query, its finite rows
        of those holders, in answer order."""
        caps = snapshot.capabilities
        at = snapshot.window.end
        asked = [
            (which, query(run))
            for which, (keys, query) in enumerate(asks)
            for run in promql.fitting(sorted({k.uuid for k in keys}), query, UUIDS_PER_MEMORY_QUERY)
        ]
        answers = self.client.vectors([(text, at) for _, text in asked])
        wanted = [set(keys) for keys, _ in asks]
        out: list[list[tuple[DeviceKey, float]]] = [[] for _ in asks]
        for (which, _), answer in zip(asked, answers, strict=True):
            for s in answer:
                key = device_key(s.labels, caps)
                if key is not None and key in wanted[which] and isfinite(s.value):
                    out[which].append((key, s.value))
        return out

    def instant_value(self, promql: str, at: datetime) -> float | None:
        """Sum of an instant query's result; None when it returned no series (no data is not zero)."""
        samples = self.batch.vector(promql, at)
        if not samples:
            return None
        return float(sum(s.value for s in samples))


def _by_naming(
    snapshot: FleetSnapshot, keys: Sequence[DeviceKey]
) -> tuple[list[DeviceKey], list[DeviceKey], timedelta]:
    """``keys`` read under one name and those read under both DCGM namings (their exporter renamed
    its series in the window), and the step their samples are merged at: the shortest interval of
    theirs, coarser where the window would take too many steps."""
    renamed = [k for k in keys if (d := snapshot.devices.get(k)) is not None and d.info.also]
    plain = [k for k in keys if k not in set(renamed)]
    interval = min(
        (snapshot.devices[k].interval_s for k in renamed if snapshot.devices[k].interval_s > 0), default=15.0
    )
    window = snapshot.window.duration.total_seconds()
    return plain, renamed, timedelta(seconds=interval * max(1, ceil(window / interval / MAX_SUBQUERY_STEPS)))


def _merge(parts: Sequence[tuple[RangeSeries, float]]) -> tuple[np.ndarray, np.ndarray]:
    """One time-ordered series of arrays from pieces, each piece's values times its scale (time
    chunks overlap by one sample at their edges)."""
    import numpy as np  # here, not at the top: only raw pulls (the plots) need arrays

    if not parts:
        return np.empty(0), np.empty(0)
    t = np.concatenate([np.asarray(p.timestamps, dtype=float) for p, _ in parts])
    v = np.concatenate([np.asarray(p.values, dtype=float) * scale for p, scale in parts])
    t, first = np.unique(t, return_index=True)
    return t, v[first]


def _readings(
    util: Sequence[tuple[Sequence[float], Sequence[float]]],
    by_name: Mapping[str, Sequence[tuple[Sequence[float], Sequence[float]]]],
) -> GpuReadings:
    """One holder's readings from its raw series (utilization already in percent)."""
    return readings_of(merged_points(util), by_name)
