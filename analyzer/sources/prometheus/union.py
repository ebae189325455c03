"""The snapshot's numbers of GPUs reported by several series, taken over their union.

A moved exporter, two scrape jobs or an HA pair written twice split one holder's samples over
several series: per-series counts, sums and quantiles would judge each part apart. So does an
exporter upgraded to DCGM 4.7's naming inside the window, across two metric names in two units.
For the few holders the series counts find split, and every holder read under both names of a
field, one query per 200 GPUs (fewer where the text would pass the servers' length limit) asks the
union's five numbers (``FleetQueries.device_quantile_union``, ``device_union_total``), each tagged
with its name (``span_queries.tagged``/``joined``). The maximum needs nothing: the union's is the
largest of its series'."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime, timedelta
from math import ceil

from analyzer.sources import dcgm, promql
from analyzer.sources.aggregates import DeviceKey
from analyzer.sources.dcgm import Capabilities
from analyzer.sources.fleet_queries import FleetQueries, Renamed
from analyzer.sources.prometheus import log
from analyzer.sources.prometheus.batch import Batch, added, keys_of
from analyzer.sources.prometheus_api import VectorSample
from analyzer.sources.span_queries import AGGREGATE, MAX_SUBQUERY_STEPS, joined, tagged

# GPUs one union query names (a UUID takes about 45 characters of the text).
UUIDS_PER_UNION_QUERY = 200

Counts = dict[DeviceKey, tuple[str, VectorSample]]
# Per holder, the names of its field it was read under, each with its samples (described by the row
# holding most of them).
Seen = dict[DeviceKey, dict[str, VectorSample]]


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
    renamed: Collection[DeviceKey] = (),
) -> frozenset[DeviceKey]:
    """Replace per-series counts, sums and quantiles by the union's for devices whose samples
    span several series (``series``: series per holder, by metric, maybe in several rows per
    holder): one after the other or side by side, see ``FleetQueries.device_union_total``.
    Holders read under several names (``renamed``) are left to ``renamed_numbers``."""
    merged: set[DeviceKey] = set()
    for metric in caps.util_metrics:
        split = _split(batch, caps, counts, series[metric], metric) - set(renamed)
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


def renamed_numbers(
    batch: Batch,
    q: FleetQueries,
    caps: Capabilities,
    counts: Counts,
    renamed: Seen,
    numbers: dict[str, dict[DeviceKey, float]],
    parts: Mapping[str, Mapping[str, Mapping[DeviceKey, float]]],
    intervals: Mapping[str, float],
    levels: tuple[float, float],
    at: datetime,
) -> frozenset[DeviceKey]:
    """The counts, sums and quantiles of holders read under several names of one field (their
    exporter renamed its series in the window) over the union of their names' samples, in the unit
    of their metric (``counts``), each name's values multiplied into it: one history, a scrape
    written under both names counted once. Their maximum is the largest of their names' (``parts``:
    per name, each holder's sum and maximum under it). ``caps`` carries the scrape jobs' units."""
    groups: dict[tuple[str, Renamed], set[DeviceKey]] = defaultdict(set)
    for key, names in renamed.items():
        metric, sample = counts[key]
        own = caps.to_percent(metric, sample.labels.get(dcgm.JOB, ""))
        others = tuple(
            (name, caps.to_percent(name, names[name].labels.get(dcgm.JOB, "")) / own)
            for name in caps.util_metrics
            if name in names and name != metric
        )
        groups[(metric, others)].add(key)
        tops = [
            parts[name]["max"][key] * factor
            for name, factor in ((metric, 1.0), *others)
            if key in parts.get(name, {}).get("max", {})
        ]
        if tops:
            numbers["max"][key] = max(tops)
    log.info(
        "%d GPU holders are reported under both DCGM namings (their exporter upgraded in the window): "
        "their numbers come from both names' samples merged",
        len(renamed),
    )
    asked = [
        (
            keys,
            _queries(
                q, first, sorted({k.uuid for k in keys}), _step(q, counts, keys, intervals), levels, rest
            ),
        )
        for (first, rest), keys in groups.items()
    ]
    batch.fetch([(text, AGGREGATE) for _, texts in asked for text in texts], at)
    for keys, texts in asked:
        for name, rows in batch.tagged_rows(texts, at).items():
            for found, s in zip(keys_of(rows, caps), rows, strict=True):
                if found is None or found not in keys:
                    continue
                if name == "count":
                    counts[found] = (counts[found][0], VectorSample(counts[found][1].labels, s.value))
                else:
                    numbers[name][found] = s.value
    return frozenset(renamed)


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
    q: FleetQueries,
    metric: str,
    uuids: Sequence[str],
    step: timedelta,
    levels: tuple[float, float],
    others: Renamed = (),
) -> list[str]:
    """The five numbers of a chunk of GPUs in one query, each tagged with its name (``others``:
    the other names of ``metric``'s field read with it, and their factors into its unit)."""

    def five(chunk: Sequence[str]) -> str:
        return joined(
            [
                *(
                    tagged(name, q.device_quantile_union(metric, level, chunk, step, others))
                    for name, level in (("q_low", levels[0]), ("q_high", levels[1]), ("median", 0.5))
                ),
                tagged("count", q.device_union_total("count_over_time", metric, chunk, step, others)),
                tagged("sum", q.device_union_total("sum_over_time", metric, chunk, step, others)),
            ]
        )

    # Halved where the text would pass the servers' length limit (each GPU is named five times,
    # ten with a second name).
    return [five(chunk) for chunk in promql.fitting(uuids, five, UUIDS_PER_UNION_QUERY)]
