"""The exported metrics: names (from the shared contract), help text and types.

DCGM-compatible series keep dcgm-exporter's names, units, labels and types, so dashboards, alerts and
the analyzer read either exporter. DCGM's counters are named without ``_total`` and typed ``counter``
under those exact names, as dcgm-exporter types them, which is why the exposition is the Prometheus
text format only (OpenMetrics would demand ``_total``). The exporter's own metrics follow Prometheus
naming: one prefix, base units.

:data:`SPECS` is keyed by the legacy DCGM names (dcgm-exporter up to 4.8), which are also the keys of
every reading and snapshot; :data:`SPECS_4_7` says how the renamed ones are served in DCGM 4.7's naming
(dcgm-exporter 4.9), whose units :mod:`exporter.naming` converts to.
"""

from __future__ import annotations

from typing import Final, NamedTuple

from common.metric_names import (
    BUILD_INFO,
    CAPABILITY,
    CLOCK_THROTTLE_REASONS,
    CLOCKS_EVENT_REASONS,
    COLLECT_DURATION,
    CORRECTABLE_REMAPPED_ROWS,
    DEC_UTIL,
    ECC_DBE_AGG_TOTAL,
    ECC_DBE_VOL_TOTAL,
    ECC_SBE_AGG_TOTAL,
    ECC_SBE_VOL_TOTAL,
    ENC_UTIL,
    FB_FREE,
    FB_RESERVED,
    FB_TOTAL,
    FB_USED,
    GPU_TEMP,
    GPU_UP,
    GPU_UTIL,
    KUBELET_ERRORS,
    LAST_COLLECT,
    MEM_CLOCK,
    MEM_COPY_UTIL,
    MEMORY_TEMP,
    NVLINK_BANDWIDTH_TOTAL,
    NVML_ERRORS,
    NVML_SECONDS,
    PCIE_REPLAY,
    POD_MEMORY_USED,
    POD_SM_UTILIZATION,
    POWER_USAGE,
    POWER_USAGE_INSTANT,
    POWER_VIOLATION,
    PROF_DRAM_ACTIVE,
    PROF_GR_ENGINE_ACTIVE,
    PROF_PCIE_RX_BYTES,
    PROF_PCIE_TX_BYTES,
    PROF_PIPE_TENSOR_ACTIVE,
    PROF_SM_ACTIVE,
    PROF_SM_OCCUPANCY,
    ROW_REMAP_FAILURE,
    SAMPLE_BUCKETS,
    SM_CLOCK,
    THERMAL_VIOLATION,
    TOTAL_ENERGY,
    UNCORRECTABLE_REMAPPED_ROWS,
    UTILIZATION_SAMPLES,
    XID_ERRORS,
    XID_TOTAL,
    current_name,
)

__all__ = [
    "BUILD_INFO",
    "CAPABILITY",
    "CLOCKS_EVENT_REASONS",
    "CLOCK_THROTTLE_REASONS",
    "COLLECT_DURATION",
    "CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FIELDS",
    "DEC_UTIL",
    "ECC_DBE_AGG_TOTAL",
    "ECC_DBE_VOL_TOTAL",
    "ECC_SBE_AGG_TOTAL",
    "ECC_SBE_VOL_TOTAL",
    "ENC_UTIL",
    "FB_FREE",
    "FB_RESERVED",
    "FB_TOTAL",
    "FB_USED",
    "GPU_TEMP",
    "GPU_UP",
    "GPU_UTIL",
    "KUBELET_ERRORS",
    "LAST_COLLECT",
    "MEMORY_TEMP",
    "MEM_CLOCK",
    "MEM_COPY_UTIL",
    "NVLINK_BANDWIDTH_TOTAL",
    "NVML_ERRORS",
    "NVML_SECONDS",
    "PCIE_REPLAY",
    "POD_MEMORY_USED",
    "POD_SM_UTILIZATION",
    "POWER_USAGE",
    "POWER_USAGE_INSTANT",
    "POWER_VIOLATION",
    "PROF_DRAM_ACTIVE",
    "PROF_GR_ENGINE_ACTIVE",
    "PROF_PCIE_RX_BYTES",
    "PROF_PCIE_TX_BYTES",
    "PROF_PIPE_TENSOR_ACTIVE",
    "PROF_SM_ACTIVE",
    "PROF_SM_OCCUPANCY",
    "ROW_REMAP_FAILURE",
    "SAMPLE_BUCKETS",
    "SM_CLOCK",
    "SPECS",
    "SPECS_4_7",
    "THERMAL_VIOLATION",
    "TOTAL_ENERGY",
    "UNCORRECTABLE_REMAPPED_ROWS",
    "UTILIZATION_SAMPLES",
    "XID_ERRORS",
    "XID_TOTAL",
    "MetricSpec",
]


class MetricSpec(NamedTuple):
    name: str
    help: str
    type: str  # gauge | counter | histogram


_SPECS: Final = (
    MetricSpec(GPU_UTIL, "GPU utilization (in %).", "gauge"),
    MetricSpec(MEM_COPY_UTIL, "Memory utilization (in %).", "gauge"),
    MetricSpec(FB_USED, "Framebuffer memory used (in MiB).", "gauge"),
    MetricSpec(FB_FREE, "Framebuffer memory free (in MiB).", "gauge"),
    MetricSpec(FB_RESERVED, "Framebuffer memory reserved (in MiB).", "gauge"),
    MetricSpec(FB_TOTAL, "Framebuffer memory total (in MiB).", "gauge"),
    MetricSpec(POWER_USAGE, "Power draw (in W).", "gauge"),
    MetricSpec(POWER_USAGE_INSTANT, "Current instantaneous power usage of the device (in W).", "gauge"),
    MetricSpec(GPU_TEMP, "GPU temperature (in C).", "gauge"),
    MetricSpec(MEMORY_TEMP, "Memory temperature (in C).", "gauge"),
    MetricSpec(SM_CLOCK, "SM clock frequency (in MHz).", "gauge"),
    MetricSpec(MEM_CLOCK, "Memory clock frequency (in MHz).", "gauge"),
    MetricSpec(TOTAL_ENERGY, "Total energy consumption since boot (in mJ).", "counter"),
    MetricSpec(ENC_UTIL, "Encoder utilization (in %).", "gauge"),
    MetricSpec(DEC_UTIL, "Decoder utilization (in %).", "gauge"),
    MetricSpec(PCIE_REPLAY, "Total number of PCIe retries.", "counter"),
    MetricSpec(XID_ERRORS, "Value of the last XID error encountered.", "gauge"),
    MetricSpec(CLOCK_THROTTLE_REASONS, "Current clock throttle (clock event) reasons, a bitmask.", "gauge"),
    MetricSpec(CLOCKS_EVENT_REASONS, "Current clock event reasons, a bitmask.", "gauge"),
    MetricSpec(POWER_VIOLATION, "Throttling duration due to power constraints (in ns).", "counter"),
    MetricSpec(THERMAL_VIOLATION, "Throttling duration due to thermal constraints (in ns).", "counter"),
    MetricSpec(ECC_SBE_VOL_TOTAL, "Total number of single-bit volatile ECC errors.", "counter"),
    MetricSpec(ECC_DBE_VOL_TOTAL, "Total number of double-bit volatile ECC errors.", "counter"),
    MetricSpec(ECC_SBE_AGG_TOTAL, "Total number of single-bit persistent ECC errors.", "counter"),
    MetricSpec(ECC_DBE_AGG_TOTAL, "Total number of double-bit persistent ECC errors.", "counter"),
    MetricSpec(UNCORRECTABLE_REMAPPED_ROWS, "Number of remapped rows for uncorrectable errors.", "counter"),
    MetricSpec(CORRECTABLE_REMAPPED_ROWS, "Number of remapped rows for correctable errors.", "counter"),
    MetricSpec(ROW_REMAP_FAILURE, "Whether remapping of rows has failed.", "gauge"),
    # DCGM's figure is a rate; dcgm-exporter's counters files type it counter nonetheless, and so do we.
    MetricSpec(
        NVLINK_BANDWIDTH_TOTAL,
        "NVLink data traffic over all links, TX + RX, since the previous collection (in KiB/s / 1000).",
        "counter",
    ),
    MetricSpec(PROF_GR_ENGINE_ACTIVE, "Ratio of time the graphics engine is active.", "gauge"),
    MetricSpec(PROF_SM_ACTIVE, "The ratio of cycles an SM has at least 1 warp assigned.", "gauge"),
    MetricSpec(PROF_SM_OCCUPANCY, "The ratio of number of warps resident on an SM.", "gauge"),
    MetricSpec(PROF_PIPE_TENSOR_ACTIVE, "Ratio of cycles the tensor (HMMA) pipe is active.", "gauge"),
    MetricSpec(PROF_DRAM_ACTIVE, "Ratio of cycles the device memory interface is active.", "gauge"),
    MetricSpec(PROF_PCIE_TX_BYTES, "The rate of data transmitted over the PCIe bus (in B/s).", "gauge"),
    MetricSpec(PROF_PCIE_RX_BYTES, "The rate of data received over the PCIe bus (in B/s).", "gauge"),
    MetricSpec(GPU_UP, "1 when the last collection read the GPU, 0 when NVML reported it lost.", "gauge"),
    MetricSpec(
        UTILIZATION_SAMPLES,
        "NVML's sub-second GPU utilization samples (percent), accumulated across collections.",
        "histogram",
    ),
    MetricSpec(
        POD_SM_UTILIZATION,
        "A pod's share of a shared GPU's SM utilization (in %); summed over pods, at most the GPU's.",
        "gauge",
    ),
    MetricSpec(POD_MEMORY_USED, "Frame-buffer memory a pod's processes hold on a shared GPU.", "gauge"),
    MetricSpec(
        XID_TOTAL,
        "XID critical errors reported by the driver: by XID (label xid), and all of a GPU's (no xid).",
        "counter",
    ),
    MetricSpec(COLLECT_DURATION, "Wall time of the last collection cycle.", "gauge"),
    MetricSpec(LAST_COLLECT, "Unix time at which the last successful collection finished.", "gauge"),
    MetricSpec(NVML_ERRORS, "NVML calls that failed, by function and NVML error code.", "counter"),
    MetricSpec(NVML_SECONDS, "Seconds spent in NVML calls (the driver's time), by function.", "counter"),
    MetricSpec(KUBELET_ERRORS, "Failed refreshes of the kubelet PodResources API.", "counter"),
    MetricSpec(BUILD_INFO, "Exporter build information; the value is always 1.", "gauge"),
    MetricSpec(
        CAPABILITY,
        "1 when NVML offers the capability's metric family on this GPU, 0 when it does not"
        " (gpm, mig, process_utilization, samples, nvlink, ecc).",
        "gauge",
    ),
)

SPECS: Final[dict[str, MetricSpec]] = {spec.name: spec for spec in _SPECS}


def _renamed(legacy: str, help: str) -> tuple[str, MetricSpec]:
    return legacy, MetricSpec(current_name(legacy), help, SPECS[legacy].type)


#: Legacy name → how DCGM 4.7's naming serves that family (its name, and help in its units); the
#: families absent here are served under their legacy name in both namings.
SPECS_4_7: Final[dict[str, MetricSpec]] = dict(
    (
        _renamed(GPU_UTIL, "GPU utilization (ratio 0-1)."),
        _renamed(MEM_COPY_UTIL, "Memory copy utilization (ratio 0-1)."),
        _renamed(FB_USED, "Framebuffer memory used (in bytes)."),
        _renamed(FB_FREE, "Framebuffer memory free (in bytes)."),
        _renamed(FB_RESERVED, "Framebuffer memory reserved (in bytes)."),
        _renamed(FB_TOTAL, "Framebuffer memory capacity (in bytes)."),
        _renamed(POWER_USAGE, "Power draw (in W)."),
        _renamed(POWER_USAGE_INSTANT, "Current instantaneous power usage of the device (in W)."),
        _renamed(GPU_TEMP, "GPU temperature (in C)."),
        _renamed(MEMORY_TEMP, "Memory temperature (in C)."),
        _renamed(SM_CLOCK, "SM clock frequency (in Hz)."),
        _renamed(MEM_CLOCK, "Memory clock frequency (in Hz)."),
        _renamed(TOTAL_ENERGY, "Total energy consumption since the driver loaded (in J)."),
        _renamed(ENC_UTIL, "Encoder utilization (ratio 0-1)."),
        _renamed(DEC_UTIL, "Decoder utilization (ratio 0-1)."),
        _renamed(PCIE_REPLAY, "Total number of PCIe retries."),
        _renamed(XID_ERRORS, "Value of the last XID error encountered."),
        _renamed(UNCORRECTABLE_REMAPPED_ROWS, "Number of remapped rows for uncorrectable errors."),
        _renamed(CORRECTABLE_REMAPPED_ROWS, "Number of remapped rows for correctable errors."),
        _renamed(ROW_REMAP_FAILURE, "Whether remapping of rows has failed."),
        _renamed(
            NVLINK_BANDWIDTH_TOTAL,
            "NVLink data traffic over all links, TX + RX, since the previous collection (in B/s).",
        ),
        _renamed(PROF_GR_ENGINE_ACTIVE, "Ratio of time the graphics engine is active."),
        _renamed(PROF_SM_ACTIVE, "The ratio of cycles an SM has at least 1 warp assigned."),
        _renamed(PROF_SM_OCCUPANCY, "The ratio of number of warps resident on an SM."),
        _renamed(PROF_PIPE_TENSOR_ACTIVE, "Ratio of cycles the tensor (HMMA) pipe is active."),
        _renamed(PROF_DRAM_ACTIVE, "Ratio of cycles the device memory interface is active."),
    )
)

#: The DCGM-named families, which a dcgm-exporter counters file (``--collectors``) may select.
DCGM_FIELDS: Final = frozenset(name for name in SPECS if name.startswith("DCGM_FI_"))
