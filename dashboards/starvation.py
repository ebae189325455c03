"""GPU starvation (uid ``kgr-starvation``): is the GPU waiting for its input?"""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as d

from common import metric_names as m
from dashboards import board
from dashboards.board import Options, Row
from dashboards.panels import Query, heatmap_panel, table_panel, timeseries_panel
from dashboards.promql import (
    HELD,
    POD_DEVICE,
    Wrap,
    by,
    cpu_share,
    field,
    gpu_pods,
    over,
    pod_util,
    same,
    sel,
)

NAMESPACE = 'namespace=~"$namespace"'
POD = 'pod=~"$pod"'
PODS = (NAMESPACE, POD)
CPU = (NAMESPACE, POD, 'container!=""')
KEY = "cluster, namespace, pod"
LEGEND = "{{namespace}}/{{pod}} {{cluster}}"
#: gpu-exporter's bucket bounds as older and newer Prometheus clients write them.
STALLED, BUSY = 'le=~"10|10.0"', 'le=~"75|75.0"'


def _share_at_or_below(le: str, rate: Wrap) -> str:
    """Share of each pod's utilization samples in the buckets up to ``le``."""
    below = by(KEY, "sum", rate(sel(m.UTILIZATION_SAMPLES_BUCKET, *PODS, HELD, le)))
    return f"{below} / {by(KEY, 'sum', rate(sel(m.UTILIZATION_SAMPLES_COUNT, *PODS, HELD)))}"


def _cpu_used_of_limit(rate: Wrap, limit: Wrap) -> str:
    usage = rate(sel("container_cpu_usage_seconds_total", *CPU))
    return cpu_share(
        usage, limit(sel("kube_pod_container_resource_limits", *PODS, 'resource="cpu"')), gpu_pods(*PODS)
    )


def _cpu_throttled(rate: Wrap) -> str:
    throttled = rate(sel("container_cpu_cfs_throttled_periods_total", *CPU))
    return cpu_share(throttled, rate(sel("container_cpu_cfs_periods_total", *CPU)), gpu_pods(*PODS))


def build(options: Options) -> d.Dashboard:
    now, whole = over("rate", "$__rate_interval"), over("rate", "$__range")
    return board.dashboard(
        "kgr-starvation",
        "GPU starvation",
        "Is the GPU waiting for its input? The exporter's sub-second utilization samples as a heatmap, and "
        "GPU against CPU saturation per pod.",
        options,
        [
            board.label_variable("namespace", "Namespace", gpu_pods()),
            board.label_variable("pod", "Pod", gpu_pods(NAMESPACE)),
        ],
        [
            Row("Sub-second utilization samples (gpu-exporter)"),
            heatmap_panel(
                "Utilization samples over time",
                "gpu-exporter counts NVML's sub-second samples into buckets (5, 10, 25, 50, 75, 90, 95 %). A "
                "starving GPU shows two bands, near 0 and near 100, even when its gauge reads a flat 50 %.",
                by("le", "sum", now(sel(m.UTILIZATION_SAMPLES_BUCKET, *PODS, HELD))),
                size=(24, 9),
            ),
            timeseries_panel(
                "Stalled and busy shares",
                "Share of samples at or below 10 % (stalled) and above 75 % (busy), per pod. Both above 20 % "
                "is the starvation signature.",
                "percentunit",
                Query(_share_at_or_below(STALLED, now), f"stalled {LEGEND}"),
                Query(f"1 - ({_share_at_or_below(BUSY, now)})", f"busy {LEGEND}"),
                size=(12, 8),
                bounds=(0, 1),
            ),
            timeseries_panel(
                "Sample mean vs scrape gauge",
                "Mean of the sub-second samples against the utilization gauge as scraped "
                "(DCGM_FI_DEV_GPU_UTIL, or DCGM_FI_DEV_GPU_UTIL_RATIO in percent). Where they agree but the "
                "samples are bimodal, the gauge is hiding stalls.",
                "percent",
                Query(
                    f"{by(KEY, 'sum', now(sel(f'{m.UTILIZATION_SAMPLES}_sum', *PODS, HELD)))} / "
                    f"{by(KEY, 'sum', now(sel(m.UTILIZATION_SAMPLES_COUNT, *PODS, HELD)))}",
                    f"samples {LEGEND}",
                ),
                Query(by(KEY, "avg", field(m.GPU_UTIL, *PODS, HELD, keep=POD_DEVICE)), f"gauge {LEGEND}"),
                size=(12, 8),
                bounds=(0, 100),
            ),
            table_panel(
                "Bimodal pods over the range",
                "Per pod with gpu-exporter data: share of samples stalled (≤ 10 %) and busy (> 75 %) over "
                "the selected range.",
                "percentunit",
                Query(_share_at_or_below(STALLED, whole), column="stalled share"),
                Query(f"1 - ({_share_at_or_below(BUSY, whole)})", column="busy share"),
                size=(24, 7),
            ),
            Row("GPU vs CPU saturation"),
            timeseries_panel(
                "GPU utilization",
                "Mean GPU utilization per pod, as scraped (a pod's own share on a GPU gpu-exporter saw "
                "shared).",
                "percent",
                Query(by(KEY, "avg", pod_util(*PODS)), LEGEND),
                size=(8, 8),
                bounds=(0, 100),
            ),
            timeseries_panel(
                "CPU used / limit",
                "CPU used as a share of the pod's limit, for pods holding GPUs. Near 1 with middling GPU "
                "utilization: the input pipeline is CPU-bound.",
                "percentunit",
                Query(_cpu_used_of_limit(now, same), LEGEND),
                size=(8, 8),
            ),
            timeseries_panel(
                "CPU throttled share",
                "Share of CFS periods throttled, for pods holding GPUs.",
                "percentunit",
                Query(_cpu_throttled(now), LEGEND),
                size=(8, 8),
                bounds=(0, 1),
            ),
            table_panel(
                "GPU vs CPU over the range",
                "Per GPU pod over the selected range: mean GPU utilization, CPU used against its limit, and "
                "the throttled share.",
                "short",
                Query(
                    by(KEY, "avg", pod_util(*PODS, window=over("avg_over_time", "$__range"))),
                    column="GPU util %",
                    unit="percent",
                ),
                Query(
                    _cpu_used_of_limit(whole, over("avg_over_time", "$__range")),
                    column="CPU used / limit",
                    unit="percentunit",
                ),
                Query(_cpu_throttled(whole), column="CPU throttled share", unit="percentunit"),
                size=(24, 8),
            ),
        ],
    )
