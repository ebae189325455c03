"""The exported metrics: names, help text and types.

DCGM-compatible series keep dcgm-exporter's names, units and labels so dashboards, alerts and the
analyzer read either exporter. DCGM's counters are named without ``_total``; the Python client only
writes ``counter`` families with that suffix, so they are exposed as ``untyped`` under the exact DCGM
names (``rate()`` and ``increase()`` work the same). The exporter's own metrics follow Prometheus
naming: one prefix, base units.
"""

from __future__ import annotations

from typing import Final, NamedTuple


class MetricSpec(NamedTuple):
    name: str
    help: str
    type: str  # gauge | counter | untyped | histogram | info


GPU_UTIL: Final = "DCGM_FI_DEV_GPU_UTIL"
MEM_COPY_UTIL: Final = "DCGM_FI_DEV_MEM_COPY_UTIL"
FB_USED: Final = "DCGM_FI_DEV_FB_USED"
FB_FREE: Final = "DCGM_FI_DEV_FB_FREE"
POWER_USAGE: Final = "DCGM_FI_DEV_POWER_USAGE"
GPU_TEMP: Final = "DCGM_FI_DEV_GPU_TEMP"
SM_CLOCK: Final = "DCGM_FI_DEV_SM_CLOCK"
MEM_CLOCK: Final = "DCGM_FI_DEV_MEM_CLOCK"
TOTAL_ENERGY: Final = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
ENC_UTIL: Final = "DCGM_FI_DEV_ENC_UTIL"
DEC_UTIL: Final = "DCGM_FI_DEV_DEC_UTIL"
PCIE_REPLAY: Final = "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"
XID_ERRORS: Final = "DCGM_FI_DEV_XID_ERRORS"
CLOCK_THROTTLE_REASONS: Final = "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"
POWER_VIOLATION: Final = "DCGM_FI_DEV_POWER_VIOLATION"
THERMAL_VIOLATION: Final = "DCGM_FI_DEV_THERMAL_VIOLATION"
PROF_GR_ENGINE_ACTIVE: Final = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
PROF_SM_ACTIVE: Final = "DCGM_FI_PROF_SM_ACTIVE"
PROF_SM_OCCUPANCY: Final = "DCGM_FI_PROF_SM_OCCUPANCY"
PROF_PIPE_TENSOR_ACTIVE: Final = "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"
PROF_DRAM_ACTIVE: Final = "DCGM_FI_PROF_DRAM_ACTIVE"

GPU_UP: Final = "gpu_up"
UTILIZATION_SAMPLES: Final = "gpu_utilization_samples_percent"
XID_TOTAL: Final = "gpu_xid_errors_total"
COLLECT_DURATION: Final = "gpu_exporter_collect_duration_seconds"
LAST_COLLECT: Final = "gpu_exporter_last_collect_timestamp_seconds"
NVML_ERRORS: Final = "gpu_exporter_nvml_errors_total"
KUBELET_ERRORS: Final = "gpu_exporter_kubelet_errors_total"
BUILD_INFO: Final = "gpu_exporter_build_info"

#: Upper bounds of the utilization-sample histogram (percent); +Inf is implied.
SAMPLE_BUCKETS: Final = (5.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0)

_SPECS: Final = (
    MetricSpec(GPU_UTIL, "GPU utilization (in %).", "gauge"),
    MetricSpec(MEM_COPY_UTIL, "Memory utilization (in %).", "gauge"),
    MetricSpec(FB_USED, "Framebuffer memory used (in MiB).", "gauge"),
    MetricSpec(FB_FREE, "Framebuffer memory free (in MiB).", "gauge"),
    MetricSpec(POWER_USAGE, "Power draw (in W).", "gauge"),
    MetricSpec(GPU_TEMP, "GPU temperature (in C).", "gauge"),
    MetricSpec(SM_CLOCK, "SM clock frequency (in MHz).", "gauge"),
    MetricSpec(MEM_CLOCK, "Memory clock frequency (in MHz).", "gauge"),
    MetricSpec(TOTAL_ENERGY, "Total energy consumption since boot (in mJ).", "untyped"),
    MetricSpec(ENC_UTIL, "Encoder utilization (in %).", "gauge"),
    MetricSpec(DEC_UTIL, "Decoder utilization (in %).", "gauge"),
    MetricSpec(PCIE_REPLAY, "Total number of PCIe retries.", "untyped"),
    MetricSpec(XID_ERRORS, "Value of the last XID error encountered.", "gauge"),
    MetricSpec(CLOCK_THROTTLE_REASONS, "Current clock throttle (clock event) reasons, a bitmask.", "gauge"),
    MetricSpec(POWER_VIOLATION, "Throttling duration due to power constraints (in ns).", "untyped"),
    MetricSpec(THERMAL_VIOLATION, "Throttling duration due to thermal constraints (in ns).", "untyped"),
    MetricSpec(PROF_GR_ENGINE_ACTIVE, "Ratio of time the graphics engine is active.", "gauge"),
    MetricSpec(PROF_SM_ACTIVE, "The ratio of cycles an SM has at least 1 warp assigned.", "gauge"),
    MetricSpec(PROF_SM_OCCUPANCY, "The ratio of number of warps resident on an SM.", "gauge"),
    MetricSpec(PROF_PIPE_TENSOR_ACTIVE, "Ratio of cycles the tensor (HMMA) pipe is active.", "gauge"),
    MetricSpec(PROF_DRAM_ACTIVE, "Ratio of cycles the device memory interface is active.", "gauge"),
    MetricSpec(GPU_UP, "1 when the last collection read the GPU, 0 when NVML reported it lost.", "gauge"),
    MetricSpec(
        UTILIZATION_SAMPLES,
        "NVML's sub-second GPU utilization samples (percent), accumulated across collections.",
        "histogram",
    ),
    MetricSpec(XID_TOTAL, "XID critical errors reported by the driver, by XID.", "counter"),
    MetricSpec(COLLECT_DURATION, "Wall time of the last collection cycle.", "gauge"),
    MetricSpec(LAST_COLLECT, "Unix time at which the last successful collection finished.", "gauge"),
    MetricSpec(NVML_ERRORS, "NVML calls that failed, by function and NVML error code.", "counter"),
    MetricSpec(KUBELET_ERRORS, "Failed refreshes of the kubelet PodResources API.", "counter"),
    MetricSpec(BUILD_INFO, "Exporter build information; the value is always 1.", "gauge"),
)

SPECS: Final[dict[str, MetricSpec]] = {spec.name: spec for spec in _SPECS}
