"""Discovery: which series the source holds over the window, so which capabilities a run has.

Five calls side by side, once per run: the metric names present (the GPU, Kubernetes and recording
rule names), the label names of the GPU utilization and pod owner series, the sample histogram's
bucket bounds, the build info (Prometheus' own engine) and a MetricsQL probe carrying the fleet's
series count. Then, within the snapshot, how far the recording-rule rollups cover the window. The
queries' text comes from ``FleetQueries`` (names and selectors) and ``rollups`` (coverage)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from math import isfinite

from analyzer.sources import dcgm, promql, rollups
from analyzer.sources.dcgm import Capabilities
from analyzer.sources.fleet_queries import FleetQueries
from analyzer.sources.pacing import run_all
from analyzer.sources.prometheus import log
from analyzer.sources.prometheus.batch import Batch
from analyzer.sources.prometheus_api import PrometheusClient
from analyzer.sources.rollups import Cover
from analyzer.sources.source_errors import NoDataError
from common.errors import DataUnavailableError
from common.model import TimeWindow
from common.thresholds import Thresholds

# MetricsQL only (a PromQL engine knows no such function), over a series that never exists.
METRICSQL_PROBE = 'count_le_over_time(gpu_analyzer_probe{never="set"}[1s], 0)'


def discover(
    client: PrometheusClient,
    scope: tuple[promql.Matcher, ...],
    recording_rules: bool,
    window: TimeWindow,
    t: Thresholds,
) -> tuple[Capabilities, set[str]]:
    """What the source holds over the window, and the label names of the GPU utilization series."""
    start, end = window.start, window.end
    # Four label calls side by side, with the engine's build info and the MetricsQL probe: the
    # three label calls that matter only if a name is present answer empty when it is not, and
    # one round trip is cheaper than two.
    extra = rollups.ALL_NAMES if recording_rules else ()
    calls: list[Callable[[], list[str]]] = [
        lambda: client.label_values("__name__", FleetQueries.names_match(extra, scope), start, end),
        lambda: client.label_names(FleetQueries.util_match(scope), start, end),
        lambda: client.label_names(promql.selector(dcgm.KUBE_POD_OWNER, scope), start, end),
        lambda: client.label_values(
            dcgm.LE, promql.selector(dcgm.SAMPLE_HISTOGRAM_BUCKET, scope), start, end
        ),
        lambda: _engine(client),
        lambda: _metricsql(client, scope, window),
    ]
    answers = run_all(client.limit, _attempt, calls)
    (names, failed), *rest, (engine, _), (metricsql, _) = answers
    if failed is not None:
        raise failed
    present = set(names)
    util = tuple(m for m in dcgm.UTIL_METRICS if m in present)
    if not util:
        # Said first: no GPU series is the finding, whatever the other calls met.
        raise NoDataError(
            f"{client.config.display_url}: no GPU utilization series ({', '.join(dcgm.UTIL_METRICS)}) "
            f"between {start.isoformat()} and {end.isoformat()}: is dcgm-exporter or gpu-exporter scraped?"
        )
    for _, failed in rest:
        if failed is not None:
            raise failed
    gpu_answer, ksm_answer, les = (answer for answer, _ in rest)
    ksm = dcgm.KUBE_POD_OWNER in present
    histogram = dcgm.SAMPLE_HISTOGRAM_BUCKET in present
    gpu_labels, ksm_labels = set(gpu_answer), set(ksm_answer) if ksm else set()
    caps = Capabilities.discovered(
        present,
        util,
        gpu_labels,
        ksm_labels,
        _histogram_le(les, t) if histogram else (),
        rollups.recorded(present, util),
        prometheus_engine=bool(engine),
        metricsql=bool(metricsql),
        fleet_series=int(metricsql[1]) if len(metricsql) > 1 else None,
        scope=scope,
    )
    return caps, gpu_labels


def cluster_values(client: PrometheusClient, label: str, window: TimeWindow) -> list[str]:
    """The values of the cluster label on the GPU utilization series in the window, sorted."""
    values = client.label_values(label, FleetQueries.util_match(), window.start, window.end)
    return sorted(v for v in values if v)


def rollup_covers(batch: Batch, caps: Capabilities, window: TimeWindow) -> dict[str, Cover]:
    """The metrics whose recording-rule rollups cover the whole window, and how (logged either way)."""
    if not caps.rollups:
        return {}
    latest: dict[str, datetime] = {}
    for s in batch.vector(rollups.latest_query(caps.rollups, caps.scope), window.end):
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
        for s in batch.vector(rollups.check_query(covers, caps.scope), window.end)
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


def _histogram_le(les: list[str], t: Thresholds) -> tuple[str, ...]:
    """The sample histogram's stalled, busy and +Inf bounds (none: its buckets do not fit)."""
    bounds = {le: v for le in les if (v := dcgm.parse_le(le)) is not None}
    try:
        return dcgm.pick_buckets(bounds, t.starvation_idle_percent, t.starvation_busy_percent)
    except ValueError as e:
        log.warning("ignoring %s: %s", dcgm.SAMPLE_HISTOGRAM_BUCKET, e)
        return ()


def _engine(client: PrometheusClient) -> list[str]:
    """``["prometheus"]`` when the server runs Prometheus' own engine (see Capabilities)."""
    try:
        return ["prometheus"] if "goVersion" in client.build_info() else []
    except DataUnavailableError:
        return []  # no build info to give: nothing follows from it


def _metricsql(client: PrometheusClient, scope: tuple[promql.Matcher, ...], window: TimeWindow) -> list[str]:
    """``["metricsql", n]`` when the server evaluates MetricsQL's counting rollups (see
    Capabilities), ``n`` the utilization series reporting at the window's end (left out where
    none is, or where the count could not be had); ``[]`` otherwise.

    Asked, not guessed from a version: PromQL engines refuse the unknown function (HTTP 400),
    and the probe's selector matches nothing, so that part costs the server nothing. The count
    rides on it (only this engine's snapshot asks a fleet in parts, by its size); where the two
    together are refused, the probe alone is asked again, so that a count the server would not
    give never costs the MetricsQL rollups.
    """
    with_size = f"{METRICSQL_PROBE} or {FleetQueries.util_series(scope)}"
    try:
        found = client.vector(with_size, window.end)
    except DataUnavailableError:
        try:
            client.vector(METRICSQL_PROBE, window.end)
        except DataUnavailableError:
            return []  # refused: PromQL only (a server that is down fails the other calls too)
        return ["metricsql"]
    counts = [s.value for s in found if isfinite(s.value)]
    return ["metricsql", str(round(max(counts)))] if counts else ["metricsql"]


def _attempt(call: Callable[[], list[str]]) -> tuple[list[str], DataUnavailableError | None]:
    """A discovery call's answer, or the error it met (raised once the answers are weighed)."""
    try:
        return call(), None
    except DataUnavailableError as e:
        return [], e
