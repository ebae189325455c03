"""A namespace scope that holds no GPU is bad input, in the run as in the analyzer; the dry-run's
replays of earlier runs, before a namespace held any GPU, found nothing then (issue 41)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from common.errors import BadInputError
from reaper.analysis import metrics_source
from reaper.policy import RunMode, parse_policy
from reaper.runner import RunSettings, run
from simulation.fleet import Fleet, Scenario, simulate
from simulation.in_memory_cluster import InMemoryCluster, fleet_objects
from simulation.in_memory_source import SimulatedSource

END = "2026-01-05T00:00:00Z"
# serving/ranker idles all along; late/newcomer starts 90 minutes before the end.
SCENARIO = {
    "name": "late-namespace",
    "seed": 9,
    "end": END,
    "duration": "8h",
    "step": "60s",
    "analysis_window": "1h",
    "nodes": [{"name": "gpu-s1", "gpus": 4}],
    "workloads": [
        {"namespace": "serving", "name": "ranker", "behaviour": "idle", "node": "gpu-s1"},
        {"namespace": "late", "name": "newcomer", "behaviour": "idle", "start": "-90m", "node": "gpu-s1"},
    ],
}
# Two replayed runs before this one (for: 3h over a 1h window, hourly): at -2h and -1h.
POLICY = """\
window: 1h
safety: {consecutiveRuns: 2}
rules:
  - name: idle
    match: {findings: [idle_endpoint], for: 3h}
    action: scale_to_zero
"""


@pytest.fixture(scope="module")
def fleet() -> Fleet:
    return simulate(Scenario.model_validate(SCENARIO))


def dry_run(fleet: Fleet) -> RunSettings:
    policy = parse_policy(POLICY, "policy.yaml")
    return RunSettings(
        policy=policy,
        mode=RunMode.DRY_RUN,
        namespace="gpu-reaper",
        end=fleet.scenario.end,
        run_interval=timedelta(hours=1),
    )


def test_a_scope_holding_no_gpu_stops_the_run_naming_the_namespaces_that_do(fleet: Fleet) -> None:
    cluster = InMemoryCluster(fleet_objects(fleet))
    source = metrics_source(SimulatedSource(fleet), namespaces=("nosuchns",))
    with pytest.raises(
        BadInputError, match=r"namespace nosuchns .*\(namespaces holding GPUs: late, serving\)"
    ):
        run(dry_run(fleet), source, lambda: cluster)


def test_an_earlier_run_before_the_namespace_held_a_gpu_found_nothing_then(fleet: Fleet) -> None:
    cluster = InMemoryCluster(fleet_objects(fleet))
    report = run(
        dry_run(fleet), metrics_source(SimulatedSource(fleet), namespaces=("late",)), lambda: cluster
    )
    assert report.exit_code == 0, report.error
    assert report.replay is not None and len(report.replay.times) == 2
    assert report.replay.unavailable == ()
    assert report.found is not None and report.found.gpus_judged == 1
    assert report.summary_line().startswith("gpu-reaper: mode=dry-run gpus=1 findings=")
