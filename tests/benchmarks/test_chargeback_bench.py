"""The chargeback benchmark's dataset is what a real fleet would hold.

Its rollups are computed in Python (a month of 10,000 GPUs cannot be evaluated by promtool here):
on a small fleet they must equal, series by series and hour by hour, what promtool records from
alerts/gpu-chargeback.recording.yaml over the fleet's raw samples; and the bill from the benchmark's
layout (rollups, raw samples only where a chargeback still reads them) must equal the bill from
every raw sample.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from analyzer.chargeback.prices import Prices
from analyzer.chargeback.run import chargeback
from analyzer.sources.prometheus.chargeback import ChargebackReads
from analyzer.sources.prometheus_api import PrometheusClient, PrometheusConfig
from benchmarks.chargeback_bench import END, HOUR, Layout, fleet, ours_layout
from common import metric_names as m
from common.model import TimeWindow
from harness.servers import PrometheusServer, VictoriaMetricsServer, backfill_blocks, backfill_rules

pytestmark = pytest.mark.slow

RULES = Path(__file__).resolve().parents[2] / "alerts" / "gpu-chargeback.recording.yaml"
GPUS, DAYS = 10, 4  # one GPU never held; pods hand their GPUs on after 3 days
Key = frozenset[tuple[str, str]]


def _raw_layout() -> Layout:
    end = END.timestamp()
    return Layout(GPUS, DAYS, 60.0, ((end - DAYS * 86400, end),))


@pytest.fixture(scope="module")
def raw_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    work = tmp_path_factory.mktemp("chargeback-bench-raw")
    with PrometheusServer(
        work / "tsdb", blocks=backfill_blocks(fleet(_raw_layout()), work / "blocks")
    ) as server:
        yield server


def _rollups(
    series: Iterator[tuple[dict[str, str], list[float], list[float]]],
) -> dict[Key, dict[int, float]]:
    return {
        frozenset((k, v) for k, v in labels.items() if k != "__name__"): {
            round(t): v for t, v in zip(stamps, values, strict=True)
        }
        for labels, stamps, values in series
    }


def test_generated_rollups_are_the_rules(
    raw_prometheus: PrometheusServer, tmp_path_factory: pytest.TempPathFactory
) -> None:
    work = tmp_path_factory.mktemp("chargeback-bench-rules")
    layout = _raw_layout()
    blocks = backfill_rules(raw_prometheus.url, RULES, datetime.fromtimestamp(layout.start, UTC), END, work)
    with PrometheusServer(work / "tsdb", blocks=blocks) as server:
        client = PrometheusClient(PrometheusConfig(server.url))
        recorded = _rollups(
            (s.labels, list(s.timestamps), list(s.values))
            for s in client.matrix(f"{m.CHARGEBACK_ROLLUP}[{DAYS + 1}d]", END)
        )
    # promtool evaluates the group at its own offset past the hour, as Prometheus would.
    offset = min(t for points in recorded.values() for t in points) % HOUR
    generated = _rollups(
        (dict(s.labels), s.timestamps.tolist(), s.values.tolist())
        for s in fleet(Layout(GPUS, DAYS, 60.0, (), rollups_until=END.timestamp(), offset=offset))
        if s.name == m.CHARGEBACK_ROLLUP and len(s.timestamps)
    )
    assert set(recorded) == set(generated)
    for key, points in generated.items():
        assert recorded[key].keys() == points.keys(), sorted(key)
        for t, value in points.items():
            assert recorded[key][t] == pytest.approx(value, rel=1e-9, abs=1e-9), (sorted(key), t)


def test_benchmark_layout_gives_the_raw_bill(raw_prometheus: PrometheusServer, tmp_path: Path) -> None:
    """Rollups missing for the last 6 hours, raw samples only in the window's first 2 and last 8
    hours, owners only over each pod's last day: the bill from every raw sample."""
    window = TimeWindow.ending(END, timedelta(days=DAYS))
    raw_reads = ChargebackReads(PrometheusClient(PrometheusConfig(raw_prometheus.url)), recording_rules=False)
    raw = chargeback(raw_reads, window, "namespace", Prices(2.0), 2.0, END)
    layout = ours_layout(GPUS, DAYS, 60.0, END.timestamp() - 6 * HOUR, 900.0)
    with VictoriaMetricsServer(tmp_path) as server:
        server.import_json_lines(fleet(layout))
        rolled = chargeback(
            ChargebackReads(PrometheusClient(PrometheusConfig(server.url))),
            window,
            "namespace",
            Prices(2.0),
            2.0,
            END,
        )
    assert rolled.coverage.rollup_hours >= DAYS * 24 - 7 and raw.coverage.rollup_hours == 0
    assert rolled.window == raw.window and not rolled.partial
    got = {g.group: g for g in rolled.groups}
    assert set(got) == {g.group for g in raw.groups}
    for a in raw.groups:
        b = got[a.group]
        assert (a.held_gpu_hours, a.used_gpu_hours, a.idle_gpu_hours, a.unknown_gpu_hours) == pytest.approx(
            (b.held_gpu_hours, b.used_gpu_hours, b.idle_gpu_hours, b.unknown_gpu_hours), rel=1e-9
        ), a.group
        assert [w.workload for w in a.top_idle_workloads] == [w.workload for w in b.top_idle_workloads]
    assert rolled.fleet.unallocated_gpu_hours == pytest.approx(raw.fleet.unallocated_gpu_hours, rel=1e-9)
    assert rolled.totals.within_tolerance
    assert any(w.workload.kind == "Job" for g in rolled.groups for w in g.top_idle_workloads)
