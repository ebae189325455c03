"""The metric-name contract between the exporter, which serves these series, and the analyzer, which
reads them (docs/architecture.md, "Metric names").

DCGM names are dcgm-exporter's, so dashboards, rules and the analyzer read either exporter. Our own
series follow Prometheus naming under the ``gpu_`` prefix. The fleet simulator keeps its own copy of
the names it writes on purpose: it is the oracle the analyzer is tested against, and a shared typo
would pass unnoticed.
"""

from __future__ import annotations

from typing import Final

# -- DCGM fields (dcgm-exporter's names, units and labels) ----------------------------------------------
GPU_UTIL: Final = "DCGM_FI_DEV_GPU_UTIL"
MEM_COPY_UTIL: Final = "DCGM_FI_DEV_MEM_COPY_UTIL"
ENC_UTIL: Final = "DCGM_FI_DEV_ENC_UTIL"
DEC_UTIL: Final = "DCGM_FI_DEV_DEC_UTIL"
FB_USED: Final = "DCGM_FI_DEV_FB_USED"
FB_FREE: Final = "DCGM_FI_DEV_FB_FREE"
FB_RESERVED: Final = "DCGM_FI_DEV_FB_RESERVED"
POWER_USAGE: Final = "DCGM_FI_DEV_POWER_USAGE"
POWER_USAGE_INSTANT: Final = "DCGM_FI_DEV_POWER_USAGE_INSTANT"
TOTAL_ENERGY: Final = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
GPU_TEMP: Final = "DCGM_FI_DEV_GPU_TEMP"
MEMORY_TEMP: Final = "DCGM_FI_DEV_MEMORY_TEMP"
SM_CLOCK: Final = "DCGM_FI_DEV_SM_CLOCK"
MEM_CLOCK: Final = "DCGM_FI_DEV_MEM_CLOCK"
PCIE_REPLAY: Final = "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"
XID_ERRORS: Final = "DCGM_FI_DEV_XID_ERRORS"
#: DCGM field 112 under its older name (dcgm-exporter's default) and its newer one (DCGM 3.3+).
CLOCK_THROTTLE_REASONS: Final = "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"
CLOCKS_EVENT_REASONS: Final = "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"
POWER_VIOLATION: Final = "DCGM_FI_DEV_POWER_VIOLATION"
THERMAL_VIOLATION: Final = "DCGM_FI_DEV_THERMAL_VIOLATION"
ECC_SBE_VOL_TOTAL: Final = "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"
ECC_DBE_VOL_TOTAL: Final = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"
ECC_SBE_AGG_TOTAL: Final = "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL"
ECC_DBE_AGG_TOTAL: Final = "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL"
CORRECTABLE_REMAPPED_ROWS: Final = "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"
UNCORRECTABLE_REMAPPED_ROWS: Final = "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"
ROW_REMAP_FAILURE: Final = "DCGM_FI_DEV_ROW_REMAP_FAILURE"
NVLINK_BANDWIDTH_TOTAL: Final = "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"
PROF_GR_ENGINE_ACTIVE: Final = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
PROF_SM_ACTIVE: Final = "DCGM_FI_PROF_SM_ACTIVE"
PROF_SM_OCCUPANCY: Final = "DCGM_FI_PROF_SM_OCCUPANCY"
PROF_PIPE_TENSOR_ACTIVE: Final = "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"
PROF_DRAM_ACTIVE: Final = "DCGM_FI_PROF_DRAM_ACTIVE"
PROF_PCIE_TX_BYTES: Final = "DCGM_FI_PROF_PCIE_TX_BYTES"
PROF_PCIE_RX_BYTES: Final = "DCGM_FI_PROF_PCIE_RX_BYTES"

# -- our own series ----------------------------------------------------------------------------------
GPU_UP: Final = "gpu_up"
UTILIZATION_SAMPLES: Final = "gpu_utilization_samples_percent"
UTILIZATION_SAMPLES_BUCKET: Final = UTILIZATION_SAMPLES + "_bucket"
UTILIZATION_SAMPLES_COUNT: Final = UTILIZATION_SAMPLES + "_count"
#: Per-pod shares of a shared (time-sliced) GPU; they sum to at most the GPU's own series.
POD_SM_UTILIZATION: Final = "gpu_pod_sm_utilization_percent"
POD_MEMORY_USED: Final = "gpu_pod_memory_used_bytes"
XID_TOTAL: Final = "gpu_xid_errors_total"
COLLECT_DURATION: Final = "gpu_exporter_collect_duration_seconds"
LAST_COLLECT: Final = "gpu_exporter_last_collect_timestamp_seconds"
NVML_ERRORS: Final = "gpu_exporter_nvml_errors_total"
KUBELET_ERRORS: Final = "gpu_exporter_kubelet_errors_total"
BUILD_INFO: Final = "gpu_exporter_build_info"
#: Per GPU and capability (exporter/capabilities.py): 1 when NVML offers that family there, 0 when not.
CAPABILITY: Final = "gpu_exporter_capability"

#: Upper bounds of the utilization-sample histogram (percent); +Inf is implied.
SAMPLE_BUCKETS: Final = (5.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0)
