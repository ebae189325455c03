"""The run's self-metrics: exact names (dashboards and alerts are written against them) and semantics."""

from __future__ import annotations

import pytest

from reaper.metrics import RunMetrics, registry_for


def sample(metrics: RunMetrics, name: str, labels: dict[str, str] | None = None) -> float | None:
    return registry_for(metrics).get_sample_value(name, labels or {})


def test_names_labels_and_values() -> None:
    m = RunMetrics(
        actions={("scale_to_zero", "applied"): 2, ("notify", "dry_run"): 1, ("none", "skipped"): 3},
        findings={"idle_endpoint": 2, "unknown": 1},
        reclaimed_gpu_hours=48.0,
        duration_seconds=1.5,
        slack_failures=1,
        success_timestamp=1_767_225_600.0,
    )
    assert sample(m, "gpu_reaper_actions_total", {"action": "scale_to_zero", "outcome": "applied"}) == 2
    assert sample(m, "gpu_reaper_actions_total", {"action": "none", "outcome": "skipped"}) == 3
    assert sample(m, "gpu_reaper_findings", {"kind": "idle_endpoint"}) == 2
    assert sample(m, "gpu_reaper_reclaimed_gpu_hours") == 48.0
    assert sample(m, "gpu_reaper_run_duration_seconds") == 1.5
    assert sample(m, "gpu_reaper_last_success_timestamp_seconds") == 1_767_225_600.0
    assert sample(m, "gpu_reaper_slack_failures_total") == 1


@pytest.mark.parametrize(
    ("action", "outcome"),
    [
        (a, o)
        for a in ("notify", "scale_to_zero", "cordon")
        for o in ("applied", "dry_run", "skipped", "failed")
    ],
)
def test_every_action_outcome_series_exists_from_the_first_run(action: str, outcome: str) -> None:
    assert sample(RunMetrics(), "gpu_reaper_actions_total", {"action": action, "outcome": outcome}) == 0


def test_every_finding_kind_is_reported() -> None:
    for kind in ("idle_endpoint", "low_utilization", "dataloader_starvation", "unknown"):
        assert sample(RunMetrics(), "gpu_reaper_findings", {"kind": kind}) == 0


def test_a_failed_run_has_no_success_timestamp() -> None:
    # Absent rather than 0: pushed with POST, the Pushgateway keeps the last good value.
    assert sample(RunMetrics(success_timestamp=None), "gpu_reaper_last_success_timestamp_seconds") is None


def test_no_created_series_leak_into_the_push() -> None:
    from reaper.metrics import exposition

    text = exposition(RunMetrics())
    assert "_created" not in text
