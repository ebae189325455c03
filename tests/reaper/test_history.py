"""How far back a dry-run replays, and what a replayed run without metrics counts (reaper.history)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from common.errors import DataUnavailableError
from common.model import FindingKind, FindingsReport, TimeWindow
from common.thresholds import Thresholds
from harness.findings import NOW, finding, report
from harness.gpu_workloads import gpu_spec
from reaper.cluster import read_snapshot
from reaper.history import MAX_REPLAYS, replay, replays_needed
from reaper.policy import Policy
from simulation.in_memory_cluster import InMemoryCluster, manifest

HOUR = timedelta(hours=1)


def policy(
    runs: int = 2, window: str = "6h", for_: str | None = None, action: str = "scale_to_zero"
) -> Policy:
    match: dict[str, Any] = {"findings": ["idle_endpoint"]}
    if for_:
        match["for"] = for_
    return Policy.model_validate(
        {
            "window": "6h",
            "safety": {"consecutiveRuns": runs},
            "rules": [{"name": "r", "match": match, "action": action}],
        }
    )


@pytest.mark.parametrize(
    ("the_policy", "interval", "expected"),
    [
        pytest.param(policy(), HOUR, 1, id="two-runs-need-the-previous-one"),
        pytest.param(policy(runs=1), HOUR, 0, id="one-run-needs-no-history"),
        pytest.param(policy(runs=4), HOUR, 3, id="four-runs-need-three-earlier"),
        pytest.param(policy(for_="8h"), HOUR, 2, id="for-beyond-the-window-needs-runs-to-cover-it"),
        pytest.param(policy(for_="8h"), timedelta(minutes=30), 4, id="a-shorter-interval-needs-more-runs"),
        pytest.param(policy(for_="4h"), HOUR, 1, id="for-within-the-window-needs-none-more"),
        pytest.param(policy(for_="30d"), timedelta(minutes=5), MAX_REPLAYS, id="bounded"),
        pytest.param(policy(runs=1, for_="12h", action="notify"), HOUR, 0, id="a-notice-needs-no-history"),
    ],
)
def test_replays_go_as_far_back_as_a_decision_can_depend_on(
    the_policy: Policy, interval: timedelta, expected: int
) -> None:
    assert replays_needed(the_policy, interval) == expected


def test_a_replayed_run_without_metrics_confirms_nothing() -> None:
    """As an apply run that stopped on missing data saves no streak, the replay counts none for it."""
    the_policy = policy(runs=3)
    objects = [
        manifest("Namespace", "serving"),
        manifest("Deployment", "api", "serving", spec=gpu_spec(1)),
    ]
    snapshot = read_snapshot(InMemoryCluster(objects), "gpu-reaper")
    asked: list[TimeWindow] = []

    def source(window: TimeWindow, thresholds: Thresholds) -> FindingsReport:
        asked.append(window)
        if window.end == NOW - 2 * HOUR:
            raise DataUnavailableError("no series")
        return report(finding(FindingKind.IDLE_ENDPOINT, name="api", window=window), window=window)

    result = replay(source, snapshot, the_policy, NOW, HOUR)
    assert [w.end for w in asked] == [NOW - 2 * HOUR, NOW - HOUR]
    assert result.unavailable == (NOW - 2 * HOUR,)
    (entry,) = result.state.entries.values()
    assert entry.count == 1 and entry.last_seen == NOW - HOUR
