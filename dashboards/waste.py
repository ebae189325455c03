"""GPU waste and cost (uid ``kgr-waste``): who wastes what, what it costs, what the reaper did."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as d

from dashboards import board
from dashboards.board import Options, Row
from dashboards.panels import Query, stat_panel, table_panel, timeseries_panel
from dashboards.promql import (
    PER_HOUR,
    allocated_only,
    by,
    by_workload,
    gpu_pods,
    hours,
    idle,
    over,
    per_device_util,
    pod_util,
    samples,
    sel,
)

NAMESPACE = 'namespace=~"$namespace"'
THRESHOLD = "$idle_threshold"
COST = " * $price"


def _table_columns(group: str, *, per_workload: bool, unused: bool) -> list[Query]:
    """Allocated, idle (and ``unused``) GPU-hours, mean utilization and idle cost per ``group``, from
    each pod's utilization (joined to its workload when ``per_workload``)."""

    def total(expr: str) -> str:
        return by(group, "sum", by_workload(expr, NAMESPACE) if per_workload else expr)

    util = pod_util(NAMESPACE)
    idle_hours = total(hours(idle(util, THRESHOLD))) + PER_HOUR
    mean = pod_util(NAMESPACE, window=over("avg_over_time", "$__range"))
    columns = [
        Query(total(samples(util)) + PER_HOUR, column="allocated GPU-h", unit="h"),
        Query(idle_hours, column="idle GPU-h", unit="h"),
    ]
    if unused:
        columns.append(Query(total(hours(f"1 - {util} / 100")) + PER_HOUR, column="unused GPU-h", unit="h"))
    columns += [
        Query(
            by(group, "avg", by_workload(mean, NAMESPACE) if per_workload else mean),
            column="mean util %",
            unit="percent",
        ),
        Query(idle_hours + COST, column="idle cost", unit="currencyUSD"),
    ]
    return columns


def build(options: Options) -> d.Dashboard:
    idle_hours = f"sum({hours(allocated_only(idle(per_device_util(), THRESHOLD), NAMESPACE))}){PER_HOUR}"
    return board.dashboard(
        "kgr-waste",
        "GPU waste and cost",
        "Idle and unused GPU-hours by namespace and workload, their cost, and what the reaper did about "
        "them.",
        options,
        [
            board.label_variable("namespace", "Namespace", gpu_pods()),
            board.idle_threshold_variable(),
            board.price_variable(),
        ],
        [
            Row("Totals over the selected range"),
            stat_panel(
                "Allocated GPU-hours",
                "Device-hours held by pods in the selected namespaces.",
                "h",
                f"sum({samples(allocated_only(per_device_util(), NAMESPACE))}){PER_HOUR}",
                size=(6, 4),
                decimals=1,
            ),
            stat_panel(
                "Idle GPU-hours",
                "Allocated device-hours at or below the idle threshold.",
                "h",
                idle_hours,
                size=(6, 4),
                decimals=1,
            ),
            stat_panel(
                "Unused GPU-hours",
                "Allocated device-hours times the unused share (1 − utilization): idle time plus the slack "
                "of partly busy devices.",
                "h",
                f"sum({hours(allocated_only(f'1 - {per_device_util()} / 100', NAMESPACE))}){PER_HOUR}",
                size=(6, 4),
                decimals=1,
            ),
            stat_panel(
                "Cost of idle GPU-hours",
                "Idle GPU-hours times the price per GPU-hour set above.",
                "currencyUSD",
                idle_hours + COST,
                size=(6, 4),
                decimals=0,
            ),
            table_panel(
                "Waste by namespace",
                "Per namespace and cluster over the selected range: device-hours allocated, idle and unused, "
                "mean utilization and the cost of idle time. A pod on a GPU gpu-exporter saw shared counts "
                "with its own share.",
                "short",
                *_table_columns("cluster, namespace", per_workload=False, unused=True),
                size=(24, 8),
            ),
            table_panel(
                "Waste by workload",
                "Per workload (Deployment, StatefulSet, Job, bare pod) over the selected range. Pods are "
                "resolved to their workload through kube-state-metrics.",
                "short",
                *_table_columns("cluster, namespace, workload", per_workload=True, unused=False),
                size=(24, 10),
            ),
            Row("Over time"),
            timeseries_panel(
                "Idle allocated devices by namespace",
                "Allocated devices at or below the idle threshold over the last rate interval.",
                "short",
                Query(
                    by(
                        "cluster, namespace",
                        "sum",
                        idle(
                            pod_util(NAMESPACE, window=over("max_over_time", "$__rate_interval")), THRESHOLD
                        ),
                    ),
                    "{{namespace}} {{cluster}}",
                ),
                size=(12, 8),
                stacked=True,
            ),
            timeseries_panel(
                "Unused capacity by namespace (GPU-equivalents)",
                "Allocated devices times their unused share, per namespace.",
                "short",
                Query(
                    by("cluster, namespace", "sum", f"1 - {pod_util(NAMESPACE)} / 100"),
                    "{{namespace}} {{cluster}}",
                ),
                size=(12, 8),
                stacked=True,
            ),
            Row("Reaper"),
            stat_panel(
                "GPU-hours per day freed (last run)",
                "GPU-hours per day that the reaper's last run freed with the actions it applied (0 for a dry "
                "run), as pushed to the Pushgateway; the selected clusters' runs added up.",
                "short",
                f"sum({sel('gpu_reaper_reclaimed_gpu_hours')})",
                size=(6, 6),
                decimals=1,
            ),
            table_panel(
                "Reaper actions (last run)",
                "Actions of the last reaper run by kind and outcome (applied, dry_run, skipped, failed), per "
                "cluster.",
                "short",
                Query(
                    by("cluster, action, outcome", "sum", sel("gpu_reaper_actions_total")), column="actions"
                ),
                size=(9, 6),
            ),
            table_panel(
                "Reaper findings (last run)",
                "Findings of the last reaper run by kind, per cluster.",
                "short",
                Query(by("cluster, kind", "sum", sel("gpu_reaper_findings")), column="findings"),
                size=(9, 6),
            ),
        ],
    )
