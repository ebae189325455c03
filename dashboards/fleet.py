"""GPU fleet overview (uid ``kgr-fleet``): is the fleet paid for and used?"""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as d

from common import metric_names as m
from dashboards import board
from dashboards.board import Options, Row
from dashboards.panels import Query, histogram_panel, stat_panel, table_panel, timeseries_panel
from dashboards.promql import (
    DEVICE,
    PER_HOUR,
    allocated,
    allocated_only,
    by,
    device_util,
    gpu_pods,
    hours,
    idle,
    over,
    per_device_util,
    pod_util,
    present,
)

THRESHOLD = "$idle_threshold"
LAST_15M = over("max_over_time", "15m")
REPORTING = f"count({present(m.FB_USED, keep=DEVICE)})"
ALLOCATED = f"count({allocated()})"
USED = f"sum({allocated_only(per_device_util())}) / 100"


def build(options: Options) -> d.Dashboard:
    stat_size = (4, 4)
    wide = (12, 8)
    return board.dashboard(
        "kgr-fleet",
        "GPU fleet overview",
        "Allocated versus used GPUs, the utilization distribution and idle GPU-hours across the fleet.",
        options,
        [board.idle_threshold_variable()],
        [
            Row("Allocation"),
            stat_panel(
                "GPU devices reporting",
                "Whole GPUs and MIG instances that report framebuffer memory, in the selected clusters.",
                "short",
                REPORTING,
                size=stat_size,
            ),
            stat_panel(
                "Allocated to pods",
                "Devices the exporters attribute to a pod (kubelet PodResources), shared GPUs counted once.",
                "short",
                ALLOCATED,
                size=stat_size,
            ),
            stat_panel(
                "Busy GPU-equivalents",
                "Sum of utilization over all devices, in whole GPUs: how many GPUs' worth of work is "
                "running.",
                "short",
                f"sum({per_device_util()}) / 100",
                size=stat_size,
                decimals=1,
            ),
            stat_panel(
                "Allocated and idle now",
                "Allocated devices whose utilization stayed at or below the idle threshold over the last "
                "15 minutes.",
                "short",
                f"sum({allocated_only(idle(per_device_util(window=LAST_15M), THRESHOLD))})",
                size=stat_size,
                alert_at=(1, "orange"),
            ),
            stat_panel(
                "Idle GPU-hours in range",
                "GPU-hours in the selected range during which an allocated device was at or below the idle "
                "threshold (5-minute resolution).",
                "h",
                f"sum({hours(allocated_only(idle(per_device_util(), THRESHOLD)))}){PER_HOUR}",
                size=stat_size,
                decimals=1,
            ),
            stat_panel(
                "Fleet mean utilization",
                "Mean utilization of every device over the selected range.",
                "percent",
                f"avg({device_util(window=over('avg_over_time', '$__range'))})",
                size=stat_size,
                decimals=1,
            ),
            timeseries_panel(
                "Allocated vs used GPUs",
                "Devices reporting, devices allocated to pods, and the GPU-equivalents of work the allocated "
                "ones do. The gap between the last two is paid for and unused.",
                "short",
                Query(REPORTING, "reporting"),
                Query(ALLOCATED, "allocated"),
                Query(USED, "used (GPU-equivalents)"),
                size=wide,
            ),
            timeseries_panel(
                "Allocated GPUs by namespace",
                "Devices held by pods, per namespace and cluster (a shared GPU counts once per namespace "
                "holding it).",
                "short",
                Query(
                    by("cluster, namespace", "count", by(f"{DEVICE}, namespace", "group", gpu_pods())),
                    "{{namespace}} {{cluster}}",
                ),
                size=wide,
                stacked=True,
            ),
            Row("Utilization"),
            histogram_panel(
                "Utilization distribution (per device, mean over range)",
                "How many devices sit at each mean utilization over the selected range. A pile at the left "
                "is idle capacity.",
                Query(
                    device_util(
                        window=over("avg_over_time", "$__range"),
                        keep="cluster, hostname, gpu, UUID, GPU_I_ID",
                    ),
                    "{{hostname}}/{{gpu}} {{GPU_I_ID}} {{cluster}}",
                ),
                size=wide,
            ),
            timeseries_panel(
                "Utilization quantiles across devices",
                "Median, 90th percentile and mean utilization across all devices of the selected clusters "
                "at each instant.",
                "percent",
                Query(f"quantile(0.5, {per_device_util()})", "median"),
                Query(f"quantile(0.9, {per_device_util()})", "p90"),
                Query(f"avg({per_device_util()})", "mean"),
                size=wide,
                bounds=(0, 100),
            ),
            timeseries_panel(
                "Mean utilization by GPU model",
                "Mean utilization per model and cluster: shows which hardware generation is "
                "over-provisioned.",
                "percent",
                Query(
                    by("cluster, modelName", "avg", device_util(keep=f"{DEVICE}, modelName")),
                    "{{modelName}} {{cluster}}",
                ),
                size=wide,
                bounds=(0, 100),
            ),
            table_panel(
                "Idle GPUs held by pods",
                "Pods holding devices whose utilization never rose above the idle threshold over the "
                "selected range (a pod's own share on a GPU gpu-exporter saw shared). Candidates for the "
                "reaper.",
                "short",
                Query(
                    by(
                        "cluster, namespace, pod",
                        "count",
                        f"{pod_util(window=over('max_over_time', '$__range'))} <= {THRESHOLD}",
                    ),
                    column="idle devices",
                ),
                size=wide,
            ),
        ],
    )
