"""The run's self-metrics (``gpu_reaper_*``), built fresh from the run's outcome by a custom Collector.

Names are a contract with dashboards/ and alerts/: change them only together.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from common.model import FindingKind

ACTIONS = ("notify", "scale_to_zero", "cordon")
OUTCOMES = ("applied", "dry_run", "skipped", "failed")
# Findings held back before any action was chosen (no rule matched, too little data): only skipped.
NO_ACTION = ("none", "skipped")
# A notice whose message did not go out (no Slack configured, or its message failed).
NOT_SENT = ("notify", "not_sent")


@dataclass(frozen=True)
class RunMetrics:
    """Plain numbers of one run."""

    actions: Mapping[tuple[str, str], int] = field(default_factory=dict)  # (action, outcome) → count
    findings: Mapping[str, int] = field(default_factory=dict)  # finding kind → count
    reclaimed_gpu_hours: float = 0.0  # GPU-hours per day freed by this run's applied actions
    duration_seconds: float = 0.0
    slack_failures: int = 0
    success_timestamp: float | None = None  # set only when the run succeeded


class RunCollector(Collector):
    def __init__(self, metrics: RunMetrics) -> None:
        self._m = metrics

    def collect(self) -> Iterator[Metric]:
        m = self._m
        actions = CounterMetricFamily(
            "gpu_reaper_actions",
            "Actions of this run by action and outcome (applied, dry_run, skipped, failed; notices "
            "also not_sent).",
            labels=["action", "outcome"],
        )
        # Every combination, zeros included, so rate() and alerts see a series from the first run.
        keys = {(a, o) for a in ACTIONS for o in OUTCOMES} | {NO_ACTION, NOT_SENT} | set(m.actions)
        for action, outcome in sorted(keys):
            actions.add_metric([action, outcome], m.actions.get((action, outcome), 0))
        yield actions
        findings = GaugeMetricFamily("gpu_reaper_findings", "Findings of this run by kind.", labels=["kind"])
        for kind in sorted({k.value for k in FindingKind} | set(m.findings)):
            findings.add_metric([kind], m.findings.get(kind, 0))
        yield findings
        yield GaugeMetricFamily(
            "gpu_reaper_reclaimed_gpu_hours",
            "GPU-hours per day freed by this run's applied actions.",
            value=m.reclaimed_gpu_hours,
        )
        yield GaugeMetricFamily(
            "gpu_reaper_run_duration_seconds", "Wall-clock duration of this run.", value=m.duration_seconds
        )
        if m.success_timestamp is not None:
            # Absent from failed runs, so a Pushgateway keeps the last good value and staleness alerts work.
            yield GaugeMetricFamily(
                "gpu_reaper_last_success_timestamp_seconds",
                "Unix time of the last run that finished without failures.",
                value=m.success_timestamp,
            )
        yield CounterMetricFamily(
            "gpu_reaper_slack_failures", "Slack messages that could not be delivered.", value=m.slack_failures
        )


def registry_for(metrics: RunMetrics) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RunCollector(metrics))
    return registry


def exposition(metrics: RunMetrics) -> str:
    return generate_latest(registry_for(metrics)).decode()
