"""The exporter's NVML: one session of the binding, its GPUs, and its event sets.

Three parts, as a binding is kept apart from the devices it reads:

* :class:`exporter.nvml_library.NvmlLibrary` — the binding behind one chokepoint (the only ``pynvml``
  import): what each NVML error means, what was refused, and the seconds spent in each call;
* :class:`exporter.device.Device` — one physical GPU of the session: its handle, what it refused, its
  GPM buffers and MIG layout;
* :class:`Nvml`, here — the session: (re-)initialisation, the GPUs by index, and the event set the XID
  thread waits on, which also carries MIG reconfiguration events (:class:`MigEvents`), so a GPU's MIG
  layout is read again when it changes instead of every cycle.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Iterable
from typing import Any, Final

from exporter.cadence import Cadences
from exporter.device import Device
from exporter.nvml_library import (
    EMPTY,
    FIELD_ECC_SBE_VOL,
    FIELD_MEMORY_TEMP,
    FIELD_NVLINK_TX,
    GPM_METRIC_IDS,
    MIG_CONFIG_EVENTS,
    MISSING,
    TIMED_OUT,
    XID_EVENTS,
    EventWaitFailed,
    GpuLost,
    NvmlLibrary,
    NvmlUnavailable,
    handle_key,
    nvml_error,
    nvml_error_code,
)
from exporter.readings import Handle, XidEvent, XidEventSet

__all__ = [
    "FIELD_ECC_SBE_VOL",
    "FIELD_MEMORY_TEMP",
    "FIELD_NVLINK_TX",
    "GPM_METRIC_IDS",
    "SLOW_FIELDS_EVERY_S",
    "SLOW_FIELD_CYCLES",
    "Device",
    "EventWaitFailed",
    "GpuLost",
    "MigEvents",
    "Nvml",
    "NvmlUnavailable",
    "XidEvent",
    "XidEventSet",
    "nvml_error",
    "nvml_error_code",
]

#: Collections between two reads of the costly counters (energy, thermal violation, PCIe replays).
SLOW_FIELD_CYCLES: Final = Cadences().slow_fields
SLOW_FIELDS_EVERY_S: Final = 30.0  # at the default 5 s interval


class MigEvents:
    """Which GPUs' MIG layouts NVML will report changes of, and which changed: written by the XID
    thread (registrations, events), read by the collection thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watched: dict[Hashable, int] = {}  # device key → id of the event set that watches it
        self._changed: set[Hashable] = set()

    def watch(self, key: Hashable, event_set: int) -> None:
        """Events for ``key`` now come through ``event_set``. Its layout is read once more: it may have
        changed between the last read and the registration."""
        with self._lock:
            self._watched[key] = event_set
            self._changed.add(key)

    def unwatch(self, event_set: int) -> None:
        with self._lock:
            self._watched = {k: s for k, s in self._watched.items() if s != event_set}

    def changed(self, key: Hashable) -> None:
        with self._lock:
            self._changed.add(key)

    def watched(self, key: Hashable) -> bool:
        return key in self._watched

    def take(self, key: Hashable) -> bool:
        """Whether ``key``'s layout changed since the last call (and forget that it did)."""
        if key not in self._changed:  # the common case, without the lock
            return False
        with self._lock:
            self._changed.discard(key)
        return True

    def clear(self) -> None:
        with self._lock:
            self._watched.clear()
            self._changed.clear()


class Nvml:
    """The NVML session shared by the collection loop and the XID thread. ``library`` is the binding
    (``pynvml`` when omitted; a fake in simulation and tests)."""

    def __init__(self, library: Any = None, *, timer: Callable[[], float] = time.perf_counter) -> None:
        self.library = NvmlLibrary(timer=timer) if library is None else NvmlLibrary(library, timer=timer)
        self.mig_events = MigEvents()
        self._devices: dict[int, Device] = {}
        self._lock = threading.Lock()
        # Event sets of this session not yet freed, by id. nvml.h does not say nvmlShutdown frees them
        # and nvmlEventSetFree answers UNINITIALIZED after it, so shutdown() frees them first.
        self._event_sets: dict[int, Any] = {}

    # -- lifecycle ----------------------------------------------------------------------------------

    @property
    def needs_init(self) -> bool:
        """True before the first successful init and after a call reported a lost GPU or driver."""
        return self.library.needs_init

    @property
    def generation(self) -> int:
        """Incremented on every successful (re-)initialisation; handles from older generations are void."""
        return self.library.generation

    def init(self) -> None:
        """Initialise NVML, shutting down a previous session first. Raises :class:`NvmlUnavailable`."""
        if self.library.initialised:
            self.shutdown()
        self.library.init()

    def shutdown(self) -> None:
        """Free per-session resources and shut NVML down; errors are irrelevant at this point."""
        for device in self._devices.values():
            device.close()
        self._devices.clear()
        self.mig_events.clear()
        with self._lock:
            event_sets, self._event_sets = list(self._event_sets.values()), {}
        for handle in event_sets:
            self.library.quiet("nvmlEventSetFree", handle)
        self.library.shutdown()

    def error_counts(self) -> dict[tuple[str, str], int]:
        """Errors so far by (NVML function, NVML error code name), excluding NOT_SUPPORTED."""
        return self.library.error_counts()

    def call_seconds(self) -> dict[str, float]:
        """Seconds spent in NVML so far, by function."""
        return self.library.call_seconds()

    # -- inventory ----------------------------------------------------------------------------------

    def driver_version(self) -> str | None:
        """Kernel driver version. nvidia-smi: ``driver_version``."""
        version = self.library.call("nvmlSystemGetDriverVersion")
        if version is MISSING:
            return None
        return version.decode(errors="replace") if isinstance(version, bytes) else str(version)

    def device_count(self) -> int:
        """Number of physical GPUs NVML can see. nvidia-smi: ``count``."""
        count = self.library.call("nvmlDeviceGetCount")
        if count is MISSING:
            raise NvmlUnavailable("nvmlDeviceGetCount returned no count")
        return int(count)

    def device(self, index: int) -> Device | None:
        """GPU ``index`` of this session; its handle is looked up once per session, as DCGM keeps its
        GPUs' handles (a lost GPU then fails on its first reading). Raises :class:`GpuLost` for a GPU
        that fell off the bus before its handle was known."""
        device = self._devices.get(index)
        if device is None:
            handle = self.library.call("nvmlDeviceGetHandleByIndex", index)
            if handle is MISSING:
                return None
            device = self._devices[index] = Device(self.library, index, handle)
        return device

    def forget_devices(self) -> None:
        """Look every handle up again (nvml.h: removing a GPU renumbers the others and voids their
        handles), freeing the GPM buffers of the old ones."""
        for device in self._devices.values():
            device.close()
        self._devices.clear()

    # -- events -------------------------------------------------------------------------------------

    def xid_event_set(self, devices: Iterable[tuple[Handle, str]]) -> XidEventSet | None:
        """An event set registered for XID critical errors on every device that supports them, and for
        MIG reconfigurations on those whose driver reports them (registered apart, as DCGM does: a
        driver that refuses the MIG event must not cost the XIDs)."""
        event_set = self.library.call("nvmlEventSetCreate")
        if event_set is MISSING:
            return None
        with self._lock:
            self._event_sets[id(event_set)] = event_set
        registered: dict[Hashable, str] = {}
        for handle, uuid in devices:
            try:
                done = self.library.call("nvmlDeviceRegisterEvents", handle, XID_EVENTS, event_set)
                if done is not MISSING:
                    registered[handle_key(handle)] = uuid
                mig = self.library.call(
                    "nvmlDeviceRegisterEvents",
                    handle,
                    MIG_CONFIG_EVENTS,
                    event_set,
                    label="nvmlDeviceRegisterEvents[mig]",
                )
            except GpuLost:
                continue
            if mig is not MISSING:
                self.mig_events.watch(handle_key(handle), id(event_set))
        return XidEventSet(event_set, registered, self.generation)

    def wait_xid(self, event_set: XidEventSet, timeout_ms: int) -> XidEvent | None:
        """The next XID event, or ``None`` after ``timeout_ms`` without one; a MIG reconfiguration
        on the way is noted for the collection loop. Raises :class:`EventWaitFailed` when the wait
        itself failed (it returned at once: do not loop on it)."""
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            data = self.library.call("nvmlEventSetWait", event_set.handle, timeout_ms, empty_on=TIMED_OUT)
            if data is MISSING:
                raise EventWaitFailed("nvmlEventSetWait failed")
            if data is EMPTY:
                return None
            kind = int(data.eventType)
            if kind & MIG_CONFIG_EVENTS:
                self.mig_events.changed(handle_key(data.device))
            if kind & XID_EVENTS:
                return XidEvent(event_set.devices.get(handle_key(data.device)), int(data.eventData))
            timeout_ms = max(0, round((deadline - time.monotonic()) * 1000))

    def free_event_set(self, event_set: XidEventSet) -> None:
        """Free a set once (a set of an earlier session was freed when that session was shut down)."""
        with self._lock:
            live = self._event_sets.pop(id(event_set.handle), None) is not None
        if live:
            self.mig_events.unwatch(id(event_set.handle))
            self.library.quiet("nvmlEventSetFree", event_set.handle)
