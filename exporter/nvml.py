"""The NVML adapter: the only module in the project that imports ``pynvml``.

Every NVML call goes through :meth:`Nvml._call`, which decides what an error means:

* ``NOT_SUPPORTED`` — the reading does not exist on this GPU: the accessor returns ``None`` and the
  sample is left out (never NaN). Not counted as an error.
* ``FUNCTION_NOT_FOUND`` — the driver is older than the binding (or the binding older than this code):
  logged once, counted once, and the function is never called again in this process; a reading with
  an older equivalent (clock-event reasons, power) is read through that instead.
* ``GPU_IS_LOST`` — :class:`GpuLost` is raised so the caller marks that GPU (only) down; the other
  GPUs and their GPM state are untouched (the XID watcher rebuilds its event set without that GPU).
* ``UNINITIALIZED``, ``DRIVER_NOT_LOADED`` — :class:`GpuLost` is raised too, and :attr:`Nvml.needs_init`
  asks for NVML to be re-initialised on the next cycle: no call can succeed before that.
* ``NO_PERMISSION``, ``OPERATING_SYSTEM`` (blocked by the container's device rules),
  ``ARGUMENT_VERSION_MISMATCH``, ``DEPRECATED`` — answers that cannot change while NVML stays
  initialised: the (device, call) is not asked again until NVML is re-initialised, and is counted and
  logged once, so a call the container lacks the privileges for does not count an error every cycle.
* anything else — counted, logged once per (call, code), and the reading is left out.

Readings come back as NamedTuples in NVML's own units; each docstring names the matching
``nvidia-smi --query-gpu=`` field where one exists. Constants (error codes, field ids, sampling types)
are read from the real binding; functions and the GPM struct come from ``library``, so a fake with
the same calls (``simulation.fake_nvml``) can stand in for the driver while everything above runs as in
production.
"""

from __future__ import annotations

import ctypes
import logging
import math
import threading
from collections.abc import Collection, Hashable, Iterable
from typing import Any, Final

import pynvml

from common.errors import ExitCode, GpuToolError
from exporter import capabilities as cap
from exporter.capabilities import Capabilities, Capability
from exporter.readings import (
    Clocks,
    DeviceIdentity,
    FieldReadings,
    GpmReading,
    Handle,
    MemoryInfo,
    MigInstance,
    ProcessMemory,
    ProcessUtilization,
    UtilizationRates,
    UtilizationSamples,
    XidEvent,
    XidEventSet,
)

__all__ = [
    "Clocks",
    "DeviceIdentity",
    "FieldReadings",
    "GpmReading",
    "GpuLost",
    "Handle",
    "MemoryInfo",
    "MigInstance",
    "Nvml",
    "NvmlUnavailable",
    "ProcessMemory",
    "ProcessUtilization",
    "UtilizationRates",
    "UtilizationSamples",
    "XidEvent",
    "XidEventSet",
    "nvml_error",
    "nvml_error_code",
]

log = logging.getLogger(__name__)

_ERROR_NAMES: Final[dict[int, str]] = {
    getattr(pynvml, name): name.removeprefix("NVML_ERROR_")
    for name in dir(pynvml)
    if name.startswith("NVML_ERROR_")
}
_SUCCESS: Final = pynvml.NVML_SUCCESS
_NOT_SUPPORTED: Final = pynvml.NVML_ERROR_NOT_SUPPORTED
_FUNCTION_NOT_FOUND: Final = pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
#: "Nothing newer than the timestamp" (samples) and "empty slot" (MIG devices).
_NOTHING_NEW: Final = frozenset({pynvml.NVML_ERROR_NOT_FOUND})
_TIMED_OUT: Final = frozenset({pynvml.NVML_ERROR_TIMEOUT})
#: Profile indices a GPU model does not offer.
_NO_SUCH_PROFILE: Final = frozenset({pynvml.NVML_ERROR_INVALID_ARGUMENT, pynvml.NVML_ERROR_NOT_FOUND})
#: Codes after which no call on NVML as a whole can succeed until it is re-initialised.
_REINIT_CODES: Final = frozenset({pynvml.NVML_ERROR_UNINITIALIZED, pynvml.NVML_ERROR_DRIVER_NOT_LOADED})
#: Codes that mark the device down: the ones above, and a GPU that fell off the bus (that GPU only).
_LOST_CODES: Final = _REINIT_CODES | {pynvml.NVML_ERROR_GPU_IS_LOST}
#: The buffer was too small: a process started between the binding's size query and its read.
_INSUFFICIENT_SIZE: Final = pynvml.NVML_ERROR_INSUFFICIENT_SIZE
_SIZE_RETRIES: Final = 3
#: Answers meaning "this version of the call is not in this driver": fall back to the older one.
_NO_SUCH_VERSION: Final = frozenset(
    {pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH}
)
_NO_PERMISSION: Final = pynvml.NVML_ERROR_NO_PERMISSION
#: Answers that hold until NVML is re-initialised (privileges, device cgroup rules, versions): the
#: (device, call) is not asked again before then, and counts once — not once per cycle, which would
#: keep the GpuExporterErrors alert firing for as long as the exporter runs.
_STICKY_CODES: Final = frozenset(
    {
        _NO_PERMISSION,
        pynvml.NVML_ERROR_OPERATING_SYSTEM,
        pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
        pynvml.NVML_ERROR_DEPRECATED,
    }
)
#: Failures that settle whether a GPU offers a capability; any other is passing and changes nothing.
_SETTLED: Final = frozenset(
    _ERROR_NAMES[code] for code in (_NOT_SUPPORTED, _FUNCTION_NOT_FOUND, *_STICKY_CODES)
)
_PRIVILEGE_HINT: Final = (
    ' — this container lacks the privilege for it (docs/install.md, "The exporter\'s privileges")'
)

_NVML_MISSING_HINT: Final = (
    " — the NVIDIA driver is not usable from this container. Check that the node has the driver"
    " loaded (nvidia-smi on the host), that the pod runs with the NVIDIA container runtime"
    " (runtimeClassName: nvidia, or the GPU operator's toolkit) so libnvidia-ml.so.1 is mounted, or"
    " run with --simulate SCENARIO to try the exporter without a GPU"
)
#: What an operator should check when nvmlInit fails with these codes.
_INIT_HINTS: Final[dict[int, str]] = {
    pynvml.NVML_ERROR_LIBRARY_NOT_FOUND: _NVML_MISSING_HINT,
    pynvml.NVML_ERROR_DRIVER_NOT_LOADED: _NVML_MISSING_HINT,
    pynvml.NVML_ERROR_NO_PERMISSION: " — the container may not open /dev/nvidia*; check the device mounts",
    pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH: (
        " — the driver's user-space library and kernel module differ (a driver upgrade without a"
        " reboot or module reload); until then NVML cannot be used"
    ),
}

_XID_EVENTS: Final[int] = pynvml.nvmlEventTypeXidCriticalError

#: Field ids read in one nvmlDeviceGetFieldValues call per GPU (instead of one call each). The two
#: perf-policy counters are the ones DCGM reads for DCGM_FI_DEV_POWER_VIOLATION / _THERMAL_VIOLATION.
FIELD_POWER_INSTANT: Final[int] = pynvml.NVML_FI_DEV_POWER_INSTANT
FIELD_TOTAL_ENERGY: Final[int] = pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION
FIELD_PCIE_REPLAY: Final[int] = pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER
FIELD_POWER_VIOLATION: Final[int] = pynvml.NVML_FI_DEV_PERF_POLICY_POWER
FIELD_THERMAL_VIOLATION: Final[int] = pynvml.NVML_FI_DEV_PERF_POLICY_THERMAL
FIELD_MEMORY_TEMP: Final[int] = pynvml.NVML_FI_DEV_MEMORY_TEMP
FIELD_ECC_SBE_VOL: Final[int] = pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL
FIELD_ECC_DBE_VOL: Final[int] = pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL
FIELD_ECC_SBE_AGG: Final[int] = pynvml.NVML_FI_DEV_ECC_SBE_AGG_TOTAL
FIELD_ECC_DBE_AGG: Final[int] = pynvml.NVML_FI_DEV_ECC_DBE_AGG_TOTAL
FIELD_REMAPPED_COR: Final[int] = pynvml.NVML_FI_DEV_REMAPPED_COR
FIELD_REMAPPED_UNC: Final[int] = pynvml.NVML_FI_DEV_REMAPPED_UNC
FIELD_REMAPPED_FAILURE: Final[int] = pynvml.NVML_FI_DEV_REMAPPED_FAILURE
FIELD_NVLINK_TX: Final[int] = pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX
FIELD_NVLINK_RX: Final[int] = pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX
#: NVLink fields are per link; this scope asks for the sum over all links.
NVLINK_ALL_LINKS: Final = 0xFFFFFFFF
FIELD_IDS: Final[tuple[int | tuple[int, int], ...]] = (
    FIELD_POWER_INSTANT,
    FIELD_TOTAL_ENERGY,
    FIELD_PCIE_REPLAY,
    FIELD_POWER_VIOLATION,
    FIELD_THERMAL_VIOLATION,
    FIELD_MEMORY_TEMP,
    FIELD_ECC_SBE_VOL,
    FIELD_ECC_DBE_VOL,
    FIELD_ECC_SBE_AGG,
    FIELD_ECC_DBE_AGG,
    FIELD_REMAPPED_COR,
    FIELD_REMAPPED_UNC,
    FIELD_REMAPPED_FAILURE,
    (FIELD_NVLINK_TX, NVLINK_ALL_LINKS),
    (FIELD_NVLINK_RX, NVLINK_ALL_LINKS),
)
#: Counters the driver takes milliseconds to read (on an H200 with driver 580: the energy counter
#: 2.9 ms, the thermal violation counter 0.7 ms, PCIe replays 0.18 ms; the twelve other fields 34 µs
#: together, docs/exporter.md "Real GPU") and whose rates Prometheus takes over minutes: the reader
#: asks for them every :data:`SLOW_FIELD_CYCLES` collection intervals (30 s at the default 5 s, as
#: often as dcgm-exporter collects every field by default), not every cycle.
SLOW_FIELDS: Final = frozenset({FIELD_TOTAL_ENERGY, FIELD_PCIE_REPLAY, FIELD_THERMAL_VIOLATION})
SLOW_FIELD_CYCLES: Final = 6
SLOW_FIELDS_EVERY_S: Final = 30.0  # what a reader without an interval assumes (5 s × 6)
_FAST_FIELD_IDS: Final = tuple(
    field for field in FIELD_IDS if (field if isinstance(field, int) else field[0]) not in SLOW_FIELDS
)
#: nvmlDeviceGetViolationStatus policies, the fallback when the field slots give no answer.
_VIOLATION_POLICIES: Final = {
    FIELD_POWER_VIOLATION: pynvml.NVML_PERF_POLICY_POWER,
    FIELD_THERMAL_VIOLATION: pynvml.NVML_PERF_POLICY_THERMAL,
}

#: GPM metric ids, in the order of :class:`GpmReading`'s fields: five percentages, then PCIe MiB/s.
GPM_METRIC_IDS: Final[tuple[int, ...]] = (
    pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL,
    pynvml.NVML_GPM_METRIC_SM_UTIL,
    pynvml.NVML_GPM_METRIC_SM_OCCUPANCY,
    pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL,
    pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL,
    pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC,
    pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC,
)
_GPM_RATIOS: Final = 5
_MIB: Final = 1024 * 1024

#: nvml.h's NVML_VALUE_TYPE_UNSIGNED_SHORT. The binding names it from nvidia-ml-py 12.560.30 and its
#: value union has ``usVal`` from 12.570.86; with an older binding such a reading is left out.
_VALUE_TYPE_UNSIGNED_SHORT: Final[int] = getattr(pynvml, "NVML_VALUE_TYPE_UNSIGNED_SHORT", 6)
_VALUE_MEMBERS: Final[dict[int, str]] = {
    pynvml.NVML_VALUE_TYPE_DOUBLE: "dVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
    _VALUE_TYPE_UNSIGNED_SHORT: "usVal",
}
#: Reported by NVML for per-process memory it cannot attribute (e.g. no permission).
_VALUE_NOT_AVAILABLE: Final = 2**64 - 1


class _Missing:
    """Sentinel type: the call produced no reading."""


class _Empty:
    """Sentinel type: the call succeeded in saying "nothing new" (e.g. no samples since a timestamp)."""


_MISSING: Final = _Missing()
_EMPTY: Final = _Empty()


class NvmlError(GpuToolError):
    """Base class of the adapter's own errors."""


class NvmlUnavailable(NvmlError):
    """NVML cannot be used at all: no library, no driver, or initialisation failed."""

    exit_code = ExitCode.DATA_UNAVAILABLE


class EventWaitFailed(NvmlError):
    """``nvmlEventSetWait`` failed with something other than a timeout; the caller backs off."""


class GpuLost(NvmlError):
    """A call reported that the GPU (or NVML itself) is gone; re-initialise before trusting NVML again."""

    def __init__(self, call: str, code: str) -> None:
        super().__init__(f"{call}: {code}")
        self.call = call
        self.code = code


def nvml_error_code(code: str) -> int:
    """The number of ``NVML_ERROR_<code>``, as a field-values slot reports it — for fakes at this boundary."""
    number: int = getattr(pynvml, "NVML_ERROR_" + code)
    return number


def nvml_error(code: str) -> Exception:
    """The exception the real binding raises for ``NVML_ERROR_<code>`` — for fakes at this boundary."""
    return pynvml.NVMLError(nvml_error_code(code))


def _handle_key(handle: Handle) -> Hashable:
    """A key that is equal for two handles to the same device (ctypes pointers compare by identity)."""
    if isinstance(handle, ctypes._Pointer):
        address: Hashable = ctypes.cast(handle, ctypes.c_void_p).value
        return address
    fake: Hashable = handle
    return fake


def _device_key(args: tuple[Any, ...]) -> Hashable:
    """The device (or GPU instance, or index) a call is about: its first argument where that compares by
    value; ``None`` for calls on no device (an event set, a GPM request)."""
    if not args:
        return None
    first = args[0]
    if isinstance(first, ctypes._Pointer):
        return _handle_key(first)
    if type(first).__hash__ in (None, object.__hash__):  # unhashable, or equal only to itself
        return None
    key: Hashable = first
    return key


def _slot(field_id: int) -> str:
    """How a field of the nvmlDeviceGetFieldValues batch is named in errors."""
    return f"nvmlDeviceGetFieldValues[{field_id}]"


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _union_value(value_type: int, union: Any) -> float | None:
    """The number in an NVML value union; ``None`` for an unknown type or a non-finite double."""
    member = _VALUE_MEMBERS.get(value_type)
    raw = None if member is None else getattr(union, member, None)
    if raw is None:
        return None
    value = float(raw)
    return value if math.isfinite(value) else None


class Nvml:
    """Thread-safe wrapper over an NVML binding (``pynvml`` in production, a fake in simulation and tests)."""

    def __init__(self, library: Any = pynvml) -> None:
        self._lib = library
        self._lock = threading.Lock()
        self._errors: dict[tuple[str, str], int] = {}
        self._missing_functions: set[str] = set()
        self._warned: set[tuple[str, str]] = set()
        self._initialised = False
        self._needs_reinit = False
        self._generation = 0
        # Per-initialisation caches; handles and GPM samples die with the NVML session.
        self._gpm_supported: dict[Hashable, bool] = {}
        self._gpm_previous: dict[Hashable, Any] = {}
        # The other buffer of each key's pair: a sample is taken into it and the two swap, so a cycle
        # makes two GPM calls per device (sample, metrics), not four (alloc and free as well).
        self._gpm_spare: dict[Hashable, Any] = {}
        self._mig_profiles: dict[Hashable, dict[int, str]] = {}
        self._gpm_parent: dict[Hashable, Hashable] = {}
        # (device, call) → NVML code name: answers that hold for the session (_STICKY_CODES), and the
        # latest failure of each, which names why a capability is missing.
        self._sticky: dict[tuple[Hashable, str], str] = {}
        self._last_failure: dict[tuple[Hashable, str], str] = {}
        self._capabilities: dict[Hashable, dict[str, Capability]] = {}
        self._probed: set[Hashable] = set()  # devices whose per-process utilization was asked this session
        # Devices whose MIG mode query answered NOT_SUPPORTED: nvml.h gives that answer only for a device
        # that does not support MIG mode at all, so it is not asked again this session. (The mode itself
        # is asked every cycle: nvml.h says a change "may" need a reset, not that it always does.)
        self._without_mig: set[Hashable] = set()
        # Event sets of this session not yet freed, by id. nvml.h does not say nvmlShutdown frees them
        # and nvmlEventSetFree answers UNINITIALIZED after it, so shutdown() frees them first.
        self._event_sets: dict[int, Any] = {}

    # -- the chokepoint -------------------------------------------------------------------------------

    def _call(
        self,
        name: str,
        *args: Any,
        empty_on: frozenset[int] = frozenset(),
        label: str | None = None,
        **kwargs: Any,
    ) -> Any:
        """Call ``library.<name>(*args, **kwargs)``; ``label`` names the call in errors and in the set
        of missing functions (a versioned variant of a binding function, e.g. ``…MemoryInfo_v2``).

        Returns :data:`_MISSING` where there is no reading and :data:`_EMPTY` for the codes in
        ``empty_on``, which that call uses to say "nothing new".
        """
        label = label or name
        if label in self._missing_functions:
            return _MISSING
        if self._sticky and (_device_key(args), label) in self._sticky:
            return _MISSING
        function = getattr(self._lib, name, None)
        if function is None:  # a binding older than this code: as if the driver lacked the function
            return self._failed(label, _FUNCTION_NOT_FOUND)
        try:
            return function(*args, **kwargs)
        except pynvml.NVMLError as exc:
            if exc.value in empty_on:
                return _EMPTY
            return self._failed(label, exc.value, _device_key(args))

    def _failed(self, call: str, code: int, device: Hashable = None) -> _Missing:
        code_name = _ERROR_NAMES.get(code, str(code))
        self._last_failure[(device, call)] = code_name
        if code == _NOT_SUPPORTED:
            return _MISSING
        # Only a device's call is kept from being asked again: a refused call about the whole system
        # (nvmlDeviceGetCount) would otherwise leave the exporter unready until it restarts.
        sticky = code in _STICKY_CODES and device is not None
        with self._lock:
            if sticky:
                if (device, call) in self._sticky:
                    return _MISSING  # a slot of a batch call, which is still made: counted already
                self._sticky[(device, call)] = code_name
            self._errors[(call, code_name)] = self._errors.get((call, code_name), 0) + 1
            first = (call, code_name) not in self._warned
            self._warned.add((call, code_name))
            if code == _FUNCTION_NOT_FOUND:
                self._missing_functions.add(call)
        if sticky:
            log.log(
                logging.WARNING if first else logging.DEBUG,
                "NVML %s failed with %s; not called again on that device until NVML is re-initialised%s",
                call,
                code_name,
                _PRIVILEGE_HINT if code == _NO_PERMISSION else "",
            )
            return _MISSING
        if code == _FUNCTION_NOT_FOUND:
            log.warning("NVML function %s is not in this driver (or binding); it is not called again", call)
            return _MISSING
        if code in _LOST_CODES:
            if code in _REINIT_CODES:
                self._needs_reinit = True
            if first:
                what = "NVML re-initialised next cycle" if code in _REINIT_CODES else "that GPU marked down"
                log.error("NVML %s failed with %s; %s", call, code_name, what)
            raise GpuLost(call, code_name)
        log.log(logging.WARNING if first else logging.DEBUG, "NVML %s failed with %s", call, code_name)
        return _MISSING

    # -- lifecycle ------------------------------------------------------------------------------------

    @property
    def needs_init(self) -> bool:
        """True before the first successful init and after a call reported a lost GPU or driver."""
        return not self._initialised or self._needs_reinit

    @property
    def generation(self) -> int:
        """Incremented on every successful (re-)initialisation; handles from older generations are void."""
        return self._generation

    def init(self) -> None:
        """Initialise NVML, shutting down a previous session first. Raises :class:`NvmlUnavailable`."""
        if self._initialised:
            self.shutdown()
        try:
            self._lib.nvmlInit()
        except pynvml.NVMLError as exc:
            code_name = _ERROR_NAMES.get(exc.value, str(exc.value))
            with self._lock:
                self._errors[("nvmlInit", code_name)] = self._errors.get(("nvmlInit", code_name), 0) + 1
            raise NvmlUnavailable(f"nvmlInit: {code_name}{_INIT_HINTS.get(exc.value, '')}") from exc
        self._initialised = True
        self._needs_reinit = False
        self._generation += 1

    def shutdown(self) -> None:
        """Free per-session resources and shut NVML down; errors are irrelevant at this point."""
        for sample in [*self._gpm_previous.values(), *self._gpm_spare.values()]:
            self._quiet("nvmlGpmSampleFree", sample)
        self._gpm_previous.clear()
        self._gpm_spare.clear()
        self._gpm_parent.clear()
        self._gpm_supported.clear()
        self._mig_profiles.clear()
        self._sticky.clear()
        self._last_failure.clear()
        self._capabilities.clear()
        self._probed.clear()
        self._without_mig.clear()
        with self._lock:
            event_sets, self._event_sets = list(self._event_sets.values()), {}
        for handle in event_sets:
            self._quiet("nvmlEventSetFree", handle)
        if self._initialised:
            self._quiet("nvmlShutdown")
        self._initialised = False

    def _quiet(self, name: str, *args: Any) -> None:
        try:
            getattr(self._lib, name)(*args)
        except pynvml.NVMLError as exc:
            log.debug("NVML %s during cleanup failed with %s", name, _ERROR_NAMES.get(exc.value, exc.value))

    def error_counts(self) -> dict[tuple[str, str], int]:
        """Errors so far by (NVML function, NVML error code name), excluding NOT_SUPPORTED."""
        with self._lock:
            return dict(self._errors)

    # -- capabilities ---------------------------------------------------------------------------------

    def _note(self, handle: Handle, name: str, available: bool, failed_call: str | None) -> None:
        """Record whether ``handle`` offers capability ``name``. ``failed_call`` names the call whose
        failure said it does not; a passing failure (not one of _SETTLED) leaves what was known."""
        device = _device_key((handle,))
        code = ""
        if not available and failed_call is not None:
            missing = failed_call in self._missing_functions
            code = "FUNCTION_NOT_FOUND" if missing else self._last_failure.get((device, failed_call), "")
            if code not in _SETTLED:
                return
        self._capabilities.setdefault(device, {})[name] = Capability(available, code)

    def capabilities(self, handle: Handle) -> Capabilities:
        """The capabilities of physical GPU ``handle`` as this session's calls answered them (see
        :mod:`exporter.capabilities`). Per-process utilization, read only for shared GPUs, is asked
        once where nothing has read it yet."""
        device = _device_key((handle,))
        if device not in self._probed and cap.PROCESS_UTILIZATION not in self._capabilities.get(device, {}):
            # Once a session, whatever the answer: a passing failure repeated every cycle would be
            # counted every cycle, for a call the GPU's readings do not need.
            self._probed.add(device)
            self.process_utilization(handle, 0)
        return dict(self._capabilities.get(device, {}))

    # -- inventory ------------------------------------------------------------------------------------

    def driver_version(self) -> str | None:
        """Kernel driver version. nvidia-smi: ``driver_version``."""
        version = self._call("nvmlSystemGetDriverVersion")
        return None if version is _MISSING else _text(version)

    def device_count(self) -> int:
        """Number of physical GPUs NVML can see. nvidia-smi: ``count``."""
        count = self._call("nvmlDeviceGetCount")
        if count is _MISSING:
            raise NvmlUnavailable("nvmlDeviceGetCount returned no count")
        return int(count)

    def handle(self, index: int) -> Handle | None:
        """The handle of GPU ``index``; raises :class:`GpuLost` for a GPU that fell off the bus."""
        handle = self._call("nvmlDeviceGetHandleByIndex", index)
        return None if handle is _MISSING else handle

    def identity(self, index: int, handle: Handle) -> DeviceIdentity | None:
        uuid = self._call("nvmlDeviceGetUUID", handle)
        if uuid is _MISSING:
            return None
        name = self._call("nvmlDeviceGetName", handle)
        pci = self._call("nvmlDeviceGetPciInfo", handle)
        return DeviceIdentity(
            gpu_index=index,
            uuid=_text(uuid),
            name="" if name is _MISSING else _text(name),
            pci_bus_id="" if pci is _MISSING else _text(pci.busId),
        )

    # -- per-device readings --------------------------------------------------------------------------

    def utilization(self, handle: Handle) -> UtilizationRates | None:
        rates = self._call("nvmlDeviceGetUtilizationRates", handle)
        return None if rates is _MISSING else UtilizationRates(int(rates.gpu), int(rates.memory))

    def memory(self, handle: Handle) -> MemoryInfo | None:
        """Frame-buffer memory from the v2 call, whose ``used`` leaves out what the driver reserves (as
        DCGM since R510 and nvidia-smi report it); from v1, which counts the reserved part as used,
        where the driver lacks v2 (the binding calls ``nvmlDeviceGetMemoryInfo_v2`` for
        ``version=nvmlMemory_v2``)."""
        v2 = "nvmlDeviceGetMemoryInfo_v2"
        if v2 not in self._missing_functions:
            info = self._call(
                "nvmlDeviceGetMemoryInfo",
                handle,
                version=pynvml.nvmlMemory_v2,
                label=v2,
                empty_on=_NO_SUCH_VERSION,
            )
            if info is _EMPTY:
                with self._lock:
                    self._missing_functions.add(v2)
                log.info("NVML %s is not in this driver; memory is read through v1", v2)
            elif info is not _MISSING:
                return MemoryInfo(int(info.total), int(info.used), int(info.free), int(info.reserved))
        info = self._call("nvmlDeviceGetMemoryInfo", handle)
        return None if info is _MISSING else MemoryInfo(int(info.total), int(info.used), int(info.free))

    def temperature_c(self, handle: Handle) -> int | None:
        """GPU core temperature, °C. nvidia-smi: ``temperature.gpu``."""
        value = self._call("nvmlDeviceGetTemperature", handle, pynvml.NVML_TEMPERATURE_GPU)
        return None if value is _MISSING else int(value)

    def clocks(self, handle: Handle) -> Clocks:
        sm = self._call("nvmlDeviceGetClockInfo", handle, pynvml.NVML_CLOCK_SM)
        mem = self._call("nvmlDeviceGetClockInfo", handle, pynvml.NVML_CLOCK_MEM)
        return Clocks(None if sm is _MISSING else int(sm), None if mem is _MISSING else int(mem))

    def encoder_percent(self, handle: Handle) -> int | None:
        """Video encoder utilization, %. nvidia-smi: ``utilization.encoder``."""
        value = self._call("nvmlDeviceGetEncoderUtilization", handle)
        return None if value is _MISSING else int(value[0])

    def decoder_percent(self, handle: Handle) -> int | None:
        """Video decoder utilization, %. nvidia-smi: ``utilization.decoder``."""
        value = self._call("nvmlDeviceGetDecoderUtilization", handle)
        return None if value is _MISSING else int(value[0])

    def clock_event_reasons(self, handle: Handle) -> int | None:
        """Bitmask of why the clocks are below their maximum, the value dcgm-exporter exports as
        ``DCGM_FI_DEV_CLOCK_THROTTLE_REASONS`` (0x1 idle, 0x4 software power cap, 0x8 hardware slowdown,
        0x20 / 0x40 software / hardware thermal slowdown, 0x80 hardware power brake, ...).

        nvidia-smi: ``clocks_event_reasons.active`` (``clocks_throttle_reasons.active`` before driver
        535). Drivers older than 535 lack ``nvmlDeviceGetCurrentClocksEventReasons``; the older name of
        the same call is used there.
        """
        value = self._call("nvmlDeviceGetCurrentClocksEventReasons", handle)
        if value is _MISSING and "nvmlDeviceGetCurrentClocksEventReasons" in self._missing_functions:
            value = self._call("nvmlDeviceGetCurrentClocksThrottleReasons", handle)
        return None if value is _MISSING else int(value)

    def _violation_ns(self, handle: Handle, policy: int) -> float | None:
        """``nvmlDeviceGetViolationStatus``: ``violationTime`` is in nanoseconds (``referenceTime``, the
        CPU timestamp of the reading in microseconds, is not needed)."""
        status = self._call("nvmlDeviceGetViolationStatus", handle, policy)
        return None if status is _MISSING else float(status.violationTime)

    def power_mw(self, handle: Handle) -> float | None:
        """Board power in milliwatts, as DCGM reads DCGM_FI_DEV_POWER_USAGE (averaged over about a
        second on recent GPUs). nvidia-smi: ``power.draw`` (``power.draw.average`` on newer drivers)."""
        usage = self._call("nvmlDeviceGetPowerUsage", handle)
        return None if usage is _MISSING else float(usage)

    def fields(self, handle: Handle, slow: bool = True) -> FieldReadings:
        """Instant power, energy, PCIe replays, the power / thermal violation counters, memory
        temperature, ECC, row remapping and NVLink traffic in one call; each violation counter falls
        back to nvmlDeviceGetViolationStatus. Without ``slow``, the :data:`SLOW_FIELDS` are not asked
        (None in the answer)."""
        found: dict[int, float] = {}
        values = self._call("nvmlDeviceGetFieldValues", handle, list(FIELD_IDS if slow else _FAST_FIELD_IDS))
        if values is not _MISSING:
            device = _device_key((handle,))
            for value in values:
                if value.nvmlReturn == _SUCCESS:
                    number = _union_value(int(value.valueType), value.value)
                    if number is not None:
                        found[int(value.fieldId)] = number
                else:
                    self._failed(_slot(int(value.fieldId)), int(value.nvmlReturn), device)
            for name, field in ((cap.ECC, FIELD_ECC_SBE_VOL), (cap.NVLINK, FIELD_NVLINK_TX)):
                self._note(handle, name, field in found, None if field in found else _slot(field))
        violations = {
            field: found[field] if field in found else self._violation_ns(handle, policy)
            for field, policy in _VIOLATION_POLICIES.items()
            if slow or field not in SLOW_FIELDS
        }
        tx, rx = found.get(FIELD_NVLINK_TX), found.get(FIELD_NVLINK_RX)
        return FieldReadings(
            power_instant_mw=found.get(FIELD_POWER_INSTANT),
            energy_mj=found.get(FIELD_TOTAL_ENERGY),
            pcie_replays=found.get(FIELD_PCIE_REPLAY),
            power_violation_ns=violations[FIELD_POWER_VIOLATION],
            thermal_violation_ns=violations.get(FIELD_THERMAL_VIOLATION),
            memory_temp_c=found.get(FIELD_MEMORY_TEMP),
            ecc_sbe_volatile=found.get(FIELD_ECC_SBE_VOL),
            ecc_dbe_volatile=found.get(FIELD_ECC_DBE_VOL),
            ecc_sbe_aggregate=found.get(FIELD_ECC_SBE_AGG),
            ecc_dbe_aggregate=found.get(FIELD_ECC_DBE_AGG),
            remapped_correctable=found.get(FIELD_REMAPPED_COR),
            remapped_uncorrectable=found.get(FIELD_REMAPPED_UNC),
            remap_failure=found.get(FIELD_REMAPPED_FAILURE),
            nvlink_kib=None if tx is None or rx is None else tx + rx,
        )

    def utilization_samples(self, handle: Handle, since_us: int) -> UtilizationSamples | None:
        """Samples newer than ``since_us`` (no percents when none are new), ``None`` where unsupported.

        The driver answers NOT_FOUND both for "nothing newer" and, as reported, for a GPU that sat
        idle (no samples recorded at all); telling the two apart is the caller's job (the reader
        checks the utilization gauge)."""
        kind = pynvml.NVML_GPU_UTILIZATION_SAMPLES
        result = self._call("nvmlDeviceGetSamples", handle, kind, since_us, empty_on=_NOTHING_NEW)
        self._note(handle, cap.SAMPLES, result is not _MISSING, "nvmlDeviceGetSamples")
        if result is _MISSING:
            return None
        if result is _EMPTY:
            return UtilizationSamples(())
        value_type, samples = result
        member = _VALUE_MEMBERS.get(int(value_type))
        if not samples:
            return UtilizationSamples(())
        if member is None or not hasattr(samples[0].sampleValue, member):
            return None  # a value this binding cannot read: unknown, never "nothing new" (idle)
        stamps, percents = [], []
        for sample in samples:  # up to a few hundred per GPU and cycle: the member is looked up once
            stamp = int(sample.timeStamp)
            percent = float(getattr(sample.sampleValue, member))
            if stamp > since_us and math.isfinite(percent):
                stamps.append(stamp)
                percents.append(round(percent))
        if not stamps:
            return UtilizationSamples(())
        # NVML's buffer is a ring: samples need not come out in time order.
        return UtilizationSamples(tuple(percents), min(stamps), max(stamps))

    def _sized(self, name: str, *args: Any, empty_on: frozenset[int] = frozenset()) -> Any:
        """A call the binding makes twice (size, then read): retried when a process started in
        between and the second call found the buffer too small, as DCGM retries it."""
        if name in self._missing_functions:
            return _MISSING
        if self._sticky and (_device_key(args), name) in self._sticky:
            return _MISSING
        function = getattr(self._lib, name, None)
        if function is None:
            return self._failed(name, _FUNCTION_NOT_FOUND)
        for attempt in range(_SIZE_RETRIES):
            try:
                return function(*args)
            except pynvml.NVMLError as exc:
                if exc.value == _INSUFFICIENT_SIZE and attempt + 1 < _SIZE_RETRIES:
                    continue
                # The binding raises NVMLError(SUCCESS) from nvmlDeviceGetProcessUtilization when its
                # size query succeeds with nothing to read: that is an empty answer, not a failure.
                if exc.value in empty_on or exc.value == _SUCCESS:
                    return _EMPTY
                return self._failed(name, exc.value, _device_key(args))
        return _MISSING  # not reached: the last attempt returns or fails above

    def processes(self, handle: Handle) -> tuple[ProcessMemory, ...] | None:
        """Compute processes on the device (or MIG instance) and the memory each holds."""
        procs = self._sized("nvmlDeviceGetComputeRunningProcesses", handle)
        if procs is _MISSING:
            return None
        if procs is _EMPTY:
            return ()
        out = []
        for proc in procs:
            used = proc.usedGpuMemory
            known = used is not None and used != _VALUE_NOT_AVAILABLE
            out.append(ProcessMemory(int(proc.pid), int(used) if known else None))
        return tuple(out)

    def process_utilization(self, handle: Handle, since_us: int) -> tuple[ProcessUtilization, ...] | None:
        """Per-process utilization samples newer than ``since_us``; ``()`` when there are none."""
        samples = self._sized("nvmlDeviceGetProcessUtilization", handle, since_us, empty_on=_NOTHING_NEW)
        self._note(
            handle, cap.PROCESS_UTILIZATION, samples is not _MISSING, "nvmlDeviceGetProcessUtilization"
        )
        if samples is _MISSING:
            return None
        if samples is _EMPTY:
            return ()
        return tuple(
            ProcessUtilization(int(s.pid), int(s.timeStamp), int(s.smUtil), int(s.memUtil))
            for s in samples
            if int(s.timeStamp) > since_us
        )

    # -- MIG ------------------------------------------------------------------------------------------

    def mig_instances(self, parent: Handle) -> tuple[MigInstance, ...]:
        """MIG devices of ``parent``; empty when MIG is off or unsupported."""
        device = _device_key((parent,))
        if device in self._without_mig:
            return ()
        mode = self._call("nvmlDeviceGetMigMode", parent)
        if mode is _MISSING and self._last_failure.get((device, "nvmlDeviceGetMigMode")) == "NOT_SUPPORTED":
            self._without_mig.add(device)
        enabled = mode is not _MISSING and int(mode[0]) == pynvml.NVML_DEVICE_MIG_ENABLE
        self._note(parent, cap.MIG, enabled, "nvmlDeviceGetMigMode" if mode is _MISSING else None)
        if not enabled:
            return ()
        slots = self._call("nvmlDeviceGetMaxMigDeviceCount", parent)
        if slots is _MISSING:
            return ()
        instances = []
        for slot in range(int(slots)):
            mig = self._call("nvmlDeviceGetMigDeviceHandleByIndex", parent, slot, empty_on=_NOTHING_NEW)
            if mig is _MISSING or mig is _EMPTY:
                continue  # NOT_FOUND: an empty slot
            uuid = self._call("nvmlDeviceGetUUID", mig)
            gi = self._call("nvmlDeviceGetGpuInstanceId", mig)
            if uuid is _MISSING or gi is _MISSING:
                continue
            ci = self._call("nvmlDeviceGetComputeInstanceId", mig)
            instances.append(
                MigInstance(
                    handle=mig,
                    uuid=_text(uuid),
                    gpu_instance_id=int(gi),
                    compute_instance_id=None if ci is _MISSING else int(ci),
                    profile=self._mig_profile(parent, mig, int(gi)),
                    slot=slot,
                )
            )
        return tuple(instances)

    def _mig_profile(self, parent: Handle, mig: Handle, gpu_instance_id: int) -> str:
        """Profile name such as ``1g.10gb``, as dcgm-exporter's ``GPU_I_PROFILE`` shows it."""
        instance = self._call("nvmlDeviceGetGpuInstanceById", parent, gpu_instance_id)
        if instance is not _MISSING:
            info = self._call("nvmlGpuInstanceGetInfo", instance)
            if info is not _MISSING:
                name = self._profile_names(parent).get(int(info.profileId))
                if name:
                    return name
        # Looking GPU instances up can need privileges; the MIG device's own attributes cannot.
        attributes = self._call("nvmlDeviceGetAttributes", mig)
        if attributes is _MISSING:
            return ""
        gib = math.ceil(int(attributes.memorySizeMB) / 1024)
        return f"{int(attributes.gpuInstanceSliceCount)}g.{gib}gb"

    def _profile_names(self, parent: Handle) -> dict[int, str]:
        key = _handle_key(parent)
        names = self._mig_profiles.get(key)
        if names is None:
            names = {}
            for profile in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
                info = self._call(
                    "nvmlDeviceGetGpuInstanceProfileInfo",
                    parent,
                    profile,
                    empty_on=_NO_SUCH_PROFILE,
                )
                if info is not _MISSING and info is not _EMPTY:
                    names[int(info.id)] = _text(info.name).removeprefix("MIG ").strip()
            self._mig_profiles[key] = names
        return names

    # -- GPM profiling --------------------------------------------------------------------------------

    def gpm(self, handle: Handle, key: Hashable, gpu_instance_id: int | None = None) -> GpmReading | None:
        """Profiling ratios since the previous call with the same ``key``; ``None`` on the first call or
        where GPM is unsupported. ``handle`` is the physical GPU; pass ``gpu_instance_id`` for a MIG
        instance."""
        parent_key = _handle_key(handle)
        supported = self._gpm_supported.get(parent_key)
        if supported is None:
            support = self._call("nvmlGpmQueryDeviceSupport", handle)
            supported = support is not _MISSING and bool(support.isSupportedDevice)
            self._gpm_supported[parent_key] = supported
            self._note(
                handle, cap.GPM, supported, "nvmlGpmQueryDeviceSupport" if support is _MISSING else None
            )
        if not supported:
            return None
        sample = self._gpm_spare.pop(key, None)
        if sample is None:
            sample = self._call("nvmlGpmSampleAlloc")
            if sample is _MISSING:
                return None
        self._gpm_parent[key] = parent_key
        try:
            if gpu_instance_id is None:
                taken = self._call("nvmlGpmSampleGet", handle, sample)
            else:
                taken = self._call("nvmlGpmMigSampleGet", handle, gpu_instance_id, sample)
        except GpuLost:
            self._gpm_spare[key] = sample  # freed with the others by forget_gpm()
            raise
        if taken is _MISSING:
            self._gpm_spare[key] = sample
            return None
        previous = self._gpm_previous.get(key)
        self._gpm_previous[key] = sample
        if previous is None:
            return None
        try:
            return self._gpm_metrics(previous, sample)
        finally:
            self._gpm_spare[key] = previous

    def forget_gpm(self, handle: Handle, keep: Collection[Hashable] = ()) -> None:
        """Drop the GPM samples of a GPU that was marked down (and of its MIG instances): the next
        ratios start afresh once it is back, rather than spanning the outage. With ``keep``, only the
        keys not in it: the MIG instances a reconfiguration removed."""
        parent_key = _handle_key(handle)
        for key in [k for k, parent in self._gpm_parent.items() if parent == parent_key and k not in keep]:
            del self._gpm_parent[key]
            for samples in (self._gpm_previous, self._gpm_spare):
                sample = samples.pop(key, None)
                if sample is not None:
                    self._quiet("nvmlGpmSampleFree", sample)

    def _gpm_metrics(self, first: Any, second: Any) -> GpmReading | None:
        request = self._lib.c_nvmlGpmMetricsGet_t()
        request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(GPM_METRIC_IDS)
        request.sample1 = first
        request.sample2 = second
        for slot, metric_id in enumerate(GPM_METRIC_IDS):
            request.metrics[slot].metricId = metric_id
        result = self._call("nvmlGpmMetricsGet", request)
        if result is _MISSING:
            return None
        values: list[float | None] = []
        for slot in range(len(GPM_METRIC_IDS)):
            metric = result.metrics[slot]
            if metric.nvmlReturn != _SUCCESS or not math.isfinite(metric.value):
                values.append(None)
            elif slot < _GPM_RATIOS:  # percent → DCGM's 0-1 ratio
                values.append(min(max(float(metric.value) / 100.0, 0.0), 1.0))
            else:  # MiB/s → DCGM's bytes per second, whole bytes as DCGM stores them (an int64 field)
                values.append(float(int(max(float(metric.value), 0.0) * _MIB)))
        return GpmReading(*values)

    # -- XID events -----------------------------------------------------------------------------------

    def xid_event_set(self, devices: Iterable[tuple[Handle, str]]) -> XidEventSet | None:
        """An event set registered for XID critical errors on every device that supports them."""
        event_set = self._call("nvmlEventSetCreate")
        if event_set is _MISSING:
            return None
        with self._lock:
            self._event_sets[id(event_set)] = event_set
        registered: dict[Hashable, str] = {}
        for handle, uuid in devices:
            try:
                done = self._call("nvmlDeviceRegisterEvents", handle, _XID_EVENTS, event_set)
            except GpuLost:
                continue
            if done is not _MISSING:
                registered[_handle_key(handle)] = uuid
        return XidEventSet(event_set, registered, self._generation)

    def wait_xid(self, event_set: XidEventSet, timeout_ms: int) -> XidEvent | None:
        """The next XID event, or ``None`` after ``timeout_ms`` without one. Raises
        :class:`EventWaitFailed` when the wait itself failed (it returned at once: do not loop on it)."""
        data = self._call("nvmlEventSetWait", event_set.handle, timeout_ms, empty_on=_TIMED_OUT)
        if data is _MISSING:
            raise EventWaitFailed("nvmlEventSetWait failed")
        if data is _EMPTY or not int(data.eventType) & _XID_EVENTS:
            return None
        return XidEvent(event_set.devices.get(_handle_key(data.device)), int(data.eventData))

    def free_event_set(self, event_set: XidEventSet) -> None:
        """Free a set once (a set of an earlier session was freed when that session was shut down)."""
        with self._lock:
            live = self._event_sets.pop(id(event_set.handle), None) is not None
        if live:
            self._quiet("nvmlEventSetFree", event_set.handle)
