"""The snapshot's numbers of GPUs reported by several series, taken over their union.

A moved exporter, two scrape jobs or an HA pair written twice split one holder's samples over
several series: per-series counts, sums and quantiles would judge each part apart. For the few
holders the series counts find split, one query per 200 GPUs asks the union's five numbers
(``FleetQueries.device_quantile_union``, ``device_union_total``), each tagged with its name
(``span_queries.tagged``/``joined``). The maximum needs nothing: the union's is the largest of its
series'."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from math import ceil

from analyzer.sources import dcgm
from analyzer.sources.aggregates import DeviceKey
from analyzer.sources.dcgm import Capabilities
from analyzer.sources.fleet_queries import FleetQueries
from analyzer.sources.prometheus import log
from analyzer.sources.prometheus.batch import Batch, added, keys_of
from analyzer.sources.prometheus_api import VectorSample
from analyzer.sources.span_queries import AGGREGATE, MAX_SUBQUERY_STEPS, joined, tagged

# GPUs one union query names (a UUID takes about 45 characters of the text).
UUIDS_PER_UNION_QUERY = 200

Counts = dict[DeviceKey, tuple[str, VectorSample]]


def union_numbers(
    batch: Batch,
    q: FleetQueries,
    caps: Capabilities,
    counts: Counts,
    series: Mapping[str, Sequence[VectorSample]],
    numbers: dict[str, dict[DeviceKey, float]],
    intervals: Mapping[str, float],
    levels: tuple[float, float],
    at: datetime,
) -> frozenset[DeviceKey]:
    """Replace per-series counts, sums and quantiles by the union's for devices whose samples
    span several series (``series``: series per holder, by metric, maybe in several rows per
    holder): one after the other or side by side, see ``FleetQueries.device_union_total``."""
    merged: set[DeviceKey] = set()
    for metric in caps.util_metrics:
        split = _split(batch, caps, counts, series[metric], metric)
        if not split:
            continue
        step = _step(q, counts, split, intervals)
        log.info(
            "%d GPU holders of %s are reported by more than one series (a moved exporter, two scrape "
            "jobs, or an HA pair written twice): their numbers come from the series merged every %gs",
            len(split),
            metric,
            step.total_seconds(),
        )
        texts = _queries(q, metric, sorted({k.uuid for k in split}), step, levels)
        batch.fetch([(text, AGGREGATE) for text in texts], at)
        for name, rows in batch.tagged_rows(texts, at).items():
            for key, s in zip(keys_of(rows, caps), rows, strict=True):
                if key is None or key not in split:
                    continue
                if name == "count":
                    counts[key] = (metric, VectorSample(counts[key][1].labels, s.value))
                else:
                    numbers[name][key] = s.value
        merged |= split
    return frozenset(merged)


def _split(
    batch: Batch, caps: Capabilities, counts: Counts, series: Sequence[VectorSample], metric: str
) -> set[DeviceKey]:
    """The holders of ``metric`` reported by more than one series."""
    # A row counts the series of one label set; rows of one holder are added up only where each
    # has several, as PromQL's filtered count (`> 1`) leaves them.
    rows = [s for s in series if s.value > 1]
    per_key = added(keys_of(rows, caps), rows, counts)
    return {key for key, n in per_key.items() if n > 1 and counts[key][0] == metric}


def _step(
    q: FleetQueries, counts: Counts, split: set[DeviceKey], intervals: Mapping[str, float]
) -> timedelta:
    """How often the union is sampled: every scrape, or every few where the window is long."""
    jobs = {counts[k][1].labels.get(dcgm.JOB, "") for k in split}
    step_s = min((intervals[j] for j in jobs if j in intervals), default=15.0)
    # No subquery may take more than MAX_SUBQUERY_STEPS steps (the quantiles of these few devices
    # are then estimates; counts and sums stay whole, each step taking every sample of its range).
    return timedelta(seconds=step_s * max(1, ceil(q.window.total_seconds() / step_s / MAX_SUBQUERY_STEPS)))


def _queries(
    q: FleetQueries, metric: str, uuids: Sequence[str], step: timedelta, levels: tuple[float, float]
) -> list[str]:
    """The five numbers of a chunk of GPUs in one query, each tagged with its name."""
    return [
        joined(
            [
                *(
                    tagged(name, q.device_quantile_union(metric, level, chunk, step))
                    for name, level in (("q_low", levels[0]), ("q_high", levels[1]), ("median", 0.5))
                ),
                tagged("count", q.device_union_total("count_over_time", metric, chunk, step)),
                tagged("sum", q.device_union_total("sum_over_time", metric, chunk, step)),
            ]
        )
        for chunk in _chunks(uuids, UUIDS_PER_UNION_QUERY)
    ]


def _chunks(items: Sequence[str], size: int) -> Iterator[Sequence[str]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]
