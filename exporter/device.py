"""One physical GPU in one NVML session: its handle, what it refused, its GPM buffers and MIG layout.

Readings come back as NamedTuples in NVML's own units; each docstring names the matching
``nvidia-smi --query-gpu=`` field where one exists. A call that answered NOT_SUPPORTED on this GPU
(or one of its MIG devices) is not asked again until NVML is re-initialised or the GPU's MIG layout
changes: nvml.h gives that code for what the device, in its current mode, does not offer.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Callable, Collection, Hashable, Sequence
from types import MappingProxyType
from typing import Any, Final

from exporter import capabilities as cap
from exporter.capabilities import Capabilities, Capability
from exporter.gpm import ALL_METRICS, GpmSampler
from exporter.mig import MigLayout
from exporter.nvml_library import (
    CLOCK_MEM,
    CLOCK_SM,
    EMPTY,
    FIELD_ECC_SBE_VOL,
    FIELD_NVLINK_TX,
    GPU_UTILIZATION_SAMPLES,
    MEMORY_V2,
    MISSING,
    NO_SUCH_VERSION,
    NOTHING_NEW,
    SETTLED,
    SUCCESS,
    TEMPERATURE_GPU,
    VALUE_MEMBERS,
    VALUE_TYPE_DOUBLE,
    NvmlLibrary,
    handle_key,
    log,
)
from exporter.readings import (
    Clocks,
    DeviceIdentity,
    GpmReading,
    Handle,
    MemoryInfo,
    MigInstance,
    ProcessMemory,
    ProcessUtilization,
    UtilizationRates,
    UtilizationSamples,
)

_TIME_STAMP: Final = operator.attrgetter("timeStamp")
_DOUBLE: Final = VALUE_MEMBERS[VALUE_TYPE_DOUBLE]
#: Reported by NVML for per-process memory it cannot attribute (e.g. no permission).
_VALUE_NOT_AVAILABLE: Final = 2**64 - 1
_MEMORY_V2: Final = "nvmlDeviceGetMemoryInfo_v2"
_EVENT_REASONS: Final = "nvmlDeviceGetCurrentClocksEventReasons"
_FIELD_VALUES: Final = "nvmlDeviceGetFieldValues"
_OFFERED: Final = Capability(True)
#: The field slot whose answer says whether a capability is offered.
_FIELD_CAPABILITIES: Final = ((cap.ECC, FIELD_ECC_SBE_VOL), (cap.NVLINK, FIELD_NVLINK_TX))

FieldId = int | tuple[int, int]  # an id, or (id, scope) for a per-link field


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def field_slot(field_id: int) -> str:
    """How a field of the nvmlDeviceGetFieldValues batch is named in errors."""
    return f"{_FIELD_VALUES}[{field_id}]"


@functools.cache
def _sample_value(member: str) -> Callable[[Any], Any]:
    return operator.attrgetter(f"sampleValue.{member}")


def _new_samples(value_type: int, samples: Sequence[Any], newer_than_us: int) -> UtilizationSamples | None:
    """The samples of an ``nvmlDeviceGetSamples`` answer newer than ``newer_than_us``; ``None`` for a
    value type this binding cannot read (unknown, never "nothing new", which would read as idle)."""
    member = VALUE_MEMBERS.get(value_type)
    if member is None or not hasattr(samples[0].sampleValue, member):
        return None
    # Up to the ring's depth a GPU and read: each attribute read in one pass, in C.
    stamps = list(map(_TIME_STAMP, samples))
    values = list(map(_sample_value(member), samples))
    buffered, oldest_us = len(samples), min(stamps)
    if oldest_us <= newer_than_us:  # asked for the whole ring: keep what is new
        kept = [i for i, stamp in enumerate(stamps) if stamp > newer_than_us]
        stamps, values = [stamps[i] for i in kept], [values[i] for i in kept]
    if member == _DOUBLE:  # the only type whose values need rounding and may be NaN
        finite = [i for i, value in enumerate(values) if math.isfinite(value)]
        stamps, values = [stamps[i] for i in finite], [round(values[i]) for i in finite]
    if not stamps:
        return UtilizationSamples((), buffered=buffered, oldest_us=oldest_us)
    # NVML's buffer is a ring: samples need not come out in time order.
    return UtilizationSamples(tuple(values), min(stamps), max(stamps), buffered, oldest_us)


def _process_memory(process: Any) -> ProcessMemory:
    used = process.usedGpuMemory
    known = used is not None and used != _VALUE_NOT_AVAILABLE
    return ProcessMemory(int(process.pid), int(used) if known else None)


class Device:
    """A physical GPU as one NVML session sees it; MIG devices are read through it (their handles)."""

    def __init__(self, library: NvmlLibrary, index: int, handle: Handle) -> None:
        self._lib = library
        self.index = index
        self.handle = handle
        self.key = handle_key(handle)
        self._identity: DeviceIdentity | None = None
        self._unsupported: set[tuple[Hashable, str]] = set()  # (device key, call)
        self._refused_fields: set[int] = set()  # field ids whose slot answered NOT_SUPPORTED
        self.capability_changes = 0  # counts changes of what the GPU offers, for the start-up log
        self._offered: tuple[int, Capabilities] = (-1, {})
        self._capabilities: dict[str, Capability] = {}
        self._probed = False  # per-process utilization asked for the capability this session
        self._layout: tuple[str, ...] | None = None  # the MIG devices' UUIDs as last read
        self.gpm = GpmSampler(library, handle)
        self._mig = MigLayout(library, handle, lambda on, failed: self._note(cap.MIG, on, failed))

    # -- the chokepoint's per-device side ---------------------------------------------------------

    def _call(self, name: str, handle: Handle, *args: Any, empty_on: frozenset[int] = frozenset()) -> Any:
        """``library.call`` on ``handle``, unless that device answered NOT_SUPPORTED before."""
        unsupported = self._unsupported
        if unsupported and (self.key if handle is self.handle else handle_key(handle), name) in unsupported:
            return MISSING
        result = self._lib.call(name, handle, *args, empty_on=empty_on)
        if result is MISSING:
            device = self.key if handle is self.handle else handle_key(handle)
            if self._lib.last_failure(device, name) == "NOT_SUPPORTED":
                unsupported.add((device, name))
        return result

    def _note(self, name: str, available: bool, failed_call: str | None, handle: Handle = None) -> None:
        """Record whether this GPU offers capability ``name``. ``failed_call`` names the call whose
        failure said it does not; a passing failure (not one of SETTLED) leaves what was known."""
        code = ""
        if not available and failed_call is not None:
            code = self._lib.last_failure(self.key if handle is None else handle_key(handle), failed_call)
            if code not in SETTLED:
                return
        capability = _OFFERED if available and not code else Capability(available, code)
        if self._capabilities.get(name) != capability:
            self._capabilities[name] = capability
            self.capability_changes += 1

    def capabilities(self) -> Capabilities:
        """What this GPU offers as this session's calls answered. Per-process utilization, read only
        for shared GPUs, is asked once where nothing has read it yet."""
        if not self._probed and cap.PROCESS_UTILIZATION not in self._capabilities:
            # Once a session, whatever the answer: a passing failure repeated every cycle would be
            # counted every cycle, for a call the GPU's readings do not need.
            self._probed = True
            self.process_utilization(0)
        if self._offered[0] != self.capability_changes:  # a copy only when something changed
            self._offered = (self.capability_changes, MappingProxyType(dict(self._capabilities)))
        return self._offered[1]

    # -- inventory ----------------------------------------------------------------------------------

    def identity(self) -> DeviceIdentity | None:
        """nvidia-smi: ``index,uuid,name,pci.bus_id``; asked once a session."""
        if self._identity is None:
            uuid = self._lib.call("nvmlDeviceGetUUID", self.handle)
            if uuid is MISSING:
                return None
            name = self._lib.call("nvmlDeviceGetName", self.handle)
            pci = self._lib.call("nvmlDeviceGetPciInfo", self.handle)
            self._identity = DeviceIdentity(
                gpu_index=self.index,
                uuid=_text(uuid),
                name="" if name is MISSING else _text(name),
                pci_bus_id="" if pci is MISSING else _text(pci.busId),
            )
        return self._identity

    def mig_instances(self) -> tuple[MigInstance, ...]:
        """The MIG devices now (a query: :class:`exporter.device_reader.DeviceReader` decides when)."""
        instances = self._mig.read()
        layout = tuple(i.uuid for i in instances)
        if layout != self._layout:
            # What a device refused may have been its mode's doing (samples, utilization in MIG mode).
            self._unsupported.clear()
            self._refused_fields.clear()
            self._layout = layout
        return instances

    # -- readings -----------------------------------------------------------------------------------

    def utilization(self) -> UtilizationRates | None:
        """nvidia-smi: ``utilization.gpu``, ``utilization.memory``."""
        rates = self._call("nvmlDeviceGetUtilizationRates", self.handle)
        return None if rates is MISSING else UtilizationRates(int(rates.gpu), int(rates.memory))

    def memory(self, handle: Handle = None) -> MemoryInfo | None:
        """Frame-buffer memory of the GPU (or of MIG device ``handle``) from the v2 call, whose ``used``
        leaves out what the driver reserves (as DCGM since R510 and nvidia-smi report it); from v1,
        which counts the reserved part as used, where the driver lacks v2."""
        handle = self.handle if handle is None else handle
        if not self._lib.is_missing(_MEMORY_V2):
            info = self._lib.call(
                "nvmlDeviceGetMemoryInfo",
                handle,
                label=_MEMORY_V2,
                keywords={"version": MEMORY_V2},
                empty_on=NO_SUCH_VERSION,
            )
            if info is EMPTY:
                self._lib.mark_missing(_MEMORY_V2)
                log.info("NVML %s is not in this driver; memory is read through v1", _MEMORY_V2)
            elif info is not MISSING:
                return MemoryInfo(int(info.total), int(info.used), int(info.free), int(info.reserved))
        info = self._call("nvmlDeviceGetMemoryInfo", handle)
        return None if info is MISSING else MemoryInfo(int(info.total), int(info.used), int(info.free))

    def temperature_c(self) -> int | None:
        """GPU core temperature, °C. nvidia-smi: ``temperature.gpu``."""
        value = self._call("nvmlDeviceGetTemperature", self.handle, TEMPERATURE_GPU)
        return None if value is MISSING else int(value)

    def clocks(self, sm: bool = True, memory: bool = True) -> Clocks:
        """Current clocks, MHz (only those asked for). nvidia-smi: ``clocks.sm``, ``clocks.mem``."""
        return Clocks(self._clock(CLOCK_SM) if sm else None, self._clock(CLOCK_MEM) if memory else None)

    def _clock(self, kind: int) -> int | None:
        mhz = self._call("nvmlDeviceGetClockInfo", self.handle, kind)
        return None if mhz is MISSING else int(mhz)

    def encoder_percent(self) -> int | None:
        """Video encoder utilization, %. nvidia-smi: ``utilization.encoder``."""
        value = self._call("nvmlDeviceGetEncoderUtilization", self.handle)
        return None if value is MISSING else int(value[0])

    def decoder_percent(self) -> int | None:
        """Video decoder utilization, %. nvidia-smi: ``utilization.decoder``."""
        value = self._call("nvmlDeviceGetDecoderUtilization", self.handle)
        return None if value is MISSING else int(value[0])

    def clock_event_reasons(self) -> int | None:
        """Bitmask of why the clocks are below their maximum, the value dcgm-exporter exports as
        ``DCGM_FI_DEV_CLOCK_THROTTLE_REASONS`` (0x1 idle, 0x4 software power cap, 0x8 hardware
        slowdown, 0x20 / 0x40 software / hardware thermal slowdown, 0x80 hardware power brake, ...).
        nvidia-smi: ``clocks_event_reasons.active``. Drivers older than 535 lack the call; its older
        name, ``…ClocksThrottleReasons``, is asked there."""
        value = self._call(_EVENT_REASONS, self.handle)
        if value is MISSING and self._lib.is_missing(_EVENT_REASONS):
            value = self._call("nvmlDeviceGetCurrentClocksThrottleReasons", self.handle)
        return None if value is MISSING else int(value)

    def violation_ns(self, policy: int) -> float | None:
        """``nvmlDeviceGetViolationStatus``: ``violationTime`` is in nanoseconds."""
        status = self._call("nvmlDeviceGetViolationStatus", self.handle, policy)
        return None if status is MISSING else float(status.violationTime)

    def power_mw(self) -> float | None:
        """Board power in milliwatts, as DCGM reads DCGM_FI_DEV_POWER_USAGE (averaged over about a
        second on recent GPUs). nvidia-smi: ``power.draw``."""
        usage = self._call("nvmlDeviceGetPowerUsage", self.handle)
        return None if usage is MISSING else float(usage)

    def fields(self, ids: Sequence[FieldId]) -> dict[int, float]:
        """The fields ``ids`` in one ``nvmlDeviceGetFieldValues`` call: each answered value by field id
        (a per-link field by its id). A slot that answered NOT_SUPPORTED is not asked again."""
        found: dict[int, float] = {}
        refused = self._refused_fields
        asked = [i for i in ids if (i if isinstance(i, int) else i[0]) not in refused] if refused else ids
        if not asked:
            return found
        values = self._call(_FIELD_VALUES, self.handle, asked)
        if values is MISSING:
            return found
        members, isfinite = VALUE_MEMBERS, math.isfinite
        for value in values:
            if value.nvmlReturn == SUCCESS:
                # The number in NVML's value union; none for an unknown type or a non-finite double.
                member = members.get(value.valueType)
                raw = None if member is None else getattr(value.value, member, None)
                if raw is not None and isfinite(number := float(raw)):
                    found[int(value.fieldId)] = number
            else:
                self._field_failed(int(value.fieldId), int(value.nvmlReturn))
        offered = self._capabilities
        for name, field in _FIELD_CAPABILITIES:  # what a refused slot said was noted with its refusal
            if field in found and offered.get(name) is not _OFFERED:
                self._note(name, True, None)
        return found

    def _field_failed(self, field_id: int, code: int) -> None:
        slot = field_slot(field_id)
        self._lib.failed(slot, code, self.key)
        if self._lib.last_failure(self.key, slot) == "NOT_SUPPORTED":
            self._refused_fields.add(field_id)
        for name, field in _FIELD_CAPABILITIES:
            if field == field_id:
                self._note(name, False, slot)

    def utilization_samples(self, since_us: int, newer_than_us: int) -> UtilizationSamples | None:
        """The samples of the driver's buffer newer than ``newer_than_us``, asked from ``since_us`` (0:
        the whole buffer, to measure it); ``None`` where unsupported or unreadable.

        The driver answers NOT_FOUND both for "nothing newer" and, as reported, for a GPU that sat
        idle (no samples recorded at all); telling the two apart is the caller's job."""
        result = self._call(
            "nvmlDeviceGetSamples", self.handle, GPU_UTILIZATION_SAMPLES, since_us, empty_on=NOTHING_NEW
        )
        self._note(cap.SAMPLES, result is not MISSING, "nvmlDeviceGetSamples")
        if result is MISSING:
            return None
        if result is EMPTY or not result[1]:
            return UtilizationSamples(())
        value_type, samples = result
        return _new_samples(int(value_type), samples, newer_than_us)

    def processes(self, handle: Handle = None) -> tuple[ProcessMemory, ...] | None:
        """Compute processes on the GPU (or MIG device ``handle``) and the memory each holds."""
        procs = self._lib.sized(
            "nvmlDeviceGetComputeRunningProcesses", self.handle if handle is None else handle
        )
        if procs is MISSING:
            return None
        return () if procs is EMPTY else tuple(map(_process_memory, procs))

    def process_utilization(
        self, since_us: int, handle: Handle = None
    ) -> tuple[ProcessUtilization, ...] | None:
        """Per-process utilization samples newer than ``since_us``; ``()`` when there are none."""
        handle = self.handle if handle is None else handle
        call = "nvmlDeviceGetProcessUtilization"
        if (handle_key(handle), call) in self._unsupported:
            return None
        samples = self._lib.sized(call, handle, since_us, empty_on=NOTHING_NEW)
        if handle is self.handle:
            self._note(cap.PROCESS_UTILIZATION, samples is not MISSING, call)
        if samples is MISSING:
            if self._lib.last_failure(handle_key(handle), call) == "NOT_SUPPORTED":
                self._unsupported.add((handle_key(handle), call))
            return None
        if samples is EMPTY:
            return ()
        return tuple(
            ProcessUtilization(int(s.pid), int(s.timeStamp), int(s.smUtil), int(s.memUtil))
            for s in samples
            if int(s.timeStamp) > since_us
        )

    def read_gpm(
        self, key: Hashable, gpu_instance_id: int | None = None, metrics: Sequence[int] = ALL_METRICS
    ) -> GpmReading | None:
        """GPM since the previous read of ``key`` (see :meth:`exporter.gpm.GpmSampler.read`)."""
        reading = self.gpm.read(key, gpu_instance_id, metrics)
        if self.gpm.supported is not None and cap.GPM not in self._capabilities:
            self._note(cap.GPM, self.gpm.supported, self.gpm.support_failed_call)
        return reading

    def close(self, keep: Collection[Hashable] = ()) -> None:
        """Free this GPU's GPM buffers (those of ``keep`` excepted)."""
        self.gpm.forget(keep)
