"""The benchmark's fleets: simulated a slice of nodes at a time, they are the fleet simulated whole.

The scaling table is only worth its numbers if the sliced fleet (how 10,000 GPUs × 7 days fit in
memory) is the fleet the ground truth describes, and if the fast JSON-line encoder sends exactly the
simulated samples.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
import requests

from benchmarks.analyzer_bench import nearest_rank
from benchmarks.bench_fleet import (
    END,
    ImportStats,
    SliceStats,
    bench_scenario,
    import_json_lines,
    json_line_chunks,
    node_slices,
    sliced_fleet,
    trimmed,
)
from benchmarks.strong_baseline import THRESHOLDS, subquery_step
from common.model import TimeWindow
from common.thresholds import Thresholds
from harness.servers import VictoriaMetricsServer, _json_line_chunks
from simulation.fleet import Series, expected_findings, simulate

WINDOW, AGE, STEP = timedelta(hours=6), timedelta(hours=12), timedelta(seconds=60)
GPUS = 240  # 30 nodes: every layout, spare nodes and exporter gaps


def _sliced(slice_samples: int) -> tuple[dict[tuple[str, tuple[tuple[str, str], ...]], Series], SliceStats]:
    stats = SliceStats()
    series = {
        (s.name, s.labels): s for s in sliced_fleet(GPUS, [WINDOW, AGE], AGE, STEP, stats, slice_samples)
    }
    return series, stats


def test_slices_cover_every_node_once() -> None:
    slices = node_slices(GPUS, AGE, STEP, slice_samples=200_000)
    assert len(slices) > 1
    assert [n for s in slices for n in s] == list(range(GPUS // 8))


def test_a_fleet_simulated_in_slices_is_the_fleet_simulated_whole() -> None:
    whole = simulate(bench_scenario(GPUS, WINDOW, AGE, STEP))
    expected = {(s.name, s.labels): s for s in trimmed(whole.series)}
    sliced, stats = _sliced(slice_samples=200_000)
    assert stats.slices > 1
    assert sliced.keys() == expected.keys()
    differ = []
    for key, s in expected.items():
        other = sliced[key]
        np.testing.assert_array_equal(other.timestamps, s.timestamps)
        if not np.array_equal(other.values, s.values):
            differ.append(key)
    # Only unallocated GPUs' driver blips (drawn from one stream per simulation) fall elsewhere.
    assert differ, "the slices should not share the whole fleet's blip stream"
    for name, labels in differ:
        assert name == "DCGM_FI_DEV_GPU_UTIL" and "pod" not in dict(labels)
        assert max(sliced[(name, labels)].values.max(), expected[(name, labels)].values.max()) <= 1.0
    for window in (WINDOW, AGE):
        span = TimeWindow.ending(END, window)
        assert stats.truth[window.total_seconds()] == expected_findings(whole, span)
    assert stats.samples == sum(s.values.size for s in expected.values())


def test_json_lines_carry_exactly_the_simulated_samples() -> None:
    series = list(trimmed(simulate(bench_scenario(40, WINDOW, AGE, STEP)).series))
    ours = [
        json.loads(line)
        for chunk in json_line_chunks(series, max_bytes=1 << 16)
        for line in chunk.splitlines()
    ]
    reference = [
        json.loads(line) for chunk in _json_line_chunks(series, 1 << 16) for line in chunk.splitlines()
    ]
    assert ours == reference
    kinds = {type(v) for line in ours for v in line["values"]}
    assert kinds == {int, float}, "constant, integral and fractional values all took their paths"


def test_json_lines_refuse_a_non_finite_value() -> None:
    bad = Series("x", (("a", "b"),), np.array([1.0, 2.0]), np.array([1.0, np.nan]))
    with pytest.raises(ValueError, match="non-finite"):
        list(json_line_chunks([bad]))


@pytest.mark.victoriametrics
def test_the_sliced_import_lands_every_sample_in_victoriametrics(tmp_path: Path) -> None:
    stats, imported = SliceStats(), ImportStats()
    with VictoriaMetricsServer(tmp_path) as vm:
        chunks = json_line_chunks(sliced_fleet(80, [WINDOW], AGE, STEP, stats, 100_000), max_bytes=1 << 18)
        import_json_lines(vm.url, chunks, imported)
        r = requests.get(
            f"{vm.url}/api/v1/query",
            params={"query": 'sum(count_over_time({__name__!=""}[13h]))', "time": END.timestamp()},
            timeout=60,
        )
    assert stats.slices > 1 and imported.posts > 1
    assert float(r.json()["data"]["result"][0]["value"][1]) == stats.samples


def test_the_strong_baseline_steps_its_subqueries_under_victoriametrics_point_limit() -> None:
    scrape = timedelta(seconds=15)
    assert subquery_step(timedelta(hours=24), scrape) == scrape
    assert subquery_step(timedelta(days=7), scrape) == timedelta(seconds=30)
    assert timedelta(days=7) / subquery_step(timedelta(days=7), scrape) < 30_000


def test_p99_of_fewer_than_a_hundred_runs_is_the_worst_run() -> None:
    runs = [3.0, 1.0, 5.0, 2.0, 4.0]
    assert nearest_rank(runs, 50) == 3.0
    assert nearest_rank(runs, 99) == 5.0
    assert nearest_rank([7.0], 99) == 7.0


def test_the_strong_baseline_applies_the_analyzers_default_thresholds() -> None:
    # The baseline is a standalone script (it imports nothing of ours): its copy must not drift.
    t = Thresholds()
    for name, value in THRESHOLDS._asdict().items():
        expected = t.warmup_grace.total_seconds() if name == "warmup_grace_s" else getattr(t, name)
        assert value == expected, name
