"""The NVML binding behind one chokepoint: the only module in the project that imports ``pynvml``.

Every NVML call goes through :meth:`NvmlLibrary.call`, which times it (``call_seconds``: the
driver time operators see as ``gpu_exporter_nvml_seconds_total``) and decides what an error means:

* ``NOT_SUPPORTED`` — the reading does not exist on this GPU: no reading, not counted as an error.
* ``FUNCTION_NOT_FOUND`` — the driver is older than the binding (or the binding older than this code):
  logged once, counted once, and the function is never called again in this process.
* ``GPU_IS_LOST`` — :class:`GpuLost` is raised so the caller marks that GPU (only) down.
* ``UNINITIALIZED``, ``DRIVER_NOT_LOADED`` — :class:`GpuLost` is raised too, and :attr:`needs_init`
  asks for NVML to be re-initialised on the next cycle: no call can succeed before that.
* ``NO_PERMISSION``, ``OPERATING_SYSTEM`` (blocked by the container's device rules),
  ``ARGUMENT_VERSION_MISMATCH``, ``DEPRECATED`` — answers that cannot change while NVML stays
  initialised: the (device, call) is not asked again until NVML is re-initialised, and is counted and
  logged once, so a call the container lacks the privileges for does not count an error every cycle.
* anything else — counted, logged once per (call, code), and the reading is left out.

The constants the NVML layer needs (error codes, field ids, GPM metrics, event types) are read from
the real binding here; the functions come from ``library``, so a fake with the same calls
(``simulation.fake_nvml``) stands in for the driver while everything above runs as in production.
"""

from __future__ import annotations

import ctypes
import logging
import threading
import time
from collections.abc import Callable, Hashable
from typing import Any, Final

import pynvml

from common.errors import ExitCode, GpuToolError

log = logging.getLogger("exporter.nvml")

ERROR_NAMES: Final[dict[int, str]] = {
    getattr(pynvml, name): name.removeprefix("NVML_ERROR_")
    for name in dir(pynvml)
    if name.startswith("NVML_ERROR_")
}
SUCCESS: Final[int] = pynvml.NVML_SUCCESS
NOT_SUPPORTED: Final[int] = pynvml.NVML_ERROR_NOT_SUPPORTED
FUNCTION_NOT_FOUND: Final[int] = pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
#: "Nothing newer than the timestamp" (samples) and "empty slot" (MIG devices).
NOTHING_NEW: Final = frozenset({pynvml.NVML_ERROR_NOT_FOUND})
TIMED_OUT: Final = frozenset({pynvml.NVML_ERROR_TIMEOUT})
#: Profile indices a GPU model does not offer.
NO_SUCH_PROFILE: Final = frozenset({pynvml.NVML_ERROR_INVALID_ARGUMENT, pynvml.NVML_ERROR_NOT_FOUND})
#: Answers meaning "this version of the call is not in this driver": fall back to the older one.
NO_SUCH_VERSION: Final = frozenset(
    {pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH}
)
#: Codes after which no call on NVML as a whole can succeed until it is re-initialised.
_REINIT_CODES: Final = frozenset({pynvml.NVML_ERROR_UNINITIALIZED, pynvml.NVML_ERROR_DRIVER_NOT_LOADED})
#: Codes that mark the device down: the ones above, and a GPU that fell off the bus (that GPU only).
_LOST_CODES: Final = _REINIT_CODES | {pynvml.NVML_ERROR_GPU_IS_LOST}
#: The buffer was too small: a process started between the binding's size query and its read.
_INSUFFICIENT_SIZE: Final = pynvml.NVML_ERROR_INSUFFICIENT_SIZE
_SIZE_RETRIES: Final = 3
_NO_PERMISSION: Final = pynvml.NVML_ERROR_NO_PERMISSION
#: Answers that hold until NVML is re-initialised (privileges, device cgroup rules, versions).
_STICKY_CODES: Final = frozenset(
    {
        _NO_PERMISSION,
        pynvml.NVML_ERROR_OPERATING_SYSTEM,
        pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
        pynvml.NVML_ERROR_DEPRECATED,
    }
)
#: Failures that settle whether a GPU offers a capability; any other is passing and changes nothing.
SETTLED: Final = frozenset(ERROR_NAMES[code] for code in (NOT_SUPPORTED, FUNCTION_NOT_FOUND, *_STICKY_CODES))
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
#: Blocks on purpose (the XID thread's wait for an event): time asleep in it is not driver work.
_UNTIMED: Final = frozenset({"nvmlEventSetWait"})

# -- constants of the calls the NVML layer makes -----------------------------------------------------
XID_EVENTS: Final[int] = pynvml.nvmlEventTypeXidCriticalError
#: GPU or compute instances created or destroyed (DCGM re-reads a GPU's MIG layout on it).
MIG_CONFIG_EVENTS: Final[int] = pynvml.nvmlEventMigConfigChange
GPU_UTILIZATION_SAMPLES: Final[int] = pynvml.NVML_GPU_UTILIZATION_SAMPLES
TEMPERATURE_GPU: Final[int] = pynvml.NVML_TEMPERATURE_GPU
CLOCK_SM: Final[int] = pynvml.NVML_CLOCK_SM
CLOCK_MEM: Final[int] = pynvml.NVML_CLOCK_MEM
MIG_ENABLED: Final[int] = pynvml.NVML_DEVICE_MIG_ENABLE
GPU_INSTANCE_PROFILE_COUNT: Final[int] = pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT
MEMORY_V2: Final[int] = pynvml.nvmlMemory_v2
GPM_METRICS_GET_VERSION: Final[int] = pynvml.NVML_GPM_METRICS_GET_VERSION
PERF_POLICY_POWER: Final[int] = pynvml.NVML_PERF_POLICY_POWER
PERF_POLICY_THERMAL: Final[int] = pynvml.NVML_PERF_POLICY_THERMAL

FIELD_POWER_INSTANT: Final[int] = pynvml.NVML_FI_DEV_POWER_INSTANT
FIELD_TOTAL_ENERGY: Final[int] = pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION
FIELD_PCIE_REPLAY: Final[int] = pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER
#: The perf-policy counters DCGM reads for DCGM_FI_DEV_POWER_VIOLATION / _THERMAL_VIOLATION.
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

#: GPM metric ids, in the order of :class:`exporter.readings.GpmReading`'s fields: five percentages,
#: then PCIe MiB/s.
GPM_METRIC_IDS: Final[tuple[int, ...]] = (
    pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL,
    pynvml.NVML_GPM_METRIC_SM_UTIL,
    pynvml.NVML_GPM_METRIC_SM_OCCUPANCY,
    pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL,
    pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL,
    pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC,
    pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC,
)

#: nvml.h's NVML_VALUE_TYPE_UNSIGNED_SHORT. The binding names it from nvidia-ml-py 12.560.30 and its
#: value union has ``usVal`` from 12.570.86; with an older binding such a reading is left out.
_VALUE_TYPE_UNSIGNED_SHORT: Final[int] = getattr(pynvml, "NVML_VALUE_TYPE_UNSIGNED_SHORT", 6)
VALUE_TYPE_DOUBLE: Final[int] = pynvml.NVML_VALUE_TYPE_DOUBLE
#: The member of NVML's value union that holds each value type.
VALUE_MEMBERS: Final[dict[int, str]] = {
    VALUE_TYPE_DOUBLE: "dVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
    _VALUE_TYPE_UNSIGNED_SHORT: "usVal",
}


class _Missing:
    """Sentinel type: the call produced no reading."""


class _Empty:
    """Sentinel type: the call succeeded in saying "nothing new" (e.g. no samples since a timestamp)."""


MISSING: Final = _Missing()
EMPTY: Final = _Empty()


class NvmlError(GpuToolError):
    """Base class of the NVML layer's own errors."""


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


def handle_key(handle: Any) -> Hashable:
    """A key that is equal for two handles to the same device (ctypes pointers compare by identity)."""
    if isinstance(handle, ctypes._Pointer):
        address: Hashable = ctypes.cast(handle, ctypes.c_void_p).value
        return address
    fake: Hashable = handle
    return fake


def device_key(args: tuple[Any, ...]) -> Hashable:
    """The device (or GPU instance, or index) a call is about: its first argument where that compares by
    value; ``None`` for calls on no device (an event set, a GPM request)."""
    if not args:
        return None
    first = args[0]
    if isinstance(first, ctypes._Pointer):
        return handle_key(first)
    if type(first).__hash__ in (None, object.__hash__):  # unhashable, or equal only to itself
        return None
    key: Hashable = first
    return key


class NvmlLibrary:
    """One NVML binding (``pynvml`` in production, a fake in simulation and tests), its session and the
    bookkeeping of what its calls answered and cost. Thread-safe: the XID thread shares it."""

    def __init__(self, library: Any = pynvml, *, timer: Callable[[], float] = time.perf_counter) -> None:
        self.binding = library
        self._timer = timer
        self._lock = threading.Lock()
        self._errors: dict[tuple[str, str], int] = {}
        self._seconds: dict[str, float] = {}
        self._missing_functions: set[str] = set()
        self._warned: set[tuple[str, str]] = set()
        self._initialised = False
        self._needs_reinit = False
        self.generation = 0  # incremented on every successful (re-)initialisation
        # (device, call) → NVML code name: answers that hold for the session (_STICKY_CODES), and the
        # latest failure of each, which names why a capability is missing.
        self._sticky: dict[tuple[Hashable, str], str] = {}
        self._last_failure: dict[tuple[Hashable, str], str] = {}

    # -- calls ----------------------------------------------------------------------------------------

    def call(
        self,
        name: str,
        *args: Any,
        empty_on: frozenset[int] = frozenset(),
        label: str = "",
        keywords: dict[str, Any] | None = None,
    ) -> Any:
        """``library.<name>(*args, **keywords)``; ``label`` names the call in errors, timings and the set
        of missing functions where it is not ``name`` (a versioned variant of a binding function, e.g.
        ``…MemoryInfo_v2``, which the binding reaches through ``version=``).

        Returns :data:`MISSING` where there is no reading and :data:`EMPTY` for the codes in
        ``empty_on``, which that call uses to say "nothing new". Every NVML call takes this path: it
        builds no dict per call, which would cost more than the call to a cheap getter."""
        label = label or name
        if label in self._missing_functions or (self._sticky and (device_key(args), label) in self._sticky):
            return MISSING
        function = getattr(self.binding, name, None)
        if function is None:  # a binding older than this code: as if the driver lacked the function
            return self.failed(label, FUNCTION_NOT_FOUND)
        timer = self._timer
        started = timer()
        try:
            return function(*args, **keywords) if keywords else function(*args)
        except pynvml.NVMLError as exc:
            if exc.value in empty_on:
                return EMPTY
            return self.failed(label, exc.value, device_key(args))
        finally:
            if label not in _UNTIMED:
                # No lock: each call is made by one thread at a time (the XID thread makes only the
                # event-set calls, and is paused while NVML is re-initialised), and a dict's item
                # update and copy are atomic under the GIL.
                seconds = self._seconds
                seconds[label] = seconds.get(label, 0.0) + timer() - started

    def sized(self, name: str, *args: Any, empty_on: frozenset[int] = frozenset()) -> Any:
        """A call the binding makes twice (size, then read): retried when a process started in
        between and the second call found the buffer too small, as DCGM retries it."""
        if name in self._missing_functions or (self._sticky and (device_key(args), name) in self._sticky):
            return MISSING
        function = getattr(self.binding, name, None)
        if function is None:
            return self.failed(name, FUNCTION_NOT_FOUND)
        started = self._timer()
        try:
            for attempt in range(_SIZE_RETRIES):
                try:
                    return function(*args)
                except pynvml.NVMLError as exc:
                    if exc.value == _INSUFFICIENT_SIZE and attempt + 1 < _SIZE_RETRIES:
                        continue
                    # The binding raises NVMLError(SUCCESS) from nvmlDeviceGetProcessUtilization when
                    # its size query succeeds with nothing to read: an empty answer, not a failure.
                    if exc.value in empty_on or exc.value == SUCCESS:
                        return EMPTY
                    return self.failed(name, exc.value, device_key(args))
            return MISSING  # not reached: the last attempt returns or fails above
        finally:
            self._spent(name, self._timer() - started)

    def _spent(self, label: str, seconds: float) -> None:
        # No lock: each call is made by one thread at a time (the XID thread makes only the event-set
        # calls, and is paused while the collection thread re-initialises NVML), and a dict's item
        # update and copy are atomic under the GIL.
        self._seconds[label] = self._seconds.get(label, 0.0) + seconds

    def quiet(self, name: str, *args: Any) -> None:
        """A call whose failure is irrelevant (freeing buffers and sets, shutting down)."""
        started = self._timer()
        try:
            getattr(self.binding, name)(*args)
        except pynvml.NVMLError as exc:
            log.debug("NVML %s during cleanup failed with %s", name, ERROR_NAMES.get(exc.value, exc.value))
        finally:
            self._spent(name, self._timer() - started)

    def failed(self, call: str, code: int, device: Hashable = None) -> _Missing:
        """Book a failed call (or a failed slot of a batch call) as the module's docstring says."""
        code_name = ERROR_NAMES.get(code, str(code))
        self._last_failure[(device, call)] = code_name
        if code == NOT_SUPPORTED:
            return MISSING
        # Only a device's call is kept from being asked again: a refused call about the whole system
        # (nvmlDeviceGetCount) would otherwise leave the exporter unready until it restarts.
        sticky = code in _STICKY_CODES and device is not None
        with self._lock:
            if sticky:
                if (device, call) in self._sticky:
                    return MISSING  # a slot of a batch call, which is still made: counted already
                self._sticky[(device, call)] = code_name
            self._errors[(call, code_name)] = self._errors.get((call, code_name), 0) + 1
            first = (call, code_name) not in self._warned
            self._warned.add((call, code_name))
            if code == FUNCTION_NOT_FOUND:
                self._missing_functions.add(call)
        if sticky:
            log.log(
                logging.WARNING if first else logging.DEBUG,
                "NVML %s failed with %s; not called again on that device until NVML is re-initialised%s",
                call,
                code_name,
                _PRIVILEGE_HINT if code == _NO_PERMISSION else "",
            )
            return MISSING
        if code == FUNCTION_NOT_FOUND:
            log.warning("NVML function %s is not in this driver (or binding); it is not called again", call)
            return MISSING
        if code in _LOST_CODES:
            if code in _REINIT_CODES:
                self._needs_reinit = True
            if first:
                what = "NVML re-initialised next cycle" if code in _REINIT_CODES else "that GPU marked down"
                log.error("NVML %s failed with %s; %s", call, code_name, what)
            raise GpuLost(call, code_name)
        log.log(logging.WARNING if first else logging.DEBUG, "NVML %s failed with %s", call, code_name)
        return MISSING

    def mark_missing(self, call: str) -> None:
        """Never call ``call`` again: a versioned variant the driver answered it does not have."""
        with self._lock:
            self._missing_functions.add(call)

    def is_missing(self, call: str) -> bool:
        return call in self._missing_functions

    def last_failure(self, device: Hashable, call: str) -> str:
        """NVML's code name for the latest failure of ``call`` on ``device`` this session ("" if none)."""
        if call in self._missing_functions:
            return "FUNCTION_NOT_FOUND"
        return self._last_failure.get((device, call), "")

    # -- lifecycle ------------------------------------------------------------------------------------

    @property
    def needs_init(self) -> bool:
        """True before the first successful init and after a call reported a lost GPU or driver."""
        return not self._initialised or self._needs_reinit

    @property
    def initialised(self) -> bool:
        return self._initialised

    def init(self) -> None:
        """``nvmlInit``. Raises :class:`NvmlUnavailable` naming NVML's code and what to check."""
        started = self._timer()
        try:
            self.binding.nvmlInit()
        except pynvml.NVMLError as exc:
            code_name = ERROR_NAMES.get(exc.value, str(exc.value))
            with self._lock:
                self._errors[("nvmlInit", code_name)] = self._errors.get(("nvmlInit", code_name), 0) + 1
            raise NvmlUnavailable(f"nvmlInit: {code_name}{_INIT_HINTS.get(exc.value, '')}") from exc
        finally:
            self._spent("nvmlInit", self._timer() - started)
        self._initialised = True
        self._needs_reinit = False
        self.generation += 1

    def shutdown(self) -> None:
        """``nvmlShutdown``; what this session's answers settled is forgotten with it."""
        self._sticky.clear()
        self._last_failure.clear()
        if self._initialised:
            self.quiet("nvmlShutdown")
        self._initialised = False

    # -- bookkeeping ----------------------------------------------------------------------------------

    def error_counts(self) -> dict[tuple[str, str], int]:
        """Errors so far by (NVML function, NVML error code name), excluding NOT_SUPPORTED."""
        with self._lock:
            return dict(self._errors)

    def call_seconds(self) -> dict[str, float]:
        """Seconds spent in NVML so far by function (the XID thread's blocking event wait excluded)."""
        return dict(self._seconds)
