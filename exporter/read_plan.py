"""Which NVML reads the served families need: nothing is read that ``/metrics`` does not serve.

A counters file (``--collectors``) chooses the DCGM families served; each family comes from one NVML
read (:data:`SOURCES`), and a read no served family needs is not made. The exporter's own series are
always served: ``gpu_up`` needs only the GPU's identity, the sample histogram its sample buffer, the
per-pod series of shared GPUs the per-process reads. The utilization gauge is read where the
histogram needs it to tell an idle GPU from an unread one, served or not.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Final

from common.metric_names import legacy_name
from exporter import fields as f

_FIELDS: Final = "nvmlDeviceGetFieldValues"
_GPM: Final = "nvmlGpmSampleGet, nvmlGpmMetricsGet"

#: Each family read from NVML → the call that provides it (docs/exporter.md, "NVML reads").
SOURCES: Final[dict[str, str]] = {
    f.GPU_UTIL: "nvmlDeviceGetUtilizationRates",
    f.MEM_COPY_UTIL: "nvmlDeviceGetUtilizationRates",
    f.FB_USED: "nvmlDeviceGetMemoryInfo",
    f.FB_FREE: "nvmlDeviceGetMemoryInfo",
    f.FB_RESERVED: "nvmlDeviceGetMemoryInfo",
    f.FB_TOTAL: "nvmlDeviceGetMemoryInfo",
    f.GPU_TEMP: "nvmlDeviceGetTemperature",
    f.SM_CLOCK: "nvmlDeviceGetClockInfo",
    f.MEM_CLOCK: "nvmlDeviceGetClockInfo",
    f.ENC_UTIL: "nvmlDeviceGetEncoderUtilization",
    f.DEC_UTIL: "nvmlDeviceGetDecoderUtilization",
    f.POWER_USAGE: "nvmlDeviceGetPowerUsage",
    f.CLOCK_THROTTLE_REASONS: "nvmlDeviceGetCurrentClocksEventReasons",
    f.CLOCKS_EVENT_REASONS: "nvmlDeviceGetCurrentClocksEventReasons",
    f.POWER_USAGE_INSTANT: _FIELDS,
    f.MEMORY_TEMP: _FIELDS,
    f.POWER_VIOLATION: _FIELDS,
    f.THERMAL_VIOLATION: _FIELDS,
    f.TOTAL_ENERGY: _FIELDS,
    f.PCIE_REPLAY: _FIELDS,
    f.ECC_SBE_VOL_TOTAL: _FIELDS,
    f.ECC_DBE_VOL_TOTAL: _FIELDS,
    f.ECC_SBE_AGG_TOTAL: _FIELDS,
    f.ECC_DBE_AGG_TOTAL: _FIELDS,
    f.CORRECTABLE_REMAPPED_ROWS: _FIELDS,
    f.UNCORRECTABLE_REMAPPED_ROWS: _FIELDS,
    f.ROW_REMAP_FAILURE: _FIELDS,
    f.NVLINK_BANDWIDTH_TOTAL: _FIELDS,
    f.PROF_GR_ENGINE_ACTIVE: _GPM,
    f.PROF_SM_ACTIVE: _GPM,
    f.PROF_SM_OCCUPANCY: _GPM,
    f.PROF_PIPE_TENSOR_ACTIVE: _GPM,
    f.PROF_DRAM_ACTIVE: _GPM,
    f.PROF_PCIE_TX_BYTES: _GPM,
    f.PROF_PCIE_RX_BYTES: _GPM,
}


class ReadPlan:
    """The served families, as the reader asks about them. ``served`` may name families in either
    DCGM naming; ``None`` serves (and so reads) everything."""

    __slots__ = ("_served",)

    def __init__(self, served: Collection[str] | None = None) -> None:
        self._served = None if served is None else frozenset(legacy_name(name) for name in served)

    def wants(self, *families: str) -> bool:
        """Whether any of ``families`` is served."""
        return self._served is None or any(family in self._served for family in families)

    def reads(self) -> frozenset[str]:
        """The NVML calls the served families need (besides identity, samples and per-process reads)."""
        return frozenset(call for family, call in SOURCES.items() if self.wants(family))
