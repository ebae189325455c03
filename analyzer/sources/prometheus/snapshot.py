"""The snapshot round: every per-device and per-pod aggregate over the window, fleet-wide.

A fixed number of queries whatever the fleet size, side by side: per utilization name found (either
DCGM naming) the samples per holder (with the device's labels), their sum, maximum and three
quantiles (one sort for all of them under MetricsQL, a part of the fleet each) and the series per
holder; the sample histogram's increase; the Kubernetes side (``kubernetes``). Then one raw series
per scrape job measures its interval, holders split over several series are asked again over their
union, the unit of the legacy ``DCGM_FI_DEV_GPU_UTIL`` follows from the maxima and sums, and holders
read under both names of a field (their exporter upgraded in the window) are asked over their
names' union (``union``). The text is ``FleetQueries``' (or ``RolledUpQueries``' where recording
rules cover the window)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from math import isfinite

from analyzer.sources import dcgm, promql, vocabulary
from analyzer.sources.aggregates import (
    DeviceAggregate,
    DeviceInfo,
    DeviceKey,
    FleetSnapshot,
    UtilStats,
    histogram_shares,
    quantile_levels,
    with_sharers,
)
from analyzer.sources.dcgm import Capabilities
from analyzer.sources.fleet_queries import SERIES, SUM, FleetQueries, fleet_parts
from analyzer.sources.prometheus import kubernetes, log
from analyzer.sources.prometheus.batch import (
    Batch,
    Query,
    added,
    device_key,
    keys_of,
    quantile_names,
    value_of,
)
from analyzer.sources.prometheus.discovery import rollup_covers
from analyzer.sources.prometheus.union import Counts, Seen, renamed_numbers, union_numbers
from analyzer.sources.prometheus_api import PrometheusClient, VectorSample
from analyzer.sources.rollups import RolledUpQueries
from analyzer.sources.source_errors import NoDataError
from common.model import TimeWindow
from common.thresholds import Thresholds

# How much of one device's series measures its job's scrape interval (the whole window if that fails).
INTERVAL_PROBE = timedelta(hours=1)

Numbers = dict[str, dict[DeviceKey, float]]


def snapshot(
    batch: Batch,
    caps: Capabilities,
    window: TimeWindow,
    t: Thresholds,
    gpu_util_unit: str,
    recording_rules: bool,
) -> FleetSnapshot:
    """The fleet's aggregates over ``window`` (``caps`` from discovery); the caller drops what
    ``batch`` still holds once it returns or raises."""
    covers = rollup_covers(batch, caps, window) if recording_rules else {}
    caps = replace(caps, rollups=tuple(covers))
    parts = fleet_parts(caps.fleet_series)
    q: FleetQueries = (
        RolledUpQueries(caps, window.duration, parts=parts, covers=covers)
        if covers
        else FleetQueries(caps, window.duration, parts=parts)
    )
    levels = quantile_levels(t.starvation_min_share)
    at = window.end

    batch.drop()
    batch.fetch(_independent(caps, q, levels), at)
    counts, seen = _counts(batch, caps, q, at)
    renamed = {key: names for key, names in seen.items() if len(names) > 1}
    gpu_requests: list[VectorSample] = []
    if caps.kube_state_metrics:
        gpu_requests = batch.vector(q.pod_gpu_requests(), at)
        if kubernetes.unrequested(counts, gpu_requests):
            # Some pod holds a GPU kube-state-metrics reports no request for: the Kubernetes
            # side again, with every pod holding a GPU at the end (see FleetQueries.gpu_pods).
            q = replace(q, held=True)
            batch.fetch(kubernetes.queries(caps, q), at)
    intervals = _intervals(batch.client, q, counts, t, at)
    numbers, series, by_name = _numbers(batch, caps, q, counts, renamed, levels, at)
    merged = union_numbers(batch, q, caps, counts, series, numbers, intervals, levels, at, renamed)
    dev_to_percent = _dev_to_percent(gpu_util_unit, counts, numbers, renamed, by_name)
    caps = replace(caps, interval_s=intervals, dev_to_percent=dev_to_percent)
    if renamed:
        merged |= renamed_numbers(batch, q, caps, counts, renamed, numbers, by_name, intervals, levels, at)
    devices = with_sharers(
        _devices(caps, counts, renamed, numbers, intervals, levels[0], window), dcgm.POD_SM_UTIL
    )
    if caps.histogram:
        devices = _with_histograms(batch, devices, q, caps, at)
    return FleetSnapshot(
        window=window,
        capabilities=caps,
        devices=devices,
        pods=kubernetes.pods(batch, q, caps, gpu_requests, at) if caps.kube_state_metrics else {},
        replicasets=kubernetes.replicasets(batch, q, at) if caps.replicaset_owner else {},
        jobs=kubernetes.jobs(batch, q, at) if caps.job_owner else {},
        cpu=kubernetes.cpu(batch, q, caps, at),
        merged=merged,
    )


def _independent(caps: Capabilities, q: FleetQueries, levels: tuple[float, float]) -> list[Query]:
    """Every snapshot query that depends on nothing but discovery, in the order they go out side
    by side: those read first (samples per holder) first, the quantiles' sorts last. A tagged
    one, ``(query, label)``, is read by that label's values (see ``Batch.fetch``)."""
    first: list[Query] = []
    out: list[Query] = []
    last: list[Query] = []
    for metric in caps.util_metrics:
        first.append(q.device_count(metric))
        both = _sum_and_series_queries(q, metric)
        if both:
            out += [(query, promql.ROLLUP) for query in both]
        else:
            out += [q.device_sum(metric), q.device_series_count(metric)]
        sorts, named = _ranks(q, metric, *levels)
        if sorts:
            last += [(query, promql.PHI) for query in sorts]
        else:
            out += [q.device_quantile(metric, level) for level in named.values()]
        if "max" not in named:
            out.append(q.device_max(metric))
    if caps.histogram:
        out.append(q.histogram_increase())
    out += [q.pod_gpu_requests()] if caps.kube_state_metrics else []
    return [*first, *out, *kubernetes.queries(caps, q), *last]


def _counts(batch: Batch, caps: Capabilities, q: FleetQueries, at: datetime) -> tuple[Counts, Seen]:
    """Per holder, its metric and its samples, described by the row holding most of them; and the
    names of its field it was seen under, with their samples each.

    A holder reads the first field in preference order it has samples of, under every name of
    that field: an exporter renamed its series in the window (DCGM 4.7's naming), and one GPU's
    history is in both. Its metric is the name holding most of its samples."""
    seen: Seen = {}
    field: dict[DeviceKey, str] = {}
    for metric in caps.util_metrics:
        answer = batch.vector(q.device_count(metric), at)
        for key, s in zip(keys_of(answer, caps), answer, strict=True):
            if key is None or s.value <= 0:
                continue
            if field.setdefault(key, vocabulary.field_of(metric)) != vocabulary.field_of(metric):
                continue  # the first field in preference order wins
            names = seen.setdefault(key, {})
            had = names.get(metric)
            # Series of one holder told apart by a descriptive label (a new ``job``): its samples
            # are all of theirs, as its sum is; it is described as the row holding most of them
            # (its job's interval is measured on that job's series).
            names[metric] = (
                s
                if had is None
                else VectorSample(s.labels if s.value > had.value else had.labels, had.value + s.value)
            )
    if not seen:
        raise NoDataError(
            f"{batch.client.config.display_url}: GPU series exist but hold no samples in the window"
        )
    counts: Counts = {}
    for key, names in seen.items():
        metric = max(names, key=lambda name: names[name].value)  # the first of equals
        total = sum(s.value for s in names.values())
        counts[key] = (
            metric,
            names[metric] if len(names) == 1 else VectorSample(names[metric].labels, total),
        )
    return counts, seen


def _numbers(
    batch: Batch,
    caps: Capabilities,
    q: FleetQueries,
    counts: Counts,
    renamed: Seen,
    levels: tuple[float, float],
    at: datetime,
) -> tuple[Numbers, dict[str, list[VectorSample]], dict[str, Numbers]]:
    """Per statistic, each holder's value of its own metric; per metric, the series per holder;
    and per name, the sum and maximum of the holders read under several names (``renamed``)."""
    numbers: Numbers = defaultdict(dict)
    parts: dict[str, Numbers] = defaultdict(lambda: defaultdict(dict))
    # Per metric, where one query holds both: sum and series per holder, by rollup.
    both = {metric: _sum_and_series(batch, q, metric, at) for metric in caps.util_metrics}
    for metric in caps.util_metrics:
        mine = {key for key, (m, _) in counts.items() if m == metric and key not in renamed}
        part = {key for key, names in renamed.items() if metric in names}
        if not mine and not part:
            continue
        rolled = both[metric]
        summed = rolled.get(SUM, []) if rolled is not None else batch.vector(q.device_sum(metric), at)
        keys = keys_of(summed, caps)
        numbers["sum"].update(added(keys, summed, mine))
        if part:
            parts[metric]["sum"] = added(keys, summed, part)
        for name, answer in _ranked(batch, q, metric, levels, at):
            pairs = list(zip(keys_of(answer, caps), map(value_of, answer), strict=True))
            numbers[name].update((key, value) for key, value in pairs if key in mine)
            if name == "max" and part:
                parts[metric]["max"] = {key: value for key, value in pairs if key in part}
    series = {
        metric: rolled.get(SERIES, [])
        if rolled is not None
        else batch.vector(q.device_series_count(metric), at)
        for metric, rolled in both.items()
    }
    return numbers, series, parts


def _ranked(
    batch: Batch, q: FleetQueries, metric: str, levels: tuple[float, float], at: datetime
) -> list[tuple[str, list[VectorSample]]]:
    """The answers of the quantiles and the maximum, by statistic."""
    sorts, named = _ranks(q, metric, *levels)
    answers: list[tuple[str, list[VectorSample]]] = []
    if sorts:
        by_level = _by_level(batch.tagged_rows(sorts, at))
        answers += [(name, by_level.get(level, [])) for name, level in named.items()]
    else:
        answers += [
            (name, batch.vector(q.device_quantile(metric, level), at)) for name, level in named.items()
        ]
    if "max" not in named:
        answers.append(("max", batch.vector(q.device_max(metric), at)))
    return answers


def _ranks(q: FleetQueries, metric: str, q_low: float, q_high: float) -> tuple[list[str], dict[str, float]]:
    """The snapshot's quantiles by name, with the maximum as level 1 where one sort gives them all
    (MetricsQL, the maximum not read from rollups), and the queries that do, a part of the fleet
    each (none: one query per level, and the maximum apart)."""
    levels = quantile_names(q_low, q_high, with_max=q.caps.metricsql and q.max_from_samples(metric))
    distinct = sorted(set(levels.values()))
    queries = [q.device_quantiles(metric, distinct, part) for part in q.parts]
    return [query for query in queries if query is not None], levels


def _sum_and_series_queries(q: FleetQueries, metric: str) -> list[str]:
    """``device_sum_and_series``' queries, a part of the fleet each (none without MetricsQL)."""
    queries = [q.device_sum_and_series(metric, part) for part in q.parts]
    return [query for query in queries if query is not None]


def _sum_and_series(
    batch: Batch, q: FleetQueries, metric: str, at: datetime
) -> dict[str, list[VectorSample]] | None:
    """The rows of ``device_sum_and_series`` by rollup; None where sum and series count are
    asked apart."""
    queries = _sum_and_series_queries(q, metric)
    return batch.tagged_rows(queries, at) if queries else None


def _by_level(rows: Mapping[str, list[VectorSample]]) -> dict[float, list[VectorSample]]:
    """``device_quantiles``' rows by level (its tag, a number)."""
    out: dict[float, list[VectorSample]] = {}
    for tag, found in rows.items():
        try:
            out[float(tag)] = found
        except ValueError:
            continue  # a row without a level: not ours to read
    return out


def _intervals(
    client: PrometheusClient, q: FleetQueries, counts: Counts, t: Thresholds, end: datetime
) -> dict[str, float]:
    """Per scrape job, the median gap between samples of its best-covered device."""
    best: dict[str, tuple[float, DeviceKey, str]] = {}
    for key, (metric, s) in counts.items():
        job = s.labels.get(dcgm.JOB, "")
        if job not in best or s.value > best[job][0]:
            best[job] = (s.value, key, metric)
    if t.scrape_interval is not None:
        return {job: t.scrape_interval.total_seconds() for job in best}
    out = {}
    for job, (_, key, metric) in sorted(best.items()):
        interval = None
        # The last hour first: the interval needs a few hundred gaps, not a week of samples.
        for reach in (INTERVAL_PROBE, None):
            series = client.matrix(q.one_device_raw(metric, key, job, reach), end)
            stamps = [s.timestamps for s in series]
            interval = dcgm.median_interval(stamps)
            if interval is not None or q.window <= INTERVAL_PROBE:
                break
        if interval is None:
            # Its devices get no coverage, hence `unknown`: reported, never acted on.
            log.warning(
                "cannot measure the sample interval of job %r from %d samples; its GPUs are "
                "reported as unknown (set detection.scrapeInterval to override)",
                job,
                sum(map(len, stamps)),
            )
            continue
        out[job] = interval
    return out


def _dev_to_percent(
    gpu_util_unit: str, counts: Counts, numbers: Numbers, renamed: Seen, parts: Mapping[str, Numbers]
) -> dict[str, float]:
    """The multiplier into percent of the legacy DCGM_FI_DEV_GPU_UTIL (the one name whose unit its
    values tell) per scrape job, from its devices' maxima and mean (or as ``gpu_util_unit`` forces
    it); a holder renamed in the window counts
    with its samples under that name alone."""
    dev_max: dict[str, list[float]] = defaultdict(list)
    job_sum: dict[str, float] = defaultdict(float)
    job_count: dict[str, float] = defaultdict(float)

    def add(job: str, top: float, total: float, n: float) -> None:
        dev_max[job].append(top)
        job_sum[job] += total
        job_count[job] += n

    for key, (metric, sample) in counts.items():
        if key in renamed:
            for name, part in renamed[key].items():
                if vocabulary.by_values(name) and key in parts[name]["max"]:
                    job = part.labels.get(dcgm.JOB, "")
                    add(job, parts[name]["max"][key], parts[name]["sum"].get(key, 0.0), part.value)
        elif vocabulary.by_values(metric) and key in numbers["max"]:
            job = sample.labels.get(dcgm.JOB, "")
            add(job, numbers["max"][key], numbers["sum"].get(key, 0.0), sample.value)
    if gpu_util_unit != "auto":
        forced = vocabulary.RATIO_TO_PERCENT if gpu_util_unit == "ratio" else vocabulary.PERCENT_TO_PERCENT
        return dict.fromkeys(dev_max, forced)
    mean = {job: job_sum[job] / job_count[job] for job in job_count if job_count[job] > 0}
    return dcgm.dev_to_percent_by_job(dev_max, mean)


def _devices(
    caps: Capabilities,
    counts: Counts,
    renamed: Seen,
    numbers: Numbers,
    intervals: Mapping[str, float],
    q_low: float,
    window: TimeWindow,
) -> dict[DeviceKey, DeviceAggregate]:
    """Each holder's aggregate, in its metric's unit scaled to percent (a renamed holder's numbers
    are in its metric's unit too, see ``union.renamed_numbers``)."""
    devices: dict[DeviceKey, DeviceAggregate] = {}
    sums, maxes, lows, highs = (numbers[name] for name in ("sum", "max", "q_low", "q_high"))
    for key, (metric, sample) in counts.items():
        job = sample.labels.get(dcgm.JOB, "")
        scale = caps.to_percent(metric, job)
        n = round(sample.value)
        if key not in sums or key not in maxes or key not in lows or key not in highs:
            # Series came and went between two queries; judge the device on the next run.
            log.info("device %s missing from an aggregate; skipped this run", key.device_id)
            continue
        devices[key] = DeviceAggregate(
            key=key,
            info=DeviceInfo(
                node=caps.node_of(sample.labels),
                metric=metric,
                also=tuple(
                    name for name in caps.util_metrics if name in renamed.get(key, ()) and name != metric
                ),
                job=job,
                index=sample.labels.get(dcgm.GPU_INDEX),
                model=sample.labels.get(dcgm.MODEL),
                mig_profile=sample.labels.get(dcgm.MIG_PROFILE),
            ),
            stats=UtilStats(
                samples=n,
                mean=sums[key] / n * scale,
                max=maxes[key] * scale,
                q_low=lows[key] * scale,
                q_high=highs[key] * scale,
                q_level=q_low,
                median=numbers["median"][key] * scale if key in numbers["median"] else None,
            ),
            span_s=window.duration.total_seconds(),
            interval_s=intervals.get(job, 0.0),
        )
    return devices


def _with_histograms(
    batch: Batch, devices: dict[DeviceKey, DeviceAggregate], q: FleetQueries, caps: Capabilities, at: datetime
) -> dict[DeviceKey, DeviceAggregate]:
    """The devices with the sample histogram's stalled and busy shares over the window."""
    increases: dict[DeviceKey, dict[str, float]] = defaultdict(dict)
    for s in batch.vector(q.histogram_increase(), at):
        key = device_key(s.labels, caps)
        le = s.labels.get(dcgm.LE)
        if key is not None and le is not None and isfinite(s.value):
            increases[key][le] = s.value
    idle_le, busy_le, total_le = caps.histogram_le
    out = dict(devices)
    for key, inc in increases.items():
        if key in out and all(le in inc for le in caps.histogram_le):
            out[key] = replace(
                out[key], histogram=histogram_shares(inc[idle_le], inc[busy_le], inc[total_le])
            )
    return out
