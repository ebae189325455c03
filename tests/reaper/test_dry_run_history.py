"""A week of dry-run shows what apply would have done on each run, with no write to the cluster.

The simulated fleet is in a real Prometheus; the same sequence of hourly runs goes once in dry-run
and once in apply against the Kubernetes emulator seeded from the fleet. Each dry-run's plan must
be the plan apply made at the same time (apply having run all along), except for what apply had
already stopped on an earlier run.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from common.timeutil import parse_time
from harness.kube_emulator import EmulatedCluster
from harness.servers import PrometheusServer
from reaper import names
from reaper.analysis import PrometheusConfig, prometheus_source
from reaper.history import replays_needed
from reaper.kube import KubeClient
from reaper.outcomes import Outcome
from reaper.policy import Action, RunMode, parse_policy
from reaper.runner import EXIT_OK, RunReport, RunSettings, run
from simulation.fleet import Fleet
from simulation.in_memory_cluster import fleet_objects

pytestmark = [pytest.mark.prometheus, pytest.mark.slow]

HOUR = timedelta(hours=1)
END = parse_time("2026-01-05T00:00:00Z")
# `for: 8h` over a 6h window needs three runs; cordons need the two of consecutiveRuns.
POLICY = """\
window: 6h
safety: {consecutiveRuns: 2, maxCordonShare: 0.25}
rules:
  - name: idle-endpoints
    match: {findings: [idle_endpoint], minConfidence: 0.9, for: 8h}
    action: scale_to_zero
  - name: idle-nodes
    match: {findings: [low_utilization], kinds: [Node]}
    action: cordon
  - name: tell-owners
    match: {findings: [low_utilization, dataloader_starvation]}
    action: notify
"""
# An opt-out that runs out mid-sequence: the streak starts only once it has expired.
OPT_OUT_UNTIL = "2026-01-04T21:30:00Z"

Decision = tuple[str, ...]


def decisions(report: RunReport) -> dict[str, Decision]:
    """Each finding's fate in the run's plan: the action (and its count of confirmations) or the skip."""
    assert report.plan is not None, report.error
    out: dict[str, Decision] = {
        a.target.key(): ("act", a.action.value, str(a.confirmations)) for a in report.plan.actions
    }
    out.update({s.target.key(): ("skip", s.reason.value, s.detail) for s in report.plan.skips})
    return out


def one_run(cluster: EmulatedCluster, prometheus: PrometheusServer, mode: RunMode, at: datetime) -> RunReport:
    policy = parse_policy(POLICY, "policy.yaml")
    settings = RunSettings(policy=policy, mode=mode, namespace="gpu-reaper", end=at, run_interval=HOUR)
    source = prometheus_source(PrometheusConfig(url=prometheus.url))
    client: KubeClient = cluster.client()
    try:
        report = run(settings, source, lambda: client)
    finally:
        client.close()
    assert report.exit_code == EXIT_OK, report.error
    return report


def test_each_dry_run_plans_what_apply_did_on_the_same_run(
    standard_fleet: Fleet, prometheus_standard: PrometheusServer, cluster: EmulatedCluster
) -> None:
    cluster.seed(
        fleet_objects(
            standard_fleet,
            workload_annotations={"serving/embeddings": {names.EXCLUDE_UNTIL: OPT_OUT_UNTIL}},
        )
    )
    dry_times = [END - HOUR * k for k in range(3, -1, -1)]  # 21:00 … 00:00
    # Apply has been running all along: from as far back as a dry-run replays.
    lookback = replays_needed(parse_policy(POLICY, "policy.yaml"), HOUR)
    assert lookback == 2
    apply_times = [dry_times[0] - HOUR * k for k in range(lookback, 0, -1)] + dry_times

    dry = {at: one_run(cluster, prometheus_standard, RunMode.DRY_RUN, at) for at in dry_times}
    assert cluster.mutations() == []  # a week of dry-run writes nothing: no patch, Lease, Event, state
    assert {r.outcome for report in dry.values() for r in report.results} <= {Outcome.DRY_RUN}

    applied = {at: one_run(cluster, prometheus_standard, RunMode.APPLY, at) for at in apply_times}
    stopped_at: dict[str, datetime] = {}
    for at in apply_times:
        for r in applied[at].results:
            if r.outcome is Outcome.APPLIED and r.action.action.destructive:
                stopped_at.setdefault(r.action.target.key(), at)

    for at in dry_times:
        gone = {key for key, when in stopped_at.items() if when < at}
        expected = {k: d for k, d in decisions(applied[at]).items() if k not in gone}
        seen = {k: d for k, d in decisions(dry[at]).items() if k not in gone}
        assert seen == expected, at

    # The sequence exercises what makes this hard: actions that wait for more runs, or for `for:`,
    # then happen on a later run, and an opt-out that expires in between.
    first_dry_action = {
        a.target.key(): at
        for at in reversed(dry_times)
        for a in dry[at].plan.actions  # type: ignore[union-attr]
        if a.action is not Action.NOTIFY
    }
    # (what apply stopped before the first dry-run, that dry-run would stop at once)
    assert first_dry_action == {k: max(v, dry_times[0]) for k, v in stopped_at.items()}
    assert len(set(first_dry_action.values())) >= 2
    reasons = {d[1] for report in dry.values() for d in decisions(report).values() if d[0] == "skip"}
    assert {"awaiting_confirmation", "not_held_long_enough", "excluded_by_annotation"} <= reasons
