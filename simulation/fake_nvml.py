"""A scripted stand-in for the NVML binding, so the exporter runs without a GPU.

:class:`FakeNvmlLibrary` offers the subset of ``pynvml`` functions that the exporter's NVML layer
(:mod:`exporter.nvml_library` and the per-GPU objects above it) calls, with the same argument order,
return shapes and exceptions (the real ``pynvml`` classes, built through
:func:`exporter.nvml_library.nvml_error`). Only this boundary is fake: with
``gpu-exporter --simulate SCENARIO`` the NVML layer, the collection loop, pod attribution and the
HTTP server are the production code.

Constants (field ids, value types, error codes, clock-event bits) come from ``pynvml`` itself, and
the calls follow the binding's shapes where it has quirks: ``nvmlDeviceGetMemoryInfo`` answers the
v1 struct, or with ``version=nvmlMemory_v2`` the v2 struct (``reserved`` apart from ``used``; a
driver without it raises FUNCTION_NOT_FOUND); ``nvmlDeviceGetFieldValues`` takes ids or
(id, scope) pairs and answers a return code per slot; a device may be scripted to record no
utilization samples while idle, so that ``nvmlDeviceGetSamples`` answers NOT_FOUND, as reported of
real GPUs.

Devices follow a utilization profile ``percent(t)`` (``t`` in seconds since the first ``nvmlInit``);
NVML's sub-second sample buffer is synthesised on a fixed grid (6 samples per second), and the
utilization gauge reports the newest sample, as the driver does. A device may be scripted to throttle
(:class:`FakeThrottle`): clock-event reason bits, violation counters growing at a fixed share of wall
time, and the heat and lower SM clock that go with it. A device may be scripted to fall off the bus
(``lost_between``): its calls answer GPU_IS_LOST, it records no utilization samples meanwhile, and an
event set holding it answers GPU_IS_LOST once its pending events are out. Event sets are counted from
create to free (:attr:`FakeNvmlLibrary.live_event_sets`), so a leak shows. A GPU's MIG layout may be
changed while NVML runs (:meth:`FakeNvmlLibrary.reconfigure_mig`): the sets registered for its MIG
reconfiguration events then report one, as the driver does; a GPU may be scripted to refuse that
registration (``mig_events=False``, an older driver), XIDs still registering.

NVML's sample buffer is a ring of :data:`SAMPLE_BUFFER` entries, as the driver's (nvidia-smi -q shows
119 samples in its full buffers on driver 580): a read that comes later than 20 s after the previous
one has lost the oldest samples, as on a GPU.
"""

from __future__ import annotations

import math
import threading
import time
import uuid as uuidlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import Any

import pynvml

from exporter.nvml_library import GPM_METRIC_IDS, nvml_error, nvml_error_code
from simulation.gpu_profiles import Profile, constant, jitter

MIB = 1024 * 1024
GIB = 1024 * MIB
_SAMPLE_PERIOD_S = 1 / 6
#: Entries of the fake driver's utilization-sample ring: 20 s at six samples a second.
SAMPLE_BUFFER = 120
# Constants come from the real binding, as exporter/nvml_library.py takes them: a fake that re-typed them
# could agree with a wrong adapter.
_XID_EVENT = pynvml.nvmlEventTypeXidCriticalError
_MIG_EVENT = pynvml.nvmlEventMigConfigChange
_VALUE_TYPE_DOUBLE = pynvml.NVML_VALUE_TYPE_DOUBLE
_VALUE_TYPE_UNSIGNED_INT = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
_VALUE_TYPE_UNSIGNED_LONG_LONG = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
_PERF_POLICY_POWER = pynvml.NVML_PERF_POLICY_POWER
_PERF_POLICY_THERMAL = pynvml.NVML_PERF_POLICY_THERMAL
REASON_GPU_IDLE = pynvml.nvmlClocksEventReasonGpuIdle
REASON_SW_POWER_CAP = pynvml.nvmlClocksEventReasonSwPowerCap
REASON_SW_THERMAL = pynvml.nvmlClocksEventReasonSwThermalSlowdown
REASON_HW_THERMAL = pynvml.nvmlClocksEventReasonHwThermalSlowdown
REASON_HW_POWER_BRAKE = pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown
# Profile index → (profile id, name, slices, MiB) for an H100 80GB, as NVML reports them.
_H100_PROFILES = {
    0: (19, "MIG 1g.10gb", 1, 9984),
    1: (14, "MIG 2g.20gb", 2, 19968),
    2: (9, "MIG 3g.40gb", 3, 40192),
    3: (5, "MIG 4g.40gb", 4, 40192),
    4: (0, "MIG 7g.80gb", 7, 80896),
}


@dataclass(frozen=True)
class FakeProcess:
    """A compute process on a fake GPU: its memory and share of the device's SM activity."""

    pid: int
    used_bytes: int
    sm_share: float


@dataclass(frozen=True)
class FakeMig:
    """A MIG device on a fake GPU."""

    gpu_instance_id: int
    profile_index: int
    memory_used_bytes: int
    activity: float = 0.5
    processes: tuple[FakeProcess, ...] = ()


@dataclass(frozen=True)
class FakeThrottle:
    """What holds a fake GPU's clocks down while it is busy.

    ``reasons``: clock-event reason bits reported while busy (idle adds 0x1 GPU idle on its own);
    ``power_share`` / ``thermal_share``: fraction of wall time the power / thermal policy holds the
    clocks down, which is how fast the violation counters grow; ``extra_celsius``: heat on top of the
    utilization-driven temperature; ``sm_clock_mhz``: the SM clock while busy (``None``: full boost).
    """

    reasons: int = 0
    power_share: float = 0.0
    thermal_share: float = 0.0
    extra_celsius: float = 0.0
    sm_clock_mhz: int | None = None


@dataclass(frozen=True)
class FakeGpu:
    """One simulated physical GPU."""

    index: int
    name: str = "NVIDIA H100 80GB HBM3"
    memory_total_bytes: int = 81559 * MIB
    memory_used_bytes: int = 20 * GIB  # what processes hold: v2 "used"
    memory_reserved_bytes: int = 527 * MIB  # the driver's reservation: v2 "reserved", inside v1 "used"
    memory_v2: bool = True  # False: a driver older than nvmlDeviceGetMemoryInfo_v2
    samples_when_idle: bool = True  # False: no samples recorded while idle, NOT_FOUND as reported
    utilization: Profile = field(default=constant(0.0))
    noise: float = 0.0  # spread of the deterministic jitter added to utilization samples, in points
    idle_watts: float = 70.0
    max_watts: float = 700.0
    gpm: bool = True
    lost_between: tuple[float, float] | None = None
    xids: tuple[tuple[float, int], ...] = ()
    mig: tuple[FakeMig, ...] = ()
    processes: tuple[FakeProcess, ...] = ()
    throttle: FakeThrottle = FakeThrottle()
    mig_events: bool = True  # False: registering for MIG reconfiguration events answers NOT_SUPPORTED

    @property
    def uuid(self) -> str:
        return f"GPU-{uuidlib.UUID(int=0x5EED_0000_0000_4000_8000_0000_0000_0000 + self.index)}"

    @property
    def pci_bus_id(self) -> str:
        return f"00000000:{0x18 + self.index * 0x10:02X}:00.0"

    def mig_uuid(self, slot: int) -> str:
        return f"MIG-{uuidlib.UUID(int=0x00DE_0000_0000_4000_8000_0000_0000_0000 + self.index * 64 + slot)}"


@dataclass(frozen=True)
class FakeHandle:
    """A device handle: a physical GPU, or one of its MIG devices when ``mig`` is set."""

    gpu: int
    mig: int | None = None


@dataclass
class _Fault:
    code: str
    gpu: int | None
    remaining: int | None


class _GpmMetric:
    def __init__(self) -> None:
        self.metricId = 0
        self.nvmlReturn = pynvml.NVML_SUCCESS
        self.value = 0.0


class FakeGpmMetricsGet:
    """Stands in for ``pynvml.c_nvmlGpmMetricsGet_t``."""

    def __init__(self) -> None:
        self.version = 0
        self.numMetrics = 0
        self.sample1: Any = None
        self.sample2: Any = None
        self.metrics = [_GpmMetric() for _ in range(len(GPM_METRIC_IDS))]


@dataclass(eq=False)
class _GpmSample:
    t: float = math.nan
    gpu: int = -1
    gpu_instance: int | None = None


@dataclass(eq=False)
class _EventSet:
    handles: set[int] = field(default_factory=set)  # GPUs registered for XIDs
    mig_handles: set[int] = field(default_factory=set)  # GPUs registered for MIG reconfigurations
    mig_pending: list[int] = field(default_factory=list)  # reconfigurations not yet waited for


class FakeNvmlLibrary:
    """The fake binding. Only the calls the adapter makes exist; each behaves as the driver documents."""

    c_nvmlGpmMetricsGet_t = FakeGpmMetricsGet

    def __init__(
        self,
        gpus: Iterable[FakeGpu],
        *,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        driver_version: str = "550.54.15",
    ) -> None:
        self.gpus = tuple(gpus)
        self._clock = clock
        self._sleep = sleep
        self._driver_version = driver_version
        self._epoch: float | None = None
        self._initialised = False
        self._lock = threading.Lock()
        self._faults: dict[str, list[_Fault]] = {}
        self._field_faults: dict[int, str] = {}
        self._removed: set[str] = set()
        self._delivered_xids: set[tuple[int, float]] = set()
        self._nvlink: dict[int, tuple[float, float]] = {}  # GPU → (time, KiB sent each way) last read
        # The sets created and not yet freed, held (not their ids: a dropped object's id is reused by
        # the next allocation, which would hide exactly the leak these count).
        self._event_sets: set[_EventSet] = set()
        self._gpm_samples: set[_GpmSample] = set()  # likewise for GPM sample buffers
        self.calls = 0
        self._calls_by_name: dict[str, int] = {}

    # -- test controls --------------------------------------------------------------------------------

    def fail(self, call: str, code: str, *, gpu: int | None = None, times: int | None = None) -> None:
        """Make ``call`` raise ``NVML_ERROR_<code>`` (for one GPU, and ``times`` times, if given)."""
        with self._lock:
            self._faults.setdefault(call, []).append(_Fault(code, gpu, times))

    def fail_field(self, field_id: int, code: str) -> None:
        """Make ``nvmlDeviceGetFieldValues`` answer ``NVML_ERROR_<code>`` in the slot of ``field_id``."""
        self._field_faults[field_id] = code

    def reconfigure_mig(self, index: int, instances: tuple[FakeMig, ...]) -> None:
        """GPU ``index`` now has these MIG devices (none: MIG mode off); every event set registered for
        its MIG reconfigurations has an event to report."""
        gpus = list(self.gpus)
        gpus[index] = replace(gpus[index], mig=instances)
        with self._lock:
            self.gpus = tuple(gpus)
            for event_set in self._event_sets:
                if index in event_set.mig_handles:
                    event_set.mig_pending.append(index)

    def remove_function(self, call: str) -> None:
        """Behave like a driver that lacks ``call`` (the binding raises FUNCTION_NOT_FOUND)."""
        self._removed.add(call)

    def calls_to(self, call: str) -> int:
        """How many times ``call`` was made (failed calls included)."""
        return self._calls_by_name.get(call, 0)

    def elapsed(self) -> float:
        """Seconds since the first nvmlInit (the scenario clock)."""
        return 0.0 if self._epoch is None else self._clock() - self._epoch

    @property
    def live_event_sets(self) -> int:
        """Event sets created and not yet freed: what a leak would make grow."""
        with self._lock:
            return len(self._event_sets)

    @property
    def live_gpm_samples(self) -> int:
        """GPM sample buffers allocated and not yet freed."""
        with self._lock:
            return len(self._gpm_samples)

    def _lost(self, gpu: FakeGpu) -> bool:
        return self._lost_at(gpu, self.elapsed())

    # -- plumbing -------------------------------------------------------------------------------------

    def _enter(
        self, call: str, handle: FakeHandle | None = None, gpu_index: int | None = None
    ) -> FakeGpu | None:
        self.calls += 1
        self._calls_by_name[call] = self._calls_by_name.get(call, 0) + 1
        if call in self._removed:
            raise nvml_error("FUNCTION_NOT_FOUND")
        if self._faults:
            self._injected(call, gpu_index if handle is None else handle.gpu)
        if call not in ("nvmlInit", "nvmlShutdown") and not self._initialised:
            raise nvml_error("UNINITIALIZED")
        index = gpu_index if handle is None else handle.gpu
        if index is None:
            return None
        if not 0 <= index < len(self.gpus):
            raise nvml_error("INVALID_ARGUMENT")
        gpu = self.gpus[index]
        if self._lost(gpu):
            raise nvml_error("GPU_IS_LOST")
        return gpu

    def _injected(self, call: str, gpu: int | None) -> None:
        with self._lock:
            for fault in self._faults.get(call, ()):
                if fault.gpu is not None and fault.gpu != gpu:
                    continue
                if fault.remaining is not None:
                    if fault.remaining <= 0:
                        continue
                    fault.remaining -= 1
                raise nvml_error(fault.code)

    def _gpu(self, call: str, handle: FakeHandle) -> FakeGpu:
        gpu = self._enter(call, handle)
        assert gpu is not None
        return gpu

    def _k_now(self) -> int:
        return math.floor(self.elapsed() / _SAMPLE_PERIOD_S)

    def _sample_us(self, k: int) -> int:
        assert self._epoch is not None
        return round((self._epoch + k * _SAMPLE_PERIOD_S) * 1_000_000)

    def _percent(self, gpu: FakeGpu, k: int) -> int:
        value = gpu.utilization(k * _SAMPLE_PERIOD_S)
        if gpu.noise:
            value += jitter(gpu.index, k, gpu.noise)
        return max(0, min(100, round(value)))

    @staticmethod
    def _lost_at(gpu: FakeGpu, t: float) -> bool:
        return gpu.lost_between is not None and gpu.lost_between[0] <= t < gpu.lost_between[1]

    def _mig(self, gpu: FakeGpu, handle: FakeHandle) -> FakeMig | None:
        if handle.mig is None:
            return None
        if handle.mig >= len(gpu.mig):
            raise nvml_error("INVALID_ARGUMENT")  # the handle of a MIG device since destroyed
        return gpu.mig[handle.mig]

    # -- lifecycle and inventory ----------------------------------------------------------------------

    def nvmlInit(self) -> None:
        self._enter("nvmlInit")
        if self._epoch is None:
            self._epoch = self._clock()
        self._initialised = True

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self._initialised = False

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion")
        return self._driver_version

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        self._enter("nvmlDeviceGetHandleByIndex", gpu_index=index)
        return FakeHandle(index)

    def nvmlDeviceGetUUID(self, handle: FakeHandle) -> str:
        gpu = self._gpu("nvmlDeviceGetUUID", handle)
        return gpu.uuid if handle.mig is None else gpu.mig_uuid(handle.mig)

    def nvmlDeviceGetName(self, handle: FakeHandle) -> str:
        return self._gpu("nvmlDeviceGetName", handle).name

    def nvmlDeviceGetPciInfo(self, handle: FakeHandle) -> SimpleNamespace:
        # The real binding returns a struct whose busId is a C char array (bytes).
        return SimpleNamespace(busId=self._gpu("nvmlDeviceGetPciInfo", handle).pci_bus_id.encode())

    # -- readings -------------------------------------------------------------------------------------

    def nvmlDeviceGetUtilizationRates(self, handle: FakeHandle) -> SimpleNamespace:
        gpu = self._gpu("nvmlDeviceGetUtilizationRates", handle)
        if handle.mig is not None or gpu.mig:
            raise nvml_error("NOT_SUPPORTED")
        percent = self._percent(gpu, self._k_now())
        return SimpleNamespace(gpu=percent, memory=percent // 3)

    def nvmlDeviceGetMemoryInfo(self, handle: FakeHandle, version: int | None = None) -> SimpleNamespace:
        """As the binding: without ``version`` the v1 struct (``used`` includes the driver's
        reservation); with ``version=pynvml.nvmlMemory_v2`` the v2 struct (``reserved`` apart),
        through ``nvmlDeviceGetMemoryInfo_v2``, which an older driver lacks."""
        gpu = self._gpu("nvmlDeviceGetMemoryInfo", handle)
        if version is not None:
            if not gpu.memory_v2:
                raise nvml_error("FUNCTION_NOT_FOUND")
            if version != pynvml.nvmlMemory_v2:
                raise nvml_error("ARGUMENT_VERSION_MISMATCH")
        mig = self._mig(gpu, handle)
        if mig is not None:
            total = _H100_PROFILES[mig.profile_index][3] * MIB
            used, reserved = mig.memory_used_bytes, 0
        else:
            total = gpu.memory_total_bytes
            used = sum(m.memory_used_bytes for m in gpu.mig) if gpu.mig else gpu.memory_used_bytes
            reserved = gpu.memory_reserved_bytes
        free = total - used - reserved
        if version is None:
            return SimpleNamespace(total=total, used=used + reserved, free=free)
        return SimpleNamespace(version=version, total=total, reserved=reserved, free=free, used=used)

    def nvmlDeviceGetTemperature(self, handle: FakeHandle, sensor: int) -> int:
        return self._celsius(self._gpu("nvmlDeviceGetTemperature", handle))

    def _celsius(self, gpu: FakeGpu) -> int:
        return 31 + round(0.45 * gpu.utilization(self.elapsed()) + gpu.throttle.extra_celsius)

    def _busy(self, gpu: FakeGpu) -> bool:
        return gpu.utilization(self.elapsed()) > 10

    def nvmlDeviceGetClockInfo(self, handle: FakeHandle, clock_type: int) -> int:
        gpu = self._gpu("nvmlDeviceGetClockInfo", handle)
        if clock_type == pynvml.NVML_CLOCK_MEM:
            return 2619
        if not self._busy(gpu):
            return 345
        return gpu.throttle.sm_clock_mhz or 1980

    def _clock_event_reasons(self, call: str, handle: FakeHandle) -> int:
        gpu = self._gpu(call, handle)
        if handle.mig is not None:
            raise nvml_error("NOT_SUPPORTED")
        return gpu.throttle.reasons if self._busy(gpu) else REASON_GPU_IDLE

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: FakeHandle) -> int:
        return self._clock_event_reasons("nvmlDeviceGetCurrentClocksEventReasons", handle)

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: FakeHandle) -> int:
        """The name of the same call before driver 535."""
        return self._clock_event_reasons("nvmlDeviceGetCurrentClocksThrottleReasons", handle)

    def _violation_ns(self, gpu: FakeGpu, policy: int) -> int:
        share = {
            _PERF_POLICY_POWER: gpu.throttle.power_share,
            _PERF_POLICY_THERMAL: gpu.throttle.thermal_share,
        }
        return round(share.get(policy, 0.0) * self.elapsed() * 1e9)

    def nvmlDeviceGetViolationStatus(self, handle: FakeHandle, policy: int) -> SimpleNamespace:
        gpu = self._gpu("nvmlDeviceGetViolationStatus", handle)
        if handle.mig is not None:
            raise nvml_error("NOT_SUPPORTED")
        return SimpleNamespace(
            referenceTime=round(self._clock() * 1_000_000), violationTime=self._violation_ns(gpu, policy)
        )

    def nvmlDeviceGetEncoderUtilization(self, handle: FakeHandle) -> list[int]:
        self._gpu("nvmlDeviceGetEncoderUtilization", handle)
        return [0, 167000]

    def nvmlDeviceGetDecoderUtilization(self, handle: FakeHandle) -> list[int]:
        self._gpu("nvmlDeviceGetDecoderUtilization", handle)
        return [0, 167000]

    def _watts(self, gpu: FakeGpu, t: float) -> float:
        return gpu.idle_watts + (gpu.max_watts - gpu.idle_watts) * gpu.utilization(t) / 100

    def nvmlDeviceGetPowerUsage(self, handle: FakeHandle) -> int:
        """Averaged over the last second, as recent drivers report it (the field is instantaneous)."""
        gpu = self._gpu("nvmlDeviceGetPowerUsage", handle)
        t = self.elapsed()
        mean = sum(self._watts(gpu, t - k / 10) for k in range(10)) / 10
        return round(mean * 1000)

    def _nvlink_kib(self, gpu: FakeGpu, t: float) -> int:
        """NVLink data sent (and as much received) since NVML started, KiB: a counter, as the driver's,
        growing with utilization at up to ~1 GB/s each way."""
        with self._lock:
            since, kib = self._nvlink.get(gpu.index, (0.0, 0.0))
            if t > since:
                kib += (t - since) * 1_000_000 * gpu.utilization(t) / 100
                self._nvlink[gpu.index] = (t, kib)
        return round(kib)

    def nvmlDeviceGetFieldValues(
        self, handle: FakeHandle, field_ids: list[int | tuple[int, int]]
    ) -> list[SimpleNamespace]:
        """As the binding: ids, or (id, scope id) pairs; one slot per id with its own return code."""
        gpu = self._gpu("nvmlDeviceGetFieldValues", handle)
        t = self.elapsed()
        # Energy grows with the mean of idle and the current power: monotonic, roughly plausible.
        energy_mj = 5.0e9 + t * 1000 * (gpu.idle_watts + self._watts(gpu, t)) / 2
        ull, ui = _VALUE_TYPE_UNSIGNED_LONG_LONG, _VALUE_TYPE_UNSIGNED_INT
        nvlink_kib = self._nvlink_kib(gpu, t)
        known: dict[int, tuple[int, SimpleNamespace]] = {
            pynvml.NVML_FI_DEV_POWER_INSTANT: (ui, SimpleNamespace(uiVal=round(self._watts(gpu, t) * 1000))),
            pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION: (ull, SimpleNamespace(ullVal=round(energy_mj))),
            pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER: (ull, SimpleNamespace(ullVal=0)),
            pynvml.NVML_FI_DEV_PERF_POLICY_POWER: (
                ull,
                SimpleNamespace(ullVal=self._violation_ns(gpu, _PERF_POLICY_POWER)),
            ),
            pynvml.NVML_FI_DEV_PERF_POLICY_THERMAL: (
                ull,
                SimpleNamespace(ullVal=self._violation_ns(gpu, _PERF_POLICY_THERMAL)),
            ),
            pynvml.NVML_FI_DEV_MEMORY_TEMP: (ui, SimpleNamespace(uiVal=self._celsius(gpu) + 6)),
            pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL: (ull, SimpleNamespace(ullVal=0)),
            pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL: (ull, SimpleNamespace(ullVal=0)),
            pynvml.NVML_FI_DEV_ECC_SBE_AGG_TOTAL: (ull, SimpleNamespace(ullVal=0)),
            pynvml.NVML_FI_DEV_ECC_DBE_AGG_TOTAL: (ull, SimpleNamespace(ullVal=0)),
            pynvml.NVML_FI_DEV_REMAPPED_COR: (ui, SimpleNamespace(uiVal=0)),
            pynvml.NVML_FI_DEV_REMAPPED_UNC: (ui, SimpleNamespace(uiVal=0)),
            pynvml.NVML_FI_DEV_REMAPPED_FAILURE: (ui, SimpleNamespace(uiVal=0)),
            pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: (ull, SimpleNamespace(ullVal=nvlink_kib)),
            pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: (ull, SimpleNamespace(ullVal=nvlink_kib)),
        }
        out = []
        for entry in field_ids:
            field_id, scope = entry if isinstance(entry, tuple) else (entry, 0)
            value_type, value = known.get(field_id, (_VALUE_TYPE_DOUBLE, SimpleNamespace(dVal=0.0)))
            status = pynvml.NVML_SUCCESS if field_id in known else nvml_error_code("NOT_SUPPORTED")
            if field_id in self._field_faults:
                status = nvml_error_code(self._field_faults[field_id])
            out.append(
                SimpleNamespace(
                    fieldId=field_id, scopeId=scope, nvmlReturn=status, valueType=value_type, value=value
                )
            )
        return out

    def nvmlDeviceGetSamples(
        self, handle: FakeHandle, sampling_type: int, since_us: int
    ) -> tuple[int, list[Any]]:
        gpu = self._gpu("nvmlDeviceGetSamples", handle)
        if handle.mig is not None or gpu.mig or sampling_type != pynvml.NVML_GPU_UTILIZATION_SAMPLES:
            raise nvml_error("NOT_SUPPORTED")
        k_now = self._k_now()
        first = max(0, k_now - SAMPLE_BUFFER + 1)
        samples = []
        for k in range(first, k_now + 1):
            stamp = self._sample_us(k)
            percent = self._percent(gpu, k)
            if self._lost_at(gpu, k * _SAMPLE_PERIOD_S):
                continue  # nothing is recorded while the GPU is off the bus
            if stamp > since_us and (percent > 0 or gpu.samples_when_idle):
                samples.append(SimpleNamespace(timeStamp=stamp, sampleValue=SimpleNamespace(uiVal=percent)))
        if not samples:
            raise nvml_error("NOT_FOUND")
        return _VALUE_TYPE_UNSIGNED_INT, samples

    # -- processes ------------------------------------------------------------------------------------

    def _processes(self, gpu: FakeGpu, handle: FakeHandle) -> tuple[FakeProcess, ...]:
        mig = self._mig(gpu, handle)
        return gpu.processes if mig is None else mig.processes

    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeHandle) -> list[SimpleNamespace]:
        gpu = self._gpu("nvmlDeviceGetComputeRunningProcesses", handle)
        return [SimpleNamespace(pid=p.pid, usedGpuMemory=p.used_bytes) for p in self._processes(gpu, handle)]

    def nvmlDeviceGetProcessUtilization(self, handle: FakeHandle, since_us: int) -> list[SimpleNamespace]:
        gpu = self._gpu("nvmlDeviceGetProcessUtilization", handle)
        if handle.mig is not None or gpu.mig:  # nvml.h: not supported on MIG-enabled GPUs
            raise nvml_error("NOT_SUPPORTED")
        k = self._k_now()
        stamp = self._sample_us(k)
        processes = self._processes(gpu, handle)
        if stamp <= since_us or not processes:
            raise nvml_error("NOT_FOUND")
        percent = self._percent(gpu, k)
        return [
            SimpleNamespace(pid=p.pid, timeStamp=stamp, smUtil=round(percent * p.sm_share), memUtil=0)
            for p in processes
        ]

    # -- MIG ------------------------------------------------------------------------------------------

    def nvmlDeviceGetMigMode(self, handle: FakeHandle) -> list[int]:
        gpu = self._gpu("nvmlDeviceGetMigMode", handle)
        if not gpu.mig:
            raise nvml_error("NOT_SUPPORTED")
        return [pynvml.NVML_DEVICE_MIG_ENABLE, pynvml.NVML_DEVICE_MIG_ENABLE]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: FakeHandle) -> int:
        self._gpu("nvmlDeviceGetMaxMigDeviceCount", handle)
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: FakeHandle, slot: int) -> FakeHandle:
        gpu = self._gpu("nvmlDeviceGetMigDeviceHandleByIndex", handle)
        if slot >= len(gpu.mig):
            raise nvml_error("NOT_FOUND")
        return FakeHandle(handle.gpu, slot)

    def nvmlDeviceGetGpuInstanceId(self, handle: FakeHandle) -> int:
        gpu = self._gpu("nvmlDeviceGetGpuInstanceId", handle)
        mig = self._mig(gpu, handle)
        if mig is None:
            raise nvml_error("INVALID_ARGUMENT")
        return mig.gpu_instance_id

    def nvmlDeviceGetComputeInstanceId(self, handle: FakeHandle) -> int:
        self._gpu("nvmlDeviceGetComputeInstanceId", handle)
        return 0

    def nvmlDeviceGetGpuInstanceById(self, handle: FakeHandle, gpu_instance_id: int) -> tuple[int, int]:
        gpu = self._gpu("nvmlDeviceGetGpuInstanceById", handle)
        for mig in gpu.mig:
            if mig.gpu_instance_id == gpu_instance_id:
                return (handle.gpu, gpu_instance_id)
        raise nvml_error("NOT_FOUND")

    def nvmlGpuInstanceGetInfo(self, instance: tuple[int, int]) -> SimpleNamespace:
        gpu = self._gpu("nvmlGpuInstanceGetInfo", FakeHandle(instance[0]))
        mig = next(m for m in gpu.mig if m.gpu_instance_id == instance[1])
        return SimpleNamespace(id=mig.gpu_instance_id, profileId=_H100_PROFILES[mig.profile_index][0])

    def nvmlDeviceGetGpuInstanceProfileInfo(self, handle: FakeHandle, profile: int) -> SimpleNamespace:
        self._gpu("nvmlDeviceGetGpuInstanceProfileInfo", handle)
        if profile not in _H100_PROFILES:
            raise nvml_error("INVALID_ARGUMENT")
        profile_id, name, slices, mib = _H100_PROFILES[profile]
        return SimpleNamespace(id=profile_id, name=name.encode(), sliceCount=slices, memorySizeMB=mib)

    def nvmlDeviceGetAttributes(self, handle: FakeHandle) -> SimpleNamespace:
        gpu = self._gpu("nvmlDeviceGetAttributes", handle)
        mig = self._mig(gpu, handle)
        if mig is None:
            return SimpleNamespace(gpuInstanceSliceCount=7, memorySizeMB=gpu.memory_total_bytes // MIB)
        _, _, slices, mib = _H100_PROFILES[mig.profile_index]
        return SimpleNamespace(gpuInstanceSliceCount=slices, memorySizeMB=mib)

    # -- GPM ------------------------------------------------------------------------------------------

    def nvmlGpmQueryDeviceSupport(self, handle: FakeHandle) -> SimpleNamespace:
        gpu = self._gpu("nvmlGpmQueryDeviceSupport", handle)
        return SimpleNamespace(version=1, isSupportedDevice=int(gpu.gpm))

    def nvmlGpmSampleAlloc(self) -> _GpmSample:
        self._enter("nvmlGpmSampleAlloc")
        sample = _GpmSample()
        with self._lock:
            self._gpm_samples.add(sample)
        return sample

    def nvmlGpmSampleFree(self, sample: _GpmSample) -> None:
        self._enter("nvmlGpmSampleFree")
        with self._lock:
            self._gpm_samples.discard(sample)

    def nvmlGpmSampleGet(self, handle: FakeHandle, sample: _GpmSample) -> _GpmSample:
        gpu = self._gpu("nvmlGpmSampleGet", handle)
        if not gpu.gpm:
            raise nvml_error("NOT_SUPPORTED")
        sample.t, sample.gpu, sample.gpu_instance = self.elapsed(), handle.gpu, None
        return sample

    def nvmlGpmMigSampleGet(self, handle: FakeHandle, gpu_instance_id: int, sample: _GpmSample) -> _GpmSample:
        gpu = self._gpu("nvmlGpmMigSampleGet", handle)
        if not gpu.gpm:
            raise nvml_error("NOT_SUPPORTED")
        if all(m.gpu_instance_id != gpu_instance_id for m in gpu.mig):
            raise nvml_error("INVALID_ARGUMENT")  # a GPU instance since destroyed
        sample.t, sample.gpu, sample.gpu_instance = self.elapsed(), handle.gpu, gpu_instance_id
        return sample

    def nvmlGpmMetricsGet(self, request: FakeGpmMetricsGet) -> FakeGpmMetricsGet:
        self._enter("nvmlGpmMetricsGet")
        second: _GpmSample = request.sample2
        gpu = self.gpus[second.gpu]
        if second.gpu_instance is None:
            activity = gpu.utilization(second.t) / 100
        else:
            activity = next(m.activity for m in gpu.mig if m.gpu_instance_id == second.gpu_instance)
        # Graphics engine, SM active, SM occupancy, tensor pipes, DRAM: plausible shares of activity
        # (percent); PCIe TX and RX in MiB/s.
        values = {
            pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL: 100 * activity,
            pynvml.NVML_GPM_METRIC_SM_UTIL: 85 * activity,
            pynvml.NVML_GPM_METRIC_SM_OCCUPANCY: 45 * activity,
            pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 60 * activity,
            pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: 50 * activity,
            pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC: 800 * activity,
            pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC: 1200 * activity,
        }
        for slot in range(request.numMetrics):
            metric = request.metrics[slot]
            known = metric.metricId in values
            metric.nvmlReturn = pynvml.NVML_SUCCESS if known else pynvml.NVML_ERROR_NOT_SUPPORTED
            metric.value = values.get(metric.metricId, 0.0)
        return request

    # -- events ---------------------------------------------------------------------------------------

    def nvmlEventSetCreate(self) -> _EventSet:
        self._enter("nvmlEventSetCreate")
        event_set = _EventSet()
        with self._lock:
            self._event_sets.add(event_set)
        return event_set

    def nvmlDeviceRegisterEvents(self, handle: FakeHandle, event_types: int, event_set: _EventSet) -> None:
        gpu = self._gpu("nvmlDeviceRegisterEvents", handle)
        if event_types & _MIG_EVENT and not gpu.mig_events:
            raise nvml_error("NOT_SUPPORTED")  # nothing registered, as a driver refusing the mask
        if event_types & _XID_EVENT:
            event_set.handles.add(handle.gpu)
        if event_types & _MIG_EVENT:
            event_set.mig_handles.add(handle.gpu)

    def nvmlEventSetFree(self, event_set: _EventSet) -> None:
        """UNINITIALIZED once NVML is shut down, as nvml.h documents: sets are freed before nvmlShutdown."""
        self._enter("nvmlEventSetFree")
        with self._lock:
            if event_set not in self._event_sets:
                raise nvml_error("INVALID_ARGUMENT")  # freed twice, or never created here
            self._event_sets.discard(event_set)

    def nvmlEventSetWait(self, event_set: _EventSet, timeout_ms: int) -> SimpleNamespace:
        """Events already recorded come out first; with none pending, a set holding a GPU that fell off
        the bus answers GPU_IS_LOST at once (nvml.h documents the code for the wait, without saying
        which GPU), every time, until that GPU is off the set."""
        self._enter("nvmlEventSetWait")
        deadline = self._clock() + timeout_ms / 1000
        while True:
            with self._lock:
                reconfigured = event_set.mig_pending.pop(0) if event_set.mig_pending else None
            if reconfigured is not None:
                return SimpleNamespace(device=FakeHandle(reconfigured), eventType=_MIG_EVENT, eventData=0)
            now = self.elapsed()
            for index in sorted(event_set.handles):
                for at, xid in self.gpus[index].xids:
                    with self._lock:
                        due = at <= now and (index, at) not in self._delivered_xids
                        if due:
                            self._delivered_xids.add((index, at))
                    if due:
                        return SimpleNamespace(device=FakeHandle(index), eventType=_XID_EVENT, eventData=xid)
            if any(self._lost(self.gpus[index]) for index in event_set.handles):
                raise nvml_error("GPU_IS_LOST")
            remaining = deadline - self._clock()
            if remaining <= 0:
                raise nvml_error("TIMEOUT")
            self._sleep(min(remaining, 0.05))
