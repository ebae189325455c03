"""GPU workload drill-down (uid ``kgr-workload``): one workload's GPUs, to confirm a finding."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as d

from common import metric_names as m
from dashboards import board
from dashboards.board import Options
from dashboards.panels import Query, heatmap_panel, stat_panel, table_panel, timeseries_panel
from dashboards.promql import (
    HELD,
    PER_HOUR,
    POD_DEVICE,
    by,
    field,
    gpu_pods,
    hours,
    idle,
    over,
    pod_memory_mib,
    pod_util,
    sel,
    workload_of_pods,
)

NAMESPACE = 'namespace="$namespace"'
POD = 'pod=~"$pod"'
RATE = over("rate", "$__rate_interval")
DEVICE_LEGEND = "{{pod}} {{hostname}}/{{gpu}} {{GPU_I_ID}} {{cluster}}"


def _variables() -> list[board.Variable]:
    workloads = workload_of_pods(NAMESPACE)
    chosen = 'label_replace(vector(1), "workload", "$workload", "", "")'
    return [
        board.label_variable("namespace", "Namespace", gpu_pods(), multi=False),
        board.query_variable(
            "workload",
            "Workload",
            f"query_result(count by (workload) ({workloads}))",
            regex='/workload="([^"]+)"/',
            multi=False,
        ),
        board.query_variable(
            "pod",
            "Pod",
            f"query_result(count by (pod) ({workloads} and on (workload) {chosen}))",
            regex='/pod="([^"]+)"/',
        ),
    ]


def build(options: Options) -> d.Dashboard:
    pods = (NAMESPACE, POD)
    cpu = (NAMESPACE, POD, 'container!=""')
    return board.dashboard(
        "kgr-workload",
        "GPU workload drill-down",
        "One workload's GPUs: utilization, memory, sub-second samples, CPU pressure and power.",
        options,
        _variables(),
        [
            stat_panel(
                "Devices held",
                "GPUs and MIG instances held by the selected pods.",
                "short",
                f"count({gpu_pods(*pods)})",
                size=(6, 4),
            ),
            stat_panel(
                "Mean utilization (range)",
                "Mean utilization of its devices over the selected range (a pod's own share on a GPU "
                "gpu-exporter saw shared).",
                "percent",
                f"avg({pod_util(*pods, window=over('avg_over_time', '$__range'))})",
                size=(6, 4),
                decimals=1,
            ),
            stat_panel(
                "Idle GPU-hours (range)",
                "Device-hours at or below 2 % utilization in the selected range.",
                "h",
                f"sum({hours(idle(pod_util(*pods), '2'))}){PER_HOUR}",
                size=(6, 4),
                decimals=1,
            ),
            stat_panel(
                "Memory held (range mean)",
                "Mean framebuffer memory held across its devices.",
                "mbytes",
                f"sum({pod_memory_mib(*pods, window=over('avg_over_time', '$__range'))})",
                size=(6, 4),
            ),
            timeseries_panel(
                "GPU utilization per device",
                "Utilization of each device the workload holds.",
                "percent",
                Query(pod_util(*pods), DEVICE_LEGEND),
                size=(12, 8),
                bounds=(0, 100),
            ),
            timeseries_panel(
                "GPU memory used",
                "Framebuffer memory per device. Memory held at 0 % utilization is the signature of an idle "
                "endpoint.",
                "mbytes",
                Query(pod_memory_mib(*pods), DEVICE_LEGEND),
                size=(12, 8),
            ),
            timeseries_panel(
                "SM and memory activity (profiling)",
                "DCGM profiling ratios where available (dcgm-exporter with profiling, or gpu-exporter on "
                "Hopper and newer).",
                "percentunit",
                Query(
                    field(m.PROF_SM_ACTIVE, *pods, HELD, keep=POD_DEVICE),
                    "SM active {{pod}}/{{gpu}} {{cluster}}",
                ),
                Query(
                    field(m.PROF_DRAM_ACTIVE, *pods, HELD, keep=POD_DEVICE),
                    "DRAM active {{pod}}/{{gpu}} {{cluster}}",
                ),
                size=(12, 8),
                bounds=(0, 1),
            ),
            heatmap_panel(
                "Utilization samples (gpu-exporter)",
                "NVML's sub-second utilization samples as counted by gpu-exporter. Two bands, near 0 and "
                "near 100, mean the GPU sprints and waits.",
                by("le", "sum", RATE(sel(m.UTILIZATION_SAMPLES_BUCKET, *pods, HELD))),
                size=(12, 8),
            ),
            timeseries_panel(
                "CPU used vs limit",
                "CPU cores used by the pods against their limits. A pod pinned at its limit starves its "
                "GPUs.",
                "short",
                Query(
                    by("cluster, pod", "sum", RATE(sel("container_cpu_usage_seconds_total", *cpu))),
                    "used {{pod}} {{cluster}}",
                ),
                Query(
                    by(
                        "cluster, pod",
                        "sum",
                        sel("kube_pod_container_resource_limits", *pods, 'resource="cpu"'),
                    ),
                    "limit {{pod}} {{cluster}}",
                ),
                size=(12, 8),
            ),
            timeseries_panel(
                "CPU throttled share",
                "Share of CFS periods in which the pods' containers were throttled by their CPU limit.",
                "percentunit",
                Query(
                    by("cluster, pod", "sum", RATE(sel("container_cpu_cfs_throttled_periods_total", *cpu)))
                    + " / "
                    + by("cluster, pod", "sum", RATE(sel("container_cpu_cfs_periods_total", *cpu))),
                    "{{pod}} {{cluster}}",
                ),
                size=(12, 8),
                bounds=(0, 1),
            ),
            timeseries_panel(
                "Power draw of its GPUs",
                "Power of the physical GPUs the workload holds (shared by every MIG instance and every pod "
                "on them).",
                "watt",
                Query(
                    field(m.POWER_USAGE, keep="cluster, hostname, gpu, UUID")
                    + f" and on (cluster, UUID) {gpu_pods(*pods)}",
                    "{{hostname}}/{{gpu}} {{cluster}}",
                ),
                size=(12, 8),
            ),
            table_panel(
                "Devices",
                "Every device the selected pods hold, with the memory each holds.",
                "mbytes",
                Query(pod_memory_mib(*pods, keep=f"{POD_DEVICE}, modelName"), column="memory used (MiB)"),
                size=(24, 7),
            ),
        ],
    )
