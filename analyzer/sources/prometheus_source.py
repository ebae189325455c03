"""``MetricsSource`` over the Prometheus query API: the TSDB computes, the analyzer reads numbers.

One run costs a fixed number of queries whatever the fleet size: discovery (five calls side by
side: names, the GPU and owner series' labels, the histogram's bounds, the build info), then, side
by side, six aggregates per utilization metric (sample count with the device's labels, sum, max,
three quantiles; the unit of ``DCGM_FI_DEV_GPU_UTIL`` follows from the maxima and sums) and a
series count per device that finds devices split over several series (their quantiles are then
taken over the union, three subqueries), one histogram query, up to eight kube-state-metrics
queries and four CPU queries; one raw series per scrape job measures its interval. The closer
looks (``span_numbers``, ``first_busy``) are aggregates too. Raw samples are pulled only for the
HTML report's plots, in chunks that stay under the server's per-series point limit and a
per-query sample budget."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Container, Iterator, Mapping, Sequence
from concurrent.futures import Future, wait
from dataclasses import replace
from datetime import datetime, timedelta
from functools import partial
from itertools import groupby, repeat
from math import ceil, isfinite
from operator import itemgetter, methodcaller
from typing import Any

import numpy as np

from analyzer.sources import dcgm, promql, rollups
from analyzer.sources.aggregates import (
    CloserLook,
    CpuUsage,
    DeviceAggregate,
    DeviceInfo,
    DeviceKey,
    DeviceSamples,
    FleetSnapshot,
    KsmRow,
    MemoryPeak,
    PodId,
    PodRecord,
    Shares,
    SpanNumbers,
    UtilStats,
    histogram_shares,
    phases_from_counts,
    pod_records,
    quantile_levels,
    with_sharers,
)
from analyzer.sources.dcgm import Capabilities
from analyzer.sources.errors import NoDataError
from analyzer.sources.fleet_queries import SERIES, SUM, FleetQueries, fleet_parts
from analyzer.sources.pacing import run_all
from analyzer.sources.prometheus_api import (
    PrometheusClient,
    PrometheusConfig,
    RangeSeries,
    VectorSample,
    samples_of,
)
from analyzer.sources.rollups import Cover, RolledUpQueries
from analyzer.sources.span_queries import (
    ADDITIVE,
    AGGREGATE,
    HOLDERS_PER_TERM,
    MAX_QUERY_CHARS,
    MAX_SUBQUERY_STEPS,
    PODS_PER_TERM,
    RANKED,
    TERMS_PER_QUERY,
    SpanTerm,
    aggregate_names,
    joined,
    tagged,
)
from common.errors import DataUnavailableError
from common.model import TimeWindow
from common.thresholds import Thresholds

log = logging.getLogger(__name__)

# A holder and the span its numbers are over.
Window = tuple[DeviceKey, TimeWindow]

# Prometheus refuses range queries over 11,000 points per series; stay under it for raw pulls too.
MAX_POINTS_PER_SERIES = 10_000
# Samples one raw pull may return (series × points): far below Prometheus' default 50 M query limit.
MAX_SAMPLES_PER_QUERY = 2_000_000
# How much of one device's series measures its job's scrape interval (the whole window if that fails).
INTERVAL_PROBE = timedelta(hours=1)
# Pods one first-busy query names (their names repeat twice: a few hundred keep it under 15,000 characters).
PODS_PER_QUERY = 150
# Answer rows one closer-look query may return (about 4 MB parsed): the largest answers parsed at
# once set a run's peak memory, and MetricsQL's shorter text fits three times the holders.
MAX_ROWS_PER_QUERY = 4_000
# GPUs one union query names (a UUID takes about 45 characters of the text).
UUIDS_PER_UNION_QUERY = 200
# MetricsQL only (a PromQL engine knows no such function), over a series that never exists.
METRICSQL_PROBE = 'count_le_over_time(gpu_analyzer_probe{never="set"}[1s], 0)'


class PrometheusSource:
    """Analyzer data from Prometheus, Thanos, Mimir or VictoriaMetrics."""

    def __init__(
        self,
        client: PrometheusClient | PrometheusConfig,
        util_scale: str = "auto",
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
        if util_scale not in ("auto", "percent", "ratio"):
            raise ValueError(f"util_scale must be auto, percent or ratio, not {util_scale!r}")
        self.util_scale = util_scale
        self.max_points_per_series = max_points_per_series
        self.max_samples_per_query = max_samples_per_query
        # Read the rollups of alerts/gpu-analyzer.recording.yaml where they cover the window.
        self.recording_rules = recording_rules
        # Answers asked for side by side ahead of the code that reads them, by (query, time): each
        # read waits for its own answer only, so work on the first overlaps the rest.
        self._fetched: dict[tuple[str, datetime], Future[list[VectorSample]]] = {}
        # Answers whose rows one label tells apart (the level of `device_quantiles`, the rollup of
        # `device_sum_and_series`), by that label's value.
        self._tagged: dict[tuple[str, datetime], Future[dict[str, list[VectorSample]]]] = {}
        # Device keys of the snapshot's label sets, by the set's items: each made once (a device's
        # labels recur in every per-device aggregate); cleared with the fetched answers.
        self._keys: _KeyMemo | None = None
        # What ``clusters`` discovered and found for a window, for the snapshot of that window (and
        # a second ``clusters`` call: the reaper asks before the pipeline does) to reuse.
        self._found: tuple[tuple[TimeWindow, Thresholds], Capabilities, tuple[str, ...]] | None = None

    def _vector(self, promql: str, at: datetime) -> list[VectorSample]:
        fetched = self._fetched.pop((promql, at), None)
        return fetched.result() if fetched is not None else self.client.vector(promql, at)

    def _fetch(self, queries: Sequence[str | tuple[str, str]], at: datetime) -> None:
        """Send independent queries through the client's bounded pool, in their order; ``_vector``
        reads each answer when it is needed (waiting for that one only). A ``(query, label)`` is
        read by ``_tagged_rows``: its rows by that label's value (the level of
        ``device_quantiles``, the rollup of ``device_sum_and_series``)."""
        shared: dict[tuple[tuple[str, ...], tuple[str, ...]], Mapping[str, str]] = {}
        names: dict[tuple[str, ...], tuple[str, ...]] = {}

        def shared_labels(answer: list[VectorSample]) -> list[VectorSample]:
            # The per-device aggregates name the same devices with the same labels: one label set
            # kept for all of them, not one per answer (at 10,000 GPUs, tens of MiB). Mapped in C,
            # without a Python call per sample.
            labels = list(map(_labels_of, answer))
            kept = map(shared.setdefault, _label_sets(names, labels), labels)
            return samples_of(kept, map(_value_of, answer))

        def by_tag(label: str) -> Callable[[list[VectorSample]], dict[str, list[VectorSample]]]:
            def split(answer: list[VectorSample]) -> dict[str, list[VectorSample]]:
                # Each row's tag taken off its labels (parsed for this answer alone), which then
                # are the device's shared ones; mapped in C like `shared_labels`, while the parsed
                # answer is alive (answers parsed meanwhile add to the peak memory).
                labels = list(map(_labels_of, answer))
                tags = list(map(dict.pop, labels, repeat(label), repeat("")))
                kept = map(shared.setdefault, _label_sets(names, labels), labels)
                rows: dict[str, list[VectorSample]] = defaultdict(list)
                for tag, sample in zip(tags, samples_of(kept, map(_value_of, answer)), strict=True):
                    rows[tag].append(sample)
                return dict(rows)

            return split

        sent: set[str] = set()
        for label, group in groupby(queries, key=_tag_of):
            texts = [text for text in dict.fromkeys(map(_text_of, group)) if text not in sent]
            sent.update(texts)
            asked = [(text, at) for text in texts]
            if label is None:
                for text, answer in zip(texts, self.client.submit_vectors(asked, shared_labels), strict=True):
                    self._fetched[(text, at)] = answer
            else:
                for text, rows in zip(texts, self.client.submit_vectors(asked, by_tag(label)), strict=True):
                    self._tagged[(text, at)] = rows

    def _tagged_rows(self, queries: Sequence[str], at: datetime) -> dict[str, list[VectorSample]]:
        """The rows of tagged answers sent by ``_fetch`` (the parts of one aggregate), every part
        together, by tag."""
        rows: dict[str, list[VectorSample]] = defaultdict(list)
        for query in queries:
            for tag, found in self._tagged.pop((query, at)).result().items():
                rows[tag] += found
        return rows

    def _drop_fetched(self) -> None:
        """Forget answers nobody read, once the calls still out have ended (no request outlives the
        snapshot, and an error of an answer never read is not raised)."""
        pending: list[Future[Any]] = [*self._fetched.values(), *self._tagged.values()]
        self._fetched.clear()
        self._tagged.clear()
        wait(pending)

    @property
    def description(self) -> str:
        return self.client.config.display_url

    # --- clusters -------------------------------------------------------------------------------

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
            values = self.client.label_values(
                self.cluster_label, FleetQueries.util_match(), window.start, window.end
            )
            found = sorted(v for v in values if v)
        self._found = ((window, thresholds), caps, tuple(found))
        return found

    def for_cluster(self, cluster: str) -> PrometheusSource:
        """This source restricted to one cluster's series (same client: one bound on requests)."""
        return PrometheusSource(
            self.client,
            self.util_scale,
            self.max_points_per_series,
            self.max_samples_per_query,
            self.recording_rules,
            cluster_label=self.cluster_label,
            cluster=cluster,
        )

    # --- discovery ------------------------------------------------------------------------------

    def discover(self, window: TimeWindow, t: Thresholds) -> Capabilities:
        """What the source holds over the window, decided once per run."""
        return self._discover(window, t)[0]

    def _discover(self, window: TimeWindow, t: Thresholds) -> tuple[Capabilities, set[str]]:
        """``discover``, and the label names of the GPU utilization series."""
        start, end = window.start, window.end
        scope = self.scope
        # Four label calls side by side, with the engine's build info and the MetricsQL probe: the
        # three label calls that matter only if a name is present answer empty when it is not, and
        # one round trip is cheaper than two.
        extra = rollups.ALL_NAMES if self.recording_rules else ()
        calls: list[Callable[[], list[str]]] = [
            lambda: self.client.label_values("__name__", FleetQueries.names_match(extra, scope), start, end),
            lambda: self.client.label_names(FleetQueries.util_match(scope), start, end),
            lambda: self.client.label_names(promql.selector(dcgm.KUBE_POD_OWNER, scope), start, end),
            lambda: self.client.label_values(
                dcgm.LE, promql.selector(dcgm.SAMPLE_HISTOGRAM_BUCKET, scope), start, end
            ),
            self._engine,
            lambda: self._metricsql(window),
        ]
        answers = run_all(self.client.limit, _attempt, calls)
        (names, failed), *rest, (engine, _), (metricsql, _) = answers
        if failed is not None:
            raise failed
        present = set(names)
        util = tuple(m for m in dcgm.UTIL_METRICS if m in present)
        if not util:
            # Said first: no GPU series is the finding, whatever the other calls met.
            raise NoDataError(
                f"{self.description}: no GPU utilization series ({', '.join(dcgm.UTIL_METRICS)}) between "
                f"{start.isoformat()} and {end.isoformat()}: is dcgm-exporter or gpu-exporter scraped?"
            )
        for _, failed in rest:
            if failed is not None:
                raise failed
        gpu_answer, ksm_answer, les = (answer for answer, _ in rest)
        ksm = dcgm.KUBE_POD_OWNER in present
        histogram = dcgm.SAMPLE_HISTOGRAM_BUCKET in present
        gpu_labels, ksm_labels = set(gpu_answer), set(ksm_answer) if ksm else set()
        les = les if histogram else []
        histogram_le: tuple[str, ...] = ()
        if histogram:
            bounds = {le: v for le in les if (v := dcgm.parse_le(le)) is not None}
            try:
                histogram_le = dcgm.pick_buckets(bounds, t.starvation_idle_percent, t.starvation_busy_percent)
            except ValueError as e:
                log.warning("ignoring %s: %s", dcgm.SAMPLE_HISTOGRAM_BUCKET, e)
        caps = Capabilities.discovered(
            present,
            util,
            gpu_labels,
            ksm_labels,
            histogram_le,
            rollups.recorded(present, util),
            prometheus_engine=bool(engine),
            metricsql=bool(metricsql),
            fleet_series=int(metricsql[1]) if len(metricsql) > 1 else None,
            scope=scope,
        )
        return caps, gpu_labels

    def _engine(self) -> list[str]:
        """``["prometheus"]`` when the server runs Prometheus' own engine (see Capabilities)."""
        try:
            return ["prometheus"] if "goVersion" in self.client.build_info() else []
        except DataUnavailableError:
            return []  # no build info to give: nothing follows from it

    def _metricsql(self, window: TimeWindow) -> list[str]:
        """``["metricsql", n]`` when the server evaluates MetricsQL's counting rollups (see
        Capabilities), ``n`` the utilization series reporting at the window's end (left out where
        none is, or where the count could not be had); ``[]`` otherwise.

        Asked, not guessed from a version: PromQL engines refuse the unknown function (HTTP 400),
        and the probe's selector matches nothing, so that part costs the server nothing. The count
        rides on it (only this engine's snapshot asks a fleet in parts, by its size); where the two
        together are refused, the probe alone is asked again, so that a count the server would not
        give never costs the MetricsQL rollups.
        """
        with_size = f"{METRICSQL_PROBE} or {FleetQueries.util_series(self.scope)}"
        try:
            found = self.client.vector(with_size, window.end)
        except DataUnavailableError:
            try:
                self.client.vector(METRICSQL_PROBE, window.end)
            except DataUnavailableError:
                return []  # refused: PromQL only (a server that is down fails the other calls too)
            return ["metricsql"]
        counts = [s.value for s in found if isfinite(s.value)]
        return ["metricsql", str(round(max(counts)))] if counts else ["metricsql"]

    def _rollup_covers(self, caps: Capabilities, window: TimeWindow) -> dict[str, Cover]:
        """The metrics whose recording-rule rollups cover the whole window, and how (logged either way)."""
        if not caps.rollups:
            return {}
        latest: dict[str, datetime] = {}
        for s in self._vector(rollups.latest_query(caps.rollups, caps.scope), window.end):
            stamp = datetime.fromtimestamp(round(s.value * 1000) / 1000, tz=window.end.tzinfo)
            latest[s.labels.get(rollups.METRIC_LABEL, "")] = stamp
        covers = {}
        for metric in caps.rollups:
            found = rollups.cover(window, latest[metric]) if metric in latest else None
            if found is None:
                log.info("%s: recording rules not evaluated across the window; reading raw samples", metric)
            else:
                covers[metric] = found
        if not covers:
            return {}
        evaluations = {
            s.labels.get(rollups.METRIC_LABEL, ""): s.value
            for s in self._vector(rollups.check_query(covers, caps.scope), window.end)
        }
        out = {}
        for metric, c in covers.items():
            why = rollups.missing(c, evaluations.get(metric))
            if why is not None:
                log.info("%s: recording rules do not cover the window (%s); reading raw samples", metric, why)
                continue
            log.info(
                "%s: count, sum and max from %d recording-rule rollups, raw samples for the first %.3f s "
                "and the last %.3f s of the window",
                metric,
                c.steps,
                c.lead.total_seconds(),
                c.trail.total_seconds(),
            )
            out[metric] = c
        return out

    def _dev_scales(
        self, device_max: Mapping[str, list[float]], mean: Mapping[str, float]
    ) -> dict[str, float]:
        """Unit of DCGM_FI_DEV_GPU_UTIL per scrape job, from its devices' maxima and mean (or as forced)."""
        if self.util_scale != "auto":
            forced = dcgm.RATIO if self.util_scale == "ratio" else dcgm.PERCENT
            return dict.fromkeys(device_max, forced)
        return dcgm.scales_by_job(device_max, mean)

    # --- the snapshot ---------------------------------------------------------------------------

    def snapshot(self, window: TimeWindow, thresholds: Thresholds) -> FleetSnapshot:
        try:
            return self._snapshot(window, thresholds)
        finally:
            self._drop_fetched()
            self._keys = None

    def _snapshot(self, window: TimeWindow, thresholds: Thresholds) -> FleetSnapshot:
        found = self._found
        caps = (
            found[1]
            if found is not None and found[0] == (window, thresholds)
            else self.discover(window, thresholds)
        )
        covers = self._rollup_covers(caps, window) if self.recording_rules else {}
        caps = replace(caps, rollups=tuple(covers))
        parts = fleet_parts(caps.fleet_series)
        q: FleetQueries = (
            RolledUpQueries(caps, window.duration, parts=parts, covers=covers)
            if covers
            else FleetQueries(caps, window.duration, parts=parts)
        )
        q_low, q_high = quantile_levels(thresholds.starvation_min_share)
        span_s = window.duration.total_seconds()
        at = window.end

        self._drop_fetched()
        self._keys = _KeyMemo(partial(self._new_key, caps=caps))
        self._fetch(self._independent(caps, q, (q_low, q_high)), at)
        counts: dict[DeviceKey, tuple[str, VectorSample]] = {}
        for metric in caps.util_metrics:
            answer = self._vector(q.device_count(metric), at)
            for key, s in zip(self._keys_of(answer, caps), answer, strict=True):
                if key is None or s.value <= 0:
                    continue
                known = counts.get(key)
                if known is None:
                    counts[key] = (metric, s)  # the first metric in preference order wins
                elif known[0] == metric:
                    # Series of one holder told apart by a descriptive label (a new ``job``):
                    # its samples are all of theirs, as its sum is; it is described as the row
                    # holding most of them (its job's interval is measured on that job's series).
                    labels = s.labels if s.value > known[1].value else known[1].labels
                    counts[key] = (metric, VectorSample(labels, known[1].value + s.value))
        if not counts:
            raise NoDataError(f"{self.description}: GPU series exist but hold no samples in the window")
        gpu_requests: list[VectorSample] = []
        if caps.kube_state_metrics:
            gpu_requests = self._vector(q.pod_gpu_requests(), at)
            if _unrequested(counts, gpu_requests):
                # Some pod holds a GPU kube-state-metrics reports no request for: the Kubernetes
                # side again, with every pod holding a GPU at the end (see FleetQueries.gpu_pods).
                q = replace(q, held=True)
                self._fetch(self._kubernetes(caps, q), at)
        intervals = self._intervals(caps, q, counts, thresholds, at)

        numbers: dict[str, dict[DeviceKey, float]] = defaultdict(dict)
        # Per metric, where one query holds both: sum and series per holder, by rollup.
        both = {metric: self._sum_and_series(q, metric, at) for metric in caps.util_metrics}
        for metric in caps.util_metrics:
            mine = {key for key, (m, _) in counts.items() if m == metric}
            if not mine:
                continue
            sorts, levels = _ranks(q, metric, q_low, q_high)
            rolled = both[metric]
            summed = rolled.get(SUM, []) if rolled is not None else self._vector(q.device_sum(metric), at)
            numbers["sum"].update(_added(self._keys_of(summed, caps), summed, mine))
            answers: list[tuple[str, list[VectorSample]]] = []
            if sorts:
                by_level = _by_level(self._tagged_rows(sorts, at))
                answers += [(name, by_level.get(level, [])) for name, level in levels.items()]
            else:
                answers += [
                    (name, self._vector(q.device_quantile(metric, level), at))
                    for name, level in levels.items()
                ]
            if "max" not in levels:
                answers.append(("max", self._vector(q.device_max(metric), at)))
            for name, answer in answers:
                pairs = zip(self._keys_of(answer, caps), map(_value_of, answer), strict=True)
                numbers[name].update((key, value) for key, value in pairs if key in mine)

        series = {
            metric: rolled.get(SERIES, [])
            if rolled is not None
            else self._vector(q.device_series_count(metric), at)
            for metric, rolled in both.items()
        }
        merged = self._union_numbers(q, caps, counts, series, numbers, intervals, (q_low, q_high), at)

        # The DEV gauge's unit per scrape job follows from the per-device maxima and sums just read.
        dev_max: dict[str, list[float]] = defaultdict(list)
        job_sum: dict[str, float] = defaultdict(float)
        job_count: dict[str, float] = defaultdict(float)
        for key, (metric, sample) in counts.items():
            if metric == dcgm.DEV_GPU_UTIL and key in numbers["max"]:
                job = sample.labels.get(dcgm.JOB, "")
                dev_max[job].append(numbers["max"][key])
                job_sum[job] += numbers["sum"].get(key, 0.0)
                job_count[job] += sample.value
        mean = {job: job_sum[job] / job_count[job] for job in job_count if job_count[job] > 0}
        caps = replace(caps, interval_s=intervals, dev_scale=self._dev_scales(dev_max, mean))

        devices: dict[DeviceKey, DeviceAggregate] = {}
        sums, maxes, lows, highs = (numbers[name] for name in ("sum", "max", "q_low", "q_high"))
        for key, (metric, sample) in counts.items():
            job = sample.labels.get(dcgm.JOB, "")
            scale = caps.scale(metric, job)
            n = round(sample.value)
            if key not in sums or key not in maxes or key not in lows or key not in highs:
                # Series came and went between two queries; judge the device on the next run.
                log.info("device %s missing from an aggregate; skipped this run", key.device_id)
                continue
            devices[key] = DeviceAggregate(
                key=key,
                info=DeviceInfo(
                    node=sample.labels.get(caps.host_label, ""),
                    metric=metric,
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
                span_s=span_s,
                interval_s=intervals.get(job, 0.0),
            )
        devices = with_sharers(devices, dcgm.POD_SM_UTIL)
        if caps.histogram:
            devices = self._with_histograms(devices, q, caps, at)
        return FleetSnapshot(
            window=window,
            capabilities=caps,
            devices=devices,
            pods=self._pods(q, caps, gpu_requests, at) if caps.kube_state_metrics else {},
            replicasets=self._replicasets(q, at) if caps.replicaset_owner else {},
            jobs=self._jobs(q, at) if caps.job_owner else {},
            cpu=self._cpu(q, caps, at),
            merged=merged,
        )

    def _independent(
        self, caps: Capabilities, q: FleetQueries, levels: tuple[float, float]
    ) -> list[str | tuple[str, str]]:
        """Every snapshot query that depends on nothing but discovery, in the order they go out side
        by side: those read first (samples per holder) first, the quantiles' sorts last. A tagged
        one, ``(query, label)``, is read by that label's values (see ``_fetch``)."""
        first: list[str | tuple[str, str]] = []
        out: list[str | tuple[str, str]] = []
        last: list[str | tuple[str, str]] = []
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
        return [*first, *out, *self._kubernetes(caps, q), *last]

    def _sum_and_series(
        self, q: FleetQueries, metric: str, at: datetime
    ) -> dict[str, list[VectorSample]] | None:
        """The rows of ``device_sum_and_series`` by rollup; None where sum and series count are
        asked apart."""
        queries = _sum_and_series_queries(q, metric)
        return self._tagged_rows(queries, at) if queries else None

    def _kubernetes(self, caps: Capabilities, q: FleetQueries) -> list[str]:
        """The Kubernetes-side queries kept for GPU pods (all but the GPU requests themselves)."""
        out = []
        if caps.kube_state_metrics:
            out += [q.pod_owners(), q.pod_start_times(), q.pod_last_seen()]
            out += [q.pod_scheduled()] if caps.pod_scheduled else []
            out += [q.pod_pending()] if caps.pod_phase else []
            out += [q.pod_groups()] if caps.pod_labels else []
            out += [q.cpu_limits()] if caps.cpu_limits else []
            out += [q.cpu_requests()] if caps.cpu_requests else []
        out += [q.replicaset_owners()] if caps.replicaset_owner else []
        out += [q.job_owners()] if caps.job_owner else []
        out += [q.cpu_usage()] if caps.cpu_usage else []
        out += [q.cpu_throttled_ratio()] if caps.cpu_throttling else []
        return out

    def _union_numbers(
        self,
        q: FleetQueries,
        caps: Capabilities,
        counts: dict[DeviceKey, tuple[str, VectorSample]],
        series: Mapping[str, Sequence[VectorSample]],
        numbers: dict[str, dict[DeviceKey, float]],
        intervals: Mapping[str, float],
        levels: tuple[float, float],
        at: datetime,
    ) -> frozenset[DeviceKey]:
        """Replace per-series counts, sums and quantiles by the union's for devices whose samples
        span several series (``series``: series per holder, by metric, maybe in several rows per
        holder): one after the other (a moved exporter) or side by side (two scrape jobs, an HA
        pair written twice), see ``FleetQueries.device_union_total``. The maximum needs nothing:
        the union's is the largest of its series'."""
        merged: set[DeviceKey] = set()
        for metric in caps.util_metrics:
            # A row counts the series of one label set; rows of one holder are added up only
            # where each has several, as PromQL's filtered count (`> 1`) leaves them.
            rows = [s for s in series[metric] if s.value > 1]
            per_key = _added(self._keys_of(rows, caps), rows, counts)
            split = {key for key, n in per_key.items() if n > 1 and counts[key][0] == metric}
            if not split:
                continue
            jobs = {counts[k][1].labels.get(dcgm.JOB, "") for k in split}
            step_s = min((intervals[j] for j in jobs if j in intervals), default=15.0)
            # Over a long window the union is sampled every few scrapes, as no subquery may take more
            # than MAX_SUBQUERY_STEPS steps (the quantiles of these few devices are then estimates;
            # counts and sums stay whole, each step taking every sample of its range).
            step = timedelta(
                seconds=step_s * max(1, ceil(q.window.total_seconds() / step_s / MAX_SUBQUERY_STEPS))
            )
            uuids = sorted({k.uuid for k in split})
            log.info(
                "%d GPU holders of %s are reported by more than one series (a moved exporter, two scrape "
                "jobs, or an HA pair written twice): their numbers come from the series merged every %gs",
                len(split),
                metric,
                step.total_seconds(),
            )
            # The five numbers of a chunk in one query, each tagged with its name.
            texts = [
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
            self._fetch([(text, AGGREGATE) for text in texts], at)
            for name, rows in self._tagged_rows(texts, at).items():
                for key, s in zip(self._keys_of(rows, caps), rows, strict=True):
                    if key is None or key not in split:
                        continue
                    if name == "count":
                        counts[key] = (metric, VectorSample(counts[key][1].labels, s.value))
                    else:
                        numbers[name][key] = s.value
            merged |= split
        return frozenset(merged)

    def _keys_of(self, answer: Sequence[VectorSample], caps: Capabilities) -> list[DeviceKey | None]:
        """``_key`` of each sample; within the snapshot, looked up in C (a Python call per sample
        costs more than the lookup itself at 10,000 GPUs)."""
        memo = self._keys
        if memo is None:
            return [self._new_key(s.labels, caps) for s in answer]
        return list(_keys_by_label_set(memo, list(map(_labels_of, answer))))

    def _key(self, labels: Mapping[str, str], caps: Capabilities) -> DeviceKey | None:
        memo = self._keys
        if memo is None:
            return self._new_key(labels, caps)
        names = tuple(labels)
        return memo[(memo.names.setdefault(names, names), tuple(labels.values()))]

    def _new_key(self, labels: Mapping[str, str], caps: Capabilities) -> DeviceKey | None:
        uuid = labels.get(dcgm.UUID)
        if not uuid:
            return None
        pod = labels.get(caps.gpu_pod.pod, "")
        return DeviceKey(
            uuid=uuid,
            mig_instance=labels.get(dcgm.MIG_INSTANCE, "") if caps.mig else "",
            namespace=labels.get(caps.gpu_pod.namespace, "") if pod else "",
            pod=pod,
        )

    def _intervals(
        self,
        caps: Capabilities,
        q: FleetQueries,
        counts: Mapping[DeviceKey, tuple[str, VectorSample]],
        t: Thresholds,
        end: datetime,
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
                series = self.client.matrix(q.one_device_raw(metric, key, job, reach), end)
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
                    sum(t.size for t in stamps),
                )
                continue
            out[job] = interval
        return out

    def _with_histograms(
        self, devices: dict[DeviceKey, DeviceAggregate], q: FleetQueries, caps: Capabilities, at: datetime
    ) -> dict[DeviceKey, DeviceAggregate]:
        increases: dict[DeviceKey, dict[str, float]] = defaultdict(dict)
        for s in self._vector(q.histogram_increase(), at):
            key = self._key(s.labels, caps)
            le = s.labels.get(dcgm.LE)
            if key is not None and le is not None and np.isfinite(s.value):
                increases[key][le] = s.value
        idle_le, busy_le, total_le = caps.histogram_le
        out = dict(devices)
        for key, inc in increases.items():
            if key in out and all(le in inc for le in caps.histogram_le):
                out[key] = replace(
                    out[key], histogram=histogram_shares(inc[idle_le], inc[busy_le], inc[total_le])
                )
        return out

    def _pods(
        self, q: FleetQueries, caps: Capabilities, gpu_requests: list[VectorSample], at: datetime
    ) -> dict[PodId, PodRecord]:
        def rows(query: str) -> list[KsmRow]:
            return answer_rows(self._vector(query, at))

        def answer_rows(answer: list[VectorSample]) -> list[KsmRow]:
            return list(zip(_pids(answer), map(_labels_of, answer), map(_value_of, answer), strict=True))

        return pod_records(
            rows(q.pod_owners()),
            rows(q.pod_start_times()),
            answer_rows(gpu_requests),
            last_seen=rows(q.pod_last_seen()),
            scheduled=rows(q.pod_scheduled()) if caps.pod_scheduled else (),
            pending=rows(q.pod_pending()) if caps.pod_phase else (),
            phases_known=caps.pod_phase,
            groups=rows(q.pod_groups()) if caps.pod_labels else (),
        )

    def _replicasets(self, q: FleetQueries, at: datetime) -> dict[PodId, tuple[str, str]]:
        out: dict[PodId, tuple[str, str]] = {}
        for s in self._vector(q.replicaset_owners(), at):
            rs = (s.labels.get("namespace", ""), s.labels.get("replicaset", ""))
            if s.labels.get("owner_is_controller") == "true" or rs not in out:
                out[rs] = (s.labels.get("owner_kind", ""), s.labels.get("owner_name", ""))
        return out

    def _jobs(self, q: FleetQueries, at: datetime) -> dict[PodId, tuple[str, str]]:
        out: dict[PodId, tuple[str, str]] = {}
        for s in self._vector(q.job_owners(), at):
            job = (s.labels.get("namespace", ""), s.labels.get("job_name", ""))
            if s.labels.get("owner_is_controller") == "true" or job not in out:
                out[job] = (s.labels.get("owner_kind", ""), s.labels.get("owner_name", ""))
        return out

    def _cpu(self, q: FleetQueries, caps: Capabilities, at: datetime) -> dict[PodId, CpuUsage]:
        def values(enabled: bool, query: Callable[[], str]) -> dict[PodId, float]:
            if not enabled:
                return {}
            answer = self._vector(query(), at)
            pairs = zip(_pids(answer), map(_value_of, answer), strict=True)
            return {pid: v for pid, v in pairs if isfinite(v)}

        usage = values(caps.cpu_usage, q.cpu_usage)
        limits = values(caps.cpu_limits and caps.kube_state_metrics, q.cpu_limits)
        throttled = values(caps.cpu_throttling, q.cpu_throttled_ratio)
        requests = values(caps.cpu_requests, q.cpu_requests)
        return {
            pid: CpuUsage(
                usage_cores=usage.get(pid),
                limit_cores=limits.get(pid),
                throttled_ratio=throttled.get(pid),
                request_cores=requests.get(pid),
            )
            for pid in set(usage) | set(limits) | set(throttled) | set(requests)
        }

    # --- closer looks: aggregates over each holder's own span ------------------------------------

    def _terms(self, snapshot: FleetSnapshot, wanted: Sequence[Window]) -> list[list[SpanTerm]]:
        """Holders grouped into per-span terms, the terms into queries none of whose terms clash."""
        caps = snapshot.capabilities
        # Holders per (metric, job, span), in order and once each.
        groups: dict[tuple[str, str, TimeWindow], dict[DeviceKey, None]] = defaultdict(dict)
        for key, span in wanted:
            dev = snapshot.devices.get(key)
            if dev is not None:
                groups[(dev.info.metric, dev.info.job, span)][key] = None
        batches: list[list[SpanTerm]] = []
        batch_names: list[set[str]] = []
        terms: list[SpanTerm] = []
        for (metric, job, span), held in sorted(groups.items(), key=_by_span):
            step = snapshot.devices[next(iter(held))].interval_s or 15.0
            for keys in _term_keys(list(held)):
                terms += _fitting(caps, metric, keys, span, step, caps.scale(metric, job))
        for term in terms:
            names = term.uuids | term.pods
            for batch, seen in zip(batches, batch_names, strict=True):
                if len(batch) >= TERMS_PER_QUERY:
                    continue
                # No term may select another's holder: the joined answer would carry it twice (only
                # terms sharing a GPU or a pod name can).
                clash = not names.isdisjoint(seen) and (
                    any(other.selects(k) for other in batch for k in term.keys)
                    or any(term.selects(k) for other in batch for k in other.keys)
                )
                if not clash:
                    batch.append(term)
                    seen.update(names)
                    break
            else:
                batches.append([term])
                batch_names.append(set(names))
        return batches

    def _ask_terms(
        self,
        snapshot: FleetSnapshot,
        batches: list[list[SpanTerm]],
        families: Sequence[Mapping[str, Callable[[SpanTerm], str | None]]],
        levels: Mapping[str, float] | None = None,
    ) -> dict[Window, dict[str, list[float]]]:
        """Per batch, one query per family of named aggregates, side by side; per (holder, span), the
        values each aggregate answered (a bucket's under ``_histogram_name``).

        ``levels`` names the quantile levels a ``ranked`` aggregate asks for (see ``aggregate_names``).
        """
        caps, at = snapshot.capabilities, snapshot.window.end
        # Rows an aggregate answers per holder: one, but a row per rollup, level or bucket bound.
        per_holder = {ADDITIVE: 2, RANKED: len(set((levels or {}).values())) or 1}
        per_holder["histogram"] = len(snapshot.capabilities.histogram_le) or 1
        groups: list[tuple[dict[DeviceKey, TimeWindow], list[tuple[str, int]]]] = []
        for batch in batches:
            owner = {k: term.span for term in batch for k in term.keys}
            for family in families:
                built = ((name, term, build(term)) for term in batch for name, build in family.items())
                groups.append(
                    (
                        owner,
                        [
                            (tagged(name, text), per_holder.get(name, 1) * max(1, len(term.keys)))
                            for name, term, text in built
                            if text
                        ],
                    )
                )
        # VictoriaMetrics refuses queries over 16 KiB by default: split well below that, and into
        # as many queries as go out at once, so that a small round still runs side by side (but
        # none much under a quarter of the limit: a query costs a round trip of its own). An
        # answer parsed is held whole meanwhile: at most MAX_ROWS_PER_QUERY rows each.
        total = sum(len(part) + 4 for _, parts in groups for part, _ in parts)
        spread = ceil(total / self.client.limit.ceiling)
        budget = min(MAX_QUERY_CHARS, max(spread, MAX_QUERY_CHARS // 4))
        plan: list[tuple[dict[DeviceKey, TimeWindow], str]] = []
        for owner, parts in groups:
            chunk: list[str] = []
            size = rows = 0
            for part, part_rows in parts:
                if chunk and (size + len(part) > budget or rows + part_rows > MAX_ROWS_PER_QUERY):
                    plan.append((owner, joined(chunk)))
                    chunk, size, rows = [], 0, 0
                chunk.append(part)
                size += len(part) + 4
                rows += part_rows
            if chunk:
                plan.append((owner, joined(chunk)))
        keys = _KeyMemo(partial(self._new_key, caps=caps))
        names = _NameMemo(levels or {})

        def numbers(answer: list[VectorSample]) -> list[tuple[DeviceKey, tuple[str, ...], float]]:
            # Only what the caller reads is kept: the key, the aggregates the row holds, its value.
            # The tags come off each row's labels (parsed for this answer alone), which then name
            # the holder as every other row of its device does: the key is looked up, and the
            # tags' names too, in C (at 10,000 GPUs young, tens of thousands of rows a round).
            labels = list(map(_labels_of, answer))
            # Popped before the keys are looked up: they key on what is left.
            popped = (map(dict.pop, labels, repeat(tag), repeat("")) for tag in _ROW_TAGS)
            tags = list(zip(*popped, strict=True))
            aggregates = map(names.__getitem__, tags)
            found = zip(_keys_by_label_set(keys, labels), aggregates, map(_value_of, answer), strict=True)
            return [
                (key, of, value) for key, of, value in found if key is not None and of and isfinite(value)
            ]

        out: dict[Window, dict[str, list[float]]] = {}
        answers = self.client.read_vectors([(query, at) for _, query in plan], numbers)
        for (owner, _), read in zip(plan, answers, strict=True):
            # Grouped by holder first: a holder's span (a pydantic model) is hashed once, not per row.
            by_key: dict[DeviceKey, dict[str, list[float]]] = {}
            for key, held_names, value in read:
                if key in owner:
                    got = by_key.get(key)
                    if got is None:
                        got = by_key[key] = {}
                    for name in held_names:
                        got.setdefault(name, []).append(value)
            for key, got in by_key.items():
                have = out.setdefault((key, owner[key]), got)
                if have is not got:
                    for name, values in got.items():
                        have.setdefault(name, []).extend(values)
        return out

    def span_numbers(
        self, snapshot: FleetSnapshot, looks: Sequence[CloserLook], t: Thresholds
    ) -> dict[Window, SpanNumbers]:
        caps = snapshot.capabilities
        q_low, q_high = quantile_levels(t.starvation_min_share)
        # What each (holder, span) needs: statistics, sample-histogram shares, shares from samples.
        need: dict[Window, tuple[bool, bool, bool]] = {}
        for lk in looks:
            w = (lk.key, lk.span)
            had = need.get(w, (False, False, False))
            need[w] = (had[0] or lk.stats, had[1] or (lk.histogram and caps.histogram), had[2] or lk.shares)
        wanted = sorted(need, key=lambda w: (w[0], w[1].start))
        batches = self._terms(snapshot, wanted)

        spans = {
            kind: {span for (_, span), flags in need.items() if flags[i]}
            for i, kind in enumerate(("stats", "histogram", "shares"))
        }

        def when(kind: str, build: Callable[[SpanTerm], str]) -> Callable[[SpanTerm], str | None]:
            # A term asks for an aggregate only if one of its holders' spans needs it.
            return lambda term: build(term) if term.span in spans[kind] else None

        def merged(func: str) -> Callable[[SpanTerm], str | None]:
            # Only terms holding a holder of several series: the others' counts and sums are exact.
            def build(term: SpanTerm) -> str | None:
                if term.span not in spans["stats"] or not any(term.selects(k) for k in snapshot.merged):
                    return None
                return term.merged_total(func)

            return build

        idle, busy = t.starvation_idle_percent, t.starvation_busy_percent
        levels = _levels(q_low, q_high, with_max=True)
        by_name: dict[str, Callable[[SpanTerm], str | None]]
        if caps.metricsql:
            # Each selector twice, not six times: a third of the text, so of the queries, and one
            # sort of the samples for every quantile.
            ranked = sorted(set(levels.values()))
            by_name = {
                ADDITIVE: when("stats", SpanTerm.additive),
                RANKED: when("stats", lambda term: term.ranked(ranked)),
            }
        else:
            by_name = {
                "count": when("stats", lambda term: term.stats("count")),
                "sum": when("stats", lambda term: term.stats("sum")),
                "max": when("stats", lambda term: term.stats("max")),
                "q_low": when("stats", lambda term: term.stats("q", q_low)),
                "q_high": when("stats", lambda term: term.stats("q", q_high)),
                "median": when("stats", lambda term: term.stats("q", 0.5)),
            }
        if snapshot.merged:
            by_name |= {"merged_count": merged("count_over_time"), "merged_sum": merged("sum_over_time")}
        answers = self._ask_terms(
            snapshot,
            batches,
            [
                {**by_name, "histogram": when("histogram", SpanTerm.histogram)},
                {
                    "n": when("shares", SpanTerm.samples),
                    "stalled": when("shares", lambda term: term.state_count(True, idle)),
                    "stalled_runs": when("shares", lambda term: term.state_runs(True, idle)),
                    "busy": when("shares", lambda term: term.state_count(False, busy)),
                    "busy_runs": when("shares", lambda term: term.state_runs(False, busy)),
                },
            ],
            levels,
        )

        out = {}
        for w in wanted:
            dev = snapshot.devices[w[0]]
            scale = caps.scale(dev.info.metric, dev.info.job)
            got = answers.get(w, {})
            one = partial(_first, got)
            with_stats, with_histogram, with_shares = need[w]
            stats = None
            count = one("count")
            sum_name = "sum"
            if w[0] in snapshot.merged and one("merged_count") is not None:
                # Series side by side would count each sample once per series.
                count, sum_name = one("merged_count"), "merged_sum"
            if with_stats and count:
                values = [one(n) for n in (sum_name, "max", "q_low", "q_high", "median")]
                if all(v is not None for v in values[:4]):
                    total, top, low, high, median = values
                    stats = UtilStats(
                        samples=round(count),
                        mean=float(total or 0.0) / count * scale,
                        max=float(top or 0.0) * scale,
                        q_low=float(low or 0.0) * scale,
                        q_high=float(high or 0.0) * scale,
                        q_level=q_low,
                        median=None if median is None else median * scale,
                    )
            histogram = None
            if with_histogram:
                inc = {le: v for le in caps.histogram_le if (v := one(_histogram_name(le))) is not None}
                if len(inc) == len(caps.histogram_le):
                    idle_le, busy_le, total_le = caps.histogram_le
                    histogram = histogram_shares(inc[idle_le], inc[busy_le], inc[total_le])
            shares = phases = None
            n = one("n")
            if with_shares and n:
                stalled, busy_n = one("stalled") or 0.0, one("busy") or 0.0
                shares = Shares(stalled=stalled / n, busy=busy_n / n, weight=n, source="samples")
                phases = phases_from_counts(
                    stalled, one("stalled_runs") or 0.0, busy_n, one("busy_runs") or 0.0, dev.interval_s
                )
            out[w] = SpanNumbers(stats=stats, histogram=histogram, shares=shares, phases=phases)
        return out

    def first_busy(
        self, snapshot: FleetSnapshot, wanted: Sequence[Window], idle_percent: float
    ) -> dict[Window, float]:
        """Each holder's first busy sample in its span.

        Holders whose search spans lie close together go out as one query per scrape job (naming
        their pods, at most 150), over the union of those spans: a Job's pod has a name of its own,
        so its series start with its life, and a busy sample outside a holder's own span is
        ignored. Only a holder whose first one lies before its span (a pod recreated under its
        name) is asked again over its own span alone.
        """
        caps = snapshot.capabilities
        by_job: dict[tuple[str, str, float], list[Window]] = defaultdict(list)
        for key, span in wanted:
            if (d := snapshot.devices.get(key)) is not None and key.pod:
                by_job[(d.info.metric, d.info.job, d.interval_s or 15.0)].append((key, span))
        queries: list[tuple[str, datetime]] = []
        for (metric, job, step), holders in sorted(by_job.items()):
            for reach, pods in _near_spans(holders):
                term = SpanTerm.pods_of_job(caps, metric, job, pods, reach, step, caps.scale(metric, job))
                queries.append((term.first_busy(idle_percent), reach.end))

        def firsts(answer: list[VectorSample]) -> list[tuple[DeviceKey, float]]:
            keyed = ((self._key(s.labels, caps), s.value) for s in answer)
            return [(key, value) for key, value in keyed if key is not None and np.isfinite(value)]

        earliest: dict[DeviceKey, float] = {}
        for answer in self.client.read_vectors(queries, firsts):
            for found, value in answer:
                earliest[found] = min(value, earliest.get(found, np.inf))
        out: dict[Window, float] = {}
        again = []
        for key, span in wanted:
            first = earliest.get(key)
            if first is None or first > span.end.timestamp():
                continue  # no busy sample in the span
            if first > span.start.timestamp():
                out[(key, span)] = first
            else:
                again.append((key, span))
        if again:
            batches = self._terms(snapshot, again)
            answers = self._ask_terms(snapshot, batches, [{"first": lambda t: t.first_busy(idle_percent)}])
            out |= {w: min(got["first"]) for w, got in answers.items() if got.get("first")}
        return out

    # --- raw samples, for plots only ------------------------------------------------------------

    def device_samples(
        self, snapshot: FleetSnapshot, keys: Sequence[DeviceKey], bucket_keys: Sequence[DeviceKey] = ()
    ) -> dict[DeviceKey, DeviceSamples]:
        caps = snapshot.capabilities
        q = FleetQueries(caps, snapshot.window.duration)
        wanted = {k: snapshot.devices[k] for k in set(keys) | set(bucket_keys) if k in snapshot.devices}
        util: dict[DeviceKey, list[RangeSeries]] = defaultdict(list)
        by_metric: dict[str, list[DeviceAggregate]] = defaultdict(list)
        for dev in wanted.values():
            by_metric[dev.info.metric].append(dev)
        for metric, devs in by_metric.items():
            for series in self._pull(snapshot, devs, partial(q.device_raw, metric)):
                key = self._key(series.labels, caps)
                if key in wanted:
                    scale = caps.scale(metric, series.labels.get(dcgm.JOB, ""))
                    util[key].append(RangeSeries(series.labels, series.timestamps, series.values * scale))
        buckets: dict[DeviceKey, dict[str, list[RangeSeries]]] = defaultdict(lambda: defaultdict(list))
        bucket_devs = [snapshot.devices[k] for k in bucket_keys if k in snapshot.devices]
        if bucket_devs and caps.histogram:
            for series in self._pull(snapshot, bucket_devs, q.bucket_raw, per_series=len(caps.histogram_le)):
                key = self._key(series.labels, caps)
                le = series.labels.get(dcgm.LE)
                if key in wanted and le is not None:
                    buckets[key][le].append(series)
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
        time_chunks = max(1, int(np.ceil(points / self.max_points_per_series)))
        chunk = window.duration / time_chunks
        points_per_chunk = points / time_chunks
        # Several holders of one GPU share a UUID: count series generously per device.
        per_query = max(1, int(self.max_samples_per_query // (points_per_chunk * per_series * 2)))
        uuids = sorted({d.key.uuid for d in devs})
        for i in range(0, len(uuids), per_query):
            batch = uuids[i : i + per_query]
            for c in range(time_chunks):
                yield from self.client.matrix(build(batch, chunk), window.start + chunk * (c + 1))

    def memory_used(self, snapshot: FleetSnapshot, keys: Sequence[DeviceKey]) -> dict[DeviceKey, float]:
        caps = snapshot.capabilities
        if not keys or not caps.memory:
            return {}
        q = FleetQueries(caps, snapshot.window.duration)
        wanted = set(keys)
        out = {}
        uuids = sorted({k.uuid for k in keys})
        at = snapshot.window.end
        chunks = [(q.memory(uuids[i : i + 200]), at) for i in range(0, len(uuids), 200)]
        for answer in self.client.vectors(chunks):  # side by side, through the bounded pool
            for s in answer:
                key = self._key(s.labels, caps)
                if key in wanted and np.isfinite(s.value):
                    out[key] = s.value
        return out

    def memory_peaks(
        self, snapshot: FleetSnapshot, keys: Sequence[DeviceKey], quantile: float
    ) -> dict[DeviceKey, MemoryPeak]:
        caps = snapshot.capabilities
        if not keys or not caps.memory:
            return {}
        q = FleetQueries(caps, snapshot.window.duration)
        wanted = set(keys)
        uuids = sorted({k.uuid for k in keys})
        at = snapshot.window.end
        chunks = [uuids[i : i + 200] for i in range(0, len(uuids), 200)]
        queries = [(q.memory_peak(c, quantile), at) for c in chunks]
        queries += [(q.memory_capacity(c), at) for c in chunks]
        answers = self.client.vectors(queries)  # side by side, through the bounded pool
        peaks: dict[DeviceKey, float] = {}
        capacity: dict[str, float] = {}  # by UUID: every holder of a GPU shares its memory
        for i, answer in enumerate(answers):
            for s in answer:
                key = self._key(s.labels, caps)
                if key is None or not np.isfinite(s.value):
                    continue
                if i < len(chunks):
                    if key in wanted:
                        peaks[key] = s.value
                else:
                    capacity[key.uuid] = max(capacity.get(key.uuid, 0.0), s.value)
        return {k: MemoryPeak(v, capacity.get(k.uuid)) for k, v in peaks.items()}

    def instant_value(self, promql: str, at: datetime) -> float | None:
        samples = self._vector(promql, at)
        if not samples:
            return None
        return float(sum(s.value for s in samples))


def _fitting(
    caps: Capabilities, metric: str, keys: list[DeviceKey], span: TimeWindow, step: float, scale: float
) -> list[SpanTerm]:
    """Terms for ``keys`` whose longest aggregate (a run count, repeated once per piece of a long
    span) stays under the query length limit: halved until it does."""
    term = SpanTerm(caps, metric, keys, span, step, scale)
    if len(keys) == 1 or len(term.state_runs(True, 0.0)) <= MAX_QUERY_CHARS - 500:
        return [term]
    half = len(keys) // 2
    return _fitting(caps, metric, keys[:half], span, step, scale) + _fitting(
        caps, metric, keys[half:], span, step, scale
    )


def _term_keys(keys: list[DeviceKey]) -> Iterator[list[DeviceKey]]:
    """One span's holders in terms: at most 40 pods each, a pod's GPUs never split between two
    (a term naming a pod selects all of its GPUs); holders without a pod 15 GPUs at a time."""
    podless = sorted(k for k in keys if not k.pod)
    for i in range(0, len(podless), HOLDERS_PER_TERM):
        yield podless[i : i + HOLDERS_PER_TERM]
    by_pod: dict[str, list[DeviceKey]] = defaultdict(list)
    for key in sorted(k for k in keys if k.pod):
        by_pod[key.pod].append(key)
    pods = sorted(by_pod)
    for i in range(0, len(pods), PODS_PER_TERM):
        yield [k for pod in pods[i : i + PODS_PER_TERM] for k in by_pod[pod]]


def _near_spans(holders: Sequence[Window]) -> Iterator[tuple[TimeWindow, list[str]]]:
    """Holders' spans gathered while their union stays within twice the longest of them (and 150
    pods): the union, and the pods."""
    start = end = None
    longest = timedelta(0)
    pods: set[str] = set()
    # A pod's GPUs side by side: pods that started in the same second (a Job's parallel pods, a
    # fleet brought up at once) would otherwise be named again in every query holding one of them.
    for key, span in sorted(holders, key=lambda h: (h[1].start, h[0].namespace, h[0].pod)):
        if start is not None and end is not None:
            wider = max(longest, span.duration)
            full = key.pod not in pods and len(pods) >= PODS_PER_QUERY
            if max(end, span.end) - start > 2 * wider or full:
                yield TimeWindow(start=start, end=end), sorted(pods)
                start = None
        if start is None or end is None:
            start, end, longest, pods = span.start, span.end, timedelta(0), set()
        end, longest = max(end, span.end), max(longest, span.duration)
        pods.add(key.pod)
    if start is not None and end is not None:
        yield TimeWindow(start=start, end=end), sorted(pods)


def _attempt(call: Callable[[], list[str]]) -> tuple[list[str], DataUnavailableError | None]:
    """A discovery call's answer, or the error it met (raised once the answers are weighed)."""
    try:
        return call(), None
    except DataUnavailableError as e:
        return [], e


def _by_span(
    group: tuple[tuple[str, str, TimeWindow], object],
) -> tuple[datetime, datetime, str]:
    (metric, job, span), _ = group
    return (span.end, span.start, metric + "/" + job)


_labels_of, _value_of = itemgetter(0), itemgetter(1)
_values = methodcaller("values")


class _KeyMemo(dict[tuple[tuple[str, ...], tuple[str, ...]], DeviceKey | None]):
    """Device keys by label set (its names and its values, in order), each made on first sight.

    Names and values apart, the names' tuple kept once per shape of label set: a key holds three
    objects, where a tuple of (name, value) pairs holds one per label (at 10,000 GPUs, megabytes
    held while the quantiles' answers are parsed)."""

    def __init__(self, make: Callable[[Mapping[str, str]], DeviceKey | None]) -> None:
        super().__init__()
        self.make = make
        self.names: dict[tuple[str, ...], tuple[str, ...]] = {}

    def __missing__(self, label_set: tuple[tuple[str, ...], tuple[str, ...]]) -> DeviceKey | None:
        key = self[label_set] = self.make(dict(zip(*label_set, strict=True)))
        return key


def _first(values: Mapping[str, list[float]], name: str) -> float | None:
    """The first value an aggregate answered (None: it answered nothing)."""
    found = values.get(name)
    return found[0] if found else None


def _label_sets(
    names: dict[tuple[str, ...], tuple[str, ...]], labels: Sequence[Mapping[str, str]]
) -> Iterator[tuple[tuple[str, ...], tuple[str, ...]]]:
    """Each label set as its names (one tuple per shape, kept in ``names``) and its values: two
    objects held per distinct set, where (name, value) pairs hold one per label; mapped in C."""
    shapes = list(map(tuple, labels))
    shapes = list(map(names.setdefault, shapes, shapes))
    return zip(shapes, map(tuple, map(_values, labels)), strict=True)


def _keys_by_label_set(memo: _KeyMemo, labels: list[dict[str, str]]) -> Iterator[DeviceKey | None]:
    """Each label set's key from ``memo``, mapped in C (no Python call per set but a miss)."""
    return map(memo.__getitem__, _label_sets(memo.names, labels))


# The labels a closer look's answer row carries beside its holder's: what it is an aggregate of.
_ROW_TAGS = (AGGREGATE, promql.ROLLUP, promql.PHI, dcgm.LE)


def _histogram_name(le: str) -> str:
    """The name a sample-histogram bucket's increase is read under, by its bound."""
    return f"histogram le={le}"


class _NameMemo(dict[tuple[str, ...], tuple[str, ...]]):
    """The aggregates an answer row holds, by its ``_ROW_TAGS`` values (a handful per round).

    Only the histogram's rows carry ``le`` (every other aggregate is grouped by the device labels
    alone), each bucket a name of its own; one holder has one row per name (its own ``by``)."""

    def __init__(self, levels: Mapping[str, float]) -> None:
        super().__init__()
        self.levels = levels

    def __missing__(self, tags: tuple[str, ...]) -> tuple[str, ...]:
        le = tags[-1]
        held = aggregate_names(dict(zip(_ROW_TAGS, tags, strict=True)), self.levels)
        if le:
            held = tuple(_histogram_name(le) for name in held if name == "histogram")
        self[tags] = held
        return held


_namespace, _pod = methodcaller("get", "namespace", ""), methodcaller("get", "pod", "")


def _levels(q_low: float, q_high: float, with_max: bool) -> dict[str, float]:
    """The statistics that are quantiles, by name, with the maximum as level 1 if asked."""
    levels = {"q_low": q_low, "q_high": q_high, "median": 0.5}
    return levels | {"max": 1.0} if with_max else levels


def _ranks(q: FleetQueries, metric: str, q_low: float, q_high: float) -> tuple[list[str], dict[str, float]]:
    """The snapshot's quantiles by name, with the maximum as level 1 where one sort gives them all
    (MetricsQL, the maximum not read from rollups), and the queries that do, a part of the fleet
    each (none: one query per level, and the maximum apart)."""
    levels = _levels(q_low, q_high, with_max=q.caps.metricsql and q.max_from_samples(metric))
    distinct = sorted(set(levels.values()))
    queries = [q.device_quantiles(metric, distinct, part) for part in q.parts]
    return [query for query in queries if query is not None], levels


def _sum_and_series_queries(q: FleetQueries, metric: str) -> list[str]:
    """``device_sum_and_series``' queries, a part of the fleet each (none without MetricsQL)."""
    queries = [q.device_sum_and_series(metric, part) for part in q.parts]
    return [query for query in queries if query is not None]


def _by_level(rows: Mapping[str, list[VectorSample]]) -> dict[float, list[VectorSample]]:
    """``device_quantiles``' rows by level (its tag, a number)."""
    out: dict[float, list[VectorSample]] = {}
    for tag, found in rows.items():
        try:
            out[float(tag)] = found
        except ValueError:
            continue  # a row without a level: not ours to read
    return out


def _tag_of(item: str | tuple[str, str]) -> str | None:
    return item[1] if isinstance(item, tuple) else None


def _text_of(item: str | tuple[str, str]) -> str:
    return item[0] if isinstance(item, tuple) else item


def _chunks(items: Sequence[str], size: int) -> Iterator[Sequence[str]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _added(
    keys: Sequence[DeviceKey | None], answer: Sequence[VectorSample], kept: Container[DeviceKey | None]
) -> dict[DeviceKey, float]:
    """The answer's values per holder in ``kept``, rows of the same holder added up."""
    out: dict[DeviceKey, float] = {}
    for key, s in zip(keys, answer, strict=True):
        if key is not None and key in kept:
            out[key] = out.get(key, 0.0) + s.value
    return out


def _unrequested(counts: Mapping[DeviceKey, object], gpu_requests: Sequence[VectorSample]) -> bool:
    """Whether a pod holds a GPU in the window without a GPU request kube-state-metrics reports."""
    requested = {pid for pid, s in zip(_pids(gpu_requests), gpu_requests, strict=True) if s.value > 0}
    return any(key.pod and key.pod_id not in requested for key in counts)


def _pids(answer: Sequence[VectorSample]) -> Iterator[PodId]:
    """Each sample's (namespace, pod), looked up in C rather than by a Python call per sample."""
    labels = list(map(_labels_of, answer))
    return zip(map(_namespace, labels), map(_pod, labels), strict=True)


def _merge(parts: Sequence[RangeSeries]) -> tuple[np.ndarray, np.ndarray]:
    """One time-ordered series from pieces (time chunks overlap by one sample at their edges)."""
    if not parts:
        return np.empty(0), np.empty(0)
    t = np.concatenate([p.timestamps for p in parts])
    v = np.concatenate([p.values for p in parts])
    t, first = np.unique(t, return_index=True)
    return t, v[first]
