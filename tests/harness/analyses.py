"""One simulated fleet analysed through each source the tests compare: in memory, real Prometheus
(backfilled blocks) and real VictoriaMetrics (imported series)."""

from __future__ import annotations

from pathlib import Path

import pytest

from analyzer.pipeline import analyze_in_detail
from analyzer.sources.prometheus.source import PrometheusSource
from analyzer.sources.prometheus_api import PrometheusConfig
from common.model import FindingsReport
from common.thresholds import Thresholds
from harness.servers import PrometheusServer, VictoriaMetricsServer, backfill_blocks
from simulation.fleet import Fleet
from simulation.fleet.truth import window_of
from simulation.in_memory_source import SimulatedSource

# Parametrize a test with these to run it on each source (the servers' tests carry their marks).
TSDBS = [
    pytest.param("in-memory"),
    pytest.param("prometheus", marks=pytest.mark.prometheus),
    pytest.param("victoriametrics", marks=pytest.mark.victoriametrics),
]


def report_on(
    fleet: Fleet, tsdb: str, tmp_path: Path, thresholds: Thresholds | None = None
) -> FindingsReport:
    """The findings of the fleet's whole window, read from ``tsdb`` (one of :data:`TSDBS`)."""
    window = window_of(fleet)
    t = thresholds or Thresholds()
    if tsdb == "in-memory":
        return analyze_in_detail(SimulatedSource(fleet), window, t, now=window.end).report
    server: PrometheusServer | VictoriaMetricsServer
    if tsdb == "prometheus":
        server = PrometheusServer(tmp_path / "tsdb", blocks=backfill_blocks(fleet.series, tmp_path / "b"))
    else:
        server = VictoriaMetricsServer(tmp_path / "tsdb")
    with server:
        if isinstance(server, VictoriaMetricsServer):
            server.import_json_lines(fleet.series)
        source = PrometheusSource(PrometheusConfig(server.url))
        return analyze_in_detail(source, window, t, now=window.end).report
