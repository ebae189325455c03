"""GPU Performance Monitoring (Hopper and newer) for one physical GPU and its MIG instances.

A GPM ratio covers the time between two samples. Each device (the GPU, or one of its MIG instances)
keeps a pair of sample buffers: a sample is taken into the spare one and the two swap, so a read
costs two calls (sample, metrics), not four (alloc and free as well). Buffers are freed when the GPU
goes down, when a MIG instance is removed and when NVML is shut down.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Hashable, Sequence
from typing import Any, Final

from exporter.nvml_library import GPM_METRIC_IDS, GPM_METRICS_GET_VERSION, MISSING, SUCCESS, NvmlLibrary
from exporter.readings import GpmReading, Handle

_RATIOS: Final = 5  # the first five metrics are percentages; the last two PCIe MiB/s
_MIB: Final = 1024 * 1024
#: Every metric, by its slot in :class:`GpmReading`.
ALL_METRICS: Final = tuple(range(len(GPM_METRIC_IDS)))


class GpmSampler:
    """The GPM state of one physical GPU: whether it offers GPM, and each device's pair of buffers."""

    def __init__(self, library: NvmlLibrary, handle: Handle) -> None:
        self._lib = library
        self._handle = handle
        self.supported: bool | None = None  # asked on first use
        self.support_failed_call: str | None = None
        self._previous: dict[Hashable, Any] = {}
        self._spare: dict[Hashable, Any] = {}

    def _is_supported(self) -> bool:
        if self.supported is None:
            support = self._lib.call("nvmlGpmQueryDeviceSupport", self._handle)
            self.supported = support is not MISSING and bool(support.isSupportedDevice)
            self.support_failed_call = "nvmlGpmQueryDeviceSupport" if support is MISSING else None
        return self.supported

    def read(
        self, key: Hashable, gpu_instance_id: int | None = None, metrics: Sequence[int] = ALL_METRICS
    ) -> GpmReading | None:
        """Ratios since the previous read with the same ``key`` (the GPU, or one MIG instance with its
        ``gpu_instance_id``); ``None`` on the first read or where GPM is unsupported. ``metrics``: the
        slots of :class:`GpmReading` to compute (the others are ``None``): on an H200 the graphics
        engine alone costs the driver 1.8 ms, the six others 7 µs each."""
        if not self._is_supported():
            return None
        sample = self._spare.pop(key, None)
        if sample is None:
            sample = self._lib.call("nvmlGpmSampleAlloc")
            if sample is MISSING:
                return None
        try:
            if gpu_instance_id is None:
                taken = self._lib.call("nvmlGpmSampleGet", self._handle, sample)
            else:
                taken = self._lib.call("nvmlGpmMigSampleGet", self._handle, gpu_instance_id, sample)
        except BaseException:
            self._spare[key] = sample  # freed with the others by forget()
            raise
        if taken is MISSING:
            self._spare[key] = sample
            return None
        previous = self._previous.get(key)
        self._previous[key] = sample
        if previous is None:
            return None
        try:
            return self._metrics(previous, sample, metrics)
        finally:
            self._spare[key] = previous

    def _metrics(self, first: Any, second: Any, slots: Sequence[int]) -> GpmReading | None:
        request = self._lib.binding.c_nvmlGpmMetricsGet_t()
        request.version = GPM_METRICS_GET_VERSION
        request.numMetrics = len(slots)
        request.sample1 = first
        request.sample2 = second
        for position, slot in enumerate(slots):
            request.metrics[position].metricId = GPM_METRIC_IDS[slot]
        result = self._lib.call("nvmlGpmMetricsGet", request)
        if result is MISSING:
            return None
        values: list[float | None] = [None] * len(GPM_METRIC_IDS)
        for position, slot in enumerate(slots):
            metric = result.metrics[position]
            if metric.nvmlReturn != SUCCESS or not math.isfinite(metric.value):
                continue
            if slot < _RATIOS:  # percent → DCGM's 0-1 ratio
                values[slot] = min(max(float(metric.value) / 100.0, 0.0), 1.0)
            else:  # MiB/s → DCGM's bytes per second, whole bytes as DCGM stores them (an int64 field)
                values[slot] = float(int(max(float(metric.value), 0.0) * _MIB))
        return GpmReading(*values)

    def forget(self, keep: Collection[Hashable] = ()) -> None:
        """Free the buffers of every device not in ``keep``: all of them for a GPU that went down (its
        next ratios start afresh instead of spanning the outage), a removed MIG instance's otherwise."""
        for samples in (self._previous, self._spare):
            for key in [k for k in samples if k not in keep]:
                self._lib.quiet("nvmlGpmSampleFree", samples.pop(key))
