"""Re-record tests/fixtures/prometheus/standard_fleet_analysis.json from a real Prometheus.

Run after changing any query the Prometheus-backed source sends::

    python tests/analyzer/record_prometheus_fixtures.py

It backfills the standard simulated fleet into a throw-away Prometheus, runs one analysis while
noting every request, and saves those exchanges (as the real server answered them) for replay:
sorted by request, each answer's series by their labels, so a re-record changes only what changed
(recording twice gives the same bytes). tests/analyzer/test_query_layer.py replays them, and says
when a request is missing from them.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import requests

# The repository root first (tests/analyzer must not shadow the package), then tests/ for `harness`.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from analyzer.pipeline import analyze
from analyzer.sources.prometheus.source import PrometheusSource
from analyzer.sources.prometheus_api import PrometheusClient, PrometheusConfig, PrometheusSession
from common.thresholds import Thresholds
from harness.recorded import FIXTURES, record
from harness.servers import PrometheusServer, backfill_blocks
from simulation.fleet import load_scenario, simulate
from simulation.fleet.truth import window_of

NAME = "standard_fleet_analysis"


class NotingSession(PrometheusSession):
    """A session that remembers the path and parameters of every request it sends."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, dict[str, str]]] = []

    def request(self, method: str | bytes, url: str | bytes, *args: Any, **kwargs: Any) -> requests.Response:
        params = kwargs.get("params") or kwargs.get("data") or {}
        self.calls.append((urlsplit(str(url)).path, {str(k): str(v) for k, v in dict(params).items()}))
        return super().request(method, url, *args, **kwargs)


def main() -> int:
    fleet = simulate(load_scenario("standard"))
    window = window_of(fleet)
    with tempfile.TemporaryDirectory() as tmp:
        blocks = backfill_blocks(fleet.series, Path(tmp) / "backfill")
        with PrometheusServer(Path(tmp) / "prometheus", blocks=blocks) as server:
            session = NotingSession()
            source = PrometheusSource(PrometheusClient(PrometheusConfig(server.url), session=session))
            analyze(source, window, Thresholds(), now=window.end)
            exchanges = record(server.url, session.calls, FIXTURES / f"{NAME}.json")
    print(f"recorded {len(exchanges)} exchanges to {FIXTURES / f'{NAME}.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
