"""GPU node (uid ``kgr-node``): hardware health per node, the panels dcgm-exporter's own dashboard
(grafana.com 12239) has (per-GPU utilization, memory, power, temperature, SM clock, XID) among them."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as d
from grafana_foundation_sdk.builders import timeseries

from common import metric_names as m
from dashboards import board
from dashboards.board import Options, Row
from dashboards.panels import Query, stat_panel, table_panel, timeseries_panel
from dashboards.promql import NODE_GPU, alternatives, by, on_node, over, present, sel

GPU_LEGEND = "{{hostname}}/{{gpu}} {{cluster}}"
RATE = over("rate", "$__rate_interval")
#: Field 112 under either of its names (DCGM renamed it in 3.3); the bitmask is the same.
REASONS = alternatives(
    ((m.CLOCKS_EVENT_REASONS, ""), (m.CLOCK_THROTTLE_REASONS, "")), keep=NODE_GPU, node=True
)
INVENTORY = f"cluster, hostname, gpu, UUID, modelName, pci_bus_id, {m.DRIVER_VERSION_LABEL_4_7}"


def _per_gpu(
    title: str, description: str, unit: str, metric: str, bounds: tuple[float, float] | None = None
) -> timeseries.Panel:
    """One line per GPU of a gauge."""
    query = Query(on_node(metric), GPU_LEGEND)
    return timeseries_panel(title, description, unit, query, size=(12, 8), bounds=bounds)


def build(options: Options) -> d.Dashboard:
    reasons = REASONS
    device = f"{NODE_GPU}, GPU_I_ID"
    used, free = on_node(m.FB_USED, keep=device), on_node(m.FB_FREE, keep=device)
    node_variable = board.query_variable(
        "node",
        "Node",
        f"query_result({present(m.FB_USED, keep='Hostname, hostname')})",
        regex='/[Hh]ostname="([^"]+)"/',
    )
    return board.dashboard(
        "kgr-node",
        "GPU node",
        "Per-node GPU health: temperature, power, throttling, clocks, XIDs and exporter health.",
        options,
        [node_variable],
        [
            Row("Thermal and power"),
            _per_gpu(
                "Temperature",
                "GPU die temperature. Most data-centre GPUs slow down in the high 80s °C.",
                "celsius",
                m.GPU_TEMP,
            ),
            _per_gpu("Power draw", "Power per GPU.", "watt", m.POWER_USAGE),
            timeseries_panel(
                "Throttling (1 = active)",
                "Clock throttle reasons decoded from DCGM_FI_DEV_CLOCK_THROTTLE_REASONS "
                "(DCGM_FI_DEV_CLOCKS_EVENT_REASONS in newer DCGM): thermal slowdown (software or hardware), "
                "hardware power brake, software power cap. Not every exporter reports them.",
                "short",
                Query(f"clamp_max(floor({reasons} / 32) % 4, 1)", f"thermal {GPU_LEGEND}"),
                Query(f"floor({reasons} / 128) % 2", f"power brake {GPU_LEGEND}"),
                Query(f"floor({reasons} / 4) % 2", f"power cap {GPU_LEGEND}"),
                size=(12, 8),
                bounds=(0, 1),
            ),
            timeseries_panel(
                "Time spent throttled",
                "Share of time clocks were held down by thermal or power limits (DCGM violation counters, "
                "nanoseconds).",
                "percentunit",
                Query(f"{on_node(m.THERMAL_VIOLATION, window=RATE)} / 1e9", f"thermal {GPU_LEGEND}"),
                Query(f"{on_node(m.POWER_VIOLATION, window=RATE)} / 1e9", f"power {GPU_LEGEND}"),
                size=(12, 8),
                bounds=(0, 1),
            ),
            stat_panel(
                "Energy in range",
                "Energy drawn by the selected nodes' GPUs over the selected range.",
                "kwatth",
                f"sum({on_node(m.TOTAL_ENERGY, window=over('increase', '$__range'))}) / 3.6e9",
                size=(6, 6),
                decimals=1,
            ),
            stat_panel(
                "Mean power (range)",
                "Mean total power of the selected nodes' GPUs over the range.",
                "watt",
                f"sum({on_node(m.POWER_USAGE, window=over('avg_over_time', '$__range'))})",
                size=(6, 6),
            ),
            timeseries_panel(
                "Energy rate by node",
                "Power derived from the energy counter (millijoules, or joules in DCGM 4.7's naming), per "
                "node.",
                "watt",
                Query(
                    f"{by('cluster, hostname', 'sum', on_node(m.TOTAL_ENERGY, window=RATE))} / 1000",
                    "{{hostname}} {{cluster}}",
                ),
                size=(12, 6),
            ),
            Row("Clocks and load"),
            _per_gpu(
                "SM clock",
                "Streaming-multiprocessor clock. A busy GPU whose SM clock sags is being throttled.",
                "rotmhz",
                m.SM_CLOCK,
            ),
            _per_gpu("Memory clock", "Memory clock.", "rotmhz", m.MEM_CLOCK),
            _per_gpu(
                "GPU utilization",
                "Utilization per GPU (whole GPUs; MIG instances have no per-instance value here).",
                "percent",
                m.GPU_UTIL,
                bounds=(0, 100),
            ),
            timeseries_panel(
                "Memory used",
                "Framebuffer memory used as a share of each device's memory.",
                "percent",
                Query(
                    f"100 * {used} / ({used} + {free})",
                    "{{hostname}}/{{gpu}} {{GPU_I_ID}} {{cluster}}",
                ),
                size=(12, 8),
                bounds=(0, 100),
            ),
            Row("Errors"),
            stat_panel(
                "Last XID per GPU",
                "The last XID each GPU reported (DCGM_FI_DEV_XID_ERRORS, DCGM_FI_DEV_XID_ERROR in DCGM 4.7's "
                "naming); 0 means none. XIDs 48, 62, 64, 74, 79, 92, 94, 95, 119 and 120 need a reset or a "
                "drain.",
                "short",
                on_node(m.XID_ERRORS, keep="cluster, hostname, gpu"),
                size=(12, 6),
                alert_at=(1, "red"),
            ),
            table_panel(
                "XIDs in range (gpu-exporter)",
                "XID events counted by gpu-exporter over the selected range, by GPU and XID.",
                "short",
                Query(
                    on_node(
                        m.XID_TOTAL,
                        'xid!=""',  # the per-GPU total (no xid label) is the sum of these rows
                        keep="cluster, hostname, gpu, UUID, xid",
                        window=over("increase", "$__range"),
                    ),
                    column="events",
                ),
                size=(12, 6),
            ),
            timeseries_panel(
                "GPU readable (gpu-exporter)",
                "1 while gpu-exporter can read the GPU through NVML, 0 once it is lost (fallen off the bus, "
                "XID 79).",
                "short",
                Query(on_node(m.GPU_UP), GPU_LEGEND),
                size=(12, 6),
                bounds=(0, 1),
            ),
            table_panel(
                "Exporter targets",
                "Scrape health of the GPU exporters and, for gpu-exporter, the age of its last successful "
                "collection. Exporters' own series carry no node label: every target of the selected "
                "clusters is listed.",
                "short",
                Query(
                    by("cluster, job, instance", "max", sel("up", 'job=~".*(gpu-exporter|dcgm-exporter).*"')),
                    column="up",
                ),
                Query(
                    by("cluster, job, instance", "max", f"time() - {sel(m.LAST_COLLECT)}"),
                    column="seconds since last collection",
                    unit="s",
                ),
                size=(12, 6),
            ),
            Row("Inventory"),
            table_panel(
                "GPUs",
                "Model, driver, PCI address and memory of every GPU on the selected nodes.",
                "mbytes",
                Query(
                    f"{on_node(m.FB_FREE, keep=INVENTORY)} + {on_node(m.FB_USED, keep=INVENTORY)}",
                    column="memory (MiB)",
                ),
                size=(24, 8),
            ),
        ],
    )
