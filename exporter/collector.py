"""The prometheus_client Collector that serves the newest snapshot.

``collect()`` builds fresh metric families on every scrape from the immutable snapshot; the samples of a
snapshot are rendered once and reused by later scrapes of the same snapshot, since nothing in them can
change. ``describe()`` returns nothing, so registering the collector never runs ``collect()`` (and
nothing here ever touches NVML).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
    UnknownMetricFamily,
)
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from exporter import fields as f
from exporter.snapshot import HistogramSeries, Snapshot

_Rendered = list[tuple[f.MetricSpec, list[Sample]]]
_LE = (*(floatToGoString(bound) for bound in f.SAMPLE_BUCKETS), "+Inf")


def _family(spec: f.MetricSpec) -> Metric:
    if spec.type == "gauge":
        return GaugeMetricFamily(spec.name, spec.help)
    if spec.type == "counter":
        return CounterMetricFamily(spec.name, spec.help)
    if spec.type == "histogram":
        return HistogramMetricFamily(spec.name, spec.help)
    return UnknownMetricFamily(spec.name, spec.help)


def _sample_name(spec: f.MetricSpec) -> str:
    # CounterMetricFamily drops a trailing "_total" from the family name; the samples keep it.
    return spec.name if spec.type != "counter" or spec.name.endswith("_total") else spec.name + "_total"


def _histogram_samples(name: str, histograms: Iterable[HistogramSeries]) -> list[Sample]:
    samples = []
    for histogram in histograms:
        for le, count in zip(_LE, histogram.cumulative, strict=True):
            samples.append(Sample(f"{name}_bucket", {**histogram.labels, "le": le}, float(count)))
        samples.append(Sample(f"{name}_count", histogram.labels, float(histogram.cumulative[-1])))
        samples.append(Sample(f"{name}_sum", histogram.labels, histogram.total))
    return samples


def render(snapshot: Snapshot) -> _Rendered:
    """Samples per family, in catalogue order; families without samples are left out."""
    rendered: _Rendered = []
    for name, spec in f.SPECS.items():
        if spec.type == "histogram":
            if snapshot.histograms:
                rendered.append((spec, _histogram_samples(name, snapshot.histograms)))
            continue
        series = snapshot.series.get(name)
        if series:
            sample_name = _sample_name(spec)
            rendered.append((spec, [Sample(sample_name, s.labels, s.value) for s in series]))
    return rendered


class SnapshotCollector(Collector):
    """Serves ``latest()``; before the first collection it serves nothing but an empty exposition."""

    def __init__(self, latest: Callable[[], Snapshot | None]) -> None:
        self._latest = latest
        self._memo: tuple[Snapshot, _Rendered] | None = None

    def describe(self) -> Iterable[Any]:
        return []

    def collect(self) -> Iterable[Metric]:
        snapshot = self._latest()
        if snapshot is None:
            return []
        memo = self._memo
        if memo is None or memo[0] is not snapshot:
            memo = (snapshot, render(snapshot))
            self._memo = memo  # a racing scrape may render the same snapshot too; both are correct
        families = []
        for spec, samples in memo[1]:
            family = _family(spec)
            family.samples = list(samples)
            families.append(family)
        return families
