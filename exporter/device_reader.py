"""One physical GPU (and its MIG devices) read each collection into DCGM's names and units, each costly
reading on its cadence (:mod:`exporter.cadence`) and served as last read in between."""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable
from typing import Final

from exporter import fields as f
from exporter.cadence import Cadence, Cadences, cadence
from exporter.device import Device, FieldId
from exporter.nvml import MigEvents
from exporter.nvml_library import (
    FIELD_ECC_DBE_AGG,
    FIELD_ECC_DBE_VOL,
    FIELD_ECC_SBE_AGG,
    FIELD_ECC_SBE_VOL,
    FIELD_MEMORY_TEMP,
    FIELD_NVLINK_RX,
    FIELD_NVLINK_TX,
    FIELD_PCIE_REPLAY,
    FIELD_POWER_INSTANT,
    FIELD_POWER_VIOLATION,
    FIELD_REMAPPED_COR,
    FIELD_REMAPPED_FAILURE,
    FIELD_REMAPPED_UNC,
    FIELD_THERMAL_VIOLATION,
    FIELD_TOTAL_ENERGY,
    PERF_POLICY_POWER,
    PERF_POLICY_THERMAL,
)
from exporter.read_plan import ReadPlan
from exporter.readings import (
    MIB,
    DeviceIdentity,
    DeviceReading,
    GpmReading,
    MigInstance,
    MigLabels,
    ProcessMemory,
    ProcessUtilization,
)
from exporter.sample_buffer import SampleBuffer

log = logging.getLogger("exporter.node_reader")

#: Chooses the devices whose per-process usage to read: (GPU, MIG device or None) → bool.
WantsProcesses = Callable[[DeviceIdentity, MigLabels | None], bool]

#: NVLink fields are per link; this scope asks for the sum over all links.
NVLINK_ALL_LINKS: Final = 0xFFFFFFFF
#: Field id → the family it serves, read together in one nvmlDeviceGetFieldValues call per GPU.
FAST_FIELDS: Final[dict[int, str]] = {
    FIELD_POWER_INSTANT: f.POWER_USAGE_INSTANT,
    FIELD_POWER_VIOLATION: f.POWER_VIOLATION,
    FIELD_MEMORY_TEMP: f.MEMORY_TEMP,
    FIELD_ECC_SBE_VOL: f.ECC_SBE_VOL_TOTAL,
    FIELD_ECC_DBE_VOL: f.ECC_DBE_VOL_TOTAL,
    FIELD_ECC_SBE_AGG: f.ECC_SBE_AGG_TOTAL,
    FIELD_ECC_DBE_AGG: f.ECC_DBE_AGG_TOTAL,
    FIELD_REMAPPED_COR: f.CORRECTABLE_REMAPPED_ROWS,
    FIELD_REMAPPED_UNC: f.UNCORRECTABLE_REMAPPED_ROWS,
    FIELD_REMAPPED_FAILURE: f.ROW_REMAP_FAILURE,
}
#: Counters the driver takes milliseconds to read (an H200 with driver 580: energy 2.9-3.3 ms, the
#: thermal violation counter 0.7 ms, PCIe replays 0.18 ms; the other fields 5-12 µs each) and whose
#: rates Prometheus takes over minutes: read on the slow cadence.
SLOW_FIELDS: Final[dict[int, str]] = {
    FIELD_TOTAL_ENERGY: f.TOTAL_ENERGY,
    FIELD_PCIE_REPLAY: f.PCIE_REPLAY,
    FIELD_THERMAL_VIOLATION: f.THERMAL_VIOLATION,
}
_NVLINK: Final = ((FIELD_NVLINK_TX, NVLINK_ALL_LINKS), (FIELD_NVLINK_RX, NVLINK_ALL_LINKS))
#: Every field the exporter reads (what benchmarks/nvml_call_costs.py times one by one).
FIELD_IDS: Final[tuple[FieldId, ...]] = (*FAST_FIELDS, *SLOW_FIELDS, *_NVLINK)
#: GPM's readings, in the order of GpmReading.
GPM_FIELDS: Final = (
    f.PROF_GR_ENGINE_ACTIVE,
    f.PROF_SM_ACTIVE,
    f.PROF_SM_OCCUPANCY,
    f.PROF_PIPE_TENSOR_ACTIVE,
    f.PROF_DRAM_ACTIVE,
    f.PROF_PCIE_TX_BYTES,
    f.PROF_PCIE_RX_BYTES,
)
_MEMORY: Final = (f.FB_USED, f.FB_FREE, f.FB_RESERVED, f.FB_TOTAL)

Processes = tuple[tuple[ProcessMemory, ...] | None, tuple[ProcessUtilization, ...] | None]


def _gpm_values(reading: GpmReading | None) -> dict[str, float]:
    """A GPM reading's ratios by family, those it has."""
    if reading is None:
        return {}
    return {name: ratio for name, ratio in zip(GPM_FIELDS, reading, strict=True) if ratio is not None}


class DeviceReader:
    """Reads one GPU of one NVML session; what is read is settled by the served families (``plan``)."""

    def __init__(
        self, device: Device, plan: ReadPlan, cadences: Cadences, interval_s: float, mig_events: MigEvents
    ) -> None:
        self.device = device
        self._cadences = cadences
        self._interval_s = interval_s
        self._mig_events = mig_events
        # What the served families need, settled once (the plan does not change).
        self._utilization = plan.wants(f.GPU_UTIL, f.MEM_COPY_UTIL)
        self._memory = plan.wants(*_MEMORY)
        self._temperature = plan.wants(f.GPU_TEMP)
        self._clocks = (plan.wants(f.SM_CLOCK), plan.wants(f.MEM_CLOCK))
        self._encoder, self._decoder = plan.wants(f.ENC_UTIL), plan.wants(f.DEC_UTIL)
        self._power = plan.wants(f.POWER_USAGE)
        self._reasons = plan.wants(f.CLOCK_THROTTLE_REASONS, f.CLOCKS_EVENT_REASONS)
        self._nvlink_wanted = plan.wants(f.NVLINK_BANDWIDTH_TOTAL)
        self._fast: tuple[FieldId, ...] = tuple(i for i, fam in FAST_FIELDS.items() if plan.wants(fam))
        if self._nvlink_wanted:
            self._fast += _NVLINK
        self._slow = tuple(i for i, fam in SLOW_FIELDS.items() if plan.wants(fam))
        self._fast_and_slow = self._fast + self._slow
        self._fast_families = tuple((i, fam) for i, fam in FAST_FIELDS.items() if plan.wants(fam))
        self._slow_families = tuple((i, fam) for i, fam in SLOW_FIELDS.items() if plan.wants(fam))
        self._gpm_metrics = tuple(slot for slot, fam in enumerate(GPM_FIELDS) if plan.wants(fam))
        self._slow_due = cadence(cadences.slow_fields, interval_s)
        self._gpm_due = cadence(cadences.gpm, interval_s)
        self._samples_due = cadence(cadences.samples, interval_s)
        self._process_due: dict[str, Cadence] = {}
        self._mig_due = cadence(cadences.mig_fallback, interval_s)
        self._instances: tuple[MigInstance, ...] | None = None  # not read this session yet
        self._mig_labels: tuple[MigLabels, ...] = ()  # each instance's, made when the layout is read
        # Readings taken on a cadence, served as last read until due again.
        self._slow_values: dict[str, float] = {}
        self._gpm: dict[Hashable, GpmReading | None] = {}
        # Each GPM reading's values by family, made when it is read, served as read in between.
        self._gpm_served: dict[Hashable, dict[str, float]] = {}
        self._process_utilization: dict[str, tuple[ProcessUtilization, ...] | None] = {}
        self._process_since: dict[str, int] = {}
        self._samples_read = False  # the last read of the sample buffer succeeded
        self._nvlink: tuple[float, float] | None = None  # (monotonic time, KiB) of the last reading

    def lost(self, samples: SampleBuffer | None) -> None:
        """The GPU went down: its GPM ratios and NVLink rate start afresh once it is back, rather than
        spanning the outage, and the time until then is not known idle."""
        self.device.close()
        self._gpm.clear()
        self._gpm_served.clear()
        self._nvlink = None
        self._samples_read = False
        if samples is not None:
            samples.unread()

    def interrupted(self) -> None:
        """A collection failed: rates start afresh."""
        self._nvlink = None

    def read(
        self, gpu: DeviceIdentity, samples: SampleBuffer, now: float, now_us: int, wants: WantsProcesses
    ) -> list[DeviceReading]:
        """One collection of this GPU at monotonic time ``now`` (wall time ``now_us``, µs, for the
        sample buffer's timestamps)."""
        device = self.device
        values: dict[str, float] = {}
        instances = self._mig_layout(now)
        rates = device.utilization() if self._utilization else None
        if rates is not None:
            values[f.GPU_UTIL] = rates.gpu
            values[f.MEM_COPY_UTIL] = rates.memory
        if not instances:  # a MIG GPU's memory is its instances': served there, not twice
            self._put_memory(values, None)
        self._put_gauges(values)
        self._put_fields(values, now)
        self._put_gpm(values, gpu.uuid, None, now)
        histogram = self._samples(
            samples, now, now_us, (lambda: values.get(f.GPU_UTIL)) if self._utilization else self._gauge
        )
        processes = self._processes(gpu.uuid, None, now) if wants(gpu, None) else (None, None)
        migs = []
        for instance, labels in zip(instances, self._mig_labels, strict=True):
            mig_values: dict[str, float] = {}
            self._put_memory(mig_values, instance)
            self._put_gpm(mig_values, instance.uuid, instance.gpu_instance_id, now)
            mig_processes = (
                self._processes(instance.uuid, instance, now) if wants(gpu, labels) else (None, None)
            )
            migs.append(DeviceReading(gpu, labels, mig_values, None, *mig_processes))
        if self._gpm_metrics and self._gpm_due.due(now):
            self._gpm_due.done(now)
        # What this GPU offers, as the reads above answered: said by a gauge and the start-up log.
        return [DeviceReading(gpu, None, values, histogram, *processes, device.capabilities()), *migs]

    def _mig_layout(self, now: float) -> tuple[MigInstance, ...]:
        """Read once a session, then when NVML reports a reconfiguration; on the slow fallback cadence
        where the driver reports none (or no event set is being waited on)."""
        key = self.device.key
        changed = self._mig_events.take(key)
        fallback = not self._mig_events.watched(key) and self._mig_due.due(now)
        if self._instances is None or changed or fallback:
            before = self._instances or ()
            self._instances = self.device.mig_instances()
            self._mig_labels = tuple(
                MigLabels(i.uuid, i.gpu_instance_id, i.profile, i.slot) for i in self._instances
            )
            self._mig_due.done(now)
            if {i.uuid for i in before} != {i.uuid for i in self._instances}:
                kept = {self.device.key, *(i.uuid for i in self._instances)}
                self.device.close(keep=kept)  # instances a reconfiguration removed keep no GPM buffers
                self._gpm = {k: v for k, v in self._gpm.items() if k in kept}
                self._gpm_served = {k: v for k, v in self._gpm_served.items() if k in kept}
        return self._instances

    def _gauge(self) -> float | None:
        """The utilization gauge, read only when the sample histogram needs it and it is not served."""
        rates = self.device.utilization()
        return None if rates is None else rates.gpu

    def _put_gauges(self, values: dict[str, float]) -> None:
        """The cheap gauges the served families need; each absent where the GPU does not offer it."""
        device = self.device
        if self._temperature and (celsius := device.temperature_c()) is not None:
            values[f.GPU_TEMP] = celsius
        if self._clocks[0] or self._clocks[1]:
            sm, memory = device.clocks(*self._clocks)
            if sm is not None:
                values[f.SM_CLOCK] = sm
            if memory is not None:
                values[f.MEM_CLOCK] = memory
        if self._encoder and (encoder := device.encoder_percent()) is not None:
            values[f.ENC_UTIL] = encoder
        if self._decoder and (decoder := device.decoder_percent()) is not None:
            values[f.DEC_UTIL] = decoder
        if self._power and (power_mw := device.power_mw()) is not None:
            values[f.POWER_USAGE] = power_mw / 1000
        if self._reasons and (reasons := device.clock_event_reasons()) is not None:
            values[f.CLOCK_THROTTLE_REASONS] = values[f.CLOCKS_EVENT_REASONS] = reasons

    def _put_fields(self, values: dict[str, float], now: float) -> None:
        """The cheap fields every collection; the costly counters with them when due, served as last
        read in between. A violation counter whose slot gives no answer falls back to
        nvmlDeviceGetViolationStatus."""
        slow = bool(self._slow) and self._slow_due.due(now)
        asked = self._fast_and_slow if slow else self._fast
        if not asked:
            return
        device = self.device
        found = device.fields(asked)
        for field_id, family in self._fast_families:
            number = found.get(field_id)
            if number is None and field_id == FIELD_POWER_VIOLATION:
                number = device.violation_ns(PERF_POLICY_POWER)
            if number is not None:
                values[family] = number
        if f.POWER_USAGE_INSTANT in values:
            values[f.POWER_USAGE_INSTANT] /= 1000  # mW
        if slow:
            self._slow_due.done(now)
            self._slow_values = {}
            for field_id, family in self._slow_families:
                number = found.get(field_id)
                if number is None and field_id == FIELD_THERMAL_VIOLATION:
                    number = device.violation_ns(PERF_POLICY_THERMAL)
                if number is not None:
                    self._slow_values[family] = number
        values.update(self._slow_values)
        if self._nvlink_wanted:
            tx, rx = found.get(FIELD_NVLINK_TX), found.get(FIELD_NVLINK_RX)
            rate = self._nvlink_rate(None if tx is None or rx is None else tx + rx, now)
            if rate is not None:
                values[f.NVLINK_BANDWIDTH_TOTAL] = rate

    def _nvlink_rate(self, kib: float | None, now: float) -> float | None:
        """DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL as DCGM computes it from NVML's cumulative TX + RX data
        counters (KiB): their increase since the previous reading, per second, divided by 1000, as an
        integer. 0 on a first reading; 0, not a negative rate, after a counter reset."""
        if kib is None:
            self._nvlink = None
            return None
        before, self._nvlink = self._nvlink, (now, kib)
        if before is None or now <= before[0] or kib < before[1]:
            return 0.0
        return float(int((kib - before[1]) / (now - before[0]) / 1000))

    def _put_memory(self, values: dict[str, float], instance: MigInstance | None) -> None:
        if not self._memory:
            return
        memory = self.device.memory(None if instance is None else instance.handle)
        if memory is not None:
            values[f.FB_USED] = memory.used // MIB
            values[f.FB_FREE] = memory.free // MIB
            values[f.FB_TOTAL] = memory.total // MIB
            if memory.reserved is not None:
                values[f.FB_RESERVED] = memory.reserved // MIB

    def _put_gpm(self, values: dict[str, float], key: str, gpu_instance_id: int | None, now: float) -> None:
        """GPM on its cadence; a device without a reading yet (its first pair of samples) is asked at
        the next collection, so the ratios appear one interval after start, as they always did."""
        if not self._gpm_metrics:
            return
        if self._gpm.get(key) is None or self._gpm_due.due(now):
            reading = self._gpm[key] = self.device.read_gpm(key, gpu_instance_id, self._gpm_metrics)
            self._gpm_served[key] = _gpm_values(reading)
        values.update(self._gpm_served[key])

    def _samples(
        self, samples: SampleBuffer, now: float, now_us: int, gauge: Callable[[], float | None]
    ) -> tuple[int, ...] | None:
        """The sample buffer's new entries, read on a cadence that keeps the ring from wrapping in
        between; ``()`` between reads (the histogram is served unchanged), ``None`` where unreadable."""
        wanted, interval = self._cadences.samples, self._interval_s
        self._samples_due.every_s = samples.collections(wanted, interval) * interval
        if self._samples_read and not self._samples_due.due(now):
            return ()
        asked_from = samples.ask_from(now, wanted, interval)
        read = self.device.utilization_samples(asked_from, samples.since_us)
        self._samples_read = read is not None
        if read is None:
            samples.unread()
            return None
        self._samples_due.done(now)
        lost = samples.lost_reads
        percents = samples.took(read, asked_from, now, now_us, gauge() if not read.percents else None)
        if samples.lost_reads > lost:
            log.warning(
                "GPU %d: the driver's utilization-sample buffer (%d samples) wrapped before it was read;"
                " reads are now spaced to fit it",
                self.device.index,
                samples.depth,
            )
        return percents

    def _processes(self, uuid: str, instance: MigInstance | None, now: float) -> Processes:
        """The device's processes every collection; their utilization, the costly read, only where some
        run, on its cadence (a mean over the time since the previous read), served as read between."""
        handle = None if instance is None else instance.handle
        processes = self.device.processes(handle)
        if not processes:
            self._process_utilization.pop(uuid, None)
            return processes, None if processes is None else ()
        due = self._process_due.get(uuid)
        if due is None:
            due = self._process_due[uuid] = cadence(self._cadences.process_utilization, self._interval_s)
        if uuid not in self._process_utilization or due.due(now):
            utilization = self.device.process_utilization(self._process_since.get(uuid, 0), handle)
            if utilization:
                self._process_since[uuid] = max(s.timestamp_us for s in utilization)
            self._process_utilization[uuid] = utilization
            due.done(now)
        return processes, self._process_utilization[uuid]
