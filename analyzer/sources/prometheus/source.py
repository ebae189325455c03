"""``MetricsSource`` over the Prometheus query API: the TSDB computes, the analyzer reads numbers.

One run costs a fixed number of queries whatever the fleet size, in rounds, each in a module of
its own with the queries it sends and the reading of their answers: ``discovery`` (what exists),
``snapshot`` (the fleet-wide aggregates, with ``kubernetes`` and ``union``), ``spans`` (the closer
looks over holders' own spans) and ``raw`` (plots, memory, instant values); ``batch`` sends a
round's queries side by side. This class holds what the rounds share and hands each call on."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from datetime import datetime

from analyzer.sources import dcgm, promql
from analyzer.sources.aggregates import (
    CloserLook,
    DeviceKey,
    DeviceSamples,
    FleetSnapshot,
    GpuReadings,
    MemoryPeak,
    SpanNumbers,
)
from analyzer.sources.dcgm import Capabilities
from analyzer.sources.prometheus import discovery, spans
from analyzer.sources.prometheus import snapshot as snapshot_round
from analyzer.sources.prometheus.batch import Batch
from analyzer.sources.prometheus.raw import MAX_POINTS_PER_SERIES, MAX_SAMPLES_PER_QUERY, RawReads
from analyzer.sources.prometheus.spans import Window
from analyzer.sources.prometheus_api import PrometheusClient, PrometheusConfig, VectorSample
from analyzer.sources.waits import WaitCounts, WaitRule
from common.model import TimeWindow
from common.thresholds import Thresholds


class PrometheusSource:
    """Analyzer data from Prometheus, Thanos, Mimir or VictoriaMetrics."""

    def __init__(
        self,
        client: PrometheusClient | PrometheusConfig,
        gpu_util_unit: str = "auto",
        max_points_per_series: int = MAX_POINTS_PER_SERIES,
        max_samples_per_query: int = MAX_SAMPLES_PER_QUERY,
        recording_rules: bool = True,
        cluster_label: str = dcgm.CLUSTER_LABEL,
        cluster: str | None = None,
    ) -> None:
        self.client = client if isinstance(client, PrometheusClient) else PrometheusClient(client)
        # Where one query view holds many clusters, the label telling them apart; a source made for
        # one of them (``for_cluster``) carries its value in every selector.
        self.cluster_label = promql.check_label_name(cluster_label)
        self.scope: tuple[promql.Matcher, ...] = (
            (promql.eq(cluster_label, cluster),) if cluster is not None else ()
        )
        if gpu_util_unit not in ("auto", "percent", "ratio"):
            raise ValueError(f"gpu_util_unit must be auto, percent or ratio, not {gpu_util_unit!r}")
        self.gpu_util_unit = gpu_util_unit
        # Read the rollups of alerts/gpu-analyzer.recording.yaml where they cover the window.
        self.recording_rules = recording_rules
        self._batch = Batch(self.client)
        self._raw = RawReads(self._batch, max_points_per_series, max_samples_per_query)
        # What ``clusters`` discovered and found for a window, for the snapshot of that window (and
        # a second ``clusters`` call: the reaper asks before the pipeline does) to reuse.
        self._found: tuple[tuple[TimeWindow, Thresholds], Capabilities, tuple[str, ...]] | None = None

    @property
    def description(self) -> str:
        return self.client.config.display_url

    @property
    def max_points_per_series(self) -> int:
        return self._raw.max_points_per_series

    @property
    def max_samples_per_query(self) -> int:
        return self._raw.max_samples_per_query

    @property
    def _fetched(self) -> dict[tuple[str, datetime], Future[list[VectorSample]]]:
        # Answers sent ahead and not read yet (a test checks none outlives a failed snapshot).
        return self._batch.fetched

    def clusters(self, window: TimeWindow, thresholds: Thresholds) -> list[str]:
        """The cluster label's values on the GPU utilization series in the window (none: one cluster,
        or series that do not say).

        Asked through discovery, whose label names say whether the GPU series carry the label at
        all: a fleet without it costs no request more, and its snapshot reuses this discovery."""
        if self._found is not None and self._found[0] == (window, thresholds):
            return list(self._found[2])
        caps, labels = self._discover(window, thresholds)
        found: list[str] = []
        if not self.scope and self.cluster_label in labels:
            found = discovery.cluster_values(self.client, self.cluster_label, window)
        self._found = ((window, thresholds), caps, tuple(found))
        return found

    def for_cluster(self, cluster: str) -> PrometheusSource:
        """This source restricted to one cluster's series (same client: one bound on requests)."""
        return PrometheusSource(
            self.client,
            self.gpu_util_unit,
            self.max_points_per_series,
            self.max_samples_per_query,
            self.recording_rules,
            cluster_label=self.cluster_label,
            cluster=cluster,
        )

    def discover(self, window: TimeWindow, t: Thresholds) -> Capabilities:
        """What the source holds over the window, decided once per run."""
        return self._discover(window, t)[0]

    def _discover(self, window: TimeWindow, t: Thresholds) -> tuple[Capabilities, set[str]]:
        return discovery.discover(self.client, self.scope, self.recording_rules, window, t)

    def snapshot(self, window: TimeWindow, thresholds: Thresholds) -> FleetSnapshot:
        try:
            found = self._found
            caps = (
                found[1]
                if found is not None and found[0] == (window, thresholds)
                else self.discover(window, thresholds)
            )
            return snapshot_round.snapshot(
                self._batch, caps, window, thresholds, self.gpu_util_unit, self.recording_rules
            )
        finally:
            self._batch.drop()

    def span_numbers(
        self, snapshot: FleetSnapshot, looks: Sequence[CloserLook], t: Thresholds
    ) -> dict[Window, SpanNumbers]:
        return spans.span_numbers(self.client, snapshot, looks, t)

    def first_busy(
        self, snapshot: FleetSnapshot, wanted: Sequence[Window], idle_percent: float
    ) -> dict[Window, float]:
        return spans.first_busy(self.client, self._batch, snapshot, wanted, idle_percent)

    def device_samples(
        self, snapshot: FleetSnapshot, keys: Sequence[DeviceKey], bucket_keys: Sequence[DeviceKey] = ()
    ) -> dict[DeviceKey, DeviceSamples]:
        return self._raw.device_samples(snapshot, keys, bucket_keys)

    def gpu_readings(
        self, snapshot: FleetSnapshot, keys: Sequence[DeviceKey]
    ) -> dict[DeviceKey, GpuReadings]:
        return self._raw.gpu_readings(snapshot, keys)

    def waiting_counts(
        self, snapshot: FleetSnapshot, wanted: Sequence[Window], rule: WaitRule
    ) -> dict[Window, WaitCounts]:
        return spans.waiting_counts(self.client, snapshot, wanted, rule)

    def memory_used(self, snapshot: FleetSnapshot, keys: Sequence[DeviceKey]) -> dict[DeviceKey, float]:
        return self._raw.memory_used(snapshot, keys)

    def memory_peaks(
        self, snapshot: FleetSnapshot, keys: Sequence[DeviceKey], quantile: float
    ) -> dict[DeviceKey, MemoryPeak]:
        return self._raw.memory_peaks(snapshot, keys, quantile)

    def instant_value(self, promql: str, at: datetime) -> float | None:
        return self._raw.instant_value(promql, at)
