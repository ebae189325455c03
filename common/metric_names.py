"""The metric-name contract between the exporter, which serves these series, and the analyzer, the
rules and the dashboards, which read them (docs/architecture.md, "Metric names").

DCGM names are dcgm-exporter's, so dashboards, rules and the analyzer read either exporter. Two
namings exist: the legacy one (dcgm-exporter up to 4.8) and DCGM 4.7's field naming standard
(``DCGM_FI_<domain>_<subsystem>_<property>[_<unit>][_<suffix>]``), which dcgm-exporter 4.9 serves, with
base units (ratios, bytes, hertz, joules). ``DCGM_4_7`` below is the one table of the renames: a
spelling found wrong is corrected on one line. Our own series follow Prometheus naming under the
``gpu_`` prefix. The fleet simulator keeps its own copy of the names it writes on purpose: it is the
oracle the analyzer is tested against, and a shared typo would pass unnoticed.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final, NamedTuple

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
#: Not served by default in the legacy naming; DCGM 4.7's names are below.
FB_TOTAL: Final = "DCGM_FI_DEV_FB_TOTAL"
POWER_MGMT_LIMIT: Final = "DCGM_FI_DEV_POWER_MGMT_LIMIT"
ENFORCED_POWER_LIMIT: Final = "DCGM_FI_DEV_ENFORCED_POWER_LIMIT"

# -- the same fields under DCGM 4.7's naming standard (dcgm-exporter 4.9) ----------------------------
# Names from DCGM's dcgm_fields.h deprecated-alias block where it shows them; the framebuffer, clock
# and memory-copy names follow the standard's grammar until a header or a 4.9 exposition says otherwise.
GPU_UTIL_RATIO: Final = "DCGM_FI_DEV_GPU_UTIL_RATIO"
MEMORY_COPY_UTIL_RATIO: Final = "DCGM_FI_DEV_MEMORY_COPY_UTIL_RATIO"
ENC_UTIL_RATIO: Final = "DCGM_FI_DEV_ENC_UTIL_RATIO"
DEC_UTIL_RATIO: Final = "DCGM_FI_DEV_DEC_UTIL_RATIO"
FB_USED_BYTES: Final = "DCGM_FI_DEV_FB_USED_BYTES"
FB_FREE_BYTES: Final = "DCGM_FI_DEV_FB_FREE_BYTES"
FB_RESERVED_BYTES: Final = "DCGM_FI_DEV_FB_RESERVED_BYTES"
FB_CAPACITY_BYTES: Final = "DCGM_FI_DEV_FB_CAPACITY_BYTES"
BOARD_POWER_WATTS: Final = "DCGM_FI_DEV_BOARD_POWER_WATTS"
BOARD_POWER_RAW_WATTS: Final = "DCGM_FI_DEV_BOARD_POWER_RAW_WATTS"
BOARD_POWER_LIMIT_REQUESTED_WATTS: Final = "DCGM_FI_DEV_BOARD_POWER_LIMIT_REQUESTED_WATTS"
BOARD_POWER_LIMIT_ENFORCED_WATTS: Final = "DCGM_FI_DEV_BOARD_POWER_LIMIT_ENFORCED_WATTS"
GPU_ENERGY_JOULES_TOTAL: Final = "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL"
GPU_TEMP_CELSIUS: Final = "DCGM_FI_DEV_GPU_TEMP_CELSIUS"
MEMORY_TEMP_CELSIUS: Final = "DCGM_FI_DEV_MEMORY_TEMP_CELSIUS"
SM_CLOCK_HERTZ: Final = "DCGM_FI_DEV_SM_CLOCK_HERTZ"
MEMORY_CLOCK_HERTZ: Final = "DCGM_FI_DEV_MEMORY_CLOCK_HERTZ"
PCIE_REPLAY_TOTAL: Final = "DCGM_FI_DEV_PCIE_REPLAY_TOTAL"
XID_ERROR: Final = "DCGM_FI_DEV_XID_ERROR"
ROW_REMAP_CORRECTABLE_TOTAL: Final = "DCGM_FI_DEV_ROW_REMAP_CORRECTABLE_TOTAL"
ROW_REMAP_UNCORRECTABLE_TOTAL: Final = "DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL"
ROW_REMAP_FAILED: Final = "DCGM_FI_DEV_ROW_REMAP_FAILED"
NVLINK_THROUGHPUT_TOTAL: Final = "DCGM_FI_DEV_NVLINK_THROUGHPUT_TOTAL"
PROF_GR_ENGINE_UTIL_RATIO: Final = "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO"
PROF_SM_UTIL_RATIO: Final = "DCGM_FI_PROF_SM_UTIL_RATIO"
PROF_SM_OCCUPANCY_RATIO: Final = "DCGM_FI_PROF_SM_OCCUPANCY_RATIO"
PROF_TENSOR_UTIL_RATIO: Final = "DCGM_FI_PROF_TENSOR_UTIL_RATIO"
PROF_DRAM_UTIL_RATIO: Final = "DCGM_FI_PROF_DRAM_UTIL_RATIO"

# -- labels that changed name ---------------------------------------------------------------------------
#: The node label: ``Hostname`` up to dcgm-exporter 4.8.2, ``hostname`` from 4.8.3 on.
HOSTNAME_LEGACY: Final = "Hostname"
HOSTNAME: Final = "hostname"
#: The driver-version label: DCGM's field name, renamed by the naming standard.
DRIVER_VERSION_LABEL: Final = "DCGM_FI_DRIVER_VERSION"
DRIVER_VERSION_LABEL_4_7: Final = "DCGM_FI_SYSTEM_DRIVER_VERSION"


class Renamed(NamedTuple):
    """One field's legacy and DCGM 4.7 names, and how a legacy value becomes a 4.7 one."""

    legacy: str
    current: str
    #: Multiply a value in the legacy unit by this to get the 4.7 unit (percent → ratio: 0.01).
    to_current: float = 1.0


_PERCENT_TO_RATIO: Final = 0.01
_MIB_TO_BYTES: Final = 1024.0 * 1024.0
_MHZ_TO_HERTZ: Final = 1e6
_MJ_TO_JOULES: Final = 1e-3
_MB_TO_BYTES: Final = 1e6

#: Every rename between the two namings, in one table (dcgm-exporter 4.9's 23 default and profiling
#: renames, and the fields our exporter serves besides). Fields absent here kept their name.
DCGM_4_7: Final[tuple[Renamed, ...]] = (
    Renamed(GPU_UTIL, GPU_UTIL_RATIO, _PERCENT_TO_RATIO),
    Renamed(MEM_COPY_UTIL, MEMORY_COPY_UTIL_RATIO, _PERCENT_TO_RATIO),
    Renamed(ENC_UTIL, ENC_UTIL_RATIO, _PERCENT_TO_RATIO),
    Renamed(DEC_UTIL, DEC_UTIL_RATIO, _PERCENT_TO_RATIO),
    Renamed(FB_USED, FB_USED_BYTES, _MIB_TO_BYTES),
    Renamed(FB_FREE, FB_FREE_BYTES, _MIB_TO_BYTES),
    Renamed(FB_RESERVED, FB_RESERVED_BYTES, _MIB_TO_BYTES),
    Renamed(FB_TOTAL, FB_CAPACITY_BYTES, _MIB_TO_BYTES),
    Renamed(POWER_USAGE, BOARD_POWER_WATTS),
    Renamed(POWER_USAGE_INSTANT, BOARD_POWER_RAW_WATTS),
    Renamed(POWER_MGMT_LIMIT, BOARD_POWER_LIMIT_REQUESTED_WATTS),
    Renamed(ENFORCED_POWER_LIMIT, BOARD_POWER_LIMIT_ENFORCED_WATTS),
    Renamed(TOTAL_ENERGY, GPU_ENERGY_JOULES_TOTAL, _MJ_TO_JOULES),
    Renamed(GPU_TEMP, GPU_TEMP_CELSIUS),
    Renamed(MEMORY_TEMP, MEMORY_TEMP_CELSIUS),
    Renamed(SM_CLOCK, SM_CLOCK_HERTZ, _MHZ_TO_HERTZ),
    Renamed(MEM_CLOCK, MEMORY_CLOCK_HERTZ, _MHZ_TO_HERTZ),
    Renamed(PCIE_REPLAY, PCIE_REPLAY_TOTAL),
    Renamed(XID_ERRORS, XID_ERROR),
    Renamed(CORRECTABLE_REMAPPED_ROWS, ROW_REMAP_CORRECTABLE_TOTAL),
    Renamed(UNCORRECTABLE_REMAPPED_ROWS, ROW_REMAP_UNCORRECTABLE_TOTAL),
    Renamed(ROW_REMAP_FAILURE, ROW_REMAP_FAILED),
    Renamed(NVLINK_BANDWIDTH_TOTAL, NVLINK_THROUGHPUT_TOTAL, _MB_TO_BYTES),
    Renamed(PROF_GR_ENGINE_ACTIVE, PROF_GR_ENGINE_UTIL_RATIO),
    Renamed(PROF_SM_ACTIVE, PROF_SM_UTIL_RATIO),
    Renamed(PROF_SM_OCCUPANCY, PROF_SM_OCCUPANCY_RATIO),
    Renamed(PROF_PIPE_TENSOR_ACTIVE, PROF_TENSOR_UTIL_RATIO),
    Renamed(PROF_DRAM_ACTIVE, PROF_DRAM_UTIL_RATIO),
)

#: Legacy name → its rename; 4.7 name → its rename.
BY_LEGACY: Final[Mapping[str, Renamed]] = MappingProxyType({r.legacy: r for r in DCGM_4_7})
BY_CURRENT: Final[Mapping[str, Renamed]] = MappingProxyType({r.current: r for r in DCGM_4_7})


def current_name(legacy: str) -> str:
    """The DCGM 4.7 name of a field (itself when the field kept its name)."""
    renamed = BY_LEGACY.get(legacy)
    return renamed.current if renamed else legacy


def legacy_name(name: str) -> str:
    """The legacy name of a field given in either naming (itself when it kept its name)."""
    renamed = BY_CURRENT.get(name)
    return renamed.legacy if renamed else name


def both_names(legacy: str) -> tuple[str, ...]:
    """The names one field is served under across both namings: legacy first."""
    current = current_name(legacy)
    return (legacy,) if current == legacy else (legacy, current)


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
NVML_SECONDS: Final = "gpu_exporter_nvml_seconds_total"  # seconds spent in NVML, by function
KUBELET_ERRORS: Final = "gpu_exporter_kubelet_errors_total"
BUILD_INFO: Final = "gpu_exporter_build_info"
#: Per GPU and capability (exporter/capabilities.py): 1 when NVML offers that family there, 0 when not.
CAPABILITY: Final = "gpu_exporter_capability"

#: Upper bounds of the utilization-sample histogram (percent); +Inf is implied.
SAMPLE_BUCKETS: Final = (5.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0)

# -- recorded series of alerts/gpu-chargeback.recording.yaml (gpu-analyzer chargeback) ---------------
#: One hourly rollup, all of an evaluation or none; ``CHARGEBACK_PART`` says which number a series holds.
CHARGEBACK_ROLLUP: Final = "gpu_chargeback:gpu_spans:rollup_1h"
CHARGEBACK_PART: Final = "chargeback_part"
#: The 5-minute spans every chargeback figure is counted in, and the hour each rollup sums.
CHARGEBACK_SPAN_SECONDS: Final = 300
CHARGEBACK_ROLLUP_SECONDS: Final = 3600
#: The idle threshold (percent) the rollups' ``idle`` part was recorded at.
CHARGEBACK_IDLE_PERCENT: Final = 2.0
#: Per (cluster, namespace, pod, modelName, GPU_I_PROFILE): spans with samples (``sampled``), the
#: same weighted by a time-sliced GPU's share (``held``), by activity 0-1 (``used``), idle spans
#: (``idle``); per (cluster, namespace, pod, resource): GPU-spans requested while Running
#: (``requested``); per (cluster, modelName, mig): GPUs reporting (``reported``); per (cluster,
#: modelName, GPU_I_PROFILE): devices reporting with no pod (``unallocated``) and MIG instances
#: reporting (``instances``); per cluster: one evaluation (``evaluations``).
CHARGEBACK_PARTS: Final = (
    "sampled",
    "held",
    "used",
    "idle",
    "requested",
    "reported",
    "unallocated",
    "instances",
    "evaluations",
)
