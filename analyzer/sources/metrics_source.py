"""The one interface the pipeline reads metrics through.

Two implementations: ``analyzer.sources.prometheus.source.PrometheusSource`` (PromQL over HTTP; the TSDB
does the arithmetic) and ``simulation.in_memory_source.SimulatedSource`` (numpy over an in-memory
simulated fleet). Both return the same aggregates for the same data, so the same findings.
Every method raises ``common.errors.DataUnavailableError`` subclasses when the data cannot be trusted.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from analyzer.sources.aggregates import (
    CloserLook,
    DeviceKey,
    DeviceSamples,
    FleetSnapshot,
    GpuReadings,
    MemoryPeak,
    SpanNumbers,
)
from analyzer.sources.waits import WaitCounts, WaitRule
from common.model import TimeWindow
from common.thresholds import Thresholds


class MetricsSource(Protocol):
    # The label telling clusters apart where the source holds several (see ``clusters``).
    cluster_label: str

    @property
    def description(self) -> str:
        """Where the data came from, for the report (a URL or a scenario name)."""
        ...

    def clusters(self, window: TimeWindow, thresholds: Thresholds) -> list[str]:
        """The clusters the source holds GPU series of in ``window``, by the values of its cluster
        label; empty where no series carries one (one cluster)."""
        ...

    def for_cluster(self, cluster: str) -> MetricsSource:
        """The source restricted to one cluster's series (every query carries its label's value)."""
        ...

    def snapshot(self, window: TimeWindow, thresholds: Thresholds) -> FleetSnapshot:
        """Discover what the source holds, then every per-device and per-pod aggregate over ``window``."""
        ...

    def first_busy(
        self, snapshot: FleetSnapshot, wanted: Sequence[tuple[DeviceKey, TimeWindow]], idle_percent: float
    ) -> dict[tuple[DeviceKey, TimeWindow], float]:
        """Per holder and span, the time of its first sample above ``idle_percent`` (absent: none)."""
        ...

    def span_numbers(
        self, snapshot: FleetSnapshot, looks: Sequence[CloserLook], t: Thresholds
    ) -> dict[tuple[DeviceKey, TimeWindow], SpanNumbers]:
        """Per holder and span, the aggregates each look asks for, over that span alone."""
        ...

    def device_samples(
        self, snapshot: FleetSnapshot, keys: Sequence[DeviceKey], bucket_keys: Sequence[DeviceKey] = ()
    ) -> dict[DeviceKey, DeviceSamples]:
        """Raw utilization samples (percent) over the snapshot's window for a few devices (plots).

        ``bucket_keys`` also get the raw histogram counters of the stalled / busy / +Inf buckets.
        """
        ...

    def memory_used(self, snapshot: FleetSnapshot, keys: Sequence[DeviceKey]) -> dict[DeviceKey, float]:
        """Mean framebuffer memory used (MiB) over the window, for devices that report it."""
        ...

    def memory_peaks(
        self, snapshot: FleetSnapshot, keys: Sequence[DeviceKey], quantile: float
    ) -> dict[DeviceKey, MemoryPeak]:
        """The ``quantile`` of framebuffer memory used (MiB) over the window and the GPU's memory,
        for devices that report it (right-sizing)."""
        ...

    def gpu_readings(
        self, snapshot: FleetSnapshot, keys: Sequence[DeviceKey]
    ) -> dict[DeviceKey, GpuReadings]:
        """Raw utilization of each holder and raw power, power limit and clock-event reasons of its
        GPU over the window, under either DCGM naming (a GPU that serves none of them has empty ones)."""
        ...

    def waiting_counts(
        self, snapshot: FleetSnapshot, wanted: Sequence[tuple[DeviceKey, TimeWindow]], rule: WaitRule
    ) -> dict[tuple[DeviceKey, TimeWindow], WaitCounts]:
        """Per holder and span (``(start, end]``), its utilization samples and those that wait under
        ``rule`` (busy at near-idle power, no cap named): the stalled-job rule's first look,
        computed where the samples are. A holder with no sample in its span is left out."""
        ...

    def instant_value(self, promql: str, at: datetime) -> float | None:
        """Sum of an instant query's result; None when it returned no series (no data is not zero)."""
        ...
