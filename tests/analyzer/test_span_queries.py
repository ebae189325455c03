"""The closer looks' TSDB aggregates equal the numpy twins over the raw samples, and no raw pulls.

Every holder of the standard fleet is looked at over the whole window and over a span that starts
mid-window (as a young pod's does); VictoriaMetrics and Prometheus must give the numbers numpy gives the
simulator's own samples: counts exactly, statistics and shares to rounding.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import requests

from analyzer.pipeline import analyze
from analyzer.sources.aggregates import CloserLook
from analyzer.sources.prometheus_api import PrometheusClient, PrometheusConfig, PrometheusSession
from analyzer.sources.prometheus_source import PrometheusSource
from common.model import TimeWindow
from common.thresholds import Thresholds
from harness.servers import VictoriaMetricsServer
from simulation.fleet import Fleet
from simulation.fleet.truth import window_of
from simulation.metrics_source import SimulatedSource

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
        for name in ("mean", "max", "q_low", "q_high"):
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
