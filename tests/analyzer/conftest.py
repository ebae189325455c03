"""Fixtures for the analyzer's tests: analyses over the shared servers, and builders for detector inputs.

The precision/recall of every end-to-end run is collected here and printed in pytest's terminal
summary (whatever ``-s`` says), so CI logs show the numbers docs/analyzer.md quotes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from analyzer.pipeline import Analysis, analyze_in_detail
from analyzer.sources.prometheus.source import PrometheusSource
from analyzer.sources.prometheus_api import PrometheusConfig
from common.model import FindingKind
from common.thresholds import Thresholds
from harness.servers import PrometheusServer, VictoriaMetricsServer
from simulation.fleet import Fleet, expected_findings, load_scenario, score, simulate
from simulation.fleet.scenario import LabelStyle
from simulation.fleet.truth import window_of
from simulation.in_memory_source import SimulatedSource

# (label, kind) → (precision, recall, tp, fp, fn); filled by the end-to-end tests.
SCORES: dict[tuple[str, str], tuple[float, float, int, int, int]] = {}


Score = dict[FindingKind, tuple[float, float, int, int, int]]


def _record(label: str, analysis: Analysis, fleet: Fleet) -> Score:
    truth = expected_findings(fleet, window_of(fleet))
    found = {f.workload: f.kind for f in analysis.report.findings}
    result = score(truth, found)
    for kind, numbers in result.items():
        SCORES[(label, kind.value)] = numbers
    return result


@pytest.fixture(scope="session")
def scoreboard() -> Callable[[str, Analysis, Fleet], Score]:
    """Score an analysis against the ground truth and keep the numbers for the terminal summary."""
    return _record


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not SCORES:
        return
    tr = terminalreporter
    tr.section("analyzer precision / recall against the simulator's ground truth")
    width = max(34, *(len(label) for label, _ in SCORES))
    tr.write_line(
        f"{'run':<{width}} {'kind':<24} {'precision':>9} {'recall':>7} {'tp':>4} {'fp':>4} {'fn':>4}"
    )
    for (label, kind), (p, r, tp, fp, fn) in sorted(SCORES.items()):
        tr.write_line(f"{label:<{width}} {kind:<24} {p:>9.3f} {r:>7.3f} {tp:>4} {fp:>4} {fn:>4}")


# --- analyses over the shared fleets ---------------------------------------------------------------


def run(source: PrometheusSource | SimulatedSource, fleet: Fleet) -> Analysis:
    window = window_of(fleet)
    return analyze_in_detail(source, window, Thresholds(), now=window.end)


@pytest.fixture(scope="session")
def prometheus_analysis(standard_fleet: Fleet, prometheus_standard: PrometheusServer) -> Analysis:
    return run(PrometheusSource(PrometheusConfig(prometheus_standard.url)), standard_fleet)


@pytest.fixture(scope="session")
def victoria_analysis(standard_fleet: Fleet, victoria_standard: VictoriaMetricsServer) -> Analysis:
    return run(PrometheusSource(PrometheusConfig(victoria_standard.url)), standard_fleet)


@pytest.fixture(scope="session")
def simulated_analysis(standard_fleet: Fleet) -> Analysis:
    return run(SimulatedSource(standard_fleet), standard_fleet)


@pytest.fixture(scope="session")
def relabelled_fleet() -> Fleet:
    """The standard fleet as a relabelling scrape config and a 0-1 recording rule would store it."""
    scenario = load_scenario("standard").model_copy(
        update={"labels": LabelStyle(hostname="hostname", pod_prefix="exported_"), "gpu_util_unit": "ratio"}
    )
    return simulate(scenario)


@pytest.fixture(scope="session")
def victoria_relabelled(
    relabelled_fleet: Fleet, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[VictoriaMetricsServer]:
    # VictoriaMetrics imports in a second or two, where a Prometheus backfill would take ~15 s.
    with VictoriaMetricsServer(tmp_path_factory.mktemp("victoria-relabelled")) as server:
        server.import_series(relabelled_fleet.series)
        yield server


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return Path(__file__).resolve().parent.parent / "fixtures" / "prometheus"
