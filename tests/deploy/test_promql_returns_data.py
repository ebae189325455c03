"""Every dashboard query and every alert expression returns data from a real Prometheus.

Two fleets, each in its own Prometheus:

* the standard simulated fleet (DCGM, gpu-exporter's histogram, kube-state-metrics, cAdvisor);
  expressions that read only those series must return data from it;
* the extras fleet (tests/deploy/extras.py): a small simulated fleet whose scrape relabelled
  ``Hostname`` to ``hostname``, plus what the simulation lacks — exporter self-metrics, XIDs,
  throttling, reaper runs. Every expression must return data from it too, which also shows the
  dashboards work on relabelled node labels.

Both are in dcgm-exporter's legacy naming; tests/deploy/test_both_namings.py runs the same
expressions over DCGM 4.7's naming, mixed fleets and a mid-window upgrade.

Dashboard variables are resolved the way Grafana would (their own queries run against the same
Prometheus); for an alert, "returns data" means its condition holds somewhere in the fleet.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

import pytest

from common.metric_names import legacy_name
from harness.extra_fleet import END_S
from harness.grafana import (
    PanelQuery,
    dashboard_files,
    interpolate,
    load,
    options,
    panel_queries,
    raw_series_dashboard_files,
    resolve,
    variable_query,
    variables,
    with_placeholders,
)
from harness.promql import instant, metric_names
from harness.rules import AlertRule, load_rules
from harness.servers import PrometheusServer
from simulation.fleet import Fleet, load_scenario, simulate

pytestmark = [pytest.mark.prometheus, pytest.mark.slow]

STANDARD_METRICS = frozenset(s.name for s in simulate(load_scenario("standard")).series)
QUERIES = [q for path in raw_series_dashboard_files() for q in panel_queries(path)]
RULES = load_rules()

# Single-value variables of the workload drill-down: a Job in the standard fleet, a Deployment
# (resolved through its ReplicaSet) in the extras fleet.
STANDARD_CHOICES = {"namespace": "research", "workload": "tokenizer-bench"}
EXTRAS_CHOICES = {"namespace": "serving", "workload": "legacy-ranker"}


#: gpu-exporter's per-pod shares of time-sliced GPUs appear only as an `or` alternative next to the
#: DCGM series, which carry the data on a fleet without shared GPUs.
SHARED_GPU_ALTERNATIVES = frozenset({"gpu_pod_sm_utilization_percent", "gpu_pod_memory_used_bytes"})


def _on_standard_fleet(expr: str) -> bool:
    """Whether the standard fleet (legacy naming) serves what ``expr`` reads: a DCGM 4.7 name is the
    alternative to its legacy one (tests/deploy/test_both_namings.py reads both)."""
    read = {legacy_name(n) for n in metric_names(with_placeholders(expr))}
    return read - SHARED_GPU_ALTERNATIVES <= STANDARD_METRICS


@cache
def _variables(url: str, dashboard: str, choices: tuple[tuple[str, str], ...]) -> dict[str, str]:
    path = next(p for p in dashboard_files() if p.stem == dashboard)
    return resolve(load(path), lambda expr: instant(url, expr, END_S), dict(choices))


def _check_panel(server: PrometheusServer, query: PanelQuery, choices: dict[str, str], fleet: str) -> None:
    values = _variables(server.url, query.dashboard, tuple(sorted(choices.items())))
    expr = interpolate(query.expr, values)
    result = instant(server.url, expr, END_S)
    assert result, (
        f"panel {query.panel!r} ({query.ref}) of {query.dashboard}.json: no data on the {fleet}:\n{expr}"
    )


def _check_rule(server: PrometheusServer, rule: AlertRule, fleet: str) -> None:
    assert instant(server.url, rule.expr, END_S), f"rule {rule.alert} ({rule.file}): no data on the {fleet}"


_POD_SUFFIX = re.compile(r"(-[bcdfghjklmnpqrstvwxz2456789]{10})?-[bcdfghjklmnpqrstvwxz2456789]{5}$|-\d+$")


def _workload_of(pod: str) -> str:
    """Strip what a controller appends: ReplicaSet hash and pod suffix, Job suffix, StatefulSet ordinal."""
    return _POD_SUFFIX.sub("", pod)


def _ids(item: PanelQuery | AlertRule) -> str:
    return item.id if isinstance(item, PanelQuery) else item.alert


VARIABLES = [
    pytest.param(path.stem, v, id=f"{path.stem}/{v['name']}")
    for path in raw_series_dashboard_files()
    for v in variables(load(path))
    if v["type"] == "query" and v["name"] != "cluster"  # a single-cluster fleet has no cluster label
]


@pytest.mark.parametrize(("dashboard", "variable"), VARIABLES)
def test_dashboard_variable_offers_choices_on_both_fleets(
    dashboard: str,
    variable: dict[str, Any],
    prometheus_standard: PrometheusServer,
    prometheus_extras: PrometheusServer,
) -> None:
    for server, choices in ((prometheus_standard, STANDARD_CHOICES), (prometheus_extras, EXTRAS_CHOICES)):
        values = _variables(server.url, dashboard, tuple(sorted(choices.items())))
        definition = interpolate(variable_query(variable), values)
        offered = options(
            definition, variable.get("regex", ""), lambda e, url=server.url: instant(url, e, END_S)
        )
        assert offered, f"variable {variable['name']!r} of {dashboard}.json offers nothing on {server.url}"
        if variable["name"] in choices:
            assert choices[variable["name"]] in offered


def test_some_expressions_need_the_extras_fleet_and_most_do_not() -> None:
    """Guards the split below: the standard fleet must carry the bulk of the checks."""
    standard = [q for q in QUERIES if _on_standard_fleet(q.expr)]
    assert len(standard) >= 0.75 * len(QUERIES)
    assert {r.alert for r in RULES if _on_standard_fleet(r.expr)} >= {
        "GpuIdleHeldByWorkload",
        "GpuLowUtilization",
        "GpuDataLoaderStarvation",
        "GpuStarvedByCpuThrottling",
    }


@pytest.mark.parametrize("query", [q for q in QUERIES if _on_standard_fleet(q.expr)], ids=_ids)
def test_dashboard_query_returns_data_on_the_standard_fleet(
    query: PanelQuery, prometheus_standard: PrometheusServer
) -> None:
    _check_panel(prometheus_standard, query, STANDARD_CHOICES, "standard fleet")


@pytest.mark.parametrize("query", QUERIES, ids=_ids)
def test_dashboard_query_returns_data_on_the_relabelled_extras_fleet(
    query: PanelQuery, prometheus_extras: PrometheusServer
) -> None:
    _check_panel(prometheus_extras, query, EXTRAS_CHOICES, "extras fleet (hostname label)")


@pytest.mark.parametrize("rule", [r for r in RULES if r.group == "gpu-waste"], ids=_ids)
def test_waste_alert_condition_holds_on_the_standard_fleet(
    rule: AlertRule, prometheus_standard: PrometheusServer
) -> None:
    _check_rule(prometheus_standard, rule, "standard fleet")


def test_health_alerts_stay_quiet_on_the_healthy_standard_fleet(
    prometheus_standard: PrometheusServer,
) -> None:
    """No XID, no heat, no throttling, no exporter or reaper series in trouble: nothing fires."""
    noisy = [
        r.alert for r in RULES if r.group != "gpu-waste" and instant(prometheus_standard.url, r.expr, END_S)
    ]
    assert noisy == []


@pytest.mark.parametrize("rule", RULES, ids=_ids)
def test_alert_condition_holds_on_the_extras_fleet(
    rule: AlertRule, prometheus_extras: PrometheusServer
) -> None:
    _check_rule(prometheus_extras, rule, "extras fleet")


def test_waste_alerts_name_exactly_the_pods_the_simulation_made_wasteful(
    prometheus_standard: PrometheusServer,
) -> None:
    """The standard scenario's ground truth, per alert: the right workloads, and no others."""
    by_alert = {r.alert: r for r in RULES}

    def workloads(alert: str) -> set[str]:
        result = instant(prometheus_standard.url, by_alert[alert].expr, END_S)
        return {f"{x['metric']['namespace']}/{_workload_of(x['metric']['pod'])}" for x in result}

    assert workloads("GpuIdleHeldByWorkload") == {
        "serving/legacy-ranker",
        "serving/embeddings",
        "ml-platform/gap-service",
        "team-b/debug-shell",
        "team-b/mig-idle",
    }
    assert workloads("GpuLowUtilization") == {"research/notebook-alice", "team-a/batch-scorer"}
    assert workloads("GpuDataLoaderStarvation") == {"research/tokenizer-bench", "research/vision-finetune"}
    assert workloads("GpuStarvedByCpuThrottling") == {"research/audio-train"}


def _panel_value(server: PrometheusServer, dashboard: str, title: str, ref: str = "A") -> float:
    (query,) = [q for q in QUERIES if q.dashboard == dashboard and q.panel == title and q.ref == ref]
    values = _variables(server.url, dashboard, tuple(sorted(STANDARD_CHOICES.items())))
    (item,) = instant(server.url, interpolate(query.expr, values), END_S)
    return float(item["value"][1])


def test_fleet_overview_counts_the_devices_the_simulation_reports_and_allocates(
    standard_fleet: Fleet, prometheus_standard: PrometheusServer
) -> None:
    lookback = END_S - 300  # an instant query sees samples of the last five minutes
    live = [s for s in standard_fleet.series_named("DCGM_FI_DEV_FB_USED") if s.timestamps[-1] > lookback]
    devices = {(s.label("UUID"), s.label("GPU_I_ID")) for s in live}
    allocated = {(s.label("UUID"), s.label("GPU_I_ID")) for s in live if s.label("pod")}
    assert _panel_value(prometheus_standard, "fleet", "GPU devices reporting") == len(devices)
    assert _panel_value(prometheus_standard, "fleet", "Allocated to pods") == len(allocated)
