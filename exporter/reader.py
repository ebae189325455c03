"""One pass over every GPU through the NVML adapter, into plain readings in DCGM's units."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import replace

from exporter import fields as f
from exporter.capabilities import CapabilityLog
from exporter.nvml import SLOW_FIELDS_EVERY_S, GpuLost, Nvml, NvmlUnavailable
from exporter.readings import (
    MIB,
    DeviceIdentity,
    DeviceReading,
    GpmReading,
    Handle,
    MigLabels,
    NodeReading,
    ProcessMemory,
    ProcessUtilization,
)

log = logging.getLogger(__name__)

#: Chooses the devices whose per-process usage to read: (GPU, MIG device or None) → bool.
WantsProcesses = Callable[[DeviceIdentity, MigLabels | None], bool]


def _no_processes(_gpu: DeviceIdentity, _mig: MigLabels | None) -> bool:
    return False


_GPM_FIELDS = (
    f.PROF_GR_ENGINE_ACTIVE,
    f.PROF_SM_ACTIVE,
    f.PROF_SM_OCCUPANCY,
    f.PROF_PIPE_TENSOR_ACTIVE,
    f.PROF_DRAM_ACTIVE,
    f.PROF_PCIE_TX_BYTES,
    f.PROF_PCIE_RX_BYTES,
)
#: NVML's GPU-utilization sample period is 1/6 s to 1 s by product; until a device's own samples have
#: shown it, the shortest is assumed (most idle time is then counted, never less than was seen).
_DEFAULT_SAMPLE_PERIOD_US = 1_000_000 // 6


def _put_gpm(values: dict[str, float], reading: GpmReading | None) -> None:
    if reading is not None:
        for name, ratio in zip(_GPM_FIELDS, reading, strict=True):
            if ratio is not None:
                values[name] = ratio


class GpuReader:
    """Reads all GPUs each cycle, remembering every GPU it has seen so a lost one is reported down."""

    def __init__(
        self,
        nvml: Nvml,
        *,
        wall_clock: Callable[[], float] = time.time,
        slow_fields_every_s: float = SLOW_FIELDS_EVERY_S,
    ) -> None:
        self._nvml = nvml
        self._wall_clock = wall_clock
        self._slow_every_s = slow_fields_every_s
        self._sample_period_us: dict[str, int] = {}
        self._known: dict[str, DeviceIdentity] = {}
        self._identities: dict[int, DeviceIdentity] = {}
        self._identities_generation = -1
        self._driver_version = ""
        self._sample_since: dict[str, int] = {}
        # GPUs whose sample buffer the previous cycle read (samples, or NOT_FOUND): only for those is the
        # time since their last sample known to be idle. A GPU that was lost, a failed collection or a
        # failed read leaves a gap nobody saw, which must not be counted as idle.
        self._sampled: set[str] = set()
        self._sampled_now: set[str] = set()
        self._process_since: dict[str, int] = {}
        # The slow counters (nvml.SLOW_FIELDS) of each GPU as last read, and when: served until due again.
        self._slow_at: dict[str, float] = {}
        self._slow: dict[str, tuple[float | None, float | None, float | None]] = {}
        # NVLink TX + RX counters, (wall time, KiB), of the GPUs read last cycle and this one: DCGM serves
        # their rate between two readings, so a GPU not read last cycle starts again at 0.
        self._nvlink_before: dict[str, tuple[float, float]] = {}
        self._nvlink_now: dict[str, tuple[float, float]] = {}
        self.handles: tuple[tuple[Handle, str], ...] = ()
        self._last_handles: dict[int, Handle] = {}
        self._count = -1
        self._capability_log = CapabilityLog(log)

    def read(
        self, wants_processes: WantsProcesses | None = None, *, reinit: bool | None = None
    ) -> NodeReading:
        """Read every GPU. ``wants_processes(gpu, mig)`` selects the devices whose per-process usage is
        needed — the shared ones; it costs two more calls per device. ``reinit`` is whether to
        (re-)initialise NVML first, as the caller decided when it paused the XID thread for it; the XID
        thread may ask for a re-init meanwhile, which must wait for the next cycle's pause (``None``:
        decide now, for callers without an XID thread)."""
        nvml = self._nvml
        try:
            if nvml.needs_init if reinit is None else reinit:
                nvml.init()
                self._driver_version = nvml.driver_version() or ""
            count = nvml.device_count()
        except (NvmlUnavailable, GpuLost) as exc:
            return self._failed(str(exc))
        self._sampled, self._sampled_now = self._sampled_now, set()
        self._nvlink_before, self._nvlink_now = self._nvlink_now, {}
        if self._identities_generation != nvml.generation or count != self._count:
            # Handles die with the NVML session, and index → GPU holds only while the count does
            # (nvml.h: removing a GPU renumbers the others and voids their handles).
            self._identities = {}
            self._last_handles = {}
            self._slow_at = {}  # a GPU back from a reset may have restarted its counters: read them now
            self._identities_generation = nvml.generation
            self._count = count

        up: set[str] = set()
        devices: list[DeviceReading] = []
        handles: list[tuple[Handle, str]] = []
        for index in range(count):
            # A handle is looked up once per session, as DCGM does: a lost GPU then fails on its first
            # reading instead, and one NVML call per GPU and cycle is saved.
            handle = self._last_handles.get(index)
            try:
                if handle is None:
                    handle = nvml.handle(index)
                identity = None if handle is None else self._identity(index, handle)
                if identity is None:
                    continue
                self._known[identity.uuid] = identity
                devices.extend(self._read_gpu(identity, handle, wants_processes or _no_processes))
            except GpuLost as exc:
                log.debug("GPU %d is down: %s", index, exc)
                last = handle if handle is not None else self._last_handles.get(index)
                if last is not None:
                    nvml.forget_gpm(last)
                continue
            self._last_handles[index] = handle
            up.add(identity.uuid)
            handles.append((handle, identity.uuid))
        self.handles = tuple(handles)
        self._capability_log.update(
            (d.gpu.gpu_index, d.gpu.name, d.capabilities) for d in devices if d.capabilities is not None
        )
        gpus = tuple((identity, uuid in up) for uuid, identity in self._known.items())
        return NodeReading(True, self._driver_version, gpus, tuple(devices))

    def _failed(self, error: str) -> NodeReading:
        self.handles = ()
        self._sampled = self._sampled_now = set()
        self._nvlink_before, self._nvlink_now = {}, {}
        gpus = tuple((identity, False) for identity in self._known.values())
        return NodeReading(False, self._driver_version, gpus, (), error)

    def _identity(self, index: int, handle: Handle) -> DeviceIdentity | None:
        identity = self._identities.get(index)
        if identity is None:
            identity = self._nvml.identity(index, handle)
            if identity is not None:
                self._identities[index] = identity
        return identity

    def _read_gpu(self, gpu: DeviceIdentity, handle: Handle, wants: WantsProcesses) -> list[DeviceReading]:
        nvml = self._nvml
        values: dict[str, float] = {}
        rates = nvml.utilization(handle)
        if rates is not None:
            values[f.GPU_UTIL] = rates.gpu
            values[f.MEM_COPY_UTIL] = rates.memory
        instances = nvml.mig_instances(handle)
        if not instances:  # a MIG GPU's memory is its instances': served there, not twice
            self._put_memory(values, handle)
        clocks = nvml.clocks(handle)
        now = self._wall_clock()
        # A little early rather than a cycle late: cycles drift a few milliseconds from their interval.
        slow = now - self._slow_at.get(gpu.uuid, -math.inf) >= self._slow_every_s * 0.95
        batch = nvml.fields(handle, slow=slow)
        if slow:
            self._slow_at[gpu.uuid] = now
            self._slow[gpu.uuid] = (batch.energy_mj, batch.pcie_replays, batch.thermal_violation_ns)
        energy_mj, pcie_replays, thermal_violation_ns = self._slow.get(gpu.uuid, (None, None, None))
        power_mw = nvml.power_mw(handle)
        reasons = nvml.clock_event_reasons(handle)
        # Each reading is None when the GPU does not support it: absent, never NaN.
        optional: dict[str, float | None] = {
            f.GPU_TEMP: nvml.temperature_c(handle),
            f.MEMORY_TEMP: batch.memory_temp_c,
            f.SM_CLOCK: clocks.sm,
            f.MEM_CLOCK: clocks.memory,
            f.ENC_UTIL: nvml.encoder_percent(handle),
            f.DEC_UTIL: nvml.decoder_percent(handle),
            f.POWER_USAGE: None if power_mw is None else power_mw / 1000,
            f.POWER_USAGE_INSTANT: None if batch.power_instant_mw is None else batch.power_instant_mw / 1000,
            f.TOTAL_ENERGY: energy_mj,
            f.PCIE_REPLAY: pcie_replays,
            f.POWER_VIOLATION: batch.power_violation_ns,
            f.THERMAL_VIOLATION: thermal_violation_ns,
            f.CLOCK_THROTTLE_REASONS: reasons,
            f.CLOCKS_EVENT_REASONS: reasons,
            f.ECC_SBE_VOL_TOTAL: batch.ecc_sbe_volatile,
            f.ECC_DBE_VOL_TOTAL: batch.ecc_dbe_volatile,
            f.ECC_SBE_AGG_TOTAL: batch.ecc_sbe_aggregate,
            f.ECC_DBE_AGG_TOTAL: batch.ecc_dbe_aggregate,
            f.CORRECTABLE_REMAPPED_ROWS: batch.remapped_correctable,
            f.UNCORRECTABLE_REMAPPED_ROWS: batch.remapped_uncorrectable,
            f.ROW_REMAP_FAILURE: batch.remap_failure,
            f.NVLINK_BANDWIDTH_TOTAL: self._nvlink_rate(gpu.uuid, batch.nvlink_kib),
        }
        values.update({k: v for k, v in optional.items() if v is not None})
        _put_gpm(values, nvml.gpm(handle, gpu.uuid))

        samples = self._samples(gpu.uuid, handle, values.get(f.GPU_UTIL))
        processes = self._processes(gpu.uuid, handle) if wants(gpu, None) else (None, None)
        readings = [DeviceReading(gpu, None, values, samples, *processes)]
        for instance in instances:
            mig_values: dict[str, float] = {}
            self._put_memory(mig_values, instance.handle)
            _put_gpm(mig_values, nvml.gpm(handle, instance.uuid, instance.gpu_instance_id))
            labels = MigLabels(instance.uuid, instance.gpu_instance_id, instance.profile, instance.slot)
            wanted = wants(gpu, labels)
            mig_processes = self._processes(instance.uuid, instance.handle) if wanted else (None, None)
            readings.append(DeviceReading(gpu, labels, mig_values, None, *mig_processes))
        if instances:  # instances a MIG reconfiguration removed keep no GPM buffers
            nvml.forget_gpm(handle, keep={gpu.uuid, *(instance.uuid for instance in instances)})
        # What this GPU offers, as the reads above answered: said by a gauge and the start-up log.
        readings[0] = replace(readings[0], capabilities=nvml.capabilities(handle))
        return readings

    def _nvlink_rate(self, uuid: str, kib: float | None) -> float | None:
        """DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL as DCGM computes it from NVML's cumulative TX + RX data
        counters (KiB): their increase since the previous reading, per second, divided by 1000, as an
        integer. 0 on a first reading; 0, not a negative rate, after a counter reset."""
        if kib is None:
            return None
        now = self._wall_clock()
        self._nvlink_now[uuid] = (now, kib)
        before = self._nvlink_before.get(uuid)
        if before is None or now <= before[0] or kib < before[1]:
            return 0.0
        return float(int((kib - before[1]) / (now - before[0]) / 1000))

    def _put_memory(self, values: dict[str, float], handle: Handle) -> None:
        memory = self._nvml.memory(handle)
        if memory is not None:
            values[f.FB_USED] = memory.used // MIB
            values[f.FB_FREE] = memory.free // MIB
            if memory.reserved is not None:
                values[f.FB_RESERVED] = memory.reserved // MIB

    def _samples(self, uuid: str, handle: Handle, gauge: float | None) -> tuple[int, ...] | None:
        since = self._sample_since.get(uuid, 0)
        samples = self._nvml.utilization_samples(handle, since)
        if samples is None:
            return None
        self._sampled_now.add(uuid)
        percents, first, last = samples
        if not percents:
            return self._idle_samples(uuid, since, gauge)
        # The sample period (for idle stretches without samples) is the mean gap of a batch: the driver
        # samples on a grid.
        if len(percents) > 1 and last > first:
            self._sample_period_us[uuid] = (last - first) // (len(percents) - 1)
        self._sample_since[uuid] = last
        return percents

    def _idle_samples(self, uuid: str, since: int, gauge: float | None) -> tuple[int, ...]:
        """No new sample: NVML answers so for a GPU that sat idle (the driver records no samples then).
        When the utilization gauge confirms it (0 %), the time since the last sample counts as idle
        samples at the device's sample period — otherwise the starvation signal would miss exactly the
        stalls. With a busy or unknown gauge it stays "nothing new" (never invented activity). Only time
        the previous cycle saw counts: after a first read, an outage or a failed read, counting restarts
        from now."""
        now_us = round(self._wall_clock() * 1_000_000)
        if since == 0 or uuid not in self._sampled:
            self._sample_since[uuid] = max(since, now_us)
            return ()
        if gauge != 0:
            return ()
        period = self._sample_period_us.get(uuid, _DEFAULT_SAMPLE_PERIOD_US)
        count = max(0, (now_us - since) // period)
        if count:
            self._sample_since[uuid] = since + count * period
        return (0,) * count

    def _processes(
        self, uuid: str, handle: Handle
    ) -> tuple[tuple[ProcessMemory, ...] | None, tuple[ProcessUtilization, ...] | None]:
        processes = self._nvml.processes(handle)
        utilization = self._nvml.process_utilization(handle, self._process_since.get(uuid, 0))
        if utilization:
            self._process_since[uuid] = max(s.timestamp_us for s in utilization)
        return processes, utilization
