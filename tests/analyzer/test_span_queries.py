"""The closer looks' TSDB aggregates equal the numpy twins over the raw samples, and no raw pulls.

Every holder of the standard fleet is looked at over the whole window and over a span that starts
mid-window (as a young pod's does); VictoriaMetrics and Prometheus must give the numbers numpy gives the
simulator's own samples: counts exactly, statistics and shares to rounding.
"""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests

from analyzer.pipeline import analyze
from analyzer.sources import dcgm, fleet_queries, span_queries
from analyzer.sources.aggregates import CloserLook
from analyzer.sources.fleet_queries import FleetQueries
from analyzer.sources.prometheus import spans as closer_looks
from analyzer.sources.prometheus.source import PrometheusSource
from analyzer.sources.prometheus_api import PrometheusClient, PrometheusConfig, PrometheusSession
from common.model import DataloaderStarvationEvidence, FindingKind, TimeWindow
from common.thresholds import Thresholds
from harness.recordings import JobPod, Readings, cluster_series, scraped
from harness.servers import VictoriaMetricsServer, serving
from simulation.fleet import Fleet
from simulation.fleet.simulator import Series
from simulation.fleet.truth import window_of
from simulation.in_memory_source import SimulatedSource

pytestmark = [pytest.mark.slow, pytest.mark.victoriametrics, pytest.mark.prometheus]
T = Thresholds()


@pytest.mark.parametrize("tsdb", ["victoria_standard", "prometheus_standard"])
def test_span_aggregates_match_numpy_over_the_raw_samples(
    tsdb: str, request: pytest.FixtureRequest, standard_fleet: Fleet
) -> None:
    window = window_of(standard_fleet)
    server = request.getfixturevalue(tsdb)
    ours = PrometheusSource(PrometheusConfig(server.url))
    twin = SimulatedSource(standard_fleet)
    snapshot = ours.snapshot(window, T)
    late = TimeWindow(start=window.start + timedelta(hours=2, seconds=7), end=window.end)
    keys = sorted(k for k in snapshot.devices if k.allocated)
    assert keys
    looks = [
        CloserLook(k, span, stats=True, histogram=snapshot.devices[k].histogram is not None, shares=True)
        for k in keys
        for span in (window, late)
    ]
    got = ours.span_numbers(snapshot, looks, T)
    want = twin.span_numbers(twin.snapshot(window, T), looks, T)
    compared = 0
    for w, expected in want.items():
        if expected.stats is None:
            continue
        actual = got[w]
        assert actual.stats is not None, w
        assert actual.stats.samples == expected.stats.samples, w
        for name in ("mean", "max", "q_low", "q_high", "median"):
            assert getattr(actual.stats, name) == pytest.approx(getattr(expected.stats, name), abs=1e-6), (
                w,
                name,
            )
        assert actual.shares is not None and expected.shares is not None
        assert actual.shares.stalled == pytest.approx(expected.shares.stalled, abs=1e-9), w
        assert actual.shares.busy == pytest.approx(expected.shares.busy, abs=1e-9), w
        assert (actual.phases is None) == (expected.phases is None), w
        if actual.phases is not None and expected.phases is not None:
            assert actual.phases.stalled_s == pytest.approx(expected.phases.stalled_s, rel=1e-6), w
            assert actual.phases.busy_s == pytest.approx(expected.phases.busy_s, rel=1e-6), w
        if expected.histogram is not None:
            assert actual.histogram is not None
            assert actual.histogram.stalled == pytest.approx(expected.histogram.stalled, abs=0.01), w
        compared += 1
    assert compared >= len(keys)  # both spans of most holders hold samples

    starts = [(k, late) for k in keys]
    assert ours.first_busy(snapshot, starts, T.idle_percent) == pytest.approx(
        twin.first_busy(twin.snapshot(window, T), starts, T.idle_percent)
    )


class NotingSession(PrometheusSession):
    def __init__(self) -> None:
        super().__init__()
        self.kinds: list[tuple[str, str]] = []

    def request(self, method: str | bytes, url: str | bytes, *args: Any, **kwargs: Any) -> requests.Response:
        response = super().request(method, url, *args, **kwargs)
        params = kwargs.get("data") or kwargs.get("params") or {}
        if str(url).endswith("/api/v1/query"):
            self.kinds.append((response.json()["data"]["result"].result_type, dict(params)["query"]))
        return response


def test_detection_reads_aggregates_never_raw_samples(
    victoria_standard: VictoriaMetricsServer, standard_fleet: Fleet
) -> None:
    window = window_of(standard_fleet)
    session = NotingSession()
    source = PrometheusSource(PrometheusClient(PrometheusConfig(victoria_standard.url), session=session))
    analyze(source, window, T, now=window.end)
    raw = [query for kind, query in session.kinds if kind == "matrix"]
    # The one exception: one device per scrape job over the window's last hour, for the interval.
    assert raw and all(query.endswith("[3600s]") for query in raw), raw
    assert len(raw) == len(source.snapshot(window, T).capabilities.interval_s)


@pytest.mark.parametrize("tsdb", ["victoria_standard", "prometheus_standard"])
def test_long_spans_cut_into_pieces_give_the_same_numbers(
    tsdb: str, request: pytest.FixtureRequest, standard_fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Subqueries over spans longer than the step limit go out in pieces: counts and shares stay exact,
    a run crossing a cut counts once per piece, and the first busy sample is the earliest piece's."""
    steps = 97  # the 6 h window at 15 s: 15 pieces, cuts off the step grid of the span's start
    monkeypatch.setattr(span_queries, "MAX_SUBQUERY_STEPS", steps)
    window = window_of(standard_fleet)
    ours = PrometheusSource(PrometheusConfig(request.getfixturevalue(tsdb).url))
    twin = SimulatedSource(standard_fleet)
    snapshot = ours.snapshot(window, T)
    late = TimeWindow(start=window.start + timedelta(hours=2, seconds=7), end=window.end)
    keys = sorted(k for k, d in snapshot.devices.items() if k.allocated and d.interval_s == 15.0)
    looks = [CloserLook(k, span, shares=True) for k in keys for span in (window, late)]
    got = ours.span_numbers(snapshot, looks, T)
    want = twin.span_numbers(twin.snapshot(window, T), looks, T)
    compared = 0
    for (key, span), expected in want.items():
        if expected.shares is None:
            continue
        actual = got[(key, span)]
        assert actual.shares is not None
        assert actual.shares.weight == expected.shares.weight
        assert actual.shares.stalled == pytest.approx(expected.shares.stalled, abs=1e-9)
        assert actual.shares.busy == pytest.approx(expected.shares.busy, abs=1e-9)
        cuts = int(span.duration.total_seconds() // (steps * 15.0))
        assert cuts >= 4
        if expected.phases is not None and actual.phases is not None:
            for state in ("stalled", "busy"):
                samples = getattr(expected.shares, state) * expected.shares.weight
                if samples == 0:
                    continue
                runs_want = samples * 15.0 / getattr(expected.phases, f"{state}_s")
                runs_got = samples * 15.0 / getattr(actual.phases, f"{state}_s")
                assert runs_want - 1e-6 <= runs_got <= runs_want + cuts + 1e-6, (key, state)
        compared += 1
    assert compared >= len(keys)
    starts = [(k, late) for k in keys]
    assert ours.first_busy(snapshot, starts, T.idle_percent) == pytest.approx(
        twin.first_busy(twin.snapshot(window, T), starts, T.idle_percent)
    )


@pytest.mark.victoriametrics
def test_a_seven_day_window_runs_within_victoriametrics_default_limits(tmp_path: Path) -> None:
    """7 days at 15 s is 40,320 steps, over VictoriaMetrics' default 30,000 points per series, and a
    run count over five pieces of it, for 15 GPUs at once, would pass its 16,384-character limit on a
    query's text: the shares of 16 starving Jobs judged over the whole week still come back."""
    end = datetime(2026, 1, 5, tzinfo=UTC)
    t = end.timestamp() - 15.0 * np.arange(8 * 5760, 0, -1)  # eight days, every 15 s
    values = np.where(np.arange(t.size) % 8 < 3, 2.0, 95.0)  # 45 s stalled, 75 s busy, over and over
    series = []
    for i in range(16):
        where = JobPod(
            namespace="ml", job=f"week-{i:02d}", gpu_uuid=f"GPU-6a8f3c9e-week-{i:04d}-000000000000"
        )
        series += list(cluster_series(Readings(t, values), where, 15.0))
    window = TimeWindow.ending(end, timedelta(days=7))
    with VictoriaMetricsServer(tmp_path / "tsdb") as server:
        server.import_series(series)
        sent = sum(s.timestamps.size for s in series if s.name == "DCGM_FI_DEV_GPU_UTIL")
        _wait_for_samples(server.url, "DCGM_FI_DEV_GPU_UTIL", sent, end)
        report = analyze(PrometheusSource(PrometheusConfig(server.url)), window, T, now=end)
    assert len(report.findings) == 16
    for finding in report.findings:
        assert finding.kind is FindingKind.DATALOADER_STARVATION, (finding.workload.key(), finding.evidence)
        assert isinstance(finding.evidence, DataloaderStarvationEvidence)
        assert finding.evidence.pattern == "bimodal"


@pytest.mark.parametrize("tsdb", ["victoria_standard", "prometheus_standard"])
def test_both_ways_of_telling_a_fresh_sample_count_the_same(
    tsdb: str, request: pytest.FixtureRequest, standard_fleet: Fleet
) -> None:
    """`timestamp()` (fast on VictoriaMetrics) and `count_over_time` (fast on Prometheus' engine) keep
    the same samples, and so do MetricsQL's counting rollups over the raw range, and its
    statistics asked two rollups at a time (VictoriaMetrics only): what discovery finds changes
    the speed, never the numbers."""
    window = window_of(standard_fleet)
    server = request.getfixturevalue(tsdb)
    source = PrometheusSource(PrometheusConfig(server.url))
    snapshot = source.snapshot(window, T)
    victoria = tsdb == "victoria_standard"
    assert snapshot.capabilities.prometheus_engine is not victoria
    assert snapshot.capabilities.metricsql is victoria
    late = TimeWindow(start=window.start + timedelta(hours=5, seconds=7), end=window.end)
    keys = sorted(k for k, d in snapshot.devices.items() if k.allocated and d.histogram is None)[:6]
    looks = [CloserLook(k, late, stats=True, shares=True) for k in keys]
    answers = []
    for engine, metricsql in ((False, False), (True, False), *([(False, True)] if victoria else [])):
        caps = replace(snapshot.capabilities, prometheus_engine=engine, metricsql=metricsql)
        answers.append(source.span_numbers(replace(snapshot, capabilities=caps), looks, T))
    assert all(a == answers[0] for a in answers[1:])
    assert sum(n.shares is not None for n in answers[0].values()) >= 4
    stats = [n.stats for n in answers[0].values() if n.stats is not None]
    assert len(stats) >= 4 and all(s.median is not None for s in stats)


def test_last_running_report_from_metricsql_is_the_twins(
    victoria_standard: VictoriaMetricsServer, standard_fleet: Fleet
) -> None:
    """On VictoriaMetrics each pod's last ``Running`` report comes from the raw samples' own times
    (``tmax_over_time``), exactly as the in-memory twin reads them."""
    window = window_of(standard_fleet)
    snapshot = PrometheusSource(PrometheusConfig(victoria_standard.url)).snapshot(window, T)
    assert snapshot.capabilities.metricsql
    twin = SimulatedSource(standard_fleet).snapshot(window, T)
    ours = {pid: p.last_seen for pid, p in snapshot.pods.items()}
    assert ours
    assert ours == {pid: p.last_seen for pid, p in twin.pods.items() if pid in ours}


@pytest.mark.victoriametrics
def test_a_pod_that_stopped_running_is_last_seen_at_its_last_running_report(tmp_path: Path) -> None:
    """A pod that finished inside the window is last seen at its last ``Running`` sample; one never
    running, not at all. MetricsQL reads the raw samples' times; the subquery it replaces steps a
    minute at a time and may see the last report up to a step early, never later."""
    end = datetime(2026, 1, 5, tzinfo=UTC)
    window = TimeWindow.ending(end, timedelta(hours=2))
    t = end.timestamp() - 7200 + 7 + np.arange(0, 7200, 30.0)  # kube-state-metrics every 30 s
    stopped = t[t.size // 2]  # its last Running report
    phases = {"runs": {"Running": t >= 0}, "done": {"Running": t <= stopped, "Succeeded": t > stopped}}
    phases["waits"] = {"Pending": t >= 0}
    series = []
    for pod, shown in phases.items():
        ident = (("namespace", "ml"), ("pod", pod), ("uid", f"uid-{pod}"))
        for phase in ("Pending", "Running", "Succeeded"):
            values = shown.get(phase, t < 0).astype(float)
            series.append(Series(dcgm.KUBE_POD_STATUS_PHASE, (*ident, ("phase", phase)), t, values))
        gpu = (
            *ident,
            ("node", "n1"),
            ("container", "c"),
            ("resource", "nvidia_com_gpu"),
            ("unit", "integer"),
        )
        series.append(Series(dcgm.KUBE_POD_REQUESTS, gpu, t, np.ones(t.size)))
    caps = dcgm.Capabilities.discovered(
        {dcgm.KUBE_POD_OWNER, dcgm.KUBE_POD_STATUS_PHASE, dcgm.KUBE_POD_REQUESTS},
        (dcgm.DEV_GPU_UTIL,),
        {dcgm.UUID, "namespace", "pod"},
        {"namespace", "pod"},
        (),
    )
    with VictoriaMetricsServer(tmp_path / "tsdb") as server:
        server.import_series(series)
        _wait_for_samples(server.url, dcgm.KUBE_POD_REQUESTS, 3 * t.size, end)
        client = PrometheusClient(PrometheusConfig(server.url))
        seen = [
            {
                s.labels["pod"]: s.value
                for s in client.vector(
                    FleetQueries(replace(caps, metricsql=m), window.duration).pod_last_seen(), end
                )
            }
            for m in (True, False)
        ]
    raw, stepped = seen
    assert raw == {"runs": t[-1], "done": stopped}
    assert stepped.keys() == raw.keys()
    assert all(0 <= raw[pod] - stepped[pod] < 60 for pod in raw)


@pytest.mark.victoriametrics
def test_pods_of_one_name_get_each_their_own_spans_numbers(tmp_path: Path) -> None:
    """Closer looks name pods, not GPUs. Two pods named alike in two namespaces, and a pod recreated
    under its name on another GPU, are judged over different spans: a term naming the pod selects all
    of them, so no two such terms may share a query, and each holder gets the numbers of its own
    span (counts exactly, as numpy counts the scraped samples)."""
    end = datetime(2026, 1, 5, tzinfo=UTC)
    rng = np.random.default_rng(11)
    series = []
    scraped_by_uuid: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for namespace, uuid, from_h, to_h in (
        ("a", "GPU-6a8f3c9e-name-0001-000000000000", 6, 0),
        ("b", "GPU-6a8f3c9e-name-0002-000000000000", 6, 0),
        ("a", "GPU-6a8f3c9e-name-0003-000000000000", 12, 7),  # the same pod's first incarnation
    ):
        t = end.timestamp() - 3600 * from_h + np.arange(0, 3600 * (from_h - to_h), 5.0)
        readings = Readings(t, np.where(rng.random(t.size) < 0.4, 3.0, rng.uniform(11, 100, t.size)).round(1))
        series += list(
            cluster_series(readings, JobPod(namespace=namespace, job="train", gpu_uuid=uuid), 15.0)
        )
        scraped_by_uuid[uuid] = scraped(readings, 15.0)
    window = TimeWindow.ending(end, timedelta(hours=12))
    spans = {
        "GPU-6a8f3c9e-name-0001-000000000000": [
            TimeWindow(start=end - timedelta(hours=5, seconds=-7), end=end),
            TimeWindow(start=end - timedelta(hours=2, seconds=-11), end=end),
        ],
        "GPU-6a8f3c9e-name-0002-000000000000": [TimeWindow(start=end - timedelta(hours=3), end=end)],
        "GPU-6a8f3c9e-name-0003-000000000000": [
            TimeWindow(start=end - timedelta(hours=11), end=end - timedelta(hours=7))
        ],
    }
    with VictoriaMetricsServer(tmp_path / "tsdb") as server:
        server.import_series(series)
        source = PrometheusSource(PrometheusConfig(server.url))
        snapshot = source.snapshot(window, T)
        keys = {k.uuid: k for k in snapshot.devices}
        assert {k.pod for k in keys.values()} == {"train-x7k2p"}
        looks = [
            CloserLook(keys[uuid], span, stats=True, shares=True)
            for uuid, own in spans.items()
            for span in own
        ]
        got = source.span_numbers(snapshot, looks, T)
    for look in looks:
        t, v = scraped_by_uuid[look.key.uuid]
        inside = v[(t > look.span.start.timestamp()) & (t <= look.span.end.timestamp())]
        numbers = got[(look.key, look.span)]
        assert numbers.stats is not None and numbers.shares is not None, look
        assert numbers.stats.samples == inside.size, look
        assert numbers.stats.mean == pytest.approx(inside.mean()), look
        assert numbers.stats.max == pytest.approx(inside.max()), look
        assert numbers.shares.stalled == pytest.approx(np.mean(inside <= T.starvation_idle_percent)), look
        assert numbers.shares.busy == pytest.approx(np.mean(inside > T.starvation_busy_percent)), look


def _wait_for_samples(url: str, metric: str, expected: int, end: datetime, timeout_s: float = 60.0) -> None:
    """Until the TSDB counts every sample imported: a test judges data, never a half-visible import."""
    deadline = time.monotonic() + timeout_s
    while True:
        r = requests.post(
            f"{url}/api/v1/query",
            data={"query": f"sum(count_over_time({metric}[30d]))", "time": f"{end.timestamp():.3f}"},
            timeout=30,
        )
        result = r.json()["data"]["result"]
        seen = int(float(result[0]["value"][1])) if result else 0
        if seen >= expected:
            return
        assert time.monotonic() < deadline, f"{seen} of {expected} imported samples visible"
        time.sleep(0.2)


@pytest.mark.parametrize("parts", [1, 4])
def test_snapshot_statistics_from_metricsql_match_numpy_over_the_raw_samples(
    victoria_standard: VictoriaMetricsServer,
    standard_fleet: Fleet,
    monkeypatch: pytest.MonkeyPatch,
    parts: int,
) -> None:
    """On VictoriaMetrics every quantile and the maximum come from one `quantiles_over_time`: each
    device's statistics are still numpy's over its raw samples (the window holds the same samples
    as the in-memory twin's on VictoriaMetrics; Prometheus 2 adds the one on its left edge), whether
    the fleet is asked in one part (a small fleet) or in four (a fleet above ``ONE_PART_SERIES``)."""
    if parts == 4:
        monkeypatch.setattr(fleet_queries, "ONE_PART_SERIES", 0)
    window = window_of(standard_fleet)
    source = PrometheusSource(PrometheusConfig(victoria_standard.url))
    sent: list[str] = []
    vector = source.client.vector
    monkeypatch.setattr(source.client, "vector", lambda q, at: sent.append(q) or vector(q, at))
    snapshot = source.snapshot(window, T)
    assert snapshot.capabilities.metricsql
    # Per utilization metric, one sort of the samples for each part of the fleet.
    sorts = [q for q in sent if "quantiles_over_time" in q]
    assert len(sorts) == parts * len(snapshot.capabilities.util_metrics)
    twin = SimulatedSource(standard_fleet).snapshot(window, T)
    compared = 0
    for key, device in snapshot.devices.items():
        expected = twin.devices.get(key)
        if expected is None or expected.stats is None:
            continue
        assert device.stats is not None, key
        assert device.stats.samples == expected.stats.samples, key
        for name in ("mean", "max", "q_low", "q_high", "median"):
            assert getattr(device.stats, name) == pytest.approx(getattr(expected.stats, name), abs=1e-6), (
                key,
                name,
            )
        compared += 1
    assert compared == len(snapshot.devices) == len(twin.devices) > 0  # every device, none left out


def test_the_fleet_is_sized_by_its_utilization_series_with_the_metricsql_probe(
    victoria_standard: VictoriaMetricsServer, standard_fleet: Fleet
) -> None:
    """The size that decides the snapshot's parts comes back with the MetricsQL probe: the
    utilization series reporting at the window's end (the standard fleet's, but for pods gone)."""
    window = window_of(standard_fleet)
    util = {(s.name, s.labels) for s in standard_fleet.series if s.name in dcgm.UTIL_METRICS}
    source = PrometheusSource(PrometheusConfig(victoria_standard.url))
    caps = source.discover(window, T)
    assert caps.metricsql
    assert caps.fleet_series is not None and 0.8 * len(util) <= caps.fleet_series <= len(util)
    assert source.client.stats.requests == 6  # no request of its own


def test_closer_looks_cut_into_more_queries_give_the_same_numbers(
    victoria_standard: VictoriaMetricsServer, standard_fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A query's answer rows are bounded (its parsed answer is held whole): a round cut into more,
    smaller queries gives the same numbers."""
    window = window_of(standard_fleet)
    source = PrometheusSource(PrometheusConfig(victoria_standard.url))
    snapshot = source.snapshot(window, T)
    late = TimeWindow(start=window.start + timedelta(hours=2, seconds=7), end=window.end)
    looks = [CloserLook(k, late, stats=True, shares=True) for k in sorted(snapshot.devices) if k.allocated]
    before = source.client.stats.requests
    whole = source.span_numbers(snapshot, looks, T)
    few = source.client.stats.requests - before
    monkeypatch.setattr(closer_looks, "MAX_ROWS_PER_QUERY", 5)
    before = source.client.stats.requests
    assert source.span_numbers(snapshot, looks, T) == whole
    assert source.client.stats.requests - before > few


@pytest.mark.prometheus
@pytest.mark.victoriametrics
@pytest.mark.parametrize("tsdb", ["prometheus", "victoriametrics"])
def test_a_gpu_listed_under_two_scrape_jobs_counts_every_sample(tsdb: str, tmp_path: Path) -> None:
    """A GPU whose scrape job was renamed an hour into the window is listed twice by the
    per-device answers (once per ``job``): its samples, mean and maximum are those of both parts,
    not of whichever row the TSDB lists first, and it is described by the job holding most of its
    samples (whose interval is then measured)."""
    end = datetime(2026, 1, 5, tzinfo=UTC)
    window = TimeWindow.ending(end, timedelta(hours=4))
    t = np.arange(window.start.timestamp() - 1800, end.timestamp() - 10, 15.0)
    half = end.timestamp() - 3 * 3600
    where = JobPod(namespace="ml", job="renamed")
    series: list[Series] = []
    inside = np.empty(0)
    for s in cluster_series(Readings(t, np.where(t < half, 20.0, 80.0)), where, 15.0, 30.0):
        if s.name != dcgm.DEV_GPU_UTIL:
            series.append(s)
            continue
        inside = s.timestamps[(s.timestamps > window.start.timestamp()) & (s.timestamps <= end.timestamp())]
        for job, kept in (("dcgm-exporter", s.timestamps < half), ("gpu-metrics", s.timestamps >= half)):
            labels = tuple((k, job if k == "job" else v) for k, v in s.labels)
            series.append(Series(s.name, labels, s.timestamps[kept], s.values[kept]))
    with serving(tsdb, series, tmp_path) as server:
        snapshot = PrometheusSource(PrometheusConfig(server.url)).snapshot(window, T)
    (device,) = snapshot.devices.values()
    assert device.stats is not None
    # Prometheus 2 counts a sample on the window's left edge; VictoriaMetrics does not.
    assert device.stats.samples - inside.size in (0, 1)
    assert device.stats.mean == pytest.approx(65.0, abs=0.5)  # 1 h at 20 %, 3 h at 80 %
    assert device.stats.max == 80.0
    assert device.info.job == "gpu-metrics"
    assert device.interval_s == pytest.approx(15.0)
