"""Reaper: turns findings into a safe plan, applies it to Kubernetes, and tells people in Slack.

The package's public surface is what ``gpu-reaper`` and the demo drive a run with: the policy
(load, explain, its schema, the run mode), the run itself (settings, ``run``, its report and exit
codes), where its findings come from (the analyzer over Prometheus or another metrics source, or a
findings file) and its HTML report, the Kubernetes client and the executor that ``restore`` uses,
Slack's credentials and notifier, the run's metrics and their Pushgateway, and the errors those
adapters raise that a command handles. Everything else — the planner, the stops, the state, the
lease, the selectors — is the reaper's own. Each name is imported from its module when first asked
for (PEP 562's module ``__getattr__``, built by ``common.surface``), so importing the package, or
starting ``gpu-reaper --help``, loads no client (docs/architecture.md, "Public surfaces").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from common.surface import lazy_surface

# name → the module that defines it
_SURFACE = {
    "DEFAULT_REAPER_NAMESPACE": "reaper.names",
    "EXIT_ACTION_FAILED": "reaper.runner",
    "EXIT_OK": "reaper.runner",
    "Executor": "reaper.executor",
    "ForbiddenError": "reaper.adapter_errors",
    "KubeClient": "reaper.kube",
    "KubeError": "reaper.adapter_errors",
    "KubeSettings": "reaper.kube",
    "LeaseHeldError": "reaper.adapter_errors",
    "Outcome": "reaper.outcomes",
    "Policy": "reaper.policy.schema",
    "PushgatewayError": "reaper.adapter_errors",
    "RunMode": "reaper.policy.schema",
    "RunReport": "reaper.runner",
    "RunSettings": "reaper.runner",
    "SlackCredentials": "reaper.slack",
    "SlackNotifier": "reaper.slack",
    "Week": "reaper.digest_message",
    "run_digest": "reaper.digest",
    "explain": "reaper.policy.explain",
    "exposition": "reaper.metrics",
    "file_source": "reaper.analysis",
    "json_schema": "reaper.policy.explain",
    "load_credentials": "reaper.slack",
    "load_policy": "reaper.policy.loading",
    "metrics_source": "reaper.analysis",
    "parse_policy": "reaper.policy.loading",
    "preview": "reaper.messages",
    "prometheus_chargeback": "reaper.analysis",
    "prometheus_metrics": "reaper.analysis",
    "prometheus_source": "reaper.analysis",
    "push": "reaper.pushgateway",
    "registry_for": "reaper.metrics",
    "run": "reaper.runner",
    "run_section": "reaper.plan_report",
    "read_status": "reaper.status",
    "status_table": "reaper.status",
    "status_json": "reaper.status",
    "write_html_report": "reaper.analysis",
}

__all__ = [
    "DEFAULT_REAPER_NAMESPACE",
    "EXIT_ACTION_FAILED",
    "EXIT_OK",
    "Executor",
    "ForbiddenError",
    "KubeClient",
    "KubeError",
    "KubeSettings",
    "LeaseHeldError",
    "Outcome",
    "Policy",
    "PushgatewayError",
    "RunMode",
    "RunReport",
    "RunSettings",
    "SlackCredentials",
    "SlackNotifier",
    "Week",
    "explain",
    "exposition",
    "file_source",
    "json_schema",
    "load_credentials",
    "load_policy",
    "metrics_source",
    "parse_policy",
    "preview",
    "prometheus_chargeback",
    "prometheus_metrics",
    "prometheus_source",
    "push",
    "read_status",
    "registry_for",
    "run",
    "run_digest",
    "run_section",
    "status_json",
    "status_table",
    "write_html_report",
]

if TYPE_CHECKING:  # what type checkers and editors see
    from reaper.adapter_errors import ForbiddenError, KubeError, LeaseHeldError, PushgatewayError
    from reaper.analysis import (
        file_source,
        metrics_source,
        prometheus_chargeback,
        prometheus_metrics,
        prometheus_source,
        write_html_report,
    )
    from reaper.digest import run_digest
    from reaper.digest_message import Week
    from reaper.executor import Executor
    from reaper.kube import KubeClient, KubeSettings
    from reaper.messages import preview
    from reaper.metrics import exposition, registry_for
    from reaper.names import DEFAULT_REAPER_NAMESPACE
    from reaper.outcomes import Outcome
    from reaper.plan_report import run_section
    from reaper.policy.explain import explain, json_schema
    from reaper.policy.loading import load_policy, parse_policy
    from reaper.policy.schema import Policy, RunMode
    from reaper.pushgateway import push
    from reaper.runner import EXIT_ACTION_FAILED, EXIT_OK, RunReport, RunSettings, run
    from reaper.slack import SlackCredentials, SlackNotifier, load_credentials
    from reaper.status import read_status, status_json, status_table


__getattr__, __dir__ = lazy_surface(__name__, _SURFACE)
